"""Keras' own words beyond the variable names (the table's): the initializer arguments, the cell classes and
wrappers, the names recurrent layers have, and Bidirectional's groups and sub-layer prefixes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

# The Keras layer arguments that initialize each variable (in the same order).
KERAS_INITIALIZERS: Final = ("kernel_initializer", "recurrent_initializer", "bias_initializer")
# Keras cell classes and the layer class each computes as (RNN(cell) wraps one).
KERAS_CELLS: Final[dict[str, str]] = {"LSTMCell": "LSTM", "GRUCell": "GRU", "SimpleRNNCell": "SimpleRNN"}
KERAS_WRAPPERS: Final = ("Bidirectional", "RNN")
# Class names of recurrent layers rnnconv lists without converting them (ConvLSTM2D, PeepholeLSTMCell,
# StackedRNNCells, a custom AttentionGRU): a file that holds one never reads as holding no recurrent layer.
KERAS_RECURRENT_NAMES: Final = r"LSTM|GRU|RNN"
# Bidirectional's sub-layer groups in a Keras 3 weights file, forward first.
KERAS_DIRECTION_GROUPS: Final = ("forward_layer", "backward_layer")
KERAS_DIRECTION_PREFIXES: Final = ("forward", "backward")  # and the names of its sub-layers: forward_{name}


def sniff(probe: Probe) -> bool:
    """An HDF5 file (.h5), or a zip archive with a config.json (.keras)."""
    from rnnconv.formats.probe import HDF5_MAGIC

    if probe.head.startswith(HDF5_MAGIC):
        return True
    names = probe.zip_names
    return names is not None and "config.json" in names
