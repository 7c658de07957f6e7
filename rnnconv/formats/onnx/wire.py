"""ONNX's own words: its RNN ops, their inputs and attributes (by AttributeProto type code), the glue exporters put
between layers, onnxruntime's quantized LSTM, and the TensorProto element types rnnconv reads and writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

ONNX_OPSET: Final = 20  # what rnnconv writes: the newest TensorRT 10.0 takes, run by every onnxruntime since 1.17
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
ONNX_GLUE: Final = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Concat", "Identity")
# onnxruntime's quantized RNN ops (what onnxruntime.quantization.quantize_dynamic writes): op -> (domain, the op
# it quantizes), and the inputs they take after the quantized op's own (scale and zero point of W and R).
ONNX_QUANTIZED_OPS: Final[dict[str, tuple[str, str]]] = {"DynamicQuantizeLSTM": ("com.microsoft", "LSTM")}
ONNX_QUANTIZED_INPUTS: Final = ("W_scale", "W_zero_point", "R_scale", "R_zero_point")
# ONNX TensorProto element types rnnconv reads and writes, by dtype name.
# The consumers whose documented limits `--profile` checks (rnnconv.formats.onnx.profile holds the limits).
ONNX_PROFILES: Final = ("tensorrt", "mnn", "ort-web")
ONNX_ELEMENT_TYPES: Final[dict[str, int]] = {"float32": 1, "float16": 10, "float64": 11, "bfloat16": 16}


PROTOBUF_FIRST_FIELD: Final = b"\x08"  # a ModelProto begins with ir_version: field 1, a varint


def sniff(probe: Probe) -> bool:
    """A protobuf (no magic number) named .onnx."""
    return probe.head.startswith(PROTOBUF_FIRST_FIELD) and probe.path.suffix.lower() == ".onnx"
