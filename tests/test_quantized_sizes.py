"""What `inspect` lists of a quantized RNN that does not convert without --dequantize: its sizes with the integer type
its weights are stored in (the file's own: int8, or uint8 where a scheme is asymmetric), not the float type it would
be read as (it said float32 or float64 of every one of these)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import rnnconv

QUANTIZED = {  # fixture: (its RNNs' stored type, input, hidden)
    "tflite/keras_lstm_dynamic_range.tflite": ("int8", 32, 33),
    "tflite/loop_k3_gru_dynamic_range.tflite": ("int8", 32, 33),
    "tflite/keras_lstm_full_integer.tflite": ("int8", 32, 33),
    "onnx/lstm_quantized.onnx": ("int8", None, None),
    "onnx/lstm_qdq_weights.onnx": ("int8", None, None),
    "onnx/lstm_qdq_per_channel.onnx": ("int8/uint8", None, None),
    "openvino_quantized/lstm_nncf.xml": ("int8", None, None),
    "openvino_quantized/gru_nncf_asym.xml": ("uint8", None, None),
    "openvino_quantized/keras_gru_loop_int8_asym.xml": ("uint8", None, None),
    "torch_quantized/lstm_qint8.pt": ("int8", None, None),
    "torch_quantized/gru_qint8_per_channel.pt": ("int8", None, None),
}


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_a_quantized_rnn_is_listed_with_the_type_its_weights_are_stored_in(name):
    if name.endswith(".onnx"):
        pytest.importorskip("onnx")
    stored, input_size, hidden = QUANTIZED[name]
    entries = rnnconv.inspect(FIXTURES / name).rnns
    assert entries
    for entry in entries:
        assert not entry.converts and entry.sizes is not None, entry.reason
        assert entry.sizes.dtype == stored, (entry.name, entry.sizes)
        if input_size is not None:
            assert (entry.sizes.input_size, entry.sizes.hidden_size) == (input_size, hidden)


def test_a_float_rnn_beside_them_is_listed_as_its_float_type():
    (entry,) = rnnconv.inspect(FIXTURES / "torch_quantized" / "lstm_float.pt").rnns
    assert entry.converts and entry.sizes is not None and entry.sizes.dtype == "float32"
