"""Where a Flax linen variables tree keeps its RNNs: the params collection, nn.Sequential's layers, and the class
of each cell family rnnconv writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rnnconv.table.constants import GRU, LSTM, RNN

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

FLAX_PARAMS: Final = "params"  # the variables collection of a linen module's trainable weights
FLAX_LINEN_LAYERS: Final = "layers_{layer}"  # nn.Sequential's layers, under params
FLAX_LINEN_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell", RNN: "SimpleCell"}
KIND: Final = "flax-msgpack"  # the file kind a source records


def sniff(probe: Probe) -> bool:
    """A msgpack map whose first key is "params" (what to_bytes writes for a linen module's variables)."""
    from rnnconv.formats.probe import is_msgpack_map

    key = FLAX_PARAMS.encode()
    return is_msgpack_map(probe.head) and probe.head[1:].startswith(bytes([0xA0 | len(key)]) + key)
