"""A variables tree run by Flax linen's nn.RNN cells in JAX on the CPU."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnconv.canonical import RNNSpec
from rnnconv.errors import BackendMissing
from rnnconv.formats import _jax
from rnnconv.formats.flax.wire import FLAX_LINEN_CLASSES, FLAX_LINEN_LAYERS, FLAX_PARAMS
from rnnconv.table.constants import FLAX_CELL, FLAX_DIRECTIONS, LSTM, RNN


def laid_out(rnn: _jax.TreeRNN) -> dict[str, Any]:
    """A found RNN's cells, as they are, in the variables tree of `module_code` (where `run_variables` takes them)."""
    stack = [dict(zip(FLAX_DIRECTIONS, ({FLAX_CELL: c} for c in cells))) if len(cells) == 2 else {FLAX_CELL: cells[0]}
             for cells in rnn.cells]  # fmt: skip
    tree = stack[0] if len(stack) == 1 else {FLAX_LINEN_LAYERS.format(layer=k): s for k, s in enumerate(stack)}
    return {FLAX_PARAMS: tree}


def require_flax() -> tuple[Any, Any]:
    jax = _jax.require_jax("flax")
    try:
        import flax.linen as nn
    except ImportError:
        raise BackendMissing("running Flax needs flax, which is not installed (pip install 'rnnconv[flax]')") from None
    return jax, nn


def run_variables(
    tree: Mapping[str, Any], spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]
) -> dict[str, np.ndarray | None]:
    """y, h_n, c_n of a variables tree as `module_code` lays it out, each layer and direction an `nn.RNN` of the
    Flax cell applied to its params (float32, CPU): the backward direction as nn.Bidirectional runs it
    (reverse=True, keep_order=True), ragged sequences through nn.RNN's seq_lengths."""
    jax, nn = require_flax()
    x, h0, c0, lengths = _jax.sequence_inputs(spec, inputs)
    cell_class = getattr(nn, FLAX_LINEN_CLASSES[_jax.family(spec)])
    kwargs = {"activation_fn": getattr(nn, _jax.activation_of(spec))} if _jax.family(spec) == RNN else {}
    module = nn.RNN(cell_class(spec.hidden_size, **kwargs), return_carry=True)
    params = tree[FLAX_PARAMS]
    h_n, c_n = np.zeros_like(h0), np.zeros_like(c0)
    layer_input = x.transpose(1, 0, 2)  # batch-major, nn.RNN's default
    with jax.default_device(jax.devices("cpu")[0]):
        for layer in range(spec.num_layers):
            stack = params if spec.num_layers == 1 else params[FLAX_LINEN_LAYERS.format(layer=layer)]
            outputs = []
            for direction in range(spec.num_directions):
                rnn = stack[FLAX_DIRECTIONS[direction]] if spec.bidirectional else stack
                cell = jax.tree_util.tree_map(lambda a: np.asarray(_jax.as_float(a), np.float32), rnn[FLAX_CELL])
                pseudo = layer * spec.num_directions + direction
                carry: Any = (c0[pseudo], h0[pseudo]) if spec.mode == LSTM else h0[pseudo]
                carry, y = module.apply(
                    {FLAX_PARAMS: {FLAX_CELL: cell}},
                    layer_input,
                    initial_carry=carry,
                    seq_lengths=lengths,
                    reverse=direction == 1,
                    keep_order=True,
                )
                if spec.mode == LSTM:
                    c_n[pseudo], h_n[pseudo] = np.asarray(carry[0]), np.asarray(carry[1])
                else:
                    h_n[pseudo] = np.asarray(carry)
                outputs.append(np.asarray(y))
            layer_input = np.concatenate(outputs, axis=-1)
    y = _jax.padded_zero(layer_input.transpose(1, 0, 2), lengths)
    return {"y": y, "h_n": h_n, "c_n": c_n if spec.mode == LSTM else None}
