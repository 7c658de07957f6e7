"""Where a Flax linen variables tree keeps its RNNs: the params collection, nn.Sequential's layers, and the class
of each cell family rnnconv writes; and the file that stands for an Orbax checkpoint's folder (both Flax formats').
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
ORBAX_KIND: Final = "flax-orbax"  # the kind of an Orbax checkpoint of a linen model's variables
ORBAX_METADATA: Final = "_METADATA"  # an Orbax checkpoint's tree metadata: the file its folder stands for
ORBAX_HEAD: Final = b'{"tree_metadata":'  # how Orbax writes it


def sniff(probe: Probe) -> bool:
    """A msgpack map whose first key is "params" (what to_bytes writes for a linen module's variables), or an Orbax
    checkpoint (whether its tree is a linen model's variables is the format's `claims`)."""
    from rnnconv.formats.probe import is_msgpack_map

    key = FLAX_PARAMS.encode()
    return orbax_checkpoint(probe) or (
        is_msgpack_map(probe.head) and probe.head[1:].startswith(bytes([0xA0 | len(key)]) + key)
    )


def orbax_checkpoint(probe: Probe) -> bool:
    """An Orbax checkpoint's `_METADATA` (what its folder stands for)."""
    return probe.path.name == ORBAX_METADATA and probe.head.startswith(ORBAX_HEAD)
