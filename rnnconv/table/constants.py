"""Every enumeration of the layouts, written once: gate orders, roles, the names of stored tensors, cuDNN's and the
element types' codes.

Facts are those of the repo's `docs/LAYOUTS.md` (checked against the frameworks'
code and by runs); the cuDNN enum values are those of cuDNN 9's headers
(`cudnn_graph.h`, `cudnn_adv.h`), and the tests check them against the headers
the cuDNN wheel ships. What only one format's files need (its op codes, attribute
names, the layout of its graph) is that format's own, in `rnnconv/formats/<name>/wire.py`.
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
CELL_NAMES: Final[dict[str, str]] = {LSTM: "LSTM", GRU: "GRU", RNN: "simple RNN"}  # each family, as people say it
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
# Exponent bits of each float type: with MANTISSA_BITS, whether one holds every value of another exactly.
EXPONENT_BITS: Final[dict[str, int]] = {"float64": 11, "float32": 8, "float16": 5, "bfloat16": 8}
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
STATES: Final = ("h", "c")  # an RNN's states: the hidden state, and an LSTM's cell state
DIRECTIONS: Final = ("fwd", "rev")  # direction 0 and 1 in tensor labels (layer0.fwd.W_i)
DIRECTION_WORDS: Final = ("forward", "reverse")  # and in sentences

# Keras: variable names, in the order a cell's `get_weights()` / `vars/{0,1,2}` holds them.
KERAS_VARIABLES: Final[dict[str, str]] = {
    "input_matrix": "kernel",
    "recurrent_matrix": "recurrent_kernel",
    "bias": "bias",
}

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

# --- PaddlePaddle (paddle.nn.LSTM / GRU / SimpleRNN; docs/LAYOUTS.md section "PaddlePaddle") -----------------------
# Each layer's cells keep their parameters under `{layer}.{cell}.{name}`: `cell` one way, `cell_fw` and `cell_bw` both
# ways. The LSTM's projection `weight_ho` is (H, P), applied as h @ weight_ho: cuDNN's P transposed.
PADDLE_PARAMETERS: Final[dict[str, str]] = {
    "input_matrix": "weight_ih",
    "recurrent_matrix": "weight_hh",
    "input_bias": "bias_ih",
    "recurrent_bias": "bias_hh",
    "projection": "weight_ho",
}
PADDLE_CELL_NAME: Final = "{layer}.{cell}.{name}"
PADDLE_CELLS: Final[dict[int, tuple[str, ...]]] = {1: ("cell",), 2: ("cell_fw", "cell_bw")}  # by direction count
# RNNBase also names its cells' parameters as PyTorch does (TORCH_LAYER_NAME, with TORCH_PARAMETERS' four names, the
# bias ones only where the bias is on), by zipping those names with its cells' parameters in order: where a cell has
# a fifth (a projection) or the names leave the biases out, the names fall on other cells' parameters.
PADDLE_ALIASED: Final = ("input_matrix", "recurrent_matrix", "input_bias", "recurrent_bias")

# cuDNN: the names the sidecar and `explain` give each role.
CUDNN_TENSOR_NAMES: Final[dict[str, str]] = {
    "input_matrix": "W",
    "recurrent_matrix": "R",
    "input_bias": "bW",
    "recurrent_bias": "bR",
    "projection": "Wproj",
}

# --- TF1 (tf.contrib.cudnn_rnn checkpoints; docs/LAYOUTS.md section 9) ---------------------------------
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
# TF1's own cells (tf.compat.v1.nn.rnn_cell; docs/LAYOUTS.md section 9): BasicLSTMCell and LSTMCell keep a kernel
# [in + H, 4H] in gate order i, j, f, o (j the candidate: TF1_LSTM_GATES) and a bias [4H]; LSTMCell's num_proj=P adds
# projection/kernel [H, P] (h @ kernel, no bias) and its kernel is [in + P, 4H]; use_peepholes adds TF1_PEEPHOLES [H].
# GRUCell keeps gates/ [in + H, 2H] (r, u) and candidate/ [in + H, H], each with its bias, and applies its reset to h
# before the candidate's product.
TF1_PROJECTION: Final = "projection/kernel"
TF1_GRU_CANDIDATE: Final = "candidate"  # GRUCell's: /kernel [in + H, H], /bias [H]
TF1_PEEPHOLES: Final = ("w_i_diag", "w_f_diag", "w_o_diag")
TF1_TRANSPOSED: Final = "transposed"  # the tensor whole, transposed: a projection [H, P] that h @ kernel applies
# Each role's tensor (table/rows.py) as the columns of these variables of the cell scope, joined in order, by the class
# that saves them.
_TF1_LSTM_KERNEL: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "input_matrix": ((TF1_KERNEL, TF1_INPUT_ROWS),),
    "recurrent_matrix": ((TF1_KERNEL, TF1_RECURRENT_ROWS),),
    "bias": ((TF1_BIAS, TF1_ALL_ROWS),),
}
TF1_VARIABLES: Final[dict[str, dict[str, tuple[tuple[str, str], ...]]]] = {
    "CudnnLSTM": _TF1_LSTM_KERNEL,
    "CudnnGRU": {
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
    "CudnnRNN": _TF1_LSTM_KERNEL,
    "BasicLSTMCell": _TF1_LSTM_KERNEL,
    "LSTMCell": {**_TF1_LSTM_KERNEL, "projection": ((TF1_PROJECTION, TF1_TRANSPOSED),)},
    "GRUCell": {
        "input_matrix": (
            (f"{TF1_GRU_GATES}/{TF1_KERNEL}", TF1_INPUT_ROWS),
            (f"{TF1_GRU_CANDIDATE}/{TF1_KERNEL}", TF1_INPUT_ROWS),
        ),
        "recurrent_matrix": (
            (f"{TF1_GRU_GATES}/{TF1_KERNEL}", TF1_RECURRENT_ROWS),
            (f"{TF1_GRU_CANDIDATE}/{TF1_KERNEL}", TF1_RECURRENT_ROWS),
        ),
        "bias": ((f"{TF1_GRU_GATES}/{TF1_BIAS}", TF1_ALL_ROWS), (f"{TF1_GRU_CANDIDATE}/{TF1_BIAS}", TF1_ALL_ROWS)),
    },
}
# --- TFLite / LiteRT (docs/LAYOUTS.md section 13) -------------------------------------------------------------------
# TFLite's words for the LSTM's gates, in its tensors' names (input_to_forget_weights).
TFLITE_GATE_WORDS: Final[dict[str, str]] = {"i": "input", "f": "forget", "c": "cell", "o": "output"}
TFLITE_PEEPHOLE_GATES: Final = ("i", "f", "o")  # the gates an LSTM op's peepholes (cell_to_*_weights) act on
# The simple RNN op's stored tensors: its input matrix, recurrent matrix and bias (one each, its only gate's).
TFLITE_RNN_WEIGHTS: Final = ("weights", "recurrent_weights", "bias")

# --- OpenVINO IR (docs/LAYOUTS.md section 11) -------------------------------------------------------------
OPENVINO_LSTM_GATES: Final = ("f", "i", "c", "o")
OPENVINO_GRU_GATES: Final = ("z", "r", "h")

# --- JAX: Flax linen, flax.nnx, Equinox (docs/LAYOUTS.md section 12) --------------------------------------------
# A Flax cell stores each gate's matrix as its own Dense: `<dense>/kernel` (in, H), x @ kernel, and its bias as
# `<dense>/bias`. A role's tensor (table/rows.py) is the columns of these params of the cell, joined in order.
FLAX_KERNEL: Final = "kernel"
FLAX_BIAS: Final = "bias"
FLAX_CELL: Final = "cell"  # nn.RNN's (and nnx.RNN's) cell attribute
FLAX_DIRECTIONS: Final = ("forward_rnn", "backward_rnn")  # nn.Bidirectional's (and nnx's) two RNNs


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
# Equinox's cells (equinox.nn._rnn): their array fields, in the order tree_serialise_leaves saves them.
EQUINOX_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    LSTM: ("weight_ih", "weight_hh", "bias"),
    GRU: ("weight_ih", "weight_hh", "bias", "bias_n"),
}
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

# --- ncnn (its LSTM, GRU and RNN layers; docs/LAYOUTS.md section "ncnn") ---------------------------------
# The blobs of a layer in the .bin, in order (weight_hr only with a projection), by role.
NCNN_BLOBS: Final[dict[str, str]] = {
    "input_matrix": "weight_xc",
    "bias": "bias_c",
    "recurrent_matrix": "weight_hc",
    "projection": "weight_hr",
}
