"""Where an nnx pure dict keeps its RNNs: nnx.Sequential's layers, each cell class's params (the table's), and the
class of each cell family rnnconv writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rnnconv.formats.flax_nnx import PLUGIN
from rnnconv.table.constants import FLAX_NNX_LSTM, FLAX_NNX_OPTIMIZED_LSTM, FLAX_NNX_STACKED, GRU, LSTM, RNN

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

FLAX_NNX_LAYERS: Final = "layers"  # nnx.Sequential's layers attribute: a dict of layers by number
FLAX_NNX_CELLS: Final[dict[str, dict[str, tuple[str, ...]]]] = {  # class -> role -> params
    "LSTMCell": FLAX_NNX_LSTM,
    "OptimizedLSTMCell": FLAX_NNX_OPTIMIZED_LSTM,
    "GRUCell": FLAX_NNX_STACKED,
    "SimpleCell": FLAX_NNX_STACKED,
}
FLAX_NNX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell", RNN: "SimpleCell"}  # what is written
KIND: Final = "flax-nnx-msgpack"  # the file kind a source records
ORBAX_KIND: Final = "flax-nnx-orbax"  # the kind of an Orbax checkpoint of an nnx model's state


def sniff(probe: Probe) -> bool:
    """Any other msgpack map named as nnx's files are (after Flax linen's variables), or any other Orbax checkpoint."""
    from rnnconv.formats.flax.wire import orbax_checkpoint
    from rnnconv.formats.probe import is_msgpack_map

    return orbax_checkpoint(probe) or (
        is_msgpack_map(probe.head) and probe.path.name.endswith(PLUGIN.info.read_suffixes)
    )
