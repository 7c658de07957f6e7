"""OpenVINO IR: the LSTMSequence, GRUSequence and RNNSequence ops of a `.xml` + `.bin` model, read into the canonical
form and written from it, both without OpenVINO; `run` and verify use its CPU plugin.

Written models are one runnable graph of every layer and direction: inputs x (batch, seq, input), initial_h and
initial_c (layers*directions, batch, hidden), sequence_lens (batch,); outputs y (batch, seq, directions*hidden),
h_n and c_n (layers*directions, batch, hidden). Layer l+1 reads layer l's y. The weights are Consts in model.bin,
float32, or float16 / bfloat16 decompressed to float32 by a Convert (as `ov.save_model(compress_to_fp16=True)`
writes them). Where the RNN came from is recorded in the model's rt_info.

Reading is for untrusted files: the XML may hold no DOCTYPE or entity, its size is bounded, the weights must be
in the `.bin` of the same stem beside it, and every Const's offset and size is checked against that file before
anything is read. Sequence ops joined by Transpose/Reshape/Squeeze that move the directions as cuDNN does (what
rnnconv writes) are one multi-layer RNN. What cuDNN cannot compute is refused: a GRUSequence with
linear_before_reset=false, clip, activation alpha/beta, activations other than cuDNN's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.compare import Inputs
from rnnconv.contracts import InspectReport, Provenance, RNNSizes
from rnnconv.dtypes import ElementType, decode, element_type, encode
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, first_line, no_such_rnn, several_rnns
from rnnconv.formats import registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import FileArray, atomic_outputs, digest_in_background, reading, regular_file, write_array
from rnnconv.table.apply import find_row, mode_for, row_for_mode, stored_shapes
from rnnconv.table.constants import (
    CUDNN_GATES,
    CUDNN_MODES,
    INPUT_MATRIX,
    KIND_OF_ROLE,
    LSTM,
    MATRIX_ROLES,
    OPENVINO_BIDIRECTIONAL,
    OPENVINO_C_N,
    OPENVINO_DECOMPRESSION,
    OPENVINO_DEFAULT_ACTIVATIONS,
    OPENVINO_DIRECTIONS,
    OPENVINO_ELEMENT_TYPES,
    OPENVINO_FORWARD,
    OPENVINO_GLUE,
    OPENVINO_H_N,
    OPENVINO_INITIAL_C,
    OPENVINO_INITIAL_H,
    OPENVINO_INPUT_COUNT,
    OPENVINO_INTEGERS,
    OPENVINO_IR_VERSION,
    OPENVINO_IR_VERSIONS,
    OPENVINO_LENGTHS,
    OPENVINO_OPS,
    OPENVINO_OPSET,
    OPENVINO_PRECISIONS,
    OPENVINO_REVERSE,
    OPENVINO_WEIGHT_PORTS,
    OPENVINO_X,
    OPENVINO_Y,
    Kind,
)
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.layouts import MATRIX_ROWS
from rnnconv.table.reading import Found, StoredCell, read, settle
from rnnconv.table.rows import Row
from rnnconv.version import __version__

XML_LIMIT = 64 << 20  # bytes of XML: far more than any graph of RNN layers needs
SNIFF_BYTES = 4096
MAX_LAYERS_IN_GRAPH = 200_000  # layers of an IR, at most (a hostile file cannot make the reader walk more)
MAX_DIMS = 16
MAX_HIDDEN = 1 << 20
MAX_GLUE = 4  # ops between two layers of one RNN, at most
SEQUENCE_OPS = {op: cell for cell, op in OPENVINO_OPS.items()}
DTYPE_OF = {etype: name for name, etype in OPENVINO_ELEMENT_TYPES.items()}
STORAGE = {
    **{OPENVINO_ELEMENT_TYPES[name]: element_type(name).storage for name in OPENVINO_ELEMENT_TYPES},
    **{etype: np.dtype(storage) for etype, storage in OPENVINO_INTEGERS.items()},
}
INDEX_TYPE = next(iter(OPENVINO_INTEGERS))  # i32: sequence_lens
SHAPE_TYPE = list(OPENVINO_INTEGERS)[-1]  # i64: perms, shapes, axes
COMPUTE_TYPE = OPENVINO_ELEMENT_TYPES["float32"]  # what the graph computes in
WRITES = ("float32", "float16", "bfloat16")  # float16 and bfloat16 weights are decompressed to float32
DOCTYPE = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
NET = re.compile(rb"<net\b[^>]*\bversion\s*=\s*[\"'](\d+)[\"']")


def require_openvino() -> Any:
    try:
        import openvino
    except ImportError:
        raise BackendMissing(
            "running an OpenVINO IR needs openvino, which is not installed (pip install 'rnnconv[openvino]')"
        ) from None
    return openvino


# --- writing: an IR of Parameters, Consts, sequence ops and their glue ------------------------------------------


@dataclass
class Tensor:
    """A Const's values: its element type, shape, and its bytes as arrays (of the storage type, C order) that
    follow each other, yielded one at a time so that a writer holds one part."""

    etype: str
    shape: tuple[int, ...]
    parts: Callable[[], Iterator[np.ndarray | FileArray]]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * STORAGE[self.etype].itemsize


def constant(values: np.ndarray, etype: str) -> Tensor:
    array = np.array(values, dtype=STORAGE[etype], order="C")  # 0-d stays 0-d (a Split's axis is a scalar)
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
    """One sequence op of a built graph: its op, attributes, and weights by role (W, R, B as the op takes them)."""

    op: str
    attributes: dict[str, str]
    weights: dict[str, Tensor]


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
            graph.const(f"{prefix}/{role}", layer.weights[role], COMPUTE_TYPE)
            for role in sorted(OPENVINO_WEIGHT_PORTS[layer.op], key=OPENVINO_WEIGHT_PORTS[layer.op].__getitem__)
        ]
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


def openvino_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What OpenVINO's sequence ops cannot compute of `rnn`: an LSTM's projection."""
    if not rnn.spec.proj_size:
        return []
    return [
        registry.Loss(
            f"OpenVINO's LSTMSequence has no projection (h = W_hr h', proj_size={rnn.spec.proj_size}): no OpenVINO "
            f"op holds the LSTM's projection matrix"
        )
    ]


def layers_of(rnn: CanonicalRNN, dtype: str) -> list[Layer]:
    """The sequence ops of a canonical RNN, its tensors stored as the table's OpenVINO row says."""
    spec = rnn.spec
    if losses := openvino_losses(rnn):
        raise Unsupported(f"{rnn.name}: {losses[0].term}")
    row, activation = row_for_mode("openvino", spec.mode)
    attributes = {
        "direction": OPENVINO_BIDIRECTIONAL if spec.bidirectional else OPENVINO_FORWARD,
        "hidden_size": str(spec.hidden_size),
        "activations": ", ".join(_activations_for(row.source_class, activation)),
        "activations_alpha": "",
        "activations_beta": "",
        "clip": "0",
    }
    if "linear_before_reset" in row.when:
        attributes["linear_before_reset"] = str(row.when["linear_before_reset"]).lower()
    etype = OPENVINO_ELEMENT_TYPES[dtype]
    layers = []
    for layer in range(spec.num_layers):
        n_in = spec.layer_input_size(layer)
        shapes = stored_shapes(row, spec.hidden_size, n_in, spec.output_size)
        weights = {}
        for role, shape in shapes.items():
            weights[role] = Tensor(etype, (spec.num_directions, *shape), _parts(rnn, row, layer, role, shape, dtype))
        layers.append(Layer(row.source_class, attributes, weights))
    return layers


def _activations_for(op: str, activation: str) -> list[str]:
    default = list(OPENVINO_DEFAULT_ACTIVATIONS[op])
    return [activation] if len(default) == 1 else default


def _in_file(rnn: CanonicalRNN, key: ParamKey, etype: ElementType) -> FileArray | None:
    """A gate's block still in the source file as `etype`'s words (a state_dict, a weight space holding the gates
    stacked in cuDNN's order): copied file to file, never read."""
    stacked = rnn.stacked(key.layer, key.direction, key.kind)
    if not isinstance(stacked, FileArray) or stacked.dtype != etype.storage or etype.name == "bfloat16":
        return None
    rows = rnn.spec.param_shape(key)[0]
    if stacked.shape != (len(rnn.spec.gates) * rows, *rnn.spec.param_shape(key)[1:]):
        return None
    index = rnn.spec.gates.index(key.gate)
    block: FileArray = stacked[index * rows : (index + 1) * rows]
    return block


def _parts(
    rnn: CanonicalRNN, row: Row, layer: int, role: str, shape: tuple[int, ...], dtype: str
) -> Callable[[], Iterator[np.ndarray | FileArray]]:
    """One role's tensor of one layer, direction by direction, assembled from cuDNN's blocks by the row's layout
    (a matrix stacked by rows is its gates' blocks one after the other: written block by block, from the source
    file itself where it holds them)."""
    spec = rnn.spec
    order, etype = row.gate_order, element_type(dtype)

    def parts() -> Iterator[np.ndarray | FileArray]:
        for d in range(spec.num_directions):
            if role in MATRIX_ROLES and row.matrix == MATRIX_ROWS:  # each gate's block is a run of the tensor
                for gate in order:
                    key = ParamKey(layer, d, KIND_OF_ROLE[role], gate)
                    in_file = _in_file(rnn, key, etype)
                    yield encode(rnn.param(key), etype) if in_file is None else in_file
                continue
            out = {role: np.zeros(shape, np.float32)}
            for gate in CUDNN_GATES[row.cell]:
                if role in MATRIX_ROLES:
                    block = rnn.param(ParamKey(layer, d, KIND_OF_ROLE[role], gate))
                    row.matrix.store(out, role, order, gate, spec.hidden_size, block)
                else:
                    biases = (rnn.param(ParamKey(layer, d, kind, gate)) for kind in (Kind.bW, Kind.bR))
                    row.bias.store(out, order, gate, spec.hidden_size, *biases)
            yield encode(out[role], etype)

    return parts


def write_ir(
    rnns: list[CanonicalRNN], path: Path, dtype: str, force: bool, progress: Callable[[int, int], None] | None
) -> Path:
    rnn = registry.only_rnn(rnns, "an .xml")
    if dtype not in WRITES:
        raise Unsupported(
            f"rnnconv writes OpenVINO IRs of {', '.join(WRITES)} weights (computed in float32 by OpenVINO), "
            f"not {dtype}: {dtype} values would be rounded; say --dtype float32"
        )
    weights = path.with_suffix(".bin")
    registry.weights_free(path, weights, force)
    graph = build(layers_of(rnn, dtype), rnn.spec.input_size, rnn.name)
    with atomic_outputs([path, weights], force) as (xml_tmp, bin_tmp):
        with open(bin_tmp, "wb") as f:
            graph.write_bin(f, progress)
        # where the RNN came from, for `verify model.xml` (its digest was computed meanwhile, on another core)
        graph.rt_info[registry.SOURCE_KEY] = registry.source_record(rnn, path)
        graph.rt_info["rnnconv.version"] = __version__
        xml_tmp.write_text(graph.xml(), encoding="utf-8")
    return weights


# --- reading -------------------------------------------------------------------------------------------------


@dataclass
class IRLayer:
    id: str
    kind: str
    version: str
    name: str
    data: dict[str, str]
    inputs: list[str]  # port ids, in order
    outputs: list[str]


@dataclass
class SequenceOp:
    """One LSTMSequence/GRUSequence/RNNSequence: its attributes and weights (by role, one row per direction)."""

    name: str
    layer: str  # its layer id
    op: str
    attributes: dict[str, str]
    weights: dict[str, FileArray] = field(default_factory=dict)
    dtype: str = ""
    refusal: str | None = None  # why its weights cannot be read

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
        return int(self.weights[INPUT_MATRIX].shape[2]) if INPUT_MATRIX in self.weights else 0

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


class IRFile:
    """An OpenVINO IR: its layers and edges, its sequence ops, and the chains of them that are one RNN."""

    def __init__(self, path: Path) -> None:
        self.path = path
        size = regular_file(path)
        if size > XML_LIMIT:
            raise BadInput(f"{path} is {size} bytes of XML, more than an IR of RNN layers holds ({XML_LIMIT})")
        text = path.read_bytes()
        if DOCTYPE.search(text):
            raise BadInput(f"{path} declares a DOCTYPE or an entity, which no OpenVINO IR has: refused unread")
        try:
            root = ET.fromstring(text)
        except ET.ParseError as exc:
            raise BadInput(f"{path} is not well-formed XML ({exc})") from None
        if root.tag != "net" or root.get("version") not in OPENVINO_IR_VERSIONS:
            raise BadInput(
                f"{path} is no OpenVINO IR of version {' or '.join(OPENVINO_IR_VERSIONS)} (<net version=...>)"
            )
        self.weights_path = path.with_suffix(".bin")
        self.layers: dict[str, IRLayer] = {}
        for element in root.iterfind("layers/layer"):
            if len(self.layers) >= MAX_LAYERS_IN_GRAPH:
                raise BadInput(f"{path} has more than {MAX_LAYERS_IN_GRAPH} layers")
            layer = _layer(element, path)
            if layer.id in self.layers:
                raise BadInput(f"{path}: two layers have the id {layer.id!r}")
            self.layers[layer.id] = layer
        self.producer: dict[tuple[str, str], tuple[str, str]] = {}
        for edge in root.iterfind("edges/edge"):
            ends = [edge.get(k) for k in ("from-layer", "from-port", "to-layer", "to-port")]
            if any(e is None for e in ends) or ends[0] not in self.layers or ends[2] not in self.layers:
                raise BadInput(f"{path}: an edge names a layer the IR does not have ({ends})")
            self.producer[(str(ends[2]), str(ends[3]))] = (str(ends[0]), str(ends[1]))
        self.rt_info = {child.tag: child.get("value", "") for child in root.iterfind("rt_info/*")}
        self._bin_size: int | None = None
        self.ops = [self._sequence(layer) for layer in self.layers.values() if layer.kind in SEQUENCE_OPS]
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.name] = counts.get(op.name, 0) + 1
        for op in self.ops:  # names are not unique in an IR: the layer id makes them so
            if counts[op.name] > 1:
                op.name = f"{op.name}#{op.layer}"
        self.chains = self._chains()

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
        return (self.layers[found[0]], found[1]) if found else None

    def const(self, layer: IRLayer) -> tuple[FileArray, str]:
        """A Const's values, still in the .bin (its offset and size checked), and its element type."""
        etype = layer.data.get("element_type", "")
        if etype not in STORAGE:
            raise Unsupported(f"Const {layer.name!r} holds {etype or 'untyped'} values, not a type rnnconv reads")
        shape = _shape(layer.data.get("shape"), f"Const {layer.name!r}")
        offset, size = _integer(layer.data.get("offset"), layer.name), _integer(layer.data.get("size"), layer.name)
        if size != math.prod(shape) * STORAGE[etype].itemsize:
            raise BadInput(f"Const {layer.name!r}: size {size} is not that of {shape} {etype} values")
        if offset + size > self.bin_size:
            raise BadInput(
                f"Const {layer.name!r} lies at bytes {offset}-{offset + size} of {self.weights_path.name}, which has "
                f"{self.bin_size}: the IR points past its weights (truncated or not its .bin)"
            )
        return FileArray(self.weights_path, offset, STORAGE[etype], shape), etype

    def integers(self, layer: IRLayer, index: int) -> list[int] | None:
        """The integer Const that feeds input `index`, or None when it is none."""
        found = self.input_of(layer, index)
        if found is None or found[0].kind != "Const" or found[0].data.get("element_type") not in OPENVINO_INTEGERS:
            return None
        values, _ = self.const(found[0])
        if values.size > 64:
            return None
        return [int(v) for v in np.asarray(values).reshape(-1)]

    def _weight(self, op: IRLayer, role: str) -> tuple[FileArray, str]:
        found = self.input_of(op, OPENVINO_WEIGHT_PORTS[op.kind][role])
        what = f"{op.kind} {op.name!r}: its {role.replace('_', ' ')}"
        if found is None:
            raise BadInput(f"{what} is not connected")
        source, _ = found
        if source.kind == OPENVINO_DECOMPRESSION:
            if source.data.get("destination_type") not in DTYPE_OF:
                raise Unsupported(f"{what} is converted to {source.data.get('destination_type')}, not a float type")
            inner = self.input_of(source, 0)
            if inner is None or inner[0].kind != "Const":
                raise Unsupported(
                    f"{what} is a Convert of a {inner[0].kind if inner else 'missing'} layer, not a Const"
                )
            source = inner[0]
        elif source.kind != "Const":
            raise Unsupported(
                f"{what} is computed by a {source.kind} layer, not stored in a Const: rnnconv reads weights stored as "
                f"they are (or f16 Consts decompressed by Convert)"
            )
        values, etype = self.const(source)
        if etype not in DTYPE_OF:
            raise Unsupported(f"{what} holds {etype} values, not floats")
        return values, DTYPE_OF[etype]

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
                found.weights[role], dtype = self._weight(layer, role)
            except Unsupported as exc:
                found.refusal = found.refusal or str(exc)
                continue
            dtypes.add(dtype)
        if found.refusal is not None:
            return found
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

    def _chains(self) -> list[list[SequenceOp]]:
        """Runs of ops where each one's X is the previous one's Y moved as cuDNN feeds its next layer."""
        readable = {op.layer: op for op in self.ops if op.refusal is None}
        following: dict[str, SequenceOp] = {}
        preceded: set[str] = set()
        for later in readable.values():
            glue: list[IRLayer] = []
            found = self.input_of(self.layers[later.layer], 0)
            while found is not None and found[0].kind in OPENVINO_GLUE and len(glue) < MAX_GLUE:
                glue.insert(0, found[0])
                found = self.input_of(found[0], 0)
            if found is None or found[0].id not in readable:
                continue
            earlier = readable[found[0].id]
            y_port = self.layers[earlier.layer].outputs[0] if self.layers[earlier.layer].outputs else None
            if found[1] != y_port or earlier.layer in following or not _same_rnn(earlier, later):
                continue
            if self._moves_directions(glue, earlier):
                following[earlier.layer] = later
                preceded.add(later.layer)
        chains = []
        for op in self.ops:
            if op.layer in preceded:
                continue
            chain = [op]
            while chain[-1].layer in following and len(chain) <= len(self.ops):
                chain.append(following[chain[-1].layer])
            chains.append(chain)
        return chains

    def _moves_directions(self, glue: list[IRLayer], earlier: SequenceOp) -> bool:
        """Whether the glue turns Y (batch, D, seq, H) into (batch, seq, D*H)."""
        if not glue:
            return False
        kinds = [g.kind for g in glue]
        width = earlier.directions * earlier.hidden
        if kinds == ["Squeeze"]:
            return earlier.directions == 1 and self.integers(glue[0], 1) == [1]
        if kinds == ["Transpose", "Reshape"] or (kinds == ["Reshape"] and earlier.directions == 1):
            if kinds[0] == "Transpose" and self.integers(glue[0], 1) != [0, 2, 1, 3]:
                return False
            shape = self.integers(glue[-1], 1)
            zero = glue[-1].data.get("special_zero", "false").lower() == "true"
            if shape is None or len(shape) != 3 or shape[2] not in (-1, width):
                return False
            kept = [0] if zero else []
            return shape[0] in [-1, *kept] and shape[1] in [-1, *kept] and shape.count(-1) <= 1
        return False

    def choose(self, layer: str | None, take_all: bool) -> list[list[SequenceOp]]:
        if layer is not None:
            names = [n.strip() for n in layer.split(",")]
            for chain in self.chains:
                if [op.name for op in chain] == names:
                    return [chain]
            single = [op for op in self.ops if op.name == names[0]] if len(names) == 1 else []
            if single:
                return [single]
            known = [op.name for op in self.ops] + [",".join(op.name for op in c) for c in self.chains if len(c) > 1]
            raise no_such_rnn(f"{self.path} has no sequence op or chain", layer, known)
        if not self.ops:
            raise BadInput(f"{self.path} holds no {', '.join(SEQUENCE_OPS)} ({self.listing()})")
        if len(self.chains) == 1 or take_all:
            return self.chains
        listing = "; ".join(",".join(op.name for op in chain) for chain in self.chains)
        raise several_rnns(self.path, f"holds {len(self.chains)} RNNs ({listing})")

    def listing(self, most: int = 8) -> str:
        """The kinds of layers the graph holds, the commonest first: "12 Const, 3 Parameter, ..."."""
        counts = Counter(layer.kind for layer in self.layers.values())
        more = ", ..." if len(counts) > most else ""
        return "its graph holds " + ", ".join(f"{n} {kind}" for kind, n in counts.most_common(most)) + more

    def interface(self) -> bool:
        """Whether the file is the graph rnnconv writes: its inputs and outputs by those names, one RNN in it."""
        names = {layer.name for layer in self.layers.values() if layer.kind == "Parameter"}
        return len(self.chains) == 1 and {OPENVINO_X, OPENVINO_INITIAL_H, OPENVINO_LENGTHS} <= names


def _layer(element: ET.Element, path: Path) -> IRLayer:
    ident, kind = element.get("id"), element.get("type")
    if ident is None or kind is None:
        raise BadInput(f"{path}: a layer has no id or type")
    data_element = element.find("data")
    data = dict(data_element.attrib) if data_element is not None else {}
    inputs = [p.get("id", "") for p in element.iterfind("input/port")]
    outputs = [p.get("id", "") for p in element.iterfind("output/port")]
    return IRLayer(ident, kind, element.get("version", ""), element.get("name", ident), data, inputs, outputs)


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


def _same_rnn(earlier: SequenceOp, later: SequenceOp) -> bool:
    same = (
        earlier.op == later.op
        and earlier.hidden == later.hidden
        and earlier.direction == later.direction
        and earlier.config() == later.config()
        and earlier.dtype == later.dtype
    )
    return same and later.input_size == earlier.directions * earlier.hidden


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
        return f"{op.op} {op.name!r} has the activations {op.activations()}; a {op.op} takes {count}"
    return None


def to_canonical(chain: list[SequenceOp], source: Provenance, bias_split: str) -> CanonicalRNN:
    """The canonical RNN of a chain of ops (one op: one layer)."""
    first = chain[0]
    for op in chain:
        reason = _refusal(op)
        if reason:
            raise Unsupported(reason)
    config = first.config()
    row = find_row("openvino", first.op, config)
    settled = settle(row, config, first.name)
    if CUDNN_MODES[settled.mode][0] != SEQUENCE_OPS[first.op]:
        raise Unsupported(f"{first.op} {first.name!r} cannot compute cuDNN's {settled.mode}")
    dirs = first.directions
    for index, op in enumerate(chain[1:], start=1):
        if not _same_rnn(chain[index - 1], op):
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
    found = Found(
        ",".join(op.name for op in chain),
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
        provenance={"stacked": [op.name for op in chain] if len(chain) > 1 else None},
    )
    return read(found, source)


def _sizes(chain: list[SequenceOp]) -> RNNSizes | None:
    first = chain[0]
    if INPUT_MATRIX not in first.weights:
        return None
    cell = SEQUENCE_OPS[first.op]
    try:
        mode = mode_for(find_row("openvino", first.op, first.config()), first.config())
    except RnnconvError:
        mode = next(m for m, (c, _) in CUDNN_MODES.items() if c == cell)
    with contextlib.suppress(RnnconvError, ValueError):
        spec = RNNSpec(mode, first.input_size, first.hidden, len(chain), first.directions == 2, 0, first.dtype)
        return RNNSizes.of(spec.to_model())
    return None


def recorded_source(file: IRFile) -> Provenance | None:
    """Where an IR rnnconv wrote says its RNN came from (None when it says nothing; BadInput on garbage)."""
    text = file.rt_info.get(registry.SOURCE_KEY)
    return None if text is None else registry.read_source_record(text, file.path)


# --- running in OpenVINO's CPU plugin ----------------------------------------------------------------------


def run_ir(xml: Path, inputs: Inputs, lstm: bool) -> dict[str, np.ndarray | None]:
    """An IR of rnnconv's interface in OpenVINO's CPU plugin (float32, static shapes): y, h_n, c_n sequence-major.

    Static shapes: with dynamic ones the CPU plugin of openvino 2026.4 ignores sequence_lens.
    """
    ov = require_openvino()
    x = np.ascontiguousarray(np.asarray(inputs["x"], np.float32).transpose(1, 0, 2))
    batch, steps = x.shape[:2]
    lengths = inputs.get("lengths")
    feeds = {
        OPENVINO_X: x,
        OPENVINO_INITIAL_H: np.asarray(inputs["h0"], np.float32),
        OPENVINO_LENGTHS: np.full(batch, steps, np.int32) if lengths is None else np.asarray(lengths, np.int32),
    }
    if lstm:
        feeds[OPENVINO_INITIAL_C] = np.asarray(inputs["c0"], np.float32)
    try:
        core = ov.Core()
        model = core.read_model(str(xml))
        model.reshape({name: list(value.shape) for name, value in feeds.items()})
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        results = compiled(feeds)
        got = {output.get_any_name(): np.asarray(results[output]) for output in compiled.outputs}
    except RuntimeError as exc:  # OpenVINO's own errors: a graph it refuses to read or run
        raise BadInput(f"OpenVINO cannot run {xml}: {first_line(exc, 300)}") from None
    y = np.ascontiguousarray(got[OPENVINO_Y].transpose(1, 0, 2))
    return {"y": y, "h_n": got[OPENVINO_H_N], "c_n": got.get(OPENVINO_C_N)}


def _one(values: FileArray) -> Callable[[], Iterator[np.ndarray | FileArray]]:
    return lambda: iter([values])


def _own_layers(chain: list[SequenceOp]) -> list[Layer]:
    """A chain's ops with their weights and attributes as the file holds them."""
    layers = []
    for op in chain:
        attributes = dict(op.attributes)
        weights = {}
        for role, values in op.weights.items():
            etype = OPENVINO_ELEMENT_TYPES[op.dtype]
            weights[role] = Tensor(etype, tuple(values.shape), _one(values))
        layers.append(Layer(op.op, attributes, weights))
    return layers


def reverse_sequences(x: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """Each sequence of (T, B, ...) reversed within its length (padding stays at the end)."""
    out = np.array(x)
    for b in range(x.shape[1]):
        n = x.shape[0] if lengths is None else int(lengths[b])
        out[:n, b] = x[:n, b][::-1]
    return out


def _write_graph(graph: Graph, folder: Path) -> Path:
    xml = folder / "model.xml"
    with open(xml.with_suffix(".bin"), "wb") as f:
        graph.write_bin(f)
    xml.write_text(graph.xml(), encoding="utf-8")
    return xml


# --- the format ---------------------------------------------------------------------------------------------


class OpenvinoEngine(registry.RuntimeEngine):
    """The blob as the IR rnnconv writes, in OpenVINO's CPU plugin: equations nobody here wrote."""

    name = "openvino"
    format_name = "openvino"
    suffix = ".xml"

    detail = "OpenVINO's CPU plugin running the blob as an IR, float32"
    modules = (("openvino", "openvino"),)


@register
class OpenvinoFormat(Format):
    info = FORMAT_INFO["openvino"]
    sniff_order = 40
    engine = OpenvinoEngine  # verify --backend openvino
    runtimes = (registry.Runtime("openvino", OpenvinoEngine.modules, "OpenVINO IRs' own graphs"),)

    def sniff(self, probe: Probe) -> bool:
        if probe.path.suffix.lower() != ".xml" or not probe.head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
            return False
        with open(probe.path, "rb") as f:
            head = f.read(SNIFF_BYTES)
        return NET.search(head) is not None

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = IRFile(path)
        info = Provenance(path=str(path.resolve()), format="openvino")
        origin = recorded_source(file)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains,
            lambda chain: to_canonical(chain, info, options.bias_split),
            lambda chain: ",".join(op.name for op in chain),
            digest,
            origin,
        )
        # the weights are a source too: never written over (model.bin is also a cuDNN blob's default name), and
        # watched like the .xml while they are read
        with reading(file.weights_path):
            yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return openvino_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        spec = rnns[0].spec
        # OpenVINO computes in float32: narrower weights are stored as they are and decompressed by a Convert
        dtype = options.dtype or (spec.dtype if spec.dtype in WRITES else "float32")
        warnings = []
        if options.dtype is None and dtype != spec.dtype:
            warnings.append(
                f"{rnns[0].name}: {spec.dtype} weights written as {dtype}, in which OpenVINO computes (say --dtype)"
            )
        weights = write_ir(rnns, path, dtype, options.force, options.progress)
        lstm = spec.mode == LSTM
        feeds = f'"{OPENVINO_X}": x, "{OPENVINO_INITIAL_H}": h0, ' + (f'"{OPENVINO_INITIAL_C}": c0, ' if lstm else "")
        states = "h0 and c0" if lstm else "h0"
        return Written(
            [path, weights],
            warnings=warnings,
            # as `run_ir` runs it: static shapes (with dynamic ones the CPU plugin ignores sequence_lens) and f32
            # (its default is bf16 on CPUs with bfloat16 units: 1e-3 off)
            usage=f"import openvino\ncore = openvino.Core(); model = core.read_model({registry.literal(path)})\n"
            f'feeds = {{{feeds}"{OPENVINO_LENGTHS}": lengths}}   # x (batch, seq, {spec.input_size}), {states} '
            f"({spec.num_layers * spec.num_directions}, batch, {spec.hidden_size}), lengths (batch,) int32\n"
            "model.reshape({name: list(value.shape) for name, value in feeds.items()})   # static shapes: "
            "with dynamic ones the CPU plugin ignores sequence_lens\n"
            'compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})   # its default is '
            "bf16 on CPUs with bfloat16 units\n"
            f'y = compiled(feeds)["{OPENVINO_Y}"]   # (batch, seq, {spec.num_directions * spec.hidden_size}); '
            f'also "{OPENVINO_H_N}"' + (f', "{OPENVINO_C_N}"' if lstm else ""),
        )

    def inspect(self, path: Path) -> InspectReport:
        file = IRFile(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                ",".join(op.name for op in group),
                group[0].op,
                functools.partial(to_canonical, group, provenance, "recurrent"),
                functools.partial(_sizes, group),
            )
            for group in registry.inspected_groups(file.ops, file.chains)
        ]
        notes = [
            f"ops {', '.join(op.name for op in chain)} are the layers of one RNN"
            for chain in file.chains
            if len(chain) > 1
        ]
        notes.append(file.listing(most=32))
        origin = recorded_source(file)
        if origin is not None and origin.path:
            notes.append(f"written by rnnconv from {origin.path}" + (f" ({origin.layer})" if origin.layer else ""))
        return InspectReport(path=str(path), format="openvino", rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == "openvino":
            return recorded
        file = IRFile(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": ",".join(op.name for op in chain), "format": "openvino"})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own graph (one rnnconv wrote), or its sequence ops with their own weights and attributes,
        run in OpenVINO's CPU plugin."""
        file = IRFile(path)
        (chain,) = file.choose(source.layer, take_all=False)
        for op in chain:
            if op.refusal is not None:
                raise Unsupported(op.refusal)
        if chain[0].input_size != spec.input_size or len(chain) != spec.num_layers:
            raise BadInput(f"the OpenVINO ops {source.layer} are not the RNN the blob describes ({spec.describe()})")
        ov = require_openvino()
        lstm = SEQUENCE_OPS[chain[0].op] == LSTM
        if file.interface() and chain == file.chains[0] and chain[0].direction != OPENVINO_REVERSE:
            return run_ir(path, inputs, lstm), f"OpenVINO {ov.__version__} CPU plugin: the file's own graph"
        how = f"OpenVINO {ov.__version__} CPU plugin: the file's own {chain[0].op} op(s)"
        graph = build(_own_layers(chain), chain[0].input_size, "ops")
        reverse = chain[0].direction == OPENVINO_REVERSE
        given = dict(inputs)
        if reverse:  # cuDNN runs a reverse-only op as a forward one on each sequence reversed: compare it that way
            given["x"] = reverse_sequences(np.asarray(inputs["x"]), inputs.get("lengths"))
        with tempfile.TemporaryDirectory(prefix="rnnconv-openvino-") as folder:
            out = run_ir(_write_graph(graph, Path(folder)), given, lstm)
        if reverse:
            out["y"] = reverse_sequences(np.asarray(out["y"]), inputs.get("lengths"))
            how += ", on the sequences reversed"
        return out, how
