"""TFLite's own words, from its schema (tensorflow/compiler/mlir/lite/schema/schema.fbs): the file identifier,
BuiltinOperator and BuiltinOptions codes, the options' slots, activation and tensor-type codes, each fused op's
inputs in order, and the names a written model gives its tensors (docs/LAYOUTS.md section 13). Every code and slot
here and in the builder is held against the schema's generated classes that LiteRT ships (tests/test_tflite_schema.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from rnnconv.table.constants import (
    CUDNN_GATES,
    LSTM,
    RNN,
    STATES,
    TFLITE_GATE_WORDS,
    TFLITE_PEEPHOLE_GATES,
    TFLITE_RNN_WEIGHTS,
)

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

TFLITE_IDENTIFIER: Final = b"TFL3"  # the flatbuffer's file identifier, bytes 4..8
TFLITE_SCHEMA_VERSION: Final = 3
# BuiltinOperator codes: the ops rnnconv reads, writes or names.
TFLITE_OPS: Final[dict[str, int]] = {
    "ADD": 0,
    "CONCATENATION": 2,
    "DEQUANTIZE": 6,
    "FULLY_CONNECTED": 9,
    "LOGISTIC": 14,
    "MUL": 18,
    "RELU": 19,
    "RELU_N1_TO_1": 20,
    "RELU6": 21,
    "RESHAPE": 22,
    "TANH": 28,
    "CUSTOM": 32,
    "UNIDIRECTIONAL_SEQUENCE_RNN": 35,
    "GATHER": 36,
    "TRANSPOSE": 39,
    "SUB": 41,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 44,
    "STRIDED_SLICE": 45,
    "BIDIRECTIONAL_SEQUENCE_RNN": 46,
    "SPLIT": 49,
    "BIDIRECTIONAL_SEQUENCE_LSTM": 52,
    "LESS": 58,
    "NEG": 59,
    "GREATER": 61,
    "GREATER_EQUAL": 62,
    "LESS_EQUAL": 63,
    "SLICE": 65,
    "PACK": 83,
    "LOGICAL_AND": 86,
    "UNPACK": 88,
    "SPLIT_V": 102,
    "REVERSE_V2": 105,
    "QUANTIZE": 114,
    "WHILE": 119,
}
# The fused op of each cell family (TFLite has no fused GRU).
TFLITE_CELL_OPS: Final[dict[str, str]] = {"lstm": "UNIDIRECTIONAL_SEQUENCE_LSTM", "rnn": "UNIDIRECTIONAL_SEQUENCE_RNN"}
# BuiltinOptions union codes of the options rnnconv writes and reads.
TFLITE_OPTIONS: Final[dict[str, int]] = {
    "FULLY_CONNECTED": 8,
    "CONCATENATION": 10,
    "ADD": 11,
    "MUL": 21,
    "SUB": 28,
    "SPLIT": 35,
    "SPLIT_V": 79,
    "GATHER": 23,
    "STRIDED_SLICE": 32,
    "RESHAPE": 17,
    "PACK": 59,
    "UNPACK": 64,
    "UNIDIRECTIONAL_SEQUENCE_RNN": 31,  # SequenceRNNOptions
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 71,  # UnidirectionalSequenceLSTMOptions
    "BIDIRECTIONAL_SEQUENCE_LSTM": 69,  # BidirectionalSequenceLSTMOptions
    "REVERSE_V2": 81,
}
# ActivationFunctionType codes, by the activation's name in the table's rows.
TFLITE_ACTIVATIONS: Final[dict[str, int]] = {
    "linear": 0,
    "relu": 1,
    "relu_n1_to_1": 2,
    "relu6": 3,
    "tanh": 4,
    "sign_bit": 5,
}
# TensorType codes of the element types rnnconv reads (float weights; quantized weights, with --dequantize; a loop's
# counters, indices and conditions) and writes (int32 for REVERSE_V2's axis).
TFLITE_TENSOR_TYPES: Final[dict[str, int]] = {
    "float32": 0,
    "float16": 1,
    "int32": 2,
    "uint8": 3,
    "int64": 4,
    "bool": 6,
    "int16": 7,
    "int8": 9,
    "float64": 10,
}
# A Tensor's quantization (its QuantizationParameters table) and that table's slots (schema.fbs): a quantized
# tensor's values are scale * (q - zero_point), one scale per tensor or one per index of quantized_dimension.
TENSOR_QUANTIZATION_SLOT: Final = 4
QUANTIZATION_SLOTS: Final = {"scale": 2, "zero_point": 3, "quantized_dimension": 6}
# An Operator's `intermediates`: the tensors an integer LSTM's kernel takes its gates' and hidden value's scales from,
# those TensorFlow's converter writes for full-integer quantization (lstm_shared.h's order).
OPERATOR_INTERMEDIATES_SLOT: Final = 8
INTEGER_LSTM_INTERMEDIATES: Final = (
    *(f"input_to_{TFLITE_GATE_WORDS[g]}_intermediate" for g in CUDNN_GATES[LSTM]),
    "effective_hidden_scale_intermediate",
)
# The inputs of UNIDIRECTIONAL_SEQUENCE_LSTM, in order (lstm_shared.h): 9-11 peepholes, 16-17 the projection,
# 18-19 the state variables (output state, cell state), 20-23 layer normalization; -1 where an optional one is absent.
TFLITE_LSTM_INPUTS: Final = (
    "input",
    *(f"input_to_{TFLITE_GATE_WORDS[g]}_weights" for g in CUDNN_GATES[LSTM]),
    *(f"recurrent_to_{TFLITE_GATE_WORDS[g]}_weights" for g in CUDNN_GATES[LSTM]),
    *(f"cell_to_{TFLITE_GATE_WORDS[g]}_weights" for g in TFLITE_PEEPHOLE_GATES),
    *(f"{TFLITE_GATE_WORDS[g]}_gate_bias" for g in CUDNN_GATES[LSTM]),
    "projection_weights",
    "projection_bias",
    "output_state",
    "cell_state",
    *(f"{TFLITE_GATE_WORDS[g]}_layer_norm_coefficients" for g in CUDNN_GATES[LSTM]),
)
# The inputs of BIDIRECTIONAL_SEQUENCE_LSTM, in order (bidirectional_sequence_lstm.cc): each direction's 17 as
# inputs 1-17 of the unidirectional op, the four states, an auxiliary input and its weights (optional).
TFLITE_DIRECTION_PREFIXES: Final = ("fw_", "bw_")
TFLITE_BIDIRECTIONAL_LSTM_INPUTS: Final = (
    "input",
    *(f"{prefix}{name}" for prefix in TFLITE_DIRECTION_PREFIXES for name in TFLITE_LSTM_INPUTS[1:18]),
    *(f"{prefix}{name}" for prefix in TFLITE_DIRECTION_PREFIXES for name in ("output_state", "cell_state")),
    "aux_input",
    *(f"{p}aux_input_to_{TFLITE_GATE_WORDS[g]}_weights" for p in TFLITE_DIRECTION_PREFIXES for g in CUDNN_GATES[LSTM]),
)
# The inputs of UNIDIRECTIONAL_SEQUENCE_RNN, in order (unidirectional_sequence_rnn.cc).
TFLITE_RNN_INPUTS: Final = ("input", *TFLITE_RNN_WEIGHTS, "hidden_state")
# The state inputs of each op, in cuDNN's order (h, then c): variable tensors the op updates in place.
TFLITE_STATE_INPUTS: Final[dict[str, tuple[str, ...]]] = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("output_state", "cell_state"),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ("hidden_state",),
}
# What a written model calls its tensors: the input, the output, and each layer and direction's states.
TFLITE_INPUT: Final = "x"
TFLITE_OUTPUT: Final = "y"
TFLITE_STATES: Final = STATES
TFLITE_STATE_NAME: Final = "{state}_l{layer}{suffix}"  # h_l0, c_l1_reverse (suffix: TORCH_REVERSE_SUFFIX)
TFLITE_FLATBUFFER_LIMIT: Final = 2**31 - 1  # flatbuffers' offsets are checked as signed 32-bit: 2 GiB a file
FORMAT: Final = "tflite"  # the table's name of the format
OP_NAMES: Final = {code: name for name, code in TFLITE_OPS.items()}
BIDIRECTIONAL_LSTM: Final = "BIDIRECTIONAL_SEQUENCE_LSTM"
OP_INPUTS: Final = {TFLITE_CELL_OPS[LSTM]: TFLITE_LSTM_INPUTS, TFLITE_CELL_OPS[RNN]: TFLITE_RNN_INPUTS}
ACTIVATION_NAMES: Final = {code: name for name, code in TFLITE_ACTIVATIONS.items()}
TYPE_NAMES: Final = {code: name for name, code in TFLITE_TENSOR_TYPES.items()}
UNSET: Final = -1  # an optional input left out
TIME_AXIS, FEATURE_AXIS = 1, 2  # of the batch-major tensors rnnconv writes
# Options' slots (schema.fbs): UnidirectionalSequenceLSTMOptions and SequenceRNNOptions.
LSTM_OPTION_SLOTS: Final = {
    "activation": 0,
    "cell_clip": 1,
    "proj_clip": 2,
    "time_major": 3,
    "asymmetric_quantize_inputs": 4,
    "diagonal": 5,
}
RNN_OPTION_SLOTS: Final = {"time_major": 0, "activation": 1, "asymmetric_quantize_inputs": 2}
# The op versions that first take int8 weights with inputs quantized asymmetrically at run time (what TensorFlow's
# converter writes for a dynamic-range hybrid op: register.cc's versions, its file's operator code).
TFLITE_HYBRID_VERSIONS: Final = {"UNIDIRECTIONAL_SEQUENCE_LSTM": 3, "UNIDIRECTIONAL_SEQUENCE_RNN": 3}
# The fields of the plain ops' options rnnconv reads and writes (schema.fbs): each (slot, kind, the schema's default),
# kind a `Flat` reader's ("u8": a byte or a bool; "i32"; "[i32]": a vector of them, absent by default). A loop body's
# cell is written again with every field its ops set; a streaming model's graph sets only STREAMING_OPTION_FIELDS.
TFLITE_OPTION_FIELDS: Final[dict[str, dict[str, tuple[int, str, int | None]]]] = {
    "FULLY_CONNECTED": {
        "activation": (0, "u8", 0),
        "weights_format": (1, "u8", 0),
        "keep_num_dims": (2, "u8", 0),
        "asymmetric_quantize_inputs": (3, "u8", 0),
    },
    "ADD": {"activation": (0, "u8", 0), "pot_scale_int16": (1, "u8", 1)},
    "SUB": {"activation": (0, "u8", 0), "pot_scale_int16": (1, "u8", 1)},
    "MUL": {"activation": (0, "u8", 0)},
    "CONCATENATION": {"axis": (0, "i32", 0), "activation": (1, "u8", 0)},
    "SPLIT": {"num_splits": (0, "i32", 0)},
    "SPLIT_V": {"num_splits": (0, "i32", 0)},
    "PACK": {"values_count": (0, "i32", 0), "axis": (1, "i32", 0)},
    "UNPACK": {"num": (0, "i32", 0), "axis": (1, "i32", 0)},
    "GATHER": {"axis": (0, "i32", 0), "batch_dims": (1, "i32", 0)},
    "STRIDED_SLICE": {
        "begin_mask": (0, "i32", 0),
        "end_mask": (1, "i32", 0),
        "ellipsis_mask": (2, "i32", 0),
        "new_axis_mask": (3, "i32", 0),
        "shrink_axis_mask": (4, "i32", 0),
        "offset": (5, "u8", 0),
    },
    "RESHAPE": {"new_shape": (0, "[i32]", None)},
}
STREAMING_OPTION_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "FULLY_CONNECTED": (),
    "ADD": (),
    "SUB": (),
    "MUL": (),
    "SPLIT": ("num_splits",),
    "PACK": ("values_count", "axis"),
    "UNPACK": ("num", "axis"),
}


def sniff(probe: Probe) -> bool:
    """A flatbuffer with TFLite's file identifier."""
    return probe.head[4:8] == TFLITE_IDENTIFIER
