"""Equinox's test facts: a written .eqx deserialised into its cell and stepped with lax.scan, and rnnconv's runner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from . import Outputs, Runtime, Way, engine_way


def step_through(cell, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None):
    """The cell over a sequence-major batch, as the Equinox docs step it (lax.scan), vmapped over the batch."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")

    def step(state, x_t):
        state = jax.vmap(cell)(x_t, state)
        return state, state[0] if c0 is not None else state

    state = (jnp.asarray(h0), jnp.asarray(c0)) if c0 is not None else jnp.asarray(h0)
    final, y = jax.lax.scan(step, state, jnp.asarray(x))
    return np.asarray(y), final


def _equinox(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """The file loaded with eqx.tree_deserialise_leaves into the cell the docs name (and written again by Equinox,
    byte for byte), stepped with lax.scan from the given states."""
    eqx = pytest.importorskip("equinox")
    jax = pytest.importorskip("jax")
    cells = {"lstm": eqx.nn.LSTMCell, "gru": eqx.nn.GRUCell}
    like = cells[spec.mode](spec.input_size, spec.hidden_size, use_bias=spec.bias, key=jax.random.key(1))
    cell = eqx.tree_deserialise_leaves(path, like)
    again = Path(path).with_name(Path(path).name + ".again")
    eqx.tree_serialise_leaves(again, cell)
    assert again.read_bytes() == Path(path).read_bytes()  # the very bytes Equinox writes for that cell
    again.unlink()
    lstm = spec.mode == "lstm"
    y, final = step_through(cell, x, h0[0], c0[0] if lstm else None)
    return y, np.asarray(final[0] if lstm else final)[None], np.asarray(final[1])[None] if lstm else None


RUNTIME = Runtime(
    (".eqx", ".eqx.rnnconv.json"),
    2e-6,
    (Way("eqx.tree_deserialise_leaves and lax.scan", _equinox), engine_way("equinox")),
)
