"""Keras' test facts: a written .keras opened by keras.models.load_model."""

from __future__ import annotations

import numpy as np
import pytest

from . import Runtime


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
    "savedmodel/tfk_ckpt/ckpt-1",
    "savedmodel/k3_ckpt/ckpt",
]
