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
