"""RNNs OpenVINO's TensorFlow frontend writes as `Loop` ops (`ov.convert_model(keras_model)`), read by what their
bodies compute.

The frontend writes each Keras layer as a `Loop` over the time-major sequence whose body reads step t of it
(`Gather` by a counter the body carries), computes the cell from two `MatMul`s of constant matrices (the step's
input and the carried state) and writes the new state at t of an output sequence (`ScatterUpdate`), its inputs and
outputs wired to the Loop's through `port_map`, the values it carries through `back_edges`. Here a body's two
products are found, its ops evaluated in numpy (the ops such a body holds, checked shapes, nothing run from the file
but that) and the cell read by `_cells.recognise`; the loop then carries the cell's new state back into its state,
reads its input by its counter from a sequence it does not change, starts its state from zeros and writes each
step's new state into the sequence it gives out.
"""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats._cell_forms import reset_before_joined, sizes_of
from rnnconv.formats._cells import (
    GIVEN_OUT,
    PROBE_SEED,
    CellGraph,
    Product,
    Reading,
    Slot,
    canonical,
    checked_steps,
    exchanged,
    open_size,
    recognise,
)
from rnnconv.formats._quantized import Quantization, exact_dtype, note, record
from rnnconv.formats.openvino.evaluation import ABSENT, MAX_EVALUATED, MAX_RUN, Body, BodyLayer, Evaluator, Part, flag
from rnnconv.formats.openvino.wire import (
    OPENVINO_KERNEL_INPUTS,
    OPENVINO_QUANTIZED,
    OPENVINO_ROUNDING,
    QUANTIZED_STORAGE,
)
from rnnconv.table.constants import CUDNN_MODES

LOOP_OPS = ("Loop", "TensorIterator")
MAX_BODY_LAYERS = 4096  # layers of one body: a cell's are a few dozen
MAX_LOOPS = 1024  # Loops of one IR: far beyond any model; keeps reading a hostile file's loops bounded
MAX_CARRIED = 4  # a body's parameters tried as an LSTM's cell state
MAX_STEPS = 4096  # steps of a loop whose condition is checked step by step


@dataclass
class Loop:
    """One Loop of an IR read as one direction of an RNN layer, or why it is not one."""

    layer: Any  # the IR's Loop layer
    name: str
    body: Body
    evaluator: Evaluator
    reading: Reading | None = None
    refusal: str | None = None
    sizes: tuple[int, int] = (0, 0)  # (input, hidden), where its matrices say them
    sequence: str = ""  # the Loop's input port of the time-major sequence it steps over
    reversed: bool = False  # it steps over its layer's input sequence backwards
    output_shape: tuple[int, ...] = ()  # (steps, batch, hidden) on the probes; steps 1: the last step's alone
    output: str = ""  # its output port of the sequence of its new states (or of the last one)
    sequence_reversed: bool = False  # its port map slices the sequence from its last step
    output_reversed: bool = False  # its port map concatenates its new states from the last place
    batch: int | None = None  # its body computes any batch
    quantized: list[tuple[str, Quantization, Any]] = dataclasses.field(default_factory=list)  # name, scheme, weight
    types: set[str] = dataclasses.field(default_factory=set)  # the dtypes its weights' and biases' Consts store

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        computed, _ = self.evaluator.run(feeds)
        return computed


def parse_graph(container: ET.Element, where: str, most: int) -> tuple[dict[str, BodyLayer], list[BodyLayer]]:
    """The layers of a graph (an IR's, a body's), each input by the value that feeds it, and its computing layers
    each after those it reads."""
    elements = container.findall("layers/layer")
    if len(elements) > most:
        raise BadInput(f"{where} has {len(elements)} layers, more than rnnconv reads in one graph ({most})")
    feeding: dict[tuple[str, str], str] = {}
    for edge in container.iterfind("edges/edge"):
        ends = [edge.get(k) for k in ("from-layer", "from-port", "to-layer", "to-port")]
        if any(e is None for e in ends):
            raise BadInput(f"{where}: an edge names no layer or port")
        feeding[(str(ends[2]), str(ends[3]))] = f"{ends[0]}:{ends[1]}"
    layers: dict[str, BodyLayer] = {}
    for e in elements:
        ident, kind = e.get("id"), e.get("type")
        if ident is None or kind is None or ident in layers:
            raise BadInput(f"{where}: a layer has no id or type, or another's id")
        data = e.find("data")
        ports = [p.get("id", "") for p in e.iterfind("input/port")]
        outputs = [f"{ident}:{p.get('id', '')}" for p in e.iterfind("output/port")]
        inputs = [feeding.get((ident, p), ABSENT) for p in ports]
        layers[ident] = BodyLayer(
            ident, kind, e.get("name", ident), dict(data.attrib) if data is not None else {}, inputs, outputs, ports
        )
    produced = {value: layer for layer in layers.values() for value in layer.outputs}
    if any(v != ABSENT and v not in produced for layer in layers.values() for v in layer.inputs):
        raise BadInput(f"{where}: an edge comes from a port no layer has")
    return layers, _ordered(layers, produced, where)


def parse_body(element: ET.Element, where: str) -> Body:
    """The body of a Loop element: its layers (each input by the value that feeds it), port map and back edges."""
    found = element.find("body")
    if found is None:
        raise BadInput(f"{where} has no body")
    layers, order = parse_graph(found, f"{where}: its body", MAX_BODY_LAYERS)

    def value_of(internal: str | None, kind: str) -> str:
        layer = layers.get(internal or "")
        if layer is None or layer.kind != kind:
            raise BadInput(f"{where}: its port map names {internal!r}, which is no {kind} of its body")
        if kind == "Parameter":
            return layer.outputs[0] if layer.outputs else ABSENT
        return layer.inputs[0] if layer.inputs else ABSENT

    given: dict[int, str] = {}
    given_out: dict[int, str] = {}
    parts: dict[str, dict[int, Part]] = {"input": {}, "output": {}}
    condition = None
    for entry in element.iterfind("port_map/*"):
        if entry.tag not in parts:
            continue
        kind = "Parameter" if entry.tag == "input" else "Result"
        value = value_of(entry.get("internal_layer_id"), kind)
        if entry.get("purpose") == "execution_condition" and entry.tag == "output":
            condition = value
            continue
        port = _port(entry.get("external_port_id"), where)
        (given if entry.tag == "input" else given_out)[port] = value
        if "axis" in entry.attrib:
            parts[entry.tag][port] = _part(entry, where)
    back = {}
    for edge in element.iterfind("back_edges/edge"):
        back[value_of(edge.get("to-layer"), "Parameter")] = value_of(edge.get("from-layer"), "Result")
    return Body(layers, order, given, given_out, condition, back, parts["input"], parts["output"])


def _part(entry: ET.Element, where: str) -> Part:
    """A port map entry's slicing (each attribute an integer; start 0, end -1, stride and part_size 1 unless said)."""
    defaults = {"axis": "0", "start": "0", "end": "-1", "stride": "1", "part_size": "1"}
    texts = {key: entry.get(key, default).strip() for key, default in defaults.items()}
    if not all(t.lstrip("-").isdigit() and len(t) < 10 for t in texts.values()):
        raise BadInput(f"{where}: its port map slices a port by {texts}, not by integers")
    return Part(**{key: int(t) for key, t in texts.items()})


def _port(text: str | None, where: str) -> int:
    if text is None or not text.lstrip("-").isdigit() or len(text) > 9:
        raise BadInput(f"{where}: its port map names the port {text!r}, not a port number")
    return int(text)


def _ordered(layers: dict[str, BodyLayer], produced: dict[str, BodyLayer], where: str) -> list[BodyLayer]:
    """The graph's computing layers, each after those it reads (BadInput where they read each other round)."""
    waiting = {layer.id: {produced[v].id for v in layer.inputs if v != ABSENT} for layer in layers.values()}
    readers: dict[str, list[str]] = {}
    for ident, needs in waiting.items():
        for need in needs:
            readers.setdefault(need, []).append(ident)
    ready = [ident for ident, needs in waiting.items() if not needs]
    order = []
    while ready:
        ident = ready.pop()
        order.append(ident)
        for reader in readers.get(ident, []):
            waiting[reader].discard(ident)
            if not waiting[reader]:
                ready.append(reader)
    if len(order) != len(layers):
        raise BadInput(f"{where}: its layers read each other in a cycle")
    return [layers[i] for i in order if layers[i].kind not in ("Parameter", "Const", "Result")]


# --- reading a Loop


class MainGraph:
    """An IR's own graph, run in numpy on probes of the model's inputs (a size no input fixes: `_probe_shape`):
    what each Loop is given, and what the graph makes of the Loops' output sequences."""

    def __init__(self, ir: Any, root: ET.Element, most: int):
        self.layers, order = parse_graph(root, str(ir.path), most)
        self.evaluator = Evaluator(ir, Body(self.layers, order, {}, {}, None, {}), [MAX_RUN])  # all its runs
        self.order = {layer.id: index for index, layer in enumerate(order)}
        rng = np.random.default_rng(PROBE_SEED)
        self.feeds: dict[str, np.ndarray] = {}
        for layer in self.layers.values():
            shape = _probe_shape(layer.data.get("shape"))
            if layer.kind == "Parameter" and layer.data.get("element_type") == "f32" and shape and layer.outputs:
                self.feeds[layer.outputs[0]] = rng.standard_normal(shape).astype(np.float32)
        self.values = self.run({})

    def read(self, loop: Loop) -> np.ndarray | None:
        """The probe fed as a read loop's output sequence (the graph run again with it), or None for a loop not read."""
        if loop.reading is None or loop.refusal is not None:
            return None
        value = f"{loop.layer.id}:{loop.output}"
        if value not in self.feeds:
            rng = np.random.default_rng(PROBE_SEED + len(self.feeds))
            self.feeds[value] = rng.standard_normal(loop.output_shape).astype(np.float32)
            self.values = self.run({})
        return self.feeds[value][::-1] if loop.output_reversed else self.feeds[value]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        computed, _ = self.evaluator.run({**self.feeds, **feeds})
        return {**self.feeds, **feeds, **computed}

    def inputs(self) -> list[np.ndarray]:
        """The probes fed as the model's 3-D inputs (sequences a first layer may read)."""
        return [
            probe
            for value, probe in self.feeds.items()
            if probe.ndim == 3 and self.layers[value.split(":")[0]].kind == "Parameter"
        ]

    def sequence(self, loop: Loop, values: dict[str, np.ndarray]) -> np.ndarray | None:
        """The sequence a read loop steps over, as the graph computes it from `values`."""
        given = self.given(loop.layer, loop.sequence, values)
        return given[::-1] if given is not None and loop.sequence_reversed else given

    def place(self, layer: Any) -> int:
        """Where a layer comes in the graph's order (each after those it reads)."""
        return self.order.get(layer.id, -1)

    def given(self, layer: Any, port: str, values: dict[str, np.ndarray] | None = None) -> np.ndarray | None:
        """The value the graph feeds to input `port` of a layer (a Const's, or one computed from the probes)."""
        main = self.layers.get(layer.id)
        if main is None or port not in main.ports:
            return None
        value = main.inputs[main.ports.index(port)]
        found = (self.values if values is None else values).get(value)
        return found if found is not None else self.evaluator.constant(value)


def _probe_shape(text: str | None) -> tuple[int, ...] | None:
    """A Parameter's shape, each size it leaves open ("?", "-1") taken as `open_size` of its axis; None where it is
    no shape."""
    parts = [p.strip() for p in (text or "").split(",")]
    if not text or len(parts) > 8:
        return None
    sizes = [
        open_size(axis) if p in ("?", "-1") else int(p) if p.isdigit() and len(p) < 10 else -1
        for axis, p in enumerate(parts)
    ]
    return None if -1 in sizes or math.prod(sizes) > MAX_EVALUATED else tuple(sizes)


def read_loop(ir: Any, layer: Any, graph: MainGraph) -> Loop | None:
    """A Loop layer read as one direction of an RNN layer (refused with the reason where its body computes a cell
    the loop does not step as an RNN does); None where its body multiplies by no constant matrix."""
    where = f"{layer.kind} {cut(layer.name)!r}"
    if len(layer.element.findall("body/layers/layer")) > MAX_BODY_LAYERS:
        return None  # far more than a cell's: some other loop
    body = parse_body(layer.element, where)
    evaluator = Evaluator(ir, body)
    try:
        products, types = _products(evaluator)
    except Unsupported as exc:  # a quantized weight in a form rnnconv does not read
        return Loop(layer, layer.name, body, evaluator, refusal=str(exc))
    except BadInput as exc:  # a damaged one: said with the loop it is in
        raise BadInput(f"{where}: {exc}") from None
    if not products:
        return None
    rounded = [op for op in body.order if op.kind == OPENVINO_ROUNDING]
    if rounded:  # nncf.quantize's roundings of the cell's values (its products, gates, states), as the fixture's
        return Loop(
            layer,
            layer.name,
            body,
            evaluator,
            refusal=f"its body rounds its values by {len(rounded)} {OPENVINO_ROUNDING} layers (nncf.quantize's "
            "roundings of the cell's activations), which cuDNN does not compute and rnnconv does not read in a loop's "
            "body",
        )
    loop = Loop(layer, layer.name, body, evaluator, types=types)
    loop.quantized = [
        (f"{cut(layer.name)}/{body.layers[value.split(':')[0]].name}", quant, stored)
        for value, (stored, quant) in evaluator.quantized.items()
    ]
    products = reset_before_joined(products)
    _, inputs, hidden = sizes_of(products)
    loop.sizes = (inputs, hidden)
    carried = tuple(_carried(evaluator, products))
    reading = recognise(
        CellGraph(loop.name, tuple(products), carried, loop.step, lambda value: _joined_values(body, value))
    )
    if isinstance(reading, str):
        loop.refusal = f"its body's cell {reading}"
        return loop
    refusals = []
    for way in [reading] + [r for r in (exchanged(reading),) if r is not None]:
        found = _stepped(evaluator, layer, way, graph)
        if isinstance(found, str):
            refusals.append(found)
            continue
        loop.reading, (loop.sequence, loop.output, loop.output_shape, *reversals) = way, found
        loop.sequence_reversed, loop.output_reversed = reversals
        break
    else:
        loop.refusal = refusals[0]
    loop.sizes = (reading.input_size, reading.hidden)
    return loop


def _products(evaluator: Evaluator) -> tuple[list[Product], set[str]]:
    """The body's MatMuls of a computed value by a constant float matrix, each with the constant added to it (or,
    for the first, to its sum with the other), and the dtypes their float Consts store them in (none for a
    quantized weight's)."""
    body = evaluator.body
    readers: dict[str, list[BodyLayer]] = {}
    for layer in body.order:
        for value in set(layer.inputs):
            readers.setdefault(value, []).append(layer)
    found = []
    for layer in body.order:
        if layer.kind != "MatMul" or len(layer.inputs) != 2 or flag(layer.data, "transpose_a"):
            continue
        value, weights = layer.inputs
        matrix = evaluator.constant(weights)
        if matrix is None:  # a quantized weight: integers decompressed by the ops nncf writes
            matrix = evaluator.decompressed(weights)
        if matrix is None or matrix.dtype.kind != "f" or matrix.ndim != 2 or evaluator.constant(value) is not None:
            continue
        found.append((layer, matrix if flag(layer.data, "transpose_b") else matrix.T))
    outputs = {layer.outputs[0] for layer, _ in found if layer.outputs}
    products, stored = [], []
    for index, (layer, matrix) in enumerate(found):
        added = _added(evaluator, layer.outputs[0], readers, outputs, index) if layer.outputs else None
        name = body.layers[layer.inputs[1].split(":")[0]].name
        products.append(Product(layer.inputs[0], matrix, None if added is None else evaluator.constant(added), name))
        stored += [layer.inputs[1], *([added] if added else [])]
    return products, {evaluator.types[value] for value in stored if value in evaluator.types}


def _added(
    evaluator: Evaluator, value: str, readers: dict[str, list[BodyLayer]], products: set[str], index: int
) -> str | None:
    """The float constant added to a product's value (for the first product, to its sum with the other), or None."""
    for _ in range(2 if index == 0 else 1):
        adds = [op for op in readers.get(value, []) if op.kind == "Add" and len(op.inputs) == 2 and op.outputs]
        if len(adds) != 1:
            return None
        (other,) = [v for v in adds[0].inputs if v != value] or [value]
        constant = evaluator.constant(other)
        if constant is not None:
            return other if constant.dtype.kind == "f" else None
        if other not in products:
            return None
        value = adds[0].outputs[0]
    return None


def _joined_values(body: Body, value: str) -> tuple[str, str] | None:
    """The two values a Concat on the last axis joins into `value` (TF1's [x, h]), or None."""
    layer = _producer(body, value)
    if layer is None or layer.kind != "Concat" or len(layer.inputs) != 2:
        return None
    axis = layer.data.get("axis", "").strip()
    return (layer.inputs[0], layer.inputs[1]) if axis in ("-1", "1") else None


def _carried(evaluator: Evaluator, products: list[Product]) -> list[str]:
    """The body's parameters its cell reads besides its products' inputs: an LSTM's cell state among them."""
    feeds = {p.value: np.zeros((1, p.matrix.shape[1]), np.float32) for p in products}
    _, missing = evaluator.run(feeds)
    parameters = set(evaluator.body.back)
    return [v for v in dict.fromkeys(missing) if v in parameters][:MAX_CARRIED]


Stepped = tuple[str, str, tuple[int, int, int], bool, bool]


def _stepped(evaluator: Evaluator, layer: Any, reading: Reading, graph: MainGraph) -> Stepped | str:
    """(the Loop's input port of the time-major sequence it steps over, its output port of the sequence of new
    states, that sequence's shape on the probes, whether the port map slices the sequence and concatenates the new
    states from the last step), where the Loop (or TensorIterator) runs the cell once per step of the sequence as
    Keras's loops do; else why not (a clause). The body reads the step's input by a counter from the sequence
    (`Gather`) or is given it by the port map (a sliced input); it is run whole at its first and last steps: every
    integer it carries is a counter from 0 moved on by one, its state starts from zeros, one value it carries has
    the step's new state written at the step (or it gives it out to be concatenated, or, concatenating nothing,
    gives out the last step's alone: Keras's return_sequences=False), the rest are passed on unchanged, and it goes
    on for exactly as many steps as the sequence has."""
    ir, body = evaluator.ir, evaluator.body
    states = [reading.h] + ([reading.c] if reading.c else [])
    if any(body.back.get(s) != new for s, new in zip(states, reading.outputs)):
        return "its body's cell does not carry its state from one step to the next"
    if body.sliced:
        if len(body.sliced) != 1:
            return f"its port map slices {len(body.sliced)} of its inputs over the iterations, a cell's loop one"
        (port,) = body.sliced
        sequence, counter = body.inputs[port], None
        if sequence in body.back:
            return "its body's cell does not read its input as one step of the sequence it loops over"
    else:
        gather = _producer(body, reading.x)
        if gather is None or gather.kind != "Gather" or len(gather.inputs) != 3:
            return "its body's cell does not read its input as one step of a sequence (a Gather)"
        sequence, counter, axis = gather.inputs
        if sequence in body.back or counter not in body.back or _integers_of(ir, body, axis) != [0]:
            return "its body's cell does not read its input as one step of the sequence it loops over"
        port = next((p for p, v in body.inputs.items() if v == sequence), -1)
    special = layer.data.get("special_body_ports", "")
    if layer.kind not in LOOP_OPS or special not in ("", "-1,-1", "-1, -1"):
        return f"it is a {layer.kind} that feeds its body the iteration, which rnnconv does not read yet"
    if layer.kind != "Loop" and not body.sliced:
        return f"it is a {layer.kind} that slices none of its inputs over the iterations"
    slots = _slots(graph, layer, body)
    if isinstance(slots, str):
        return slots
    if any(value not in slots for value in (sequence, *([counter] if counter else []), *states)):
        return "its body's cell does not read its input, counter and state from what the Loop is given"
    shape = slots[sequence].shape
    if len(shape) != 3:
        return f"it loops over a sequence of shape {list(shape)}, not (steps, batch, features)"
    steps = shape[0]
    if not 0 < steps <= MAX_STEPS:
        return f"it loops over {steps} steps; rnnconv checks loops of 1 to {MAX_STEPS}"
    backwards = [body.sliced[port].reversed()] if body.sliced else [False]
    backwards += [part.reversed() for part in body.concatenated.values()]
    if None in backwards:
        odd = next(p for p in (*body.sliced.values(), *body.concatenated.values()) if p.reversed() is None)
        return (
            f"its port map slices an input or concatenates an output otherwise than a step at a time over all "
            f"{steps} steps as OpenVINO's frontends write it ({odd.said()})"
        )
    sliced_backwards, *given_backwards = (bool(b) for b in backwards)
    for state in states:
        if np.any(slots[state]):
            return "its initial state is not zeros"
    carried = [
        Slot(value, body.back.get(value), str(start.dtype), start, tuple(start.shape))
        if value != sequence or not body.sliced
        else Slot(value, None, str(start.dtype), start[::-1] if sliced_backwards else start, (1, *shape[1:]), True)
        for value, start in slots.items()
    ]
    # the outputs given out each step: concatenated, or (none concatenated, Keras's return_sequences=False) the last
    # step's alone, as the Loop gives out an output it does not concatenate or carry
    carried_back = set(body.back.values())
    given_out = list(body.concatenated) or [p for p, v in body.outputs.items() if v not in carried_back]
    carried += [Slot(GIVEN_OUT, body.outputs[p], "float32", None, (), True) for p in given_out]
    written = checked_steps(lambda feeds: evaluator.run(feeds)[0], carried, reading, steps)
    if isinstance(written, str):
        return written
    ran = _iterations(graph, layer, evaluator, slots, steps) if layer.kind == "Loop" else steps
    if ran != steps:
        return f"it runs {ran} times over a sequence of {steps} steps (by its trip count and condition)"
    sequences = carried[written]
    if sequences.given == GIVEN_OUT:
        index = written - len(slots)
        kept = steps if body.concatenated else 1  # every step's, or the last one's
        return (
            str(port),
            str(given_out[index]),
            (kept, shape[1], reading.hidden),
            sliced_backwards,
            bool(given_backwards) and given_backwards[index],
        )
    outputs = [p for p, v in body.outputs.items() if v == sequences.result and p not in body.concatenated]
    if not outputs:
        return "it gives out no sequence of its new states"
    kept = sequences.shape[0] if len(sequences.shape) == 3 else steps  # every step's, or the last one's
    return str(port), str(outputs[0]), (kept, shape[1], reading.hidden), sliced_backwards, False


Slots = dict[str, np.ndarray]  # body parameter -> the value the Loop starts it from


def _slots(graph: MainGraph, layer: Any, body: Body) -> Slots | str:
    """Each body parameter's initial value, as the graph computes it on its probes."""
    slots: Slots = {}
    for port, value in body.inputs.items():
        start = graph.given(layer, str(port))
        if start is None:
            return f"its input {port} is not computed from the model's inputs (by ops rnnconv evaluates)"
        if start.size > MAX_EVALUATED:
            return f"it carries a value of {start.size} elements, more than rnnconv evaluates"
        slots[value] = start
    return slots


def _iterations(graph: MainGraph, layer: Any, evaluator: Evaluator, slots: Slots, steps: int) -> int:
    """How many times the Loop runs its body (by its trip count, its first condition and its body's), counted up to
    one past `steps`."""
    trip, first = (graph.given(layer, port) for port in ("0", "1"))
    if trip is None or first is None or trip.size != 1 or first.size != 1 or trip.dtype.kind not in "iu":
        return -1
    count, going = int(trip.reshape(-1)[0]), bool(first.reshape(-1)[0])
    body, ran = evaluator.body, 0
    if body.condition is None:
        return (min(count, steps + 1) if going else 0) if count >= 0 else -1
    # the condition's own layers only, run once a step
    condition = Evaluator(evaluator.ir, dataclasses.replace(body, order=_cone(body, body.condition)), [MAX_RUN])
    while going and (count < 0 or ran < count) and ran <= steps:
        feeds = {  # its counters at the step, the rest as the Loop starts them
            v: np.asarray(ran, f.dtype) if f.dtype.kind in "iu" and f.shape == () and v in body.back else f
            for v, f in slots.items()
        }
        computed, _ = condition.run(feeds)
        verdict = {**feeds, **computed}.get(body.condition)
        if verdict is None or verdict.size != 1:
            return -1
        going, ran = bool(verdict.reshape(-1)[0]), ran + 1
    return ran


def _cone(body: Body, value: str) -> list[BodyLayer]:
    """The body's computing layers `value` is computed from, in the body's order."""
    needed, pending = set(), [value]
    while pending:
        layer = _producer(body, pending.pop())
        if layer is not None and layer.id not in needed:
            needed.add(layer.id)
            pending += [v for v in layer.inputs if v != ABSENT]
    return [layer for layer in body.order if layer.id in needed]


def _producer(body: Body, value: str) -> BodyLayer | None:
    return body.layers.get(value.split(":", maxsplit=1)[0])


def _integers_of(ir: Any, body: Body, value: str) -> list[int] | None:
    """The integers of the body's Const that gives `value`, or None where no Const gives it."""
    layer = _producer(body, value)
    if layer is None or layer.kind != "Const" or layer.data.get("element_type") not in ("i32", "i64"):
        return None
    stored, _ = ir.const(layer)
    return [int(v) for v in np.asarray(stored).reshape(-1)] if stored.size <= 64 else None


def loop_canonical(name: str, layers: list[list[Loop]], source: Provenance, dequantize: bool = False) -> CanonicalRNN:
    """The canonical RNN of Loop layers, each its directions (Unsupported: why a loop of them does not convert);
    `dequantize`: their bodies' quantized weights read as scale * (q - zero_point)."""
    loops = [loop for layer in layers for loop in layer]
    for loop in loops:
        if loop.refusal is not None or loop.reading is None:
            raise Unsupported(
                f"{cut(loop.name)!r} is a {loop.layer.kind} whose body looks like an RNN cell, but {loop.refusal}; "
                f"convert the checkpoint it was exported from"
            )
    held = [(tensor, quant) for loop in loops for tensor, quant, _ in loop.quantized]
    types = sorted({stored.etype for loop in loops for _, _, stored in loop.quantized})
    if held and not dequantize:
        schemes = sorted({quant.scheme() for _, quant in held})
        scales = "/".join(sorted({stored.scale_type for loop in loops for _, _, stored in loop.quantized}))
        raise Unsupported(
            f"{name}: its {loops[0].layer.kind} body computes with quantized weights ({len(held)} MatMul weights, "
            f"{'/'.join(types)} Consts times their {scales} scales, {', '.join(schemes)}), which cuDNN does not "
            f"compute with; --dequantize converts the float model they stand for, scale * (q - zero_point)"
        )
    readings = [[loop.reading for loop in layer if loop.reading is not None] for layer in layers]
    half = np.dtype(np.float16).name
    if not held and {dtype for loop in loops for dtype in loop.types} == {half}:  # ov.save_model's default
        arrays = [m for layer in readings for r in layer for gate in r.gates.values() for m in gate]
        if all(np.array_equal(m.astype(half).astype(m.dtype), m) for m in arrays):  # each f16 Const's own values
            readings = [[r.as_type(half) for r in layer] for layer in readings]
    first = readings[0][0]
    cell = CUDNN_MODES[first.mode][0].upper()
    article = "a" if cell == "GRU" else "an"
    error = max(r.error for layer in readings for r in layer)
    notes = [
        f"{name}: {listing(loop.layer.kind + ' ' + repr(cut(loop.name)) for loop in loops)}, each stepping "
        f"{article} {cell} cell over its sequence: its gates and layout read by what its body computes (run on probe "
        f"inputs, within {error:.1g} of the reading)"
    ]
    if held:  # the body computes in f32 with what the decompression gives: the float model is the body's own
        bits = max(QUANTIZED_STORAGE[etype].itemsize * 8 for etype in types)
        rec = record(held, bits).model_copy(update={"inputs": OPENVINO_KERNEL_INPUTS})  # no input rounded
        wide = exact_dtype(m for layer in readings for r in layer for gate in r.gates.values() for m in gate)
        readings = [[r.as_type(wide) for r in layer] for layer in readings]
        widest = max(types, key=lambda etype: (QUANTIZED_STORAGE[etype].itemsize, etype))
        source = source.model_copy(update={"dequantized": rec, "dtype": OPENVINO_QUANTIZED[widest]})
        how = "here the same: OpenVINO computes the body's products in f32 with what the decompression gives"
        notes.append(note(name, rec, wide, how))
    return canonical(name, readings, source, f"Loop of {article} {cell} cell", notes)
