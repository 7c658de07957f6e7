"""The variables tree of a canonical RNN, as the module `module_code` builds holds it, written as
flax.serialization's msgpack with where it came from beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.formats import _jax, _msgpack, writing
from rnnconv.formats.base import Written
from rnnconv.formats.flax.wire import FLAX_LINEN_CLASSES, FLAX_LINEN_LAYERS, FLAX_PARAMS
from rnnconv.table.apply import find_row
from rnnconv.table.constants import FLAX_CELL, FLAX_DIRECTIONS, FLAX_LINEN_CELLS, RNN


def variables(rnn: CanonicalRNN, dtype: str) -> dict[str, Any]:
    """The variables tree of the module `module_code` builds, holding the RNN."""
    spec = rnn.spec
    row = find_row("flax", FLAX_LINEN_CLASSES[_jax.family(spec)])
    params = FLAX_LINEN_CELLS[row.cell]
    stack = []
    for layer in range(spec.num_layers):
        cells = [
            {FLAX_CELL: _jax.split(rnn.stored(row, layer, d), params, dtype, row)} for d in range(spec.num_directions)
        ]
        stack.append(dict(zip(FLAX_DIRECTIONS, cells)) if spec.bidirectional else cells[0])
    tree = stack[0] if len(stack) == 1 else {FLAX_LINEN_LAYERS.format(layer=k): s for k, s in enumerate(stack)}
    return {FLAX_PARAMS: tree}


def module_code(spec: RNNSpec) -> str:
    """The Flax module whose variables a written file fills, as Python."""
    cell = FLAX_LINEN_CLASSES[_jax.family(spec)]
    argument = f", activation_fn=nn.{_jax.activation_of(spec)}" if _jax.family(spec) == RNN else ""
    one = f"nn.RNN(nn.{cell}({spec.hidden_size}{argument}))"
    layer = f"nn.Bidirectional({one}, {one})" if spec.bidirectional else one
    return layer if spec.num_layers == 1 else f"nn.Sequential([{', '.join([layer] * spec.num_layers)}])"


def write(rnn: CanonicalRNN, path: Path, dtype: str, force: bool) -> Written:
    data = _msgpack.dumps(variables(rnn, dtype))
    outputs = _jax.write_recorded(rnn, path, data, force)
    spec = rnn.spec
    return Written(
        outputs,
        usage=f"{_jax.ON_THE_CPU}import flax, flax.linen as nn, jax, jax.numpy as jnp\nmodel = {module_code(spec)}\n"
        f"variables = model.init(jax.random.key(0), jnp.zeros((1, 1, {spec.input_size})))\n"
        f'variables = flax.serialization.from_bytes(variables, open({writing.literal(path)}, "rb").read())   '
        f"# {dtype}\n"
        f"y = model.apply(variables, x)   # x (batch, time, {spec.input_size}), y (batch, time, "
        f"{spec.num_directions * spec.hidden_size})",
    )
