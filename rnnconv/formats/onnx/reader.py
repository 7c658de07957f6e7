"""An ONNX model read: its RNN nodes in every subgraph, the chains of them that are one multi-layer RNN, and
each chain's canonical form through the table's ONNX rows."""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import Provenance, RNNSizes
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, no_such_rnn, several_rnns
from rnnconv.formats import registry
from rnnconv.formats.onnx.folding import Folder, NotFoldable, Scope, scopes
from rnnconv.formats.onnx.nodes import (
    RNN_OPS,
    OnnxNode,
    attribute_value,
    fingerprint,
    is_rnn,
    read_node,
    unrolled_cell,
    unrolled_layer,
    unrolled_refused,
    why_refused,
)
from rnnconv.formats.onnx.unrolled import CellFinder, Recogniser
from rnnconv.formats.onnx.wire import (
    ONNX_GLUE,
)
from rnnconv.safeio.inputs import regular_file
from rnnconv.table.apply import find_row, mode_for
from rnnconv.table.constants import CUDNN_MODES
from rnnconv.table.reading import Found, StoredCell, read, settle

MAX_GLUE = 6  # ops between two layers of one RNN, at most


def require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise BackendMissing(
            "reading or writing ONNX needs the onnx package, which is not installed (pip install 'rnnconv[onnx]')"
        ) from None
    return onnx


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
                read_node(node, index, scope, folding, dequantize)
                for index, node in enumerate(scope.graph.node)
                if is_rnn(node)
            ]
            nodes += here
            chains += _chains(here, scope, folding)
            recogniser = Recogniser(scope, folding)
            recurrences = recogniser.recurrences()
            refused = [unrolled_refused(u) for u in recurrences if u.refusal is not None]
            nodes += refused
            chains += [[node] for node in refused]
            taken = {step.activation.output[0] for u in recurrences for step in u.steps}
            cells = [unrolled_cell(cell) for cell in CellFinder(scope, folding).cells(taken)]
            nodes += cells
            chains += [[node] for node in cells]
            for stack in recogniser.layers(recurrences):
                layers = [unrolled_layer(layer) for layer in stack]
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
                groups.setdefault(fingerprint(node), []).append(node)
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
        perm = [list(attribute_value(a)) for a in op.attribute if a.name == "perm"]
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
            axes = [list(attribute_value(a)) for a in op.attribute if a.name == "axes"]
            if len(op.input) > 1:
                axes = [_integers(op.input[1], scope, folding) or []]
            if op.op_type == "Unsqueeze" or earlier.directions != 1 or axes != [[1]]:
                return False
    return bool(glue)


def to_canonical(chain: list[OnnxNode], source: Provenance) -> CanonicalRNN:
    """The canonical RNN of a chain of nodes (one node: one layer)."""
    first = chain[0]
    cell = RNN_OPS[first.op]
    for node in chain:
        reason = why_refused(node)
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


def chain_sizes(chain: list[OnnxNode]) -> RNNSizes | None:
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
