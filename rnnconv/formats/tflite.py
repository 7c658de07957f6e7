"""TFLite / LiteRT: the UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN ops of a `.tflite` flatbuffer, read and written.

Neither needs TensorFlow or LiteRT: files are written with the `flatbuffers` package's Builder (the schema's
few tables by their slot numbers) and read by a bounds-checked parser here (every offset, vector and buffer
checked to lie inside the file), so a hostile file gets one sentence. LiteRT's interpreter
(`ai_edge_litert`) is imported only to run a file, for verify.

A written model holds every layer and direction of one RNN in one graph: input `x` (batch, steps, input) with
shape_signature (-1, -1, input), one fused op per layer and direction (the reverse direction between two
REVERSE_V2 ops on the steps' axis, the directions joined by CONCATENATION), output `y` (batch, steps,
directions * output). The states are the ops' variable tensors `h_l0`, `c_l0`, `h_l0_reverse`, ...: set
them before `invoke` for non-zero initial states, read them after it for the final states. The weight
buffers lie after the flatbuffer's tables, so a large RNN is streamed to the file, never built in memory.

What is read back: a chain of these ops (the glue rnnconv writes) is one multi-layer, possibly bidirectional
RNN, and so is a stack of BIDIRECTIONAL_SEQUENCE_LSTM ops; what cuDNN cannot compute is refused, one sentence naming
the term: peepholes, cell or projection clip,
layer normalization, a coupled input gate (CIFG), a non-zero projection bias, activations other than the
op's, weights computed by other ops (quantized models). TFLite has no fused GRU: a GRU is refused.
"""

from __future__ import annotations

import contextlib
import functools
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.compare import Inputs, Outputs
from rnnconv.contracts import InspectReport, Provenance, RNNSizes
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, first_line, no_such_rnn, several_rnns
from rnnconv.formats import registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import FileArray, atomic_outputs, digest_in_background, read_array, regular_file, write_array
from rnnconv.table.apply import find_row, stored_shapes
from rnnconv.table.constants import (
    BIAS,
    BIAS_KINDS,
    CUDNN_GATES,
    CUDNN_MODES,
    GRU,
    INPUT_MATRIX,
    KIND_OF_ROLE,
    LSTM,
    MATRIX_ROLES,
    MAX_SIZE,
    PROJECTION,
    RECURRENT_MATRIX,
    RNN,
    TFLITE_ACTIVATIONS,
    TFLITE_BIDIRECTIONAL_LSTM_INPUTS,
    TFLITE_CELL_OPS,
    TFLITE_DIRECTION_PREFIXES,
    TFLITE_FLATBUFFER_LIMIT,
    TFLITE_IDENTIFIER,
    TFLITE_INPUT,
    TFLITE_LSTM_INPUTS,
    TFLITE_OPS,
    TFLITE_OPTIONS,
    TFLITE_OUTPUT,
    TFLITE_RNN_INPUTS,
    TFLITE_SCHEMA_VERSION,
    TFLITE_STATE_INPUTS,
    TFLITE_STATE_NAME,
    TFLITE_STATES,
    TFLITE_TENSOR_TYPES,
    TORCH_REVERSE_SUFFIX,
    Kind,
)
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.layouts import MATRIX_PER_GATE, per_gate
from rnnconv.table.reading import Found, StoredCell, read, settle
from rnnconv.table.rows import Row

OP_NAMES = {code: name for name, code in TFLITE_OPS.items()}
BIDIRECTIONAL_LSTM = "BIDIRECTIONAL_SEQUENCE_LSTM"
OP_INPUTS = {TFLITE_CELL_OPS[LSTM]: TFLITE_LSTM_INPUTS, TFLITE_CELL_OPS[RNN]: TFLITE_RNN_INPUTS}
ACTIVATION_NAMES = {code: name for name, code in TFLITE_ACTIVATIONS.items()}
TYPE_NAMES = {code: name for name, code in TFLITE_TENSOR_TYPES.items()}
FLOAT_TYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "float64": np.dtype("<f8"),
}
MAX_COUNT = 1 << 18  # tensors, ops or buffers in one file: far beyond any RNN model; keeps a hostile count small
MAX_RANK = 8
MAX_RNN_OPS = 4096  # RNN ops in one file: far beyond any model; keeps grouping a hostile file's ops cheap
DATA_ALIGNMENT = 16  # where each weight buffer's data starts in a written file (what TFLite's converter aligns to)
TIME_AXIS, FEATURE_AXIS = 1, 2  # of the batch-major tensors rnnconv writes
UNSET = -1  # an optional input left out
STORAGE = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "uint8": np.uint8}  # of buffers written


# --- the flatbuffer, read -------------------------------------------------------------------------------------


class Flat:
    """A flatbuffer file's bytes, read (never mapped: a file cut short meanwhile must not kill the process) a block at
    a time as the parser asks for them, every position checked against the file's size (BadInput otherwise)."""

    BLOCK = 1 << 16

    def __init__(self, path: Path, size: int, data: bytes | None = None):
        self.path, self.size, self.data = path, size, data  # data: the whole file, given (tests, small files)
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def _block(self, index: int) -> bytes:
        if index in self._blocks:
            self._blocks.move_to_end(index)
            return self._blocks[index]
        start = index * self.BLOCK
        block = read_array(self.path, start, np.uint8, (min(self.BLOCK, self.size - start),)).tobytes()
        self._blocks[index] = block
        if len(self._blocks) > 256:  # 16 MiB at most, whatever a hostile file makes the parser visit
            self._blocks.popitem(last=False)
        return block

    def read(self, pos: int, length: int) -> bytes:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise BadInput(f"{self.path} is not a readable TFLite model: an offset points outside the file")
        if self.data is not None:
            return self.data[pos : pos + length]
        first, last = pos // self.BLOCK, (pos + length - 1) // self.BLOCK
        if length == 0:
            return b""
        if first == last:
            offset = pos - first * self.BLOCK
            return self._block(first)[offset : offset + length]
        return read_array(self.path, pos, np.uint8, (length,)).tobytes()

    def _at(self, fmt: str, pos: int) -> Any:
        return struct.unpack(fmt, self.read(pos, struct.calcsize(fmt)))[0]

    def u8(self, pos: int) -> int:
        return int(self._at("<B", pos))

    def u16(self, pos: int) -> int:
        return int(self._at("<H", pos))

    def i32(self, pos: int) -> int:
        return int(self._at("<i", pos))

    def u32(self, pos: int) -> int:
        return int(self._at("<I", pos))

    def u64(self, pos: int) -> int:
        return int(self._at("<Q", pos))

    def f32(self, pos: int) -> float:
        return float(self._at("<f", pos))

    def table(self, pos: int) -> Table:
        vtable = pos - self.i32(pos)
        length = self.u16(vtable)
        if length < 4 or length % 2:
            raise BadInput(f"{self.path} is not a readable TFLite model: a table's vtable is damaged")
        return Table(self, pos, vtable, length)

    def root(self) -> Table:
        return self.table(self.u32(0))

    def vector(self, pos: int, width: int) -> tuple[int, int]:
        """(first element's position, count) of the vector at pos, every element inside the file."""
        count = self.u32(pos)
        if pos + 4 + count * width > self.size:
            raise BadInput(f"{self.path} is not a readable TFLite model: a vector runs past the end of the file")
        return pos + 4, count


@dataclass(frozen=True)
class Table:
    flat: Flat
    pos: int
    vtable: int
    vtable_length: int

    def _field(self, slot: int) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > self.vtable_length:
            return None
        offset = self.flat.u16(self.vtable + entry)
        return None if offset == 0 else self.pos + offset

    def scalar(self, slot: int, kind: str, default: Any) -> Any:
        pos = self._field(slot)
        return default if pos is None else getattr(self.flat, kind)(pos)

    def _target(self, slot: int) -> int | None:
        pos = self._field(slot)
        return None if pos is None else pos + self.flat.u32(pos)

    def table(self, slot: int) -> Table | None:
        target = self._target(slot)
        return None if target is None else self.flat.table(target)

    def tables(self, slot: int) -> list[Table]:
        target = self._target(slot)
        if target is None:
            return []
        start, count = self.flat.vector(target, 4)
        if count > MAX_COUNT:
            raise BadInput(f"{self.flat.path} is not a readable TFLite model: it claims {count} entries in a table")
        return [self.flat.table(start + 4 * i + self.flat.u32(start + 4 * i)) for i in range(count)]

    def ints(self, slot: int) -> list[int] | None:
        target = self._target(slot)
        if target is None:
            return None
        start, count = self.flat.vector(target, 4)
        if count > MAX_COUNT:
            raise BadInput(f"{self.flat.path} is not a readable TFLite model: it claims {count} entries in a list")
        return [self.flat.i32(start + 4 * i) for i in range(count)]

    def bytes_at(self, slot: int) -> tuple[int, int] | None:
        """(position, length) of a [ubyte] vector."""
        target = self._target(slot)
        return None if target is None else self.flat.vector(target, 1)

    def string(self, slot: int) -> str:
        found = self.bytes_at(slot)
        if found is None:
            return ""
        start, length = found
        return self.flat.read(start, min(length, 4096)).decode("utf-8", "replace")


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # a TYPE_NAMES name, or "type N"
    variable: bool
    data: tuple[int, int] | None  # (position in the file, bytes) of a constant's values


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

    @property
    def title(self) -> str:
        return self.shown or self.name

    def option(self, slot: int, kind: str, default: Any) -> Any:
        return default if self.options is None else self.options.scalar(slot, kind, default)


# Options' slots (schema.fbs): UnidirectionalSequenceLSTMOptions and SequenceRNNOptions.
LSTM_OPTION_SLOTS = {"activation": 0, "cell_clip": 1, "proj_clip": 2, "time_major": 3, "diagonal": 5}
RNN_OPTION_SLOTS = {"time_major": 0, "activation": 1}


@dataclass
class Layer:
    """One layer of an RNN: its op per direction, the tensor it reads and the tensor it gives the next layer."""

    ops: list[Op]
    source: int
    output: int


@dataclass
class Chain:
    name: str
    layers: list[Layer]

    @property
    def first(self) -> Op:
        return self.layers[0].ops[0]


@dataclass
class TfliteFile:
    path: Path
    tensors: list[Tensor]
    ops: list[Op]
    chains: list[Chain]
    recorded: str | None  # the provenance rnnconv wrote in the metadata
    flat: Flat = field(repr=False, default=None)  # type: ignore[assignment]

    @classmethod
    def load(cls, path: Path) -> TfliteFile:
        size = regular_file(path)
        if size < 8:
            raise BadInput(f"{path} is not a readable TFLite model: it has {size} bytes")
        if size > TFLITE_FLATBUFFER_LIMIT:
            raise Unsupported(f"{path} has {size} bytes: rnnconv reads TFLite models of at most 2 GiB")
        flat = Flat(path, size)
        if flat.read(4, 4) != TFLITE_IDENTIFIER:
            raise BadInput(f"{path} is not a TFLite model (no {TFLITE_IDENTIFIER.decode()} identifier)")
        model = flat.root()
        buffers = model.tables(4)
        codes = [_op_name(code) for code in model.tables(1)]
        subgraphs = model.tables(2)
        if not subgraphs:
            raise BadInput(f"{path} is not a readable TFLite model: it has no subgraph")
        graph = subgraphs[0]  # the main graph; others are the bodies of control-flow ops
        tensors = [_tensor(i, t, buffers, flat) for i, t in enumerate(graph.tables(0))]
        ops = []
        for index, op in enumerate(graph.tables(3)):
            code = op.scalar(0, "u32", 0)
            if code >= len(codes):
                raise BadInput(f"{path} is not a readable TFLite model: op {index} names operator code {code}")
            inputs, outputs = op.ints(1) or [], op.ints(2) or []
            for t in inputs + outputs:
                if not UNSET <= t < len(tensors):
                    raise BadInput(f"{path} is not a readable TFLite model: op {index} names tensor {t}")
            ops.append(Op(index, codes[code], inputs, outputs, op.table(4)))
        recorded = None
        for entry in model.tables(6):
            if entry.string(0) == registry.SOURCE_KEY:
                recorded = _buffer_text(entry.scalar(1, "u32", 0), buffers, flat)
        file = cls(path, tensors, ops, [], recorded, flat)
        file.chains = file._chains()
        return file

    def constant(self, index: int, what: str) -> np.ndarray:
        """A constant tensor's values (float32, float64 for float64), read from the file."""
        tensor = self.tensors[index]
        if tensor.data is None:
            producer = next((op.name for op in self.ops if index in op.outputs), None)
            how = f"computed by a {producer} op" if producer else "not a constant"
            raise Unsupported(f"{what} ({tensor.name!r}) is {how}: rnnconv reads float weights stored as they are")
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

    def _chains(self) -> list[Chain]:
        """The RNN ops grouped into RNNs: directions joined as rnnconv writes them, layers reading the one below.
        Every lookup goes through an index, so a hostile file's many ops cost linear time."""
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
                layers.append(Layer([op, partner[0]], op.inputs[0], partner[1]))
            else:
                layers.append(Layer([op], op.inputs[0], op.outputs[0]))
        layers = [layer for layer in layers if layer.ops[0].index not in paired or len(layer.ops) == 2]
        for op in self.ops:
            if op.name == BIDIRECTIONAL_LSTM and op.inputs and op.outputs:
                layers.append(Layer(self._directions(op), op.inputs[0], self._merged(op, readers)))
        chains: list[list[Layer]] = []
        ending: dict[int, list[Layer]] = {}  # a chain by the tensor its top layer gives
        for layer in sorted(layers, key=lambda la: la.ops[0].index):
            below = ending.get(layer.source)
            fits = below is not None and self._same_rnn(below[-1], layer)
            # only this layer (and its reversal) reads what it reads
            single_reader = len(readers.get(layer.source, [])) == len({op.index for op in layer.ops})
            if below is not None and fits and single_reader:
                del ending[layer.source]
                below.append(layer)
            else:
                below = [layer]
                chains.append(below)
            ending[layer.output] = below
        named: list[Chain] = []
        taken: set[str] = set()
        for chain in chains:
            name = self.tensors[chain[-1].output].name or f"op{chain[0].ops[0].index}"
            if name in taken:
                name = f"{name}#{chain[0].ops[0].index}"
            taken.add(name)
            named.append(Chain(name, chain))
        return named

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

    def _same_rnn(self, below: Layer, above: Layer) -> bool:
        a, b = below.ops[0], above.ops[0]
        same_sizes = self._hidden(a) == self._hidden(b)
        return a.name == b.name and len(below.ops) == len(above.ops) and same_sizes and _options(a) == _options(b)

    def _hidden(self, op: Op) -> tuple[int, ...]:
        """The shape of the op's last gate's recurrent matrix: (H, H or P), the same in every layer of one RNN."""
        slot = _slot(op.name, per_gate(RECURRENT_MATRIX, CUDNN_GATES[_cell(op.name)][-1]))
        t = op.inputs[slot] if slot < len(op.inputs) else UNSET
        return self.tensors[t].shape if t != UNSET else ()

    def choose(self, layer: str | None, take_all: bool) -> list[Chain]:
        if layer is not None:
            found = [c for c in self.chains if c.name == layer]
            if not found:
                raise no_such_rnn(f"{self.path} has no RNN", layer, [c.name for c in self.chains])
            return found
        if not self.chains:
            held = ", ".join(f"{n} {op}" for op, n in Counter(op.name for op in self.ops).most_common(5))
            gru = (
                " (TFLite has no fused GRU op: a GRU is written as a WHILE loop or unrolled, which rnnconv does "
                "not read)"
                if "WHILE" in held
                else ""
            )
            raise BadInput(
                f"{self.path} holds no UNIDIRECTIONAL_SEQUENCE_LSTM or _RNN op (its ops: {held or 'none'}){gru}"
            )
        if len(self.chains) == 1 or take_all:
            return self.chains
        raise several_rnns(self.path, f"holds {len(self.chains)} RNNs ({', '.join(c.name for c in self.chains)})")

    def op_listing(self) -> str:
        return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in Counter(op.name for op in self.ops).items())


def _op_name(code: Table) -> str:
    builtin = max(code.scalar(3, "i32", 0), code.scalar(0, "u8", 0))
    if builtin == TFLITE_OPS["CUSTOM"]:
        return f"custom {code.string(1)}"
    return OP_NAMES.get(builtin, f"builtin {builtin}")


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
        index, table.string(3), tuple(shape), TYPE_NAMES.get(code, f"type {code}"), bool(table.scalar(5, "u8", 0)), data
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
        raise BadInput(f"{flat.path}: its {registry.SOURCE_KEY} metadata names no buffer")
    start, length = found
    return flat.read(start, min(length, registry.SOURCE_RECORD_LIMIT + 1)).decode("utf-8", "replace")


def _time_major(op: Op) -> bool:
    if op.time_major is not None:
        return op.time_major
    slots = LSTM_OPTION_SLOTS if op.name == TFLITE_CELL_OPS[LSTM] else RNN_OPTION_SLOTS
    return bool(op.option(slots["time_major"], "u8", 0))


def _options(op: Op) -> dict[str, Any]:
    """The op's options that change what it computes."""
    if op.settings is not None:
        return op.settings
    if op.name == TFLITE_CELL_OPS[LSTM]:
        return {
            "activation": op.option(LSTM_OPTION_SLOTS["activation"], "u8", 0),
            "cell_clip": op.option(LSTM_OPTION_SLOTS["cell_clip"], "f32", 0.0),
            "proj_clip": op.option(LSTM_OPTION_SLOTS["proj_clip"], "f32", 0.0),
            "diagonal": op.option(LSTM_OPTION_SLOTS["diagonal"], "u8", 0),
        }
    return {"activation": op.option(RNN_OPTION_SLOTS["activation"], "u8", 0)}


def _cell(op_name: str) -> str:
    return {op: cell for cell, op in TFLITE_CELL_OPS.items()}[op_name]


def _slot(op_name: str, key: str) -> int:
    """The op's input slot holding the stored tensor `key` of the op's row (input_matrix/f: 2)."""
    return OP_INPUTS[op_name].index(find_row(FORMAT, op_name).tensors[key])


def _input(op: Op, name: str) -> int:
    slot = OP_INPUTS[op.name].index(name)
    return op.inputs[slot] if slot < len(op.inputs) else UNSET


# --- reading: the checks, and the canonical RNN -----------------------------------------------------------------

FORMAT = "tflite"


def _refusal(file: TfliteFile, op: Op, where: str) -> str | None:
    """Why cuDNN cannot compute this op (one sentence naming the term), or None."""
    names = OP_INPUTS[op.name]
    if op.refusal:
        return op.refusal
    if op.name == TFLITE_CELL_OPS[LSTM]:
        if len(op.inputs) not in (20, 24):
            return f"{where} has {len(op.inputs)} inputs, not the 20 or 24 of an UNIDIRECTIONAL_SEQUENCE_LSTM"
        present = [n for n in names if _input(op, n) != UNSET]
        peepholes = [n for n in present if n.startswith("cell_to_")]
        if peepholes:
            return f"{where} has peephole weights ({', '.join(peepholes)}): cuDNN's LSTM has no peepholes"
        norms = [n for n in present if n.endswith("_layer_norm_coefficients")]
        if norms:
            return f"{where} normalizes its gates ({', '.join(norms)}): cuDNN's LSTM has no layer normalization"
        options = _options(op)
        for clip in ("cell_clip", "proj_clip"):
            if options[clip]:
                return f"{where} clips with {clip}={options[clip]}: cuDNN's LSTM does not clip"
        if options["diagonal"]:
            return f"{where} has diagonal recurrent weights: cuDNN's recurrent matrices are full"
        bias = _input(op, "projection_bias")
        if bias != UNSET and np.any(file.constant(bias, f"{where} projection_bias")):
            return f"{where} has a non-zero projection_bias: cuDNN's projection has no bias"
    elif len(op.inputs) != len(names):
        return f"{where} has {len(op.inputs)} inputs, not the {len(names)} of an {op.name}"
    required = [name for key, name in find_row(FORMAT, op.name).tensors.items() if key != PROJECTION]
    missing = [name for name in required if _input(op, name) == UNSET]
    if missing:
        cifg = " (its input gate coupled to its forget gate, CIFG)" if missing[0] == required[0] else ""
        return f"{where} has no {', '.join(missing)}{cifg}: cuDNN's {_cell(op.name).upper()} needs every gate's weights"
    for state in TFLITE_STATE_INPUTS[op.name]:
        if _input(op, state) == UNSET:
            return f"{where} has no {state} tensor"
    return None


def _weights(file: TfliteFile, op: Op, row: Row, where: str) -> dict[str, int]:
    """The op's stored tensors by the row's keys, each checked to be a float constant (Unsupported otherwise)."""
    found = {}
    for key, name in row.tensors.items():
        t = _input(op, name)
        if t == UNSET:
            continue
        tensor = file.tensors[t]
        if tensor.data is None or tensor.dtype not in FLOAT_TYPES:
            file.constant(t, f"{where} {name}")  # says why
        found[key] = t
    return found


def to_canonical(file: TfliteFile, chain: Chain, source: Provenance) -> CanonicalRNN:
    first = chain.first
    row = find_row(FORMAT, first.name)
    cells: dict[tuple[int, int], dict[str, int]] = {}
    for layer, held in enumerate(chain.layers):
        for direction, op in enumerate(held.ops):
            where = f"op {op.index} ({op.title}, layer {layer})"
            reason = _refusal(file, op, where)
            if reason:
                raise Unsupported(reason)
            cells[(layer, direction)] = _weights(file, op, row, where)
    code = _options(first)["activation"]
    activation = ACTIVATION_NAMES.get(code, f"activation code {code}")
    settled = settle(row, {"activation": activation}, chain.name, unstored=())
    gate = CUDNN_GATES[row.cell][-1]
    weights = cells[(0, 0)]
    hidden, input_size = file.tensors[weights[per_gate(INPUT_MATRIX, gate)]].shape
    proj_tensor = weights.get(PROJECTION)
    proj = file.tensors[proj_tensor].shape[0] if proj_tensor is not None else 0
    dtypes = {file.tensors[t].dtype for cell in cells.values() for t in cell.values()}
    if len(dtypes) > 1:
        raise Unsupported(f"{chain.name}: its weights are of several types ({', '.join(sorted(dtypes))})")

    def cell_of(layer: int, direction: int, _: RNNSpec) -> StoredCell:
        held = cells[(layer, direction)]
        where = f"{chain.name} layer {layer} direction {direction}"
        return StoredCell(
            fetch=lambda key: file.constant(held[key], f"{where} {row.tensors[key]}"),
            shapes={key: file.tensors[t].shape for key, t in held.items()},
            names={key: file.tensors[t].name or row.tensors[key] for key, t in held.items()},
            where=where,
        )

    found = Found(
        chain.name,
        row,
        settled,
        int(input_size),
        int(hidden),
        dtypes.pop(),
        cell_of,
        first.title,
        num_layers=len(chain.layers),
        bidirectional=len(chain.layers[0].ops) == 2,
        proj=int(proj),
        handover={"keepalive": file},
    )
    rnn = read(found, source)
    if file.recorded is not None:
        rnn.origin = registry.read_source_record(file.recorded, file.path)
    return rnn


def _sizes(file: TfliteFile, chain: Chain) -> RNNSizes | None:
    """The sizes of ops that do not convert, as far as their weights' shapes tell."""
    first = chain.first
    row = find_row(FORMAT, first.name)
    gate = CUDNN_GATES[row.cell][-1]
    matrix = _input(first, row.tensors[per_gate(INPUT_MATRIX, gate)])
    if matrix == UNSET or len(file.tensors[matrix].shape) != 2:
        return None
    hidden, input_size = file.tensors[matrix].shape
    mode = next(mode for mode, (cell, _) in CUDNN_MODES.items() if cell == row.cell)
    with contextlib.suppress(RnnconvError, ValueError):
        spec = RNNSpec(mode, input_size, hidden, len(chain.layers), len(chain.layers[0].ops) == 2)
        return RNNSizes.of(spec.to_model())
    return None


# --- the graph rnnconv writes and runs --------------------------------------------------------------------------


@dataclass
class Constant:
    """A constant tensor of a graph being written: its values are asked for only as the file is written."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    values: Callable[[], np.ndarray]

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

    def tensor(self, tensor: GraphTensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def constant(self, constant: Constant) -> int:
        self.buffers.append(constant)
        return self.tensor(
            GraphTensor(constant.name, list(constant.shape), dtype=constant.dtype, buffer=len(self.buffers) - 1)
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
        return int(builder.EndObject())
    if op_name == "CONCATENATION":
        builder.StartObject(2)
        builder.PrependInt32Slot(0, options["axis"], 0)
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
        b.StartObject(11)
        b.PrependUOffsetTRelativeSlot(0, shape, 0)
        b.PrependInt8Slot(1, TFLITE_TENSOR_TYPES[t.dtype], 0)
        b.PrependUint32Slot(2, t.buffer, 0)
        b.PrependUOffsetTRelativeSlot(3, name, 0)
        b.PrependBoolSlot(5, t.variable, False)
        if signature is not None:
            b.PrependUOffsetTRelativeSlot(7, signature, 0)
        tensors.append(b.EndObject())
    codes = list(dict.fromkeys(op for op, *_ in graph.ops))
    ops = []
    for op, inputs, outputs, options in graph.ops:
        ins, outs = _vector(b, inputs), _vector(b, outputs)
        table = _options_table(b, op, options)
        b.StartObject(14)
        b.PrependUint32Slot(0, codes.index(op), 0)
        b.PrependUOffsetTRelativeSlot(1, ins, 0)
        b.PrependUOffsetTRelativeSlot(2, outs, 0)
        if table is not None:
            b.PrependUint8Slot(3, TFLITE_OPTIONS[op], 0)
            b.PrependUOffsetTRelativeSlot(4, table, 0)
        ops.append(b.EndObject())
    code_tables = []
    for op in codes:
        b.StartObject(4)
        b.PrependInt8Slot(0, min(TFLITE_OPS[op], 127), 0)  # deprecated_builtin_code: the code, below 127
        b.PrependInt32Slot(2, 1, 1)
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


# --- writing ------------------------------------------------------------------------------------------------

NO_GRU = (
    "TFLite has no fused GRU op (only UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN): a GRU would have to be written as a "
    "WHILE loop or unrolled ops, which rnnconv does not write; convert it to ONNX (--to onnx)"
)


def _writable(rnn: CanonicalRNN, dtype: str | None) -> str:
    """The op that holds the RNN; Unsupported (one sentence) where TFLite cannot hold it exactly."""
    spec = rnn.spec
    if spec.cell == GRU:
        raise Unsupported(NO_GRU)
    if dtype not in (None, "float32"):
        raise Unsupported(f"TFLite's LSTM and RNN ops compute with float32 weights, not {dtype}")
    if dtype is None and spec.dtype == "float64":
        raise Unsupported(
            "TFLite's LSTM and RNN ops compute with float32 weights: the source's float64 weights would be rounded; "
            "say --dtype float32 to accept that"
        )
    return TFLITE_CELL_OPS[spec.cell]


def graph_of(rnn: CanonicalRNN, dtype: str | None = None) -> Graph:
    """The graph of a canonical RNN, its weights taken from it one layer and direction at a time."""
    op_name = _writable(rnn, dtype)
    spec = rnn.spec
    row = find_row(FORMAT, op_name)
    layers = []
    for layer in range(spec.num_layers):
        width = spec.layer_input_size(layer)
        directions = []
        for direction in range(spec.num_directions):
            suffix = TORCH_REVERSE_SUFFIX if direction else ""
            shapes = stored_shapes(row, spec.hidden_size, width, spec.output_size, spec.proj_size, True)
            directions.append(
                {
                    _slot(op_name, key): Constant(
                        f"layer{layer}{suffix}/{row.tensors[key]}",
                        shape,
                        "float32",
                        _values(rnn, row, ParamKey(layer, direction, "", ""), key, shape),
                    )
                    for key, shape in shapes.items()
                }
            )
        layers.append(directions)
    activation = _activation_code(row, spec.mode)
    return build_graph(
        op_name, spec.input_size, (spec.hidden_size, spec.output_size), layers, {"activation": activation}
    )


def _values(rnn: CanonicalRNN, row: Row, cell: ParamKey, key: str, shape: tuple[int, ...]) -> Callable[[], Any]:
    """A loader of one stored tensor of a cell, made by the row's layouts from the canonical tensors it needs; a
    matrix still in a float32 source file, stacked in cuDNN's order (a state_dict, a weight space), stays there
    (a FileArray of its rows: written file to file)."""
    found = {per_gate(role, gate): (role, gate) for role in (*MATRIX_ROLES, BIAS) for gate in row.gate_order}
    role, gate = found.get(key, (PROJECTION, ""))

    def param(kind: str, which: str) -> np.ndarray:
        return rnn.param(ParamKey(cell.layer, cell.direction, kind, which))

    def load() -> Any:
        if role in MATRIX_ROLES and row.matrix is MATRIX_PER_GATE:  # the stored tensor is cuDNN's block itself
            block = _in_file(rnn, ParamKey(cell.layer, cell.direction, KIND_OF_ROLE[role], gate))
            if block is not None:
                return block
        out = {key: np.empty(shape, np.float32)}
        if role in MATRIX_ROLES:
            row.matrix.store(out, role, row.gate_order, gate, shape[0], param(KIND_OF_ROLE[role], gate))
        elif role == BIAS:
            row.bias.store(out, row.gate_order, gate, shape[0], *(param(kind, gate) for kind in BIAS_KINDS))
        else:
            out[key][...] = param(Kind.P, "")
        return out[key]

    return load


def _in_file(rnn: CanonicalRNN, key: ParamKey) -> FileArray | None:
    """A matrix's rows in the source file, when the source holds its gates stacked in cuDNN's order as float32."""
    stacked = rnn.stacked(key.layer, key.direction, key.kind)
    if not isinstance(stacked, FileArray) or stacked.dtype != np.float32:
        return None
    gates = 1 if key.kind == Kind.P else len(rnn.spec.gates)
    index = 0 if key.kind == Kind.P else rnn.spec.gates.index(key.gate)
    shape = rnn.spec.param_shape(key)
    if stacked.shape != (gates * shape[0], *shape[1:]):
        return None
    block: FileArray = stacked[index * shape[0] : (index + 1) * shape[0]]
    return block


def _activation_code(row: Row, mode: str) -> int:
    name = next(activation for activation, runs in row.modes.items() if runs == mode)
    return TFLITE_ACTIVATIONS[name]


def write_tflite(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> CanonicalRNN:
    rnn = registry.only_rnn(rnns, "a .tflite")
    graph = graph_of(rnn, options.dtype)

    def recorded(wait: bool = True) -> np.ndarray:  # the source's digest is still being computed: written last
        text = registry.recorded_source(rnn, path, wait).model_dump_json(by_alias=True, exclude_none=True)
        return np.frombuffer(text.encode(), np.uint8)

    graph.buffers.append(Constant(registry.SOURCE_KEY, (len(recorded(wait=False)),), "uint8", recorded))
    graph.metadata[registry.SOURCE_KEY] = len(graph.buffers) - 1
    serialize(graph)  # refuses a model over the flatbuffer's limit before any file is made
    with atomic_outputs([path], options.force) as (tmp,), open(tmp, "wb") as f:
        write_graph(graph, f, options.progress)
    return rnn


# --- running, in LiteRT's interpreter ---------------------------------------------------------------------------


def _interpreter() -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise BackendMissing(
            "running TFLite needs LiteRT's interpreter, which is not installed (pip install 'rnnconv[tflite]')"
        ) from None
    return Interpreter


def litert_version() -> str:
    """LiteRT's version for the report; BackendMissing (exit 3) where LiteRT is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    _interpreter()
    try:
        return version("ai-edge-litert")
    except PackageNotFoundError:  # importable without its metadata (a copied tree, a vendored build)
        return "(version unknown)"


def run_graph(graph: Graph, inputs: Inputs | dict[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """The graph in LiteRT's interpreter (CPU): y, h_n, c_n sequence-major as cuDNN's, from x, h0, c0."""
    x = np.asarray(inputs["x"])
    lengths = inputs.get("lengths")
    if lengths is not None and np.any(np.asarray(lengths) != x.shape[0]):
        raise Unsupported(
            "TFLite's LSTM and RNN ops take no sequence lengths (every sequence runs all steps): verify a .tflite "
            "without --ragged"
        )
    steps, batch, _ = x.shape
    interpreter = _interpreter()(model_content=model_bytes(graph))
    try:
        interpreter.resize_tensor_input(graph.inputs[0], [batch, steps, x.shape[2]])
        for states in graph.states:
            for t in states:
                interpreter.resize_tensor_input(t, [batch, graph.tensors[t].shape[-1]])
        interpreter.allocate_tensors()
        interpreter.set_tensor(graph.inputs[0], np.ascontiguousarray(x.transpose(1, 0, 2), np.float32))
        given = [inputs.get("h0"), inputs.get("c0")]
        for index, states in enumerate(graph.states):
            for k, t in enumerate(states):
                start = given[k]
                if start is not None:
                    interpreter.set_tensor(t, np.ascontiguousarray(np.asarray(start)[index], np.float32))
        interpreter.invoke()
        y = interpreter.get_tensor(graph.outputs[0]).transpose(1, 0, 2)
        finals = [
            np.stack([interpreter.get_tensor(states[k]) for states in graph.states])
            for k in range(2)
            if all(len(states) > k for states in graph.states)
        ]
    except (RuntimeError, ValueError) as exc:
        raise BadInput(f"LiteRT's interpreter cannot run this model: {first_line(exc, 300)}") from None
    return {"y": y, "h_n": finals[0], "c_n": finals[1] if len(finals) > 1 else None}


def _stored(file: TfliteFile, t: int) -> Callable[[], np.ndarray]:
    return lambda: file.constant(t, "a weight").astype(np.float32)


def graph_of_file(file: TfliteFile, chain: Chain) -> Graph:
    """The chain's own ops in rnnconv's graph: every input as the file stores it (widened to float32), and its
    options as stored but for the layout of x and y (batch-major here)."""
    first = chain.first
    layers = []
    for held in chain.layers:
        directions = []
        for op in held.ops:
            constants = {}
            for slot, t in enumerate(op.inputs):
                tensor = file.tensors[t] if t != UNSET else None
                if slot and tensor is not None and tensor.data is not None:
                    constants[slot] = Constant(
                        tensor.name,
                        tensor.shape,
                        "float32",
                        _stored(file, t),
                    )
            directions.append(constants)
        layers.append(directions)
    row = find_row(FORMAT, first.name)
    gate = CUDNN_GATES[row.cell][-1]
    hidden = file.tensors[_input(first, row.tensors[per_gate(INPUT_MATRIX, gate)])].shape[0]
    out = file.tensors[_input(first, row.tensors[per_gate(RECURRENT_MATRIX, gate)])].shape[1]
    input_size = file.tensors[_input(first, row.tensors[per_gate(INPUT_MATRIX, gate)])].shape[1]
    return build_graph(first.name, input_size, (hidden, out), layers, _options(first))


# --- the format ---------------------------------------------------------------------------------------------


class TfliteEngine(registry.RuntimeEngine):
    """The blob as the .tflite rnnconv writes, in LiteRT's interpreter: kernels nobody here wrote."""

    name = "tflite"
    format_name = FORMAT
    suffix = ".tflite"

    def run(self, blob: Any, inputs: Inputs) -> Outputs:
        rnn = blob.to_canonical()
        if losses := tflite_losses(rnn):
            raise Unsupported(losses[0].term)
        return run_graph(graph_of(rnn, "float32"), inputs)  # the interpreter computes float32 whatever the blob holds

    detail = "LiteRT's interpreter (CPU) running the blob as TFLite ops, float32"
    modules = (("ai-edge-litert", "ai_edge_litert"),)


def tflite_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What TFLite's fused ops cannot hold of `rnn`: a GRU (there is no fused GRU op)."""
    if rnn.spec.cell != GRU:
        return []
    return [registry.Loss(NO_GRU)]


@register
class TfliteFormat(Format):
    info = FORMAT_INFO[FORMAT]
    sniff_order = 20
    engine = TfliteEngine  # verify --backend tflite
    runtimes = (registry.Runtime("tflite", TfliteEngine.modules, "TFLite models' own ops"),)

    def sniff(self, probe: Probe) -> bool:
        return probe.head[4:8] == TFLITE_IDENTIFIER

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = TfliteFile.load(path)
        info = Provenance(path=str(path.resolve()), format=FORMAT)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains, lambda chain: to_canonical(file, chain, info), lambda chain: chain.name, digest
        )
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return tflite_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = write_tflite(rnns, path, options)
        spec = rnn.spec
        states = ", ".join(
            TFLITE_STATE_NAME.format(state=state, layer=0, suffix="")
            for state in TFLITE_STATES[: len(TFLITE_STATE_INPUTS[TFLITE_CELL_OPS[spec.cell]])]
        )
        return Written(
            [path],
            usage="from ai_edge_litert.interpreter import Interpreter\n"
            f"interpreter = Interpreter({registry.literal(path)})   # resize x to (batch, steps, {spec.input_size}) "
            f"and the states ({states}, ...) to (batch, size), allocate_tensors, set x, invoke, read y "
            f"(batch, steps, {spec.num_directions * spec.output_size})",
        )

    def inspect(self, path: Path) -> InspectReport:
        file = TfliteFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                chain.name,
                chain.first.title,
                functools.partial(to_canonical, file, chain, provenance),
                functools.partial(_sizes, file, chain),
            )
            for chain in file.chains
        ]
        notes = [f"operators: {file.op_listing() or 'none'}"]
        notes += [
            f"{chain.name}: ops {', '.join(str(op.index) for layer in chain.layers for op in layer.ops)} are the "
            f"layers and directions of one RNN"
            for chain in file.chains
            if sum(len(layer.ops) for layer in chain.layers) > 1
        ]
        return InspectReport(path=str(path), format=FORMAT, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == FORMAT:
            return recorded
        file = TfliteFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": chain.name, "format": FORMAT})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own ops, their weights and options as stored, in LiteRT's interpreter."""
        file = TfliteFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        rnn = to_canonical(file, chain, source)  # refuses what it cannot compare
        if (rnn.spec.input_size, rnn.spec.num_layers) != (spec.input_size, spec.num_layers):
            raise BadInput(f"the TFLite ops {chain.name} are not the RNN the blob describes ({spec.describe()})")
        how = f"ai-edge-litert {litert_version()}: the file's own {chain.first.title} op(s)"
        if chain.first.shown:  # a bidirectional op's two directions, run as the unidirectional ops they compute
            how += f", each direction as an {chain.first.name}"
        return run_graph(graph_of_file(file, chain), inputs), how
