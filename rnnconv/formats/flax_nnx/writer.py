"""The pure dict of a canonical RNN, as nnx.state(module, nnx.Param) of the module `module_code` builds holds it,
written as flax.serialization's msgpack; what nnx cannot hold (a GRU's non-zero b_hn) refused."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.errors import Unsupported
from rnnconv.formats import _jax, _msgpack, registry
from rnnconv.formats.flax_nnx.wire import FLAX_NNX_CELLS, FLAX_NNX_CLASSES, FLAX_NNX_LAYERS
from rnnconv.formats.registry import WriteOptions, Written
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row
from rnnconv.table.constants import CUDNN_GATES, DIRECTION_WORDS, FLAX_CELL, FLAX_DIRECTIONS, GRU, RNN, Kind


def b_hn_keys(spec: RNNSpec) -> list[ParamKey]:
    """Every b_hn of a GRU (the new gate's recurrent bias, inside the reset product), which nnx's GRUCell lacks."""
    if spec.mode != GRU or not spec.bias:
        return []
    new_gate = CUDNN_GATES[GRU][-1]
    return [
        ParamKey(layer, direction, Kind.bR, new_gate)
        for layer in range(spec.num_layers)
        for direction in range(spec.num_directions)
    ]


def losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What nnx cannot hold: a projection; a GRU's non-zero b_hn (nearest: the same GRU with b_hn = 0)."""
    found = _jax.projection_losses(rnn, "flax.nnx")
    nonzero = [key for key in b_hn_keys(rnn.spec) if np.any(rnn.param(key) != 0)]
    if nonzero:
        where = ", ".join(f"layer {k.layer}" + (f" {DIRECTION_WORDS[k.direction]}" if rnn.spec.bidirectional else "")
                          for k in nonzero[:2])  # fmt: skip
        found.append(registry.Loss(
            f"flax.nnx's GRUCell has no b_hn (the hidden bias inside the reset product: its dense_h has no bias); "
            f"the source's b_hn is non-zero ({where})",
            nearest=without_b_hn,
        ))  # fmt: skip
    return found


def without_b_hn(rnn: CanonicalRNN) -> CanonicalRNN:
    """The GRU with every b_hn zero: the nearest RNN an nnx GRUCell holds."""
    loaders = dict(rnn.loaders)
    for key in b_hn_keys(rnn.spec):
        shape, dtype = rnn.spec.param_shape(key), np.float64 if rnn.spec.dtype == "float64" else np.float32
        loaders[key] = functools.partial(np.zeros, shape, dtype)
    return dataclasses.replace(rnn, loaders=loaders)


def check_holds(rnn: CanonicalRNN) -> None:
    """Refuse what nnx cannot hold (the conversion asks `losses` first: this guards the writer called alone)."""
    found = losses(rnn)
    if found:
        raise Unsupported(found[0].term)


def pure_dict(rnn: CanonicalRNN, dtype: str) -> dict[Any, Any]:
    """The pure dict of nnx.state(module, nnx.Param) for the module `module_code` builds, holding the RNN."""
    spec = rnn.spec
    check_holds(rnn)
    layer_class = FLAX_NNX_CLASSES[_jax.family(spec)]
    row = find_row("flax-nnx", layer_class)
    params = FLAX_NNX_CELLS[layer_class]
    stack: list[dict[str, Any]] = []
    for layer in range(spec.num_layers):
        cells = [
            {FLAX_CELL: _jax.split(rnn.stored(row, layer, d), params, dtype, row)} for d in range(spec.num_directions)
        ]
        pair = dict(zip(FLAX_DIRECTIONS, cells))
        stack.append({k: pair[k] for k in sorted(pair)} if spec.bidirectional else cells[0])  # nnx's order: sorted
    return stack[0] if len(stack) == 1 else {FLAX_NNX_LAYERS: dict(enumerate(stack))}


def module_code(spec: RNNSpec) -> str:
    cell = FLAX_NNX_CLASSES[_jax.family(spec)]
    argument = f", activation_fn=nnx.{_jax.activation_of(spec)}" if _jax.family(spec) == RNN else ""
    modules = []
    for layer in range(spec.num_layers):
        one = f"nnx.RNN(nnx.{cell}({spec.layer_input_size(layer)}, {spec.hidden_size}{argument}, rngs=rngs))"
        modules.append(f"nnx.Bidirectional({one}, {one})" if spec.bidirectional else one)
    return modules[0] if len(modules) == 1 else f"nnx.Sequential({', '.join(modules)})"


def write(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
    rnn = _jax.one_rnn(rnns, "flax.nnx")
    dtype = _jax.written_dtype(rnn, options.dtype)
    data = _msgpack.dumps(pure_dict(rnn, dtype))
    beside = _jax.sidecar(path)
    with atomic_outputs([path, beside], options.force) as (tmp, tmp_beside):
        tmp_beside.write_text(_jax.sidecar_text(rnn, path))
        tmp.write_bytes(data)
    return Written(
        [path, beside],
        usage=f"{_jax.ON_THE_CPU}import flax, flax.nnx as nnx\nrngs = nnx.Rngs(0); model = {module_code(rnn.spec)}\n"
        f"params = nnx.state(model, nnx.Param)\n"
        f"nnx.replace_by_pure_dict(params, flax.serialization.msgpack_restore(open({registry.literal(path)}, "
        f'"rb").read()))\n'
        f"nnx.update(model, params)   # {dtype}\n"
        f"y = model(x)   # x (batch, time, {rnn.spec.input_size}), y (batch, time, "
        f"{rnn.spec.num_directions * rnn.spec.hidden_size})",
    )
