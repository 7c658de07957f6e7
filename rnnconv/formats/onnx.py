"""ONNX: the LSTM, GRU and RNN nodes of a `.onnx` file, read into the canonical form and written from it.

Reading needs the `onnx` package (the `onnx` extra); running needs `onnxruntime`. Weights may be
initializers, `Constant` nodes or external data beside the model (only inside the model's folder, sizes
checked). A chain of compatible nodes joined by the exporters' glue (Transpose/Reshape/Squeeze) is one
multi-layer RNN, as `torch.onnx.export` writes one multi-layer `nn.LSTM`. What cuDNN cannot compute is
refused: a GRU resetting before the recurrent matrix, peepholes, clipping, `input_forget`, activations
other than cuDNN's, or different activations per direction.

Written models are the stack of RNN nodes; their input X is (seq, batch, input), the initial states
`initial_h`, `initial_c` may be left out (zeros); outputs Y (seq, batch, directions*hidden), Y_h, Y_c.
The same graph builder runs a source's own nodes (its weights and attributes untouched) in onnxruntime
for `verify`, and a blob for `verify --backend onnxruntime`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance, RNNSizes
from rnnconv.dtypes import element_type, encode
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, first_line, no_such_rnn, several_rnns
from rnnconv.formats import registry
from rnnconv.formats._onnx_graph import SUBGRAPH, Folder, NotFoldable, Scope, node_name, scopes
from rnnconv.formats._onnx_unrolled import Cell, CellFinder, Recogniser, Unrolled
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import atomic_outputs, digest_in_background, regular_file
from rnnconv.table.apply import find_row, mode_for, row_for_mode
from rnnconv.table.constants import (
    CUDNN_GATES,
    CUDNN_MODES,
    ONNX_ACTIVATIONS,
    ONNX_ATTRIBUTES,
    ONNX_DEFAULT_ACTIVATIONS,
    ONNX_DIRECTIONS,
    ONNX_ELEMENT_TYPES,
    ONNX_FLAGS,
    ONNX_GLUE,
    ONNX_INPUTS,
    ONNX_ONE_OP_ATTRIBUTES,
    ONNX_OPS,
    ONNX_OPSET,
    ONNX_QUANTIZED_INPUTS,
    ONNX_QUANTIZED_OPS,
)
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.reading import Found, StoredCell, read, settle

PROTOBUF_FIRST_FIELD = b"\x08"  # a ModelProto begins with ir_version: field 1, a varint
MAX_GLUE = 6  # ops between two layers of one RNN, at most
MAX_HIDDEN = 1 << 20  # far beyond any real RNN; keeps sizes computed from a hostile file small
RNN_OPS = {op: cell for cell, op in ONNX_OPS.items()}


def require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise BackendMissing(
            "reading or writing ONNX needs the onnx package, which is not installed (pip install 'rnnconv[onnx]')"
        ) from None
    return onnx


# --- reading ----------------------------------------------------------------------------------------------


@dataclass
class OnnxNode:
    """One LSTM/GRU/RNN node: its attributes and weights (W, R, B, P as numpy, one row per direction)."""

    name: str  # the node's name, after the path of the subgraph it is in (If_1::then_branch::LSTM)
    op: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any]
    weights: dict[str, np.ndarray]
    dtype: str
    short: str = ""  # the node's own name
    refusal: str | None = None  # why its weights cannot be read (computed in a way rnnconv does not fold)
    sources: dict[str, frozenset[str]] = field(default_factory=dict)  # role -> the stored tensors it comes from
    source_class: str = ""  # the node's op as the table's rows name it: op, or a quantized op
    unrolled: int = 0  # for an RNN an exporter unrolled into per-step ops: its steps
    stored: dict[str, np.ndarray] = field(default_factory=dict)  # a quantized node's inputs as stored (int8 W, R...)

    def __post_init__(self) -> None:
        self.source_class = self.source_class or self.op

    @property
    def hidden(self) -> int:
        return int(self.attributes["hidden_size"])

    @property
    def direction(self) -> str:
        return str(self.attributes["direction"])

    @property
    def directions(self) -> int:
        return ONNX_DIRECTIONS[self.direction]

    @property
    def shown_class(self) -> str:
        if self.source_class.endswith(" cell"):
            return f"{self.source_class} (unrolled)"
        return f"{self.source_class} (unrolled, {self.unrolled} steps)" if self.unrolled else self.source_class

    @property
    def quantized(self) -> bool:
        return self.source_class in ONNX_QUANTIZED_OPS

    @property
    def input_size(self) -> int:
        return int(self.weights["W"].shape[1 if self.quantized else 2])

    def expected_shapes(self, input_size: int) -> dict[str, tuple[int, ...]]:
        """The shape each weight must have (a quantized op's W and R are transposed)."""
        dirs, hidden = self.directions, self.hidden
        rows = len(CUDNN_GATES[RNN_OPS[self.op]]) * hidden
        if self.quantized:
            matrices = {"W": (dirs, input_size, rows), "R": (dirs, hidden, rows)}
        else:
            matrices = {"W": (dirs, rows, input_size), "R": (dirs, rows, hidden)}
        return {**matrices, "B": (dirs, 2 * rows), "P": (dirs, 3 * hidden)}

    def activations(self) -> list[str]:
        names = self.attributes.get("activations")
        default = ONNX_DEFAULT_ACTIVATIONS[self.op]
        if names is None:
            return list(default) * self.directions
        return [str(n) for n in names]

    def config(self) -> dict[str, Any]:
        """The node as the table's ONNX row reads it (activation names, linear_before_reset)."""
        acts = self.activations()
        per = len(ONNX_DEFAULT_ACTIVATIONS[self.op])
        first = acts[:per]
        named = [ONNX_ACTIVATIONS.get(a, a.lower()) for a in first]
        config: dict[str, Any] = {"activation": named[-1] if self.op != "LSTM" else named[1]}
        if self.op != "RNN":
            config["recurrent_activation"] = named[0]
        if self.op == "LSTM" and named[1] != named[2]:
            config["activation"] = f"{named[1]} (cell input) with {named[2]} (cell output)"
        if "linear_before_reset" in self.attributes:
            config["linear_before_reset"] = int(self.attributes["linear_before_reset"])
        return config


def _float_weights(values: np.ndarray, what: str) -> tuple[np.ndarray, str]:
    """A weight tensor as numpy floats (bfloat16 widened to float32 exactly) and its dtype's name."""
    if values.dtype.name == "bfloat16":
        words = np.ascontiguousarray(values).view(np.uint16)
        return (words.astype(np.uint32) << np.uint32(16)).view(np.float32), "bfloat16"
    names = {element_type(name).storage: name for name in ONNX_ELEMENT_TYPES if name != "bfloat16"}
    if values.dtype not in names:
        raise BadInput(f"{what} is of type {values.dtype}, not a float type rnnconv reads")
    return np.asarray(values), names[values.dtype]


@dataclass
class OnnxFile:
    """An ONNX model: its RNN nodes, and the chains of them that are one multi-layer RNN."""

    path: Path
    nodes: list[OnnxNode]
    chains: list[list[OnnxNode]]
    graph: Any = field(repr=False, default=None)
    scopes: list[Scope] = field(repr=False, default_factory=list)  # the main graph and every subgraph
    recorded: Provenance | None = None  # the source an .onnx rnnconv wrote records

    @classmethod
    def load(cls, path: Path, dequantize: bool = False) -> OnnxFile:
        onnx = require_onnx()
        size = regular_file(path)
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # protobuf's DecodeError and others: a damaged or foreign file
            raise BadInput(f"{path} is not a readable ONNX model ({type(exc).__name__})") from None
        found = scopes(model.graph)
        folding = Folder(path.parent, size)
        nodes, chains = [], []
        for scope in found:
            here = [
                _read_node(node, index, scope, folding, dequantize)
                for index, node in enumerate(scope.graph.node)
                if _is_rnn(node)
            ]
            nodes += here
            chains += _chains(here, scope, folding)
            recogniser = Recogniser(scope, folding)
            recurrences = recogniser.recurrences()
            refused = [_unrolled_refused(u) for u in recurrences if u.refusal is not None]
            nodes += refused
            chains += [[node] for node in refused]
            taken = {step.activation.output[0] for u in recurrences for step in u.steps}
            cells = [_unrolled_cell(cell) for cell in CellFinder(scope, folding).cells(taken)]
            nodes += cells
            chains += [[node] for node in cells]
            for stack in recogniser.layers(recurrences):
                layers = [_unrolled_layer(layer) for layer in stack]
                nodes += layers
                chains.append(layers[:1])
                for earlier, later in itertools.pairwise(layers):  # layers of one RNN, or RNNs of their own
                    if _same_rnn(earlier, later):
                        chains[-1].append(later)
                    else:
                        chains.append([later])
        records = [p.value for p in model.metadata_props if p.key == registry.SOURCE_KEY]
        recorded = registry.read_source_record(records[0], path) if records else None
        return cls(path, nodes, chains, model.graph, found, recorded)

    def find(self, name: str) -> list[OnnxNode]:
        """The node a name picks: its full name (after its subgraph's path), or its own name when only one
        node has it."""
        exact = [n for n in self.nodes if n.name == name]
        if exact:
            return exact[:1]
        own = [n for n in self.nodes if n.short == name]
        if len(own) > 1:
            raise BadInput(
                f"{self.path}: {name!r} names {len(own)} nodes in different subgraphs "
                f"({', '.join(n.name for n in own)}); give the full name"
            )
        return own

    def same_weights(self) -> list[list[OnnxNode]]:
        """Groups of nodes (two If branches, say) that compute with the very same weights and settings."""
        groups: dict[str, list[OnnxNode]] = {}
        for node in self.nodes:
            if node.refusal is None:
                groups.setdefault(_fingerprint(node), []).append(node)
        return [g for g in groups.values() if len(g) > 1]

    def same_weights_notes(self) -> list[str]:
        notes = []
        for group in self.same_weights():
            stored = sorted(set().union(*(s for n in group for s in n.sources.values())))
            more = ", ..." if len(stored) > 6 else ""
            origin = f" (all computed from {', '.join(stored[:6])}{more})" if stored else ""
            names = " and ".join(repr(n.name) for n in group)
            notes.append(
                f"nodes {names} compute with the same weights{origin}: one RNN reached by different branches; "
                f"either name converts to the same weights"
            )
        return notes

    def choose(self, layer: str | None, take_all: bool) -> list[list[OnnxNode]]:
        """The chains (or single nodes) to read: `layer` names a node, or a chain as a,b,c."""
        if layer is not None:
            names = [n.strip() for n in layer.split(",")]
            for chain in self.chains:
                if [n.name for n in chain] == names:
                    return [chain]
            if len(names) == 1:
                found = self.find(names[0])
                if found:
                    return [found]
            names = [n.name for n in self.nodes] + [",".join(n.name for n in c) for c in self.chains if len(c) > 1]
            raise no_such_rnn(f"{self.path} has no RNN node or chain", layer, names)
        if not self.nodes:
            raise BadInput(f"{self.path} holds no LSTM, GRU or RNN node{self._unrolled_hint()}")
        if len(self.chains) == 1 or take_all:
            return self.chains
        same = "".join(f"; {note}" for note in self.same_weights_notes())
        raise several_rnns(self.path, f"holds {len(self.chains)} RNNs ({self._listing()}){same}")

    def _unrolled_hint(self) -> str:
        """What the graph holds instead: an exporter may have unrolled an RNN into per-step ops."""
        counts = Counter(node.op_type for scope in self.scopes for node in scope.graph.node)
        if not counts:
            return ""
        common = ", ".join(f"{n} {op}" for op, n in counts.most_common(4))
        return (
            f" (its graph holds {common}, ...: if it is an RNN unrolled into per-step operations, its steps do not "
            f"have the form rnnconv recognises, that of torch.onnx.export(dynamo=True)'s nn.RNN; convert the "
            f"checkpoint it was exported from)"
            if "MatMul" in counts or "Gemm" in counts
            else f" (its graph holds {common}, ...)"
        )

    def _listing(self) -> str:
        return ", ".join(",".join(n.name for n in chain) for chain in self.chains) or "none"


def _attribute(attribute: Any) -> Any:
    from onnx import helper

    return helper.get_attribute_value(attribute)


def _attributes(node: Any, name: str, op: str) -> dict[str, Any]:
    """The node's attributes, each of the type and range its op (`op`: the one a quantized op quantizes) defines."""
    attributes: dict[str, Any] = {}
    for attribute in node.attribute:
        expected = ONNX_ATTRIBUTES.get(attribute.name)
        if expected is None or ONNX_ONE_OP_ATTRIBUTES.get(attribute.name, op) != op:
            raise Unsupported(f"node {name!r} has an attribute {attribute.name!r} that {node.op_type} does not define")
        if attribute.type != expected:
            raise BadInput(f"node {name!r}: attribute {attribute.name!r} is not of the type {node.op_type} defines")
        value = _attribute(attribute)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        attributes[attribute.name] = value
    hidden = attributes.get("hidden_size")
    if not isinstance(hidden, int) or not 1 <= hidden <= MAX_HIDDEN:
        raise BadInput(f"node {name!r}: hidden_size is {hidden!r}, not a size from 1 to {MAX_HIDDEN}")
    if attributes.setdefault("direction", "forward") not in ONNX_DIRECTIONS:
        raise BadInput(f"node {name!r}: direction {attributes['direction']!r} is not forward, reverse or bidirectional")
    for flag in ONNX_FLAGS:
        if attributes.get(flag, 0) not in (0, 1):
            raise BadInput(f"node {name!r}: {flag} is {attributes[flag]}, not 0 or 1")
    return attributes


def _is_rnn(node: Any) -> bool:
    """An ONNX RNN node, or a quantized one of onnxruntime's domain."""
    if node.op_type in RNN_OPS:
        return node.domain in ("", "ai.onnx")
    return node.op_type in ONNX_QUANTIZED_OPS and node.domain == ONNX_QUANTIZED_OPS[node.op_type][0]


def _read_node(node: Any, index: int, scope: Scope, folding: Folder, dequantize: bool) -> OnnxNode:
    """One RNN node (or quantized RNN node), its attributes and the shapes of its weights checked against each
    other. Weights computed in a way rnnconv cannot fold leave the node listed, with the reason."""
    short = node_name(node, index)
    name = scope.qualified(short)
    quantized = node.op_type in ONNX_QUANTIZED_OPS
    op = ONNX_QUANTIZED_OPS[node.op_type][1] if quantized else node.op_type
    roles = ONNX_INPUTS + (ONNX_QUANTIZED_INPUTS if quantized else ())
    if len(node.input) > len(roles):
        raise BadInput(f"node {name!r} has {len(node.input)} inputs; {node.op_type} has {len(roles)}")
    inputs = list(node.input) + [""] * (len(roles) - len(node.input))
    attributes = _attributes(node, name, op)
    stored, sources, refusal = {}, {}, None
    for role in ("W", "R", "B", "P", *ONNX_QUANTIZED_INPUTS):
        source = inputs[roles.index(role)] if role in roles else ""
        if not source:
            continue
        try:
            stored[role] = folding.value(source, scope)
        except NotFoldable as exc:
            refusal = (
                refusal or f"node {name!r}: its {role} is computed in the graph in a way rnnconv does not fold: {exc}"
            )
            continue
        sources[role] = folding.stored_sources(source, scope)
    if not inputs[roles.index("W")] or not inputs[roles.index("R")]:
        raise BadInput(f"node {name!r} has no W or R input")
    found = OnnxNode(name, op, inputs, list(node.output), attributes, {}, "", short, refusal, sources, node.op_type)
    if refusal is not None:
        return found
    if quantized:
        found.stored = stored
        stored = _dequantized(found, stored)
        if not dequantize:
            found.refusal = (
                f"node {name!r} is a quantized LSTM ({node.op_type}) whose W and R are int8 dynamically quantized "
                f"weights, which cuDNN does not compute with; --dequantize converts the float model they "
                f"approximate, (q - zero_point) * scale"
            )
    dtypes = []
    for role in ("W", "R", "B", "P"):
        if role in stored:
            found.weights[role], dtype = _float_weights(stored[role], f"node {name!r}: its {role}")
            dtypes.append(dtype)
    w = found.weights["W"]
    n_in = w.shape[1 if quantized else 2] if w.ndim == 3 else -1
    expected = found.expected_shapes(n_in)
    for role, values in found.weights.items():
        if values.shape != expected[role] or n_in < 1:
            raise BadInput(
                f"node {name!r}: {role} has shape {tuple(values.shape)}, but a {found.directions}-direction "
                f"{node.op_type} with hidden_size {found.hidden} needs {expected[role]}"
            )
    if len(set(dtypes)) > 1:
        raise BadInput(f"node {name!r}: its weights are of different types ({', '.join(dtypes)})")
    found.dtype = dtypes[0]
    return found


def _dequantized(node: OnnxNode, stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A quantized LSTM's W and R as floats, (q - zero_point) * scale, per direction or per column as the
    contrib op defines; B and P as they are."""
    out: dict[str, np.ndarray] = {role: stored[role] for role in ("B", "P") if role in stored}
    for role in ("W", "R"):
        scale_role, zero_role = f"{role}_scale", f"{role}_zero_point"
        if scale_role not in stored or zero_role not in stored:
            raise BadInput(f"node {node.name!r} has no {scale_role} or {zero_role}")
        q, scale, zero = stored[role], stored[scale_role], stored[zero_role]
        if q.dtype not in (np.int8, np.uint8) or zero.dtype != q.dtype:
            raise BadInput(
                f"node {node.name!r}: its {role} is of type {q.dtype} and its zero point of type {zero.dtype}; "
                f"{node.source_class} takes int8 or uint8 for both"
            )
        if scale.dtype != np.float32:
            raise BadInput(f"node {node.name!r}: its {scale_role} is of type {scale.dtype}, not float32")
        dirs = node.directions
        if q.ndim != 3 or q.shape[0] != dirs or scale.shape not in ((dirs,), (dirs, q.shape[2])):
            raise BadInput(
                f"node {node.name!r}: {role} has shape {tuple(q.shape)} and {scale_role} {tuple(scale.shape)}, "
                f"which do not fit a {dirs}-direction {node.source_class}"
            )
        if zero.shape != scale.shape:
            raise BadInput(f"node {node.name!r}: {zero_role} has shape {tuple(zero.shape)}, {scale_role} {scale.shape}")
        per = (slice(None), None, slice(None)) if scale.ndim == 2 else (slice(None), None, None)
        centred = q.astype(np.int32) - zero.astype(np.int32)[per]
        out[role] = centred.astype(np.float32) * scale[per]
    return out


def _unrolled_layer(layer: list[Unrolled]) -> OnnxNode:
    """An RNN layer from recognised recurrences (one direction, or forward and reverse), as an RNN node would hold
    it: W (D, H, in), R (D, H, H), B (D, 2H)."""
    first = layer[0]
    name = "+".join(u.name for u in layer)
    directions = "bidirectional" if len(layer) == 2 else "reverse" if first.flipped else "forward"
    activation = first.steps[0].activation.op_type
    attributes: dict[str, Any] = {
        "hidden_size": first.hidden,
        "direction": directions,
        "activations": [activation] * len(layer),
    }
    zeros = np.zeros(2 * first.hidden, first.weights["W"].dtype)
    stored = {role: [u.weights.get(role, zeros) for u in layer] for role in ("W", "R", "B")}
    if not any("B" in u.weights for u in layer):
        del stored["B"]
    for role, values in stored.items():  # forward and reverse over one input, but not one layer's two directions
        if len({v.shape for v in values}) > 1:
            shapes = " and ".join(str(tuple(v.shape)) for v in values)
            reason = (
                f"the per-step operations at {name!r} read one input forward and in reverse like a bidirectional "
                f"RNN, but the two directions' {role} differ in shape ({shapes})"
            )
            return _refused_unrolled(name, len(first.steps), reason)
    weights = {role: np.stack(values) for role, values in stored.items()}
    found = {role: _float_weights(values, f"the unrolled RNN {name!r}: its {role}") for role, values in weights.items()}
    dtypes = {dtype for _, dtype in found.values()}
    if len(dtypes) > 1:
        raise BadInput(f"the unrolled RNN {name!r}: its weights are of different types ({', '.join(sorted(dtypes))})")
    node = OnnxNode(name, "RNN", [first.x], [], attributes, {r: v for r, (v, _) in found.items()}, dtypes.pop())
    node.short, node.unrolled = name.split(SUBGRAPH)[-1], len(first.steps)
    return node


def _unrolled_refused(recurrence: Unrolled) -> OnnxNode:
    """Steps that look like an unrolled RNN but are not one, listed with what did not match."""
    name = recurrence.name
    reason = (
        f"the {len(recurrence.steps)} per-step {recurrence.steps[0].activation.op_type} operations at {name!r} look "
        f"like an unrolled RNN, but {recurrence.refusal}"
    )
    return _refused_unrolled(name, len(recurrence.steps), reason)


def _refused_unrolled(name: str, steps: int, reason: str) -> OnnxNode:
    node = OnnxNode(name, "RNN", [], [], {"hidden_size": 1, "direction": "forward"}, {}, "", refusal=reason)
    node.short, node.unrolled = name.rsplit(SUBGRAPH, maxsplit=1)[-1], steps
    return node


def _unrolled_cell(cell: Cell) -> OnnxNode:
    """A cell unrolled into matrix products and activations: listed with its sizes and why it does not convert."""
    reason = (
        f"{cell.name!r} is {'a' if cell.kind == 'GRU' else 'an'} {cell.kind} cell unrolled into matrix products and "
        f"activations (as "
        f"torch.onnx.export(dynamo=True) writes nn.{cell.kind}Cell, one step); rnnconv reads unrolled RNNs of "
        f"nn.RNN's form, not unrolled {cell.kind} cells: convert the checkpoint it was exported from (its weights "
        f"are {', '.join(repr(w) for w in cell.weights)})"
    )
    gates = len(CUDNN_GATES[RNN_OPS[cell.kind]])
    sizes = {"W": np.broadcast_to(np.float32(0), (1, gates * cell.hidden, cell.input_size))}  # shapes only
    node = OnnxNode(
        cell.name, cell.kind, [], [], {"hidden_size": cell.hidden, "direction": "forward"}, sizes, "float32"
    )
    node.refusal, node.short, node.source_class = reason, cell.name.split(SUBGRAPH)[-1], f"{cell.kind} cell"
    node.unrolled = 1
    return node


def _integers(value: str, scope: Scope, folding: Folder) -> list[int] | None:
    """A constant list of integers (a Reshape's shape, a Squeeze's axes), or None when it is not one."""
    try:
        values = folding.value(value, scope)
    except (NotFoldable, RnnconvError):
        return None
    return [int(v) for v in values.reshape(-1)] if values.dtype.kind in "iu" and values.size <= 64 else None


def _chains(nodes: list[OnnxNode], scope: Scope, folding: Folder) -> list[list[OnnxNode]]:
    """Maximal runs of nodes where each one's Y reaches the next one's X through glue alone, the two
    being layers of one RNN (same op, sizes, direction and activations; cuDNN's concatenation of the
    directions done exactly: Transpose(0, 2, 1, 3) then Reshape, or Squeeze of axis 1)."""
    producer = {output: node for node in scope.graph.node for output in node.output}
    readable = [n for n in nodes if "W" in n.weights]  # a quantized node chains, converting or not
    by_output = {n.outputs[0]: n for n in readable if n.outputs and n.outputs[0]}
    following: dict[str, OnnxNode] = {}
    preceded: set[str] = set()
    for later in readable:
        name = later.inputs[0]
        glue: list[Any] = []
        while name not in by_output and name in producer and len(glue) < MAX_GLUE:
            op = producer[name]
            if op.op_type not in ONNX_GLUE or not op.input:
                break
            glue.insert(0, op)  # in the order the data flows
            name = op.input[0]
        earlier = by_output.get(name)
        if earlier is None or earlier.name in following or not _same_rnn(earlier, later):
            continue
        if _moves_directions(glue, earlier, scope, folding):
            following[earlier.name] = later
            preceded.add(later.name)
    chains = []
    for node in nodes:
        if node.name in preceded:
            continue
        chain = [node]
        while chain[-1].name in following and len(chain) <= len(nodes):
            chain.append(following[chain[-1].name])
        chains.append(chain)
    return chains


def _fingerprint(node: OnnxNode) -> str:
    """What a node computes, as one string: op, attributes, and its weights' types, shapes and bytes (hashed)."""
    digest = hashlib.blake2b(repr((node.op, node.source_class, sorted(node.attributes.items()))).encode())
    for role in sorted(node.weights):
        values = np.ascontiguousarray(node.weights[role])
        digest.update(f"{role}{values.dtype}{values.shape}".encode())
        digest.update(values.view(np.uint8).reshape(-1).data if values.size else b"")
    return digest.hexdigest()


def _same_rnn(earlier: OnnxNode, later: OnnxNode) -> bool:
    same = (
        earlier.source_class == later.source_class
        and earlier.op == later.op
        and earlier.hidden == later.hidden
        and earlier.direction == later.direction
        and earlier.activations() == later.activations()
        and earlier.config() == later.config()
        and int(earlier.attributes.get("layout", 0)) == int(later.attributes.get("layout", 0)) == 0
    )
    return same and later.input_size == earlier.directions * earlier.hidden


def _moves_directions(glue: list[Any], earlier: OnnxNode, scope: Scope, folding: Folder) -> bool:
    """Whether the glue turns Y (T, D, B, H) into (T, B, D*H), as cuDNN feeds its next layer."""
    transposes = [g for g in glue if g.op_type == "Transpose"]
    for op in transposes:
        perm = [list(_attribute(a)) for a in op.attribute if a.name == "perm"]
        if perm != [[0, 2, 1, 3]]:
            return False
    if earlier.directions == 2 and len(transposes) != 1:
        return False
    for op in glue:
        if op.op_type == "Reshape":
            shape = _integers(op.input[1], scope, folding) if len(op.input) > 1 else None
            if shape is None or len(shape) != 3 or shape[-1] not in (-1, earlier.directions * earlier.hidden):
                return False
            if earlier.directions == 2 and glue.index(op) < glue.index(transposes[0]):
                return False
        if op.op_type in ("Squeeze", "Unsqueeze"):
            axes = [list(_attribute(a)) for a in op.attribute if a.name == "axes"]
            if len(op.input) > 1:
                axes = [_integers(op.input[1], scope, folding) or []]
            if op.op_type == "Unsqueeze" or earlier.directions != 1 or axes != [[1]]:
                return False
    return bool(glue)


def _refusal(node: OnnxNode) -> str | None:
    """Why cuDNN cannot compute a node, beyond what the table's row says."""
    if node.refusal is not None:
        return node.refusal
    if "clip" in node.attributes:
        return f"node {node.name!r} clips its cell state (clip={node.attributes['clip']}), which cuDNN does not"
    if int(node.attributes.get("input_forget", 0)):
        return f"node {node.name!r} couples its input and forget gates (input_forget=1), which cuDNN does not"
    if "P" in node.weights and np.any(node.weights["P"]):
        return f"node {node.name!r} has peephole weights (P), which cuDNN's LSTM has not"
    acts = node.activations()
    per = len(ONNX_DEFAULT_ACTIVATIONS[node.op])
    if len(acts) != per * node.directions or (node.directions == 2 and acts[:per] != acts[per:]):
        return f"node {node.name!r} uses activations {acts}: cuDNN computes both directions with the same ones"
    if "activation_alpha" in node.attributes or "activation_beta" in node.attributes:
        return f"node {node.name!r} gives its activations alpha/beta parameters, which cuDNN's have not"
    return None


def to_canonical(chain: list[OnnxNode], source: Provenance) -> CanonicalRNN:
    """The canonical RNN of a chain of nodes (one node: one layer)."""
    first = chain[0]
    cell = RNN_OPS[first.op]
    for node in chain:
        reason = _refusal(node)
        if reason:
            raise Unsupported(reason)
    config = first.config()
    row = find_row("onnx", first.source_class, config)
    settled = settle(row, config, first.name)
    if CUDNN_MODES[settled.mode][0] != cell:
        raise Unsupported(f"node {first.name!r}: a {first.op} cannot compute cuDNN's {settled.mode}")
    hidden, dirs = first.hidden, first.directions
    spec_dirs = 2 if dirs == 2 else 1
    has_bias = "B" in first.weights
    for layer, node in enumerate(chain):
        if not _same_rnn(chain[layer - 1], node) and layer:
            raise BadInput(f"nodes {chain[layer - 1].name!r} and {node.name!r} are not two layers of one RNN")
        n_in = first.input_size if layer == 0 else spec_dirs * hidden
        expected = node.expected_shapes(n_in)
        for role, shape in expected.items():
            if role in node.weights and node.weights[role].shape != shape:
                raise BadInput(
                    f"node {node.name!r}: {role} has shape {node.weights[role].shape}, but a {node.op} "
                    f"with hidden_size {hidden} and input {n_in} needs {shape}"
                )
        if ("B" in node.weights) != has_bias:
            raise BadInput(f"node {node.name!r}: some layers of the chain have biases and some have not")

    def cell_of(layer: int, d: int, _: RNNSpec) -> StoredCell:
        node = chain[layer]
        stored = {"input_matrix": node.weights["W"][d], "recurrent_matrix": node.weights["R"][d]}
        if has_bias:
            stored["bias"] = node.weights["B"][d]
        shapes = {role: tuple(tensor.shape) for role, tensor in stored.items()}
        return StoredCell(stored.__getitem__, shapes, row.tensors, f"node {node.name!r}")

    notes = []
    if first.direction == "reverse":
        notes.append(
            f"{first.name}: a reverse-only node, converted as a forward one (rnnconv's RNNs have no reverse-only "
            f"direction): feed the converted RNN the sequence reversed (each sequence within its length) and reverse "
            f"its outputs to match ONNX"
        )
    if int(first.attributes.get("layout", 0)) == 1:
        notes.append(
            f"{first.name}: layout=1 (batch-major input and output); the converted RNN takes its own format's "
            f"layout (its usage line says which): transpose where they differ"
        )
    later = []
    if first.quantized:
        later.append(
            f"{first.name}: dequantized: W and R are (q - zero_point) * scale of its {first.stored['W'].dtype} "
            f"weights, the float model the quantized {first.source_class} approximates, not the quantized one "
            f"(onnxruntime also quantizes the node's inputs at run time)"
        )
    provenance: dict[str, Any] = {"stacked": [n.name for n in chain] if len(chain) > 1 else None}
    if first.quantized:
        provenance["dtype"] = str(first.stored["W"].dtype)  # what the source computes with
    found = Found(
        ",".join(n.name for n in chain),
        row,
        settled,
        input_size=first.input_size,
        hidden=hidden,
        dtype=first.dtype,
        cell=cell_of,
        layer_class=first.source_class,
        num_layers=len(chain),
        bidirectional=dirs == 2,
        has_bias=has_bias,
        without_bias="no B input",
        notes=notes,
        later_notes=later,
        provenance=provenance,
    )
    return read(found, source)


def _sizes(chain: list[OnnxNode]) -> RNNSizes | None:
    """The sizes of nodes that do not convert, as far as their attributes and readable weights tell."""
    first = chain[0]
    if "W" not in first.weights or first.weights["W"].ndim != 3 or first.weights["W"].shape[2] < 1:
        return None
    cell = RNN_OPS[first.op]
    try:
        mode = mode_for(find_row("onnx", first.op, first.config()), first.config())
    except RnnconvError:
        mode = next(m for m, (c, _) in CUDNN_MODES.items() if c == cell)
    with contextlib.suppress(RnnconvError, ValueError):
        spec = RNNSpec(mode, first.input_size, first.hidden, len(chain), first.directions == 2, 0, first.dtype)
        return RNNSizes.of(spec.to_model())
    return None


# --- one graph for writing, for a blob in onnxruntime, and for a source's own nodes -----------------


@dataclass
class Layer:
    """One node of a built graph: its op, attributes, and weights (W, R, B[, P], and a quantized op's scales and
    zero points) by input name."""

    op: str
    attributes: dict[str, Any]
    weights: dict[str, np.ndarray]
    domain: str = ""


def onnx_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What ONNX's RNN ops cannot compute of `rnn`: an LSTM's projection."""
    if not rnn.spec.proj_size:
        return []
    return [registry.Loss(f"ONNX's LSTM has no projection (h = W_hr h', proj_size={rnn.spec.proj_size})")]


def layers_of(rnn: CanonicalRNN, dtype: str) -> list[Layer]:
    """The ONNX nodes of a canonical RNN, its tensors stored as the table's ONNX row says."""
    spec = rnn.spec
    if losses := onnx_losses(rnn):
        raise Unsupported(f"{rnn.name}: {losses[0].term}")
    row, activation = row_for_mode("onnx", spec.mode)
    attributes: dict[str, Any] = {
        "hidden_size": spec.hidden_size,
        "direction": "bidirectional" if spec.bidirectional else "forward",
    }
    if "linear_before_reset" in row.when:
        attributes["linear_before_reset"] = row.when["linear_before_reset"]
    activations = _activations_for(row.source_class, activation, spec.num_directions)
    if activations:
        attributes["activations"] = activations
    layers = []
    for layer in range(spec.num_layers):
        stored = [rnn.stored(row, layer, d) for d in range(spec.num_directions)]
        weights = {
            "W": np.stack([s["input_matrix"] for s in stored]),
            "R": np.stack([s["recurrent_matrix"] for s in stored]),
        }
        if spec.bias:
            weights["B"] = np.stack([s["bias"] for s in stored])
        etype = element_type(dtype)
        layers.append(Layer(row.source_class, dict(attributes), {k: encode(v, etype) for k, v in weights.items()}))
    return layers


def _activations_for(op: str, activation: str, directions: int) -> list[str] | None:
    """The activations attribute a node needs, or None when the op's default is it."""
    names = {value: key for key, value in ONNX_ACTIVATIONS.items()}
    default = list(ONNX_DEFAULT_ACTIVATIONS[op])
    wanted = [names[activation]] if op == "RNN" else default
    return None if wanted == default else wanted * directions


def build_model(layers: list[Layer], input_size: int, dtype: str, sequence_lens: bool = False) -> Any:
    """A model of the layers, stacked: X (seq, batch, input) -> Y (seq, batch, D*H), Y_h, Y_c.

    initial_h and initial_c are inputs with zero defaults (so they may be left out); with
    `sequence_lens`, an int32 (batch,) input gives each sequence's length.
    """
    onnx = require_onnx()
    from onnx import TensorProto, helper, numpy_helper

    elem = ONNX_ELEMENT_TYPES[dtype]
    storage = element_type(dtype).storage
    first = layers[0]
    hidden = int(first.attributes["hidden_size"])
    dirs = ONNX_DIRECTIONS[first.attributes.get("direction", "forward")]
    lstm = ONNX_QUANTIZED_OPS.get(first.op, ("", first.op))[1] == "LSTM"
    depth = len(layers) * dirs
    nodes, initializers = [], []
    inputs = [helper.make_tensor_value_info("X", elem, ["seq", "batch", input_size])]

    def constant(name: str, values: np.ndarray) -> str:
        tensor = numpy_helper.from_array(np.ascontiguousarray(values), name)
        if dtype == "bfloat16" and values.dtype == np.uint16:
            tensor.data_type = TensorProto.BFLOAT16
        initializers.append(tensor)
        return name

    state_names = ["initial_h"] + (["initial_c"] if lstm else [])
    for state in state_names:  # zeros of one batch item, expanded to the batch X has
        inputs.append(helper.make_tensor_value_info(state, elem, [depth, None, hidden]))
        constant(state, np.zeros((depth, 1, hidden), storage))
    constant("batch_index", np.array([1], np.int64))
    constant("depth_hidden", np.array([depth, hidden], np.int64))
    nodes += [
        helper.make_node("Shape", ["X"], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", "batch_index"], ["batch"]),
        helper.make_node("Concat", ["depth_hidden", "batch"], ["dhb"], axis=0),
    ]
    constant("to_dbh", np.array([0, 2, 1], np.int64))
    nodes.append(helper.make_node("Gather", ["dhb", "to_dbh"], ["state_shape"]))
    for state in state_names:
        nodes.append(helper.make_node("Expand", [state, "state_shape"], [f"{state}_full"]))
    if sequence_lens:
        inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, [None]))
    constant("merge_shape", np.array([0, 0, -1], np.int64))
    x, hs, cs = "X", [], []
    for index, layer in enumerate(layers):
        names = {role: constant(f"{role}_{index}", values) for role, values in layer.weights.items()}
        for state in state_names:
            constant(f"{state}_{index}_lo", np.array([index * dirs], np.int64))
            constant(f"{state}_{index}_hi", np.array([(index + 1) * dirs], np.int64))
            constant(f"{state}_{index}_axis", np.array([0], np.int64))
            nodes.append(
                helper.make_node(
                    "Slice",
                    [f"{state}_full", f"{state}_{index}_lo", f"{state}_{index}_hi", f"{state}_{index}_axis"],
                    [f"{state}_{index}"],
                )
            )
        node_inputs = [
            x,
            names["W"],
            names["R"],
            names.get("B", ""),
            "sequence_lens" if sequence_lens else "",
            "initial_h_" + str(index),
            f"initial_c_{index}" if lstm else "",
            names.get("P", ""),
            *(names.get(role, "") for role in ONNX_QUANTIZED_INPUTS),
        ]
        while node_inputs and not node_inputs[-1]:
            node_inputs.pop()
        node_outputs = [f"y_{index}", f"y_h_{index}"] + ([f"y_c_{index}"] if lstm else [])
        nodes.append(
            helper.make_node(
                layer.op, node_inputs, node_outputs, name=f"layer{index}", domain=layer.domain, **layer.attributes
            )
        )
        nodes.append(helper.make_node("Transpose", [f"y_{index}"], [f"y_t_{index}"], perm=[0, 2, 1, 3]))
        x = "Y" if index == len(layers) - 1 else f"x_{index + 1}"
        nodes.append(helper.make_node("Reshape", [f"y_t_{index}", "merge_shape"], [x]))
        hs.append(f"y_h_{index}")
        cs.append(f"y_c_{index}")
    nodes.append(helper.make_node("Concat", hs, ["Y_h"], axis=0))
    outputs = [
        helper.make_tensor_value_info("Y", elem, ["seq", "batch", dirs * hidden]),
        helper.make_tensor_value_info("Y_h", elem, [depth, "batch", hidden]),
    ]
    if lstm:
        nodes.append(helper.make_node("Concat", cs, ["Y_c"], axis=0))
        outputs.append(helper.make_tensor_value_info("Y_c", elem, [depth, "batch", hidden]))
    graph = helper.make_graph(nodes, "rnnconv", inputs, outputs, initializers)
    domains = [helper.make_opsetid(d, 1) for d in sorted({layer.domain for layer in layers} - {""})]
    opsets = [helper.make_opsetid("", ONNX_OPSET), *domains]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="rnnconv")
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime reads
    onnx.checker.check_model(model)
    return model


def run_model(model: Any, inputs: Mapping[str, Any], lstm: bool) -> dict[str, np.ndarray | None]:
    """The model in onnxruntime (CPU): y, h_n, c_n, sequence-major as cuDNN's."""
    try:
        import onnxruntime
    except ImportError:
        raise BackendMissing(
            "running ONNX needs onnxruntime, which is not installed (pip install 'rnnconv[onnx]')"
        ) from None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    feeds = {"X": inputs["x"].astype(np.float32), "initial_h": inputs["h0"].astype(np.float32)}
    if lstm:
        feeds["initial_c"] = inputs["c0"].astype(np.float32)
    if inputs.get("lengths") is not None:
        feeds["sequence_lens"] = np.asarray(inputs["lengths"], np.int32)
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        # a state with a zero default is an initializer onnxruntime lets a feed override, not an input
        accepted = {i.name for i in session.get_inputs()} | {i.name for i in session.get_overridable_initializers()}
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in accepted})))
    except Exception as exc:  # onnxruntime's own errors: nodes it refuses to run (a quantized node's zero point)
        if not type(exc).__module__.startswith("onnxruntime"):
            raise
        raise BadInput(f"onnxruntime cannot run these nodes: {first_line(exc, 300)}") from None
    return {"y": got["Y"], "h_n": got["Y_h"], "c_n": got.get("Y_c")}


def reverse_sequences(x: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """Each sequence of (T, B, ...) reversed within its length (padding stays at the end)."""
    out = np.array(x)
    for b in range(x.shape[1]):
        n = x.shape[0] if lengths is None else int(lengths[b])
        out[:n, b] = x[:n, b][::-1]
    return out


def write_onnx(rnns: list[CanonicalRNN], path: Path, dtype: str, force: bool) -> None:
    rnn = registry.only_rnn(rnns, "an .onnx")
    model = build_model(layers_of(rnn, dtype), rnn.spec.input_size, dtype)
    entry = model.metadata_props.add()  # where the RNN came from, for `verify model.onnx`
    entry.key, entry.value = registry.SOURCE_KEY, registry.source_record(rnn, path)
    with atomic_outputs([path], force) as (tmp,):
        tmp.write_bytes(model.SerializeToString())


# --- the format ---------------------------------------------------------------------------------------------


class OnnxruntimeEngine(registry.RuntimeEngine):
    """The blob as the .onnx rnnconv writes, run in onnxruntime: equations nobody here wrote."""

    name = "onnxruntime"
    format_name = "onnx"
    suffix = ".onnx"

    detail = "onnxruntime (CPU) running the blob as ONNX nodes, float32"
    modules = (("onnxruntime", "onnxruntime"),)


@register
class OnnxFormat(Format):
    info = FORMAT_INFO["onnx"]
    sniff_order = 60  # a protobuf has no magic number: after every format that has one
    engine = OnnxruntimeEngine  # verify --backend onnxruntime
    runtimes = (registry.Runtime("onnx", (("onnx", "onnx"), *OnnxruntimeEngine.modules), "ONNX models' own nodes"),)

    def sniff(self, probe: Probe) -> bool:
        return probe.head.startswith(PROTOBUF_FIRST_FIELD) and probe.path.suffix.lower() == ".onnx"

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = OnnxFile.load(path, options.dequantize)
        info = Provenance(path=str(path.resolve()), format="onnx")
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains,
            lambda chain: to_canonical(chain, info),
            lambda chain: ",".join(n.name for n in chain),
            digest,
            file.recorded,
        )
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return onnx_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        dtype = options.dtype or "float32"  # onnxruntime's CPU RNN kernels compute float32
        write_onnx(rnns, path, dtype, options.force)
        spec = rnns[0].spec
        lstm = spec.mode == "lstm"
        states = "initial_h" + (", initial_c" if lstm else "")
        outputs = "y, h_n" + (", c_n" if lstm else "")
        # the CPU provider, as `run_model` runs it: another (CUDA's, where installed) computes other numbers
        return Written(
            [path],
            usage=f"import onnxruntime\nsession = onnxruntime.InferenceSession({registry.literal(path)}, "
            'providers=["CPUExecutionProvider"])\n'
            f'{outputs} = session.run(None, {{"X": x}})   # x (seq, batch, {spec.input_size}) {dtype}, y (seq, '
            f"batch, {spec.num_directions * spec.output_size}); states ({spec.num_layers * spec.num_directions}, "
            f"batch, ...); optional inputs: {states}",
        )

    def inspect(self, path: Path) -> InspectReport:
        file = OnnxFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                ",".join(n.name for n in group),
                group[0].shown_class,
                functools.partial(to_canonical, group, provenance),
                functools.partial(_sizes, group),
            )
            for group in registry.inspected_groups(file.nodes, file.chains)
        ]
        notes = [
            f"nodes {', '.join(n.name for n in chain)} are the layers of one RNN"
            for chain in file.chains
            if len(chain) > 1
        ]
        return InspectReport(path=str(path), format="onnx", rnns=entries, notes=notes + file.same_weights_notes())

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == "onnx":
            return recorded
        file = OnnxFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": ",".join(n.name for n in chain), "format": "onnx"})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The source's own nodes, weights and attributes as they are in the file, run in onnxruntime."""
        file = OnnxFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        layers = []
        for node in chain:
            if node.refusal is not None and not node.stored:  # no weights to run (a quantized node has its own)
                raise Unsupported(node.refusal)
            attributes = {k: v for k, v in node.attributes.items() if k != "layout"}  # sequence-major I/O here
            if node.quantized:  # the quantized node itself, its int8 weights as stored
                domain = ONNX_QUANTIZED_OPS[node.source_class][0]
                layers.append(Layer(node.source_class, attributes, dict(node.stored), domain))
                continue
            weights = {k: v.astype(np.float32) for k, v in node.weights.items()}
            layers.append(Layer(node.op, attributes, weights))
        if chain[0].input_size != spec.input_size or len(chain) != spec.num_layers:
            raise BadInput(f"the ONNX nodes {source.layer} are not the RNN the blob describes ({spec.describe()})")
        model = build_model(layers, chain[0].input_size, "float32", sequence_lens=inputs.get("lengths") is not None)
        import onnxruntime

        how = f"onnxruntime {onnxruntime.__version__}: the file's own {chain[0].source_class} node(s)"
        if chain[0].quantized:
            how += " (int8 weights, inputs quantized at run time: the blob is its dequantized float model)"
        if chain[0].unrolled:  # the steps' equations are the RNN op's: run them as one, on any shapes
            how = f"onnxruntime {onnxruntime.__version__}: RNN nodes holding the weights of the file's unrolled steps"
        if chain[0].direction != "reverse":
            return run_model(model, inputs, chain[0].op == "LSTM"), how
        # cuDNN runs a reverse-only node as a forward one on each sequence reversed: compare it that way
        flipped = {**inputs, "x": reverse_sequences(np.asarray(inputs["x"]), inputs["lengths"])}
        out = run_model(model, flipped, chain[0].op == "LSTM")
        out["y"] = reverse_sequences(np.asarray(out["y"]), inputs["lengths"])
        return out, how + ", on the sequences reversed"
