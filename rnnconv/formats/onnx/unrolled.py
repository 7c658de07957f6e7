"""RNNs an exporter unrolled into per-step operations, recognised and read back as RNN layers.

torch.onnx.export(dynamo=True), the default exporter since torch 2.9, writes `nn.RNN` with no RNN node. For
each layer and direction it computes every step's input term at once and then one step per time step:

    P   = MatMul(x, W_ih^T) + b_ih                       (all steps; flipped in time for the reverse direction)
    h_t = act(MatMul(h_t-1, W_hh^T) + b_hh + P[t])      (act: Tanh or Relu; P[t] a Slice+Squeeze or Gather)

and folds the first step's recurrent term, zeros @ W_hh^T + b_hh, into a constant when no initial state is
given. A recurrence is recognised when every step has this form, the steps follow each other (each one's h is
the previous one's output) over P[0], P[1], ... in order, and every step uses the same W_hh and b_hh; what does
not match is said. Forward and reverse recurrences over the same x are one bidirectional layer; a layer whose
x is the previous layer's outputs concatenated in time (and directions) is that RNN's next layer.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnconv.core.reference import sigmoid
from rnnconv.errors import cut, listing
from rnnconv.formats._cells import (
    PROBE_SEED,
    TOLERANCE,
    CellGraph,
    Product,
    Reading,
    exchanged,
    probe_rows,
    recognise,
    run_in_batches,
    run_ops,
    stepped,
)
from rnnconv.formats.onnx.folding import SUBGRAPH, Folder, NotFoldable, Scope, node_name
from rnnconv.formats.onnx.wire import ONNX_ACTIVATIONS, ONNX_INPUTS
from rnnconv.table.constants import NONLINEARITIES

ONNX_W, ONNX_R, ONNX_B = ONNX_INPUTS[1:4]  # the weights an RNN node would take, as the unrolled steps give them
ACTIVATION_OPS = tuple(op for op, name in ONNX_ACTIVATIONS.items() if name in NONLINEARITIES)  # Tanh, Relu
PASS_THROUGH = ("Identity", "Squeeze", "Unsqueeze", "Reshape")  # what may stand between a step's h and the next
INT64_MIN = -(2**63)
MAX_LAYERS_STACKED = 256  # layers tried against each other as one RNN's


@dataclass
class Step:
    """One time step: h = act(recurrent term + P[index])."""

    activation: Any  # the node
    projection: str  # P (before any flip)
    index: int
    flipped: bool
    h: str | None  # the previous h the recurrent MatMul reads; None when the exporter folded the term
    recurrent: str | None  # W_hh^T
    bias: str | None  # b_hh
    folded: str | None  # the folded first-step term


@dataclass
class Unrolled:
    """One recognised recurrence (a layer's direction), or why a run of steps is not one."""

    name: str
    x: str
    steps: list[Step]
    hidden: int = 0
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # W (H, in), R (H, H), bW, bR (H) when present
    refusal: str | None = None

    @property
    def flipped(self) -> bool:
        return self.steps[0].flipped

    @property
    def outputs(self) -> list[str]:
        """The steps' outputs in time order (a reverse recurrence's last step is time 0)."""
        names = [s.activation.output[0] for s in self.steps]
        return names[::-1] if self.flipped else names


class Recogniser:
    def __init__(self, scope: Scope, folding: Folder):
        self.scope, self.folding = scope, folding

    def producer(self, value: str) -> Any:
        found = self.scope.produced.get(value)
        return found[0] if found else None

    def constant(self, value: str) -> np.ndarray | None:
        try:
            return self.folding.value(value, self.scope)
        except NotFoldable:
            return None

    def integers(self, node: Any, index: int) -> list[int] | None:
        if index >= len(node.input) or not node.input[index]:
            return None
        values = self.constant(node.input[index])
        if values is None or values.dtype.kind not in "iu" or values.size > 8:
            return None
        return [int(v) for v in values.reshape(-1)]

    def recurrences(self) -> list[Unrolled]:
        steps = [s for node in self.scope.graph.node if (s := self.step(node)) is not None]
        groups: dict[tuple[str, bool], list[Step]] = defaultdict(list)
        for step in steps:
            groups[(step.projection, step.flipped)].append(step)
        return [self.recurrence(group) for group in groups.values()]

    def step(self, node: Any) -> Step | None:
        """The step an activation node ends, or None when it ends none."""
        if node.op_type not in ACTIVATION_OPS or node.domain not in ("", "ai.onnx") or len(node.input) != 1:
            return None
        add = self.producer(node.input[0])
        if add is None or add.op_type != "Add" or len(add.input) != 2:
            return None
        for term, data in (add.input, add.input[::-1]):
            at = self.time_slice(data)
            recurrent = self.recurrent_term(term) if at else None
            if at and recurrent:
                return Step(node, *at, *recurrent)
        return None

    def time_slice(self, value: str) -> tuple[str, int, bool] | None:
        """(P, t, flipped) when `value` is P[t] (or P flipped in time, at t), else None."""
        node = self.producer(value)
        if node is not None and node.op_type == "Squeeze":
            if (self.integers(node, 1) or [0]) != [0]:
                return None
            node = self.producer(node.input[0])
        if node is None or not node.input:
            return None
        if node.op_type == "Slice":
            starts, ends, axes = self.integers(node, 1), self.integers(node, 2), self.integers(node, 3)
            steps = self.integers(node, 4) or [1]
            if starts is None or ends is None or len(starts) != 1 or (axes or [0]) != [0] or steps != [1]:
                return None
            if starts[0] < 0 or ends[0] != starts[0] + 1:
                return None
            index = starts[0]
        elif node.op_type == "Gather":
            indices = self.constant(node.input[1]) if len(node.input) > 1 else None
            axis = [int(a.i) for a in node.attribute if a.name == "axis"] or [0]
            if indices is None or indices.dtype.kind not in "iu" or indices.size != 1 or axis != [0]:
                return None
            index = int(indices.reshape(-1)[0])
            if index < 0:
                return None
        else:
            return None
        data = node.input[0]
        flip = self.producer(data)
        if flip is not None and flip.op_type == "Slice":
            starts, ends = self.integers(flip, 1), self.integers(flip, 2)
            axes, backwards = self.integers(flip, 3) or [0], self.integers(flip, 4)
            if starts == [-1] and ends is not None and ends[0] <= INT64_MIN // 2 and axes == [0] and backwards == [-1]:
                return flip.input[0], index, True
        return data, index, False

    def recurrent_term(self, value: str) -> tuple[str | None, str | None, str | None, str | None] | None:
        """(h, W_hh^T, b_hh, None) for MatMul(h, W_hh^T) [+ b_hh]; (None, None, None, value) for a folded
        constant; None otherwise."""
        node = self.producer(value)
        bias = None
        if node is not None and node.op_type == "Add" and len(node.input) == 2:
            for product, other in (node.input, node.input[::-1]):
                multiply = self.producer(product)
                if multiply is not None and multiply.op_type == "MatMul" and self.constant(other) is not None:
                    node, bias = multiply, other
                    break
        if node is not None and node.op_type == "MatMul" and len(node.input) == 2:
            if self.constant(node.input[1]) is not None and self.constant(node.input[0]) is None:
                return node.input[0], node.input[1], bias, None
            return None
        if bias is None and self.constant(value) is not None:
            return None, None, None, value
        return None

    def recurrence(self, steps: list[Step]) -> Unrolled:
        steps = sorted(steps, key=lambda s: s.index)
        first = steps[0]
        name = self.scope.qualified(self.projection_node_name(first.projection))
        found = Unrolled(name, "", steps)
        activations = {s.activation.op_type for s in steps}
        indices = [s.index for s in steps]
        if indices != list(range(len(steps))):
            found.refusal = f"its steps read P at times {listing(indices)}, not each time from 0 once"
            return found
        if len(activations) > 1:
            found.refusal = f"its steps use different activations ({', '.join(sorted(activations))})"
            return found
        for earlier, later in itertools.pairwise(steps):
            if later.h is None or self.through(later.h) != earlier.activation.output[0]:
                found.refusal = (
                    f"step {later.index} (node {later.activation.name!r}) does not read the h step {earlier.index} "
                    f"computes (node {earlier.activation.name!r})"
                )
                return found
        explicit = [s for s in steps if s.recurrent is not None]
        if not explicit:
            found.refusal = "no step multiplies h by a recurrent matrix (one step, its recurrent term folded away)"
            return found
        reference = explicit[0]
        recurrent = self.constant(reference.recurrent or "")
        bias = self.constant(reference.bias) if reference.bias else None
        for step in explicit[1:]:
            for what, mine, theirs in (
                ("W_hh", step.recurrent, reference.recurrent),
                ("b_hh", step.bias, reference.bias),
            ):
                same = mine == theirs or (
                    mine is not None and theirs is not None and _equal(self.constant(mine), self.constant(theirs))
                )
                if not same:
                    found.refusal = (
                        f"step {step.index} (node {step.activation.name!r}) uses {what} {mine!r}, step "
                        f"{reference.index} uses {theirs!r}: not one recurrent layer"
                    )
                    return found
        projection = self.projection(first.projection)
        if projection is None or recurrent is None:
            found.refusal = f"its input term {first.projection!r} is not MatMul(x, W_ih^T) + b_ih with constant weights"
            return found
        found.x, input_matrix, input_bias = projection
        if recurrent.ndim != 2 or recurrent.shape[0] != recurrent.shape[1] or input_matrix.ndim != 2:
            found.refusal = (
                f"its matrices have shapes {input_matrix.shape} and {recurrent.shape}, not (in, H) and (H, H)"
            )
            return found
        hidden = found.hidden = int(recurrent.shape[0])
        if input_matrix.shape[1] != hidden or any(b is not None and b.shape != (hidden,) for b in (input_bias, bias)):
            found.refusal = f"its input matrix {input_matrix.shape} or biases do not fit hidden size {hidden}"
            return found
        if first.folded is not None:
            term = self.constant(first.folded)
            expected = np.zeros(hidden, recurrent.dtype) if bias is None else bias
            if term is None or term.shape[-1:] != (hidden,) or not np.all(term == expected):
                found.refusal = (
                    "its first step's recurrent term is a constant that is not b_hh: the export folded a "
                    "non-zero initial state into it"
                )
                return found
        found.weights = {ONNX_W: input_matrix.T, ONNX_R: recurrent.T}
        if input_bias is not None or bias is not None:
            zeros = np.zeros(hidden, recurrent.dtype)
            found.weights[ONNX_B] = np.concatenate([zeros if b is None else b for b in (input_bias, bias)])
        return found

    def through(self, value: str) -> str:
        """The value `value` is, looking past ops that only reshape it."""
        for _ in range(8):
            node = self.producer(value)
            if node is None or node.op_type not in PASS_THROUGH or not node.input:
                break
            value = node.input[0]
        return value

    def projection_node_name(self, value: str) -> str:
        node = self.producer(value)
        if node is not None and node.op_type == "Add":
            for operand in node.input:
                multiply = self.producer(operand)
                if multiply is not None and multiply.op_type == "MatMul":
                    node = multiply
        return (node.name or node.op_type) if node is not None else value

    def projection(self, value: str) -> tuple[str, np.ndarray, np.ndarray | None] | None:
        """(x, W_ih^T, b_ih or None) for P = MatMul(x, W_ih^T) [+ b_ih]."""
        node = self.producer(value)
        bias = None
        if node is not None and node.op_type == "Add" and len(node.input) == 2:
            for product, other in (node.input, node.input[::-1]):
                multiply = self.producer(product)
                constant = self.constant(other)
                if multiply is not None and multiply.op_type == "MatMul" and constant is not None:
                    node, bias = multiply, constant
                    break
        if node is None or node.op_type != "MatMul" or len(node.input) != 2:
            return None
        matrix = self.constant(node.input[1])
        return None if matrix is None else (node.input[0], matrix, bias)

    def layers(self, found: list[Unrolled]) -> list[list[list[Unrolled]]]:
        """Recurrences grouped into layers (one direction, or forward and reverse over the same x), and the
        layers into RNNs (each layer's x the previous layer's outputs, concatenated in time and directions)."""
        usable = [u for u in found if u.refusal is None]
        layers: list[list[Unrolled]] = []
        for recurrence in usable:
            partner = next(
                (
                    layer
                    for layer in layers
                    if len(layer) == 1
                    and layer[0].x == recurrence.x
                    and layer[0].flipped != recurrence.flipped
                    and len(layer[0].steps) == len(recurrence.steps)
                    and layer[0].hidden == recurrence.hidden
                    and layer[0].steps[0].activation.op_type == recurrence.steps[0].activation.op_type
                ),
                None,
            )
            if partner is not None:
                partner.append(recurrence)
                partner.sort(key=lambda u: u.flipped)  # forward first
            else:
                layers.append([recurrence])
        following: dict[int, int] = {}
        if len(layers) > MAX_LAYERS_STACKED:  # no model has as many: each stays an RNN of its own
            return [[layer] for layer in layers]
        for later_index, later in enumerate(layers):
            for earlier_index, earlier in enumerate(layers):
                if earlier_index != later_index and self.feeds(earlier, later[0].x) and earlier_index not in following:
                    following[earlier_index] = later_index
                    break
        preceded = set(following.values())
        stacks = []
        for start in range(len(layers)):
            if start in preceded:
                continue
            stack, index = [layers[start]], start
            while index in following and len(stack) <= len(layers):
                index = following[index]
                stack.append(layers[index])
            stacks.append(stack)
        return stacks

    def feeds(self, layer: list[Unrolled], x: str) -> bool:
        """Whether `x` is the layer's output sequence: its steps' outputs concatenated in time (axis 0), the
        directions side by side (the last axis), as the next layer of nn.RNN reads them."""
        x = self.through(x)
        if len(layer) == 1:
            return self.concatenation(x, 0) == layer[0].outputs and not layer[0].flipped
        parts = self.concatenation(x, 2)
        if parts is None or len(parts) != 2:
            return False
        return all(self.concatenation(self.through(p), 0) == u.outputs for p, u in zip(parts, layer))

    def concatenation(self, value: str, axis: int) -> list[str] | None:
        node = self.producer(value)
        if node is None or node.op_type != "Concat":
            return None
        axes = [int(a.i) for a in node.attribute if a.name == "axis"]
        if axes not in ([axis], [axis - 3] if axis else [axis]):
            return None
        return [self.through(i) for i in node.input]


def _equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is not None and b is not None and a.dtype == b.dtype and np.array_equal(a, b)


EVALUATED = (
    "Gemm",
    "MatMul",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Sigmoid",
    "Tanh",
    "Relu",
    "Split",
    "Identity",
    "Concat",
)
MAX_CARRIED = 4  # values a cell's graph reads besides its input and state, tried as an LSTM's cell state
MAX_FOLDED_BATCH = 1024  # the batch a step folded from zero states is probed at, at most


@dataclass
class Cell:
    """An LSTM, GRU or RNN cell an exporter unrolled into matrix products and activations (one step, as the
    dynamo exporter writes nn.LSTMCell, nn.GRUCell and nn.RNNCell), and what it computes: the reading whose cuDNN
    cell computes what its graph computes on probe inputs, or why none does."""

    name: str
    kind: str  # LSTM, GRU or RNN, as its form suggests
    hidden: int
    input_size: int
    weights: list[str]  # the stored tensors its matrix products read
    reading: Reading | None = None
    refusal: str | None = None
    after_zeros: bool = False  # the step at time 1 of a layer whose step 0 the exporter folded from zero states


class CellFinder(Recogniser):
    """Cells: a matrix product with constant weights split into 4 parts feeding three Sigmoids and a Tanh (LSTM),
    two split into 3 parts whose sums feed Sigmoids (GRU), or Tanh/Relu of the sum of two products, one with a
    square matrix (RNN); each then read by what it computes (`_cells.recognise`)."""

    def product(self, value: str) -> Product | None:
        """A Gemm or MatMul (+ Add) of a value by a constant weight, the weight as (out, in) as the graph
        multiplies it, with the constant added."""
        node = self.producer(value)
        bias = None
        if node is not None and node.op_type == "Add" and len(node.input) == 2:
            for product, other in (node.input, node.input[::-1]):
                inner = self.producer(product)
                if inner is not None and inner.op_type in ("MatMul", "Gemm") and self.constant(other) is not None:
                    node, bias = inner, self.constant(other)
                    break
        if node is None or node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
            return None
        weight = self.constant(node.input[1])
        if weight is None or weight.ndim != 2 or self.constant(node.input[0]) is not None:
            return None
        if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
            bias = self.constant(node.input[2])
        transposed = node.op_type == "Gemm" and any(a.name == "transB" and a.i == 1 for a in node.attribute)
        return Product(node.input[0], weight if transposed else weight.T, bias, node.input[1])

    def __init__(self, scope: Scope, folding: Folder):
        super().__init__(scope, folding)
        self.readers: dict[str, list[Any]] = defaultdict(list)  # value -> the nodes reading it
        for node in scope.graph.node:
            for name in set(node.input):
                self.readers[name].append(node)

    def consumers(self, value: str) -> list[Any]:
        return self.readers.get(value, [])

    def joined(self, value: str) -> tuple[str, str] | None:
        """The two values a Concat on the last axis joins into `value` (TF1's [x, h]), or None."""
        node = self.producer(value)
        if node is None or node.op_type != "Concat" or len(node.input) != 2:
            return None
        axes = [int(a.i) for a in node.attribute if a.name == "axis"]
        return (node.input[0], node.input[1]) if axes in ([-1], [1]) else None

    def cells(self, taken: set[str]) -> list[Cell]:
        found: list[Cell] = []
        splits: list[tuple[Any, Product]] = []
        for node in self.scope.graph.node:
            if node.op_type == "Split" and node.input and len(node.output) in (3, 4):
                products = self.summed_products(node.input[0]) or []
                single = self.product(node.input[0])
                if len(node.output) == 4 and len(products) == 2 and self.lstm_parts(node):
                    found.append(self.cell(node, "LSTM", products, 4))
                elif len(node.output) == 3 and single is not None:
                    splits.append((node, single))
            elif node.op_type in ACTIVATION_OPS and node.input and node.output[0] not in taken:
                summed = self.summed_products(node.input[0])
                if summed and len(summed) == 2 and any(p.matrix.shape[0] == p.matrix.shape[1] for p in summed):
                    found.append(self.cell(node, "RNN", summed, 1))
        for first, other in self.gru_pairs(splits):
            found.append(self.cell(first[0], "GRU", [first[1], other[1]], 3))
        return [c for c in found if c.hidden > 0]

    def gru_pairs(self, splits: list[tuple[Any, Product]]) -> list[tuple[tuple[Any, Product], tuple[Any, Product]]]:
        """The 3-way splits of two products whose parts are added (a GRU's input and recurrent terms), in pairs."""
        adding = {}
        for split in splits:
            sums = {c.output[0] for part in split[0].output for c in self.consumers(part) if c.op_type == "Add"}
            adding[id(split[0])] = sums
        pairs, paired = [], set()
        for index, one in enumerate(splits):
            for other in splits[index + 1 :]:
                if id(one[0]) in paired or id(other[0]) in paired:
                    continue
                if adding[id(one[0])] & adding[id(other[0])] and self.gru_parts(one[0]):
                    pairs.append((one, other))
                    paired |= {id(one[0]), id(other[0])}
        return pairs

    def stacks(self, cells: list[Cell]) -> tuple[list[list[list[Cell]]], list[Cell]]:
        """Cells stepped over time (each step's state the previous step's new state, its input the input sequence
        at that step, its weights the same), as layers of their steps in time order, stacked where a layer's input
        at each step is the layer below's new state; and the cells that are no such step."""
        read = [c for c in cells if c.reading is not None]
        by_output = {c.reading.outputs[0]: c for c in read if c.reading is not None}
        after: dict[int, Cell] = {}
        for cell in read:  # in the graph's order, which is time's
            earlier = self.earlier_step(cell, by_output)
            if earlier is not None:
                after[id(earlier)] = cell
        followed = {id(c) for c in after.values()}
        layers = []
        for cell in read:
            if id(cell) not in followed:
                layer = [cell]
                while id(layer[-1]) in after and len(layer) <= len(read):
                    layer.append(after[id(layer[-1])])
                layers.append(layer)
        timed = {id(layer[0]) for layer in layers if self.over_time(layer)}
        unread = [layer for layer in layers if self.unread_step(layer) is not None]
        layers = [layer for layer in layers if layer not in unread]
        stacks: list[list[list[Cell]]] = [[layer] for layer in layers if id(layer[0]) in timed]
        rest = [layer for layer in layers if len(layer) > 1 and id(layer[0]) not in timed]
        grown = True
        while grown and rest:
            grown = False
            for layer in rest:
                stack = next((s for s in stacks if self.reads_outputs(layer, s[-1])), None)
                if stack is not None:
                    stack.append(layer)
                    rest.remove(layer)
                    grown = True
                    break
        # a layer refused is one refusal, its first step's: its other steps are no cells alone
        stepped = {id(c) for layer in unread for c in layer[1:]} | {
            id(c) for stack in stacks for layer in stack for c in layer
        }
        return stacks, [c for c in cells if id(c) not in stepped]

    def unread_step(self, layer: list[Cell]) -> int | None:
        """The first step of several whose new state nothing in the graph reads (no node, no output of the graph),
        the layer's first step then refused saying so: the graph does not give that RNN's outputs, whatever its
        steps compute (a step's new cell state may go unread: the last one's usually does)."""
        if len(layer) < 2:
            return None
        graph = self.scope.graph
        read = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
        step = next((i for i, c in enumerate(layer) if c.reading and c.reading.outputs[0] not in read), None)
        if step is not None:
            folded = int(layer[0].after_zeros)  # a step 0 the exporter folded from zero states is a step too
            layer[0].refusal = (
                f"gives at step {step + 1 + folded} of {len(layer) + folded} a new state that nothing in the graph "
                "reads, so the graph does not give the outputs of the RNN its steps make"
            )
            layer[0].reading = None
        return step

    def earlier_step(self, cell: Cell, by_output: dict[str, Cell]) -> Cell | None:
        """The step whose new state `cell` reads as its state, the two read alike (a step that may be read with
        its input and state exchanged is read so that it is the next step of the one whose new state it reads)."""
        assert cell.reading is not None
        readings = [cell.reading] + [r for r in (exchanged(cell.reading),) if r is not None]
        for reading in readings:
            earlier = by_output.get(self.through(reading.h))
            if earlier is None or earlier.reading is None or earlier is cell:
                continue
            for before in [earlier.reading] + [r for r in (exchanged(earlier.reading),) if r is not None]:
                if _steps_of_one(before, reading, self.through):
                    earlier.reading, cell.reading = before, reading
                    return earlier
        return None

    def alone(self, cell: Cell) -> bool:
        """Whether `cell`, a step of no recurrence, is a Scan's body; a step whose input and state its graph does not
        tell apart (as many inputs as hidden units, an LSTM's or RNN's step computing the same either way round)
        is refused rather than read one way at random."""
        if self.scanned(cell):
            return True
        if cell.reading is not None and exchanged(cell.reading) is not None:
            reading = cell.reading
            cell.refusal = (
                f"reads {cut(reading.x)!r} and {cut(reading.h)!r} alike (as many inputs as hidden units, "
                f"{reading.hidden}, and one step): which of them is the state it carries, its graph does not tell"
            )
            cell.reading = None
        return False

    def scanned(self, cell: Cell) -> bool:
        """Whether `cell` is the recurrence of the Scan whose body this graph is: its states the Scan's carried
        values (each new state given back in its place), its input the one scanned, forward along axis 0; the
        cell's reading then made the one that says so (a step read either way round, `exchanged`)."""
        scan = scan_of(self.scope)
        if scan is None or cell.reading is None:
            return False
        attributes = {a.name: a for a in scan.attribute}
        scanned = int(attributes["num_scan_inputs"].i) if "num_scan_inputs" in attributes else 0
        inputs = [i.name for i in self.scope.graph.input]
        outputs = [o.name for o in self.scope.graph.output]
        carried = len(inputs) - scanned
        layouts = ("scan_input_directions", "scan_input_axes", "scan_output_directions", "scan_output_axes")
        if scanned < 1 or carried < 1 or any(any(attributes[n].ints) for n in layouts if n in attributes):
            return False
        for reading in [cell.reading] + [r for r in (exchanged(cell.reading),) if r is not None]:
            states = [reading.h] + ([reading.c] if reading.c else [])
            if set(states) != set(inputs[:carried]) or len(states) != carried or reading.x not in inputs[carried:]:
                continue
            places = [inputs.index(state) for state in states]
            if all(
                place < len(outputs) and self.through(outputs[place]) == self.through(new)
                for place, new in zip(places, reading.outputs)
            ):
                cell.reading = reading
                return True
        return False

    def over_time(self, layer: list[Cell]) -> bool:
        """Whether step t reads the input sequence at t, for every t from 0 (two steps at least), or from 1 where
        the exporter folded step 0 from zero states (`from_zeros`)."""
        slices = [self.time_slice(c.reading.x) if c.reading else None for c in layer]
        sources = {s[0] for s in slices if s is not None}
        if len(sources) != 1 or any(s is None for s in slices):
            return False
        first = 1 if slices[0] is not None and slices[0][1] == 1 and self.from_zeros(layer[0], slices[0][0]) else 0
        steps = [s[1:] for s in slices if s is not None]
        return len(layer) + first > 1 and steps == [(t, False) for t in range(first, first + len(layer))]

    def static_batch(self, sequence: str) -> int | None:
        """The batch (axis 1) of a time-major sequence the graph is given, where its shape fixes it."""
        given = [i for i in self.scope.graph.input if i.name == sequence and i.type.HasField("tensor_type")]
        dims = given[0].type.tensor_type.shape.dim if given else []
        batch = int(dims[1].dim_value) if len(dims) == 3 and dims[1].HasField("dim_value") else 0
        return batch if 0 < batch <= MAX_FOLDED_BATCH else None

    def from_zeros(self, cell: Cell, sequence: str) -> bool:
        """Whether the states `cell` (the step at time 1) reads are what its cell computes from the sequence at time
        0 and zero states (a step the exporter folded, its recurrent products of zeros constants); the cell is then
        marked as a layer's first step from zeros."""
        reading = cell.reading
        starts = [
            name
            for node in self.scope.graph.node
            for name in node.output
            if self.time_slice(name) == (sequence, 0, False)
        ]
        if reading is None or len(starts) != 1:
            return False
        batch = self.static_batch(sequence)  # the export's: the zero states folded into constants of its batch
        rows = probe_rows(batch)
        x = np.random.default_rng(PROBE_SEED).standard_normal((rows, reading.input_size)).astype(np.float32)
        zeros = np.zeros((rows, reading.hidden), np.float32)
        try:
            values = run_in_batches(lambda feeds: self.run(feeds)[0], {starts[0]: x}, batch)
        except (ValueError, IndexError, TypeError, ArithmeticError):
            return False
        expected = stepped(reading, x, zeros, zeros if reading.c is not None else None)
        for state, value in zip((reading.h, reading.c), expected):
            got = values.get(state or "")
            if got is None or got.shape != value.shape or not np.allclose(got, value, rtol=0, atol=TOLERANCE):
                return False
        cell.after_zeros = True
        return True

    def reads_outputs(self, layer: list[Cell], below: list[Cell]) -> bool:
        """Whether each step of `layer` reads the new state of the same step of `below`."""
        return len(layer) == len(below) and all(
            c.reading is not None and b.reading is not None and self.through(c.reading.x) == b.reading.outputs[0]
            for c, b in zip(layer, below)
        )

    def summed_products(self, value: str) -> list[Product] | None:
        node = self.producer(value)
        if node is None or node.op_type != "Add" or len(node.input) != 2:
            return None
        products = [self.product(i) for i in node.input]
        return [p for p in products if p is not None] if all(products) else None

    def lstm_parts(self, split: Any) -> bool:
        ops = sorted(c.op_type for part in split.output for c in self.consumers(part))
        return ops == ["Sigmoid", "Sigmoid", "Sigmoid", "Tanh"]

    def gru_parts(self, split: Any) -> bool:
        sums = [c for part in split.output for c in self.consumers(part) if c.op_type == "Add"]
        return sum(1 for s in sums for c in self.consumers(s.output[0]) if c.op_type == "Sigmoid") >= 2

    def cell(self, node: Any, kind: str, products: list[Product], gates: int) -> Cell:
        shapes = sorted((p.matrix.shape for p in products), key=lambda s: s[1] != s[0] // gates)
        recurrent, inputs = shapes[0], shapes[-1]
        hidden = recurrent[0] // gates if recurrent[0] % gates == 0 and recurrent[1] * gates == recurrent[0] else 0
        name = self.scope.qualified(node.name or node.op_type)
        found = Cell(name, kind, hidden, int(inputs[1]), [p.name for p in products])
        if hidden:
            carried = self.carried(products) if kind == "LSTM" else ()
            graph = CellGraph(name, tuple(products), carried, lambda feeds: self.run(feeds)[0], self.joined)
            reading = recognise(graph)
            found.reading, found.refusal = (reading, None) if isinstance(reading, Reading) else (None, reading)
        return found

    def carried(self, products: list[Product]) -> tuple[str, ...]:
        """The values the cell's graph reads besides its products' inputs: an LSTM's cell state among them."""
        feeds = {p.value: np.zeros((1, p.matrix.shape[1]), np.float32) for p in products}
        try:
            _, missing = self.run(feeds)
        except (ValueError, IndexError, TypeError, ArithmeticError):
            return ()
        return tuple(dict.fromkeys(missing))[:MAX_CARRIED]

    def run(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
        """Every value of the graph computed from `feeds` and constants (the values computed, without the feeds),
        and the values the nodes reached would also need, which are neither."""
        nodes = [n for n in self.scope.graph.node if n.op_type in EVALUATED and n.domain in ("", "ai.onnx")]
        return run_ops(nodes, feeds, lambda node: (node.input, node.output), self.constant, evaluate, "")


def scan_of(scope: Scope) -> Any:
    """The Scan node whose body `scope` is, or None."""
    parent = scope.parent
    if parent is None:
        return None
    for index, node in enumerate(parent.graph.node):
        if node.op_type == "Scan" and scope.path == f"{parent.qualified(node_name(node, index))}{SUBGRAPH}body":
            return node
    return None


def _steps_of_one(a: Reading, b: Reading, through: Callable[[str], str]) -> bool:
    """Whether `b` is the step after `a`: the same cell, reading the states it computes."""
    if a.mode != b.mode or a.reset_after != b.reset_after or a.gates.keys() != b.gates.keys():
        return False
    if b.c is not None and (len(a.outputs) < 2 or through(b.c) != a.outputs[1]):
        return False
    return all(x.shape == y.shape and np.array_equal(x, y) for g in a.gates for x, y in zip(a.gates[g], b.gates[g]))


def evaluate(node: Any, arguments: list[Any]) -> list[np.ndarray]:
    """One node computed in numpy, as onnxruntime computes it (float32 in, float32 out)."""
    attributes = {a.name: a for a in node.attribute}
    op = node.op_type
    if op == "Gemm":
        a, b = arguments[0], arguments[1]
        a = a.T if "transA" in attributes and attributes["transA"].i else a
        b = b.T if "transB" in attributes and attributes["transB"].i else b
        alpha = attributes["alpha"].f if "alpha" in attributes else 1.0
        result = np.float32(alpha) * (a @ b)
        if len(arguments) > 2 and arguments[2] is not None:
            beta = attributes["beta"].f if "beta" in attributes else 1.0
            result = result + np.float32(beta) * arguments[2]
        return [result]
    if op == "Split":
        axis = attributes["axis"].i if "axis" in attributes else 0
        sizes = arguments[1] if len(arguments) > 1 and arguments[1] is not None else None
        if sizes is None and "split" in attributes:
            sizes = list(attributes["split"].ints)
        if sizes is None:
            return list(np.split(arguments[0], len(node.output), axis=axis))
        return list(np.split(arguments[0], np.cumsum([int(s) for s in sizes])[:-1], axis=axis))
    if op == "Concat":
        return [np.concatenate(arguments, axis=attributes["axis"].i)]
    unary: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "Neg": np.negative,
        "Sigmoid": sigmoid,
        "Tanh": np.tanh,
        "Relu": lambda v: np.maximum(v, 0),
        "Identity": lambda v: v,
    }
    if op in unary:
        return [unary[op](arguments[0])]
    binary: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
        "MatMul": np.matmul,
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Div": np.divide,
    }
    return [binary[op](arguments[0], arguments[1])]
