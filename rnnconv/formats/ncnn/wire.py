"""ncnn's own words: the .param's magic number, layer types and keys, the .bin's blob tags, the files beside a
model, and the layers whose weights the reader can size (docs/LAYOUTS.md section "ncnn").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from rnnconv.table.constants import GRU, LSTM, RNN

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

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
# Gemm (what pnnx writes for nn.Linear on a sequence): its constant A, B and C are blobs of the .bin, each a flagged
# load sized by its own params. Keys: transA, constantA, constantB, constantC, constantM, constantN, constantK,
# constant_broadcast_type_C, quantize_term; C's values by broadcast type (-1: none loaded).
NCNN_GEMM: Final = "Gemm"
NCNN_GEMM_KEYS: Final[dict[str, int]] = {
    "constantA": 4,
    "constantB": 5,
    "constantC": 6,
    "constantM": 7,
    "constantN": 8,
    "constantK": 9,
    "constant_broadcast_type_C": 10,
    "quantize_term": 18,
}
# Each constant in .bin order: the key that says it is one, and the keys that size it (C's: by its broadcast type).
NCNN_GEMM_CONSTANTS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "A": ("constantA", ("constantM", "constantK")),
    "B": ("constantB", ("constantK", "constantN")),
    "C": ("constantC", ()),
}
NCNN_GEMM_C: Final[dict[int, tuple[str, ...]]] = {
    0: (),
    1: ("constantM",),
    2: ("constantM",),
    3: ("constantM", "constantN"),
    4: ("constantN",),
}
NCNN_MEMORY_KEYS: Final = (0, 1, 11, 2, 21)  # MemoryData: w, h, d, c, load_type (1: raw floats, no flag)
KIND: Final = "ncnn-param"  # the file kind a source records
RECURRENT: Final = {layer: cell for cell, layer in NCNN_LAYERS.items()}
ARRAY_KEY: Final = -23300  # keys at or below it hold arrays (-23300 - id = n,v1,v2,...)
INT8_TAG, SCALED_TAG = 0x000D4B38, 0x0002C056  # int8 data; float32 with extra scaling (read as float32)
QUANTIZED_TABLE: Final = 256 * 4
IN, OUT = "in0", "out0"  # the input and output blobs of a model rnnconv writes
# ncnn's options that store or compute in 16 bits where the CPU can (fp16 on ARM): off, for float32 throughout
NARROW_OPTIONS: Final = ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage")


def align(n: int) -> int:
    """Bytes a blob of n bytes takes in the .bin: padded to 4."""
    return (n + 3) // 4 * 4


def sidecar_of(param: Path) -> Path:
    return param.with_name(param.name + NCNN_SIDECAR)


def bin_of(param: Path) -> Path:
    return param.with_suffix(".bin")


def sniff(probe: Probe) -> bool:
    """A text file beginning with ncnn's magic number."""
    return probe.head.split(b"\n", 1)[0].strip() == str(NCNN_MAGIC).encode()
