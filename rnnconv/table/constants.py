"""Every enumeration rnnconv relies on, written once.

Facts are those of the repo's `docs/LAYOUTS.md` (checked against the frameworks'
code and by runs); the cuDNN enum values are those of cuDNN 9's headers
(`cudnn_graph.h`, `cudnn_adv.h`), and the tests check them against the headers
the cuDNN wheel ships.
"""

from __future__ import annotations

from typing import Final

# --- cells and gates ------------------------------------------------------------------------
# The cell families; "lstm" and "gru" are also cuDNN's modes of those cells (CUDNN_MODES).
LSTM: Final = "lstm"
GRU: Final = "gru"
RNN: Final = "rnn"
# cuDNN's gate order per cell family: the linLayerID order of cudnnGetRNNWeightParams.
CUDNN_GATES: Final[dict[str, tuple[str, ...]]] = {
    LSTM: ("i", "f", "c", "o"),
    GRU: ("r", "z", "h"),
    RNN: ("h",),
}
GATE_NAMES: Final[dict[str, dict[str, str]]] = {
    LSTM: {"i": "input gate", "f": "forget gate", "c": "cell candidate", "o": "output gate"},
    GRU: {"r": "reset gate", "z": "update gate", "h": "new (candidate) state"},
    RNN: {"h": "hidden state"},
}

# --- cuDNN enums (cudnn_graph.h / cudnn_adv.h, cuDNN 9) ---------------------------------------
# cuDNN modes: name -> (cell family, cudnnRNNMode_t).
CUDNN_MODES: Final[dict[str, tuple[str, int]]] = {
    "rnn_relu": (RNN, 0),
    "rnn_tanh": (RNN, 1),
    LSTM: (LSTM, 2),
    GRU: (GRU, 3),
}
NONLINEARITIES: Final[dict[str, str]] = {"tanh": "rnn_tanh", "relu": "rnn_relu"}  # nn.RNN's, by cuDNN mode
# What a written file (MLX's, PyTorch's) records of an RNN's nonlinearity, which its weights do not store.
NONLINEARITY_KEY: Final = "rnnconv.nonlinearity"
BIAS_MODE: Final[dict[str, int]] = {"none": 0, "single_input": 1, "double": 2, "single_recurrent": 3}
DIRECTION: Final[dict[bool, int]] = {False: 0, True: 1}  # cudnnDirectionMode_t by bidirectional
INPUT_MODE: Final[dict[str, int]] = {"linear": 0, "skip": 1}
MATH: Final[dict[str, int]] = {"default": 0, "tensor_op": 1, "tensor_op_allow_conversion": 2, "fma": 3}
DATA_LAYOUT: Final[dict[str, int]] = {"seq_major_unpacked": 0, "seq_major_packed": 1, "batch_major_unpacked": 2}
ALGO_STANDARD: Final = 0  # cudnnRNNAlgo_t
FWD_MODE_INFERENCE: Final = 0  # cudnnForwardMode_t
STATUS_SUCCESS: Final = 0
STATUS_NOT_SUPPORTED: Final = 3000  # 3xxx: not supported (cuDNN 9 groups status codes by thousands)
PADDED_IO_ENABLED: Final = 1  # auxFlags bit of cudnnSetRNNDescriptor_v8
# cudnnGetRNNWeightParams' linLayerIDs: 0..G-1 the input side (W and its bias bW) and G..2G-1 the recurrent
# side (R, bR), each in cuDNN's gate order (CUDNN_GATES); weightspace.lin_layer_ids derives the mapping.
PROJECTION_LIN_LAYER_ID: Final = 8  # the LSTM projection matrix (P x H, no bias)
MAX_SIZE: Final = 2**31 - 1  # cuDNN takes sizes as int32
MAX_LAYERS: Final = 1024  # far beyond any trained RNN: a spec claiming more is a damaged or hostile file

# --- element types ----------------------------------------------------------------------------
# name -> (numpy storage, safetensors dtype code, cudnnDataType_t, torch dtype attribute).
# bfloat16 is stored as uint16 words: numpy has no bfloat16.
ELEMENT_TYPE_CODES: Final[dict[str, tuple[str, str, int, str]]] = {
    "float32": ("<f4", "F32", 0, "float32"),
    "float64": ("<f8", "F64", 1, "float64"),
    "float16": ("<f2", "F16", 2, "float16"),
    "bfloat16": ("<u2", "BF16", 9, "bfloat16"),
}
# Significand bits of each element type: which of two is the more precise.
# (int8 and uint8: a dynamically quantized source's, compared with its dequantized float model)
MANTISSA_BITS: Final[dict[str, int]] = {
    "float64": 52,
    "float32": 23,
    "float16": 10,
    "bfloat16": 7,
    "int8": 7,
    "uint8": 8,
}
# Item sizes of every safetensors dtype code, to check a header whatever the tensor's type.
SAFETENSORS_ITEMSIZE: Final[dict[str, int]] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}

# --- tensor roles and kinds -------------------------------------------------------------------
# A role is what a stored tensor is for; a kind is one of cuDNN's per-gate tensors.


class Kind:
    """cuDNN's tensor kinds by name: W (H, in) and R (H, out) matrices, bW and bR biases (H), projection P (P, H)."""

    W: Final = "W"
    R: Final = "R"
    bW: Final = "bW"
    bR: Final = "bR"
    P: Final = "P"


KINDS: Final = (Kind.W, Kind.R, Kind.bW, Kind.bR, Kind.P)
MATRIX_KINDS: Final = (Kind.W, Kind.R)  # the input side, then the recurrent side
BIAS_KINDS: Final = (Kind.bW, Kind.bR)
INPUT_MATRIX: Final = "input_matrix"
RECURRENT_MATRIX: Final = "recurrent_matrix"
INPUT_BIAS: Final = "input_bias"
RECURRENT_BIAS: Final = "recurrent_bias"
PROJECTION: Final = "projection"
BIAS: Final = "bias"  # both sides' biases in one tensor (table/layouts.py says how)
MATRIX_ROLES: Final = (INPUT_MATRIX, RECURRENT_MATRIX)  # in the order of MATRIX_KINDS
KIND_OF_ROLE: Final[dict[str, str]] = {
    INPUT_MATRIX: Kind.W,
    RECURRENT_MATRIX: Kind.R,
    INPUT_BIAS: Kind.bW,
    RECURRENT_BIAS: Kind.bR,
    PROJECTION: Kind.P,
}
DIRECTIONS: Final = ("fwd", "rev")  # direction 0 and 1 in tensor labels (layer0.fwd.W_i)
DIRECTION_WORDS: Final = ("forward", "reverse")  # and in sentences

# Keras: variable names, in the order a cell's `get_weights()` / `vars/{0,1,2}` holds them.
KERAS_VARIABLES: Final[dict[str, str]] = {
    "input_matrix": "kernel",
    "recurrent_matrix": "recurrent_kernel",
    "bias": "bias",
}
# The Keras layer arguments that initialize each variable (in the same order).
KERAS_INITIALIZERS: Final = ("kernel_initializer", "recurrent_initializer", "bias_initializer")
# Keras cell classes and the layer class each computes as (RNN(cell) wraps one).
KERAS_CELLS: Final[dict[str, str]] = {"LSTMCell": "LSTM", "GRUCell": "GRU", "SimpleRNNCell": "SimpleRNN"}
KERAS_WRAPPERS: Final = ("Bidirectional", "RNN")
# Class names of recurrent layers rnnconv lists without converting them (ConvLSTM2D, PeepholeLSTMCell,
# StackedRNNCells, a custom AttentionGRU): a file that holds one never reads as holding no recurrent layer.
KERAS_RECURRENT_NAMES: Final = r"LSTM|GRU|RNN"
# Bidirectional's sub-layer groups in a Keras 3 weights file, forward first.
KERAS_DIRECTION_GROUPS: Final = ("forward_layer", "backward_layer")
KERAS_DIRECTION_PREFIXES: Final = ("forward", "backward")  # and the names of its sub-layers: forward_{name}

# PyTorch: parameter names. Layers add `_l{layer}` and, for direction 1, `_reverse`; cells use the bare name.
TORCH_PARAMETERS: Final[dict[str, str]] = {
    "input_matrix": "weight_ih",
    "recurrent_matrix": "weight_hh",
    "input_bias": "bias_ih",
    "recurrent_bias": "bias_hh",
    "projection": "weight_hr",
}
TORCH_LAYER_NAME: Final = "{name}_l{layer}{suffix}"
TORCH_REVERSE_SUFFIX: Final = "_reverse"
# torch.save's storage classes (named in its pickles) -> numpy dtype of the storage's elements, little-endian
# ("bfloat16": 2-byte words). Non-float storages are parsed for their sizes and never converted.
TORCH_STORAGES: Final[dict[str, str]] = {
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "HalfStorage": "<f2",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
    "ComplexFloatStorage": "<c8",
    "ComplexDoubleStorage": "<c16",
}

# cuDNN: the names the sidecar and `explain` give each role.
CUDNN_TENSOR_NAMES: Final[dict[str, str]] = {
    "input_matrix": "W",
    "recurrent_matrix": "R",
    "input_bias": "bW",
    "recurrent_bias": "bR",
    "projection": "Wproj",
}

# --- ONNX ----------------------------------------------------------------------------------------------
ONNX_OPSET: Final = 21  # what rnnconv writes: recent, and run by every onnxruntime since 1.18
ONNX_OPS: Final[dict[str, str]] = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}  # the op of each cell family
# ONNX activation names, and the default activations of each op: f (gates), g (cell input), h (cell output).
ONNX_ACTIVATIONS: Final[dict[str, str]] = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}
ONNX_DEFAULT_ACTIVATIONS: Final[dict[str, tuple[str, ...]]] = {
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
    "GRU": ("Sigmoid", "Tanh"),
    "RNN": ("Tanh",),
}
# The inputs of the RNN ops, in order.
ONNX_INPUTS: Final = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
ONNX_DIRECTIONS: Final[dict[str, int]] = {"forward": 1, "reverse": 1, "bidirectional": 2}
# The attributes the RNN ops define, by AttributeProto type code (1 FLOAT, 2 INT, 3 STRING, 6 FLOATS, 8 STRINGS).
ONNX_ATTRIBUTES: Final[dict[str, int]] = {
    "hidden_size": 2,
    "direction": 3,
    "activations": 8,
    "activation_alpha": 6,
    "activation_beta": 6,
    "clip": 1,
    "input_forget": 2,
    "layout": 2,
    "linear_before_reset": 2,
}
ONNX_FLAGS: Final = ("input_forget", "layout", "linear_before_reset")  # the INT attributes that are 0 or 1
ONNX_ONE_OP_ATTRIBUTES: Final[dict[str, str]] = {"input_forget": "LSTM", "linear_before_reset": "GRU"}  # the only op
# Ops that only move a layer's output into the next layer's input (what exporters put between layers).
ONNX_GLUE: Final = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity")
# onnxruntime's quantized RNN ops (what onnxruntime.quantization.quantize_dynamic writes): op -> (domain, the op
# it quantizes), and the inputs they take after the quantized op's own (scale and zero point of W and R).
ONNX_QUANTIZED_OPS: Final[dict[str, tuple[str, str]]] = {"DynamicQuantizeLSTM": ("com.microsoft", "LSTM")}
ONNX_QUANTIZED_INPUTS: Final = ("W_scale", "W_zero_point", "R_scale", "R_zero_point")
# ONNX TensorProto element types rnnconv reads and writes, by dtype name.
ONNX_ELEMENT_TYPES: Final[dict[str, int]] = {"float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}

# --- TF1 (tf.contrib.cudnn_rnn checkpoints; docs/LAYOUTS.md section 9) ---------------------------------
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
TF1_KERNEL: Final = "kernel"  # LSTM and simple RNN: kernel [in + H, G*H]
TF1_BIAS: Final = "bias"  # and bias [G*H]
TF1_GRU_GATES: Final = "gates"  # /kernel [in + H, 2H] (r, z), /bias [2H]
TF1_GRU_CANDIDATE_INPUT: Final = "candidate/input_projection"  # /kernel [in, H], /bias [H]
TF1_GRU_CANDIDATE_HIDDEN: Final = "candidate/hidden_projection"  # /kernel [H, H], /bias [H]
# Rows of a stored tensor a role takes: a kernel [in + H, n] gives its first `in` rows to the input
# side and its last H rows to the recurrent side; "all" takes the tensor whole.
TF1_INPUT_ROWS: Final = "input"
TF1_RECURRENT_ROWS: Final = "recurrent"
TF1_ALL_ROWS: Final = "all"
# Each role's tensor (table/rows.py) as the columns of these variables of the cell scope, joined in order.
TF1_VARIABLES: Final[dict[str, dict[str, tuple[tuple[str, str], ...]]]] = {
    "lstm": {
        "input_matrix": ((TF1_KERNEL, TF1_INPUT_ROWS),),
        "recurrent_matrix": ((TF1_KERNEL, TF1_RECURRENT_ROWS),),
        "bias": ((TF1_BIAS, TF1_ALL_ROWS),),
    },
    "gru": {
        "input_matrix": (
            (f"{TF1_GRU_GATES}/{TF1_KERNEL}", TF1_INPUT_ROWS),
            (f"{TF1_GRU_CANDIDATE_INPUT}/{TF1_KERNEL}", TF1_ALL_ROWS),
        ),
        "recurrent_matrix": (
            (f"{TF1_GRU_GATES}/{TF1_KERNEL}", TF1_RECURRENT_ROWS),
            (f"{TF1_GRU_CANDIDATE_HIDDEN}/{TF1_KERNEL}", TF1_ALL_ROWS),
        ),
        "bias": ((f"{TF1_GRU_GATES}/{TF1_BIAS}", TF1_ALL_ROWS),),
        "input_bias": ((f"{TF1_GRU_CANDIDATE_INPUT}/{TF1_BIAS}", TF1_ALL_ROWS),),
        "recurrent_bias": ((f"{TF1_GRU_CANDIDATE_HIDDEN}/{TF1_BIAS}", TF1_ALL_ROWS),),
    },
    "rnn": {
        "input_matrix": ((TF1_KERNEL, TF1_INPUT_ROWS),),
        "recurrent_matrix": ((TF1_KERNEL, TF1_RECURRENT_ROWS),),
        "bias": ((TF1_BIAS, TF1_ALL_ROWS),),
    },
}
# --- TFLite / LiteRT (the schema of tensorflow/compiler/mlir/lite/schema/schema.fbs; docs/LAYOUTS.md section 13) -----
TFLITE_IDENTIFIER: Final = b"TFL3"  # the flatbuffer's file identifier, bytes 4..8
TFLITE_SCHEMA_VERSION: Final = 3
# BuiltinOperator codes: the ops rnnconv reads, writes or names.
TFLITE_OPS: Final[dict[str, int]] = {
    "CONCATENATION": 2,
    "DEQUANTIZE": 6,
    "CUSTOM": 32,
    "UNIDIRECTIONAL_SEQUENCE_RNN": 35,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 44,
    "BIDIRECTIONAL_SEQUENCE_RNN": 46,
    "BIDIRECTIONAL_SEQUENCE_LSTM": 52,
    "REVERSE_V2": 105,
    "WHILE": 119,
}
# The fused op of each cell family (TFLite has no fused GRU).
TFLITE_CELL_OPS: Final[dict[str, str]] = {"lstm": "UNIDIRECTIONAL_SEQUENCE_LSTM", "rnn": "UNIDIRECTIONAL_SEQUENCE_RNN"}
# BuiltinOptions union codes of the options rnnconv writes and reads.
TFLITE_OPTIONS: Final[dict[str, int]] = {
    "CONCATENATION": 10,
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
# TensorType codes of the element types rnnconv reads (float weights) and writes (int32 for REVERSE_V2's axis).
TFLITE_TENSOR_TYPES: Final[dict[str, int]] = {"float32": 0, "float16": 1, "int32": 2, "float64": 10}
# TFLite's words for the LSTM's gates, in its tensors' names (input_to_forget_weights).
TFLITE_GATE_WORDS: Final[dict[str, str]] = {"i": "input", "f": "forget", "c": "cell", "o": "output"}
# The inputs of UNIDIRECTIONAL_SEQUENCE_LSTM, in order (lstm_shared.h): 9-11 peepholes, 16-17 the projection,
# 18-19 the state variables (output state, cell state), 20-23 layer normalization; -1 where an optional one is absent.
TFLITE_LSTM_INPUTS: Final = (
    "input",
    *(f"input_to_{TFLITE_GATE_WORDS[g]}_weights" for g in CUDNN_GATES[LSTM]),
    *(f"recurrent_to_{TFLITE_GATE_WORDS[g]}_weights" for g in CUDNN_GATES[LSTM]),
    *(f"cell_to_{TFLITE_GATE_WORDS[g]}_weights" for g in ("i", "f", "o")),
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
TFLITE_RNN_INPUTS: Final = ("input", "weights", "recurrent_weights", "bias", "hidden_state")
# The state inputs of each op, in cuDNN's order (h, then c): variable tensors the op updates in place.
TFLITE_STATE_INPUTS: Final[dict[str, tuple[str, ...]]] = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("output_state", "cell_state"),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ("hidden_state",),
}
# What a written model calls its tensors: the input, the output, and each layer and direction's states.
TFLITE_INPUT: Final = "x"
TFLITE_OUTPUT: Final = "y"
TFLITE_STATES: Final = ("h", "c")
TFLITE_STATE_NAME: Final = "{state}_l{layer}{suffix}"  # h_l0, c_l1_reverse (suffix: TORCH_REVERSE_SUFFIX)
TFLITE_FLATBUFFER_LIMIT: Final = 2**31 - 1  # flatbuffers' offsets are checked as signed 32-bit: 2 GiB a file

# --- OpenVINO IR (docs/LAYOUTS.md section 11) -------------------------------------------------------------
OPENVINO_IR_VERSION: Final = "11"  # what rnnconv writes (<net version="11">)
OPENVINO_IR_VERSIONS: Final = ("10", "11")  # what it reads: v10 and v11 name layers, Consts and edges alike
OPENVINO_OPS: Final[dict[str, str]] = {"lstm": "LSTMSequence", "gru": "GRUSequence", "rnn": "RNNSequence"}
OPENVINO_OPSET: Final = "opset5"  # the version of the sequence ops rnnconv writes (opset5 defines all three)
OPENVINO_LSTM_GATES: Final = ("f", "i", "c", "o")
OPENVINO_GRU_GATES: Final = ("z", "r", "h")
OPENVINO_DIRECTIONS: Final[dict[str, int]] = {"forward": 1, "reverse": 1, "bidirectional": 2}
OPENVINO_FORWARD, OPENVINO_REVERSE, OPENVINO_BIDIRECTIONAL = OPENVINO_DIRECTIONS
OPENVINO_DEFAULT_ACTIVATIONS: Final[dict[str, tuple[str, ...]]] = {
    "LSTMSequence": ("sigmoid", "tanh", "tanh"),  # f (gates), g (cell input), h (cell output)
    "GRUSequence": ("sigmoid", "tanh"),
    "RNNSequence": ("tanh",),
}
# The input port of each sequence op's weights (ports: X, H[, C], sequence_lengths, W, R, B), by role.
OPENVINO_WEIGHT_PORTS: Final[dict[str, dict[str, int]]] = {
    "LSTMSequence": {"input_matrix": 4, "recurrent_matrix": 5, "bias": 6},
    "GRUSequence": {"input_matrix": 3, "recurrent_matrix": 4, "bias": 5},
    "RNNSequence": {"input_matrix": 3, "recurrent_matrix": 4, "bias": 5},
}
OPENVINO_INPUT_COUNT: Final[dict[str, int]] = {"LSTMSequence": 7, "GRUSequence": 6, "RNNSequence": 6}
# The graph rnnconv writes: inputs x (batch, seq, input), initial_h / initial_c (layers*dirs, batch, hidden),
# sequence_lens (batch,); outputs y (batch, seq, dirs*hidden), h_n and c_n (layers*dirs, batch, hidden).
OPENVINO_X, OPENVINO_INITIAL_H, OPENVINO_INITIAL_C, OPENVINO_LENGTHS = "x", "initial_h", "initial_c", "sequence_lens"
OPENVINO_Y, OPENVINO_H_N, OPENVINO_C_N = "y", "h_n", "c_n"
# IR element types by dtype name, and the precision names ports carry.
OPENVINO_ELEMENT_TYPES: Final[dict[str, str]] = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
}
OPENVINO_PRECISIONS: Final[dict[str, str]] = {
    "f32": "FP32",
    "f16": "FP16",
    "bf16": "BF16",
    "f64": "FP64",
    "i32": "I32",
    "i64": "I64",
}
OPENVINO_INTEGERS: Final[dict[str, str]] = {"i32": "<i4", "i64": "<i8"}  # the integer Consts the reader reads
# Ops that only move a layer's output into the next layer's input, and the one op between a Const and a weight
# input the reader looks through (what ov.save_model's compress_to_fp16 writes: f16 Const -> Convert to f32).
OPENVINO_GLUE: Final = ("Transpose", "Reshape", "Squeeze")
OPENVINO_DECOMPRESSION: Final = "Convert"

# --- JAX: Flax linen, flax.nnx, Equinox (docs/LAYOUTS.md section 12) --------------------------------------------
# A Flax cell stores each gate's matrix as its own Dense: `<dense>/kernel` (in, H), x @ kernel, and its bias as
# `<dense>/bias`. A role's tensor (table/rows.py) is the columns of these params of the cell, joined in order.
FLAX_KERNEL: Final = "kernel"
FLAX_BIAS: Final = "bias"
FLAX_PARAMS: Final = "params"  # the variables collection of a linen module's trainable weights
FLAX_CELL: Final = "cell"  # nn.RNN's (and nnx.RNN's) cell attribute
FLAX_DIRECTIONS: Final = ("forward_rnn", "backward_rnn")  # nn.Bidirectional's (and nnx's) two RNNs
FLAX_LINEN_LAYERS: Final = "layers_{layer}"  # nn.Sequential's layers, under params
FLAX_NNX_LAYERS: Final = "layers"  # nnx.Sequential's layers attribute: a dict of layers by number


def _flax_dense(*names: str, param: str = FLAX_KERNEL) -> tuple[str, ...]:
    return tuple(f"{name}/{param}" for name in names)


# Flax linen's cells (flax.linen.recurrent): LSTMCell and OptimizedLSTMCell store the same params.
FLAX_LINEN_CELLS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    LSTM: {
        "input_matrix": _flax_dense("ii", "if", "ig", "io"),
        "recurrent_matrix": _flax_dense("hi", "hf", "hg", "ho"),
        "bias": _flax_dense("hi", "hf", "hg", "ho", param=FLAX_BIAS),
    },
    GRU: {
        "input_matrix": _flax_dense("ir", "iz", "in"),
        "recurrent_matrix": _flax_dense("hr", "hz", "hn"),
        "bias": _flax_dense("ir", "iz", param=FLAX_BIAS),
        "input_bias": _flax_dense("in", param=FLAX_BIAS),
        "recurrent_bias": _flax_dense("hn", param=FLAX_BIAS),
    },
    RNN: {
        "input_matrix": _flax_dense("i"),
        "recurrent_matrix": _flax_dense("h"),
        "bias": _flax_dense("i", param=FLAX_BIAS),
    },
}
FLAX_LINEN_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell", RNN: "SimpleCell"}
# flax.nnx's cells (flax.nnx.nn.recurrent): LSTMCell names its forget gate's input Dense `if_`; the others
# stack their gates in one Dense per side.
FLAX_NNX_LSTM: Final[dict[str, tuple[str, ...]]] = {
    "input_matrix": _flax_dense("ii", "if_", "ig", "io"),
    "recurrent_matrix": _flax_dense("hi", "hf", "hg", "ho"),
    "bias": _flax_dense("hi", "hf", "hg", "ho", param=FLAX_BIAS),
}
FLAX_NNX_STACKED: Final[dict[str, tuple[str, ...]]] = {  # GRUCell and SimpleCell: the bias is dense_i's
    "input_matrix": _flax_dense("dense_i"),
    "recurrent_matrix": _flax_dense("dense_h"),
    "bias": _flax_dense("dense_i", param=FLAX_BIAS),
}
FLAX_NNX_OPTIMIZED_LSTM: Final[dict[str, tuple[str, ...]]] = {  # OptimizedLSTMCell: the bias is dense_h's
    "input_matrix": _flax_dense("dense_i"),
    "recurrent_matrix": _flax_dense("dense_h"),
    "bias": _flax_dense("dense_h", param=FLAX_BIAS),
}
FLAX_NNX_CELLS: Final[dict[str, dict[str, tuple[str, ...]]]] = {  # class -> role -> params
    "LSTMCell": FLAX_NNX_LSTM,
    "OptimizedLSTMCell": FLAX_NNX_OPTIMIZED_LSTM,
    "GRUCell": FLAX_NNX_STACKED,
    "SimpleCell": FLAX_NNX_STACKED,
}
FLAX_NNX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell", RNN: "SimpleCell"}  # what is written
# Equinox's cells (equinox.nn._rnn): their array fields, in the order tree_serialise_leaves saves them.
EQUINOX_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    LSTM: ("weight_ih", "weight_hh", "bias"),
    GRU: ("weight_ih", "weight_hh", "bias", "bias_n"),
}
EQUINOX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTMCell", GRU: "GRUCell"}
EQUINOX_NAMES: Final[dict[str, str]] = {
    "input_matrix": "weight_ih",
    "recurrent_matrix": "weight_hh",
    "bias": "bias",
    "recurrent_bias": "bias_n",
}

# --- MLX (mlx.nn.LSTM / GRU / RNN, MLX 0.18 and later; docs/LAYOUTS.md section "MLX") ----------------
# Each class's parameters, by role; MLX's GRU keeps b (3H) = [b_ir + b_hr, b_iz + b_hz, b_in] and bhn (H) apart.
MLX_PARAMETERS: Final[dict[str, dict[str, str]]] = {
    LSTM: {"input_matrix": "Wx", "recurrent_matrix": "Wh", "bias": "bias"},
    GRU: {"input_matrix": "Wx", "recurrent_matrix": "Wh", "bias": "b", "recurrent_bias": "bhn"},
    RNN: {"input_matrix": "Wxh", "recurrent_matrix": "Whh", "bias": "bias"},
}
MLX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTM", GRU: "GRU", RNN: "RNN"}  # the mlx.nn class of each cell family
MLX_STACK: Final = "layers"  # rnnconv's multi-layer convention: a list `layers` of one-layer modules, layers.{k}.Wx
MLX_ROWS_SINCE: Final = (0, 18, 0)  # before MLX 0.18 (ml-explore/mlx#1419) Wx and Wh were stored transposed

# --- ncnn (its LSTM, GRU and RNN layers; docs/LAYOUTS.md section "ncnn") ---------------------------------
NCNN_MAGIC: Final = 7767517  # the first line of a .param
NCNN_LAYERS: Final[dict[str, str]] = {LSTM: "LSTM", GRU: "GRU", RNN: "RNN"}  # the layer type of each cell family
NCNN_INPUT: Final = "Input"
NCNN_MEMORY: Final = "MemoryData"  # a constant blob: the zero initial states rnnconv writes, which a feed replaces
# The .param keys of the recurrent layers: num_output (P with a projection, else H), weight_data_size (the
# size of weight_xc, every direction), direction, hidden_size (LSTM only; num_output when absent), int8.
NCNN_PARAMS: Final[dict[str, int]] = {
    "num_output": 0,
    "weight_data_size": 1,
    "direction": 2,
    "hidden_size": 3,
    "int8_scale_term": 8,
}
NCNN_DIRECTIONS: Final[dict[int, str]] = {0: "forward", 1: "reverse", 2: "bidirectional"}
# A .bin blob's 4-byte tag before its data: float32 (any tag whose first byte is 0 and whose bytes sum to 0)
# and float16 (data padded to 4 bytes); other tags are int8 or quantized tables, which rnnconv refuses.
NCNN_FLAGS: Final[dict[str, int]] = {"float32": 0, "float16": 0x01306B47}
NCNN_SIDECAR: Final = (
    ".rnnconv.json"  # model.param.rnnconv.json: the source rnnconv recorded (a .param has no metadata)
)
# Layers that store no weights in the .bin (a recurrent layer after them is read without sizing them).
NCNN_WEIGHTLESS: Final = (
    "Input", "Split", "Concat", "Reshape", "Permute", "Slice", "Crop", "Squeeze", "ExpandDims", "Flatten", "Noop",
    "Dropout", "TanH", "Sigmoid", "ReLU", "Clip", "Swish", "GELU", "Softmax", "BinaryOp", "UnaryOp", "Eltwise",
    "Padding", "Pooling", "Pooling1D", "Flip", "Tile", "Interp", "Reduction", "Cast",
)  # fmt: skip
# Layers with weights before a recurrent layer, sized from their params: type -> (num_output, bias_term,
# weight_data_size, int8_scale_term) keys; weights a flagged blob, the bias num_output raw floats.
NCNN_SIZED: Final[dict[str, tuple[int, int, int, int]]] = {"InnerProduct": (0, 1, 2, 8), "Embed": (0, 2, 3, 18)}
NCNN_MEMORY_KEYS: Final = (0, 1, 11, 2, 21)  # MemoryData: w, h, d, c, load_type (1: raw floats, no flag)
# The blobs of a layer in the .bin, in order (weight_hr only with a projection), by role.
NCNN_BLOBS: Final[dict[str, str]] = {
    "input_matrix": "weight_xc",
    "bias": "bias_c",
    "recurrent_matrix": "weight_hc",
    "projection": "weight_hr",
}

# --- verify -------------------------------------------------------------------------------------
# Where verify runs a blob: auto = cuDNN when it can run, else numpy; onnxruntime = the blob as an ONNX graph;
# openvino = the blob as an OpenVINO IR in its CPU plugin; flax, flax-nnx, equinox = the blob as that library's
# cells in JAX (CPU); tflite = the blob as TFLite ops in LiteRT; mlx and ncnn: the blob written as those formats
# and run in their runtimes (CPU); torch and keras: the blob as the state_dict or .keras rnnconv writes, run in
# PyTorch or Keras (CPU).
ENGINES: Final = (
    "auto", "cudnn", "numpy", "onnxruntime", "openvino", "flax", "flax-nnx", "equinox", "tflite", "mlx", "ncnn",
    "torch", "keras",
)  # fmt: skip
