"""RNNs TensorFlow's converter writes as WHILE loops (a Keras 3 LSTM; every GRU and SimpleRNN), read by what their
bodies compute.

The converter writes each layer (and direction) as a WHILE over the time-major sequence whose body reads step t of it
(GATHER), computes the cell from FULLY_CONNECTED products (of the step's input and the carried state, in any of
`_cell_forms`' forms), and writes the new state at t of an output sequence. Here a body's products are found, its ops
evaluated in numpy (a handful of ops, checked shapes, nothing run from the file but that), and the cell read by
`_cells.recognise`; then the loop itself is checked by what it computes: the body run whole at its first and last steps
gives the new state where the state was, writes it at that step of the output sequence and moves its counters (from 0)
on by one, and the condition holds for exactly as many steps as the sequence has. A loop reading its sequence reversed
(REVERSE_V2) is a backward direction; a forward and a backward loop over the same sequence whose outputs are joined are
one bidirectional layer; a layer reading another's output sequence is its next layer. A product's quantized weight
(the converter's dynamic-range quantization) is read as scale * (q - zero_point), the loop listing it. What is read
here is only read: verify runs each cell in LiteRT (`runner.CompiledCell`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.contracts import Provenance
from rnnconv.core.reference import sigmoid
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats._cell_forms import reset_before_joined, sizes_of
from rnnconv.formats._cells import (
    CellGraph,
    NotEvaluated,
    Product,
    Reading,
    Slot,
    axis_of,
    canonical,
    checked_steps,
    exchanged,
    recognise,
    run_ops,
)
from rnnconv.formats._flatbuffer import Table
from rnnconv.formats._quantized import Quantization, exact_dtype, note, record
from rnnconv.formats.tflite.wire import UNSET
from rnnconv.table.constants import CUDNN_MODES

WHILE = "WHILE"
MAX_CARRIED = 4  # a body's inputs tried as an LSTM's cell state
MAX_EVALUATED = 1 << 24  # elements of one value the evaluator computes (64 MiB of float32): any cell's are fewer
MAX_LOOPS = 4096  # WHILE ops in one file: far beyond any model; keeps reading a hostile file's loops bounded
MAX_STEPS = 4096  # steps of a loop whose condition is checked step by step
MAX_BATCH = 1024  # a fixed batch its body is probed at, at most


@dataclass
class Loop:
    """One WHILE of the main graph read as one direction of an RNN layer, or why it is not one."""

    op: Any  # the WHILE op
    name: str
    sequence: int  # the main graph's tensor it steps over (time-major), before any reversal
    reversed: bool
    output: int  # the main graph's tensor of its output sequence (time-major)
    evaluator: Evaluator | None = None  # its body's ops
    reading: Reading | None = None
    refusal: str | None = None
    sizes: tuple[int, int] = (0, 0)  # (input, hidden), where its matrices say them
    batch: int | None = None  # the one batch size its body computes (the file's), None where it does not say
    quantized: list[tuple[Any, Quantization]] = field(default_factory=list)  # its products' quantized weights


def _activation(code: int, value: np.ndarray) -> np.ndarray:
    """A fused activation (ActivationFunctionType)."""
    if code == 0:
        return value
    if code == 1:
        return np.maximum(value, 0)
    if code == 2:
        return np.clip(value, -1, 1)
    if code == 3:
        return np.clip(value, 0, 6)
    if code == 4:
        return np.tanh(value)
    raise NotEvaluated(f"activation code {code}")


def _option(options: Table | None, slot: int, kind: str, default: Any) -> Any:
    return default if options is None else options.scalar(slot, kind, default)


def _strided_slice(value: np.ndarray, begin: np.ndarray, end: np.ndarray, strides: np.ndarray, options: Any) -> Any:
    masks = [int(_option(options, slot, "i32", 0)) for slot in range(5)]
    begin_mask, end_mask, ellipsis, new_axis, shrink = masks
    if ellipsis or new_axis or _option(options, 5, "u8", 0) or not begin.size == end.size == strides.size:
        raise NotEvaluated("STRIDED_SLICE with an ellipsis, new axes or offsets")
    if begin.size > value.ndim:
        raise NotEvaluated("STRIDED_SLICE of more axes than its value has")
    index: list[Any] = []
    for axis in range(begin.size):
        stride = int(strides[axis])
        if stride == 0:
            raise NotEvaluated("STRIDED_SLICE with a stride of 0")
        if shrink >> axis & 1:
            index.append(int(begin[axis]))
            continue
        start = None if begin_mask >> axis & 1 else int(begin[axis])
        stop = None if end_mask >> axis & 1 else int(end[axis])
        index.append(slice(start, stop, stride))
    return value[tuple(index)]


def _slice(value: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
    if begin.size != value.ndim or size.size != value.ndim:
        raise NotEvaluated("SLICE of another rank than its value's")
    index = []
    for axis, (start, count) in enumerate(zip(begin.tolist(), size.tolist())):
        if not 0 <= start <= value.shape[axis] or count < -1:
            raise NotEvaluated("SLICE outside its value")
        index.append(slice(start, None if count == -1 else start + count))
    return value[tuple(index)]


def evaluate(op: Any, arguments: list[np.ndarray | None]) -> list[np.ndarray]:
    """One op computed in numpy, as LiteRT computes it (float32), for the ops a converter's RNN loop holds."""
    name, options = op.name, op.options
    values = [a for a in arguments if a is not None]
    if any(a.size > MAX_EVALUATED for a in values):
        raise NotEvaluated("a value larger than a cell's")
    if name == "FULLY_CONNECTED":
        x, weights = arguments[0], arguments[1]
        if x is None or weights is None or weights.ndim != 2 or _option(options, 1, "u8", 0):
            raise NotEvaluated("FULLY_CONNECTED without float weights")
        product = x.reshape(-1, weights.shape[1]) @ weights.T  # in x's type: a dequantized weight is float64
        product = product.astype(x.dtype, copy=False) if x.dtype.kind == "f" else product
        if len(arguments) > 2 and arguments[2] is not None:
            product = product + arguments[2]
        if _option(options, 2, "u8", 0):  # keep_num_dims
            product = product.reshape(*x.shape[:-1], weights.shape[0])
        return [_activation(_option(options, 0, "u8", 0), product)]
    if any(a is None for a in arguments):
        raise NotEvaluated(f"{name} with an input left out")
    if name in BINARY:
        result = BINARY[name](values[0], values[1])
        return [_activation(_option(options, 0, "u8", 0), result) if name in FUSED else result]
    if name in UNARY:
        return [UNARY[name](values[0])]
    if name == "SPLIT":
        axis, value = int(values[0].reshape(-1)[0]), values[1]
        count = int(_option(options, 0, "i32", 0))
        if count < 1 or value.shape[axis_of(axis, value.ndim)] % count:
            raise NotEvaluated("SPLIT into parts its value does not divide into")
        return list(np.split(value, count, axis=axis_of(axis, value.ndim)))
    if name == "SPLIT_V":
        value, sizes, axis = values[0], values[1].reshape(-1).tolist(), int(values[2].reshape(-1)[0])
        width = value.shape[axis_of(axis, value.ndim)]
        if sizes.count(-1) == 1:  # one size -1: the rest (tf.split(..., [H, H, -1]) of a reset-before GRU's body)
            sizes[sizes.index(-1)] = width - sum(s for s in sizes if s != -1)
        if any(s < 0 for s in sizes) or sum(sizes) != width:
            raise NotEvaluated("SPLIT_V of sizes its value does not have")
        return list(np.split(value, np.cumsum(sizes)[:-1], axis=axis_of(axis, value.ndim)))
    if name == "CONCATENATION":
        axis = int(_option(options, 0, "i32", 0))
        joined = np.concatenate(values, axis=axis_of(axis, values[0].ndim))
        return [_activation(_option(options, 1, "u8", 0), joined)]
    if name == "RESHAPE":
        shape = values[1].reshape(-1).tolist() if len(values) > 1 else None
        if shape is None or any(n < -1 for n in shape):
            raise NotEvaluated("RESHAPE without its shape")
        return [values[0].reshape(shape)]
    if name == "GATHER":
        axis = int(_option(options, 0, "i32", 0))
        if _option(options, 1, "i32", 0) or values[1].dtype.kind not in "iu":
            raise NotEvaluated("GATHER of batches")
        data, indices = values
        axis = axis_of(axis, data.ndim)
        if np.any(indices < 0) or np.any(indices >= data.shape[axis]):
            raise NotEvaluated("GATHER outside its value")
        return [np.take(data, indices, axis=axis)]
    if name == "STRIDED_SLICE":
        return [np.asarray(_strided_slice(values[0], values[1], values[2], values[3], options))]
    if name == "SLICE":
        return [_slice(values[0], values[1], values[2])]
    if name == "TRANSPOSE":
        order = values[1].reshape(-1).tolist()
        if sorted(order) != list(range(values[0].ndim)):
            raise NotEvaluated("TRANSPOSE by no permutation of its axes")
        return [np.transpose(values[0], order)]
    raise NotEvaluated(name)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "LOGISTIC": sigmoid,
    "TANH": np.tanh,
    "RELU": lambda v: np.maximum(v, 0),
    "RELU6": lambda v: np.clip(v, 0, 6),
    "RELU_N1_TO_1": lambda v: np.clip(v, -1, 1),
    "NEG": np.negative,
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "LESS": np.less,
    "LESS_EQUAL": np.less_equal,
    "GREATER": np.greater,
    "GREATER_EQUAL": np.greater_equal,
    "LOGICAL_AND": np.logical_and,
}
FUSED = ("ADD", "SUB", "MUL")  # the binary ops with a fused activation
# The ops `evaluate` computes: those a cell read from a body may hold.
EVALUATED_OPS = frozenset(
    [*BINARY, *UNARY, "FULLY_CONNECTED", "SPLIT", "SPLIT_V", "CONCATENATION", "RESHAPE", "GATHER", "STRIDED_SLICE"]
    + ["SLICE", "TRANSPOSE"]
)


class Evaluator:
    """A subgraph's ops computed in numpy from values fed by tensor index and its constants."""

    def __init__(self, file: Any, graph: Any):
        self.file, self.graph = file, graph
        self.constants: dict[int, np.ndarray | None] = {}
        self.producer = {t: op for op in graph.ops for t in op.outputs}
        self.quantized: dict[int, Quantization] = {}  # the quantized constants read (dequantized), by tensor

    def constant(self, t: int) -> np.ndarray | None:
        """A constant's values: floats as float32, a quantized one as scale * (q - zero_point), exact in float64
        (a hybrid op's int8 weight: the float model it stands for)."""
        if t not in self.constants:
            tensor = self.graph.tensors[t]
            if tensor.quantized and tensor.data is not None:
                what = f"a WHILE loop body's weight {cut(tensor.name)!r}"
                self.quantized[t] = self.file.quantization_of(tensor, what)
                found = self.file.dequantized(tensor, what)
            else:
                found = self.file.values(tensor)
                if found is not None and found.dtype.kind == "f":
                    found = found.astype(np.float32)
            self.constants[t] = found
        return self.constants[t]

    def run(self, feeds: dict[int, np.ndarray]) -> tuple[dict[int, np.ndarray], list[int]]:
        """Every value computed from `feeds` and constants, and the tensors the ops reached also need."""
        return run_ops(self.graph.ops, feeds, lambda op: (op.inputs, op.outputs), self.constant, evaluate, UNSET)


def find_loops(file: Any) -> list[Loop]:
    """Every WHILE of the main graph whose body holds matrix products: each read as a loop of a recognised cell,
    or listed with why it is not one."""
    main = file.subgraphs[0]
    producers = {t: op for op in main.ops for t in op.outputs}
    count = sum(1 for op in main.ops if op.name == WHILE)
    if count > MAX_LOOPS:
        raise BadInput(f"{file.path} holds {count} WHILE loops, more than any model rnnconv reads")
    loops = []
    for op in main.ops:
        if op.name != WHILE:
            continue
        cond, body = (int(_option(op.options, slot, "i32", -1)) for slot in (0, 1))
        if not (0 < cond < len(file.subgraphs) and 0 < body < len(file.subgraphs)):
            continue
        loop = _loop(file, op, file.subgraphs[cond], file.subgraphs[body], producers)
        if loop is not None:
            loops.append(loop)
    return loops


def _loop(file: Any, op: Any, cond: Any, body: Any, producers: dict[int, Any]) -> Loop | None:
    main = file.subgraphs[0]
    name = main.tensors[op.outputs[0]].name if op.outputs else f"op{op.index}"
    name = f"{name or 'op'}#{op.index}"
    evaluator = Evaluator(file, body)
    products = _products(evaluator)
    if not products:
        return None  # no matrix products: no cell
    loop = Loop(op, name, UNSET, False, UNSET, evaluator)
    count = len(op.inputs)
    if not (len(op.outputs) == len(body.inputs) == len(body.outputs) == count == len(cond.inputs)):
        loop.refusal = f"its WHILE op {op.index} has {count} inputs, and its body and condition do not take as many"
        return loop
    computed = [t for t in body.tensors if t.quantized and t.data is None]
    if computed:  # full-integer quantization: LiteRT computes the cell in integers, no float cell
        loop.refusal = (
            f"its body computes with quantized values ({cut(computed[0].name)!r} is {computed[0].dtype}: full-integer "
            "quantization), where rnnconv reads only a loop's quantized weights, with float activations"
        )
        return loop
    loop.quantized = [
        (body.tensors[p.matrix_tensor], evaluator.quantized[p.matrix_tensor])
        for p in products
        if p.matrix_tensor in evaluator.quantized
    ]
    cell = reset_before_joined([p.product for p in products])
    _, inputs, hidden = sizes_of(cell)
    loop.sizes = (inputs, hidden)
    carried = tuple(str(t) for t in _carried(evaluator, cell, body))
    batches = {main.tensors[t].shape[0] for t in op.inputs if t != UNSET and len(main.tensors[t].shape) == 2}
    if len(batches) == 1 and 0 < (batch := batches.pop()) <= MAX_BATCH:
        loop.batch = batch  # the fixed batch its states have: the one its body may compute
    graph = CellGraph(
        loop.name,
        tuple(cell),
        carried,
        lambda feeds: _named(evaluator, feeds),
        lambda value: _joined_values(evaluator, value),
        loop.batch,
    )
    reading = recognise(graph)
    if isinstance(reading, str):
        loop.refusal = f"its body's cell {reading}"
        return loop
    # a step whose input and state are read alike (as many inputs as units) is told by the loop that carries it
    for way in [reading] + [r for r in (exchanged(reading),) if r is not None]:
        found = _stepped(file, op, cond, body, evaluator, way, producers)
        if not isinstance(found, str):
            break
    if isinstance(found, str):
        loop.refusal = found
        return loop
    loop.sequence, loop.reversed, loop.output = found
    loop.reading = way
    loop.sizes = (reading.input_size, reading.hidden)
    return loop


@dataclass(frozen=True)
class FoundProduct:
    product: Product
    matrix_tensor: int


def _products(evaluator: Evaluator) -> list[FoundProduct]:
    """The body's FULLY_CONNECTED ops of constant float weights, each with the constant its output is added to
    (its own bias, else an ADD of a constant to it, or to its sum with the other product)."""
    graph = evaluator.graph
    readers: dict[int, list[Any]] = {}
    for op in graph.ops:
        for t in set(op.inputs):
            readers.setdefault(t, []).append(op)
    found = []
    for op in graph.ops:
        if op.name != "FULLY_CONNECTED" or len(op.inputs) < 2 or op.inputs[0] == UNSET:
            continue
        weights = evaluator.constant(op.inputs[1])
        if (
            weights is None
            or weights.dtype.kind != "f"
            or weights.ndim != 2
            or evaluator.constant(op.inputs[0]) is not None
        ):
            continue
        bias = evaluator.constant(op.inputs[2]) if len(op.inputs) > 2 and op.inputs[2] != UNSET else None
        found.append((op, weights, bias))
    products = []
    outputs = {op.outputs[0] for op, _, _ in found if op.outputs}
    for index, (op, weights, own) in enumerate(found):
        # a constant added to the two products' sum is the first one's bias (the gates sum them: either holds it)
        bias = own if own is not None or not op.outputs else _added(evaluator, op.outputs[0], readers, outputs, index)
        value = str(op.inputs[0])
        products.append(FoundProduct(Product(value, weights, bias, graph.tensors[op.inputs[1]].name), op.inputs[1]))
    return products


def _added(evaluator: Evaluator, value: int, readers: dict[int, list[Any]], products: set[int], index: int) -> Any:
    """The constant added to `value` (a product's output), or for the first product (`index` 0) to its sum with
    the other; None if none."""
    for _ in range(2 if index == 0 else 1):
        adds = [op for op in readers.get(value, []) if op.name == "ADD" and len(op.inputs) == 2 and op.outputs]
        if len(adds) != 1 or _option(adds[0].options, 0, "u8", 0):
            return None
        (other,) = [t for t in adds[0].inputs if t != value] or [value]
        constant = evaluator.constant(other)
        if constant is not None:
            return constant if constant.dtype.kind == "f" else None
        if other not in products:
            return None
        value = adds[0].outputs[0]
    return None


def _carried(evaluator: Evaluator, products: list[Product], body: Any) -> list[int]:
    """The body's inputs its cell's ops read besides its products' inputs: an LSTM's cell state among them."""
    feeds = {int(p.value): np.zeros((1, p.matrix.shape[1]), np.float32) for p in products}
    _, missing = evaluator.run(feeds)
    return [t for t in dict.fromkeys(missing) if t in body.inputs][:MAX_CARRIED]


def _joined_values(evaluator: Evaluator, value: str) -> tuple[str, str] | None:
    """The two values a CONCATENATION on the last axis joins into `value` (TF1's [x, h]), or None."""
    op = evaluator.producer.get(int(value))
    if op is None or op.name != "CONCATENATION" or len(op.inputs) != 2 or _option(op.options, 1, "u8", 0):
        return None
    rank = len(evaluator.graph.tensors[op.outputs[0]].shape)
    if int(_option(op.options, 0, "i32", 0)) not in (-1, rank - 1):
        return None
    return str(op.inputs[0]), str(op.inputs[1])


def _named(evaluator: Evaluator, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    computed, _ = evaluator.run({int(name): value for name, value in feeds.items()})
    return {str(t): value for t, value in computed.items()}


def _stepped(
    file: Any, op: Any, cond: Any, body: Any, evaluator: Evaluator, reading: Reading, producers: dict[int, Any]
) -> tuple[int, bool, int] | str:
    """(the sequence it steps over, whether reversed, its output sequence), where the WHILE runs the cell once per
    step of a sequence as Keras's loops do; else why it does not (a clause)."""
    main = file.subgraphs[0]
    places = {t: k for k, t in enumerate(body.inputs)}
    h, c = int(reading.h), int(reading.c) if reading.c else None
    states = [h] + ([c] if c is not None else [])
    if any(s not in places or body.outputs[places[s]] != int(new) for s, new in zip(states, reading.outputs)):
        return "its body's cell does not carry its state from one step to the next"
    gather = evaluator.producer.get(int(reading.x))
    if gather is None or gather.name != "GATHER" or len(gather.inputs) != 2 or _option(gather.options, 0, "i32", 0):
        return "its body's cell does not read its input as one step of a sequence (a GATHER)"
    sequence, counter = gather.inputs
    if sequence not in places or counter not in places or body.outputs[places[sequence]] != sequence:
        return "its body's cell does not read its input as one step of the sequence it loops over"
    given = main.tensors[op.inputs[places[sequence]]]
    if len(given.shape) != 3:
        return f"it loops over a sequence of shape {list(given.shape)}, not (steps, batch, features)"
    steps = given.shape[0]
    if steps > MAX_STEPS:
        return f"it loops over {steps} steps, more than rnnconv checks a loop's condition over ({MAX_STEPS})"
    for state in states:
        start = op.inputs[places[state]]
        if start in producers:
            return f"its initial state {cut(main.tensors[start].name)!r} is computed, not zeros or an input"
        values = file.values(main.tensors[start])
        if values is not None and np.any(values):
            return f"its initial state {cut(main.tensors[start].name)!r} is a constant that is not zeros"
    written = _written(file, op, body, evaluator, places, reading, steps)
    if isinstance(written, str):
        return written
    if not _runs_steps(file, op, cond, steps):
        return f"its condition does not hold for exactly the {steps} steps of its sequence (in ops rnnconv evaluates)"
    start = op.inputs[places[sequence]]
    flip = producers.get(start)
    if flip is not None and flip.name == "REVERSE_V2" and len(flip.inputs) == 2:
        axis = file.values(main.tensors[flip.inputs[1]])
        if axis is not None and axis.size == 1 and int(axis.reshape(-1)[0]) == 0:
            return flip.inputs[0], True, op.outputs[written]
    return start, False, op.outputs[written]


def _written(
    file: Any,
    op: Any,
    body: Any,
    evaluator: Evaluator,
    places: dict[int, int],
    reading: Reading,
    steps: int,
) -> int | str:
    """The place of the output sequence the body writes each step's new state at (`_cells.checked_steps`), each
    value the WHILE carries an int32 counter or a float32 value."""
    main = file.subgraphs[0]
    sizes = [math.prod(main.tensors[t].shape) for t in op.inputs]
    if sum(sizes) > MAX_EVALUATED:
        return f"it carries {sum(sizes)} values from step to step, more than rnnconv evaluates"
    slots = []
    for place, (given, out) in enumerate(zip(body.inputs, body.outputs)):
        tensor = main.tensors[op.inputs[place]]
        counter = tensor.dtype == "int32" and tensor.shape == ()
        if not counter and (tensor.dtype != "float32" or 0 in tensor.shape):
            return f"it carries a value of type {tensor.dtype}, shape {list(tensor.shape)}, that a cell's loop does not"
        start = file.values(tensor)
        start = None if start is None else np.asarray(start, np.int32 if counter else np.float32)
        slots.append(Slot(str(given), str(out), tensor.dtype, start, tuple(tensor.shape)))
    return checked_steps(lambda feeds: _named(evaluator, feeds), slots, reading, steps)


def _runs_steps(file: Any, op: Any, cond: Any, steps: int) -> bool:
    """Whether the condition holds for counters 0 to steps-1 and not at steps."""
    evaluator = Evaluator(file, cond)
    main = file.subgraphs[0]
    if len(cond.outputs) != 1:
        return False
    for step in range(steps + 1):
        feeds = {}
        for place, t in enumerate(cond.inputs):
            tensor = main.tensors[op.inputs[place]]
            scalar = tensor.dtype == "int32" and tensor.shape == ()
            feeds[t] = np.asarray(step, np.int32) if scalar else np.zeros(tensor.shape, np.float32)
        computed, _ = evaluator.run(feeds)
        holds = computed.get(cond.outputs[0])
        if holds is None or holds.size != 1 or bool(holds.reshape(-1)[0]) != (step < steps):
            return False
    return True


def grouped(
    loops: list[Loop], readers: dict[int, list[Any]], producers: dict[int, Any], file: Any
) -> list[tuple[list[Loop], int]]:
    """The loops as layers, each with the sequence it gives the layer above: a forward and a backward loop over the
    same sequence, their output sequences joined (the backward one's reversed back, CONCATENATION on the features,
    forward first), one bidirectional layer; every other loop a layer of its own (a backward one alone refused:
    cuDNN's RNNs have no backward-only direction)."""
    paired: set[int] = set()
    layers = []
    for loop in sorted(loops, key=lambda x: x.reversed):  # forward loops first, each taking its partner
        if id(loop) in paired:
            continue
        partner, joined = None, None
        if loop.reading is not None and not loop.reversed:
            for other in loops:
                if (
                    other.reading is None
                    or not other.reversed
                    or id(other) in paired
                    or other.sequence != loop.sequence
                ):
                    continue
                joined = _joined(loop, other, readers, producers, file)
                if joined is not None:
                    partner = other
                    break
        group = [loop] if partner is None else [loop, partner]
        paired |= {id(x) for x in group}
        if loop.reversed and partner is None and loop.refusal is None:
            loop.refusal = (
                "it runs backwards over its sequence with no forward loop beside it (go_backwards alone): cuDNN's "
                "RNNs have no backward-only direction"
            )
        cell = CUDNN_MODES[loop.reading.mode][0].upper() if loop.reading is not None else "RNN"
        for x in group:
            x.op.shown = f"WHILE loop ({cell} cell)"
        output = joined if joined is not None else loop.output if loop.output != UNSET else loop.op.outputs[0]
        layers.append((group, output))
    return layers


def kind_of(group: list[Loop]) -> object:
    """What the layers of one RNN have alike (None: a layer of no chain, one that does not convert)."""
    reading = group[0].reading
    if reading is None or any(loop.refusal is not None for loop in group):
        return None
    return (WHILE, len(group), reading.mode, reading.hidden, reading.reset_after)


def _joined(forward: Loop, backward: Loop, readers: dict[int, list[Any]], producers: dict[int, Any], file: Any) -> Any:
    """Where the two loops' output sequences are joined as one bidirectional layer's (a CONCATENATION on the
    features of the forward one's and the backward one's reversed back in time, either time-major or, between
    TRANSPOSEs, batch-major): the joined sequence, time-major where the file has it so; else `forward`'s own output
    (return_sequences=False joins the last steps instead, which nothing stacks on)."""
    main = file.subgraphs[0]

    def swapped(value: int) -> int | None:
        """The TRANSPOSE of `value` that swaps its steps and batch, where one reads it."""
        for op in readers.get(value, []):
            order = file.values(main.tensors[op.inputs[1]]) if op.name == "TRANSPOSE" and len(op.inputs) == 2 else None
            if order is not None and order.reshape(-1).tolist() == [1, 0, 2] and op.outputs:
                return int(op.outputs[0])
        return None

    for time in (0, 1):  # the joining done time-major, or batch-major
        ours = forward.output if time == 0 else swapped(forward.output)
        theirs = backward.output if time == 0 else swapped(backward.output)
        if ours is None or theirs is None:
            continue
        for op in readers.get(ours, []):
            if op.name != "CONCATENATION" or len(op.inputs) != 2 or op.inputs[0] != ours or not op.outputs:
                continue
            if int(_option(op.options, 0, "i32", 0)) not in (-1, 2):
                continue
            flip = producers.get(op.inputs[1])
            if flip is None or flip.name != "REVERSE_V2" or flip.inputs[0] != theirs:
                continue
            axis = file.values(main.tensors[flip.inputs[1]])
            if axis is not None and axis.size == 1 and int(axis.reshape(-1)[0]) == time:
                joined = int(op.outputs[0])
                return joined if time == 0 else swapped(joined) or joined
    return forward.output


def loop_canonical(chain: Any, source: Provenance, dequantize: bool = False) -> CanonicalRNN:
    """The canonical RNN of a chain of loop layers (Unsupported: why a loop of it does not convert); `dequantize`:
    their bodies' quantized weights read as scale * (q - zero_point)."""
    loops = [loop for layer in chain.layers for loop in layer.loops]
    for loop in loops:
        if loop.refusal is not None:
            raise Unsupported(
                f"{cut(loop.name)!r} is a WHILE loop (op {loop.op.index}) whose body looks like an RNN cell, but "
                f"{loop.refusal}; convert the checkpoint it was exported from"
            )
    held = [(tensor, quant) for loop in loops for tensor, quant in loop.quantized]
    types = sorted({tensor.dtype for tensor, _ in held})
    if held and not dequantize:
        schemes = sorted({quant.scheme() for _, quant in held})
        raise Unsupported(
            f"{chain.name}: its WHILE loops' bodies multiply by quantized weights ({len(held)} FULLY_CONNECTED "
            f"weights, {'/'.join(types)}, {', '.join(schemes)}), which cuDNN does not compute with; --dequantize "
            "converts the float model they stand for, scale * (q - zero_point)"
        )
    readings = [[loop.reading for loop in layer.loops if loop.reading is not None] for layer in chain.layers]
    first = readings[0][0]
    cell = CUDNN_MODES[first.mode][0].upper()
    article = "a" if cell == "GRU" else "an"
    error = max(r.error for layer in readings for r in layer)
    notes = [
        f"{chain.name}: WHILE loops {listing(str(loop.op.index) for loop in loops)}, each stepping {article} {cell} "
        f"cell over its sequence: its gates and layout read by what its body computes (run on probe inputs, within "
        f"{error:.1g} of the reading)"
    ]
    if held:  # LiteRT's hybrid FULLY_CONNECTED: the float model is the dequantized weights' own
        bits = max(np.dtype(kind).itemsize * 8 for kind in types)
        # inputs None: its kernel quantizes each row of a product's inputs to 8 bits
        rec = record([(tensor.name or f"tensor {tensor.index}", quant) for tensor, quant in held], bits)
        wide = exact_dtype(m for layer in readings for r in layer for gate in r.gates.values() for m in gate)
        readings = [[r.as_type(wide) for r in layer] for layer in readings]
        source = source.model_copy(
            update={"dequantized": rec, "dtype": max(types, key=lambda kind: np.dtype(kind).itemsize)}
        )
        how = "LiteRT's hybrid FULLY_CONNECTED kernel also quantizes each row of a product's inputs to 8 bits"
        notes.append(note(chain.name, rec, wide, how))
    return canonical(chain.name, readings, source, f"WHILE loop of {article} {cell} cell", notes)
