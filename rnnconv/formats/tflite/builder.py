"""The graph rnnconv writes and runs (x through each layer's fused ops, a reverse direction between REVERSE_V2 ops,
to y) and its flatbuffer: the tables built with flatbuffers' Builder, each buffer's data streamed after them."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats._quantized import Quantization
from rnnconv.formats.tflite.wire import (
    BIDIRECTIONAL_LSTM,
    FEATURE_AXIS,
    LSTM_OPTION_SLOTS,
    OP_INPUTS,
    OPERATOR_INTERMEDIATES_SLOT,
    QUANTIZATION_SLOTS,
    RNN_OPTION_SLOTS,
    TENSOR_QUANTIZATION_SLOT,
    TFLITE_CELL_OPS,
    TFLITE_FLATBUFFER_LIMIT,
    TFLITE_IDENTIFIER,
    TFLITE_INPUT,
    TFLITE_OPS,
    TFLITE_OPTION_FIELDS,
    TFLITE_OPTIONS,
    TFLITE_OUTPUT,
    TFLITE_SCHEMA_VERSION,
    TFLITE_STATE_INPUTS,
    TFLITE_STATE_NAME,
    TFLITE_STATES,
    TFLITE_TENSOR_TYPES,
    TIME_AXIS,
    UNSET,
)
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import write_array
from rnnconv.table.constants import LSTM, RNN, TORCH_REVERSE_SUFFIX

DATA_ALIGNMENT = 16  # where each weight buffer's data starts in a written file (what TFLite's converter aligns to)
STORAGE = {  # of buffers written (the quantized ones: a source's own weights, run as stored; int64 and bool: a
    # loop body's constants)
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
    "uint8": np.uint8,
    "int8": np.int8,
    "int16": np.int16,
}


@dataclass
class Constant:
    """A constant tensor of a graph being written: its values are asked for only as the file is written (values
    still in a source file, of its type, are copied from there)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    values: Callable[[], np.ndarray | FileArray]
    quantization: Quantization | None = None  # a quantized weight's scales and zero points

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(STORAGE[self.dtype]).itemsize


@dataclass
class GraphTensor:
    name: str
    shape: list[int]
    signature: list[int] | None = None
    dtype: str = "float32"
    buffer: int = 0
    variable: bool = False
    quantization: Quantization | None = None


@dataclass
class Graph:
    """A TFLite model being written: tensors, ops, the constants' buffers (index 0 is the empty one)."""

    tensors: list[GraphTensor] = field(default_factory=list)
    ops: list[tuple[str, list[int], list[int], dict[str, Any]]] = field(default_factory=list)
    buffers: list[Constant | None] = field(default_factory=lambda: [None])
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    states: list[list[int]] = field(default_factory=list)  # per layer*directions + direction: h (and c)
    metadata: dict[str, int] = field(default_factory=dict)
    op_versions: dict[str, int] = field(default_factory=dict)  # an op's version where it is not 1 (a hybrid op's)
    intermediates: dict[int, list[int]] = field(default_factory=dict)  # by op: an integer LSTM's scaled values

    def tensor(self, tensor: GraphTensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def constant(self, constant: Constant) -> int:
        self.buffers.append(constant)
        return self.tensor(
            GraphTensor(
                constant.name,
                list(constant.shape),
                dtype=constant.dtype,
                buffer=len(self.buffers) - 1,
                quantization=constant.quantization,
            )
        )

    def activation(self, name: str, width: int) -> int:
        return self.tensor(GraphTensor(name, [1, 1, width], [UNSET, UNSET, width]))


def build_graph(
    op_name: str,
    input_size: int,
    widths: tuple[int, int],
    layers: list[list[dict[int, Constant]]],
    options: dict[str, Any],
) -> Graph:
    """x (batch, steps, input) through each layer's ops (a reverse direction between REVERSE_V2 ops) to y.

    `widths`: (H, output size: P with a projection, else H); `layers[l][d]`: the op's constant inputs by slot.
    """
    hidden, out = widths
    names = OP_INPUTS[op_name]
    graph = Graph()
    x = graph.activation(TFLITE_INPUT, input_size)
    graph.inputs = [x]
    dirs = len(layers[0])
    axis = graph.constant(Constant("time_axis", (1,), "int32", lambda: np.array([TIME_AXIS], np.int32)))
    state_widths = (out, hidden)
    for layer, directions in enumerate(layers):
        last = layer == len(layers) - 1
        outputs = []
        for direction, constants in enumerate(directions):
            suffix = TORCH_REVERSE_SUFFIX if direction else ""
            source = x
            if direction:
                source = graph.activation(f"{TFLITE_INPUT}_l{layer}{suffix}", graph.tensors[x].shape[-1])
                graph.ops.append(("REVERSE_V2", [x, axis], [source], {}))
            inputs = []
            states = []
            for slot, name in enumerate(names):
                if slot == 0:
                    inputs.append(source)
                elif name in TFLITE_STATE_INPUTS[op_name]:
                    k = TFLITE_STATE_INPUTS[op_name].index(name)
                    width = state_widths[k]
                    state_name = TFLITE_STATE_NAME.format(state=TFLITE_STATES[k], layer=layer, suffix=suffix)
                    states.append(graph.tensor(GraphTensor(state_name, [1, width], [UNSET, width], variable=True)))
                    inputs.append(states[-1])
                elif slot in constants:
                    inputs.append(graph.constant(constants[slot]))
                else:
                    inputs.append(UNSET)
            graph.states.append(states)
            name = TFLITE_OUTPUT if last and dirs == 1 else f"{TFLITE_OUTPUT}_l{layer}{suffix}"
            y = graph.activation(name, out)
            graph.ops.append((op_name, inputs, [y], options))
            if direction:
                back = graph.activation(f"{name}_restored", out)
                graph.ops.append(("REVERSE_V2", [y, axis], [back], {}))
                y = back
            outputs.append(y)
        if dirs == 2:
            joined = graph.activation(TFLITE_OUTPUT if last else f"{TFLITE_OUTPUT}_l{layer}", 2 * out)
            graph.ops.append(("CONCATENATION", outputs, [joined], {"axis": FEATURE_AXIS}))
            outputs = [joined]
        x = outputs[0]
    graph.outputs = [x]
    return graph


def _options_table(builder: Any, op_name: str, options: dict[str, Any]) -> int | None:
    """The op's options table (schema.fbs slots), or None for an op that takes none."""
    if op_name == TFLITE_CELL_OPS[LSTM]:
        builder.StartObject(6)
        builder.PrependInt8Slot(LSTM_OPTION_SLOTS["activation"], options["activation"], 0)
        builder.PrependFloat32Slot(LSTM_OPTION_SLOTS["cell_clip"], options.get("cell_clip", 0.0), 0.0)
        builder.PrependFloat32Slot(LSTM_OPTION_SLOTS["proj_clip"], options.get("proj_clip", 0.0), 0.0)
        builder.PrependBoolSlot(LSTM_OPTION_SLOTS["time_major"], False, False)
        asymmetric = options.get("asymmetric_quantize_inputs", False)
        builder.PrependBoolSlot(LSTM_OPTION_SLOTS["asymmetric_quantize_inputs"], asymmetric, False)
        return int(builder.EndObject())
    if op_name == BIDIRECTIONAL_LSTM:  # not written by rnnconv's writer; its tests write one
        builder.StartObject(6)
        builder.PrependInt8Slot(0, options["activation"], 0)
        builder.PrependBoolSlot(3, options.get("merge_outputs", True), False)
        builder.PrependBoolSlot(4, False, True)  # batch-major (the schema's default is time-major)
        return int(builder.EndObject())
    if op_name == TFLITE_CELL_OPS[RNN]:
        builder.StartObject(3)
        builder.PrependBoolSlot(RNN_OPTION_SLOTS["time_major"], False, False)
        builder.PrependInt8Slot(RNN_OPTION_SLOTS["activation"], options["activation"], 0)
        asymmetric = options.get("asymmetric_quantize_inputs", False)
        builder.PrependBoolSlot(RNN_OPTION_SLOTS["asymmetric_quantize_inputs"], asymmetric, False)
        return int(builder.EndObject())
    if op_name in TFLITE_OPTION_FIELDS:  # the fields `options` gives, by name; the rest the schema's defaults
        fields = TFLITE_OPTION_FIELDS[op_name]
        vectors = {name: _vector(builder, value) for name, value in options.items() if fields[name][1] == "[i32]"}
        builder.StartObject(max((slot for slot, *_ in fields.values()), default=-1) + 1)
        for name, value in options.items():
            slot, kind, default = fields[name]
            if kind == "[i32]":
                builder.PrependUOffsetTRelativeSlot(slot, vectors[name], 0)
            elif kind == "u8":
                builder.PrependUint8Slot(slot, int(value), default)
            else:
                builder.PrependInt32Slot(slot, int(value), default)
        return int(builder.EndObject())
    return None


def _vector(builder: Any, values: list[int], offsets: bool = False) -> int:
    builder.StartVector(4, len(values), 4)
    for value in reversed(values):
        if offsets:
            builder.PrependUOffsetTRelative(value)
        else:
            builder.PrependInt32(value)
    return int(builder.EndVector())


def _quantization_table(b: Any, quant: Quantization) -> int:
    """A QuantizationParameters table: scales, zero points and the axis they run along."""
    scales = b.CreateNumpyVector(np.asarray(quant.scales, np.float32))
    zeros = b.CreateNumpyVector(np.asarray(quant.zero_points, np.int64))
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(QUANTIZATION_SLOTS["scale"], scales, 0)
    b.PrependUOffsetTRelativeSlot(QUANTIZATION_SLOTS["zero_point"], zeros, 0)
    b.PrependInt32Slot(QUANTIZATION_SLOTS["quantized_dimension"], quant.axis or 0, 0)
    return int(b.EndObject())


def serialize(graph: Graph) -> tuple[bytes, list[tuple[int, Constant]]]:
    """The flatbuffer's tables (every buffer's data left out), and each buffer's data with the padding before it.

    Each Buffer's `data` offset points past the tables, where the data follows, aligned: the file is the tables,
    then (padding, length, values) per buffer; the values are written from their source one at a time.
    """
    try:
        import flatbuffers
    except ImportError:
        raise BackendMissing(
            "writing TFLite needs the flatbuffers package, which is not installed (pip install 'rnnconv[tflite]')"
        ) from None
    b = flatbuffers.Builder(4096)
    empty = b.CreateNumpyVector(np.zeros(0, np.uint8))
    patches = []  # (the data field's distance from the end, the buffer)
    buffers = []
    for index, data in enumerate(graph.buffers):
        b.StartObject(3)
        if data is not None:
            b.PrependUOffsetTRelativeSlot(0, empty, 0)
            patches.append((b.Offset(), index))
        buffers.append(b.EndObject())
    tensors = []
    for t in graph.tensors:
        name, shape = b.CreateString(t.name), _vector(b, t.shape)
        signature = _vector(b, t.signature) if t.signature else None
        quantization = _quantization_table(b, t.quantization) if t.quantization else None
        b.StartObject(11)
        b.PrependUOffsetTRelativeSlot(0, shape, 0)
        b.PrependInt8Slot(1, TFLITE_TENSOR_TYPES[t.dtype], 0)
        b.PrependUint32Slot(2, t.buffer, 0)
        b.PrependUOffsetTRelativeSlot(3, name, 0)
        b.PrependBoolSlot(5, t.variable, False)
        if quantization is not None:
            b.PrependUOffsetTRelativeSlot(TENSOR_QUANTIZATION_SLOT, quantization, 0)
        if signature is not None:
            b.PrependUOffsetTRelativeSlot(7, signature, 0)
        tensors.append(b.EndObject())
    codes = list(dict.fromkeys(op for op, *_ in graph.ops))
    ops = []
    for index, (op, inputs, outputs, options) in enumerate(graph.ops):
        ins, outs = _vector(b, inputs), _vector(b, outputs)
        between = _vector(b, graph.intermediates[index]) if index in graph.intermediates else None
        table = _options_table(b, op, options)
        b.StartObject(14)
        b.PrependUint32Slot(0, codes.index(op), 0)
        b.PrependUOffsetTRelativeSlot(1, ins, 0)
        b.PrependUOffsetTRelativeSlot(2, outs, 0)
        if table is not None:
            b.PrependUint8Slot(3, TFLITE_OPTIONS[op], 0)
            b.PrependUOffsetTRelativeSlot(4, table, 0)
        if between is not None:
            b.PrependUOffsetTRelativeSlot(OPERATOR_INTERMEDIATES_SLOT, between, 0)
        ops.append(b.EndObject())
    code_tables = []
    for op in codes:
        b.StartObject(4)
        b.PrependInt8Slot(0, min(TFLITE_OPS[op], 127), 0)  # deprecated_builtin_code: the code, below 127
        b.PrependInt32Slot(2, graph.op_versions.get(op, 1), 1)
        b.PrependInt32Slot(3, TFLITE_OPS[op], 0)
        code_tables.append(b.EndObject())
    entries = []
    for key, index in graph.metadata.items():
        name = b.CreateString(key)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, name, 0)
        b.PrependUint32Slot(1, index, 0)
        entries.append(b.EndObject())
    tensor_vector, op_vector = _vector(b, tensors, True), _vector(b, ops, True)
    graph_inputs, graph_outputs = _vector(b, graph.inputs), _vector(b, graph.outputs)
    title = b.CreateString("main")
    b.StartObject(6)
    b.PrependUOffsetTRelativeSlot(0, tensor_vector, 0)
    b.PrependUOffsetTRelativeSlot(1, graph_inputs, 0)
    b.PrependUOffsetTRelativeSlot(2, graph_outputs, 0)
    b.PrependUOffsetTRelativeSlot(3, op_vector, 0)
    b.PrependUOffsetTRelativeSlot(4, title, 0)
    subgraph = b.EndObject()
    code_vector, subgraphs = _vector(b, code_tables, True), _vector(b, [subgraph], True)
    buffer_vector, metadata = _vector(b, buffers, True), _vector(b, entries, True)
    description = b.CreateString("rnnconv")
    b.StartObject(10)
    b.PrependUint32Slot(0, TFLITE_SCHEMA_VERSION, 0)
    b.PrependUOffsetTRelativeSlot(1, code_vector, 0)
    b.PrependUOffsetTRelativeSlot(2, subgraphs, 0)
    b.PrependUOffsetTRelativeSlot(3, description, 0)
    b.PrependUOffsetTRelativeSlot(4, buffer_vector, 0)
    b.PrependUOffsetTRelativeSlot(6, metadata, 0)
    b.Finish(b.EndObject(), file_identifier=TFLITE_IDENTIFIER)
    head = bytearray(b.Output())
    position, tail = len(head), []
    for distance, index in patches:
        data = graph.buffers[index]
        assert data is not None
        pad = -(position + 4) % DATA_ALIGNMENT
        field_at = len(head) - distance
        struct.pack_into("<I", head, field_at, position + pad - field_at)
        tail.append((pad, data))
        position += pad + 4 + data.nbytes
    if position > TFLITE_FLATBUFFER_LIMIT:
        raise Unsupported(
            f"the model would take {position / 1e9:.2f} GB, but a .tflite flatbuffer holds at most 2 GiB "
            f"(flatbuffers' offsets are 32-bit); convert a smaller RNN, or to ONNX (--to onnx)"
        )
    return bytes(head), tail


def write_graph(graph: Graph, f: Any, progress: Callable[[int, int], None] | None = None) -> None:
    """The model's bytes: its tables, then each buffer's data, pulled from the source one tensor at a time."""
    head, tail = serialize(graph)
    f.write(head)
    total = sum(d.nbytes for _, d in tail)
    for pad, data in tail:
        values = data.values()
        if not (isinstance(values, FileArray) and values.dtype == STORAGE[data.dtype]):
            values = np.ascontiguousarray(values, dtype=STORAGE[data.dtype])
        if values.nbytes != data.nbytes:
            raise BadInput(f"{data.name} has {values.nbytes} bytes, its shape {data.shape} needs {data.nbytes}")
        f.write(b"\0" * pad + struct.pack("<I", values.nbytes))
        write_array(f, values)
        if progress is not None:
            progress(values.nbytes, total)


def model_bytes(graph: Graph) -> bytes:
    import io

    out = io.BytesIO()
    write_graph(graph, out)
    return out.getvalue()
