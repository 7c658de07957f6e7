"""The rows of the layout table: how every format stores one recurrent cell.

A row says, for one format and one layer class, in which order the gates are
stacked, how a gate's matrix is stored relative to cuDNN's row-major `(H, in)`,
how the biases are arranged, what the stored tensors are called, which
activations cuDNN can run, and the format's documented default of every config
key the row reads: a key missing from a file's config means that default, never
"anything". Readers, writers, `explain`, the reference engine and the error
messages all read these rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rnnconv.table.constants import (
    CUDNN_GATES,
    CUDNN_TENSOR_NAMES,
    EQUINOX_NAMES,
    FLAX_LINEN_CELLS,
    FLAX_NNX_LSTM,
    FLAX_NNX_OPTIMIZED_LSTM,
    FLAX_NNX_STACKED,
    KERAS_VARIABLES,
    MLX_PARAMETERS,
    NCNN_BLOBS,
    NONLINEARITIES,
    OPENVINO_GRU_GATES,
    OPENVINO_LSTM_GATES,
    PADDLE_CELL_NAME,
    PADDLE_PARAMETERS,
    TF1_ALL_ROWS,
    TF1_INPUT_ROWS,
    TF1_RECURRENT_ROWS,
    TF1_TRANSPOSED,
    TF1_VARIABLES,
    TFLITE_GATE_WORDS,
    TFLITE_RNN_WEIGHTS,
    TORCH_LAYER_NAME,
    TORCH_PARAMETERS,
)
from rnnconv.table.layouts import (
    BIAS_CONCATENATED,
    BIAS_PER_GATE,
    BIAS_SEPARATE,
    BIAS_SINGLE,
    BIAS_SINGLE_BUT_LAST,
    BIAS_SINGLE_BUT_LAST_JOINED,
    BIAS_SINGLE_LAST_INPUT,
    BIAS_SINGLE_NO_LAST_RECURRENT,
    BIAS_STACKED,
    MATRIX_COLUMNS,
    MATRIX_COLUMNS_RAW,
    MATRIX_PER_GATE,
    MATRIX_ROWS,
    PROJECTION_AS_IS,
    PROJECTION_TRANSPOSED,
    BiasLayout,
    MatrixLayout,
    per_gate,
)

# Re-exported: the command line and the API take the splits from the rows.
from rnnconv.table.layouts import BIAS_SPLITS as BIAS_SPLITS  # noqa: PLC0414
from rnnconv.table.layouts import DEFAULT_BIAS_SPLIT as DEFAULT_BIAS_SPLIT  # noqa: PLC0414


@dataclass(frozen=True)
class Row:
    format: str
    source_class: str
    cell: str
    gate_order: tuple[str, ...]
    matrix: MatrixLayout  # how a gate's matrix is stored, relative to cuDNN's row-major (H, in) block
    bias: BiasLayout
    tensors: Mapping[str, str]  # role -> the tensor's name in this format
    modes: Mapping[str, str]  # activation -> cuDNN mode: the activations cuDNN can run for this class
    defaults: Mapping[str, Any]  # the format's default of every config key this row reads
    requires: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # other config cuDNN needs
    when: Mapping[str, Any] = field(default_factory=dict)  # config that selects this row among its class's
    refusal: str | None = None
    note: str = ""
    adapter: bool = True  # False for rows kept for `explain` only (no reader or writer in rnnconv)
    projection: str = PROJECTION_AS_IS  # how an LSTM's projection is stored: cuDNN's (P, H), or transposed (H, P)
    # Settings that change what the layer computes but that a file without a config does not store
    # (a bare Keras weights file, any PyTorch state_dict): they must be stated, or are assumed and said so.
    unstored: tuple[str, ...] = ()
    # False for a GRU whose reset gate multiplies the state before the recurrent product (Keras reset_after=False,
    # ONNX linear_before_reset=0): h' = tanh(Wh x + bWh + Rh (r*h) + bRh), which cuDNN's GRU does not compute.
    reset_after: bool = True

    @property
    def gates(self) -> int:
        return len(self.gate_order)

    def setting(self, config: Mapping[str, Any], key: str) -> Any:
        """A config value, or this format's documented default when the config leaves it out."""
        return config.get(key, self.defaults[key])


def _named(names: Mapping[str, str], template: str = "{name}") -> dict[str, str]:
    return {role: template.format(name=name, layer="{layer}", suffix="{suffix}") for role, name in names.items()}


LSTM_GATES, GRU_GATES, RNN_GATES = CUDNN_GATES["lstm"], CUDNN_GATES["gru"], CUDNN_GATES["rnn"]
GRU_GATES_ZRH: Final = ("z", "r", "h")
ONNX_LSTM_GATES: Final = ("i", "o", "f", "c")
MIOPEN_LSTM_GATES: Final = ("i", "f", "o", "c")
TF1_LSTM_GATES: Final = ("i", "c", "f", "o")  # TF's LSTMBlockCell: i, ci (the candidate), f, o
TENSORRT_LSTM_GATES: Final = ("f", "i", "c", "o")
NCNN_LSTM_GATES: Final = ("i", "f", "o", "c")  # ncnn's LSTM: I, F, O, G

CUDNN_NAMES = dict(CUDNN_TENSOR_NAMES)
CUDNN_NAMES_NO_PROJECTION = {k: v for k, v in CUDNN_NAMES.items() if k != "projection"}
KERAS_NAMES = dict(KERAS_VARIABLES)
TORCH_LAYER_NAMES = _named(TORCH_PARAMETERS, TORCH_LAYER_NAME)
TORCH_CELL_NAMES = {k: v for k, v in TORCH_PARAMETERS.items() if k != "projection"}
PADDLE_NAMES = {
    role: PADDLE_CELL_NAME.format(layer="{layer}", cell="{cell}", name=name) for role, name in PADDLE_PARAMETERS.items()
}
PADDLE_NAMES_NO_PROJECTION = {k: v for k, v in PADDLE_NAMES.items() if k != "projection"}
ONNX_NAMES = {"input_matrix": "W[d]", "recurrent_matrix": "R[d]", "bias": "B[d]"}
ONNX_DEQUANTIZED_NAMES = {
    "input_matrix": "(W[d] - W_zero_point[d]) * W_scale[d]",
    "recurrent_matrix": "(R[d] - R_zero_point[d]) * R_scale[d]",
    "bias": "B[d]",
}

OPENVINO_NAMES = {"input_matrix": "W[d]", "recurrent_matrix": "R[d]", "bias": "B[d]"}
# MLX: one tensor per role, except the GRU's b, which holds the summed r and z biases and the input side's n bias.
MLX_LSTM_NAMES = dict(MLX_PARAMETERS["lstm"])
MLX_RNN_NAMES = dict(MLX_PARAMETERS["rnn"])
_MLX_GRU = MLX_PARAMETERS["gru"]
MLX_GRU_NAMES = {
    "input_matrix": _MLX_GRU["input_matrix"],
    "recurrent_matrix": _MLX_GRU["recurrent_matrix"],
    "bias": f"{_MLX_GRU['bias']}[:2H]",
    "input_bias": f"{_MLX_GRU['bias']}[2H:]",
    "recurrent_bias": _MLX_GRU["recurrent_bias"],
}
# ncnn: direction d's slice of each blob, bias_c[d] read flat (G*H); a GRU's bias_c holds [r, z, b_in, b_hn].
NCNN_NAMES = {role: f"{blob}[d]" for role, blob in NCNN_BLOBS.items()}
NCNN_NAMES_NO_PROJECTION = {k: v for k, v in NCNN_NAMES.items() if k != "projection"}
NCNN_GRU_NAMES = {
    **{k: v for k, v in NCNN_NAMES_NO_PROJECTION.items() if k != "bias"},
    "bias": f"{NCNN_NAMES['bias']}[:2H]",
    "input_bias": f"{NCNN_NAMES['bias']}[2H:3H]",
    "recurrent_bias": f"{NCNN_NAMES['bias']}[3H:]",
}


def _tf1_names(source_class: str) -> dict[str, str]:
    """Each role's tensor as a TF1 checkpoint stores it: kernels' rows split at `I`, parts joined with |."""
    rows = {TF1_INPUT_ROWS: "[:I]", TF1_RECURRENT_ROWS: "[I:]", TF1_ALL_ROWS: "", TF1_TRANSPOSED: ".T"}
    names = {}
    for role, parts in TF1_VARIABLES[source_class].items():
        joined = " | ".join(f"{variable}{rows[part]}" for variable, part in parts)
        names[role] = f"[{joined}]" if len(parts) > 1 else joined
    return names


# TFLite: one tensor per gate and role, named as the op's inputs.
TFLITE_LSTM_NAMES = {
    **{per_gate("input_matrix", g): f"input_to_{word}_weights" for g, word in TFLITE_GATE_WORDS.items()},
    **{per_gate("recurrent_matrix", g): f"recurrent_to_{word}_weights" for g, word in TFLITE_GATE_WORDS.items()},
    **{per_gate("bias", g): f"{word}_gate_bias" for g, word in TFLITE_GATE_WORDS.items()},
    "projection": "projection_weights",
}
TFLITE_RNN_NAMES = {
    per_gate(role, gate): name
    for role, name in zip(("input_matrix", "recurrent_matrix", "bias"), TFLITE_RNN_WEIGHTS)
    for gate in CUDNN_GATES["rnn"]
}


def _joined(params: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Each role's tensor as a Flax cell stores it: the columns of its Dense params, joined with | in order."""
    return {role: f"[{' | '.join(parts)}]" if len(parts) > 1 else parts[0] for role, parts in params.items()}


FLAX_NAMES = {cell: _joined(params) for cell, params in FLAX_LINEN_CELLS.items()}
EQUINOX_LSTM_NAMES = {role: name for role, name in EQUINOX_NAMES.items() if role != "recurrent_bias"}

LSTM_MODES = {"tanh": "lstm"}
GRU_MODES = {"tanh": "gru"}
RNN_MODES = dict(NONLINEARITIES.items())
NCNN_RNN_MODES = {"tanh": NONLINEARITIES["tanh"]}  # ncnn's RNN layer computes tanh only
GATED = {"recurrent_activation": ("sigmoid",)}
ACTIVATION, ACTIVATIONS = ("activation",), ("activation", "recurrent_activation")

KERAS_LSTM_DEFAULTS = {"activation": "tanh", "recurrent_activation": "sigmoid", "use_bias": True}
KERAS_GRU_DEFAULTS = {**KERAS_LSTM_DEFAULTS, "reset_after": True}  # True since TF2 (docs/LAYOUTS.md section 7)
KERAS_SIMPLE_DEFAULTS = {"activation": "tanh", "use_bias": True}
# TensorFlow.js layers (tfjs-layers recurrent.ts): LSTMCell and GRUCell default recurrentActivation to hardSigmoid,
# clip(0.2x + 0.5), which cuDNN cannot compute; its GRUCell has no reset_after=true (it throws on one).
TFJS_GATED_DEFAULTS = {"activation": "tanh", "recurrent_activation": "hard_sigmoid", "use_bias": True}


@dataclass(frozen=True)
class KerasEra:
    """Keras versions that share their LSTM/GRU defaults (docs/LAYOUTS.md section 7).

    A setting a file's config leaves out, or that a weights file without a config cannot store, means the
    default of the version that wrote the file: `defaults` says it, or is None where the version string
    alone does not tell (tf.keras "2.2.4-tf" was TensorFlow 1.13-1.15's and 2.0/2.1's).
    """

    writer: str  # how people name these versions
    first: tuple[int, int, int]  # the first version of the era
    until: tuple[int, int, int] | None  # the first version after it
    tf: bool | None  # versions with tf.keras' "-tf" suffix only (True), without it only (False), either (None)
    defaults: Mapping[str, Any] | None
    lacks: tuple[str, ...] = ()  # settings these versions do not have: their configs never hold them

    def holds(self, number: tuple[int, int, int], tf_suffix: bool) -> bool:
        in_range = self.first <= number and (self.until is None or number < self.until)
        return in_range and self.tf in (None, tf_suffix)


RESET_BEFORE_ONLY = {"recurrent_activation": "hard_sigmoid", "reset_after": False}
KERAS_ERAS: Final = (
    KerasEra("Keras 1", (1, 0, 0), (2, 0, 0), None, RESET_BEFORE_ONLY, lacks=("reset_after",)),
    # reset_after came with Keras 2.1.5 (for CuDNNGRU weights); before it every GRU was reset-before.
    KerasEra("Keras 2.0-2.1.4", (2, 0, 0), (2, 1, 5), None, RESET_BEFORE_ONLY, lacks=("reset_after",)),
    KerasEra("Keras 2.1.5-2.2", (2, 1, 5), (2, 3, 0), False, RESET_BEFORE_ONLY),
    KerasEra("tf.keras of TensorFlow 1.x", (2, 1, 5), (2, 2, 4), True, RESET_BEFORE_ONLY),
    KerasEra("tf.keras 2.2.4-tf (TensorFlow 1.13-1.15 or 2.0/2.1)", (2, 2, 4), (2, 2, 5), True, None),
    # Keras 2.3.0: "Change default recurrent activation to sigmoid (from hard_sigmoid) in all RNN layers".
    KerasEra("Keras 2.3", (2, 3, 0), (2, 4, 0), False, {"recurrent_activation": "sigmoid", "reset_after": False}),
    KerasEra(
        "tf.keras of TensorFlow 2.2 and later, tf-keras, Keras 3",
        (2, 3, 0),
        None,
        None,
        {"recurrent_activation": "sigmoid", "reset_after": True},
    ),
)
# The settings whose default depends on the Keras version that wrote a file.
VERSIONED_DEFAULTS: Final = tuple(dict.fromkeys(key for era in KERAS_ERAS for key in era.defaults or {}))

FIXED = {"activation": "tanh"}  # classes whose activation is not a setting
TORCH_RNN_DEFAULTS = {"activation": "tanh"}  # nn.RNN's nonlinearity (not stored in a state_dict)
ONNX_GATED_DEFAULTS = {"activation": "tanh", "recurrent_activation": "sigmoid"}
ONNX_GRU_DEFAULTS = {**ONNX_GATED_DEFAULTS, "linear_before_reset": 0}  # ONNX's default is reset *before*
OPENVINO_GRU_DEFAULTS = {**ONNX_GATED_DEFAULTS, "linear_before_reset": False}  # and OpenVINO's too

RESET_BEFORE = (
    "applies the reset gate before the recurrent matrix, cuDNN applies it after "
    "(h' = tanh(Wh x + r*(Rh h + bRh) + bWh)), so no cuDNN weights compute the same function"
)

TFJS_RESET_BEFORE = f"TensorFlow.js's GRUCell has no reset_after=True: it {RESET_BEFORE}"

EXECUTORCH_UNNAMED = (
    "an ExecuTorch program keeps its constants without names: only the kernels its instructions pass them to say "
    "which is an input or a recurrent matrix, of which layer and direction, and rnnconv does not follow those; "
    "convert the checkpoint it was exported from instead"
)

# One row per line: the table is read as a table.
# fmt: off
TABLE: tuple[Row, ...] = (
    # --- cuDNN: the target. Each gate is its own row-major (H, in) block in the weight space.
    Row("cudnn", "LSTM", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES, LSTM_MODES, FIXED,
        note="linLayerID 0-3 input side, 4-7 recurrent side, 8 projection (P x H, no bias)"),
    Row("cudnn", "GRU", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES_NO_PROJECTION, GRU_MODES, FIXED,
        note="reset applied after the recurrent matrix: h' = tanh(Wh x + r*(Rh h + bRh) + bWh)"),
    Row("cudnn", "RNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES_NO_PROJECTION, RNN_MODES,
        TORCH_RNN_DEFAULTS),
    # --- Keras (Keras 2, tf-keras, Keras 3): kernels are (in, G*H), x @ kernel.
    Row("keras", "LSTM", "lstm", LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, KERAS_NAMES, LSTM_MODES,
        KERAS_LSTM_DEFAULTS, requires=GATED, unstored=ACTIVATIONS),
    Row("keras", "GRU", "gru", GRU_GATES_ZRH, MATRIX_COLUMNS, BIAS_STACKED, KERAS_NAMES, GRU_MODES,
        KERAS_GRU_DEFAULTS, requires=GATED, when={"reset_after": True},
        note="bias row 0 is the input side, row 1 the recurrent side", unstored=ACTIVATIONS),
    Row("keras", "GRU", "gru", GRU_GATES_ZRH, MATRIX_COLUMNS, BIAS_SINGLE, KERAS_NAMES, GRU_MODES,
        KERAS_GRU_DEFAULTS, requires=GATED, when={"reset_after": False}, unstored=ACTIVATIONS, reset_after=False,
        note="the reset gate applied before the recurrent product; one bias: bW + bR"),
    Row("keras", "SimpleRNN", "rnn", RNN_GATES, MATRIX_COLUMNS, BIAS_SINGLE, KERAS_NAMES, RNN_MODES,
        KERAS_SIMPLE_DEFAULTS, unstored=ACTIVATION),
    Row("keras", "CuDNNLSTM", "lstm", LSTM_GATES, MATRIX_COLUMNS_RAW, BIAS_CONCATENATED, KERAS_NAMES, LSTM_MODES,
        FIXED, note="tf-keras layer that holds cuDNN's buffers reshaped"),
    Row("keras", "CuDNNGRU", "gru", GRU_GATES_ZRH, MATRIX_COLUMNS_RAW, BIAS_CONCATENATED, KERAS_NAMES, GRU_MODES,
        FIXED, note="tf-keras layer that holds cuDNN's buffers reshaped, gates z, r, h"),
    # --- TensorFlow.js layers models (tfjs-layers): Keras' variables and gate orders, Keras 2's defaults.
    Row("tfjs", "LSTM", "lstm", LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, KERAS_NAMES, LSTM_MODES,
        TFJS_GATED_DEFAULTS, requires=GATED, note="recurrentActivation defaults to hardSigmoid: always written out"),
    Row("tfjs", "GRU", "gru", GRU_GATES_ZRH, MATRIX_COLUMNS, BIAS_SINGLE, KERAS_NAMES, {}, TFJS_GATED_DEFAULTS,
        refusal=TFJS_RESET_BEFORE, reset_after=False),
    Row("tfjs", "SimpleRNN", "rnn", RNN_GATES, MATRIX_COLUMNS, BIAS_SINGLE, KERAS_NAMES, RNN_MODES,
        KERAS_SIMPLE_DEFAULTS),
    # --- PyTorch: weights are (G*H, in), W @ x, gate order already cuDNN's.
    Row("torch", "LSTM", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_NAMES, LSTM_MODES, FIXED,
        note="PyTorch calls the cell candidate g"),
    Row("torch", "GRU", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_NAMES, GRU_MODES, FIXED,
        note="PyTorch calls the new state n"),
    Row("torch", "RNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_NAMES, RNN_MODES,
        TORCH_RNN_DEFAULTS, note="the nonlinearity is not stored in a state_dict", unstored=ACTIVATION),
    Row("torch", "LSTMCell", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_CELL_NAMES, LSTM_MODES, FIXED),
    Row("torch", "GRUCell", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_CELL_NAMES, GRU_MODES, FIXED),
    Row("torch", "RNNCell", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_CELL_NAMES, RNN_MODES,
        TORCH_RNN_DEFAULTS, unstored=ACTIVATION),
    # --- PaddlePaddle (paddle.nn.LSTM / GRU / SimpleRNN): each cell's weights (G*H, in) as PyTorch's; the projection
    # weight_ho (H, P) applied as h @ weight_ho.
    Row("paddle", "LSTM", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, PADDLE_NAMES, LSTM_MODES, FIXED,
        projection=PROJECTION_TRANSPOSED, note="gates i, f, g, o; weight_ho is cuDNN's projection transposed"),
    Row("paddle", "GRU", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SEPARATE, PADDLE_NAMES_NO_PROJECTION, GRU_MODES, FIXED,
        note="gates r, z, c; the reset gate applied after the recurrent matrix, as cuDNN"),
    Row("paddle", "SimpleRNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SEPARATE, PADDLE_NAMES_NO_PROJECTION, RNN_MODES,
        TORCH_RNN_DEFAULTS, note="the activation is not stored in a state_dict", unstored=ACTIVATION),
    # --- ExecuTorch: torch.export lifts nn.LSTM/GRU/RNN's parameters as they are, PyTorch's layout, into a program's
    # constants, which keep no names (a delegated program's weights lie in its delegate's payloads): listed, refused.
    Row("executorch", "LSTM", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_NAMES, LSTM_MODES, FIXED,
        refusal=EXECUTORCH_UNNAMED),
    Row("executorch", "GRU", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_NAMES, GRU_MODES, FIXED,
        refusal=EXECUTORCH_UNNAMED),
    Row("executorch", "RNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_NAMES, RNN_MODES,
        TORCH_RNN_DEFAULTS, refusal=EXECUTORCH_UNNAMED, unstored=ACTIVATION),
    # --- ONNX (opset 7+): W [D, G*H, in], R [D, G*H, H], B [D, 2*G*H] = [Wb, Rb]; one direction's slice d.
    Row("onnx", "LSTM", "lstm", ONNX_LSTM_GATES, MATRIX_ROWS, BIAS_CONCATENATED, ONNX_NAMES, LSTM_MODES,
        ONNX_GATED_DEFAULTS, requires=GATED),
    Row("onnx", "GRU", "gru", GRU_GATES_ZRH, MATRIX_ROWS, BIAS_CONCATENATED, ONNX_NAMES, GRU_MODES,
        ONNX_GRU_DEFAULTS, requires=GATED, when={"linear_before_reset": 1},
        note="only linear_before_reset=1 computes cuDNN's GRU"),
    Row("onnx", "GRU", "gru", GRU_GATES_ZRH, MATRIX_ROWS, BIAS_CONCATENATED, ONNX_NAMES, GRU_MODES,
        ONNX_GRU_DEFAULTS, requires=GATED, when={"linear_before_reset": 0}, reset_after=False,
        note="linear_before_reset=0 (ONNX's default): the reset gate applied before the recurrent product"),
    Row("onnx", "RNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_CONCATENATED, ONNX_NAMES, RNN_MODES, TORCH_RNN_DEFAULTS),
    # onnxruntime's com.microsoft DynamicQuantizeLSTM: int8/uint8 W [D, in, 4H] and R [D, H, 4H] (transposed), their
    # scale and zero point per direction or per column; read only when asked to dequantize.
    Row("onnx", "DynamicQuantizeLSTM", "lstm", ONNX_LSTM_GATES, MATRIX_COLUMNS, BIAS_CONCATENATED,
        ONNX_DEQUANTIZED_NAMES, LSTM_MODES, ONNX_GATED_DEFAULTS, requires=GATED,
        note="weights dequantized: the float model the quantized one approximates"),
    # --- TF1 tf.contrib.cudnn_rnn checkpoints: the canonical tensors saved beside the opaque buffer, per layer
    # and direction; kernels are [in + H, n] (x @ kernel[:I] + h @ kernel[I:]), read-only.
    Row("tf1", "CudnnLSTM", "lstm", TF1_LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _tf1_names("CudnnLSTM"), LSTM_MODES,
        FIXED, note="CudnnCompatibleLSTMCell: bias = bW + bR, used with forget_bias=0"),
    Row("tf1", "CudnnGRU", "gru", GRU_GATES, MATRIX_COLUMNS, BIAS_SINGLE_BUT_LAST, _tf1_names("CudnnGRU"), GRU_MODES,
        FIXED, note="CudnnCompatibleGRUCell: gates/bias = bW + bR of r and z; the candidate's two biases apart"),
    Row("tf1", "CudnnRNN", "rnn", RNN_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _tf1_names("CudnnRNN"), RNN_MODES,
        TORCH_RNN_DEFAULTS, unstored=ACTIVATION,
        note="CudnnRNNTanh and CudnnRNNRelu save the same basic_rnn_cell tensors: the nonlinearity is not stored"),
    # tf.compat.v1.nn.rnn_cell's own cells: gates i, j, f, o; forget_bias is added to f when the cell runs, and
    # is not in the checkpoint (the .meta graph's constant, or --forget-bias): read, it joins the f gate's bias.
    Row("tf1", "BasicLSTMCell", "lstm", TF1_LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _tf1_names("BasicLSTMCell"),
        LSTM_MODES, FIXED, note="f = sigmoid(x @ K_f + h @ K'_f + b_f + forget_bias), forget_bias not stored"),
    Row("tf1", "LSTMCell", "lstm", TF1_LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _tf1_names("LSTMCell"), LSTM_MODES,
        FIXED, note="num_proj=P: projection/kernel [H, P] (h @ it), the kernel [in + P, 4H]; forget_bias not stored"),
    Row("tf1", "GRUCell", "gru", GRU_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _tf1_names("GRUCell"), GRU_MODES,
        FIXED, reset_after=False,
        note="gates r, u (cuDNN's z), candidate: c = tanh([x, r*h] @ candidate/kernel + b), h = u*h + (1-u)*c"),
    # --- TFLite / LiteRT: the fused sequence ops, one (H, in) tensor per gate, one bias per gate (bW + bR).
    Row("tflite", "UNIDIRECTIONAL_SEQUENCE_LSTM", "lstm", LSTM_GATES, MATRIX_PER_GATE, BIAS_PER_GATE,
        TFLITE_LSTM_NAMES, LSTM_MODES, FIXED,
        note="inputs 1-4, 5-8, 12-15 and 16 of the op; fused activation TANH; no peepholes, clip or layer norm"),
    Row("tflite", "UNIDIRECTIONAL_SEQUENCE_RNN", "rnn", RNN_GATES, MATRIX_PER_GATE, BIAS_PER_GATE,
        TFLITE_RNN_NAMES, RNN_MODES, TORCH_RNN_DEFAULTS,
        note="its fused activation (TANH or RELU) is the nonlinearity"),
    # --- OpenVINO IR (opset5 sequence ops): W [D, G*H, in], R [D, G*H, H], B [D, G*H] = bW + bR; one direction's
    # slice d. A GRU with linear_before_reset keeps its new gate's two biases apart: B [D, 4H].
    Row("openvino", "LSTMSequence", "lstm", OPENVINO_LSTM_GATES, MATRIX_ROWS, BIAS_SINGLE, OPENVINO_NAMES, LSTM_MODES,
        ONNX_GATED_DEFAULTS, requires=GATED, note="one bias per gate: B = bW + bR"),
    Row("openvino", "GRUSequence", "gru", OPENVINO_GRU_GATES, MATRIX_ROWS, BIAS_SINGLE_BUT_LAST_JOINED, OPENVINO_NAMES,
        GRU_MODES, OPENVINO_GRU_DEFAULTS, requires=GATED, when={"linear_before_reset": True},
        note="only linear_before_reset=true computes cuDNN's GRU; B = [bW+bR of z, of r, bW_h, bR_h]"),
    Row("openvino", "GRUSequence", "gru", OPENVINO_GRU_GATES, MATRIX_ROWS, BIAS_SINGLE, OPENVINO_NAMES, GRU_MODES,
        OPENVINO_GRU_DEFAULTS, requires=GATED, when={"linear_before_reset": False}, reset_after=False,
        note="linear_before_reset=false (OpenVINO's default): the reset gate applied before the recurrent product; "
             "B = bW + bR"),
    Row("openvino", "RNNSequence", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SINGLE, OPENVINO_NAMES, RNN_MODES,
        TORCH_RNN_DEFAULTS, note="one bias: B = bW + bR"),
    # --- Flax linen (flax.linen.recurrent): one Dense per gate and side, kernels (in, H), x @ kernel; a role's
    # tensor is its Denses' columns joined. The activations are the module's arguments, not stored.
    Row("flax", "LSTMCell", "lstm", LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, FLAX_NAMES["lstm"], LSTM_MODES, FIXED,
        note="OptimizedLSTMCell stores the same params; the carry is (c, h)"),
    Row("flax", "GRUCell", "gru", GRU_GATES, MATRIX_COLUMNS, BIAS_SINGLE_BUT_LAST, FLAX_NAMES["gru"], GRU_MODES,
        FIXED, note="ir/iz biases are bW + bR; in/bias is b_in, hn/bias b_hn (inside the reset product)"),
    Row("flax", "SimpleCell", "rnn", RNN_GATES, MATRIX_COLUMNS, BIAS_SINGLE, FLAX_NAMES["rnn"], RNN_MODES,
        TORCH_RNN_DEFAULTS, unstored=ACTIVATION, note="activation_fn is the module's argument, not stored"),
    # --- flax.nnx (flax.nnx.nn.recurrent): LSTMCell as linen's (its forget Dense is if_); the others stack gates.
    Row("flax-nnx", "LSTMCell", "lstm", LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _joined(FLAX_NNX_LSTM), LSTM_MODES,
        FIXED),
    Row("flax-nnx", "OptimizedLSTMCell", "lstm", LSTM_GATES, MATRIX_COLUMNS, BIAS_SINGLE,
        _joined(FLAX_NNX_OPTIMIZED_LSTM), LSTM_MODES, FIXED),
    Row("flax-nnx", "GRUCell", "gru", GRU_GATES, MATRIX_COLUMNS, BIAS_SINGLE_NO_LAST_RECURRENT,
        _joined(FLAX_NNX_STACKED), GRU_MODES, FIXED,
        note="dense_h has no bias: no b_hn, so only a GRU whose b_hn is zero is written"),
    Row("flax-nnx", "SimpleCell", "rnn", RNN_GATES, MATRIX_COLUMNS, BIAS_SINGLE, _joined(FLAX_NNX_STACKED),
        RNN_MODES, TORCH_RNN_DEFAULTS, unstored=ACTIVATION, note="activation_fn is the module's argument, not stored"),
    # --- Equinox (equinox.nn): weights (G*H, in) as PyTorch's, W @ x; one bias.
    Row("equinox", "LSTMCell", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SINGLE, EQUINOX_LSTM_NAMES, LSTM_MODES, FIXED,
        note="the state is (h, c)"),
    Row("equinox", "GRUCell", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SINGLE_LAST_INPUT, EQUINOX_NAMES, GRU_MODES,
        FIXED, note="bias[2H:] is b_in alone; bias_n is b_hn"),
    # --- MLX (0.18+): mlx.nn.LSTM / GRU / RNN, W (G*H, in) as cuDNN, x @ Wx.T; one layer and direction per module.
    Row("mlx", "LSTM", "lstm", LSTM_GATES, MATRIX_ROWS, BIAS_SINGLE, MLX_LSTM_NAMES, LSTM_MODES, FIXED,
        note="MLX calls the cell candidate g; one bias = bW + bR"),
    Row("mlx", "GRU", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SINGLE_BUT_LAST, MLX_GRU_NAMES, GRU_MODES, FIXED,
        note="reset after the recurrent matrix: n = tanh(Wx_n x + b_n + r*(Wh_n h + bhn))"),
    Row("mlx", "RNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SINGLE, MLX_RNN_NAMES, RNN_MODES, TORCH_RNN_DEFAULTS,
        note="the nonlinearity is a callable, not stored with the weights", unstored=ACTIVATION),
    # --- ncnn: weight_xc [D][G*H][in], bias_c [D][G][H], weight_hc [D][G*H][out], weight_hr [D][P][H].
    Row("ncnn", "LSTM", "lstm", NCNN_LSTM_GATES, MATRIX_ROWS, BIAS_SINGLE, NCNN_NAMES, LSTM_MODES, FIXED,
        note="gates I, F, O, G; one bias = bW + bR; weight_hr projects h with hidden_size > num_output"),
    Row("ncnn", "GRU", "gru", GRU_GATES, MATRIX_ROWS, BIAS_SINGLE_BUT_LAST, NCNN_GRU_NAMES, GRU_MODES, FIXED,
        note="gates R, U, N; bias_c rows R, U (summed), then b_in and b_hn: reset after, as cuDNN"),
    Row("ncnn", "RNN", "rnn", RNN_GATES, MATRIX_ROWS, BIAS_SINGLE, NCNN_NAMES_NO_PROJECTION, NCNN_RNN_MODES,
        FIXED, note="tanh only"),
    # --- Other layouts, for `explain` (no adapter).
    Row("miopen", "LSTM", "lstm", MIOPEN_LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES_NO_PROJECTION,
        LSTM_MODES, FIXED, adapter=False, note="AMD's order; PyTorch applies it only on its MIOpen backend"),
    Row("miopen", "GRU", "gru", GRU_GATES_ZRH, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES_NO_PROJECTION, GRU_MODES,
        FIXED, adapter=False),
    Row("tensorrt", "LSTM", "lstm", TENSORRT_LSTM_GATES, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES_NO_PROJECTION,
        LSTM_MODES, FIXED, adapter=False),
    Row("tensorrt", "GRU", "gru", GRU_GATES_ZRH, MATRIX_ROWS, BIAS_SEPARATE, CUDNN_NAMES_NO_PROJECTION, GRU_MODES,
        FIXED, adapter=False),
)
# fmt: on

FORMATS: tuple[str, ...] = tuple(dict.fromkeys(row.format for row in TABLE))
FORMAT_ALIASES: Final[dict[str, str]] = {"pytorch": "torch"}  # other names people give a format
# Formats rnnconv reads, and writes where their FormatInfo names outputs (the registry holds one module for each).
ADAPTER_FORMATS: tuple[str, ...] = tuple(dict.fromkeys(row.format for row in TABLE if row.adapter))
