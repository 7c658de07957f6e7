"""`.keras` archives of Bidirectional RNNs written by tf.keras 2.15 (which Keras 3.15 refuses to load) and Keras 3.0
(which Keras 3.0 itself refused to load): rnnconv reads both, and each RNN it converts computes what the Keras that
wrote the file computed (fixtures/make_keras_rescue_fixtures.py recorded it)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS

import rnnconv
from rnnconv.core import reference
from rnnconv.formats.cudnn.reader import open_bin

RESCUE = FIXTURES / "keras_rescue"


@pytest.mark.parametrize("name", ["tfkeras215_bidi", "keras30_bidi"])
def test_each_bidirectional_rnn_converts_as_the_keras_that_wrote_it_computed(name, tmp_path):
    source = RESCUE / f"{name}.keras"
    report = rnnconv.inspect(source)
    assert [(r.name, r.layer_class, r.converts) for r in report.rnns] == [
        ("bidi_lstm", "Bidirectional(LSTM)", True),
        ("bidi_gru", "Bidirectional(GRU)", True),
    ]
    recorded = np.load(RESCUE / f"{name}.npz")
    layer_input = recorded["x"].transpose(1, 0, 2)  # Keras' batch-major input, cuDNN's sequence-major
    for layer, units in (("bidi_lstm", 4), ("bidi_gru", 3)):
        rnnconv.convert(source, tmp_path / f"{layer}.bin", layer=layer)
        blob = open_bin(tmp_path / f"{layer}.bin")
        zeros = np.zeros((2, layer_input.shape[1], units), np.float32)  # Keras starts both directions at zero
        y, h_n, _ = reference.forward(
            blob.spec, blob.param, layer_input, zeros, zeros if layer == "bidi_lstm" else None
        )
        if layer == "bidi_lstm":  # return_sequences: every step, forward then backward
            got, expected = y, recorded[layer].transpose(1, 0, 2)
            layer_input = expected
        else:  # the last state of each direction, concatenated
            got, expected = np.concatenate(list(h_n), axis=-1), recorded[layer]
        worst = float(np.abs(got - expected).max())
        LARGEST_ERRORS[f"{name} {layer}"] = worst
        assert worst <= 1e-5, (name, layer, worst)
