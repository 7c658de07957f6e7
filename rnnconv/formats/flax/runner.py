"""A variables tree run by Flax linen's nn.RNN cells in JAX on the CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BackendMissing
from rnnconv.formats import _jax
from rnnconv.formats.flax.wire import FLAX_LINEN_CLASSES, FLAX_LINEN_LAYERS, FLAX_PARAMS
from rnnconv.table.constants import FLAX_CELL, FLAX_DIRECTIONS, RNN


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


@functools.cache
def compiled_rnn(cell: str, hidden_size: int, activation: str | None, reverse: bool) -> Callable[..., Any]:
    """`nn.RNN(cell).apply` of one direction under `jax.jit`, one per cell class and size: Flax traces and compiles
    its scan once per input shape, not again for every layer, direction and run (0.2-0.5 s each)."""
    jax, nn = require_flax()
    kwargs = {} if activation is None else {"activation_fn": getattr(nn, activation)}
    module = nn.RNN(getattr(nn, cell)(hidden_size, **kwargs), return_carry=True)
    return jax.jit(functools.partial(module.apply, reverse=reverse, keep_order=True))


def run_variables(
    tree: Mapping[str, Any], spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]
) -> dict[str, np.ndarray | None]:
    """y, h_n, c_n of a variables tree as `module_code` lays it out, each layer and direction an `nn.RNN` of the
    Flax cell applied to its params (float32, CPU): the backward direction as nn.Bidirectional runs it
    (reverse=True, keep_order=True), ragged sequences through nn.RNN's seq_lengths."""
    jax, _ = require_flax()
    cell = FLAX_LINEN_CLASSES[_jax.family(spec)]
    activation = _jax.activation_of(spec) if _jax.family(spec) == RNN else None
    params = tree[FLAX_PARAMS]

    def run(layer: int, direction: int, layer_input: np.ndarray, carry: Any, lengths: np.ndarray) -> Any:
        stack = params if spec.num_layers == 1 else params[FLAX_LINEN_LAYERS.format(layer=layer)]
        rnn = stack[FLAX_DIRECTIONS[direction]] if spec.bidirectional else stack
        weights = jax.tree_util.tree_map(lambda a: np.asarray(_jax.as_float(a), np.float32), rnn[FLAX_CELL])
        apply = compiled_rnn(cell, spec.hidden_size, activation, direction == 1)
        return apply({FLAX_PARAMS: {FLAX_CELL: weights}}, layer_input, initial_carry=carry, seq_lengths=lengths)

    return _jax.run_stack(jax, spec, inputs, run)


def run_rnn(rnn: _jax.TreeRNN, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """A found RNN's cells, laid out as `module_code` lays them out, run by Flax's nn.RNN."""
    return run_variables(laid_out(rnn), spec, inputs)
