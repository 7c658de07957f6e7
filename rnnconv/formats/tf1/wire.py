"""Where a TF1 checkpoint of tf.contrib.cudnn_rnn layers keeps them: the scopes CudnnOpaqueParamsSaveable saves
each layer's canonical tensors under, the directions' names, the opaque buffer and each cell family's cell scope
(docs/LAYOUTS.md section 9; the variables each role joins are the table's, `TF1_VARIABLES`).
"""

from __future__ import annotations

import os
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


def sniff(probe: Probe) -> bool:
    """A checkpoint's index (or a data shard named by it) that ends in a table's magic number."""
    from rnnconv.formats.tf1.tensor_bundle import DATA_SHARD, FOOTER_BYTES, INDEX_SUFFIX, TABLE_MAGIC, index_file

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
