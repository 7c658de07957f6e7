"""An OpenVINO IR read without OpenVINO, for untrusted files: the XML parsed with no DOCTYPE or entity, every
Const's offset and size checked against the .bin, the sequence ops, the chains of them that are one RNN, and each
chain's canonical form through the table's OpenVINO rows."""

from __future__ import annotations

import contextlib
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance, RoundedInput
from rnnconv.core.dtypes import decode, element_type
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats import sources
from rnnconv.formats._cells import LoopLayer, loop_layers
from rnnconv.formats._graph import (
    CONCAT,
    IDENTITY,
    MAX_GLUE,
    Glue,
    Graph,
    chained,
    glued,
    named,
    refuse,
    same_rnn,
)
from rnnconv.formats._quantized import (
    Quantization,
    dequantized,
    exact_dtype,
    note,
    quantization,
    record,
    rounding_dropped,
    rounding_refusal,
)
from rnnconv.formats.openvino.decompression import (
    Quantized,
    decompression,
    fed,
    in_f16_range,
    read_quantized,
    stored_float,
)
from rnnconv.formats.openvino.loops import LOOP_OPS, MAX_LOOPS, Loop, MainGraph, read_loop
from rnnconv.formats.openvino.wire import (
    COMPUTE_TYPE,
    DTYPE_OF,
    OPENVINO_BIDIRECTIONAL,
    OPENVINO_DEFAULT_ACTIVATIONS,
    OPENVINO_DIRECTIONS,
    OPENVINO_FORWARD,
    OPENVINO_GLUE,
    OPENVINO_INITIAL_H,
    OPENVINO_INPUT_COUNT,
    OPENVINO_INTEGERS,
    OPENVINO_IR_VERSIONS,
    OPENVINO_KERNEL_INPUTS,
    OPENVINO_LENGTHS,
    OPENVINO_QUANTIZED,
    OPENVINO_REVERSE,
    OPENVINO_ROUNDING,
    OPENVINO_ROUNDING_INPUTS,
    OPENVINO_SCALE,
    OPENVINO_WEIGHT_NAMES,
    OPENVINO_WEIGHT_PORTS,
    OPENVINO_X,
    QUANTIZED_STORAGE,
    SEQUENCE_OPS,
    STORAGE,
)
from rnnconv.formats.reading import Found, StoredCell, read, settle
from rnnconv.safeio.inputs import FileArray, regular_file
from rnnconv.table.apply import find_row, stored_shapes
from rnnconv.table.constants import CUDNN_MODES, INPUT_MATRIX

XML_LIMIT = 64 << 20  # bytes of XML: far more than any graph of RNN layers needs
MAX_LAYERS_IN_GRAPH = 200_000  # layers of an IR, at most (a hostile file cannot make the reader walk more)
MAX_DIMS = 16
MAX_HIDDEN = 1 << 20
MAX_LEVELS = 1 << 16  # a FakeQuantize's levels, at most (16 bits)


class _Refused(Exception):
    """A DTD met while parsing: the parse stops there, before any of it is read."""


def parse_xml(text: bytes, path: Path) -> ET.Element:
    """The element tree of an IR's XML, parsed by expat whatever the encoding it declares, with no DTD: a DOCTYPE
    (and so any entity) is refused where expat meets it, before anything it declares is read."""
    parser = expat.ParserCreate()
    builder = ET.TreeBuilder()

    def refuse(*_: object) -> None:
        raise _Refused

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse  # a DTD's only way in is a DOCTYPE; this holds should that ever change
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data  # a port's dims are its elements' text
    try:
        parser.Parse(text, True)
    except _Refused:
        raise BadInput(f"{path} declares a DOCTYPE or an entity, which no OpenVINO IR has: refused unread") from None
    except expat.ExpatError as exc:
        raise BadInput(f"{path} is not well-formed XML ({expat.ErrorString(exc.code)}, line {exc.lineno})") from None
    except (ValueError, LookupError):  # an encoding expat cannot decode (UTF-7, UTF-32, one Python has not)
        raise BadInput(f"{path} declares an encoding rnnconv cannot read as XML (OpenVINO writes UTF-8)") from None
    try:
        return builder.close()
    except AssertionError:  # no element at all (expat reports that as an error first; this is its backstop)
        raise BadInput(f"{path} is not well-formed XML (no element)") from None


@dataclass
class IRLayer:
    id: str
    kind: str
    version: str
    name: str
    data: dict[str, str]
    inputs: list[str]  # port ids, in order
    outputs: list[str]
    element: ET.Element | None = None  # a Loop's or TensorIterator's, whose body it holds


@dataclass
class SequenceOp:
    """One LSTMSequence/GRUSequence/RNNSequence: its attributes and weights (by role, one row per direction)."""

    name: str
    layer: str  # its layer id
    op: str
    attributes: dict[str, str]
    weights: dict[str, FileArray | np.ndarray] = field(default_factory=dict)  # quantized ones dequantized
    dtype: str = ""
    refusal: str | None = None  # why its weights cannot be read
    quantized: dict[str, list[tuple[str, Quantization]]] = field(default_factory=dict)  # role -> per direction
    stored: dict[str, Quantized] = field(default_factory=dict)  # role -> its quantized weight as the file holds it
    rounding: RoundedInput | None = None  # the FakeQuantize that rounds its X (its layer set in the chain)
    rounding_range: tuple[float, float] = (0.0, 0.0)  # that FakeQuantize's input (and output) low and high
    loops: list[Loop] = field(default_factory=list)  # Loops whose bodies compute a cell: the layer's directions
    below: LoopLayer[Loop] | None = None  # the loop layer whose output sequence a loop layer reads

    @classmethod
    def of_loops(cls, layer: LoopLayer[Loop]) -> SequenceOp:
        loop = layer.loops[0]
        hidden = loop.reading.hidden if loop.reading is not None else loop.sizes[1]
        refusal = next((x.refusal for x in layer.loops if x.refusal is not None), None)
        direction = OPENVINO_BIDIRECTIONAL if len(layer.loops) == 2 else OPENVINO_FORWARD
        attributes = {"hidden_size": str(hidden), "direction": direction}
        return cls(
            loop.name, loop.layer.id, loop.layer.kind, attributes, refusal=refusal, loops=layer.loops, below=layer.below
        )

    @property
    def hidden(self) -> int:
        return int(self.attributes["hidden_size"])

    @property
    def direction(self) -> str:
        return self.attributes.get("direction", OPENVINO_FORWARD)

    @property
    def directions(self) -> int:
        return OPENVINO_DIRECTIONS[self.direction]

    @property
    def input_size(self) -> int:
        if self.loops:
            return self.loops[0].sizes[0]
        return int(self.weights[INPUT_MATRIX].shape[2]) if INPUT_MATRIX in self.weights else 0

    @property
    def width(self) -> int:
        return self.directions * self.hidden

    @property
    def shown_class(self) -> str:
        if self.loops:
            reading = self.loops[0].reading
            return f"{self.op} ({CUDNN_MODES[reading.mode][0].upper()} cell)" if reading is not None else self.op
        return self.op

    @property
    def kind(self) -> object:
        """What the ops of one RNN have alike; None for an op whose weights are not read."""
        if self.loops:
            reading = self.loops[0].reading
            ok = self.refusal is None and reading is not None
            return (
                (self.op, reading.mode, reading.hidden, reading.reset_after, self.direction) if ok and reading else None
            )
        return None if self.refusal is not None else (self.op, self.hidden, self.direction, self.config(), self.dtype)

    def activations(self) -> list[str]:
        given = self.attributes.get("activations")
        if given is None:
            return list(OPENVINO_DEFAULT_ACTIVATIONS[self.op])
        return [a.strip() for a in given.split(",") if a.strip()]

    def config(self) -> dict[str, Any]:
        """The op as the table's OpenVINO row reads it (activations, linear_before_reset)."""
        acts = self.activations() or ["none"]
        config: dict[str, Any] = {"activation": acts[-1]}
        if len(acts) > 1:
            config["recurrent_activation"] = acts[0]
        if len(acts) == 3 and acts[1] != acts[2]:
            config["activation"] = f"{acts[1]} (cell input) with {acts[2]} (cell output)"
        if "linear_before_reset" in self.attributes:
            config["linear_before_reset"] = self.attributes["linear_before_reset"].lower() == "true"
        return config

    def expected_shapes(self, input_size: int) -> dict[str, tuple[int, ...]]:
        row = find_row("openvino", self.op, self.config())
        shapes = stored_shapes(row, self.hidden, input_size, self.hidden)
        return {role: (self.directions, *shape) for role, shape in shapes.items()}


class IRFile(Graph[SequenceOp]):
    """An OpenVINO IR: its layers and edges, its sequence ops, and the chains of them that are one RNN."""

    what = "sequence op"
    between = "; "

    def __init__(self, path: Path) -> None:
        self.path = path
        size = regular_file(path)
        if size > XML_LIMIT:
            raise BadInput(f"{path} is {size} bytes of XML, more than an IR of RNN layers holds ({XML_LIMIT})")
        root = parse_xml(path.read_bytes(), path)
        if root.tag != "net" or root.get("version") not in OPENVINO_IR_VERSIONS:
            raise BadInput(
                f"{path} is no OpenVINO IR of version {' or '.join(OPENVINO_IR_VERSIONS)} (<net version=...>)"
            )
        self.weights_path = path.with_suffix(".bin")
        self.ir: dict[str, IRLayer] = {}  # the IR's layers, by id
        for element in root.iterfind("layers/layer"):
            if len(self.ir) >= MAX_LAYERS_IN_GRAPH:
                raise BadInput(f"{path} has more than {MAX_LAYERS_IN_GRAPH} layers")
            layer = _layer(element, path)
            if layer.id in self.ir:
                raise BadInput(f"{path}: two layers have the id {layer.id!r}")
            self.ir[layer.id] = layer
        self.producer: dict[tuple[str, str], tuple[str, str]] = {}
        for edge in root.iterfind("edges/edge"):
            ends = [edge.get(k) for k in ("from-layer", "from-port", "to-layer", "to-port")]
            if any(e is None for e in ends) or ends[0] not in self.ir or ends[2] not in self.ir:
                raise BadInput(f"{path}: an edge names a layer the IR does not have ({ends})")
            self.producer[(str(ends[2]), str(ends[3]))] = (str(ends[0]), str(ends[1]))
        self.rt_info = {child.tag: child.get("value", "") for child in root.iterfind("rt_info/*")}
        self._bin_size: int | None = None
        ops = [self._sequence(layer) for layer in self.ir.values() if layer.kind in SEQUENCE_OPS]
        if any(layer.kind in LOOP_OPS for layer in self.ir.values()):
            graph = MainGraph(self, root, MAX_LAYERS_IN_GRAPH)
            held = sorted((layer for layer in self.ir.values() if layer.kind in LOOP_OPS), key=graph.place)
            if len(held) > MAX_LOOPS:
                raise BadInput(f"{path} holds {len(held)} Loops, more than any model rnnconv reads")
            found = []
            for layer in held:  # in the graph's order: a layer's loops read what the graph makes of those below
                loop = read_loop(self, layer, graph)
                if loop is not None:
                    graph.read(loop)
                    found.append(loop)
            ops += [SequenceOp.of_loops(layer) for layer in loop_layers(graph, found)]
        counts: dict[str, int] = {}
        for op in ops:
            counts[op.name] = counts.get(op.name, 0) + 1
        for op in ops:  # names are not unique in an IR: the layer id makes them so
            if counts[op.name] > 1:
                op.name = f"{op.name}#{op.layer}"
        record = self.rt_info.get(sources.SOURCE_KEY)
        recorded = None if record is None else sources.read_source_record(record, path)
        super().__init__(path, "openvino", ops, named(self._chains(ops)), recorded)

    # --- tensors

    @property
    def bin_size(self) -> int:
        if self._bin_size is None:
            self._bin_size = regular_file(self.weights_path, "the weights file")
        return self._bin_size

    def input_of(self, layer: IRLayer, index: int) -> tuple[IRLayer, str] | None:
        """The layer and output port that feed input `index` of a layer."""
        if index >= len(layer.inputs):
            return None
        found = self.producer.get((layer.id, layer.inputs[index]))
        return (self.ir[found[0]], found[1]) if found else None

    def const(self, layer: IRLayer, storage: dict[str, np.dtype[Any]] = STORAGE) -> tuple[FileArray, str]:
        """A Const's values, still in the .bin (its offset and size checked), and its element type (of `storage`:
        the quantized ones only where a quantized weight is read)."""
        etype = layer.data.get("element_type", "")
        if etype not in storage:
            raise Unsupported(f"Const {layer.name!r} holds {etype or 'untyped'} values, not a type rnnconv reads")
        shape = _shape(layer.data.get("shape"), f"Const {layer.name!r}")
        offset, size = _integer(layer.data.get("offset"), layer.name), _integer(layer.data.get("size"), layer.name)
        if size != math.prod(shape) * storage[etype].itemsize:
            raise BadInput(f"Const {layer.name!r}: size {size} is not that of {shape} {etype} values")
        if offset + size > self.bin_size:
            raise BadInput(
                f"Const {layer.name!r} lies at bytes {offset}-{offset + size} of {self.weights_path.name}, which has "
                f"{self.bin_size}: the IR points past its weights (truncated or not its .bin)"
            )
        return FileArray(self.weights_path, offset, storage[etype], shape), etype

    def integers(self, layer: IRLayer, index: int) -> list[int] | None:
        """The integer Const that feeds input `index`, or None when it is none."""
        found = self.input_of(layer, index)
        if found is None or found[0].kind != "Const" or found[0].data.get("element_type") not in OPENVINO_INTEGERS:
            return None
        values, _ = self.const(found[0])
        if values.size > 64:
            return None
        return [int(v) for v in np.asarray(values).reshape(-1)]

    def _weight(self, op: IRLayer, role: str) -> tuple[FileArray | Quantized, str]:
        found = self.input_of(op, OPENVINO_WEIGHT_PORTS[op.kind][role])
        what = f"{op.kind} {op.name!r}: its {role.replace('_', ' ')}"
        if found is None:
            raise BadInput(f"{what} is not connected")
        source, _ = found
        if source.kind == OPENVINO_SCALE or decompression(source, self._producer):
            return read_quantized(self.const, source, what, self._producer), DTYPE_OF[COMPUTE_TYPE]
        return stored_float(self.const, source, what, self._producer)

    def _producer(self, layer: Any, index: int) -> IRLayer | None:
        found = self.input_of(layer, index)
        return found[0] if found is not None else None

    def _feeding(self, layer: IRLayer, index: int, kind: str, what: str) -> IRLayer:
        """The layer of `kind` that feeds input `index` (BadInput where another does)."""
        found: IRLayer = fed(self._producer, layer, index, kind, what)
        return found

    def _dequantize(
        self, op: SequenceOp, role: str, weight: Quantized
    ) -> tuple[np.ndarray, list[tuple[str, Quantization]]]:
        """A quantized weight's floats, scale * (q - zero_point), exactly (float64), and its quantization per
        direction: one scale for the tensor or each direction, or one per output row, each direction's own
        ((directions, rows, 1)) or shared by both ((1, rows, 1): what nncf writes of a bidirectional op), as
        OpenVINO's numpy broadcast applies them."""
        what = f"{op.op} {op.name!r}: its {role.replace('_', ' ')}"
        q = weight.values
        if q.ndim != 3 or q.shape[0] != op.directions:
            raise BadInput(f"{what} has the quantized shape {list(q.shape)}, not (directions, rows, columns)")
        per_row = (q.shape[0], q.shape[1], 1)
        spread = {}  # scales and zero points as (directions, rows or 1) each
        for part, values in (("scales", weight.scales), ("zero points", weight.zero_points and weight.zero_points[0])):
            if values is None:
                continue
            shape = (1,) * (3 - values.ndim) + tuple(values.shape)
            if values.ndim > 3 or shape[0] not in (1, q.shape[0]) or shape[1] not in (1, q.shape[1]) or shape[2] != 1:
                shared = f", or [1, {q.shape[1]}, 1] for both directions" if q.shape[0] > 1 else ""
                raise BadInput(
                    f"{what}: its {part} have the shape {list(values.shape)}, neither one nor one per row of its "
                    f"{list(q.shape)} integers ({list(per_row)}{shared})"
                )
            spread[part] = np.broadcast_to(np.asarray(values).reshape(shape)[..., 0], (q.shape[0], shape[1]))
        scales = np.asarray(spread["scales"], np.float32)
        zeros = spread.get("zero points", np.zeros((q.shape[0], 1), np.int64))
        stored, held = np.asarray(q), []
        parts = []
        for d in range(op.directions):
            each, zero = scales[d], zeros[d]
            if zero.size == 1 and each.size > 1:
                zero = np.repeat(zero, each.size)
            where = f"{what} (direction {d})" if op.directions > 1 else what
            quant = quantization(  # along the rows of the stored (directions, rows, columns) tensor
                each.tolist(), zero.tolist(), 1, (1, *q.shape[1:]), OPENVINO_QUANTIZED[weight.etype], where
            )
            held.append((f"{op.name}/{role}" + (f"[{d}]" if op.directions > 1 else ""), quant))
            parts.append(dequantized(stored[d : d + 1], quant))
        floats = np.concatenate(parts)
        in_f16_range(floats, weight, what)
        return floats, held

    def _rounding(self, layer: IRLayer, op: SequenceOp) -> RoundedInput | None:
        """The FakeQuantize that rounds a sequence op's X, through the glue before it; None where none does."""
        found = self.input_of(layer, 0)
        for _ in range(MAX_GLUE + 1):
            if found is None or found[0].kind not in (*OPENVINO_GLUE, OPENVINO_ROUNDING):
                return None
            if found[0].kind == OPENVINO_ROUNDING:
                return self._rounded(found[0], op)
            found = self.input_of(found[0], 0)
        return None

    def _rounded(self, fq: IRLayer, op: SequenceOp) -> RoundedInput:
        """A FakeQuantize as the rounding it is: its input range, and its output the same (what nncf writes)."""
        what = f"{OPENVINO_ROUNDING} {fq.name!r}"
        levels = fq.data.get("levels", "")
        if not levels.isdigit() or not 2 <= int(levels) <= MAX_LEVELS or len(levels) > 6:
            raise BadInput(f"{what} has levels={levels!r}, not a count from 2 to {MAX_LEVELS}")
        if len(fq.inputs) != OPENVINO_ROUNDING_INPUTS:
            raise BadInput(f"{what} has {len(fq.inputs)} inputs, not {OPENVINO_ROUNDING_INPUTS}")
        bounds = []
        for index, name in enumerate(("input_low", "input_high", "output_low", "output_high"), start=1):
            const = self._feeding(fq, index, "Const", f"{what}: its {name}")
            values, etype = self.const(const)
            if etype != COMPUTE_TYPE or values.size != 1:
                raise Unsupported(
                    f"{what}: its {name} is {list(values.shape)} {etype} values, not one {COMPUTE_TYPE} value (a "
                    f"per-tensor rounding, what rnnconv reads)"
                )
            bounds.append(float(np.asarray(values).reshape(-1)[0]))
        low, high, out_low, out_high = bounds
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise BadInput(f"{what} rounds to the range {low:.4g} to {high:.4g}, which is no range of values")
        if (out_low, out_high) != (low, high):
            raise Unsupported(
                f"{what} maps its input range {low:.4g} to {high:.4g} onto {out_low:.4g} to {out_high:.4g}: it scales "
                f"the values besides rounding them, which no RNN's input does"
            )
        step = (high - low) / (int(levels) - 1)
        op.rounding_range = (low, high)
        return RoundedInput(value="x", layer=0, low=low, step=step, levels=int(levels), by=what)

    # --- sequence ops and chains

    def _sequence(self, layer: IRLayer) -> SequenceOp:
        found = SequenceOp(layer.name, layer.id, layer.kind, dict(layer.data))
        version = re.fullmatch(r"opset(\d+)", layer.version)
        if version is None or int(version[1]) < 5:
            found.refusal = (
                f"{layer.kind} {layer.name!r} is of version {layer.version!r}; rnnconv reads the sequence ops of "
                f"opset5 and later (opset1's LSTMSequence has peepholes and input_forget)"
            )
            return found
        _check_attributes(found)
        if len(layer.inputs) != OPENVINO_INPUT_COUNT[layer.kind]:
            raise BadInput(
                f"{layer.kind} {layer.name!r} has {len(layer.inputs)} inputs; it takes "
                f"{OPENVINO_INPUT_COUNT[layer.kind]}"
            )
        dtypes = set()
        for role in OPENVINO_WEIGHT_PORTS[layer.kind]:
            try:
                weight, dtype = self._weight(layer, role)
                if isinstance(weight, Quantized):
                    found.stored[role] = weight
                    found.weights[role], found.quantized[role] = self._dequantize(found, role, weight)
                else:
                    found.weights[role] = weight
            except Unsupported as exc:
                found.refusal = found.refusal or str(exc)
                continue
            dtypes.add(dtype)
        try:
            found.rounding = self._rounding(layer, found)
        except Unsupported as exc:
            found.refusal = found.refusal or str(exc)
        if found.refusal is not None:
            return found
        if found.quantized:  # one type for the op's weights: float64 where a product of a scale and an integer needs it
            wide = exact_dtype(np.asarray(w) for w in found.weights.values())
            found.weights = {role: np.asarray(w).astype(wide) for role, w in found.weights.items()}
            dtypes = {wide}
        if len(dtypes) > 1:
            raise BadInput(f"{layer.kind} {layer.name!r}: its weights are of different types ({', '.join(dtypes)})")
        found.dtype = dtypes.pop()
        w = found.weights[INPUT_MATRIX]
        if w.ndim != 3 or w.shape[2] < 1:
            raise BadInput(f"{layer.kind} {layer.name!r}: W has shape {w.shape}, not (directions, gates*hidden, input)")
        with contextlib.suppress(Unsupported):  # a refused row (reset-before GRU) still has shapes to check
            for role, shape in found.expected_shapes(w.shape[2]).items():
                if found.weights[role].shape != shape:
                    raise BadInput(
                        f"{layer.kind} {layer.name!r}: {role.replace('_', ' ')} has shape {found.weights[role].shape}, "
                        f"but a {found.directions}-direction {layer.kind} with hidden_size {found.hidden} needs {shape}"
                    )
        return found

    def _chains(self, ops: list[SequenceOp]) -> list[list[SequenceOp]]:
        """Runs of ops where each one's X is the previous one's Y moved as cuDNN feeds its next layer."""
        readable = {op.layer: op for op in ops if op.kind is not None}

        def step(found: tuple[IRLayer, str] | None) -> tuple[Glue, tuple[IRLayer, str] | None] | None:
            if found is None or found[0].kind not in (*OPENVINO_GLUE, OPENVINO_ROUNDING):
                return None
            return self._glue(found[0]), self.input_of(found[0], 0)

        def giver(found: tuple[IRLayer, str] | None) -> SequenceOp | None:
            """The op whose Y (its first output) the value is."""
            op = readable.get(found[0].id) if found is not None else None
            outputs = self.ir[op.layer].outputs if op is not None else []
            return op if found is not None and outputs and found[1] == outputs[0] else None

        through = glued(lambda op: self.input_of(self.ir[op.layer], 0), step, giver)

        def below(later: SequenceOp) -> SequenceOp | None:
            if not later.loops:
                return through(later)
            beneath = next((op for op in ops if later.below is not None and op.loops is later.below.loops), None)
            return beneath if beneath is not None and same_rnn(beneath, later) else None

        return chained(ops, below)

    def _glue(self, layer: IRLayer) -> Glue:
        """A glue layer as far as moving axes goes: its permutation, shape or axes (its second input), or the
        tensors a Concat joins."""
        if layer.kind == CONCAT:
            return Glue(layer.kind, inputs=len(layer.inputs))
        if layer.kind == OPENVINO_ROUNDING:  # moves no axis: what it rounds is the later op's (its `rounding`)
            return Glue(IDENTITY)
        return Glue(layer.kind, self.integers(layer, 1), layer.data.get("special_zero", "false").lower() == "true")

    def nothing_held(self) -> str:
        return f"{self.path} holds no {', '.join(SEQUENCE_OPS)} ({self.listing()})"

    def listing(self, most: int = 8) -> str:
        """The kinds of layers the graph holds, the commonest first: "12 Const, 3 Parameter, ..."."""
        counts = Counter(layer.kind for layer in self.ir.values())
        more = ", ..." if len(counts) > most else ""
        return "its graph holds " + ", ".join(f"{n} {kind}" for kind, n in counts.most_common(most)) + more

    def interface(self) -> bool:
        """Whether the file is the graph rnnconv writes: its inputs and outputs by those names, one RNN in it."""
        names = {layer.name for layer in self.ir.values() if layer.kind == "Parameter"}
        return len(self.chains) == 1 and {OPENVINO_X, OPENVINO_INITIAL_H, OPENVINO_LENGTHS} <= names


def _layer(element: ET.Element, path: Path) -> IRLayer:
    ident, kind = element.get("id"), element.get("type")
    if ident is None or kind is None:
        raise BadInput(f"{path}: a layer has no id or type")
    data_element = element.find("data")
    data = dict(data_element.attrib) if data_element is not None else {}
    inputs = [p.get("id", "") for p in element.iterfind("input/port")]
    outputs = [p.get("id", "") for p in element.iterfind("output/port")]
    body = element if kind in LOOP_OPS else None
    return IRLayer(ident, kind, element.get("version", ""), element.get("name", ident), data, inputs, outputs, body)


def _shape(text: str | None, what: str) -> tuple[int, ...]:
    if text is None:
        raise BadInput(f"{what} has no shape")
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) > MAX_DIMS or not all(p.isdigit() for p in parts):
        raise BadInput(f"{what} has the shape {text!r}, not a list of at most {MAX_DIMS} sizes")
    return tuple(int(p) for p in parts)


def _integer(text: str | None, what: str) -> int:
    if text is None or not text.strip().isdigit() or len(text) > 20:
        raise BadInput(f"Const {what!r} has the offset or size {text!r}, not a byte count")
    return int(text)


def _check_attributes(op: SequenceOp) -> None:
    hidden = op.attributes.get("hidden_size", "")
    if not hidden.isdigit() or not 1 <= int(hidden) <= MAX_HIDDEN:
        raise BadInput(f"{op.op} {op.name!r}: hidden_size is {hidden!r}, not a size from 1 to {MAX_HIDDEN}")
    if op.direction not in OPENVINO_DIRECTIONS:
        raise BadInput(f"{op.op} {op.name!r}: direction {op.direction!r} is none of {', '.join(OPENVINO_DIRECTIONS)}")


def _refusal(op: SequenceOp) -> str | None:
    """Why cuDNN cannot compute an op, beyond what the table's row says."""
    if op.refusal is not None:
        return op.refusal
    clip = op.attributes.get("clip", "0").strip()
    with contextlib.suppress(ValueError):
        if float(clip) == 0:
            clip = ""
    if clip:
        return f"{op.op} {op.name!r} clips its gates' inputs (clip={clip}), which cuDNN does not"
    if op.attributes.get("activations_alpha", "").strip() or op.attributes.get("activations_beta", "").strip():
        return f"{op.op} {op.name!r} gives its activations alpha/beta parameters, which cuDNN's have not"
    if len(op.activations()) != len(OPENVINO_DEFAULT_ACTIVATIONS[op.op]):
        count = len(OPENVINO_DEFAULT_ACTIVATIONS[op.op])
        return f"{op.op} {cut(op.name)!r} has the activations {listing(op.activations())}; a {op.op} takes {count}"
    return None


def _quantized_refusal(chain: list[SequenceOp], dequantize: bool, rounding: list[RoundedInput]) -> str | None:
    """Why a chain of ops quantized by nncf is not read: without --dequantize (its integer weights), without
    --allow-lossy (its rounded inputs), in one sentence naming what each flag would convert."""
    quantized = [op for op in chain if op.quantized]
    if not quantized or dequantize:
        return None
    first = quantized[0]
    schemes = sorted({quant.scheme() for op in quantized for held in op.quantized.values() for _, quant in held})
    types = sorted({weight.etype for op in quantized for weight in op.stored.values()})
    scales = "/".join(sorted({weight.scale_type for op in quantized for weight in op.stored.values()}))
    roles = " and ".join(OPENVINO_WEIGHT_NAMES[role] for role in first.quantized)
    rounded = (
        f"; its inputs are rounded too ({', '.join(r.by for r in rounding)}), which --allow-lossy leaves out"
        if rounding
        else ""
    )
    return (
        f"{first.op} {first.name!r} computes with quantized weights (its {roles} are "
        f"{'/'.join(types)} Consts times their {scales} scales, {', '.join(schemes)}), which cuDNN does not compute "
        "with; "
        f"--dequantize converts the float model they stand for, scale * (q - zero_point){rounded}"
    )


def to_canonical(
    chain: list[SequenceOp], source: Provenance, bias_split: str, dequantize: bool = False, lossy: bool = False
) -> CanonicalRNN:
    """The canonical RNN of a chain of ops (one op: one layer); `dequantize`: quantized weights read as
    scale * (q - zero_point); `lossy` (--allow-lossy): inputs a FakeQuantize rounds read without the rounding."""
    first = chain[0]
    refuse(chain, _refusal)
    rounding = [op.rounding.model_copy(update={"layer": index}) for index, op in enumerate(chain) if op.rounding]
    refusal = _quantized_refusal(chain, dequantize, rounding)
    if refusal is None and rounding and not lossy:
        refusal = rounding_refusal(",".join(op.name for op in chain), rounding)
    if refusal is not None:
        raise Unsupported(refusal)
    config = first.config()
    row = find_row("openvino", first.op, config)
    settled = settle(row, config, first.name)
    if CUDNN_MODES[settled.mode][0] != SEQUENCE_OPS[first.op]:
        raise Unsupported(f"{first.op} {first.name!r} cannot compute cuDNN's {settled.mode}")
    dirs = first.directions
    for index, op in enumerate(chain[1:], start=1):
        if not same_rnn(chain[index - 1], op):
            raise BadInput(f"{chain[index - 1].name!r} and {op.name!r} are not two layers of one RNN")

    def cell_of(layer: int, d: int, _: RNNSpec) -> StoredCell:
        op = chain[layer]
        stored: dict[str, Any] = {role: values[d] for role, values in op.weights.items()}
        fetch = stored.__getitem__
        if op.dtype == "bfloat16":  # stored as words: widened exactly when read

            def fetch(role: str, stored: dict[str, Any] = stored) -> np.ndarray:
                return decode(np.asarray(stored[role]), element_type("bfloat16"))

        shapes = {role: tuple(values.shape) for role, values in stored.items()}
        return StoredCell(fetch, shapes, row.tensors, f"{op.op} {op.name!r}")

    notes = []
    if first.direction == OPENVINO_REVERSE:
        notes.append(
            f"{first.name}: a reverse-only {first.op}, converted as a forward one (rnnconv's RNNs have no reverse-only "
            f"direction): feed the converted RNN the sequence reversed (each sequence within its length) and reverse "
            f"its outputs to match OpenVINO"
        )
    name = ",".join(op.name for op in chain)
    provenance: dict[str, Any] = {"stacked": [op.name for op in chain] if len(chain) > 1 else None}
    later = []
    held = [quant for op in chain for each in op.quantized.values() for quant in each]
    if held:  # OpenVINO computes in float with what the Multiply gives: the float model is the op's own
        bits = {QUANTIZED_STORAGE[weight.etype].itemsize * 8 for op in chain for weight in op.stored.values()}
        provenance["dequantized"] = record(held, max(bits)).model_copy(update={"inputs": OPENVINO_KERNEL_INPUTS})
        types = {weight.etype for op in chain for weight in op.stored.values()}
        # what the source computes with: its widest integer type (one layer's may be i8, another's u8)
        widest = max(types, key=lambda etype: (QUANTIZED_STORAGE[etype].itemsize, etype))
        provenance["dtype"] = OPENVINO_QUANTIZED[widest]
        how = "here the same: OpenVINO computes in float with what the Multiply gives"
        later.append(note(name, provenance["dequantized"], first.dtype, how))
    found = Found(
        name,
        row,
        settled,
        input_size=first.input_size,
        hidden=first.hidden,
        dtype=first.dtype,
        cell=cell_of,
        layer_class=first.op,
        num_layers=len(chain),
        bidirectional=dirs == 2,
        bias_split=bias_split,
        notes=notes,
        later_notes=later,
        provenance=provenance,
    )
    rnn = read(found, source)
    return rounding_dropped(rnn, rounding) if rounding else rnn
