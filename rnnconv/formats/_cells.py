"""Recurrent cells written as graphs (an unrolled step, a loop's body), read by what they compute.

A graph format finds a cell's matrix products (each a constant matrix multiplying a value, and the constant added
to the product) and gives a way to run the cell's graph; which product multiplies the step's input and which the
carried state, which block of a matrix is which gate, how the matrices are stored and where a GRU applies its
reset are not read from the graph's shape but settled here: the graph is run on probe inputs, and the one reading
whose cuDNN cell computes the same new state (and, for an LSTM, cell state) is kept. The formats differ in how a
graph is parsed, not in what a cell is: each gives its ops' semantics to one walk of the graph (`run_ops`), and the
cells recognised become one canonical RNN here (`canonical`). A cell stepped by a loop (TFLite's WHILE, OpenVINO's
and ONNX's Loop) is checked here as a loop too, over the values the loop carries or gives out each step (`Slot`,
`checked_steps`), loops are settled into RNN layers on probes of the graph around them (`loop_layers`), and loop
layers are run step by step here (`run_loops`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.core.reference import ACTIVATIONS, sigmoid
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats._cell_forms import Product, added_offset, as_two
from rnnconv.table.constants import CUDNN_GATES, GRU, LSTM, RNN, Kind

TOLERANCE = 1e-5  # float32: how far the graph's value may be from the reading's, relative to the value's size
PROBE_BATCH = 3
PROBE_SEED = 20261127
PROBE_SIZE = 3  # a size a model's inputs leave open (its batch, its steps), on the probes: 3 at axis 0, 4 at 1, ...


def open_size(axis: int) -> int:
    """The probe's size at an axis a model leaves open: sizes that differ by axis, so a loop run as many times as the
    batch has entries is told from one run once a step."""
    return PROBE_SIZE + axis


MAX_READINGS = 256  # every reading of the cells recognised here is far fewer


def _none_joined(value: str) -> Sequence[str] | None:
    return None


@dataclass(frozen=True)
class CellGraph:
    """A cell as a graph format found it: its matrix products (in any of `_cell_forms`' forms), the other values it
    carries from step to step (an LSTM's cell state: candidates, the one that makes it a cell is kept), and its
    graph, run on values fed by name, giving every value it computes by name; `joined` gives the two values a value
    concatenates on its features (None where it is no concatenation), `batch` the one batch size the graph
    computes (a file's fixed batch: the probes then fed in parts of that size; None: any)."""

    name: str
    products: tuple[Product, ...]
    carried: tuple[str, ...]
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    joined: Callable[[str], Sequence[str] | None] = _none_joined
    batch: int | None = None


@dataclass(frozen=True)
class Reading:
    """What a cell computes: its cuDNN mode, each gate's W, R, bW and bR (cuDNN's gate letters), and for a GRU
    whether its reset multiplies the recurrent product with its bias (cuDNN's, `linear_before_reset=1`) or h."""

    mode: str  # lstm, gru, rnn_tanh, rnn_relu
    gates: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    reset_after: bool
    input_size: int
    hidden: int
    has_bias: bool
    error: float  # the largest difference from the graph's values on the probes
    x: str  # the value that is the step's input
    h: str  # the carried state
    c: str | None  # an LSTM's carried cell state
    outputs: tuple[str, ...]  # the values that are the new state (and an LSTM's new cell state)

    def as_type(self, dtype: str) -> Reading:
        """Its matrices and biases in one float type (a dequantized weight's products need float64 at times)."""
        gates = {
            gate: (w.astype(dtype), r.astype(dtype), bw.astype(dtype), br.astype(dtype))
            for gate, (w, r, bw, br) in self.gates.items()
        }
        return dataclasses.replace(self, gates=gates)


@dataclass(frozen=True)
class Candidate:
    mode: str
    order: tuple[str, ...]  # the gate each block of the matrices holds, in stored order
    reset_after: bool
    w: np.ndarray  # (G*H, in)
    r: np.ndarray  # (G*H, H)
    bw: np.ndarray
    br: np.ndarray
    x: str
    h: str
    c: str | None


def recognise(cell: CellGraph) -> Reading | str:
    """The reading of a cell that computes what its graph computes, or why none does (a clause: "it ..."): its
    products as cuDNN's two (`_cell_forms.as_two`), each reading of them tried on probes, then each again with the
    constants the graph adds to a gate's sum after its products (TF1's forget_bias) read from its values."""
    rng = np.random.default_rng(PROBE_SEED)
    rows = probe_rows(cell.batch)
    pairs = as_two(cell.products, cell.joined, lambda feeds: run_in_batches(cell.run, feeds, cell.batch), rng, rows)
    if isinstance(pairs, str):
        return pairs
    candidates = list(itertools.islice(_candidates(cell, pairs), MAX_READINGS))
    if not candidates:
        shapes = " and ".join(str(tuple(p.matrix.shape)) for p in (pairs[0] if pairs else cell.products))
        return f"has matrices {shapes}, which are not an LSTM's, GRU's or RNN's input and recurrent matrices"
    probes: dict[tuple[object, ...], tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | str] = {}  # by value, width
    nearest = np.inf
    for offsets in (False, True):
        for candidate in candidates:
            key = (candidate.x, candidate.h, candidate.c or "", *candidate.w.shape, *candidate.r.shape)
            if key not in probes:
                probes[key] = _probe(cell, candidate, rng, rows)
            probe = probes[key]
            if isinstance(probe, str):
                continue
            feeds, values = probe
            tried = _offset(candidate, feeds, values) if offsets else candidate
            if tried is None:
                continue
            expected = _step(tried, feeds[tried.x], feeds[tried.h], feeds.get(tried.c or ""))
            found = [_nearest(values, e) for e in expected]
            error = max(e for e, _ in found)
            nearest = min(nearest, error)
            if error <= TOLERANCE:
                return _reading(tried, error, tuple(name for _, name in found))
    modes = sorted({c.mode.split("_")[0].upper() for c in candidates})
    failed = [p for p in probes.values() if isinstance(p, str)]
    if not np.isfinite(nearest):
        return failed[0] if failed else "cannot be run on probe inputs"
    return (
        f"computes none of the {len(candidates)} {' or '.join(modes)} readings of its weights rnnconv tried (which "
        f"product is the input's, gate orders, layouts, reset placements, activations, constants added to its gates; "
        f"the nearest is off by {nearest:.2g})"
    )


def probe_rows(batch: int | None) -> int:
    """The probes' batch: PROBE_BATCH, or the multiple of a graph's one batch size nearest above it."""
    return PROBE_BATCH if batch is None else -(-PROBE_BATCH // batch) * batch


def run_in_batches(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], feeds: dict[str, np.ndarray], batch: int | None
) -> dict[str, np.ndarray]:
    """A graph run on feeds of any batch: where it computes one batch size only, run on each part of that size, the
    values every part computes with that batch joined again (the others dropped)."""
    rows = {len(v) for v in feeds.values() if v.ndim}
    if batch is None or rows <= {batch} or len(rows) != 1 or rows.pop() % batch:
        return run(feeds)
    total = len(next(iter(feeds.values())))
    parts = [run({k: v[i : i + batch] for k, v in feeds.items()}) for i in range(0, total, batch)]
    shapes = {name: value.shape for name, value in parts[0].items() if value.ndim and len(value) == batch}
    return {
        name: np.concatenate([part[name] for part in parts])
        for name, shape in shapes.items()
        if all(name in part and part[name].shape == shape for part in parts)
    }


K = TypeVar("K")
Op = TypeVar("Op")


def run_ops(
    ops: Iterable[Op],
    feeds: dict[K, np.ndarray],
    ports: Callable[[Op], tuple[Sequence[K], Sequence[K]]],
    constant: Callable[[K], np.ndarray | None],
    compute: Callable[[Op, list[np.ndarray | None]], list[np.ndarray]],
    absent: K,
) -> tuple[dict[K, np.ndarray], list[K]]:
    """A cell's graph run, for every graph format alike: every value its ops (`ports`: an op's inputs and outputs;
    `absent`: an optional input left out) compute from `feeds` and constants, without the feeds, and the values
    the ops reached would also need, which are neither. An op `compute` cannot compute on these values (one the
    probe's shapes do not fit: another reader of the cell's input) leaves its outputs uncomputed."""
    values: dict[K, np.ndarray] = dict(feeds)
    computed: dict[K, np.ndarray] = {}
    missing: list[K] = []
    for op in ops:
        inputs, outputs = ports(op)
        if not any(i in values for i in inputs if i != absent) or any(o in feeds for o in outputs):
            continue
        arguments = [None if i == absent else values[i] if i in values else constant(i) for i in inputs]
        lacking = [i for i, a in zip(inputs, arguments) if a is None and i != absent]
        if lacking:
            missing += lacking
            continue
        try:
            results = compute(op, arguments)
        except (ValueError, IndexError, TypeError, ArithmeticError):
            continue
        if len(results) != len(outputs):
            continue
        for name, result in zip(outputs, results):
            values[name] = computed[name] = np.asarray(result)
    return computed, missing


def stepped(reading: Reading, x: np.ndarray, h: np.ndarray, c: np.ndarray | None) -> list[np.ndarray]:
    """A recognised cell's new state (and cell state) from x, h (and c), in float64: cuDNN's equations."""
    order = CUDNN_GATES[_family(reading.mode)]
    w, r, bw, br = (np.concatenate([reading.gates[g][k] for g in order]) for k in range(4))
    candidate = Candidate(reading.mode, order, reading.reset_after, w, r, bw, br, reading.x, reading.h, reading.c)
    return _step(candidate, x, h, c)


def exchanged(reading: Reading) -> Reading | None:
    """The same step read with its input and state exchanged, where that computes the same (an LSTM's or RNN's
    gates sum the two products, so with as many inputs as hidden units either may be the state; a GRU's reset acts
    on one of them only): which is the state is then told by the steps around it, not by the step."""
    if reading.mode == GRU or reading.input_size != reading.hidden:
        return None
    gates = {g: (r, w, br, bw) for g, (w, r, bw, br) in reading.gates.items()}
    return dataclasses.replace(reading, gates=gates, x=reading.h, h=reading.x)


def _candidates(cell: CellGraph, pairs: list[tuple[Product, Product]]) -> Iterator[Candidate]:
    for inputs, recurrent in (way for pair in pairs for way in (pair, pair[::-1])):
        if inputs.value == recurrent.value:
            continue
        for r, hidden, gates in _oriented(recurrent.matrix, None):
            modes = [LSTM] if gates == 4 and cell.carried else [GRU] if gates == 3 else []
            modes += ["rnn_tanh", "rnn_relu"] if gates == 1 else []
            for w, _, _ in _oriented(inputs.matrix, gates * hidden):
                bw = _bias(inputs.bias, gates * hidden)
                br = _bias(recurrent.bias, gates * hidden)
                if bw is None or br is None:
                    continue
                for mode in modes:
                    placements = (True, False) if mode == GRU else (True,)
                    values = (inputs.value, recurrent.value)
                    states: tuple[str | None, ...] = (
                        tuple(c for c in cell.carried if c not in values) if mode == LSTM else (None,)
                    )
                    for order, reset_after, c in itertools.product(
                        itertools.permutations(CUDNN_GATES[_family(mode)]), placements, states
                    ):
                        yield Candidate(mode, order, reset_after, w, r, bw, br, inputs.value, recurrent.value, c)


def _oriented(matrix: np.ndarray, rows: int | None) -> Iterator[tuple[np.ndarray, int, int]]:
    """The matrix as (G*H, columns), as stored and transposed (a square one is read both ways); with `rows`
    unknown, as a recurrent matrix (G*H, H) of G = 1, 3 or 4 gates, with H and G."""
    if matrix.ndim != 2 or not matrix.size:
        return
    for oriented in (matrix, matrix.T):
        total, columns = oriented.shape
        if rows is None and total % columns == 0 and total // columns in (1, 3, 4):
            yield oriented, columns, total // columns
        elif rows is not None and total == rows:
            yield oriented, 0, 0


def _bias(bias: np.ndarray | None, size: int) -> np.ndarray | None:
    if bias is None:
        return np.zeros(size, np.float32)
    flat = bias.reshape(-1) if bias.size == size else None
    return None if flat is None else flat


def _probe(
    cell: CellGraph, candidate: Candidate, rng: np.random.Generator, rows: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | str:
    hidden = candidate.r.shape[1]
    feeds = {
        candidate.x: rng.standard_normal((rows, candidate.w.shape[1])).astype(np.float32),
        candidate.h: rng.standard_normal((rows, hidden)).astype(np.float32),
    }
    if candidate.c is not None:
        feeds[candidate.c] = rng.standard_normal((rows, hidden)).astype(np.float32)
    try:
        values = run_in_batches(cell.run, feeds, cell.batch)
    except (ValueError, IndexError, TypeError, ArithmeticError) as exc:
        return f"does not run on probe inputs ({type(exc).__name__})"
    return feeds, {name: np.asarray(v) for name, v in values.items()}


def _step(candidate: Candidate, x: np.ndarray, h: np.ndarray, c: np.ndarray | None) -> list[np.ndarray]:
    """The candidate's new state (and cell state), in float64: cuDNN's equations with the candidate's blocks."""
    hidden = candidate.r.shape[1]
    x64, h64 = x.astype(np.float64), h.astype(np.float64)
    gx = x64 @ candidate.w.T.astype(np.float64) + candidate.bw
    gh = h64 @ candidate.r.T.astype(np.float64) + candidate.br
    xs = dict(zip(candidate.order, np.split(gx, len(candidate.order), axis=-1)))
    hs = dict(zip(candidate.order, np.split(gh, len(candidate.order), axis=-1)))
    if candidate.mode == LSTM:
        assert c is not None
        g = {k: xs[k] + hs[k] for k in xs}
        new_c = sigmoid(g["f"]) * c.astype(np.float64) + sigmoid(g["i"]) * np.tanh(g["c"])
        return [sigmoid(g["o"]) * np.tanh(new_c), new_c]
    if candidate.mode == GRU:
        reset = sigmoid(xs["r"] + hs["r"])
        update = sigmoid(xs["z"] + hs["z"])
        if candidate.reset_after:
            recurrent = reset * hs["h"]
        else:  # reset applied to h before its product with the candidate's block of R
            block = candidate.order.index("h")
            rows = slice(block * hidden, (block + 1) * hidden)
            recurrent = (reset * h64) @ candidate.r[rows].T.astype(np.float64) + candidate.br[rows]
        new = np.tanh(xs["h"] + recurrent)
        return [(1.0 - update) * new + update * h64]
    return [ACTIVATIONS[candidate.mode](gx + gh)]


GATE_ACTIVATIONS = {  # the gates whose activation reads the sum of their two products (as `_step`), and that activation
    LSTM: {gate: "tanh" if gate == "c" else "sigmoid" for gate in CUDNN_GATES[LSTM]},
    GRU: {gate: "sigmoid" for gate in CUDNN_GATES[GRU] if gate != "h"},
    "rnn_tanh": dict.fromkeys(CUDNN_GATES[RNN], "tanh"),
}


def _offset(candidate: Candidate, feeds: dict[str, np.ndarray], values: dict[str, np.ndarray]) -> Candidate | None:
    """The candidate with the constants the graph adds to its gates' sums before their activations (read from the
    values the activations give) added to its input biases; None where the graph adds none."""
    gates = GATE_ACTIVATIONS.get(candidate.mode, {})
    gx = feeds[candidate.x].astype(np.float64) @ candidate.w.T.astype(np.float64) + candidate.bw
    gh = feeds[candidate.h].astype(np.float64) @ candidate.r.T.astype(np.float64) + candidate.br
    count = len(candidate.order)
    bw = candidate.bw.astype(np.float64)
    hidden = bw.size // count
    for block, gate in enumerate(candidate.order):
        if gate in gates:
            rows = slice(block * hidden, (block + 1) * hidden)
            offset = added_offset(gx[:, rows] + gh[:, rows], gates[gate], values)
            if offset is not None:
                bw[rows] += offset
    if np.array_equal(bw, candidate.bw):
        return None
    return dataclasses.replace(candidate, bw=bw.astype(candidate.bw.dtype))


def _nearest(values: dict[str, np.ndarray], expected: np.ndarray) -> tuple[float, str]:
    """The graph's value nearest to `expected`, and how far it is from it, relative to its size."""
    scale = max(1.0, float(np.max(np.abs(expected))))
    errors = [
        (float(np.max(np.abs(v.astype(np.float64) - expected))) / scale, name)
        for name, v in values.items()
        if v.shape == expected.shape and v.dtype.kind == "f"
    ]
    return min(errors, default=(np.inf, ""))


def _reading(candidate: Candidate, error: float, outputs: tuple[str, ...]) -> Reading:
    count = len(candidate.order)
    w, r, bw, br = (np.split(m, count, axis=0) for m in (candidate.w, candidate.r, candidate.bw, candidate.br))
    stored = {gate: (w[i], r[i], bw[i], br[i]) for i, gate in enumerate(candidate.order)}
    return Reading(
        candidate.mode,
        {gate: stored[gate] for gate in CUDNN_GATES[_family(candidate.mode)]},
        candidate.reset_after,
        int(candidate.w.shape[1]),
        int(candidate.r.shape[1]),
        bool(np.any(candidate.bw) or np.any(candidate.br)),
        error,
        candidate.x,
        candidate.h,
        candidate.c,
        outputs,
    )


def _family(mode: str) -> str:
    return RNN if mode.startswith(RNN) else mode


def canonical(
    name: str, layers: list[list[Reading]], source: Provenance, layer_class: str, notes: list[str]
) -> CanonicalRNN:
    """The canonical RNN of recognised cells: per layer, its directions (forward first), each layer reading the
    one below's outputs (a GRU's reset placement held as the spec's reset_after); BadInput where they are no one
    RNN."""
    first = layers[0][0]
    for layer, directions in enumerate(layers):
        for reading in directions:
            alike = (reading.mode, reading.hidden, reading.reset_after) == (first.mode, first.hidden, first.reset_after)
            expected = first.input_size if layer == 0 else len(layers[0]) * first.hidden
            if not alike or reading.input_size != expected or len(directions) != len(layers[0]):
                raise BadInput(f"{name}: its cells are not the layers and directions of one RNN")
    dtypes = {str(m.dtype) for d in layers for r in d for gate in r.gates.values() for m in gate}
    if len(dtypes) > 1:
        raise Unsupported(f"{name}: its weights are of several types ({', '.join(sorted(dtypes))})")
    spec = RNNSpec(
        first.mode,
        first.input_size,
        first.hidden,
        len(layers),
        len(layers[0]) == 2,
        0,
        dtypes.pop(),
        any(r.has_bias for d in layers for r in d),
        first.reset_after,
    )
    arrays = {}
    for key in spec.param_keys():
        w, r, bw, br = layers[key.layer][key.direction].gates[key.gate]
        arrays[key] = {Kind.W: w, Kind.R: r, Kind.bW: bw, Kind.bR: br}[key.kind]
    info = source.model_copy(update={"layer": name, "layer_class": layer_class})
    return CanonicalRNN.from_arrays(name, spec, arrays, source=info, notes=notes)


class SteppedLoop(Protocol):
    """A loop read as one direction of an RNN layer: its cell's reading, whether it steps its sequence backwards,
    the one batch size its body computes (None: any), and its body's cell ops run on values fed by name, giving
    every value they compute by name."""

    reading: Reading | None
    reversed: bool
    batch: int | None

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def run_loops(
    layers: Sequence[Sequence[SteppedLoop]], spec: RNNSpec, inputs: dict[str, np.ndarray | None], what: str
) -> dict[str, np.ndarray | None]:
    """Loop layers (each its directions, forward first) run step by step, each step a body's own cell ops: y, h_n,
    c_n sequence-major as cuDNN's; `what` names the loops in a sentence ("a TFLite WHILE loop")."""
    x = np.asarray(inputs["x"], np.float32)
    if inputs.get("lengths") is not None and np.any(np.asarray(inputs["lengths"]) != x.shape[0]):
        raise Unsupported(f"{what} runs every sequence all its steps: verify it without --ragged")
    lstm = spec.mode == LSTM
    finals: dict[str, list[np.ndarray]] = {"h0": [], "c0": []}
    for layer in layers:
        outputs = []
        for loop in layer:
            reading = loop.reading
            if reading is None:
                raise Unsupported(f"{what} of no cell rnnconv reads cannot be run")
            index = len(finals["h0"])
            h = _initial(inputs.get("h0"), index, x.shape[1], reading.hidden)
            c = _initial(inputs.get("c0"), index, x.shape[1], reading.hidden) if lstm else None
            sequence = x[::-1] if loop.reversed else x
            steps = []
            for t in range(x.shape[0]):
                feeds = {reading.x: sequence[t], reading.h: h}
                if c is not None and reading.c is not None:
                    feeds[reading.c] = c
                computed = run_in_batches(loop.step, feeds, loop.batch)
                h = computed[reading.outputs[0]]
                if c is not None:
                    c = computed[reading.outputs[1]]
                steps.append(h)
            y = np.stack(steps)
            outputs.append(y[::-1] if loop.reversed else y)
            finals["h0"].append(h)
            finals["c0"].append(c if c is not None else h)
        x = np.concatenate(outputs, axis=-1)
    return {"y": x, "h_n": np.stack(finals["h0"]), "c_n": np.stack(finals["c0"]) if lstm else None}


def _initial(given: np.ndarray | None, index: int, batch: int, hidden: int) -> np.ndarray:
    if given is None:
        return np.zeros((batch, hidden), np.float32)
    return np.asarray(given, np.float32)[index]


GIVEN_OUT = ""  # a Slot's input for a value its body gives out each step rather than carries


@dataclass(frozen=True)
class Slot:
    """A value a loop carries from step to step, for every loop format alike: its body's input and output for it
    (output None: a value passed to every step unchanged; input GIVEN_OUT: a value the body gives out each step,
    which the loop concatenates over the steps, as ONNX's scan outputs and OpenVINO's concatenating port maps),
    its type, and the value the loop starts it from (None: not known, probed) with its shape at the step checked.
    `part`: the loop slices it over the steps on axis 0 a step at a time, the axis kept (OpenVINO's port maps): an
    input the body is given start[step:step + 1] of (start in the order of the steps), an output it gives out
    value[None] of."""

    given: str
    result: str | None
    dtype: str
    start: np.ndarray | None
    shape: tuple[int, ...]
    part: bool = False


def checked_steps(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    slots: Sequence[Slot],
    reading: Reading,
    steps: int,
) -> int | str:
    """The slot a loop's body writes each step's new state into (at the step of the sequence it carries, or the one
    step Keras keeps, or as the value it gives out each step), the body run whole at its first and last steps with
    every other value it carries checked: counters (from 0) moved on by one, the rest passed on unchanged; else why
    not (a clause)."""
    written = None
    for step in sorted({0, steps - 1}):
        found = _step_written(run, slots, reading, step, steps)
        if isinstance(found, str):
            return found
        if written is not None and found[0] != written:
            return "its body writes each step's new state in another place"
        written, shapes = found
        slots = [dataclasses.replace(slot, shape=shape) for slot, shape in zip(slots, shapes)]
    return "its body writes no output sequence" if written is None else written


def _step_written(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    slots: Sequence[Slot],
    reading: Reading,
    step: int,
    steps: int,
) -> tuple[int, list[tuple[int, ...]]] | str:
    rng = np.random.default_rng(PROBE_SEED + step)
    states = {reading.h, reading.c}
    feeds: dict[str, np.ndarray] = {}
    for place, slot in enumerate(slots):
        kind = np.dtype(slot.dtype).kind
        if slot.given == GIVEN_OUT:
            continue
        if slot.part:
            if slot.start is None or not 0 <= step < len(slot.start):
                return f"it slices its input {place} into fewer parts than it runs steps"
            feeds[slot.given] = slot.start[step : step + 1]
            continue
        if kind in "iu" and slot.shape == () and slot.result is not None:
            if slot.start is None or int(slot.start) != 0:
                return f"its integer {place} does not start from 0, as a counter of the steps does"
            feeds[slot.given] = np.asarray(step, slot.dtype)
        elif kind == "f" and (slot.given in states or slot.start is None or (step and slot.result is not None)):
            feeds[slot.given] = rng.standard_normal(slot.shape).astype(np.float32)
        elif slot.start is not None:
            feeds[slot.given] = slot.start
        else:
            return f"it carries a value of type {slot.dtype}, shape {list(slot.shape)}, that a cell's loop does not"
    values = {**feeds, **run(feeds)}
    new_state = values.get(reading.outputs[0])
    written, shapes = None, []
    for place, slot in enumerate(slots):
        before = feeds.get(slot.given)
        after = before if slot.result is None else values.get(slot.result)
        if after is None:
            return f"its body's output {place} is not computed from its inputs alike (or by ops rnnconv evaluates)"
        shapes.append(tuple(after.shape))
        if slot.given == GIVEN_OUT:
            state = None if new_state is None else new_state[None] if slot.part else new_state
            if state is None or written is not None or not _same(after, state):
                return f"its body gives out value {place} each step, which is not the step's new state"
            written = place
            continue
        assert before is not None
        if slot.part:
            if not _same(values.get(reading.x), before[0]):
                return "its body's cell does not read its input as the step's part of the sequence it slices"
            continue
        if slot.result is None or slot.given in states:
            continue
        if before.dtype.kind in "iu" and before.shape == ():
            if after.shape != () or int(after) != step + 1:
                return f"its body's integer {place} is not a counter moving on by one each step"
            continue
        if after.shape == before.shape and np.array_equal(after, before):
            continue
        expected = None
        if new_state is not None and after.shape in ((steps, *new_state.shape), (1, *new_state.shape)):
            with contextlib.suppress(ValueError):
                expected = np.broadcast_to(before, after.shape).copy()
                expected[step if after.shape[0] == steps else 0] = new_state  # every step's, or the last one's
        if expected is None or written is not None or not np.array_equal(after, expected):
            return f"its body changes carried value {place} otherwise than writing the step's new state in it"
        written = place
    if written is None:
        return "its body writes no output sequence"
    return written, shapes


# What a loop format's evaluator of a body's ops shares.
class NotEvaluated(ValueError):
    """An op the evaluator does not compute, or computes only for other inputs."""


def axis_of(axis: int, rank: int) -> int:
    """An op's axis, counted from the end where negative, of a value of that rank."""
    if not -rank <= axis < rank:
        raise NotEvaluated(f"axis {axis} of a rank-{rank} value")
    return axis % rank


# Loops as RNN layers, settled on probes of the graph around them.
class ProbedLoop(Protocol):
    """A loop read as one direction of an RNN layer (`reading` None or `refusal` set: not one)."""

    reading: Reading | None
    refusal: str | None
    reversed: bool


L = TypeVar("L", bound=ProbedLoop)
L_contra = TypeVar("L_contra", bound=ProbedLoop, contravariant=True)


class ProbedGraph(Protocol[L_contra]):
    """A loop format's graph run in numpy on probes of the model's inputs: `read` feeds a read loop's output sequence
    (time-major) a probe of its own and runs the graph again (None: a loop not read), `values` is every value the
    graph then computes, `sequence` the sequence a loop steps over among them."""

    values: dict[str, np.ndarray]

    def inputs(self) -> list[np.ndarray]: ...

    def read(self, loop: L_contra) -> np.ndarray | None: ...

    def sequence(self, loop: L_contra, values: dict[str, np.ndarray]) -> np.ndarray | None: ...


@dataclass
class LoopLayer(Generic[L]):
    """The loops that are one RNN layer (forward first) and the layer whose output sequence it reads (None: the
    model's input)."""

    loops: list[L]
    below: LoopLayer[L] | None = None


def loop_layers(graph: ProbedGraph[L], loops: Sequence[L]) -> list[LoopLayer[L]]:
    """The loops (in the graph's order) as RNN layers, settled by what the graph around them computes on probe
    inputs: each loop's sequence is the model's input (time- or batch-major) or a layer's output sequence, as it is
    or reversed in time (a backward direction); a forward and a backward loop over the same sequence whose output
    sequences the graph joins on the features (the backward one's reversed back) are one bidirectional layer."""
    outputs = {id(loop): probe for loop in loops if (probe := graph.read(loop)) is not None}
    sources: list[tuple[np.ndarray, LoopLayer[L] | None]] = []  # time-major sequences a layer may read
    for probe in graph.inputs():
        sources += [(probe.swapaxes(0, 1), None), (probe, None)]
    values = graph.values
    result: list[LoopLayer[L]] = []
    for loop in loops:
        if loop.reading is None or loop.refusal is not None:
            result.append(LoopLayer([loop]))
            continue
        given = graph.sequence(loop, values)
        found = [(s, way) for s in sources for way in (False, True) if _same(given, s[0][::-1] if way else s[0])]
        if not found:
            loop.refusal = (
                "its sequence is not the model's input or another RNN layer's output sequence moved as cuDNN feeds "
                "it (by ops rnnconv evaluates)"
            )
            result.append(LoopLayer([loop]))
            continue
        (_, below), loop.reversed = found[0]
        partner = next(
            (
                layer
                for layer in result
                if len(layer.loops) == 1
                and layer.below is below
                and layer.loops[0].reversed != loop.reversed
                and id(layer.loops[0]) in outputs
                and layer.loops[0].refusal is None
                and _joined(layer.loops[0], loop, outputs, values) is not None
            ),
            None,
        )
        if partner is not None:
            partner.loops = sorted([partner.loops[0], loop], key=lambda x: x.reversed)
            joined = _joined(partner.loops[0], partner.loops[1], outputs, values)
            assert joined is not None
            sources = [(joined, partner) if owner is partner else (s, owner) for s, owner in sources]
            continue
        alone = LoopLayer([loop], below)
        result.append(alone)
        y = outputs[id(loop)]
        sources.append((y[::-1] if loop.reversed else y, alone))
    for held in result:
        loop = held.loops[0]
        if len(held.loops) == 1 and loop.reversed and loop.refusal is None:
            loop.refusal = (
                "it runs backwards over its sequence with no forward loop beside it (go_backwards alone): cuDNN's "
                "RNNs have no backward-only direction"
            )
    return result


def _joined(
    forward: ProbedLoop, backward: ProbedLoop, outputs: dict[int, np.ndarray], values: dict[str, np.ndarray]
) -> np.ndarray | None:
    """The two loops' output sequences joined on the features (forward first, each in time order) where the graph
    computes that, time-major (or, where each keeps its last step alone, its step axis dropped); else None."""
    if forward.reversed:
        forward, backward = backward, forward
    y_f, y_b = outputs[id(forward)], outputs[id(backward)]
    if y_f.shape != y_b.shape:
        return None
    joined = np.concatenate([y_f, y_b[::-1] if backward.reversed else y_b], axis=-1)
    forms = [joined, joined.swapaxes(0, 1)] + ([joined[0]] if len(joined) == 1 else [])
    if any(_same(value, form) for value in values.values() for form in forms):
        return joined
    return None


def _same(value: np.ndarray | None, expected: np.ndarray) -> bool:
    return value is not None and value.shape == expected.shape and np.array_equal(value, expected)
