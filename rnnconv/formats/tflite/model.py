"""A .tflite's graph: its tensors and ops (from the flatbuffer, checked), a constant's values, and the RNN ops
grouped into RNNs: the directions joined as rnnconv writes them, the layers reading the one below, and the stacks of
BIDIRECTIONAL_SEQUENCE_LSTM ops."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import sources
from rnnconv.formats._flatbuffer import Flat, Table
from rnnconv.formats._graph import Chain, Graph, chained, same_rnn
from rnnconv.formats._quantized import EXACT_BIAS, QUANTIZED_RANGES, Quantization, dequantized, quantization
from rnnconv.formats.streaming import STREAM_INPUT
from rnnconv.formats.tflite.loops import Loop, find_loops, grouped, kind_of
from rnnconv.formats.tflite.wire import (
    BIDIRECTIONAL_LSTM,
    FEATURE_AXIS,
    FORMAT,
    LSTM_OPTION_SLOTS,
    OP_INPUTS,
    OP_NAMES,
    OPERATOR_INTERMEDIATES_SLOT,
    QUANTIZATION_SLOTS,
    RNN_OPTION_SLOTS,
    TENSOR_QUANTIZATION_SLOT,
    TFLITE_BIDIRECTIONAL_LSTM_INPUTS,
    TFLITE_CELL_OPS,
    TFLITE_DIRECTION_PREFIXES,
    TFLITE_FLATBUFFER_LIMIT,
    TFLITE_IDENTIFIER,
    TFLITE_LSTM_INPUTS,
    TFLITE_OPS,
    TFLITE_STATE_INPUTS,
    TIME_AXIS,
    TYPE_NAMES,
    UNSET,
)
from rnnconv.safeio.inputs import read_array, regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import CUDNN_GATES, INPUT_MATRIX, LSTM, MAX_SIZE, RECURRENT_MATRIX
from rnnconv.table.layouts import per_gate

FLOAT_TYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "float64": np.dtype("<f8"),
}
INTEGER_TYPES: dict[str, np.dtype[Any]] = {"int32": np.dtype("<i4"), "int64": np.dtype("<i8"), "bool": np.dtype("?")}
QUANTIZED_TYPES: dict[str, np.dtype[Any]] = {"int8": np.dtype("i1"), "uint8": np.dtype("u1"), "int16": np.dtype("<i2")}
BIAS_TYPES: dict[str, np.dtype[Any]] = {"int32": np.dtype("<i4")}  # an integer kernel's biases, with their scales
MAX_RANK = 8
MAX_SUBGRAPHS = 4096
MAX_RNN_OPS = 4096  # RNN ops in one file: far beyond any model; keeps grouping a hostile file's ops cheap


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # a TYPE_NAMES name, or "type N"
    variable: bool
    data: tuple[int, int] | None  # (position in the file, bytes) of a constant's values
    quantization: Table | None = None  # its QuantizationParameters, read only when its values are dequantized

    @property
    def quantized(self) -> bool:
        return self.dtype in QUANTIZED_RANGES

    @property
    def quantized_bias(self) -> bool:
        """An int32 tensor with a scale: an integer kernel's bias (full-integer quantization)."""
        return self.dtype in BIAS_TYPES and self.quantization is not None


@dataclass
class Op:
    index: int
    name: str  # the builtin op's name, or "builtin N" / "custom X"
    inputs: list[int]
    outputs: list[int]
    options: Table | None
    # One direction of a BIDIRECTIONAL_SEQUENCE_LSTM, seen as the unidirectional op it computes: its settings
    # (read from the bidirectional op's options), the op's own name, and why it cannot convert, if it cannot.
    settings: dict[str, Any] | None = None
    time_major: bool | None = None
    shown: str = ""
    refusal: str | None = None
    version: int = 1  # its operator code's
    intermediates: list[int] = field(default_factory=list)  # an integer LSTM's: where its kernel takes scales from

    @property
    def title(self) -> str:
        return self.shown or self.name

    def option(self, slot: int, kind: str, default: Any) -> Any:
        return default if self.options is None else self.options.scalar(slot, kind, default)


@dataclass
class Layer:
    """One layer of an RNN: its op per direction, the tensor it reads and the tensor it gives the next layer, named
    by that tensor; what its layers have alike (the op, its directions, the recurrent matrix's shape (H, H or P), the
    options), its input size and what it gives the layer above."""

    ops: list[Op]
    source: int
    output: int
    name: str
    kind: object
    input_size: int
    width: int
    loops: list[Loop] = field(default_factory=list)  # a loop layer's WHILE loops, per direction

    @property
    def op(self) -> Op:
        return self.ops[0]

    @property
    def shown_class(self) -> str:
        return self.op.title


@dataclass
class Subgraph:
    """One of a file's graphs: the main one (0), or the body or condition of a control-flow op."""

    tensors: list[Tensor]
    ops: list[Op]
    inputs: list[int]
    outputs: list[int]


class TfliteFile(Graph[Layer]):
    """A .tflite: its tensors and ops, its RNN ops and loops as layers, and the chains of them that are one RNN."""

    what = "RNN layer"

    def __init__(self, path: Path, subgraphs: list[Subgraph], record: str | None, flat: Flat, dequantize: bool = False):
        self.path, self.subgraphs, self.flat = path, subgraphs, flat
        self.dequantize = dequantize  # --dequantize: quantized weights read as scale * (q - zero_point)
        main = subgraphs[0]
        self.tensors, self.ops, self.inputs, self.outputs = main.tensors, main.ops, main.inputs, main.outputs
        self.record = record  # the source rnnconv wrote in the metadata, read with an RNN (a damaged one refuses it)
        layers, chains = self._chains()
        super().__init__(path, FORMAT, layers, chains, None)

    @classmethod
    def load(cls, path: Path, dequantize: bool = False) -> TfliteFile:
        size = regular_file(path)
        if size < 8:
            raise BadInput(f"{path} is not a readable TFLite model: it has {size} bytes")
        if size > TFLITE_FLATBUFFER_LIMIT:
            raise Unsupported(f"{path} has {size} bytes: rnnconv reads TFLite models of at most 2 GiB")
        flat = Flat(path, size, what="TFLite model")
        if flat.read(4, 4) != TFLITE_IDENTIFIER:
            raise BadInput(f"{path} is not a TFLite model (no {TFLITE_IDENTIFIER.decode()} identifier)")
        model = flat.root()
        buffers = model.tables(4)
        codes = [(_op_name(code), code.scalar(2, "i32", 1)) for code in model.tables(1)]
        subgraphs = model.tables(2)
        if not subgraphs:
            raise BadInput(f"{path} is not a readable TFLite model: it has no subgraph")
        if len(subgraphs) > MAX_SUBGRAPHS:
            raise BadInput(f"{path} holds {len(subgraphs)} subgraphs, more than any model rnnconv reads")
        graphs = [_subgraph(index, graph, codes, buffers, flat) for index, graph in enumerate(subgraphs)]
        recorded = None
        for entry in model.tables(6):
            if entry.string(0) == sources.SOURCE_KEY:
                recorded = _buffer_text(entry.scalar(1, "u32", 0), buffers, flat)
        return cls(path, graphs, recorded, flat, dequantize)

    def constant(self, index: int, what: str) -> np.ndarray:
        """A constant tensor's values (float32, float64 for float64 and for quantized values dequantized), read from
        the file."""
        tensor = self.tensors[index]
        if tensor.data is None:
            producer = next((op.name for op in self.ops if index in op.outputs), None)
            how = f"computed by a {producer} op" if producer else "not a constant"
            raise Unsupported(f"{what} ({tensor.name!r}) is {how}: rnnconv reads float weights stored as they are")
        if tensor.quantized or tensor.quantized_bias:
            if not self.dequantize:
                raise Unsupported(refused_quantized(what, [tensor]))
            return self.dequantized(tensor, what)
        if tensor.dtype not in FLOAT_TYPES:
            raise Unsupported(f"{what} ({tensor.name!r}) is of type {tensor.dtype}: quantized weights are not read")
        dtype = FLOAT_TYPES[tensor.dtype]
        start, nbytes = tensor.data
        count = int(np.prod(tensor.shape, dtype=np.int64))
        if count * dtype.itemsize != nbytes:
            raise BadInput(
                f"{self.path}: tensor {tensor.name!r} holds {nbytes} bytes, its shape {tensor.shape} needs "
                f"{count * dtype.itemsize}"
            )
        values = read_array(self.path, start, dtype, tensor.shape)  # a file cut short meanwhile: SourceChanged
        return values.astype(np.float64 if tensor.dtype == "float64" else np.float32, copy=False)

    def quantization_of(self, tensor: Tensor, what: str) -> Quantization:
        """A quantized tensor's scales and zero points (per tensor or along its quantized_dimension), checked."""
        table = tensor.quantization
        scales = table.numbers(QUANTIZATION_SLOTS["scale"], "<f4") if table is not None else None
        zeros = table.numbers(QUANTIZATION_SLOTS["zero_point"], "<i8") if table is not None else None
        axis = table.scalar(QUANTIZATION_SLOTS["quantized_dimension"], "i32", 0) if table is not None else 0
        where = f"{what} ({tensor.name!r})"
        return quantization(
            [] if scales is None else scales.tolist(),
            [] if zeros is None else zeros.tolist(),
            axis,
            tensor.shape,
            tensor.dtype,
            where,
            bias=tensor.quantized_bias,
        )

    def dequantized(self, tensor: Tensor, what: str) -> np.ndarray:
        """A quantized constant's values, scale * (q - zero_point), exact in float64."""
        quant = self.quantization_of(tensor, what)
        dtype = {**QUANTIZED_TYPES, **BIAS_TYPES}[tensor.dtype]
        count = int(np.prod(tensor.shape, dtype=np.int64))
        assert tensor.data is not None
        if count * dtype.itemsize != tensor.data[1]:
            raise BadInput(
                f"{self.path}: tensor {tensor.name!r} holds {tensor.data[1]} bytes, its shape {tensor.shape} needs "
                f"{count * dtype.itemsize}"
            )
        q = read_array(self.path, tensor.data[0], dtype, tensor.shape)
        if (
            tensor.quantized_bias
            and q.size
            and int(np.abs(q.astype(np.int64) - quant.zero_points[0]).max()) >= EXACT_BIAS
        ):
            raise BadInput(
                f"{what} ({tensor.name!r}) holds a bias of 2^29 steps or more, which float64 cannot dequantize exactly"
            )
        return dequantized(q, quant)

    def values(self, tensor: Tensor) -> np.ndarray | None:
        """A constant tensor's values as stored (floats, integers, booleans), or None where it holds none or its
        type or size is not one rnnconv reads."""
        dtype = {**FLOAT_TYPES, **INTEGER_TYPES}.get(tensor.dtype)
        if tensor.data is None or dtype is None:
            return None
        count = int(np.prod(tensor.shape, dtype=np.int64))
        if count * dtype.itemsize != tensor.data[1]:
            return None
        return read_array(self.path, tensor.data[0], dtype, tensor.shape)

    def _producers(self) -> dict[int, Op]:
        return {t: op for op in self.ops for t in op.outputs}

    def _reversed(self, tensor: int, producers: dict[int, Op], axis: int) -> int | None:
        """The tensor `tensor` is REVERSE_V2 of along `axis`, or None."""
        op = producers.get(tensor)
        if op is None or op.name != "REVERSE_V2" or len(op.inputs) != 2:
            return None
        axes = self.tensors[op.inputs[1]]
        if axes.data is None or axes.dtype != "int32" or axes.data[1] != 4:
            return None
        start = axes.data[0]
        return op.inputs[0] if self.flat.i32(start) == axis else None

    def _chains(self) -> tuple[list[Layer], list[Chain[Layer]]]:
        """The RNN ops grouped into layers (directions joined as rnnconv writes them) and RNNs (layers reading the
        one below). Every lookup goes through an index, so a hostile file's many ops cost linear time."""
        rnn_ops = [op for op in self.ops if op.name in OP_INPUTS and op.inputs and op.outputs]
        if len(rnn_ops) > MAX_RNN_OPS:
            raise BadInput(f"{self.path} holds {len(rnn_ops)} RNN ops, more than any model rnnconv reads")
        indices = {op.index for op in rnn_ops}
        producers = self._producers()
        readers: dict[int, list[Op]] = {}
        for op in self.ops:
            for t in set(op.inputs):
                readers.setdefault(t, []).append(op)
        layers: list[Layer] = []
        paired: set[int] = set()
        for op in rnn_ops:
            if op.index in paired:
                continue
            time = 0 if _time_major(op) else TIME_AXIS
            partner = None
            if self._reversed(op.inputs[0], producers, time) is None:  # a forward op: its partner reads x reversed
                for reversal in readers.get(op.inputs[0], []):
                    if (
                        reversal.name != "REVERSE_V2"
                        or not reversal.outputs
                        or self._reversed(reversal.outputs[0], producers, time) != op.inputs[0]
                    ):
                        continue
                    for other in readers.get(reversal.outputs[0], []):
                        if other.index in paired or other.index not in indices or other.name != op.name:
                            continue
                        if other is op or other.inputs[0] != reversal.outputs[0]:
                            continue
                        joined = self._joined(op, other, producers, readers, time)
                        if joined is not None:
                            partner = (other, joined)
                            break
                    if partner is not None:
                        break
            if partner is not None:
                paired |= {op.index, partner[0].index}
                layers.append(self._layer([op, partner[0]], op.inputs[0], partner[1]))
            else:
                layers.append(self._layer([op], op.inputs[0], op.outputs[0]))
        layers = [layer for layer in layers if layer.ops[0].index not in paired or len(layer.ops) == 2]
        for op in self.ops:
            if op.name == BIDIRECTIONAL_LSTM and op.inputs and op.outputs:
                layers.append(self._layer(self._directions(op), op.inputs[0], self._merged(op, readers)))
        for group, output in grouped(find_loops(self), readers, producers, self):
            input_size, hidden = group[0].sizes
            name = self.tensors[output].name or group[0].name
            ops = [loop.op for loop in group]
            layers.append(
                Layer(ops, group[0].sequence, output, name, kind_of(group), input_size, len(group) * hidden, group)
            )
        layers.sort(key=lambda la: la.ops[0].index)
        below: dict[int, Layer] = {}
        produced: dict[int, Layer] = {}  # each tensor's producer among the layers so far
        for layer in layers:
            found = produced.get(layer.source)
            # only this layer (and its reversal) reads what it reads
            single_reader = len(readers.get(layer.source, [])) == len({op.index for op in layer.ops})
            if found is not None and same_rnn(found, layer) and single_reader:
                below[id(layer)] = found
            produced[layer.output] = layer
        named: list[Chain[Layer]] = []
        taken: set[str] = set()
        for chain in chained(layers, lambda layer: below.get(id(layer))):
            name = self.tensors[chain[-1].output].name or f"op{chain[0].ops[0].index}"
            if name in taken:
                name = f"{name}#{chain[0].ops[0].index}"
            taken.add(name)
            named.append(Chain(name, chain))
        return layers, named

    def _layer(self, ops: list[Op], source: int, output: int) -> Layer:
        """A layer of these ops, reading `source`, giving `output`."""
        first = ops[0]
        gate = CUDNN_GATES[cell_of_op(first.name)][-1]
        recurrent, given = (self._shape(first, per_gate(role, gate)) for role in (RECURRENT_MATRIX, INPUT_MATRIX))
        kind = (first.name, len(ops), recurrent, op_options(first))
        name = self.tensors[output].name or f"op{first.index}"
        width = len(ops) * recurrent[1] if len(recurrent) == 2 else 0
        return Layer(ops, source, output, name, kind, given[1] if len(given) == 2 else 0, width)

    def _shape(self, op: Op, key: str) -> tuple[int, ...]:
        """The shape of the op's input that holds the row's stored tensor `key` (() where it has none)."""
        slot = slot_of(op.name, key)
        t = op.inputs[slot] if slot < len(op.inputs) else UNSET
        return self.tensors[t].shape if t != UNSET else ()

    def _directions(self, op: Op) -> list[Op]:
        """The two directions of a BIDIRECTIONAL_SEQUENCE_LSTM, each as the unidirectional op it computes."""
        names = TFLITE_BIDIRECTIONAL_LSTM_INPUTS

        def given(name: str) -> int:
            slot = names.index(name)
            return op.inputs[slot] if slot < len(op.inputs) else UNSET

        settings = {
            "activation": op.option(0, "u8", 0),
            "cell_clip": op.option(1, "f32", 0.0),
            "proj_clip": op.option(2, "f32", 0.0),
            "diagonal": 0,
        }
        aux = [name for name in names[names.index("aux_input") :] if given(name) != UNSET]
        refusal = None
        if len(op.inputs) != len(names):
            refusal = f"op {op.index} ({op.name}) has {len(op.inputs)} inputs, not the {len(names)} it takes"
        elif aux:
            refusal = f"op {op.index} ({op.name}) has an auxiliary input ({aux[0]}): cuDNN's LSTM reads one input"
        unidirectional = TFLITE_LSTM_INPUTS
        states = TFLITE_STATE_INPUTS[TFLITE_CELL_OPS[LSTM]]
        directions = []
        for prefix in TFLITE_DIRECTION_PREFIXES:
            inputs = [given(names[0])]
            inputs += [given(prefix + name) if prefix + name in names else UNSET for name in unidirectional[1:]]
            for state in states:
                inputs[unidirectional.index(state)] = given(prefix + state)
            time_major = bool(op.option(4, "u8", 1))  # the schema's default: true
            directions.append(
                Op(op.index, TFLITE_CELL_OPS[LSTM], inputs, op.outputs, None, settings, time_major, op.name, refusal)
            )
        return directions

    def _merged(self, op: Op, readers: dict[int, list[Op]]) -> int:
        """What a BIDIRECTIONAL_SEQUENCE_LSTM gives the next layer: its merged output, or the CONCATENATION of its
        two, forward first; else its forward output (nothing stacks on it)."""
        if len(op.outputs) < 2:
            return int(op.outputs[0])
        for joined in readers.get(op.outputs[0], []):
            if joined.name == "CONCATENATION" and joined.inputs == op.outputs[:2] and joined.outputs:
                return int(joined.outputs[0])
        return int(op.outputs[0])

    def _joined(
        self, fwd: Op, rev: Op, producers: dict[int, Op], readers: dict[int, list[Op]], time: int
    ) -> int | None:
        """The CONCATENATION of fwd's output and rev's output reversed back, on the features: its output, or None."""
        for op in readers.get(fwd.outputs[0], []):
            if op.name != "CONCATENATION" or len(op.inputs) != 2 or op.inputs[0] != fwd.outputs[0] or not op.outputs:
                continue
            axis = op.option(0, "i32", 0)
            rank = len(self.tensors[fwd.outputs[0]].shape)
            if axis not in (FEATURE_AXIS, -1, rank - 1):
                continue
            if self._reversed(op.inputs[1], producers, time) == rev.outputs[0]:
                return int(op.outputs[0])
        return None

    def nothing_held(self) -> str:
        held = ", ".join(f"{n} {op}" for op, n in Counter(op.name for op in self.ops).most_common(5))
        why = ""
        if self.record is not None and [self.tensors[t].name for t in self.inputs[:1]] == [STREAM_INPUT]:
            why = " (a streaming model rnnconv wrote, its cells in plain ops: verify it with --streaming)"
        elif "WHILE" in held:
            why = " (its WHILE loops' bodies multiply by no constant weights: they step no RNN cell rnnconv reads)"
        return f"{self.path} holds no UNIDIRECTIONAL_SEQUENCE_LSTM or _RNN op (its ops: {held or 'none'}){why}"

    def op_listing(self) -> str:
        return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in Counter(op.name for op in self.ops).items())


def refused_quantized(what: str, tensors: list[Tensor]) -> str:
    """Why quantized weights do not convert without --dequantize, in one sentence."""
    kinds = " and ".join(sorted({t.dtype for t in tensors}))
    more = f" and {len(tensors) - 1} more" if len(tensors) > 1 else ""
    return (
        f"{what} has {kinds} quantized weights ({tensors[0].name!r}{more}), which cuDNN does not compute with; "
        f"--dequantize converts the float model they approximate, scale * (q - zero_point)"
    )


def _op_name(code: Table) -> str:
    builtin = max(code.scalar(3, "i32", 0), code.scalar(0, "u8", 0))
    if builtin == TFLITE_OPS["CUSTOM"]:
        return f"custom {code.string(1)}"
    return OP_NAMES.get(builtin, f"builtin {builtin}")


def _subgraph(number: int, graph: Table, codes: list[tuple[str, int]], buffers: list[Table], flat: Flat) -> Subgraph:
    """A subgraph's tensors and ops, every index they name checked."""
    where = f"subgraph {number}" if number else "its main graph"
    tensors = [_tensor(i, t, buffers, flat) for i, t in enumerate(graph.tables(0))]
    ops = []
    for index, op in enumerate(graph.tables(3)):
        code = op.scalar(0, "u32", 0)
        if code >= len(codes):
            raise BadInput(
                f"{flat.path} is not a readable TFLite model: {where}'s op {index} names operator code {code}"
            )
        inputs, outputs = op.ints(1) or [], op.ints(2) or []
        intermediates = op.ints(OPERATOR_INTERMEDIATES_SLOT) or []
        for t in inputs + outputs + intermediates:
            if not UNSET <= t < len(tensors):
                raise BadInput(f"{flat.path} is not a readable TFLite model: {where}'s op {index} names tensor {t}")
        name, version = codes[code]
        ops.append(Op(index, name, inputs, outputs, op.table(4), version=version, intermediates=intermediates))
    given, taken = graph.ints(1) or [], graph.ints(2) or []
    if any(not 0 <= t < len(tensors) for t in given + taken):
        raise BadInput(f"{flat.path} is not a readable TFLite model: {where} names a tensor it does not hold")
    return Subgraph(tensors, ops, given, taken)


def _tensor(index: int, table: Table, buffers: list[Table], flat: Flat) -> Tensor:
    shape = table.ints(0) or []
    if len(shape) > MAX_RANK or any(not 0 <= d <= MAX_SIZE for d in shape):
        raise BadInput(f"{flat.path} is not a readable TFLite model: tensor {index} has shape {shape}")
    code = table.scalar(1, "u8", 0)
    buffer = table.scalar(2, "u32", 0)
    if buffer >= max(len(buffers), 1):
        raise BadInput(f"{flat.path} is not a readable TFLite model: tensor {index} names buffer {buffer}")
    data = _buffer(buffers[buffer], flat) if buffers else None
    return Tensor(
        index,
        table.string(3),
        tuple(shape),
        TYPE_NAMES.get(code, f"type {code}"),
        bool(table.scalar(5, "u8", 0)),
        data,
        table.table(TENSOR_QUANTIZATION_SLOT),
    )


def _buffer(buffer: Table, flat: Flat) -> tuple[int, int] | None:
    """(position, bytes) of a buffer's data: its vector, or its offset and size (the >2 GiB extension)."""
    inline = buffer.bytes_at(0)
    if inline is not None and inline[1]:
        return inline
    offset, size = buffer.scalar(1, "u64", 0), buffer.scalar(2, "u64", 0)
    if offset > 1 and size:
        if offset + size > flat.size:
            raise BadInput(f"{flat.path} is not a readable TFLite model: a buffer runs past the end of the file")
        return offset, size
    return None


def _buffer_text(index: int, buffers: list[Table], flat: Flat) -> str:
    found = _buffer(buffers[index], flat) if index < len(buffers) else None
    if found is None:
        raise BadInput(f"{flat.path}: its {sources.SOURCE_KEY} metadata names no buffer")
    start, length = found
    return flat.read(start, min(length, sources.SOURCE_RECORD_LIMIT + 1)).decode("utf-8", "replace")


def _time_major(op: Op) -> bool:
    if op.time_major is not None:
        return op.time_major
    slots = LSTM_OPTION_SLOTS if op.name == TFLITE_CELL_OPS[LSTM] else RNN_OPTION_SLOTS
    return bool(op.option(slots["time_major"], "u8", 0))


def op_options(op: Op) -> dict[str, Any]:
    """The op's options that change what it computes."""
    if op.settings is not None:
        return op.settings
    if op.name == TFLITE_CELL_OPS[LSTM]:
        return {
            "activation": op.option(LSTM_OPTION_SLOTS["activation"], "u8", 0),
            "cell_clip": op.option(LSTM_OPTION_SLOTS["cell_clip"], "f32", 0.0),
            "proj_clip": op.option(LSTM_OPTION_SLOTS["proj_clip"], "f32", 0.0),
            "diagonal": op.option(LSTM_OPTION_SLOTS["diagonal"], "u8", 0),
            "asymmetric_quantize_inputs": bool(op.option(LSTM_OPTION_SLOTS["asymmetric_quantize_inputs"], "u8", 0)),
        }
    return {
        "activation": op.option(RNN_OPTION_SLOTS["activation"], "u8", 0),
        "asymmetric_quantize_inputs": bool(op.option(RNN_OPTION_SLOTS["asymmetric_quantize_inputs"], "u8", 0)),
    }


def cell_of_op(op_name: str) -> str:
    return {op: cell for cell, op in TFLITE_CELL_OPS.items()}[op_name]


def slot_of(op_name: str, key: str) -> int:
    """The op's input slot holding the stored tensor `key` of the op's row (input_matrix/f: 2)."""
    return OP_INPUTS[op_name].index(find_row(FORMAT, op_name).tensors[key])


def input_of(op: Op, name: str) -> int:
    slot = OP_INPUTS[op.name].index(name)
    return op.inputs[slot] if slot < len(op.inputs) else UNSET
