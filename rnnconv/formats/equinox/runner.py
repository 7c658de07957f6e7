"""A file loaded by eqx.tree_deserialise_leaves into its cell and stepped in JAX on the CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BackendMissing
from rnnconv.formats import _jax
from rnnconv.formats.equinox.reader import EquinoxCell
from rnnconv.table.constants import LSTM


def require_equinox() -> tuple[Any, Any]:
    jax = _jax.require_jax("equinox")
    try:
        import equinox as eqx
    except ImportError:
        raise BackendMissing(
            "running Equinox needs equinox, which is not installed (pip install 'rnnconv[equinox]')"
        ) from None
    return jax, eqx


def run_file(path: Path, cell: EquinoxCell, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]) -> Any:
    """y, h_n, c_n of the file's cell, loaded by eqx.tree_deserialise_leaves and stepped by jax.lax.scan over the
    sequence, vmapped over the batch (float32, CPU); a sequence past its length keeps its state."""
    jax, eqx = require_equinox()
    import jax.numpy as jnp

    x, h0, c0, lengths = _jax.sequence_inputs(spec, inputs)
    lstm = spec.mode == LSTM
    with jax.default_device(jax.devices("cpu")[0]):
        like = getattr(eqx.nn, cell.name)(spec.input_size, spec.hidden_size, use_bias=spec.bias, key=jax.random.key(0))
        loaded = eqx.tree_deserialise_leaves(path, like)
        loaded = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), loaded)
        final, y = compiled_scan(lstm)(loaded, x, (h0[0], c0[0]) if lstm else h0[0], lengths)
    h_n = np.asarray(final[0] if lstm else final)[None]
    c_n = np.asarray(final[1])[None] if lstm else None
    return {"y": np.asarray(y), "h_n": h_n, "c_n": c_n}


@functools.cache
def compiled_scan(lstm: bool) -> Callable[..., Any]:
    """The cell stepped over the sequence under `eqx.filter_jit`: traced and compiled once per cell and shape, not
    again for every run."""
    jax, eqx = require_equinox()
    import jax.numpy as jnp

    @eqx.filter_jit
    def scan(loaded: Any, x: Any, state: Any, lengths: Any) -> Any:
        def step(state: Any, inputs_t: Any) -> Any:
            x_t, t = inputs_t
            new = jax.vmap(loaded)(x_t, state)
            live = (t < lengths)[:, None]
            kept = jax.tree_util.tree_map(lambda n, o: jnp.where(live, n, o), new, state)
            out = (kept[0] if lstm else kept) * live
            return kept, out

        return jax.lax.scan(step, state, (x, jnp.arange(x.shape[0])))

    return scan
