"""Where an nnx pure dict keeps its RNNs: nnx.Sequential's layers, each cell class's params (the table's), and the
class of each cell family rnnconv writes.
"""

from __future__ import annotations

from typing import Final

from rnnconv.table.constants import FLAX_NNX_LSTM, FLAX_NNX_OPTIMIZED_LSTM, FLAX_NNX_STACKED, GRU, LSTM, RNN

FLAX_NNX_LAYERS: Final = "layers"  # nnx.Sequential's layers attribute: a dict of layers by number
FLAX_NNX_CELLS: Final[dict[str, dict[str, tuple[str, ...]]]] = {  # class -> role -> params
    "LSTMCell": FLAX_NNX_LSTM,
    "OptimizedLSTMCell": FLAX_NNX_OPTIMIZED_LSTM,
    "GRUCell": FLAX_NNX_STACKED,
    "SimpleCell": FLAX_NNX_STACKED,
}
FLAX_NNX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell", RNN: "SimpleCell"}  # what is written
KIND: Final = "flax-nnx-msgpack"  # the file kind a source records
