"""TFLite's test facts: a written .tflite in LiteRT's interpreter."""

from __future__ import annotations

import re

import numpy as np
import pytest

from . import Outputs, Runtime, Way


def litert_run(path, x, h0=None, c0=None):
    """The written file in LiteRT as a user runs it (docs/formats/tflite.md's contract): x (T, B, I) and states
    (L*D, B, n) in cuDNN's order; x resized, the state tensors h_l0, c_l0, h_l0_reverse, ... resized and set; y, h_n,
    c_n out."""
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = interpreter_module.Interpreter(model_path=str(path))
    tensors = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    (given,), (result,) = interpreter.get_input_details(), interpreter.get_output_details()
    assert (given["name"], result["name"]) == ("x", "y")
    assert list(given["shape_signature"]) == [-1, -1, x.shape[2]]
    steps, batch, _ = x.shape
    layers = sum(1 for name in tensors if re.fullmatch(r"h_l\d+", name))
    suffixes = ["", "_reverse"] if "h_l0_reverse" in tensors else [""]
    order = [(layer, suffix) for layer in range(layers) for suffix in suffixes]
    interpreter.resize_tensor_input(given["index"], [batch, steps, x.shape[2]])
    starts = {"h": h0, "c": c0}
    for state, values in starts.items():
        for layer, suffix in order:
            if values is not None:
                interpreter.resize_tensor_input(tensors[f"{state}_l{layer}{suffix}"], [batch, values.shape[2]])
    interpreter.allocate_tensors()
    for state, values in starts.items():
        for k, (layer, suffix) in enumerate(order):
            if values is not None:
                interpreter.set_tensor(
                    tensors[f"{state}_l{layer}{suffix}"], np.ascontiguousarray(values[k], np.float32)
                )
    interpreter.set_tensor(given["index"], np.ascontiguousarray(x.transpose(1, 0, 2), np.float32))
    interpreter.invoke()
    y = interpreter.get_tensor(result["index"]).transpose(1, 0, 2)
    finals = {
        state: np.stack([interpreter.get_tensor(tensors[f"{state}_l{layer}{suffix}"]) for layer, suffix in order])
        for state, values in starts.items()
        if values is not None
    }
    return y, finals["h"], finals.get("c")


def _tflite(path, spec, x, h0, c0, lengths=None) -> Outputs:
    return litert_run(path, x, h0, c0)


RUNTIME = Runtime((".tflite",), 2e-5, (Way("LiteRT", _tflite),))

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
SEEDS = [
    "tflite/rnn_tanh.tflite",
    "tflite/keras_lstm_converter.tflite",
    "tflite/keras_lstm_dynamic_range.tflite",
    "tflite/keras_bilstm_converter.tflite",
    "tflite/loop_k3_lstm2.tflite",
    "tflite/loop_k3_bigru2.tflite",
    "tflite/loop_k3_rnn.tflite",
    "tflite/loop_tfk_gru.tflite",
    "tflite/loop_tfk_birnn.tflite",
    "tflite/loop_k3_lstm_batch1.tflite",  # a body computing its fixed batch of 1 only
    "tflite/loop_k3_lstm_per_gate.tflite",  # Keras' implementation=1: a product per gate of x and of h
    "tf2onnx/basic_lstm.tflite",  # TF1's BasicLSTMCell: one product of [x, h], forget_bias added
]
