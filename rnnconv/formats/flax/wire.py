"""Where a Flax linen variables tree keeps its RNNs: the params collection, nn.Sequential's layers, and the class
of each cell family rnnconv writes.
"""

from __future__ import annotations

from typing import Final

from rnnconv.table.constants import GRU, LSTM, RNN

FLAX_PARAMS: Final = "params"  # the variables collection of a linen module's trainable weights
FLAX_LINEN_LAYERS: Final = "layers_{layer}"  # nn.Sequential's layers, under params
FLAX_LINEN_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell", RNN: "SimpleCell"}
KIND: Final = "flax-msgpack"  # the file kind a source records
