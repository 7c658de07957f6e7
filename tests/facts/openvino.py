"""OpenVINO IR's test facts: a written IR in OpenVINO's CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

from . import Outputs, Runtime, Way


def ov_run(xml, x, h0, c0=None, lengths=None) -> dict[str, np.ndarray]:
    """The IR in OpenVINO's CPU plugin, as a user runs it: x batch-first, float32 inference, static shapes (the CPU
    plugin ignores sequence_lens when the shapes are dynamic)."""
    ov = pytest.importorskip("openvino")
    core = ov.Core()
    model = core.read_model(str(xml))
    feeds = {"x": x, "initial_h": h0, "sequence_lens": np.full(x.shape[0], x.shape[1], np.int32)}
    if lengths is not None:
        feeds["sequence_lens"] = lengths.astype(np.int32)
    if c0 is not None:
        feeds["initial_c"] = c0
    model.reshape({name: list(value.shape) for name, value in feeds.items()})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = compiled(feeds)
    return {out.get_any_name(): results[out] for out in compiled.outputs}


def _openvino(path, spec, x, h0, c0, lengths=None) -> Outputs:
    ov = pytest.importorskip("openvino")
    model = ov.Core().read_model(str(path))  # the inputs and outputs the docs name, and the source recorded
    names = [i.get_any_name() for i in model.inputs], [o.get_any_name() for o in model.outputs]
    lstm = spec.mode == "lstm"
    states = ["initial_h", "initial_c"] if lstm else ["initial_h"]
    assert names == (["x", *states, "sequence_lens"], ["y", "h_n", "c_n"][: 2 + lstm])
    assert '"format":' in model.get_rt_info(["rnnconv.source"]).astype(str)
    got = ov_run(path, np.ascontiguousarray(x.transpose(1, 0, 2)), h0, c0, lengths)
    return got["y"].transpose(1, 0, 2), got["h_n"], got.get("c_n")


RUNTIME = Runtime((".xml", ".bin"), 1e-5, (Way("OpenVINO's CPU plugin", _openvino, True),), None, True)

# The IRs nncf quantized that the fuzz harness damages (its openvino_quantized family), each with its .bin beside it,
# and the float source it was quantized from (an IR's with its .bin).
QUANTIZED_SEEDS = {
    "openvino_quantized/lstm_nncf.xml": "openvino_quantized/lstm_nncf.pt",
    "openvino_quantized/lstm_bi_nncf.xml": "openvino_quantized/lstm_bi_nncf.pt",  # its scales shared by both directions
    "openvino_quantized/gru_nncf_asym.xml": "openvino_quantized/gru_nncf_asym.pt",
    "openvino_quantized/gru_nncf_asym_f16.xml": "openvino_quantized/gru_nncf_asym_f16.pt",
    "openvino_quantized/keras_lstm_loop_int8_sym.xml": "openvino_quantized/keras_lstm_loop_int8_sym.keras",
    "openvino_quantized/keras_gru_loop_int8_asym.xml": "openvino_quantized/keras_gru_loop_int8_asym.keras",
    "openvino_quantized/onnx_scan_lstm_ti_int8_asym.xml": "openvino_quantized/onnx_scan_lstm_ti_float.xml",
    "openvino_quantized/keras_lstm_loop_fq.xml": "openvino/keras_lstm_loop.xml",  # its body's activations rounded
}

# The IRs of Loops the fuzz harness damages (its openvino_loops family), each with the .bin beside it.
LOOP_SEEDS = [
    "openvino/keras_lstm_loop.xml",
    "openvino/keras_gru_loop.xml",
    "openvino/keras_rnn_loop.xml",
    "openvino/keras_bilstm_loop.xml",
    "openvino/keras_gru2_loop.xml",
    "openvino/tf_keras_lstm_sliced.xml",
    "openvino/tf_keras_gru_sliced.xml",
    "openvino/tf_keras_gru_reset_before_sliced.xml",  # a reset-before GRU: converted to ONNX, judged
    "openvino/tf_keras_rnn_sliced.xml",
    "openvino/tf_keras_bilstm_sliced.xml",
    "openvino/tf_keras_lstm_last_state.xml",
    "openvino/tf_keras_gru2_last_state.xml",
    "openvino/tf_keras_bilstm_last_state.xml",
    "openvino/keras_bigru_last_loop.xml",
    "openvino/onnx_scan_lstm_ti.xml",
    "openvino/onnx_scan_bilstm_ti.xml",
    # saved as ov.save_model does by default: f16 Consts Converted to f32 in the body and before it
    "openvino/keras_lstm_loop_f16.xml",
    "openvino/keras_gru_loop_f16.xml",
    "openvino/keras_rnn_loop_f16.xml",
    "openvino/onnx_scan_lstm_ti_f16.xml",
]
