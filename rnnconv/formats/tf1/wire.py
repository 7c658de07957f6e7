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
# The cell scope of each layer class's tensors (the snake-cased name of the cell class that reads or writes them):
# the cuDNN layers' canonical cells, then tf.compat.v1.nn.rnn_cell's own.
TF1_CUDNN_CELLS: Final[dict[str, str]] = {
    "CudnnLSTM": "cudnn_compatible_lstm_cell",
    "CudnnGRU": "cudnn_compatible_gru_cell",
    "CudnnRNN": "basic_rnn_cell",
}
TF1_OWN_CELLS: Final[dict[str, str]] = {
    "BasicLSTMCell": "basic_lstm_cell",
    "LSTMCell": "lstm_cell",
    "GRUCell": "gru_cell",
}
TF1_CELLS: Final[dict[str, str]] = TF1_CUDNN_CELLS | TF1_OWN_CELLS
# Where a MultiRNNCell puts each layer's cell scope, below the RNN's scope.
TF1_MULTI: Final = "multi_rnn_cell/cell_{layer}"
META_SUFFIX: Final = ".meta"  # the MetaGraphDef Saver writes beside the checkpoint: X.meta
# The ops of a .meta graph that say an LSTM cell's forget_bias: the Add of a Const to the f gate, output 2 of the Split
# of [x, h] @ kernel + bias; and the ops a value passes through unchanged on its way from a variable to the cell (the
# While loop of control flow v2 hands it to its body function as an argument; v1's Enter into its frame).
META_ADDS: Final = ("Add", "AddV2")
META_CONST: Final = "Const"
META_SPLIT: Final = "Split"
META_F_OUTPUT: Final = 2  # i, j, f, o: f is the split's third output
META_WHILES: Final = ("While", "StatelessWhile")
META_WHILE_BODY: Final = "body"  # the While's attribute naming its body function
META_PASS_THROUGH: Final = ("Identity", "ReadVariableOp", "Enter", "Switch", "BiasAdd", "MatMul")
DT_FLOAT, DT_DOUBLE = 1, 2  # tensorflow/core/framework/types.proto
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


def meta_graph_of(path: Path) -> Path:
    """X.meta, the MetaGraphDef Saver writes beside the checkpoint X."""
    prefix = checkpoint_prefix(path)
    return prefix.with_name(prefix.name + META_SUFFIX)


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
