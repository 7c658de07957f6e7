"""The pure dict of a canonical RNN, as nnx.state(module, nnx.Param) of the module `module_code` builds holds it,
written as flax.serialization's msgpack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.formats import _jax, _msgpack, writing
from rnnconv.formats.base import Written
from rnnconv.formats.flax_nnx.wire import FLAX_NNX_CELLS, FLAX_NNX_CLASSES, FLAX_NNX_LAYERS
from rnnconv.table.apply import find_row
from rnnconv.table.constants import FLAX_CELL, FLAX_DIRECTIONS, RNN


def pure_dict(rnn: CanonicalRNN, dtype: str) -> dict[Any, Any]:
    """The pure dict of nnx.state(module, nnx.Param) for the module `module_code` builds, holding the RNN."""
    spec = rnn.spec
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


def write(rnn: CanonicalRNN, path: Path, dtype: str, force: bool) -> Written:
    data = _msgpack.dumps(pure_dict(rnn, dtype))
    outputs = _jax.write_recorded(rnn, path, data, force)
    return Written(
        outputs,
        usage=f"{_jax.ON_THE_CPU}import flax, flax.nnx as nnx\nrngs = nnx.Rngs(0); model = {module_code(rnn.spec)}\n"
        f"params = nnx.state(model, nnx.Param)\n"
        f"nnx.replace_by_pure_dict(params, flax.serialization.msgpack_restore(open({writing.literal(path)}, "
        f'"rb").read()))\n'
        f"nnx.update(model, params)   # {dtype}\n"
        f"y = model(x)   # x (batch, time, {rnn.spec.input_size}), y (batch, time, "
        f"{rnn.spec.num_directions * rnn.spec.hidden_size})",
    )
