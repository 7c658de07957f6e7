"""PaddlePaddle: what paddle.save wrote (fixtures/paddle, Paddle 3.3.1) converts and computes what Paddle computed
(its outputs recorded beside the fixtures); `--to paddle` writes what paddle.load + set_state_dict take, both key sets
as Paddle's module has them, and round-trips bit for bit; a .pdparams is read inertly, a payload never runs."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli
from facts import RUNTIMES
from facts.paddle import needs_paddle, run_usage

import rnnconv
from rnnconv.core import reference
from rnnconv.formats.cudnn.reader import open_bin

PADDLE = FIXTURES / "paddle"
RECORDED = np.load(PADDLE / "outputs.npz")
# fixture stem -> (--layer, --nonlinearity): the SimpleRNN's activation is not in its state_dict
FIXTURES_READ = {
    "lstm_bi2": (None, None),
    "tagger": ("gru", None),
    "lstm_proj": (None, None),
    "rnn_relu": (None, "relu"),
}


def recorded(stem: str) -> tuple[np.ndarray, ...]:
    return tuple(RECORDED.get(f"{stem}.{key}") for key in ("x", "h0", "c0", "y", "h_n", "c_n"))


def worst(got, want) -> float:
    return max(float(np.abs(np.asarray(g) - w).max()) for g, w in zip(got, want) if w is not None)


def pickled(path) -> dict:
    """A .pdparams as Python's own pickle reads it (fixtures and files rnnconv wrote: trusted here)."""
    return pickle.loads(path.read_bytes())


@pytest.mark.needs("onnx", "torch")
@pytest.mark.parametrize("stem", list(FIXTURES_READ))
def test_paddle_files_convert_and_compute_what_paddle_computed(stem, tmp_path):
    """Each fixture to a cuDNN blob (run by cuDNN's equations), to ONNX (onnxruntime) and to PyTorch (torch.nn), from
    Paddle's non-zero initial states: Paddle's own outputs within 1e-5 (ONNX has no projection: refused)."""
    layer, nonlinearity = FIXTURES_READ[stem]
    options = {"layer": layer, "nonlinearity": nonlinearity}
    x, h0, c0, *want = recorded(stem)
    blob = tmp_path / f"{stem}.bin"
    rnnconv.convert(PADDLE / f"{stem}.pdparams", blob, **options)
    opened = open_bin(blob)
    got = reference.forward(opened.spec, opened.param, x, h0, c0)
    errors = {".bin": worst(got, want)}
    for ending in (".onnx", ".pt"):
        out = tmp_path / f"{stem}{ending}"
        if ending == ".onnx" and opened.spec.proj_size:
            with pytest.raises(rnnconv.Unsupported, match="ONNX's LSTM has no projection"):
                rnnconv.convert(PADDLE / f"{stem}.pdparams", out, **options)
            continue
        rnnconv.convert(PADDLE / f"{stem}.pdparams", out, **options)
        runtime = RUNTIMES["onnx" if ending == ".onnx" else "torch"]
        errors[ending] = worst(runtime.ways[0].run(out, opened.spec, x, h0, c0), want)
    LARGEST_ERRORS[f"paddle {stem}"] = max(errors.values())
    assert max(errors.values()) <= 1e-5, errors


@pytest.mark.parametrize("stem", list(FIXTURES_READ))
def test_to_paddle_round_trips_and_loads_into_paddle(stem, tmp_path):
    """Paddle -> cuDNN -> Paddle and Paddle -> PyTorch -> Paddle give back every array of the RNN bit for bit, under
    every key Paddle's module has (its aliases where they fall on other parameters, lstm_proj's, among them); where
    Paddle is installed the written file loads into the module the usage line builds and computes Paddle's outputs."""
    layer, nonlinearity = FIXTURES_READ[stem]
    original = pickled(PADDLE / f"{stem}.pdparams")
    prefix = f"{layer}." if layer else ""
    want_keys = [k[len(prefix) :] for k, v in original.items() if k.startswith(prefix) and isinstance(v, np.ndarray)]
    for middle in ("x.bin", "x.pt"):
        rnnconv.convert(PADDLE / f"{stem}.pdparams", tmp_path / middle, layer=layer, nonlinearity=nonlinearity)
        back = tmp_path / f"{stem}.pdparams"
        result = rnnconv.convert(tmp_path / middle, back, force=True)
        written = pickled(back)
        assert [k for k, v in written.items() if isinstance(v, np.ndarray)] == want_keys, middle
        for key in want_keys:
            assert written[key].dtype == original[prefix + key].dtype, key
            assert np.array_equal(written[key], original[prefix + key]), (middle, key)
    with rnnconv.load(back) as (rnn,):
        assert rnn.origin is not None and rnn.origin.path.endswith("x.pt")
        assert rnn.spec.mode == ("rnn_relu" if stem == "rnn_relu" else rnn.spec.mode)  # recorded: no --nonlinearity
    assert result.usage.startswith("import paddle"), result.usage
    needs_paddle()
    x, h0, c0, *want = recorded(stem)
    got = RUNTIMES["paddle"].ways[0].run(back, rnn.spec, x, h0, c0)
    assert worst(got, want) <= 1e-5
    y = run_usage(result.usage, np.ascontiguousarray(x.transpose(1, 0, 2)))  # as printed, from zero states
    zero = RUNTIMES["paddle"].ways[0].run(back, rnn.spec, x, np.zeros_like(h0), None if c0 is None else 0 * c0)
    assert np.array_equal(y.transpose(1, 0, 2), zero[0])


@pytest.mark.slow  # Paddle in three child interpreters
def test_verify_runs_paddle_on_both_sides(tmp_path):
    """`verify` of a blob made from a .pdparams runs the file's RNN in Paddle (never paddle.load: its arrays as rnnconv
    read them); `verify` of a written .pdparams runs it in Paddle against its recorded source; `--backend paddle`.
    Paddle runs in a child process: TensorFlow (a Keras source's) and Paddle cannot share one."""
    needs_paddle()
    blob = tmp_path / "proj.bin"
    rnnconv.convert(PADDLE / "lstm_proj.pdparams", blob)
    result = run_cli("verify", blob, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "match" and report["source"]["run"].startswith("paddle 3."), report["source"]
    LARGEST_ERRORS["paddle verify lstm_proj"] = report["comparison"]["y"]["max_abs"]
    written = tmp_path / "relu.pdparams"
    rnnconv.convert(PADDLE / "rnn_relu.pdparams", tmp_path / "relu.pt", nonlinearity="relu")
    rnnconv.convert(tmp_path / "relu.pt", written)
    result = run_cli("verify", written, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["source"]["run"].startswith("torch")
    result = run_cli("verify", blob, "--backend", "paddle")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout and "PaddlePaddle" in result.stdout


def _reduce_payload(marker) -> bytes:
    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    state = pickled(PADDLE / "tagger.pdparams")
    state["gru.0.cell.weight_ih"] = Payload()
    return pickle.dumps(state, protocol=4)


def test_hostile_pdparams_are_refused_in_a_sentence_and_never_run(tmp_path):
    """A `__reduce__` payload in a state_dict never runs (inspect, convert and verify --against it), and the file is
    refused naming what it names; damaged files get one sentence each, exit 2, nothing written."""
    marker = tmp_path / "RAN"
    payload = tmp_path / "payload.pdparams"
    payload.write_bytes(_reduce_payload(marker))
    blob = tmp_path / "tagger.bin"
    rnnconv.convert(PADDLE / "tagger.pdparams", blob)
    out = tmp_path / "out.bin"
    commands = (["inspect", payload], ["convert", payload, out], ["verify", blob, "--against", payload])
    for command in commands:
        assert_clean_failure(run_cli(*command), 2, "io.open", "never runs anything a file names")
    assert not marker.exists() and not out.exists()
    original = (PADDLE / "lstm_bi2.pdparams").read_bytes()
    state = pickled(PADDLE / "lstm_bi2.pdparams")
    cut_aliases = {k: v for k, v in state.items() if k != "bias_hh_l1_reverse"}
    odd_type = {**state, "0.cell_fw.weight_hh": state["0.cell_fw.weight_hh"].astype(np.int32)}
    damaged = {
        "truncated.pdparams": (original[: len(original) // 2], "truncated or corrupt"),
        "aliases.pdparams": (pickle.dumps(cut_aliases, protocol=4), "no bias_hh_l1_reverse"),
        "int.pdparams": (pickle.dumps(odd_type, protocol=2), "0.cell_fw.weight_hh is int32, not floating point"),
    }
    for name, (data, phrase) in damaged.items():
        (tmp_path / name).write_bytes(data)
        assert_clean_failure(run_cli("convert", tmp_path / name, tmp_path / "out.pt"), 2, phrase)
        assert not (tmp_path / "out.pt").exists()


def test_a_nested_save_and_paddle_own_odd_keys_read(tmp_path):
    """paddle.save of {"model": state_dict, "epoch": ...} pickles each tensor as (name, array): read as the arrays
    under their prefix; a state_dict whose aliases hold other values than the cells is read as Paddle loads it (the
    cells' values), saying so."""
    state = pickled(PADDLE / "tagger.pdparams")
    names = state.pop("StructuredToParameterName@@")
    nested = {"model": {k: (names[k], v) for k, v in state.items()}, "epoch": 3}
    (tmp_path / "nested.pdparams").write_bytes(pickle.dumps(nested, protocol=4))
    with rnnconv.load(tmp_path / "nested.pdparams", layer="gru") as (rnn,):
        assert rnn.name == "model.gru" and rnn.spec.hidden_size == 7
    edited = {**state, "gru.weight_hh_l0": state["gru.weight_hh_l0"] * 2}
    (tmp_path / "edited.pdparams").write_bytes(pickle.dumps(edited, protocol=4))
    rnnconv.convert(tmp_path / "edited.pdparams", tmp_path / "a.bin", layer="gru")
    rnnconv.convert(PADDLE / "tagger.pdparams", tmp_path / "b.bin", layer="gru")
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    with rnnconv.load(tmp_path / "edited.pdparams", layer="gru") as (rnn,):
        assert any("gru.weight_hh_l0 hold other values" in note for note in rnn.notes), rnn.notes
