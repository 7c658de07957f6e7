"""flax.nnx's test facts: a written .nnx.msgpack loaded into the documented module (its modules are with Flax linen's),
and rnnconv's runner from given states."""

from __future__ import annotations

from . import Runtime, engine_way
from .flax import flax_documented

RUNTIME = Runtime(
    (".nnx.msgpack", ".nnx.msgpack.rnnconv.json"), 2e-6, (engine_way("flax-nnx"),), flax_documented("flax-nnx")
)
