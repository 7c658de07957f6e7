"""An ONNX model read: its RNN nodes in every subgraph, the chains of them that are one multi-layer RNN, and
each chain's canonical form through the table's ONNX rows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Dequantized, Provenance
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, listing
from rnnconv.formats import sources
from rnnconv.formats._graph import (
    CONCAT,
    RESHAPE,
    SQUEEZE,
    TRANSPOSE,
    UNSQUEEZE,
    Glue,
    Graph,
    chained,
    consecutive,
    glued,
    named,
    refuse,
    same_rnn,
)
from rnnconv.formats._quantized import Quantization, note, record, rounding_dropped, rounding_refusal
from rnnconv.formats.onnx.folding import Folder, NotFoldable, Scope, node_name, scopes
from rnnconv.formats.onnx.loops import loops_of, read_loops
from rnnconv.formats.onnx.nodes import (
    RNN_OPS,
    OnnxNode,
    attribute_value,
    fingerprint,
    is_rnn,
    looped_chains,
    read_node,
    unrolled_cell,
    unrolled_layer,
    unrolled_refused,
    why_refused,
)
from rnnconv.formats.onnx.unrolled import CellFinder, Recogniser
from rnnconv.formats.onnx.wire import ONNX_GLUE, ONNX_INPUTS
from rnnconv.formats.reading import Found, StoredCell, read, settle
from rnnconv.safeio.inputs import regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import CUDNN_MODES


def require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise BackendMissing(
            "reading or writing ONNX needs the onnx package, which is not installed (pip install 'rnnconv[onnx]')"
        ) from None
    return onnx


class OnnxFile(Graph[OnnxNode]):
    """An ONNX model: its RNN nodes, and the chains of them that are one multi-layer RNN."""

    what = "RNN node"

    def __init__(
        self,
        path: Path,
        nodes: list[OnnxNode],
        chains: list[list[OnnxNode]],
        scopes: list[Scope],
        recorded: Provenance | None,
        looped: set[str] | None = None,
    ):
        super().__init__(path, "onnx", nodes, named(chains), recorded)
        self.scopes = scopes  # the main graph and every subgraph
        self.looped = looped or set()  # the Loops read as stepping a cell (converting or not)

    @classmethod
    def load(cls, path: Path, dequantize: bool = False) -> OnnxFile:
        onnx = require_onnx()
        size = regular_file(path)
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # protobuf's DecodeError and others: a damaged or foreign file
            raise BadInput(f"{path} is not a readable ONNX model ({type(exc).__name__})") from None
        found = scopes(model.graph)
        if not all(isinstance(name, str) for scope in found for name in _names(scope.graph)):
            raise BadInput(f"{path} names a node, value or attribute in bytes that are not UTF-8 text")
        folding = Folder(path.parent, size)
        nodes, chains = [], []
        bodies = {id(body) for _, _, _, body in loops_of(found)}  # read as their Loops' cells, never on their own
        for scope in found:
            here = [
                read_node(node, index, scope, folding, dequantize)
                for index, node in enumerate(scope.graph.node)
                if is_rnn(node)
            ]
            nodes += here
            chains += _chains(here, scope, folding)
            if id(scope) in bodies:
                continue
            recogniser = Recogniser(scope, folding)
            recurrences = recogniser.recurrences()
            refused = [unrolled_refused(u) for u in recurrences if u.refusal is not None]
            nodes += refused
            chains += [[node] for node in refused]
            taken = {step.activation.output[0] for u in recurrences for step in u.steps}
            finder = CellFinder(scope, folding)
            stepped, alone = finder.stacks(finder.cells(taken))
            cells = [unrolled_cell(cell, scanned=finder.alone(cell)) for cell in alone]
            nodes += cells
            chains += [[node] for node in cells]
            for steps in stepped:
                stacked = [unrolled_cell(layer[0], len(layer) + layer[0].after_zeros) for layer in steps]
                nodes += stacked
                chains += consecutive(stacked)
            for stack in recogniser.layers(recurrences):
                layers = [unrolled_layer(layer) for layer in stack]
                nodes += layers
                chains += consecutive(layers)  # layers of one RNN, or RNNs of their own
        looped: set[str] = set()
        for held in read_loops(found, folding):  # after the cells: a Loop's weights taken as constants from here on
            runs = looped_chains(held)
            nodes += [node for run in runs for node in run]
            chains += runs
            looped |= {loop.name for layer in held for loop in layer.loops}
        records = [p.value for p in model.metadata_props if p.key == sources.SOURCE_KEY]
        recorded = sources.read_source_record(records[0], path) if records else None
        file = cls(path, nodes, chains, found, recorded, looped)
        stored = {t.name for t in model.graph.initializer}
        file.input_names = [i.name for i in model.graph.input if i.name not in stored]
        file.output_names = [o.name for o in model.graph.output]
        return file

    def find(self, name: str) -> OnnxNode | None:
        """The node a name picks: its full name (after its subgraph's path), or its own name when only one
        node has it."""
        exact = [n for n in self.layers if n.name == name]
        if exact:
            return exact[0]
        own = [n for n in self.layers if n.short == name]
        if len(own) > 1:
            raise BadInput(
                f"{self.path}: {name!r} names {len(own)} nodes in different subgraphs "
                f"({', '.join(n.name for n in own)}); give the full name"
            )
        return own[0] if own else None

    def same_weights(self) -> list[list[OnnxNode]]:
        """Groups of nodes (two If branches, say) that compute with the very same weights and settings."""
        groups: dict[str, list[OnnxNode]] = {}
        for node in self.layers:
            if node.refusal is None:
                groups.setdefault(fingerprint(node), []).append(node)
        return [g for g in groups.values() if len(g) > 1]

    def same_weights_notes(self) -> list[str]:
        notes = []
        for group in self.same_weights():
            stored = sorted(set().union(*(s for n in group for s in n.sources.values())))
            more = ", ..." if len(stored) > 6 else ""
            origin = f" (all computed from {', '.join(stored[:6])}{more})" if stored else ""
            names = (
                " and ".join(repr(n.name) for n in group) if len(group) == 2 else listing(repr(n.name) for n in group)
            )
            notes.append(
                f"nodes {names} compute with the same weights{origin}: one RNN reached by different branches; "
                f"{'either' if len(group) == 2 else 'any'} name converts to the same weights"
            )
        return notes

    def several_notes(self) -> str:
        return "".join(f"; {note}" for note in self.same_weights_notes())

    def stepping_loops(self) -> list[str]:
        """The Loop nodes whose bodies step matrix products not read as a cell's (its weights computed in a way
        rnnconv does not fold, say): a recurrence written as a while loop rnnconv does not read."""
        return [
            name
            for scope in self.scopes
            for index, node in enumerate(scope.graph.node)
            if node.op_type == "Loop"
            and (name := scope.qualified(node_name(node, index))) not in self.looped
            and any(op.op_type in ("MatMul", "Gemm") for a in node.attribute if a.HasField("g") for op in a.g.node)
        ]

    def loop_note(self) -> str | None:
        loops = self.stepping_loops()
        if not loops:
            return None
        which = f"Loop {listing(loops, show=repr)}" if len(loops) == 1 else f"Loops {listing(loops, show=repr)}"
        return (
            f"its {which} {'steps' if len(loops) == 1 else 'step'} matrix products over time by matrices that are no "
            f"constants rnnconv folds (computed at run time), a recurrence written as a while loop rnnconv does not "
            f"read; convert the model it was exported from"
        )

    def nothing_held(self) -> str:
        """What the graph holds instead: an exporter may have unrolled an RNN into per-step ops or a loop."""
        if (looped := self.loop_note()) is not None:
            return f"{self.path} holds no LSTM, GRU or RNN node: {looped}"
        counts = Counter(node.op_type for scope in self.scopes for node in scope.graph.node)
        common = ", ".join(f"{n} {op}" for op, n in counts.most_common(4))
        hint = (
            f" (its graph holds {common}, ...: if it is an RNN unrolled into per-step operations, its steps do not "
            f"have the form rnnconv recognises, that of torch.onnx.export(dynamo=True)'s nn.RNN; convert the "
            f"checkpoint it was exported from)"
            if "MatMul" in counts or "Gemm" in counts
            else f" (its graph holds {common}, ...)"
        )
        return f"{self.path} holds no LSTM, GRU or RNN node{hint if counts else ''}"


def _integers(value: str, scope: Scope, folding: Folder) -> list[int] | None:
    """A constant list of integers (a Reshape's shape, a Squeeze's axes), or None when it is not one."""
    try:
        values = folding.value(value, scope)
    except (NotFoldable, RnnconvError):
        return None
    return [int(v) for v in values.reshape(-1)] if values.dtype.kind in "iu" and values.size <= 64 else None


def _glue(op: Any, scope: Scope, folding: Folder) -> Glue:
    """A glue node as far as moving axes goes: its permutation, shape or axes (attributes, or constant inputs)."""
    attributes = {a.name: attribute_value(a) for a in op.attribute}
    if op.op_type == TRANSPOSE:
        return Glue(op.op_type, list(attributes["perm"]) if "perm" in attributes else None)
    if op.op_type == RESHAPE:
        shape = _integers(op.input[1], scope, folding) if len(op.input) > 1 else None
        return Glue(op.op_type, shape, zero_copies=not attributes.get("allowzero", 0))
    if op.op_type in (SQUEEZE, UNSQUEEZE):
        axes = _integers(op.input[1], scope, folding) if len(op.input) > 1 else attributes.get("axes")
        return Glue(op.op_type, None if axes is None else list(axes))
    if op.op_type == CONCAT:
        return Glue(op.op_type, inputs=len(op.input))
    return Glue(op.op_type)


def _chains(nodes: list[OnnxNode], scope: Scope, folding: Folder) -> list[list[OnnxNode]]:
    """Maximal runs of nodes where each one's Y reaches the next one's X through the exporters' glue alone, the
    two being layers of one RNN, cuDNN's concatenation of the directions done exactly."""
    producer = {output: node for node in scope.graph.node for output in node.output}
    by_output = {n.outputs[0]: n for n in nodes if n.kind is not None and n.outputs and n.outputs[0]}

    def step(name: str) -> tuple[Glue, str] | None:
        op = producer.get(name) if name not in by_output else None
        if op is None or op.op_type not in ONNX_GLUE or not op.input:
            return None
        return _glue(op, scope, folding), op.input[0]

    return chained(nodes, glued(lambda node: node.inputs[0], step, by_output.get))


def to_canonical(chain: list[OnnxNode], source: Provenance, lossy: bool = False) -> CanonicalRNN:
    """The canonical RNN of a chain of nodes (one node: one layer); `lossy` (--allow-lossy): inputs that
    QuantizeLinear/DequantizeLinear pairs round read without the rounding."""
    first = chain[0]
    cell = RNN_OPS[first.op]
    refuse(chain, why_refused)
    rounding = [r.model_copy(update={"layer": index}) for index, node in enumerate(chain) for r in node.rounding]
    if rounding and not lossy:
        raise Unsupported(rounding_refusal(",".join(n.name for n in chain), rounding))
    config = first.config()
    row = find_row("onnx", first.source_class, config)
    settled = settle(row, config, first.name)
    if CUDNN_MODES[settled.mode][0] != cell:
        raise Unsupported(f"node {first.name!r}: a {first.op} cannot compute cuDNN's {settled.mode}")
    hidden, dirs = first.hidden, first.directions
    spec_dirs = 2 if dirs == 2 else 1
    has_bias = "B" in first.weights
    for layer, node in enumerate(chain):
        if layer and not same_rnn(chain[layer - 1], node):
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
    if first.probed is not None:
        steps = "one step" if first.unrolled == 1 else f"stepped {first.unrolled} times"
        steps = "stepped over its Scan's sequence" if first.scanned else steps
        form = "unrolled into matrix products and activations"
        if first.loops:
            form, steps = "written as a Loop's body (a while loop)", "stepped over the sequence the Loop reads"
        article = "a" if first.op == "GRU" else "an"
        notes.append(
            f"{','.join(n.name for n in chain)}: {article} {first.op} cell {form}, {steps}: its gates and layout read "
            f"by what it computes (run on probe inputs, within {max(n.probed or 0.0 for n in chain):.1g} of the "
            f"reading)"
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
        provenance["dequantized"] = _quantized_record(chain)
    if first.qdq:  # the node computes in float with the dequantized weights: the float model is the node's own
        held = [quant for node in chain for quant in node.qdq.values()]
        provenance["dequantized"] = record(held, 8)
        later.append(
            note(
                ",".join(n.name for n in chain),
                provenance["dequantized"],
                first.dtype,
                "here the same: the node computes in float with what DequantizeLinear gives",
            )
        )
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
    rnn = read(found, source)
    return rounding_dropped(rnn, rounding) if rounding else rnn


def _names(graph: Any) -> Iterator[Any]:
    """Every name a graph's nodes, values and tensors give (protobuf hands a name that is not UTF-8 over as bytes)."""
    for node in graph.node:
        yield from (node.name, node.op_type, node.domain, *node.input, *node.output)
        yield from (attribute.name for attribute in node.attribute)
    yield from (tensor.name for tensor in graph.initializer)
    yield from (value.name for value in (*graph.input, *graph.output, *graph.value_info))


def _quantized_record(chain: list[OnnxNode]) -> Dequantized:
    """What --dequantize read of a chain of quantized nodes: each W and R with its scales (one per direction, or
    one per column of each direction: axis 2 of the stored (directions, input, 4*hidden) tensor)."""
    held = []
    for node in chain:
        for role in ("W", "R"):
            scales, zeros = node.stored[f"{role}_scale"], node.stored[f"{role}_zero_point"]
            axis = None if scales.ndim == 1 else 2
            held.append(
                (
                    node.inputs[ONNX_INPUTS.index(role)],
                    Quantization(tuple(scales.ravel().tolist()), tuple(zeros.ravel().astype(int).tolist()), axis),
                )
            )
    return record(held, 8)
