"""The class of each cell family in an Equinox file (its fields are the table's: `EQUINOX_FIELDS`)."""

from __future__ import annotations

from typing import Final

from rnnconv.table.constants import GRU, LSTM

EQUINOX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell"}
KIND: Final = "equinox"  # the file kind a source records
