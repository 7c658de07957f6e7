"""RNNs written as ONNX `Loop`s (tf2onnx's form of a Keras RNN it does not map to an ONNX RNN op: a SimpleRNN, a GRU
with reset_after=False), read by what their bodies compute.

tf2onnx writes TensorFlow's while loop as a Loop over the time-major sequence: its body reads step t of it (`Gather` by
a counter it carries), computes the cell from two `MatMul`s (the step's input and the carried state) and gives the new
state out at each step (a scan output, which the Loop concatenates over the steps); the weights enter the body as values
it carries and passes on unchanged, started from the graph's constants. Here those are taken as the constants they are,
the body's two products found, its nodes evaluated in numpy (a short list of ops, bounded; nothing of the file is run
but that) and the cell read by `_cells.recognise`; the loop is then checked by what it computes (`_cells.checked_steps`:
its counters move on by one from 0, its state starts from zeros or the model's inputs (h0, c0) and is carried to the
next step, the step's new state is given out, the rest is passed on unchanged) and by how many times its trip count and
condition run it: as many as the sequence has steps. A matrix the body multiplies in parts (a reset-before GRU's
recurrent matrix: its update and reset blocks by the state, its candidate's by r*h) is one product of the whole. The
graph around the loops, run on probes of the model's inputs, settles each loop's direction and layer
(`_cells.loop_layers`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, cut
from rnnconv.formats._cell_forms import sizes_of
from rnnconv.formats._cells import (
    GIVEN_OUT,
    PROBE_SEED,
    CellGraph,
    LoopLayer,
    NotEvaluated,
    Product,
    Reading,
    Slot,
    checked_steps,
    exchanged,
    loop_layers,
    open_size,
    recognise,
    run_ops,
)
from rnnconv.formats.onnx.folding import SUBGRAPH, Folder, NotFoldable, Scope, node_name
from rnnconv.formats.onnx.unrolled import EVALUATED, CellFinder, evaluate

MAX_BODY_NODES = 4096  # nodes of one body: a cell's are a few dozen
MAX_EVALUATED = 1 << 24  # elements of one value the evaluator computes (64 MiB of float32): any cell's are fewer
MAX_LOOPS = 1024  # Loops of one model: far beyond any; keeps reading a hostile file's loops bounded
MAX_RUN = 1 << 26  # elements one run of a graph computes, at most
MAX_STEPS = 4096  # steps of a loop whose condition is checked step by step
NEXT_ITERATION = "\0next iteration"  # the Loop's own count of its iterations, moved on by one each step
COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "Equal": np.equal,
    "And": np.logical_and,
    "Or": np.logical_or,
}


def evaluate_node(node: Any, arguments: list[np.ndarray | None], folding: Folder) -> list[np.ndarray]:
    """One node of a loop's body or of the graph around it, computed in numpy as onnxruntime computes it."""
    values = [a for a in arguments if a is not None]
    if any(a.size > MAX_EVALUATED for a in values) or node.domain not in ("", "ai.onnx"):
        raise NotEvaluated("a value larger than a cell's")
    op = node.op_type
    if op in EVALUATED:
        return evaluate(node, arguments)
    if op in COMPARISONS and len(values) == 2:
        return [COMPARISONS[op](values[0], values[1])]
    if op == "Not" and len(values) == 1:
        return [np.logical_not(values[0])]
    if op == "Shape" and len(values) == 1 and not node.attribute:
        return [np.asarray(values[0].shape, np.int64)]
    if op == "Expand" and len(values) == 2:
        shape = values[1]
        if shape.dtype.kind not in "iu" or shape.ndim != 1 or shape.size > 8 or np.any(shape < 0):
            raise NotEvaluated("Expand to no shape")
        target = np.broadcast_shapes(values[0].shape, tuple(int(n) for n in shape))
        if math.prod(target) > MAX_EVALUATED:
            raise NotEvaluated("Expand to a shape larger than a cell's")
        return [np.broadcast_to(values[0], target).copy()]
    if op == "ReverseSequence" and len(values) == 2:
        return [_reverse_sequence(node, values[0], values[1])]
    try:
        return folding.evaluate(node, arguments)
    except NotFoldable as exc:
        raise NotEvaluated(str(exc)) from None


def _reverse_sequence(node: Any, value: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each batch entry's first `lengths` steps reversed (ReverseSequence-10)."""
    attributes = {a.name: int(a.i) for a in node.attribute}
    batch_axis, time_axis = attributes.get("batch_axis", 1), attributes.get("time_axis", 0)
    if value.ndim < 2 or {batch_axis, time_axis} != {0, 1} or lengths.dtype.kind not in "iu":
        raise NotEvaluated("ReverseSequence of axes or lengths its value does not have")
    moved = np.moveaxis(value, (batch_axis, time_axis), (0, 1)).copy()
    counts = lengths.reshape(-1)
    if counts.size != moved.shape[0] or np.any(counts < 0) or np.any(counts > moved.shape[1]):
        raise NotEvaluated("ReverseSequence of lengths its value does not have")
    for entry, count in enumerate(counts):
        moved[entry, : int(count)] = moved[entry, : int(count)][::-1]
    return np.moveaxis(moved, (0, 1), (batch_axis, time_axis))


class Runner:
    """A graph's nodes (a body's, or the graph around a loop) run in numpy from values fed by name and the constants
    folding computes, at most MAX_RUN elements computed in a run, or its budget for all its runs (a hostile graph
    cannot make them long)."""

    def __init__(self, scope: Scope, folding: Folder, nodes: list[Any] | None = None, budget: list[int] | None = None):
        self.scope, self.folding = scope, folding
        self.nodes = list(scope.graph.node) if nodes is None else nodes
        self.budget = budget

    def constant(self, value: str) -> np.ndarray | None:
        try:
            return self.folding.value(value, self.scope)
        except NotFoldable:
            return None

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every value computed from `feeds` and constants, with the feeds."""
        budget = [MAX_RUN] if self.budget is None else self.budget

        def bounded(node: Any, arguments: list[np.ndarray | None]) -> list[np.ndarray]:
            if budget[0] <= 0:
                raise NotEvaluated("more than a cell's loop computes")
            results = evaluate_node(node, arguments, self.folding)
            budget[0] -= sum(np.size(r) for r in results)
            return results

        computed, _ = run_ops(self.nodes, feeds, lambda n: (n.input, n.output), self.constant, bounded, "")
        return {**feeds, **computed}


@dataclass
class Loop:
    """One Loop node read as one direction of an RNN layer, or why it is not one."""

    node: Any
    name: str
    scope: Scope  # the graph the Loop is in
    body: Scope
    finder: CellFinder  # its body's cell
    reading: Reading | None = None
    refusal: str | None = None
    reversed: bool = False
    sizes: tuple[int, int, int] = (0, 0, 0)  # (gates, input, hidden), where its matrices say them
    sequence: str = ""  # the value of its graph it steps over (time-major)
    output: str = ""  # its output of the sequence of its new states (time-major)
    output_shape: tuple[int, ...] = ()  # on the probes
    initial: tuple[str, ...] = ()  # the model's inputs its states start from (h0, c0), where not zeros
    batch: int | None = None  # its body computes any batch

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.finder.run(feeds)[0]


class ProbedScope:
    """A graph holding Loops, run in numpy on probes of its inputs (the sizes they leave open as `_probe_shape` takes
    them): what each Loop is given, and what the graph makes of the Loops' output sequences (`_cells.ProbedGraph`)."""

    def __init__(self, scope: Scope, folding: Folder):
        self.runner = Runner(scope, folding, budget=[MAX_RUN])  # all its runs: one for each loop read
        rng = np.random.default_rng(PROBE_SEED)
        self.feeds: dict[str, np.ndarray] = {}
        for given in scope.graph.input:
            shape = _probe_shape(given)
            if given.name in scope.given and shape is not None:
                self.feeds[given.name] = rng.standard_normal(shape).astype(np.float32)
        self.given = set(self.feeds)
        self.values = self.runner.run(self.feeds)

    def inputs(self) -> list[np.ndarray]:
        return [probe for name, probe in self.feeds.items() if probe.ndim == 3 and name in self.given]

    def value(self, name: str) -> np.ndarray | None:
        """A value of the graph on the probes (a constant's, or one computed from them); None where neither."""
        if not name:
            return None
        found = self.values.get(name)
        return found if found is not None else self.runner.constant(name)

    def read(self, loop: Loop) -> np.ndarray | None:
        if loop.reading is None or loop.refusal is not None:
            return None
        if loop.output not in self.feeds:
            rng = np.random.default_rng(PROBE_SEED + len(self.feeds))
            self.feeds[loop.output] = rng.standard_normal(loop.output_shape).astype(np.float32)
            self.values = self.runner.run(self.feeds)
        return self.feeds[loop.output]

    def sequence(self, loop: Loop, values: dict[str, np.ndarray]) -> np.ndarray | None:
        return values.get(loop.sequence)


def _probe_shape(given: Any) -> tuple[int, ...] | None:
    """A float input's shape, each size it leaves open taken as `open_size` of its axis; None for another input."""
    tensor = given.type.tensor_type
    if not given.type.HasField("tensor_type") or tensor.elem_type != 1 or not tensor.HasField("shape"):
        return None
    dims = tensor.shape.dim
    sizes = tuple(
        int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else open_size(axis)
        for axis, d in enumerate(dims)
    )
    return sizes if len(sizes) <= 8 and math.prod(sizes) <= MAX_EVALUATED else None


def _body_of(bodies: dict[str, list[Scope]], scope: Scope, node: Any, index: int) -> Scope | None:
    """The scope of a Loop node's body (of the nodes named alike, the one whose body it is)."""
    held = bodies.get(f"{scope.qualified(node_name(node, index))}{SUBGRAPH}body", [])
    if len(held) == 1:
        return held[0]
    graphs = [a.g for a in node.attribute if a.name == "body" and a.HasField("g")]
    return next((s for s in held if graphs and s.graph == graphs[0]), None)


def read_loop(scope: Scope, body: Scope, node: Any, index: int, folding: Folder, graph: ProbedScope) -> Loop | None:
    """A Loop node read as one direction of an RNN layer (refused with the reason where its body computes a cell the
    loop does not step as an RNN does); None where its body multiplies by no constant matrix."""
    if len(body.graph.node) > MAX_BODY_NODES:
        return None  # far more than a cell's: some other loop
    name = scope.qualified(node_name(node, index))
    inputs, outputs = [i.name for i in body.graph.input], [o.name for o in body.graph.output]
    carried = len(node.input) - 2
    fits = carried >= 0 and len(inputs) == carried + 2 and len(outputs) > carried and len(node.output) < len(outputs)
    if fits:
        for given, result, start in zip(inputs[2:], outputs[1:], node.input[2:]):
            if given == result and start:  # passed on unchanged: the constant that starts it, where it is one
                try:
                    value = folding.value(start, scope)
                except NotFoldable:
                    continue
                folding.known(given, body, value, folding.stored_sources(start, scope))
    finder = CellFinder(body, folding)
    starts = dict(zip(inputs[2:], node.input[2:])) if fits else {}  # a weight is named as the graph stores it
    products = [dataclasses.replace(p, name=starts.get(p.name, p.name)) for p in _products(finder)]
    if not products:
        return None
    loop = Loop(node, name, scope, body, finder)
    loop.sizes = sizes_of(products)
    if not fits:
        loop.refusal = (
            f"its body takes {len(inputs)} inputs and gives {len(outputs)} outputs for the {max(carried, 0)} values "
            f"it carries, which do not fit a Loop's"
        )
        return loop
    carried_values = finder.carried(products)
    reading = recognise(CellGraph(name, tuple(products), carried_values, loop.step, finder.joined))
    if isinstance(reading, str):
        loop.refusal = f"its body's cell {reading}"
        return loop
    loop.sizes = (len(reading.gates), reading.input_size, reading.hidden)
    refusals = []
    for way in [reading] + [r for r in (exchanged(reading),) if r is not None]:
        found = _stepped(loop, way, graph)
        if isinstance(found, str):
            refusals.append(found)
            continue
        loop.reading, (loop.sequence, loop.output, loop.output_shape, loop.initial) = way, found
        break
    else:
        loop.refusal = refusals[0]
    return loop


def _products(finder: CellFinder) -> list[Product]:
    """The body's MatMuls (and Gemms) of a computed value by a constant float matrix, each with the constant added
    to it."""
    found = []
    for node in finder.scope.graph.node:
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or not node.output:
            continue
        weight = finder.constant(node.input[1])
        if weight is None or weight.ndim != 2 or weight.dtype.kind != "f" or finder.constant(node.input[0]) is not None:
            continue
        adds = [c for c in finder.consumers(node.output[0]) if c.op_type == "Add" and c.output]
        product = (finder.product(adds[0].output[0]) if len(adds) == 1 else None) or finder.product(node.output[0])
        if product is not None:
            found.append((node, product))
    return _whole(finder, found)


def _whole(finder: CellFinder, found: list[tuple[Any, Product]]) -> list[Product]:
    """The products, those of a matrix the body multiplies in parts (column blocks of one constant, each by a value
    of its own: a reset-before GRU's update and reset blocks by the state, its candidate's by r*h) taken as one
    product of the whole matrix by the value the body is given (the state); `recognise` runs the body, which
    multiplies each part as it does."""
    parts: dict[str, list[tuple[int, int, Product]]] = {}
    for node, product in found:
        cut_out = finder.producer(node.input[1]) if node.op_type == "MatMul" else None
        if cut_out is None or cut_out.op_type != "Slice" or len(cut_out.input) < 3:
            continue
        whole = finder.constant(cut_out.input[0])
        columns = _columns(finder, cut_out, whole)
        if columns is not None and product.bias is None:
            parts.setdefault(cut_out.input[0], []).append((*columns, product))
    given = {i.name for i in finder.scope.graph.input}
    merged: dict[int, Product] = {}  # the first part's place -> the whole product
    taken: set[int] = set()
    for source, held in parts.items():
        held.sort(key=lambda part: part[0])
        whole = finder.constant(source)
        assert whole is not None
        state = [p for _, _, p in held if p.value in given]
        ordered = all(a[1] == b[0] for a, b in itertools.pairwise(held))
        if len(held) < 2 or held[0][0] != 0 or held[-1][1] != whole.shape[1] or not ordered or len(state) != 1:
            continue
        places = [next(i for i, (_, p) in enumerate(found) if p is part) for _, _, part in held]
        merged[min(places)] = Product(state[0].value, whole.T, None, source)
        taken |= set(places)
    return [merged.get(i, product) for i, (_, product) in enumerate(found) if i in merged or i not in taken]


def _columns(finder: CellFinder, cut_out: Any, whole: np.ndarray | None) -> tuple[int, int] | None:
    """(first, last + 1) of the columns of the 2-D constant `whole` a Slice takes, each of its rows; None where it
    takes other parts."""
    starts, ends = finder.integers(cut_out, 1), finder.integers(cut_out, 2)
    axes = finder.integers(cut_out, 3) if len(cut_out.input) > 3 and cut_out.input[3] else None
    steps = finder.integers(cut_out, 4) if len(cut_out.input) > 4 and cut_out.input[4] else None
    if whole is None or whole.ndim != 2 or starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    taken = [range(whole.shape[0]), range(whole.shape[1])]
    if len(axes) != len(starts) or len(steps) != len(starts) or len({a % 2 for a in axes}) != len(axes):
        return None
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if not -2 <= axis < 2 or step != 1:
            return None
        taken[axis % 2] = taken[axis % 2][start:end]
    rows, columns = taken
    if rows != range(whole.shape[0]) or not columns:
        return None
    return columns.start, columns.stop


Stepped = tuple[str, str, tuple[int, ...], tuple[str, ...]]


def _stepped(loop: Loop, reading: Reading, graph: ProbedScope) -> Stepped | str:
    """(the value of the Loop's graph it steps over, time-major; its output of the sequence of new states; that
    output's shape on the probes; the model's inputs its states start from, where not zeros), where the Loop runs
    the cell once per step of the sequence as Keras's loops do; else why not (a clause)."""
    node, body, finder = loop.node, loop.body, loop.finder
    inputs, outputs = [i.name for i in body.graph.input], [o.name for o in body.graph.output]
    carried = len(node.input) - 2
    given, results, scanned = inputs[2:], outputs[1 : carried + 1], outputs[carried + 1 :]
    states = [reading.h] + ([reading.c] if reading.c else [])
    for state, new in zip(states, reading.outputs):
        if state not in given or _identical(body, results[given.index(state)]) != _identical(body, new):
            return "its body's cell does not carry its state from one step to the next"
    gather = finder.producer(reading.x)
    axis = [int(a.i) for a in gather.attribute if a.name == "axis"] if gather is not None else []
    if gather is None or gather.op_type != "Gather" or len(gather.input) != 2 or axis not in ([], [0]):
        return "its body's cell does not read its input as one step of a sequence (a Gather)"
    sequence, counter = gather.input
    if sequence in given and results[given.index(sequence)] == sequence:
        sequence = node.input[2 + given.index(sequence)]  # carried unchanged: the value that starts it
    elif body.owner(sequence) is not loop.scope:
        return "its body's cell does not read its input as one step of a sequence the Loop's graph gives it"
    counted = counter in given and results[given.index(counter)] != counter  # checked a counter from 0 below
    if not counted and counter != inputs[0]:
        return "its body's cell does not read its input at a step it counts"
    steps_of = graph.value(sequence)
    if steps_of is None or steps_of.ndim != 3:
        shape = "a value rnnconv does not compute" if steps_of is None else f"shape {list(steps_of.shape)}"
        return f"it loops over {shape}, not a sequence (steps, batch, features)"
    steps = steps_of.shape[0]
    if not 0 < steps <= MAX_STEPS:
        return f"it loops over {steps} steps; rnnconv checks loops of 1 to {MAX_STEPS}"
    slots = [Slot(inputs[0], NEXT_ITERATION, "int64", np.asarray(0, np.int64), ())]
    for place, (value, result, start_name) in enumerate(zip(given, results, node.input[2:])):
        start = graph.value(start_name)
        if start is None or start.size > MAX_EVALUATED:
            return f"its carried value {place} does not start from a value rnnconv computes from the model's inputs"
        slots.append(Slot(value, None if result == value else result, str(start.dtype), start, tuple(start.shape)))
    slots += [Slot(GIVEN_OUT, value, "float32", None, ()) for value in scanned]
    initial = []
    for state in states:
        origin = _identical(loop.scope, node.input[2 + given.index(state)])
        if origin in graph.given:
            initial.append(origin)  # the RNN's initial state, the model's input
        elif np.any(slots[1 + given.index(state)].start):
            return f"its initial state {cut(origin)!r} is neither zeros nor one of the model's inputs"
    outer = {v: graph.values[v] for v in _outer(body) if v in graph.values}
    outer[inputs[1]] = np.asarray(True)  # the condition it runs on
    runner = Runner(body, loop.finder.folding)

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = runner.run({**outer, **feeds})
        return {**values, NEXT_ITERATION: np.asarray(feeds[inputs[0]] + 1)}

    written = checked_steps(run, slots, reading, steps)
    if isinstance(written, str):
        return written
    ran = _iterations(loop, graph, slots, outer, outputs[0], steps)
    if ran != steps:
        return f"it runs {ran} times over a sequence of {steps} steps (by its trip count and condition)"
    slot = slots[written]
    place = carried + scanned.index(slot.result) if slot.given == GIVEN_OUT else given.index(slot.given)
    if place >= len(node.output) or not node.output[place]:
        return "it gives out no sequence of its new states"
    kept = steps if slot.given == GIVEN_OUT or len(slot.shape) != 3 else slot.shape[0]  # every step's, or the last
    return sequence, node.output[place], (kept, steps_of.shape[1], reading.hidden), tuple(initial)


def _identical(body: Scope, value: str) -> str:
    """The value `value` is, looking past Identity nodes (a state carried as it is, in its shape)."""
    for _ in range(8):
        found = body.produced.get(value)
        if found is None or found[0].op_type != "Identity" or not found[0].input:
            break
        value = found[0].input[0]
    return value


def _outer(body: Scope) -> list[str]:
    """The values of the graphs around a body that its nodes read."""
    read = {name for node in body.graph.node for name in node.input if name}
    return sorted(name for name in read if body.owner(name) is not body)


def _iterations(
    loop: Loop, graph: ProbedScope, slots: list[Slot], outer: dict[str, np.ndarray], condition: str, steps: int
) -> int:
    """How many times the Loop runs its body (by its trip count, its first condition and its body's), counted up to
    one past `steps`; -1 where they are not computed."""
    trip, first = (loop.node.input[i] if len(loop.node.input) > i else "" for i in (0, 1))
    count = graph.value(trip) if trip else None
    going = graph.value(first) if first else np.asarray(True)
    if (trip and (count is None or count.size != 1 or count.dtype.kind not in "iu")) or going is None:
        return -1
    if going.size != 1:
        return -1
    limit = int(count.reshape(-1)[0]) if count is not None else None  # negative: no step at all, as onnxruntime runs
    cone = Runner(loop.body, graph.runner.folding, _cone(loop.body, condition), [MAX_RUN])  # run once a step
    ran, on = 0, bool(going.reshape(-1)[0])
    while on and (limit is None or ran < limit) and ran <= steps:
        feeds = {  # its counters at the step, the rest as the Loop starts them
            s.given: np.asarray(ran, s.dtype)
            if np.dtype(s.dtype).kind in "iu" and s.shape == () and s.result
            else s.start
            for s in slots
            if s.given != GIVEN_OUT and s.start is not None
        }
        verdict = cone.run({**outer, **feeds}).get(condition)
        if verdict is None or verdict.size != 1:
            return -1
        on, ran = bool(verdict.reshape(-1)[0]), ran + 1
    return ran


def _cone(body: Scope, value: str) -> list[Any]:
    """The body's nodes `value` is computed from, in the body's order."""
    needed: set[int] = set()
    pending = [value]
    while pending:
        found = body.produced.get(pending.pop())
        if found is not None and id(found[0]) not in needed:
            needed.add(id(found[0]))
            pending += [v for v in found[0].input if v]
    return [node for node in body.graph.node if id(node) in needed]


def loops_of(found: list[Scope]) -> list[tuple[Scope, int, Any, Scope]]:
    """Every Loop node of the graphs found: its graph, its place there, the node and its body."""
    bodies: dict[str, list[Scope]] = {}
    for scope in found:
        if scope.parent is not None:
            bodies.setdefault(scope.path, []).append(scope)
    return [
        (scope, index, node, body)
        for scope in found
        for index, node in enumerate(scope.graph.node)
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and (body := _body_of(bodies, scope, node, index))
    ]


def read_loops(found: list[Scope], folding: Folder) -> list[list[LoopLayer[Loop]]]:
    """Every Loop whose body multiplies by constant matrices, read (each graph's in its order: a layer's loops read
    what the graph makes of those below) and settled into RNN layers, per graph."""
    held = [loop for loop in loops_of(found) if any(op.op_type in ("MatMul", "Gemm") for op in loop[3].graph.node)]
    if len(held) > MAX_LOOPS:
        raise BadInput(f"the model holds {len(held)} Loops, more than any model rnnconv reads")
    layers = []
    for scope in dict.fromkeys(s for s, _, _, _ in held):
        graph: ProbedScope | None = None
        loops = []
        for index, node, body in ((i, n, b) for s, i, n, b in held if s is scope):
            graph = graph or ProbedScope(scope, folding)
            loop = read_loop(scope, body, node, index, folding, graph)
            if loop is not None:
                graph.read(loop)
                loops.append(loop)
        if graph is not None and loops:
            layers.append(loop_layers(graph, loops))
    return layers
