"""An OpenVINO IR being built: Parameters, Consts (their values streamed to the .bin one part at a time), the
sequence ops and the glue between them, as IR text; `build` stacks layers into rnnconv's graph, x (batch, seq, input)
to y, h_n, c_n."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import quoteattr

import numpy as np

from rnnconv.formats.openvino.wire import (
    COMPUTE_TYPE,
    INDEX_TYPE,
    OPENVINO_C_N,
    OPENVINO_DECOMPRESSION,
    OPENVINO_DIRECTIONS,
    OPENVINO_H_N,
    OPENVINO_INITIAL_C,
    OPENVINO_INITIAL_H,
    OPENVINO_IR_VERSION,
    OPENVINO_LENGTHS,
    OPENVINO_OPSET,
    OPENVINO_PRECISIONS,
    OPENVINO_ROUNDING,
    OPENVINO_SCALE,
    OPENVINO_WEIGHT_PORTS,
    OPENVINO_X,
    OPENVINO_Y,
    OPENVINO_ZERO_POINT,
    QUANTIZED_STORAGE,
    SEQUENCE_OPS,
    SHAPE_TYPE,
    STORAGE,
)
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import write_array
from rnnconv.table.constants import LSTM

Parts = Callable[[], Iterator[np.ndarray | FileArray]]  # a Const's values, in storage order, a part at a time


@dataclass
class Tensor:
    """A Const's values: its element type, shape, and its bytes as arrays (of the storage type, C order) that
    follow each other, yielded one at a time so that a writer holds one part."""

    etype: str
    shape: tuple[int, ...]
    parts: Parts

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * {**STORAGE, **QUANTIZED_STORAGE}[self.etype].itemsize


@dataclass
class QuantizedTensor:
    """A weight as nncf.quantize stores it: integers Converted to f32, less their zero points (where it has them),
    times their scales."""

    values: Tensor
    scales: Tensor
    zero_points: Tensor | None = None


def constant(values: np.ndarray, etype: str) -> Tensor:
    """A Const of values already made, stored as `etype` (quantized integers too)."""
    array = np.array(values, dtype={**STORAGE, **QUANTIZED_STORAGE}[etype], order="C")  # 0-d stays 0-d (an axis)
    return Tensor(etype, tuple(array.shape), lambda: iter([array]))


@dataclass(frozen=True)
class Port:
    layer: int
    port: int
    etype: str
    shape: tuple[int, ...]  # -1 for a dimension known only when the model runs


class Graph:
    """An IR being built: layers (as XML text), edges, and the Consts' tensors in the order of their offsets."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.layers: list[str] = []
        self.edges: list[tuple[int, int, int, int]] = []
        self.tensors: list[Tensor] = []
        self.offset = 0
        self.rt_info: dict[str, str] = {}

    def add(
        self,
        kind: str,
        name: str,
        inputs: list[Port],
        outputs: list[tuple[str, tuple[int, ...], str]],  # element type, shape, tensor names ("" for none)
        data: dict[str, str] | None = None,
        version: str = "opset1",
        rt_info: str = "",
    ) -> list[Port]:
        layer = len(self.layers)
        lines = [f"\t\t<layer id={quoteattr(str(layer))} name={quoteattr(name)} type={quoteattr(kind)} "
                 f"version={quoteattr(version)}>"]  # fmt: skip
        if data:
            attributes = " ".join(f"{key}={quoteattr(value)}" for key, value in data.items())
            lines.append(f"\t\t\t<data {attributes} />")
        if rt_info:
            lines.append(rt_info)
        if inputs:
            lines.append("\t\t\t<input>")
            for index, port in enumerate(inputs):
                lines += _port(index, port.etype, port.shape, "")
                self.edges.append((port.layer, port.port, layer, index))
            lines.append("\t\t\t</input>")
        ports = []
        if outputs:
            lines.append("\t\t\t<output>")
            for index, (etype, shape, names) in enumerate(outputs, start=len(inputs)):
                lines += _port(index, etype, shape, names)
                ports.append(Port(layer, index, etype, shape))
            lines.append("\t\t\t</output>")
        lines.append("\t\t</layer>")
        self.layers.append("\n".join(lines))
        return ports

    def parameter(self, name: str, etype: str, shape: tuple[int, ...]) -> Port:
        dims = ",".join("?" if n < 0 else str(n) for n in shape)
        (port,) = self.add("Parameter", name, [], [(etype, shape, name)], {"shape": dims, "element_type": etype})
        return port

    def const(self, name: str, tensor: Tensor, compute: str | None = None) -> Port:
        """A Const in the .bin; with `compute`, decompressed to that type by a Convert (as ov.save_model does)."""
        data = {
            "element_type": tensor.etype,
            "shape": ", ".join(str(n) for n in tensor.shape),
            "offset": str(self.offset),
            "size": str(tensor.nbytes),
        }
        self.offset += tensor.nbytes
        self.tensors.append(tensor)
        stored = "_compressed" if compute and compute != tensor.etype else ""
        (port,) = self.add("Const", name + stored, [], [(tensor.etype, tensor.shape, "")], data)
        if not stored or compute is None:
            return port
        decompression = '\t\t\t<rt_info>\n\t\t\t\t<attribute name="decompression" version="0" />\n\t\t\t</rt_info>'
        (port,) = self.add(
            OPENVINO_DECOMPRESSION,
            name,
            [port],
            [(compute, tensor.shape, "")],
            {"destination_type": compute},
            rt_info=decompression,
        )
        return port

    def quantized(self, name: str, weight: QuantizedTensor) -> Port:
        """A quantized weight's Consts and the ops that make its floats of them, as nncf.quantize writes them."""
        shape, converted = weight.values.shape, {"destination_type": COMPUTE_TYPE}
        (value,) = self.add(
            OPENVINO_DECOMPRESSION,
            f"{name}/values",
            [self.const(f"{name}/q", weight.values)],
            [(COMPUTE_TYPE, shape, "")],
            converted,
        )
        numpy = {"auto_broadcast": "numpy"}
        if weight.zero_points is not None:
            zero = self.const(f"{name}/zero_point", weight.zero_points)
            (zero,) = self.add(
                OPENVINO_DECOMPRESSION,
                f"{name}/zero_point/convert",
                [zero],
                [(COMPUTE_TYPE, zero.shape, "")],
                converted,
            )
            (value,) = self.add(
                OPENVINO_ZERO_POINT, f"{name}/centred", [value, zero], [(COMPUTE_TYPE, shape, "")], numpy
            )
        scales = self.const(f"{name}/scales", weight.scales)
        (port,) = self.add(OPENVINO_SCALE, name, [value, scales], [(COMPUTE_TYPE, shape, "")], numpy)
        return port

    def rounded(self, name: str, port: Port, low: float, high: float, levels: int) -> Port:
        """`port`'s values rounded by a FakeQuantize to `levels` values from low to high (as nncf.quantize writes)."""
        bounds = [
            self.const(f"{name}/{end}", constant(np.float32(value), COMPUTE_TYPE))
            for end, value in (("low", low), ("high", high))
        ]
        data = {"levels": str(levels), "auto_broadcast": "numpy"}
        (out,) = self.add(OPENVINO_ROUNDING, name, [port, *bounds, *bounds], [(COMPUTE_TYPE, port.shape, "")], data)
        return out

    def op(self, kind: str, name: str, inputs: list[Port], shapes: list[tuple[int, ...]], **data: str) -> list[Port]:
        etype = inputs[0].etype
        return self.add(kind, name, inputs, [(etype, shape, "") for shape in shapes], data or None)

    def result(self, port: Port, name: str) -> None:
        self.add("Result", f"{name}/sink_port_0", [port], [])

    def xml(self) -> str:
        """The IR text."""
        lines = ['<?xml version="1.0"?>', f"<net name={quoteattr(self.name)} version={quoteattr(OPENVINO_IR_VERSION)}>"]
        lines.append("\t<layers>")
        lines += self.layers
        lines += ["\t</layers>", "\t<edges>"]
        lines += [
            f'\t\t<edge from-layer="{a}" from-port="{b}" to-layer="{c}" to-port="{d}" />' for a, b, c, d in self.edges
        ]
        lines.append("\t</edges>")
        if self.rt_info:
            lines.append("\t<rt_info>")
            lines += [f"\t\t<{key} value={quoteattr(value)} />" for key, value in self.rt_info.items()]
            lines.append("\t</rt_info>")
        lines.append("</net>")
        return "\n".join(lines) + "\n"

    def write_bin(self, f: Any, progress: Callable[[int, int], None] | None = None) -> None:
        total = self.offset
        for tensor in self.tensors:
            written = 0
            for part in tensor.parts():
                write_array(f, part)
                written += part.nbytes
                if progress:
                    progress(part.nbytes, total)
            if written != tensor.nbytes:  # a bug, never a user's file: the XML would lie about the offsets
                raise RuntimeError(f"a Const of {tensor.nbytes} bytes was written as {written}")


def _port(index: int, etype: str, shape: tuple[int, ...], names: str) -> list[str]:
    named = f" names={quoteattr(names)}" if names else ""
    lines = [f'\t\t\t\t<port id="{index}" precision="{OPENVINO_PRECISIONS[etype]}"{named}>']
    lines += [f"\t\t\t\t\t<dim>{n}</dim>" for n in shape]
    lines.append("\t\t\t\t</port>")
    return lines


@dataclass
class Layer:
    """One sequence op of a built graph: its op, attributes, and weights by role (W, R, B as the op takes them),
    and the FakeQuantize that rounds its input (low, high, levels), where it has one."""

    op: str
    attributes: dict[str, str]
    weights: Mapping[str, Tensor | QuantizedTensor]
    rounding: tuple[float, float, int] | None = None


def build(layers: list[Layer], input_size: int, name: str) -> Graph:
    """The graph of the layers, stacked: x (batch, seq, input) -> y (batch, seq, D*H), h_n, c_n (L*D, batch, H).

    Every input is required: x, initial_h (and initial_c for an LSTM) (L*D, batch, H), sequence_lens (batch,).
    """
    first = layers[0]
    hidden = int(first.attributes["hidden_size"])
    dirs = OPENVINO_DIRECTIONS[first.attributes["direction"]]
    lstm = SEQUENCE_OPS[first.op] == LSTM
    depth, count = len(layers) * dirs, len(layers)
    graph = Graph(name)
    x = graph.parameter(OPENVINO_X, COMPUTE_TYPE, (-1, -1, input_size))
    states = [graph.parameter(OPENVINO_INITIAL_H, COMPUTE_TYPE, (depth, -1, hidden))]
    if lstm:
        states.append(graph.parameter(OPENVINO_INITIAL_C, COMPUTE_TYPE, (depth, -1, hidden)))
    lengths = graph.parameter(OPENVINO_LENGTHS, INDEX_TYPE, (-1,))
    axis = graph.const("state_axis", constant(np.array(0), SHAPE_TYPE))
    to_bdh = graph.const("to_batch_major", constant(np.array([1, 0, 2]), SHAPE_TYPE))
    to_btdh = graph.const("directions_last", constant(np.array([0, 2, 1, 3]), SHAPE_TYPE))
    merge = graph.const("merge_directions", constant(np.array([0, 0, dirs * hidden]), SHAPE_TYPE))
    split = [
        graph.op("Split", f"{state_name}/layers", [state, axis], [(dirs, -1, hidden)] * count, num_splits=str(count))
        for state_name, state in zip((OPENVINO_INITIAL_H, OPENVINO_INITIAL_C), states)
    ]
    finals: list[list[Port]] = [[] for _ in states]
    y = x
    for index, layer in enumerate(layers):
        prefix = f"layer{index}"
        initial = [
            graph.op("Transpose", f"{prefix}/{s}", [parts[index], to_bdh], [(-1, dirs, hidden)])[0]
            for s, parts in zip((OPENVINO_INITIAL_H, OPENVINO_INITIAL_C), split)
        ]
        weights = [
            graph.quantized(f"{prefix}/{role}", weight)
            if isinstance(weight := layer.weights[role], QuantizedTensor)
            else graph.const(f"{prefix}/{role}", weight, COMPUTE_TYPE)
            for role in sorted(OPENVINO_WEIGHT_PORTS[layer.op], key=OPENVINO_WEIGHT_PORTS[layer.op].__getitem__)
        ]
        if layer.rounding is not None:
            y = graph.rounded(f"{prefix}/{OPENVINO_ROUNDING}", y, *layer.rounding)
        inputs = [y, initial[0], *initial[1:], lengths, *weights]
        shapes = [(-1, dirs, -1, hidden)] + [(-1, dirs, hidden)] * len(states)
        outputs = graph.add(
            layer.op,
            f"{prefix}/{layer.op}",
            inputs,
            [(COMPUTE_TYPE, shape, "") for shape in shapes],
            layer.attributes,
            version=OPENVINO_OPSET,
        )
        moved = graph.op("Transpose", f"{prefix}/directions_last", [outputs[0], to_btdh], [(-1, -1, dirs, hidden)])
        named = OPENVINO_Y if index == count - 1 else ""
        (y,) = graph.add(
            "Reshape",
            f"{prefix}/{OPENVINO_Y}",
            [moved[0], merge],
            [(COMPUTE_TYPE, (-1, -1, dirs * hidden), named)],
            {"special_zero": "true"},
        )
        for state, out in enumerate(outputs[1:]):
            finals[state].append(
                graph.op("Transpose", f"{prefix}/final{state}", [out, to_bdh], [(dirs, -1, hidden)])[0]
            )
    graph.result(y, OPENVINO_Y)
    for parts, final_name in zip(finals, (OPENVINO_H_N, OPENVINO_C_N)):
        output = (COMPUTE_TYPE, (depth, -1, hidden), final_name)
        (final,) = graph.add("Concat", final_name, parts, [output], {"axis": "0"})
        graph.result(final, final_name)
    return graph
