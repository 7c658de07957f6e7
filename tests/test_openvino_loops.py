"""RNNs OpenVINO's TensorFlow frontend writes as `Loop` ops (fixtures/make_openvino_fixtures.py: `ov.convert_model` of
Keras 3 LSTM, GRU, SimpleRNN and a Bidirectional LSTM): each read by what its body computes, converted, and the result
run in PyTorch against OpenVINO's CPU plugin running the frontend's own file."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from conftest import FIXTURES, run_cli

import rnnconv

OPENVINO = FIXTURES / "openvino"
TOLERANCE = 1e-5
MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}
LOOPS = {  # fixture: (mode, input, hidden)
    "keras_lstm_loop": ("lstm", 3, 4),
    "keras_gru_loop": ("gru", 3, 5),
    "keras_rnn_loop": ("rnn_tanh", 3, 4),
}


def openvino(path, x: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(x)[0]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_frontend_loop_converts_to_what_openvino_computes(name, tmp_path):
    mode, input_size, hidden = LOOPS[name]
    source = OPENVINO / f"{name}.xml"
    (entry,) = rnnconv.inspect(source).rnns
    assert entry.converts, entry.reason
    spec = entry.spec
    assert (spec.mode, spec.input_size, spec.hidden_size, spec.num_layers, spec.bidirectional) == (
        *LOOPS[name],
        1,
        False,
    )
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr
    module = MODULES[mode](input_size, hidden, batch_first=True)
    module.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    x = np.random.default_rng(7).normal(0, 1.5, (2, 5, input_size)).astype(np.float32)
    expected = openvino(source, x)
    with torch.no_grad():
        y, _ = module(torch.from_numpy(x))
    assert y.shape == expected.shape
    assert float(np.abs(y.numpy() - expected).max()) < TOLERANCE


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_verify_runs_a_frontend_loop_against_its_conversion(name, tmp_path):
    source = OPENVINO / f"{name}.xml"
    assert run_cli("convert", source, tmp_path / "m.pt").returncode == 0
    result = run_cli("verify", tmp_path / "m.pt", "--against", source)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout
