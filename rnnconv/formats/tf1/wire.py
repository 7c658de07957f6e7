"""Where a TF1 checkpoint of tf.contrib.cudnn_rnn layers keeps them: the scopes CudnnOpaqueParamsSaveable saves
each layer's canonical tensors under, the directions' names, the opaque buffer and each cell family's cell scope
(docs/LAYOUTS.md section 9; the variables each role joins are the table's, `TF1_VARIABLES`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

# Where CudnnOpaqueParamsSaveable saves each layer's weights, below the layer's variable scope.
TF1_UNIDIRECTIONAL: Final = "rnn/multi_rnn_cell/cell_{layer}"
TF1_BIDIRECTIONAL: Final = "stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{direction}"
TF1_DIRECTIONS: Final = ("fw", "bw")  # forward, backward
TF1_OPAQUE: Final = "opaque_kernel"  # the layer's cuDNN buffer itself, beside the canonical tensors
# The cell scope of each cell family's tensors (the snake-cased name of the cell class that reads them).
TF1_CELLS: Final[dict[str, str]] = {
    "lstm": "cudnn_compatible_lstm_cell",
    "gru": "cudnn_compatible_gru_cell",
    "rnn": "basic_rnn_cell",
}
KIND: Final = "tf1-checkpoint"  # the file kind a source records
# A checkpoint's files: X.index, and its data in X.data-00000-of-00001 (TF2's object-based checkpoints too).
INDEX_SUFFIX: Final = ".index"
DATA_SHARD: Final = re.compile(r"\.data-(\d{5})-of-(\d{5})$")
TABLE_MAGIC: Final = (0xDB4775248B80FB57).to_bytes(8, "little")  # kTableMagicNumber, the index's last 8 bytes
FOOTER_BYTES: Final = 48  # two block handles padded to 40 bytes, then the magic number


def checkpoint_prefix(path: Path) -> Path:
    """X for X.index, X.data-00000-of-00001 or X itself."""
    name = path.name
    if name.endswith(INDEX_SUFFIX):
        return path.with_name(name[: -len(INDEX_SUFFIX)])
    shard = DATA_SHARD.search(name)
    return path.with_name(name[: shard.start()]) if shard else path


def index_file(path: Path) -> Path:
    prefix = checkpoint_prefix(path)
    return prefix.with_name(prefix.name + INDEX_SUFFIX)


def sniff(probe: Probe) -> bool:
    """A checkpoint's index (or a data shard named by it) that ends in a table's magic number."""
    index = index_file(probe.path)
    if not (probe.path.name.endswith(INDEX_SUFFIX) or DATA_SHARD.search(probe.path.name)):
        return False
    try:
        with open(index, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() < FOOTER_BYTES:
                return False
            f.seek(-len(TABLE_MAGIC), os.SEEK_END)
            return f.read(len(TABLE_MAGIC)) == TABLE_MAGIC
    except OSError:
        return False
