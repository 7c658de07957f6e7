"""Whole models as PyTorch users keep them (fixtures by torch 2.13.0: fixtures/make_torch_kept_fixtures.py), read
inertly: TorchScript archives of torch.jit.script and torch.jit.trace, and torch.save(model) with its class absent.
Each RNN, found by its class and named by its module path, converts and computes what PyTorch computes; verify runs
a TorchScript archive in torch.jit.load and a pickled model's RNN in the numpy reference; a file whose settings
contradict its tensors is refused."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core import reference
from rnnconv.formats.cudnn.reader import open_bin

KEPT = FIXTURES / "torch_kept"
# The modules of the fixture script's Seq2Seq, as torch.nn builds them (batch_first: the encoder's).
SEQ2SEQ = {
    "encoder.rnn": lambda: torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3, batch_first=True),
    "decoder.rnn": lambda: torch.nn.RNN(6, 5, nonlinearity="relu"),
}


def seq2seq_outputs(layer: str, x, h0, c0) -> list[np.ndarray]:
    """What torch.nn computes with the archive's weights (read by torch.jit.load), sequence-major."""
    module = SEQ2SEQ[layer]()
    loaded = torch.jit.load(KEPT / "seq2seq_script.pt").state_dict()
    module.load_state_dict({k[len(layer) + 1 :]: v for k, v in loaded.items() if k.startswith(layer + ".")})
    lstm = c0 is not None
    given = torch.from_numpy(x).transpose(0, 1) if module.batch_first else torch.from_numpy(x)
    with torch.no_grad():
        y, states = module(given, (torch.from_numpy(h0), torch.from_numpy(c0)) if lstm else torch.from_numpy(h0))
    y = y.transpose(0, 1) if module.batch_first else y
    return [y.numpy(), *(t.numpy() for t in (states if lstm else (states,)))]


CASES = [
    ("seq2seq_script.pt", "encoder.rnn"),
    ("seq2seq_script.pt", "decoder.rnn"),
    ("seq2seq_trace.pt", "encoder.rnn"),
    ("seq2seq_trace.pt", "decoder.rnn"),
    ("kept_module.pt", "rnn"),
    ("kept_module.pt", "tagger.lstm"),
]


@pytest.mark.parametrize(("name", "layer"), CASES)
def test_each_rnn_of_a_kept_model_computes_what_pytorch_computes(name, layer, tmp_path):
    out = tmp_path / "rnn.bin"
    rnnconv.convert(KEPT / name, out, layer=layer)
    spec = open_bin(out).spec
    lstm = spec.mode == "lstm"
    if name == "kept_module.pt":  # what PyTorch computed when it saved the model
        with np.load(KEPT / "kept_module_outputs.npz") as saved:
            x, h0, c0 = (saved.get(f"{layer}/{k}") for k in ("x", "h0", "c0"))
            expected = [saved[f"{layer}/{k}"] for k in ("y", "h_n", "c_n") if f"{layer}/{k}" in saved]
    else:
        rng = np.random.default_rng(46)
        pseudo = spec.num_layers * spec.num_directions
        x = rng.normal(0, 0.8, (5, 3, spec.input_size)).astype(np.float32)
        h0 = rng.normal(0, 0.5, (pseudo, 3, spec.output_size)).astype(np.float32)
        c0 = rng.normal(0, 0.5, (pseudo, 3, spec.hidden_size)).astype(np.float32) if lstm else None
        expected = seq2seq_outputs(layer, x, h0, c0)
    got = [g for g in reference.forward(spec, open_bin(out).param, x, h0, c0) if g is not None]
    worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected, strict=True))
    LARGEST_ERRORS[f"torch kept {name} {layer}"] = worst
    assert worst < 1e-5, worst
    assert spec.mode == ("lstm" if "lstm" in layer or "encoder" in layer else "rnn_relu")


def test_inspect_and_verify_tell_each_kind_and_how_it_ran(tmp_path):
    runs = {
        "seq2seq_script.pt": ("torch-script", "compiled forward"),
        "seq2seq_trace.pt": ("torch-script", "torch.lstm, the call of its traced graph"),
        "kept_module.pt": ("torch-module", "numpy reference"),
    }
    for name, (kind, ran) in runs.items():
        report = rnnconv.inspect(KEPT / name)
        assert report.format == kind
        assert all(entry.converts for entry in report.rnns)
        layer = "tagger.lstm" if name == "kept_module.pt" else "encoder.rnn"
        assert [e.name for e in report.rnns] == (["rnn", layer] if name == "kept_module.pt" else [layer, "decoder.rnn"])
        blob = tmp_path / f"{name}.bin"
        assert run_cli("convert", KEPT / name, blob, "--layer", layer).returncode == 0
        result = run_cli("verify", blob, "--json", "--ragged")
        assert result.returncode == 0, result.stderr
        verdict = json.loads(result.stdout)
        assert verdict["verdict"] == "match", verdict
        assert verdict["source"]["format"] == kind and ran in verdict["source"]["run"], verdict["source"]
    assert_clean_failure(
        run_cli("convert", tmp_path / "kept_module.pt.bin", tmp_path / "x.pt", "--into", KEPT / "seq2seq_script.pt"),
        2,
        "TorchScript archive",
        "load_state_dict",
    )


def _rewritten(source: Path, target: Path, change) -> Path:
    with zipfile.ZipFile(source) as src:
        members = [(info, change(info.filename, src.read(info))) for info in src.infolist()]
    with zipfile.ZipFile(target, "w") as dst:
        for info, data in members:
            dst.writestr(info, data)
    return target


def test_settings_that_contradict_the_tensors_are_refused(tmp_path):
    def code(name: str, data: bytes) -> bytes:
        return data.replace(b"hidden_size : Final[int] = 6", b"hidden_size : Final[int] = 7")

    def relu_to_lstm(name: str, data: bytes) -> bytes:  # the traced call: an LSTM's, beside an nn.RNN's weights
        return data.replace(b"torch.rnn_relu(", b"torch.lstm(") if name.endswith(".py") else data

    def lstm_to_gru(name: str, data: bytes) -> bytes:
        return data.replace(b"\nLSTM\n", b"\nGRU\n") if name.endswith("data.pkl") else data

    cases = [
        (KEPT / "seq2seq_script.pt", code, "encoder.rnn", "whose hidden_size is 7 by its TorchScript code's Final"),
        (KEPT / "seq2seq_trace.pt", relu_to_lstm, "decoder.rnn", "whose mode is 'LSTM' by its TorchScript code's call"),
        (KEPT / "kept_module.pt", lstm_to_gru, "tagger.lstm", "is a torch.nn.GRU by its class, but its tensors are"),
    ]
    for source, change, layer, phrase in cases:
        damaged = _rewritten(source, tmp_path / source.name, change)
        assert_clean_failure(run_cli("convert", damaged, tmp_path / "out.bin", "--layer", layer), 2, phrase)
    assert_clean_failure(
        run_cli("convert", KEPT / "kept_module.pt", tmp_path / "out.bin", "--layer", "rnn", "--nonlinearity", "tanh"),
        2,
        "with nonlinearity relu by its attributes, not tanh",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(s.name for s, *_ in cases)
