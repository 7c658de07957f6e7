"""A loop's body and the ops it holds, computed in numpy as OpenVINO computes them (float32): each checked for its
shapes and bounded in what it computes, nothing run from the file but these ops (`Evaluator`: a body's layers, fed by
name, with its Consts). `loops` parses bodies into these and reads a Loop's cell from what they compute."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnconv.core.dtypes import decode, element_type
from rnnconv.core.reference import sigmoid
from rnnconv.errors import Unsupported, cut
from rnnconv.formats._cells import NotEvaluated, axis_of, run_ops
from rnnconv.formats._quantized import Quantization
from rnnconv.formats.openvino.decompression import decompression, dequantized_matrix, read_quantized, stored_float
from rnnconv.formats.openvino.wire import COMPUTE_TYPE, DTYPE_OF, OPENVINO_DECOMPRESSION

MAX_EVALUATED = 1 << 24  # elements of one value the evaluator computes (64 MiB of float32): any cell's are fewer
MAX_RUN = 1 << 26  # elements one run of a graph computes, at most
ABSENT = ""  # an input port no edge feeds


@dataclass
class BodyLayer:
    id: str
    kind: str
    name: str
    data: dict[str, str]
    inputs: list[str]  # the value feeding each input port ("layer:port"), ABSENT where none does
    outputs: list[str]  # the value of each output port
    ports: list[str]  # the input ports' ids


@dataclass(frozen=True)
class Part:
    """How a port map slices an input over the iterations, or concatenates an output (its `axis`, `start`, `end`,
    `stride` and `part_size`)."""

    axis: int
    start: int
    end: int
    stride: int
    part_size: int

    def reversed(self) -> bool | None:
        """Whether it goes over all of axis 0 one entry at a time backwards (False: forwards), as OpenVINO's frontends
        write it (start 0, end -1, stride 1; start -1, end 0, stride -1); None where it goes otherwise (other
        bounds of the whole axis, which OpenVINO's CPU plugin counts otherwise than its port map says, among them)."""
        if (self.axis, self.part_size) != (0, 1):
            return None
        return {(0, -1, 1): False, (-1, 0, -1): True}.get((self.start, self.end, self.stride))

    def said(self) -> str:
        return f"axis {self.axis}, start {self.start}, end {self.end}, stride {self.stride}, part_size {self.part_size}"


@dataclass
class Body:
    """A Loop's body graph, its port map and back edges, each checked against the body's layers."""

    layers: dict[str, BodyLayer]
    order: list[BodyLayer]  # its computing layers, each after the layers it reads
    inputs: dict[int, str]  # the Loop's input port -> the body Parameter's value
    outputs: dict[int, str]  # the Loop's output port -> the value the body Result gives
    condition: str | None  # the value of the Result that says whether to go on
    back: dict[str, str]  # a body Parameter's value -> the value its Result gives the next step
    sliced: dict[int, Part] = dataclasses.field(default_factory=dict)  # input ports sliced over the iterations
    concatenated: dict[int, Part] = dataclasses.field(default_factory=dict)  # outputs concatenated over them


def flag(data: dict[str, str], key: str) -> bool:
    return data.get(key, "false").strip().lower() == "true"


def _mask(data: dict[str, str], key: str, rank: int) -> list[int]:
    text = data.get(key, "").strip()
    bits = [int(b) for b in text.replace(" ", "").split(",") if b] if text else []
    if any(b not in (0, 1) for b in bits):
        raise NotEvaluated(f"{key} {text!r}")
    return bits + [0] * (rank - len(bits))


def _integers(value: np.ndarray) -> list[int]:
    if value.dtype.kind not in "iu" or value.size > 64:
        raise NotEvaluated("a shape or index that is no short list of integers")
    return [int(v) for v in value.reshape(-1)]


def _strided_slice(
    data: dict[str, str], value: np.ndarray, begin: list[int], end: list[int], strides: list[int]
) -> Any:
    count = len(begin)
    if not count == len(end) == len(strides) or count > value.ndim or 0 in strides:
        raise NotEvaluated("StridedSlice of other lengths than its value's")
    begin_mask, end_mask = _mask(data, "begin_mask", count), _mask(data, "end_mask", count)
    if any(_mask(data, "new_axis_mask", count)) or any(_mask(data, "ellipsis_mask", count)):
        raise NotEvaluated("StridedSlice with new axes or an ellipsis")
    shrink = _mask(data, "shrink_axis_mask", count)
    index: list[Any] = []
    for axis in range(count):
        if shrink[axis]:
            index.append(begin[axis])
            continue
        start = None if begin_mask[axis] else begin[axis]
        stop = None if end_mask[axis] else end[axis]
        index.append(slice(start, stop, strides[axis]))
    return value[tuple(index)]


def _slice(value: np.ndarray, start: list[int], stop: list[int], step: list[int], axes: list[int]) -> np.ndarray:
    if not len(start) == len(stop) == len(step) == len(axes) or 0 in step:
        raise NotEvaluated("Slice of other lengths than its axes'")
    index: list[Any] = [slice(None)] * value.ndim
    for a, b, s, axis in zip(start, stop, step, axes):
        index[axis_of(axis, value.ndim)] = slice(a, b, s)
    return value[tuple(index)]


def _reshaped(value: np.ndarray, shape: list[int], special_zero: bool) -> np.ndarray:
    if special_zero:
        shape = [value.shape[i] if n == 0 and i < value.ndim else n for i, n in enumerate(shape)]
    if any(n < -1 for n in shape):
        raise NotEvaluated("Reshape to a negative size")
    return value.reshape(shape)


def _gather(value: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    if batch_dims or indices.dtype.kind not in "iu":
        raise NotEvaluated("Gather of batches")
    axis = axis_of(axis, value.ndim)
    size = value.shape[axis]
    if np.any(indices < -size) or np.any(indices >= size):
        raise NotEvaluated("Gather outside its value")
    return np.take(value, np.where(indices < 0, indices + size, indices), axis=axis)


def _scatter_update(value: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int) -> np.ndarray:
    axis = axis_of(axis, value.ndim)
    if indices.dtype.kind not in "iu" or np.any(indices < 0) or np.any(indices >= value.shape[axis]):
        raise NotEvaluated("ScatterUpdate outside its value")
    result = np.moveaxis(value.copy(), axis, 0)
    result[indices] = np.moveaxis(updates, axis, 0) if indices.ndim == 0 and axis else updates
    return np.moveaxis(result, 0, axis)


def _reverse_sequence(value: np.ndarray, lengths: np.ndarray, data: dict[str, str]) -> np.ndarray:
    """Each batch entry's first `lengths` steps reversed (ReverseSequence-1)."""
    texts = data.get("batch_axis", "0"), data.get("seq_axis", "1")
    if not all(t.lstrip("-").isdigit() and len(t) < 4 for t in texts):
        raise NotEvaluated("ReverseSequence of no axes")
    batch_axis, seq_axis = (axis_of(int(t), value.ndim) for t in texts)
    counts = _integers(lengths) if lengths.size <= 64 else []
    if batch_axis == seq_axis or len(counts) != value.shape[batch_axis]:
        raise NotEvaluated("ReverseSequence of lengths its value does not have")
    moved = np.moveaxis(value, (batch_axis, seq_axis), (0, 1)).copy()
    for entry, count in enumerate(counts):
        if not 0 <= count <= moved.shape[1]:
            raise NotEvaluated("ReverseSequence of lengths its value does not have")
        moved[entry, :count] = moved[entry, :count][::-1]
    return np.moveaxis(moved, (0, 1), (batch_axis, seq_axis))


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sigmoid": sigmoid,
    "Tanh": np.tanh,
    "Relu": lambda v: np.maximum(v, 0),
    "Negative": np.negative,
    "ShapeOf": lambda v: np.asarray(v.shape, np.int64),
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Subtract": np.subtract,
    "Multiply": np.multiply,
    "Less": np.less,
    "LessEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterEqual": np.greater_equal,
    "LogicalAnd": np.logical_and,
}


def evaluate(layer: BodyLayer, arguments: list[np.ndarray | None]) -> list[np.ndarray]:
    """One body layer computed in numpy, for the ops a frontend's RNN loop holds."""
    kind, data = layer.kind, layer.data
    values = [a for a in arguments if a is not None]
    if any(a.size > MAX_EVALUATED for a in values):
        raise NotEvaluated("a value larger than a cell's")
    if kind == "Broadcast" and len(values) >= 2 and data.get("mode", "numpy") in ("numpy", "bidirectional"):
        shape = _integers(values[1])
        if math.prod(shape) > MAX_EVALUATED or any(n < 0 for n in shape):
            raise NotEvaluated("Broadcast to a shape larger than a cell's")
        if data.get("mode") == "bidirectional":
            shape = list(np.broadcast_shapes(values[0].shape, tuple(shape)))
        return [np.broadcast_to(values[0], shape).copy()]
    if any(a is None for a in arguments):
        raise NotEvaluated(f"{kind} with an input left out")
    if kind == "MatMul" and len(values) == 2:
        a, b = values
        if a.ndim < 1 or b.ndim < 1:
            raise NotEvaluated("MatMul of a scalar")
        a = np.swapaxes(a, -1, -2) if flag(data, "transpose_a") and a.ndim > 1 else a
        b = np.swapaxes(b, -1, -2) if flag(data, "transpose_b") and b.ndim > 1 else b
        return [np.matmul(a, b)]
    if kind in BINARY and len(values) == 2:
        return [BINARY[kind](values[0], values[1])]
    if kind in UNARY and len(values) == 1:
        return [UNARY[kind](values[0])]
    if kind == "Convert" and len(values) == 1:
        destination = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "boolean": np.bool_}
        if data.get("destination_type") not in destination:
            raise NotEvaluated(f"Convert to {data.get('destination_type')}")
        return [values[0].astype(destination[data["destination_type"]])]
    if kind == "Split" and len(values) == 2:
        count = int(data.get("num_splits", "0")) if data.get("num_splits", "").isdigit() else 0
        axis = axis_of(_integers(values[1])[0], values[0].ndim)
        if count < 1 or values[0].shape[axis] % count:
            raise NotEvaluated("Split into parts its value does not divide into")
        return list(np.split(values[0], count, axis=axis))
    if kind == "VariadicSplit" and len(values) == 3:
        axis, sizes = axis_of(_integers(values[1])[0], values[0].ndim), _integers(values[2])
        if sizes.count(-1) == 1:  # the part the others leave
            sizes[sizes.index(-1)] = values[0].shape[axis] - sum(s for s in sizes if s != -1)
        if any(s < 0 for s in sizes) or sum(sizes) != values[0].shape[axis]:
            raise NotEvaluated("VariadicSplit of sizes its value does not have")
        return list(np.split(values[0], np.cumsum(sizes)[:-1], axis=axis))
    if kind == "Concat" and values:
        axis = int(data.get("axis", "0")) if data.get("axis", "").lstrip("-").isdigit() else 0
        return [np.concatenate(values, axis=axis_of(axis, values[0].ndim))]
    if kind == "Reshape" and len(values) == 2:
        return [_reshaped(values[0], _integers(values[1]), flag(data, "special_zero"))]
    if kind in ("Unsqueeze", "Squeeze") and len(values) == 2:
        axes = _integers(values[1])
        if kind == "Unsqueeze":
            rank = values[0].ndim + len(axes)
            return [np.expand_dims(values[0], tuple(axis_of(a, rank) for a in axes))]
        return [np.squeeze(values[0], tuple(axis_of(a, values[0].ndim) for a in axes))]
    if kind == "Gather" and len(values) == 3:
        return [_gather(values[0], values[1], _integers(values[2])[0], int(data.get("batch_dims", "0") or 0))]
    if kind == "StridedSlice" and len(values) >= 3:
        strides = _integers(values[3]) if len(values) > 3 else [1] * values[1].size
        return [np.asarray(_strided_slice(data, values[0], _integers(values[1]), _integers(values[2]), strides))]
    if kind == "Slice" and len(values) in (4, 5):
        axes = _integers(values[4]) if len(values) == 5 else list(range(values[1].size))
        return [_slice(values[0], _integers(values[1]), _integers(values[2]), _integers(values[3]), axes)]
    if kind == "ScatterUpdate" and len(values) == 4:
        return [_scatter_update(values[0], values[1], values[2], _integers(values[3])[0])]
    if kind == "ReverseSequence" and len(values) == 2:
        return [_reverse_sequence(values[0], values[1], data)]
    if kind == "Transpose" and len(values) == 2:
        order = _integers(values[1])
        if sorted(order) != list(range(values[0].ndim)):
            raise NotEvaluated("Transpose by no permutation of its axes")
        return [np.transpose(values[0], order)]
    raise NotEvaluated(kind)


class Evaluator:
    """A body's layers computed in numpy from values fed by name ("layer:port") and its Consts (and the quantized
    weights decompressed from them: `decompressed`)."""

    def __init__(self, ir: Any, body: Body, budget: list[int] | None = None):
        self.ir, self.body = ir, body
        self.constants: dict[str, np.ndarray | None] = {}
        self.budget = budget  # elements all its runs together may compute (None: MAX_RUN a run)
        self.quantized: dict[str, tuple[Any, Quantization]] = {}  # value -> its weight as stored, its quantization
        self.types: dict[str, str] = {}  # a float constant's value -> the dtype its Const stores it in

    def producer(self, layer: BodyLayer, index: int) -> BodyLayer | None:
        """The body's layer that feeds input `index` of a layer, or None."""
        value = layer.inputs[index] if index < len(layer.inputs) else ABSENT
        return None if value == ABSENT else self.body.layers.get(value.split(":", maxsplit=1)[0])

    def decompressed(self, value: str) -> np.ndarray | None:
        """The floats of the quantized weight whose decompression gives `value`, scale * (q - zero_point) exactly
        (read and checked by the IR: BadInput or Unsupported for a damaged one), kept as the constant it is and its
        quantization in `quantized`; None where no decompression gives it."""
        layer = self.body.layers.get(value.split(":", maxsplit=1)[0])
        if layer is None or not decompression(layer, self.producer):
            return None
        what = f"its body's weight {cut(layer.name)!r}"
        stored = read_quantized(self.ir.const, layer, what, self.producer)
        values, quant = dequantized_matrix(stored, what)
        self.quantized[value] = (stored, quant)
        self.constants[value] = values
        return values

    def constant(self, value: str) -> np.ndarray | None:
        """The values of the Const that gives `value`, or of the f16 (bf16) Const a Convert to f32 widens into it
        (`ov.save_model`'s default compression), floats as float32; their stored type's name in `types`; None where
        neither gives it."""
        if value not in self.constants:
            layer = self.body.layers.get(value.split(":", maxsplit=1)[0])
            found = None
            if layer is not None and layer.kind == "Const":
                try:
                    stored, etype = self.ir.const(layer)
                except Unsupported:
                    stored = None
                if stored is not None and stored.size <= MAX_EVALUATED:
                    found = np.asarray(stored)
                    found = found.astype(np.float32) if found.dtype.kind == "f" else found.copy()
                    if found.dtype.kind == "f":
                        self.types[value] = DTYPE_OF[etype]
            elif layer is not None and self._widened(layer):
                try:
                    stored, dtype = stored_float(self.ir.const, layer, cut(layer.name), self.producer)
                except Unsupported:
                    stored = None
                if stored is not None and stored.size <= MAX_EVALUATED:
                    found = decode(np.asarray(stored), element_type(dtype)).astype(np.float32)
                    self.types[value] = dtype
            self.constants[value] = found
        return self.constants[value]

    def _widened(self, layer: BodyLayer) -> bool:
        """Whether a layer is a Convert to f32 of a Const (what stored_float reads as the Const's floats)."""
        inner = self.producer(layer, 0)
        return (
            layer.kind == OPENVINO_DECOMPRESSION
            and layer.data.get("destination_type") == COMPUTE_TYPE
            and len(layer.inputs) == 1
            and inner is not None
            and inner.kind == "Const"
        )

    def run(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
        """Every value computed from `feeds` and Consts, and the values the layers reached also need (at most
        MAX_RUN elements computed in a run, or its budget for all its runs: a hostile graph cannot make them long)."""
        budget = [MAX_RUN] if self.budget is None else self.budget

        def bounded(layer: BodyLayer, arguments: list[np.ndarray | None]) -> list[np.ndarray]:
            if budget[0] <= 0:
                raise NotEvaluated("more than a cell's loop computes")
            results = evaluate(layer, arguments)
            budget[0] -= sum(np.size(r) for r in results)
            return results

        return run_ops(self.body.order, feeds, lambda op: (op.inputs, op.outputs), self.constant, bounded, ABSENT)
