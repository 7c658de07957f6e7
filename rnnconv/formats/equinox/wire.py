"""The class of each cell family in an Equinox file (its fields are the table's: `EQUINOX_FIELDS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rnnconv.table.constants import GRU, LSTM

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

EQUINOX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell"}
KIND: Final = "equinox"  # the file kind a source records


def sniff(probe: Probe) -> bool:
    """A `.npy` file (what eqx.tree_serialise_leaves writes)."""
    from rnnconv.formats._npy import NPY_MAGIC

    return probe.head.startswith(NPY_MAGIC)
