"""The OpenVINO IR's own words: IR and opset versions, the sequence ops, their directions, default activations and
weight ports, the names of the graph rnnconv writes, element types and precisions, and the glue between layers
(docs/LAYOUTS.md section 11).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

import numpy as np

from rnnconv.core.dtypes import element_type

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

OPENVINO_IR_VERSION: Final = "11"  # what rnnconv writes (<net version="11">)
OPENVINO_IR_VERSIONS: Final = ("10", "11")  # what it reads: v10 and v11 name layers, Consts and edges alike
OPENVINO_OPS: Final[dict[str, str]] = {"lstm": "LSTMSequence", "gru": "GRUSequence", "rnn": "RNNSequence"}
OPENVINO_OPSET: Final = "opset5"  # the version of the sequence ops rnnconv writes (opset5 defines all three)
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
OPENVINO_WEIGHT_NAMES: Final = {"input_matrix": "W", "recurrent_matrix": "R", "bias": "B"}  # as the opset names them
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
    "i8": "I8",
    "u8": "U8",
}
OPENVINO_INTEGERS: Final[dict[str, str]] = {"i32": "<i4", "i64": "<i8"}  # the integer Consts the reader reads
# Ops that only move a layer's output into the next layer's input, and the one op between a Const and a weight
# input the reader looks through (what ov.save_model's compress_to_fp16 writes: f16 Const -> Convert to f32).
OPENVINO_GLUE: Final = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Concat")
OPENVINO_DECOMPRESSION: Final = "Convert"
# Quantized weights as nncf.quantize writes them: an integer Const -> Convert to f32 -> (Subtract a zero point,
# itself a Convert of an integer Const, as nncf.compress_weights writes it) -> Multiply by an f32 Const of scales,
# one or one per output row; or all of it in f16 and the product Converted to f32 (what nncf.compress_weights writes
# of a MatMul's weights by default); the integer types by the names `formats._quantized` gives them.
OPENVINO_SCALE, OPENVINO_ZERO_POINT = "Multiply", "Subtract"
OPENVINO_QUANTIZED: Final[dict[str, str]] = {"i8": "int8", "u8": "uint8"}
QUANTIZED_ETYPES: Final = {name: etype for etype, name in OPENVINO_QUANTIZED.items()}  # what --quantize writes
# What the CPU plugin computes a sequence op with: the f32 products of its weights' decompression, rounding no input
# at run time (the record's `inputs`, core.bound.INPUT_ROUNDINGS): an op of quantized weights runs bit for bit as the
# op of f32 Consts of those products (docs/formats/openvino.md, "What the CPU plugin computes with quantized weights").
OPENVINO_KERNEL_INPUTS: Final = "float"
# An nncf IR's own graph, compiled with the CPU plugin's defaults, runs its sequence ops on the plugin's low-precision
# path (a u8 `RNNSeq`), which computes another RNN than the file holds (docs/formats/openvino.md#cpu-plugin-own-graph);
# this setting of compile_model takes the path off, the ops then computed in f32.
OPENVINO_LOW_PRECISION_OFF: Final = {"LP_TRANSFORMS_MODE": False}
OPENVINO_F32: Final = {"INFERENCE_PRECISION_HINT": "f32"}  # not bf16, the default on CPUs with bfloat16 units
OPENVINO_LOW_PRECISIONS: Final = ("u8", "i8")  # a compiled `RNNSeq`'s runtimePrecision on that path
OPENVINO_ZERO_POINT_TYPES: Final = ("i8", "u8", "i32", "i64")
# An activation rounded to `levels` values (nncf.quantize's on X and between layers): its inputs, the value and its
# input_low, input_high, output_low, output_high.
OPENVINO_ROUNDING: Final = "FakeQuantize"
OPENVINO_ROUNDING_INPUTS: Final = 5
SEQUENCE_OPS: Final = {op: cell for cell, op in OPENVINO_OPS.items()}
DTYPE_OF: Final = {etype: name for name, etype in OPENVINO_ELEMENT_TYPES.items()}
STORAGE: Final = {  # the numpy type of each element type's values in the .bin
    **{OPENVINO_ELEMENT_TYPES[name]: element_type(name).storage for name in OPENVINO_ELEMENT_TYPES},
    **{etype: np.dtype(storage) for etype, storage in OPENVINO_INTEGERS.items()},
    "boolean": np.dtype(np.bool_),  # a loop's condition
    "u8": np.dtype(np.uint8),  # a Broadcast's axes in a loop's body, a quantized weight
}
QUANTIZED_STORAGE: Final = {"i8": np.dtype(np.int8), "u8": np.dtype(np.uint8)}  # read only as quantized weights
INDEX_TYPE: Final = next(iter(OPENVINO_INTEGERS))  # i32: sequence_lens
SHAPE_TYPE: Final = list(OPENVINO_INTEGERS)[-1]  # i64: perms, shapes, axes
COMPUTE_TYPE: Final = OPENVINO_ELEMENT_TYPES["float32"]  # what the graph computes in
HALF_TYPE: Final = OPENVINO_ELEMENT_TYPES["float16"]  # a decompression's scales and zero points in nncf's f16 form
# The largest f16: a decompression in f16 whose products pass it gives inf where OpenVINO computes in f16 (its CPU
# plugin, at f32 precision, computes the products in f32)
HALF_LARGEST: Final = float(np.finfo(np.float16).max)

SNIFF_BYTES: Final = 4096  # how much of an .xml is looked at for an IR's <net version=...>
NET: Final = re.compile(rb"<net\b[^>]*\bversion\s*=\s*[\"'](\d+)[\"']")


def sniff(probe: Probe) -> bool:
    """An XML file named .xml whose first bytes hold an IR's <net version=...>."""
    if probe.path.suffix.lower() != ".xml" or not probe.head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return False
    with open(probe.path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    return NET.search(head) is not None
