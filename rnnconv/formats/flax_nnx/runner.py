"""A file's cells loaded into flax.nnx's cells (nnx.replace_by_pure_dict) and run in JAX on the CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BackendMissing
from rnnconv.formats import _jax
from rnnconv.table.constants import FLAX_CELL, RNN


def require_nnx() -> tuple[Any, Any]:
    jax = _jax.require_jax("flax")
    try:
        from flax import nnx
    except ImportError:
        raise BackendMissing(
            "running flax.nnx needs flax, which is not installed (pip install 'rnnconv[flax]')"
        ) from None
    return jax, nnx


def run_rnn(rnn: _jax.TreeRNN, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """y, h_n, c_n of a found RNN's cells, each layer and direction an nnx.RNN of the nnx cell class it is, its
    params replaced by the file's (nnx.replace_by_pure_dict), run in JAX (float32, CPU)."""
    jax, nnx = require_nnx()
    cell_class = getattr(nnx, rnn.layer_class)
    kwargs = {"activation_fn": getattr(nnx, _jax.activation_of(spec))} if rnn.cell == RNN else {}

    def run(layer: int, direction: int, layer_input: np.ndarray, carry: Any, lengths: np.ndarray) -> Any:
        cell = cell_class(spec.layer_input_size(layer), spec.hidden_size, rngs=nnx.Rngs(0), **kwargs)
        module = nnx.RNN(cell, return_carry=True)
        params = nnx.state(module, nnx.Param)
        replace_by_pure_dict(nnx, params, {FLAX_CELL: _float32(rnn.cells[layer][direction])})
        nnx.update(module, params)
        return compiled_call(direction == 1)(module, layer_input, carry, lengths)

    return _jax.run_stack(jax, spec, inputs, run)


@functools.cache
def compiled_call(reverse: bool) -> Callable[..., Any]:
    """An nnx.RNN called on one direction's input under `nnx.jit`: compiled once per module structure and shape
    (nnx.jit keys its cache by the module's graph), not traced again for every layer, direction and run."""
    _, nnx = require_nnx()

    @nnx.jit
    def call(module: Any, layer_input: Any, carry: Any, lengths: Any) -> Any:
        return module(layer_input, initial_carry=carry, seq_lengths=lengths, reverse=reverse, keep_order=True)

    return call


def replace_by_pure_dict(nnx: Any, state: Any, pure: Any) -> None:
    """nnx.replace_by_pure_dict where flax has it (0.12 does), else the State method (flax 0.10 has only that)."""
    replace = getattr(nnx, "replace_by_pure_dict", None)
    if replace is not None:
        replace(state, pure)
    else:
        state.replace_by_pure_dict(pure)


def _float32(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _float32(v) for k, v in node.items()}
    return np.asarray(_jax.as_float(node), np.float32)
