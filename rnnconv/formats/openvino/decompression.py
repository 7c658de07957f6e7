"""Weights as an OpenVINO IR stores them, read: float Consts, as they are or decompressed by a Convert to f32
(`stored_float`), and quantized weights as nncf writes them: an integer Const -> Convert -> [Subtract a Convert
of an integer Const of zero points] -> Multiply by a Const of scales, in f32 (nncf.quantize's, before a sequence op)
or in f16 with the product Converted to f32 (nncf.compress_weights's default, of a MatMul's weights); each part
checked, found in any graph (the IR's own, a Loop's body) by the layer that feeds each input (`Producer`), and a
MatMul's weights dequantized exactly (`formats._quantized`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats._quantized import Quantization, dequantized, quantization
from rnnconv.formats.openvino.wire import (
    COMPUTE_TYPE,
    DTYPE_OF,
    HALF_LARGEST,
    HALF_TYPE,
    OPENVINO_DECOMPRESSION,
    OPENVINO_QUANTIZED,
    OPENVINO_SCALE,
    OPENVINO_ZERO_POINT,
    OPENVINO_ZERO_POINT_TYPES,
    QUANTIZED_STORAGE,
    STORAGE,
)
from rnnconv.safeio.inputs import FileArray

ZERO_POINT_STORAGE = {**STORAGE, **QUANTIZED_STORAGE}  # a zero point's Const: of the weight's type, or i32, i64
Producer = Callable[[Any, int], Any]  # the layer that feeds input `index` of a layer, in one graph (None: none)
Const = Callable[..., tuple[FileArray, str]]  # a Const layer's values (its storage types given) and element type


@dataclass(frozen=True)
class Quantized:
    """A weight as nncf stores it: its integers, their element type, its scales and zero points (one, or one per
    output row or column), each still in the .bin, and the type of its scales (f16: the product converted to f32)."""

    values: FileArray
    etype: str
    scales: FileArray
    zero_points: tuple[FileArray, str] | None  # with its element type; None: no Subtract
    scale_type: str = COMPUTE_TYPE  # f32, or f16 (its product converted to f32)


def stored_float(const: Const, layer: Any, what: str, producer: Producer) -> tuple[FileArray, str]:
    """A float weight as the IR stores it, from the layer that gives it: a Const, or a Convert of one
    (`ov.save_model`'s default compress_to_fp16: an f16 Const decompressed to f32), its values still in the .bin
    and their dtype's name (float16 for an f16 Const: the Convert widens it exactly)."""
    if layer.kind == OPENVINO_DECOMPRESSION:
        if layer.data.get("destination_type") not in DTYPE_OF:
            raise Unsupported(f"{what} is converted to {layer.data.get('destination_type')}, not a float type")
        inner = producer(layer, 0)
        if inner is None or inner.kind != "Const":
            raise Unsupported(f"{what} is a Convert of a {inner.kind if inner else 'missing'} layer, not a Const")
        layer = inner
    elif layer.kind != "Const":
        raise Unsupported(
            f"{what} is computed by a {layer.kind} layer, not stored in a Const: rnnconv reads weights stored as "
            f"they are (or f16 Consts decompressed by Convert, or integers multiplied by their scales)"
        )
    values, etype = const(layer)
    if etype not in DTYPE_OF:
        raise Unsupported(f"{what} holds {etype} values, not floats")
    return values, DTYPE_OF[etype]


def decompression(layer: Any, producer: Producer) -> bool:
    """Whether a layer ends a quantized weight's decompression as nncf writes it: a Multiply of a Const (its scales)
    and a Convert or Subtract (its integers), or the Convert to f32 of one (nncf.compress_weights's f16 form)."""
    if layer.kind == OPENVINO_DECOMPRESSION and layer.data.get("destination_type") == COMPUTE_TYPE:
        inner = producer(layer, 0)
        return inner is not None and inner.kind == OPENVINO_SCALE and decompression(inner, producer)
    if layer.kind != OPENVINO_SCALE or len(layer.inputs) != 2:
        return False
    kinds = sorted(getattr(producer(layer, index), "kind", "") for index in range(2))
    return kinds in (["Const", OPENVINO_DECOMPRESSION], ["Const", OPENVINO_ZERO_POINT])


def fed(producer: Producer, layer: Any, index: int, kind: str, what: str) -> Any:
    """The layer of `kind` that feeds input `index` of a layer (BadInput where another does)."""
    found = producer(layer, index)
    if found is None or found.kind != kind:
        given = found.kind if found is not None else "nothing"
        raise BadInput(f"{what} is fed by {given}, where a quantized weight's {kind} is")
    return found


def read_quantized(const: Const, top: Any, what: str, producer: Producer) -> Quantized:
    """A weight nncf stores as integers: Convert(Const) [- Convert(Const zero point)] times a Const of scales, in
    f32, or in f16 with the product Converted to f32 (nncf.compress_weights's, `top` that Convert); each part
    checked (the values' and scales' ranges are checked when dequantized). `producer`: the layer feeding a
    layer's input, in the graph `top` is in (the IR's own by default, or a Loop's body)."""
    multiply, scale_type = top, COMPUTE_TYPE
    if top.kind == OPENVINO_DECOMPRESSION:  # nncf.compress_weights's f16 decompression, converted to f32 last
        if top.data.get("destination_type") != COMPUTE_TYPE:
            raise Unsupported(f"{what} is converted to {top.data.get('destination_type')}, not {COMPUTE_TYPE}")
        multiply = fed(producer, top, 0, OPENVINO_SCALE, f"{what}: its {OPENVINO_DECOMPRESSION}")
        scale_type = HALF_TYPE
    sources = [producer(multiply, index) for index in range(2)]
    if len(multiply.inputs) != 2 or any(s is None for s in sources):
        raise BadInput(f"{what} is a {OPENVINO_SCALE} without its two inputs")
    scale_at = next((i for i, s in enumerate(sources) if s is not None and s.kind == "Const"), None)
    if scale_at is None:
        raise Unsupported(
            f"{what} is a {OPENVINO_SCALE} of two computed values, not of quantized integers by a Const of scales"
        )
    scale_layer, values_layer = sources[scale_at], sources[1 - scale_at]
    assert scale_layer is not None and values_layer is not None
    scales, found_type = const(scale_layer)
    if found_type != scale_type:
        raise Unsupported(
            f"{what}: its scales are {found_type} values, not the {scale_type} ones rnnconv reads "
            + ("of a product converted to f32" if scale_type == HALF_TYPE else "(f16 ones are converted to f32)")
        )
    zero_points = None
    if values_layer.kind == OPENVINO_ZERO_POINT:
        subtract = values_layer
        values_layer = fed(producer, subtract, 0, OPENVINO_DECOMPRESSION, f"{what}: its {OPENVINO_ZERO_POINT}")
        zero = fed(producer, subtract, 1, OPENVINO_DECOMPRESSION, f"{what}: its zero point")
        if zero.data.get("destination_type") != scale_type:
            raise Unsupported(
                f"{what}: its zero points are converted to {zero.data.get('destination_type')}, not {scale_type} "
                f"as its scales are"
            )
        zero_const = fed(producer, zero, 0, "Const", f"{what}: its zero point's Convert")
        zero_points = const(zero_const, {t: ZERO_POINT_STORAGE[t] for t in OPENVINO_ZERO_POINT_TYPES})
    if values_layer.kind != OPENVINO_DECOMPRESSION:
        raise Unsupported(f"{what} is a {OPENVINO_SCALE} of a {values_layer.kind} layer, not of Converted integers")
    if values_layer.data.get("destination_type") != scale_type:
        raise Unsupported(
            f"{what}: its integers are converted to {values_layer.data.get('destination_type')}, not "
            f"{scale_type} as its scales are"
        )
    integers = fed(producer, values_layer, 0, "Const", f"{what}: its Convert")
    values, etype = const(integers, QUANTIZED_STORAGE)
    return Quantized(values, etype, scales, zero_points, scale_type)


def dequantized_matrix(weight: Quantized, what: str) -> tuple[np.ndarray, Quantization]:
    """A quantized MatMul weight of a Loop's body ((rows, columns)): its floats, scale * (q - zero_point),
    exactly (float64), and its quantization: one scale and zero point, or one per row ((rows, 1)) or per column
    ((1, columns)), as nncf.compress_weights gives a MatMul's weights one per output channel."""
    q = weight.values
    if q.ndim != 2:
        raise BadInput(f"{what} has the quantized shape {list(q.shape)}, not (rows, columns)")
    axis = None
    for part, values in (("scales", weight.scales), ("zero points", weight.zero_points and weight.zero_points[0])):
        if values is None or values.size == 1:
            continue
        along = [a for a in range(2) if tuple(values.shape) == tuple(q.shape[a] if i == a else 1 for i in range(2))]
        if not along or axis not in (None, along[0]):
            raise BadInput(
                f"{what}: its {part} have the shape {list(values.shape)}, neither one nor one per row or column "
                f"of its {list(q.shape)} integers"
            )
        axis = along[0]
    scales = np.asarray(weight.scales, np.float32).reshape(-1)
    zeros = np.zeros(1, np.int64) if weight.zero_points is None else np.asarray(weight.zero_points[0]).reshape(-1)
    count = max(scales.size, zeros.size)  # one of them per channel, the other one for all: repeated
    scales = np.repeat(scales, count) if scales.size == 1 else scales
    zeros = np.repeat(zeros, count) if zeros.size == 1 else zeros
    quant = quantization(  # nncf.compress_weights's symmetric scales carry a sign
        scales.tolist(), zeros.tolist(), axis or 0, tuple(q.shape), OPENVINO_QUANTIZED[weight.etype], what, True
    )
    floats = dequantized(np.asarray(q), quant)
    in_f16_range(floats, weight, what)
    return floats, quant


def in_f16_range(values: np.ndarray, weight: Quantized, what: str) -> None:
    """Unsupported where a decompression in f16 gives a product f16 cannot hold: inf where OpenVINO computes in f16,
    a finite float where it computes in f32 (its CPU plugin): no one value the file stands for."""
    largest = float(np.max(np.abs(values), initial=0.0))
    if weight.scale_type == HALF_TYPE and largest > HALF_LARGEST:
        raise Unsupported(
            f"{what} is decompressed in f16 to values up to {largest:.6g}, beyond f16's largest ({HALF_LARGEST:.0f}): "
            f"OpenVINO gives inf where it computes in f16 and the product where it computes in f32"
        )
