"""Equinox: what rnnconv writes is what eqx.tree_serialise_leaves writes for the cell, loads with
eqx.tree_deserialise_leaves and computes what PyTorch and Keras compute; cells Equinox made convert to what PyTorch
runs the same; round trips are exact; what one cell cannot hold and damaged files are refused in a sentence."""

from __future__ import annotations

import numpy as np
import pytest

eqx = pytest.importorskip("equinox")
jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

from conftest import LARGEST_ERRORS, assert_clean_failure, run_cli
from facts.equinox import step_through
from test_flax import IN, H, inputs, torch_module, worst
from test_torch import torch_run

import rnnconv
from rnnconv.core.canonical import RNNSpec

CELLS = {"lstm": eqx.nn.LSTMCell, "gru": eqx.nn.GRUCell}


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_cells_equinox_made_convert_to_what_torch_runs_the_same(mode, tmp_path):
    cell = CELLS[mode](IN, H, key=jax.random.key(3))
    source = tmp_path / "made.eqx"
    eqx.tree_serialise_leaves(source, cell)
    out = tmp_path / "rnn.pt"
    rnnconv.convert(source, out)
    module = torch_module(mode, 1, False, seed=0)
    module.load_state_dict(torch.load(out, weights_only=True))
    x, h0, c0 = inputs(1, False)
    spec = RNNSpec(mode, IN, H)
    lstm = mode == "lstm"
    y, final = step_through(cell, x.numpy(), h0.numpy()[0], c0.numpy()[0] if lstm else None)
    got = {
        "y": y,
        "h_n": np.asarray(final[0] if lstm else final)[None],
        "c_n": np.asarray(final[1])[None] if lstm else None,
    }
    error = worst(got, torch_run(module, spec, x, h0, c0))
    LARGEST_ERRORS[f"torch from equinox {mode}"] = error
    assert error < 2e-6
    back, again = tmp_path / "b.bin", tmp_path / "again.eqx"
    rnnconv.convert(source, back)
    rnnconv.convert(back, again)
    assert again.read_bytes() == source.read_bytes()  # round trip exact
    assert rnnconv.inspect(source).rnns[0].layer_class == CELLS[mode].__name__


REFUSED = {
    ("lstm", 2, False): "no multi-layer or bidirectional RNN",
    ("gru", 1, True): "no multi-layer or bidirectional RNN",
    ("rnn_tanh", 1, False): "Equinox has no simple RNN (it has LSTMCell and GRUCell)",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_one_cell_cannot_hold_is_refused(case, tmp_path):
    source = tmp_path / "rnn.pt"
    torch.save(torch_module(*case, seed=1).state_dict(), source)
    assert_clean_failure(run_cli("convert", source, tmp_path / "x.eqx"), 2, REFUSED[case])
    assert not (tmp_path / "x.eqx").exists()


def npy(values, descr: str | None = None) -> bytes:
    import io

    out = io.BytesIO()
    np.save(out, values)
    data = out.getvalue()
    return data.replace(b"'<f4'", descr.encode()) if descr else data


HOSTILE = {
    "pickled leaf": lambda: npy(np.array([object()], dtype=object)),
    "truncated": lambda: npy(np.zeros((12, 3), np.float32))[:-5],
    "three leaves of a GRU": lambda: b"".join(npy(np.zeros(s, np.float32)) for s in ((12, 3), (12, 4), (12,))),
    "two cells": lambda: 2 * b"".join(npy(np.zeros(s, np.float32)) for s in ((16, 3), (16, 4), (16,))),
    "header not a literal": lambda: npy(np.zeros(3, np.float32)).replace(b"'descr'", b"__import__"[:7], 1),
    "big-endian": lambda: npy(np.zeros((12, 3), np.float32), "'>f4'"),
}


@pytest.mark.parametrize("damage", sorted(HOSTILE))
def test_damaged_files_get_one_sentence(damage, tmp_path):
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(HOSTILE[damage]())
    assert_clean_failure(run_cli("convert", bad, tmp_path / "out.bin"), 2)


@pytest.mark.slow
def test_verify_runs_a_written_cell_and_catches_two_gates_swapped(tmp_path):
    source, out = tmp_path / "rnn.pt", tmp_path / "cell.eqx"
    torch.save(torch_module("gru", 1, False, seed=8).state_dict(), source)
    rnnconv.convert(source, out)
    result = run_cli("verify", out, "--ragged")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: cell.eqx computes what rnn.pt computes" in " ".join(result.stdout.split())
    cell = eqx.tree_deserialise_leaves(out, eqx.nn.GRUCell(IN, H, key=jax.random.key(0)))
    swapped = np.concatenate([np.arange(H, 2 * H), np.arange(H), np.arange(2 * H, 3 * H)])  # r and z
    cell = eqx.tree_at(lambda c: (c.weight_ih, c.weight_hh, c.bias), cell,
                       (cell.weight_ih[swapped], cell.weight_hh[swapped], cell.bias[swapped]))  # fmt: skip
    eqx.tree_serialise_leaves(out, cell)
    result = run_cli("verify", out, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"verdict": "mismatch"' in result.stdout
