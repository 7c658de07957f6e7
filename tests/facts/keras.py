"""Keras' test facts: a written .keras opened by keras.models.load_model."""

from __future__ import annotations

import numpy as np
import pytest

from . import Runtime


def reset_before_keras_run(path, x: np.ndarray, h0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """y (B, T, H) and h_n (1, B, H) of the file's one GRU layer, a reset_after=False one, run by Keras 3 from h0."""
    import keras

    from rnnconv.formats.keras.runner import run_layer

    (layer,) = [layer for layer in keras.models.load_model(path).layers if layer.weights]
    assert layer.get_config()["reset_after"] is False
    run = run_layer(keras, layer, x, h0, None)
    return run["y"], run["h_n"]


def _keras_documented(path, spec, x_batch_major) -> np.ndarray:
    """keras.models.load_model opens the file, and the model predicts (from zero initial states)."""
    keras = pytest.importorskip("keras")
    return np.asarray(keras.models.load_model(path)(x_batch_major))


RUNTIME = Runtime((".keras",), 2e-5, (), _keras_documented)

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
SEEDS = [
    "keras3/mixed.h5",
    "keras3/mixed.keras",
    "keras3/mixed.weights.h5",
    "keras3/lstm.keras",
    "keras3/bf16_gru.keras",
    "tf_keras/mixed.h5",
    "tf_keras/cudnn.h5",
    "tf_keras/mixed_weights.h5",
    "tf_keras/cudnn_weights.h5",
    "tf_keras/mixed.weights.h5",
    "keras2/mixed.h5",
    "keras2/lstm_weights.h5",
    "keras2_early/bidi_lstm_2_1_6.h5",
    "keras2_early/nested_gru_2_1_6.h5",
    "keras2_early/gru_2_0_8.h5",
    "keras2_early/bidi_lstm_2_1_6_weights.h5",
]
# SavedModel directories and TF2 checkpoints' prefixes, damaged by the fuzz harness's savedmodel family.
SAVED_SEEDS = [
    "savedmodel/tfk_lstm_state",
    "savedmodel/tfk_bigru",
    "savedmodel/k3_export",
    "savedmodel/k3_export_activations",
    "savedmodel/tfk_ckpt/ckpt-1",
    "savedmodel/k3_ckpt/ckpt",
]
# What each of those computes in fixtures/savedmodel/oracle.npz (TensorFlow's outputs): per RNN, the oracle entry it
# takes as input, its initial states' entries, the indices of its outputs (y, h[, c]), and how its output is merged
# ("sum": a Bidirectional's merge_mode) or ordered ("reversed": go_backwards).
SAVED_RUNS: dict[str, dict[str, tuple[str, tuple[str, ...], tuple[int, ...], str | None]]] = {
    "tfk_lstm_state": {
        "encoder": ("in/x", ("in/h0", "in/c0"), (0, 1, 2), None),
        "relu_rnn": ("out/0", (), (3, 4), None),
    },
    "tfk_bigru": {"bidi": ("in/x", (), (0,), "sum"), "backwards": ("out/0", (), (1,), "reversed")},
    "k3_export": {"gru": ("in/x", (), (0,), None), "lstm": ("out/0", (), (1,), None)},
    "k3_ckpt": {"bidi_lstm": ("in/x", (), (0,), None)},
    "k3_export_activations": {"bidi_relu": ("in/x", (), (0,), None)},  # its GRU (hard_sigmoid) is refused
}
SAVED_RUNS["tfk_ckpt"] = SAVED_RUNS["tfk_lstm_state"]
# The activations of the RNNs whose file keeps no config (what the fixture script built them with).
SAVED_ACTIVATIONS = {"relu_rnn": {"activation": "relu"}}


def saved_run(name: str, spec, param, values: dict[str, np.ndarray], seed: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(what the converted RNN `name` (its spec, its param(key)) computes, what TensorFlow computed) for each of its
    outputs, given the oracle's values (or TensorFlow's run of a damaged copy, keyed alike)."""
    from rnnconv.core import reference

    given, states, outputs, merge = SAVED_RUNS[seed][name]
    x = values[given].transpose(1, 0, 2)  # batch-major in Keras, sequence-major in cuDNN
    if merge == "reversed":  # go_backwards: Keras runs the sequence reversed
        x = x[::-1]
    h0, c0 = ([values[name][None] for name in states] + [None, None])[:2]
    y, h_n, c_n = reference.forward(spec, param, x, h0, c0)
    if merge == "sum":
        y = y[..., : spec.hidden_size] + y[..., spec.hidden_size :]
    got = [y.transpose(1, 0, 2), h_n[0], None if c_n is None else c_n[0]]
    return [(g, values[f"out/{k}"]) for g, k in zip(got, outputs)]
