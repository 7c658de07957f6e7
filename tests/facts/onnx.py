"""ONNX's test facts: a written .onnx in onnxruntime and in MNN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Outputs, Runtime, Way


def ort_session(path):
    onnxruntime = pytest.importorskip("onnxruntime")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_run(path, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None) -> list[np.ndarray]:
    """A written .onnx in onnxruntime, its graph's inputs X, initial_h and (an LSTM's) initial_c fed."""
    feeds = {"X": x, "initial_h": h0} | ({"initial_c": c0} if c0 is not None else {})
    return ort_session(path).run(None, feeds)


def converted_y(source, out, x: np.ndarray) -> np.ndarray:
    """`source` converted to the .onnx `out` and run in onnxruntime on x (batch, steps, features) from a zero state:
    its output sequence, batch-major."""
    import rnnconv

    rnnconv.convert(source, out)
    h0 = np.zeros((1, x.shape[0], rnnconv.inspect(out).rnns[0].spec.hidden_size), np.float32)
    return ort_run(out, np.ascontiguousarray(x.transpose(1, 0, 2)), h0, None)[0].transpose(1, 0, 2)


def reset_before_gru_to_onnx(source, tmp_path, sizes: tuple[int, int], x: np.ndarray, expected: np.ndarray):
    """A loop file `source` read as one reset-before GRU of (input, hidden) `sizes`: refused for cuDNN naming the
    term (no file left), converted to ONNX and run on x against `expected`, its own runtime's output. Its inspect
    entry and the ONNX output's largest error."""
    import rnnconv
    from rnnconv.errors import Unsupported

    (entry,) = rnnconv.inspect(source).rnns
    assert entry.converts, entry.reason
    spec = entry.spec
    assert (spec.mode, spec.input_size, spec.hidden_size, spec.reset_after) == ("gru", *sizes, False)
    with pytest.raises(Unsupported, match="reset gate applied before the recurrent product"):
        rnnconv.convert(source, tmp_path / "m.bin", to="cudnn")
    assert not (tmp_path / "m.bin").exists()
    return entry, float(np.abs(converted_y(source, tmp_path / "m.onnx", x) - expected).max())


def _onnx(path, spec, x, h0, c0, lengths=None) -> Outputs:
    y, h_n, *c_n = ort_run(path, x, h0, c0)
    return y, h_n, c_n[0] if c_n else None


def _mnn(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """A written .onnx converted by MNN's own converter and run by its CPU runtime (pip `mnn`), fed as onnxruntime."""
    from rnnconv.formats.onnx.mnn import mnn_version, run_in_mnn

    if mnn_version() is None:
        pytest.skip("mnn is not installed")
    names = ["Y", "Y_h", "Y_c"][: 2 + (c0 is not None)]
    feeds = {"X": x, "initial_h": h0} | ({"initial_c": c0} if c0 is not None else {})
    got = run_in_mnn(Path(path).read_bytes(), feeds, names)
    return got["Y"], got["Y_h"], got.get("Y_c")


def _mnn_cannot(spec: RNNSpec) -> str | None:
    """MNN computes tanh for ONNX's RNN op whatever its activations (--profile mnn names it; test_onnx_consumers)."""
    return "MNN computes tanh for an RNN with Relu" if spec.mode == "rnn_relu" else None


RUNTIME = Runtime((".onnx",), 1e-5, (Way("onnxruntime", _onnx), Way("MNN", _mnn, cannot=_mnn_cannot)))

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
SEEDS = [
    "onnx/tagger_lstm_torchscript.onnx",
    "onnx/gru3_dynamo.onnx",
    "onnx/lstm_bi_dynamo.onnx",
    "onnx/rnn_relu_torchscript.onnx",
    "onnx/lstm_external.onnx",
    "onnx/hand_made.onnx",
    "onnx/lstm_cell_in_if_torchscript.onnx",
    "onnx/lstm_quantized.onnx",
    "onnx/lstm_quantized_per_channel.onnx",
    "onnx/lstm_qdq.onnx",  # onnxruntime QDQ: weights and activations quantized
    "onnx/lstm_qdq_per_channel.onnx",  # QDQ weights alone, per channel
    "onnx/rnn_unrolled_dynamo.onnx",
    "onnx/rnn_stack_dynamo.onnx",
    "onnx/cells_dynamo.onnx",
    "onnx/cells_gates_swapped.onnx",
    "onnx/lstm_cell_loop2_dynamo.onnx",
    "onnx/gru_cell_loop1_dynamo.onnx",
    "tf2onnx/lstm_states.onnx",  # tf2onnx's glue: Transposes, an empty sequence_lens, states from Shape/Expand
    "tf2onnx/lstm2.onnx",
    "tf2onnx/gru_reset_before.onnx",  # a while loop as an ONNX Loop of three products: a reset-before GRU
    "tf2onnx/simple_rnn.onnx",  # while loops as ONNX Loops: read by what their bodies compute
    "tf2onnx/simple_rnn2.onnx",
    "tf2onnx/simple_rnn_bi.onnx",
    "tf2onnx/simple_rnn_last.onnx",
    "tf2onnx/simple_rnn_states.onnx",  # a Loop started from the model's input h0
    "tf2onnx/basic_lstm.onnx",  # TF1's BasicLSTMCell: one product of [x, h], forget_bias added
    "onnx/lstm_cell_loop_zeros_dynamo.onnx",  # the dynamo exporter's cell steps from zero states (step 0 folded)
]
