"""The gate-layout table: every gate order, tensor name, cuDNN code and layout rule, as data.

`constants` holds the enumerations (gate letters, role names, cuDNN enum values,
element-type codes), `rows` the per-format rows built from them, and `apply` the
mechanics that turn a row into loaders and back. Nothing else in rnnconv writes
a gate order, a tensor name or a code: it reads them from here. What only one
format's files need (its op codes, attribute names, the names of a written
graph's tensors) is that format's own, in `rnnconv/formats/<name>/wire.py`.
"""
