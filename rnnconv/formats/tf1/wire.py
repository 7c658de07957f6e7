"""Where a TF1 checkpoint of tf.contrib.cudnn_rnn layers keeps them: the scopes CudnnOpaqueParamsSaveable saves
each layer's canonical tensors under, the directions' names, the opaque buffer and each cell family's cell scope
(docs/LAYOUTS.md section 9; the variables each role joins are the table's, `TF1_VARIABLES`).
"""

from __future__ import annotations

from typing import Final

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
