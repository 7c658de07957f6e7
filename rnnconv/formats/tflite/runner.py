"""Graphs run in LiteRT's interpreter (CPU): a blob's, or a file's own ops with their weights as stored."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported, cut, first_line, listing
from rnnconv.formats import base, holding, sources
from rnnconv.formats._cells import Reading
from rnnconv.formats._graph import Chain
from rnnconv.formats._quantized import QUANTIZED_RANGES
from rnnconv.formats.plugin import version
from rnnconv.formats.runtimes import native_stderr_silenced
from rnnconv.formats.streaming import STREAM_INPUT, check_stream_names
from rnnconv.formats.tflite.builder import STORAGE, Constant, Graph, GraphTensor, build_graph, model_bytes
from rnnconv.formats.tflite.loops import EVALUATED_OPS, Loop
from rnnconv.formats.tflite.model import (
    BIAS_TYPES,
    QUANTIZED_TYPES,
    Layer,
    Op,
    Tensor,
    TfliteFile,
    input_of,
    op_options,
)
from rnnconv.formats.tflite.streaming import STREAMING_OPS
from rnnconv.formats.tflite.wire import (
    FORMAT,
    OP_INPUTS,
    STREAMING_OPTION_FIELDS,
    TFLITE_INPUT,
    TFLITE_OPTION_FIELDS,
    TFLITE_OUTPUT,
    TFLITE_STATE_INPUTS,
    UNSET,
)
from rnnconv.formats.tflite.writer import graph_of
from rnnconv.safeio.inputs import read_array
from rnnconv.table.apply import find_row
from rnnconv.table.constants import CUDNN_GATES, INPUT_MATRIX, RECURRENT_MATRIX
from rnnconv.table.layouts import per_gate


def _interpreter() -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise BackendMissing(
            "running TFLite needs LiteRT's interpreter, which is not installed (pip install 'rnnconv[tflite]')"
        ) from None
    return Interpreter


def allocate(interpreter: Any) -> None:
    """LiteRT's allocate_tensors, without the line its XNNPACK delegate logs to stderr, "INFO: Created TensorFlow Lite
    XNNPACK delegate for CPU.", on every verify (-q too); a failure is its exception, with LiteRT's own words."""
    with native_stderr_silenced():
        interpreter.allocate_tensors()


def litert_version() -> str:
    """LiteRT's version for the report; BackendMissing (exit 3) where LiteRT is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    _interpreter()
    try:
        return version("ai-edge-litert")
    except PackageNotFoundError:  # importable without its metadata (a copied tree, a vendored build)
        return "(version unknown)"


def run_graph(graph: Graph, inputs: Inputs | dict[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """The graph in LiteRT's interpreter (CPU): y, h_n, c_n sequence-major as cuDNN's, from x, h0, c0."""
    x = np.asarray(inputs["x"])
    lengths = inputs.get("lengths")
    if lengths is not None and np.any(np.asarray(lengths) != x.shape[0]):
        raise Unsupported(
            "TFLite's LSTM and RNN ops take no sequence lengths (every sequence runs all steps): verify a .tflite "
            "without --ragged"
        )
    steps, batch, _ = x.shape
    interpreter = _interpreter()(model_content=model_bytes(graph))
    try:
        interpreter.resize_tensor_input(graph.inputs[0], [batch, steps, x.shape[2]])
        for states in graph.states:
            for t in states:
                interpreter.resize_tensor_input(t, [batch, graph.tensors[t].shape[-1]])
        allocate(interpreter)
        interpreter.set_tensor(graph.inputs[0], np.ascontiguousarray(x.transpose(1, 0, 2), np.float32))
        given = [inputs.get("h0"), inputs.get("c0")]
        for index, states in enumerate(graph.states):
            for k, t in enumerate(states):
                start = given[k]
                if start is not None:
                    interpreter.set_tensor(t, _state_in(graph.tensors[t], np.asarray(start)[index]))
        interpreter.invoke()
        y = interpreter.get_tensor(graph.outputs[0]).transpose(1, 0, 2)
        finals = [
            np.stack(
                [_state_out(graph.tensors[states[k]], interpreter.get_tensor(states[k])) for states in graph.states]
            )
            for k in range(2)
            if all(len(states) > k for states in graph.states)
        ]
    except (RuntimeError, ValueError) as exc:
        raise BadInput(f"LiteRT's interpreter cannot run this model: {first_line(exc, 300)}") from None
    return {"y": y, "h_n": finals[0], "c_n": finals[1] if len(finals) > 1 else None}


def _state_in(tensor: GraphTensor, values: np.ndarray) -> np.ndarray:
    """A state as its variable holds it: float32, or an integer state's values on its grid (rounded to the nearest
    level, clamped to its type's range), as LiteRT's integer kernel keeps it."""
    quant = tensor.quantization
    if quant is None:
        return np.ascontiguousarray(values, np.float32)
    low, high = QUANTIZED_RANGES[tensor.dtype]
    levels = np.rint(np.asarray(values, np.float64) / quant.scales[0]) + quant.zero_points[0]
    return np.ascontiguousarray(np.clip(levels, low, high), STORAGE[tensor.dtype])


def _state_out(tensor: GraphTensor, values: np.ndarray) -> np.ndarray:
    """A state's values as floats: an integer state's dequantized from its grid."""
    quant = tensor.quantization
    if quant is None:
        return np.asarray(values, np.float32)
    return ((values.astype(np.float64) - quant.zero_points[0]) * quant.scales[0]).astype(np.float32)


def _stored(file: TfliteFile, t: int) -> Callable[[], np.ndarray]:
    return lambda: file.constant(t, "a weight").astype(np.float32)


def _stored_quantized(file: TfliteFile, tensor: Tensor) -> Callable[[], np.ndarray]:
    assert tensor.data is not None
    start = tensor.data[0]
    return lambda: read_array(file.path, start, {**QUANTIZED_TYPES, **BIAS_TYPES}[tensor.dtype], tensor.shape)


def _integer_graph(file: TfliteFile, chain: Chain[Layer]) -> Graph:
    """A full-integer chain's own ops as LiteRT's integer kernel runs them: x quantized by a QUANTIZE op onto the
    first op's input grid, each op with its weights, int32 biases, states and intermediates of the types and grids
    the file gives them (its options and operator version as stored, but batch-major), y dequantized by a DEQUANTIZE
    op. One direction per layer: the converter's bidirectional integer form is not read."""
    if len(chain.layers[0].ops) != 1:
        raise Unsupported(f"{chain.name}: rnnconv runs a full-integer LSTM of one direction per layer")
    graph = Graph()
    first = chain.first.op
    x = graph.activation(TFLITE_INPUT, file.tensors[input_of(first, "input")].shape[-1])
    graph.inputs = [x]
    places: dict[int, int] = {}

    def place(t: int, what: str) -> int:
        if t in places:
            return places[t]
        tensor = file.tensors[t]
        quant = file.quantization_of(tensor, what) if tensor.quantized or tensor.quantized_bias else None
        if tensor.data is not None and not tensor.variable:
            stored = _stored_quantized(file, tensor) if quant is not None else _stored(file, t)
            dtype = tensor.dtype if quant is not None else "float32"
            places[t] = graph.constant(Constant(tensor.name, tensor.shape, dtype, stored, quant))
        else:  # a state (resized to the batch run), an activation, an intermediate: its type and grid as stored
            shape = [1, tensor.shape[-1]] if tensor.variable else list(tensor.shape)
            signature = [UNSET, tensor.shape[-1]] if tensor.variable else None
            places[t] = graph.tensor(
                GraphTensor(tensor.name, shape, signature, tensor.dtype, variable=tensor.variable, quantization=quant)
            )
        return places[t]

    def sequence(t: int) -> int:  # an activation (batch, steps, width): the batch and steps those run
        width = file.tensors[t].shape[-1]
        graph.tensors[places[t]].shape, graph.tensors[places[t]].signature = [1, 1, width], [UNSET, UNSET, width]
        return places[t]

    place(input_of(first, "input"), "its input")
    graph.ops.append(("QUANTIZE", [x], [sequence(input_of(first, "input"))], {}))
    for layer, held in enumerate(chain.layers):
        (op,) = held.ops
        what = f"op {op.index}"
        inputs = [UNSET if t == UNSET else place(t, f"{what}'s input {slot}") for slot, t in enumerate(op.inputs)]
        if layer:  # the layer below's output, on the grid this op reads
            inputs[0] = places[chain.layers[layer - 1].ops[0].outputs[0]]
        place(op.outputs[0], f"{what}'s output")
        out = sequence(op.outputs[0])
        graph.states.append([inputs[OP_INPUTS[op.name].index(name)] for name in TFLITE_STATE_INPUTS[op.name]])
        graph.ops.append((op.name, inputs, [out], op_options(op)))
        graph.intermediates[len(graph.ops) - 1] = [place(t, f"{what}'s intermediate") for t in op.intermediates]
        graph.op_versions[op.name] = op.version
    y = graph.activation(TFLITE_OUTPUT, graph.tensors[out].shape[-1])
    graph.ops.append(("DEQUANTIZE", [out], [y], {}))
    graph.outputs = [y]
    return graph


def graph_of_file(file: TfliteFile, chain: Chain[Layer]) -> Graph:
    """The chain's own ops in rnnconv's graph: every input as the file stores it (floats widened to float32, quantized
    weights as they are, with their scales and zero points), and its options as stored but for the layout of x and
    y (batch-major here); a full-integer chain as `_integer_graph` builds it."""
    first = chain.first.op
    if file.tensors[input_of(first, "input")].quantized:
        return _integer_graph(file, chain)
    layers = []
    for held in chain.layers:
        directions = []
        for op in held.ops:
            constants = {}
            for slot, t in enumerate(op.inputs):
                tensor = file.tensors[t] if t != UNSET else None
                if slot and tensor is not None and tensor.data is not None and tensor.quantized:
                    quant = file.quantization_of(tensor, f"op {op.index}'s input {slot}")
                    constants[slot] = Constant(
                        tensor.name, tensor.shape, tensor.dtype, _stored_quantized(file, tensor), quant
                    )
                elif slot and tensor is not None and tensor.data is not None:
                    constants[slot] = Constant(
                        tensor.name,
                        tensor.shape,
                        "float32",
                        _stored(file, t),
                    )
            directions.append(constants)
        layers.append(directions)
    row = find_row(FORMAT, first.name)
    gate = CUDNN_GATES[row.cell][-1]
    hidden = file.tensors[input_of(first, row.tensors[per_gate(INPUT_MATRIX, gate)])].shape[0]
    out = file.tensors[input_of(first, row.tensors[per_gate(RECURRENT_MATRIX, gate)])].shape[1]
    input_size = file.tensors[input_of(first, row.tensors[per_gate(INPUT_MATRIX, gate)])].shape[1]
    return build_graph(first.name, input_size, (hidden, out), layers, op_options(first))


class TfliteEngine(base.RuntimeEngine):
    """The blob as the .tflite rnnconv writes, in LiteRT's interpreter: kernels nobody here wrote. Its graph is run
    as built, never written: the interpreter computes float32 whatever the blob holds."""

    def run(self, blob: Any, inputs: Inputs) -> Outputs:
        rnn = blob.to_canonical()
        holding.check_held(self.fmt.info, rnn, "float32")  # computed in float32, whatever the blob holds
        return run_graph(graph_of(rnn), inputs)


MAX_CELL_OPS = 4096  # ops of one loop body's cell: far beyond any cell's; keeps a hostile body's walk bounded


class CompiledCell:
    """One WHILE loop's cell as LiteRT runs it: the body's own ops from the values rnnconv read as the step's input
    and carried state (each made a graph input) to its new state, each other value they read the constant it is, with
    their options and operator versions as the file holds them, written again by rnnconv's builder as a model of its
    own (never the file's bytes); stepped by `_cells.run_loops` as the WHILE steps it, a `SteppedLoop`."""

    reading: Reading | None
    reversed: bool
    batch: int | None

    def __init__(self, loop: Loop):
        reading, evaluator = loop.reading, loop.evaluator
        if reading is None or evaluator is None or loop.refusal is not None:
            raise Unsupported(loop.refusal or f"the WHILE loop {loop.name!r} computes no cell rnnconv reads")
        self.reading, self.reversed, self.batch = reading, loop.reversed, loop.batch
        self._what = f"the WHILE loop {loop.name!r}"
        self._given = [int(v) for v in (reading.x, reading.h, reading.c) if v is not None]
        self._outputs = [int(v) for v in reading.outputs]
        body = evaluator.graph
        ops: dict[int, Op] = {}
        constants: dict[int, np.ndarray] = {}
        reached = set(self._given)
        waiting = list(self._outputs)
        while waiting:  # from the new state back to the step's input and state, through the body's ops
            t = waiting.pop()
            if t in reached:
                continue
            reached.add(t)
            op = evaluator.producer.get(t)
            if op is None:
                value = evaluator.constant(t)
                if value is None:
                    raise Unsupported(
                        f"the cell of {self._what} reads tensor {cut(body.tensors[t].name)!r}, which is neither its "
                        "step's input, its state nor a constant, so it cannot be run on its own"
                    )
                constants[t] = value
                continue
            if op.name not in EVALUATED_OPS or len(ops) >= MAX_CELL_OPS:
                held = f"a {op.name} op" if op.name not in EVALUATED_OPS else f"more than {MAX_CELL_OPS} ops"
                raise Unsupported(f"the cell of {self._what} holds {held}, which rnnconv does not run alone")
            ops[op.index] = op
            waiting += [i for i in op.inputs if i != UNSET]
        sizes = dict(zip(self._given, (reading.input_size, reading.hidden, reading.hidden)))
        rows = self.batch or 1
        # each value's shape and type as rnnconv computes them from the step's (the file's declared ones unread)
        computed, _ = evaluator.run({t: np.zeros((rows, size), np.float32) for t, size in sizes.items()})
        graph, places = Graph(), {}
        for t in sorted({*self._given, *constants, *(i for op in ops.values() for i in (*op.inputs, *op.outputs))}):
            if t == UNSET:
                continue
            tensor = body.tensors[t]
            if t in evaluator.quantized:  # a hybrid op's weight as stored, its scales beside it: LiteRT's own kernel
                stored = _stored_quantized(evaluator.file, tensor)
                places[t] = graph.constant(
                    Constant(tensor.name, tensor.shape, tensor.dtype, stored, evaluator.quantized[t])
                )
                continue
            if t in constants:
                value = constants[t]
                dtype = "float32" if value.dtype.kind == "f" else value.dtype.name
                places[t] = graph.constant(Constant(tensor.name, value.shape, dtype, partial(np.asarray, value)))
                continue
            value = computed.get(t)
            dtype = "float32" if t in sizes else tensor.dtype if value is None else value.dtype.name
            if dtype not in STORAGE:
                raise Unsupported(f"the cell of {self._what} computes a {dtype} tensor ({cut(tensor.name)!r})")
            shape = [rows, sizes[t]] if t in sizes else list(tensor.shape if value is None else value.shape)
            places[t] = graph.tensor(GraphTensor(tensor.name, shape, dtype=dtype))
        for index in sorted(ops):
            op = ops[index]
            fields = TFLITE_OPTION_FIELDS.get(op.name, {})
            options = {name: _option_value(op, field) for name, field in fields.items() if _option_set(op, field)}
            mapped = [[UNSET if t == UNSET else places[t] for t in ts] for ts in (op.inputs, op.outputs)]
            graph.ops.append((op.name, mapped[0], mapped[1], options))
            if op.version != 1:
                graph.op_versions[op.name] = max(op.version, graph.op_versions.get(op.name, 1))
        graph.inputs = [places[t] for t in self._given]
        graph.outputs = [places[t] for t in self._outputs]
        self._ports = graph.inputs, graph.outputs  # the interpreter's tensor indices are the graph's
        try:
            self._interpreter = _interpreter()(model_content=model_bytes(graph))
        except (RuntimeError, ValueError) as exc:  # LiteRT's own words: a cell it refuses
            raise Unsupported(f"LiteRT cannot run the cell of {self._what}: {first_line(exc, 300)}") from None
        self._rows: int | None = None

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        given = [np.ascontiguousarray(feeds[str(t)], np.float32) for t in self._given]
        interpreter, (inputs, outputs) = self._interpreter, self._ports
        try:
            if self._rows != len(given[0]):  # resized only where the batch changes
                for index, value in zip(inputs, given, strict=True):
                    interpreter.resize_tensor_input(index, value.shape)
                allocate(interpreter)
                self._rows = len(given[0])
            for index, value in zip(inputs, given, strict=True):
                interpreter.set_tensor(index, value)
            interpreter.invoke()
            got = [np.array(interpreter.get_tensor(index), np.float32) for index in outputs]
        except (RuntimeError, ValueError) as exc:  # LiteRT's own words
            raise BadInput(f"LiteRT cannot run the cell of {self._what}: {first_line(exc, 300)}") from None
        return {str(t): value for t, value in zip(self._outputs, got, strict=True)}


def compiled_cells(chain: Chain[Layer]) -> tuple[list[list[CompiledCell]], str]:
    """A chain of WHILE layers' cells, each a model of the body's own ops run in LiteRT (`CompiledCell`); and how
    they run."""
    cells = [[CompiledCell(loop) for loop in layer.loops] for layer in chain.layers]
    how = f"ai-edge-litert {litert_version()}: the file's WHILE loop bodies' cells, stepped by rnnconv"
    if any(loop.quantized for layer in chain.layers for loop in layer.loops):
        how += " (int8 weights, inputs quantized at run time: the blob is its dequantized float model)"
    return cells, how


def _option_value(op: Op, field: tuple[int, str, int | None]) -> Any:
    slot, kind, default = field
    if kind == "[i32]":
        return op.options.ints(slot) if op.options is not None else None
    return op.option(slot, kind, default)


STREAMING_TYPES = {"float32": np.float32, "int32": np.int32}  # of a streaming model's tensors (int32: SPLIT's axis)


def streaming_graph_of_file(file: TfliteFile) -> Graph:
    """A streaming model's own tensors and ops, wiring and options as the file holds them, made again by rnnconv's
    builder from what its parser read and checked: the runtimes are given that, never the file's bytes (whose
    fields rnnconv does not read could crash them). What rnnconv does not write is refused in one sentence: another
    op, a fused activation or other option, a variable or quantized tensor."""
    graph = Graph()
    for t in file.tensors:
        if t.dtype not in STREAMING_TYPES or t.variable:
            kind = "a variable tensor" if t.variable else f"a {t.dtype} tensor"
            raise BadInput(f"{file.path.name} is no streaming model rnnconv writes: it holds {kind} ({t.name!r})")
        buffer = 0
        if t.data is not None:
            start, nbytes = t.data
            dtype = np.dtype(STREAMING_TYPES[t.dtype])
            if nbytes != int(np.prod(t.shape, dtype=np.int64)) * dtype.itemsize:
                raise BadInput(f"{file.path.name}: tensor {t.name!r} holds {nbytes} bytes, not its shape {t.shape}'s")
            graph.buffers.append(Constant(t.name, t.shape, t.dtype, _read(file, start, nbytes, dtype)))
            buffer = len(graph.buffers) - 1
        graph.tensors.append(GraphTensor(t.name, list(t.shape), None, t.dtype, buffer))
    for op in file.ops:
        if op.name not in STREAMING_OPS:
            raise BadInput(f"{file.path.name} is no streaming model rnnconv writes: it holds a {op.name} op")
        arity = STREAMING_OPS[op.name]
        if any(n is not None and n != len(got) for n, got in zip(arity, (op.inputs, op.outputs))) or not op.outputs:
            raise BadInput(
                f"{file.path.name}: its {op.name} op {op.index} has {len(op.inputs)} inputs and {len(op.outputs)} "
                f"outputs, not what that op takes"
            )
        if UNSET in op.outputs or (UNSET in op.inputs and op.name != "FULLY_CONNECTED"):
            raise BadInput(f"{file.path.name}: its {op.name} op {op.index} leaves out a tensor it needs")
        fields = TFLITE_OPTION_FIELDS.get(op.name, {})
        written = STREAMING_OPTION_FIELDS.get(op.name, ())
        options = {name: op.option(*fields[name]) for name in written}
        if any(_option_set(op, fields[name]) for name in fields if name not in written):
            raise BadInput(
                f"{file.path.name}: its {op.name} op {op.index} fuses an activation or sets an option "
                f"rnnconv does not write"
            )
        _check_counts(file, op.name, op.index, options, op.inputs, op.outputs)
        graph.ops.append((op.name, op.inputs, op.outputs, options))
    graph.inputs, graph.outputs = list(file.inputs), list(file.outputs)
    return graph


def _option_set(op: Op, field: tuple[int, str, int | None]) -> bool:
    """Whether the op sets an option's field to other than the schema's default."""
    slot, kind, default = field
    if kind == "[i32]":
        return op.options is not None and op.options.ints(slot) is not None
    return bool(op.option(slot, kind, default) != default)


def _check_counts(
    file: TfliteFile, name: str, index: int, options: dict[str, int], inputs: list[int], outputs: list[int]
) -> None:
    """BadInput unless an op's counts and axes agree with its inputs and outputs (the runtimes trust them: a SPLIT
    into more parts than it has outputs crashes LiteRT)."""
    given = {
        "SPLIT": ("num_splits", len(outputs)),
        "UNPACK": ("num", len(outputs)),
        "PACK": ("values_count", len(inputs)),
    }
    if name not in given or not inputs or not outputs or UNSET in inputs[:1]:
        return
    key, count = given[name]
    if name == "SPLIT":  # its axis is its first input, a constant scalar
        held = file.tensors[inputs[0]]
        scalar = held.data is not None and held.data[1] == 4 and held.dtype == "int32" and len(inputs) == 2
        axis = int(np.frombuffer(file.flat.read(held.data[0], 4), np.int32)[0]) if scalar and held.data else None
        rank = len(file.tensors[inputs[-1]].shape)
    else:
        axis = options["axis"]
        rank = len(file.tensors[inputs[0]].shape) + (name == "PACK")
    if options[key] != count or axis is None or not -rank <= axis < rank:
        raise BadInput(
            f"{file.path.name}: its {name} op {index} says {options[key]} parts along axis {axis}, but has {count} "
            f"of rank {rank}"
        )


def _read(file: TfliteFile, start: int, nbytes: int, dtype: np.dtype[Any]) -> Callable[[], np.ndarray]:
    return lambda: np.frombuffer(file.flat.read(start, nbytes), dtype)


MICRO_ARENA = 1 << 22  # bytes TFLite Micro plans a streaming model's tensors in, beyond ten times the model's size


class TfliteStream:
    """A streaming .tflite loaded in LiteRT's interpreter or TFLite Micro's, called a chunk at a time
    (`streaming.Stream`). TFLite Micro runs the file's shapes as they are (batch 1): each batch item is its own call."""

    def __init__(self, path: Path, runtime: str):
        file = TfliteFile.load(path)
        self.source = None if file.record is None else sources.read_source_record(file.record, path)
        self.names = [file.tensors[t].name for t in file.inputs]
        self.outputs = [file.tensors[t].name for t in file.outputs]
        check_stream_names(path, self.names, self.outputs)
        x = file.tensors[file.inputs[0]]
        if len(x.shape) != 3:
            raise BadInput(f"{path.name} is no streaming model: its {STREAM_INPUT} is not (batch, chunk, input)")
        self.chunk = x.shape[1]
        data = model_bytes(streaming_graph_of_file(file))
        micro = runtime == "tflite-micro"
        if micro:
            self.versions = {"tflite-micro": version("tflite-micro", "tflite_micro") or "(version unknown)"}
            self.how, self.call = (
                f"tflite-micro {self.versions['tflite-micro']}: TFLite Micro's interpreter, the file's own ops",
                self._micro,
            )
        else:
            self.versions = {"ai-edge-litert": litert_version()}
            self.how, self.call = (
                f"ai-edge-litert {self.versions['ai-edge-litert']}: LiteRT's interpreter, the file's own ops",
                self._litert,
            )

        def load(model: bytes) -> Any:
            return _micro(model, len(self.names)) if micro else _interpreter()(model_content=model)

        try:
            self.interpreter = load(data)
        except (RuntimeError, ValueError) as exc:
            raise BadInput(f"{self.runs_in} cannot load {path.name}: {first_line(exc, 300)}") from None
        self.batch = 0

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.names if name not in feeds]
        if missing:
            raise BadInput(f"the streaming model takes inputs rnnconv does not write: {listing(missing)}")
        if feeds[STREAM_INPUT].shape[1] != self.chunk:
            raise BadInput(
                f"the streaming model takes chunks of {self.chunk} steps, not {feeds[STREAM_INPUT].shape[1]}"
            )
        try:
            return self.call([np.ascontiguousarray(feeds[name], np.float32) for name in self.names])
        except (RuntimeError, ValueError) as exc:
            raise BadInput(f"{self.runs_in} cannot run this streaming model: {first_line(exc, 300)}") from None

    @property
    def runs_in(self) -> str:
        return self.how.partition(": ")[2].partition(",")[0]

    def _litert(self, given: list[np.ndarray]) -> dict[str, np.ndarray]:
        it = self.interpreter
        details = it.get_input_details()
        batch = given[0].shape[0]
        if batch != self.batch:  # the file's batch is 1: resized to the batch fed
            for detail, value in zip(details, given):
                it.resize_tensor_input(detail["index"], list(value.shape))
            allocate(it)
            self.batch = batch
        for detail, value in zip(details, given):
            it.set_tensor(detail["index"], value)
        it.invoke()
        return {name: it.get_tensor(d["index"]) for name, d in zip(self.outputs, it.get_output_details())}

    def _micro(self, given: list[np.ndarray]) -> dict[str, np.ndarray]:
        it = self.interpreter
        items = []
        for item in range(given[0].shape[0]):
            for index, value in enumerate(given):
                it.set_input(value[item : item + 1], index)
            it.invoke()
            items.append([np.array(it.get_output(index)) for index in range(len(self.outputs))])
        return {name: np.concatenate([got[k] for got in items]) for k, name in enumerate(self.outputs)}


# One call of a model on zeros in TFLite Micro, in a child: its kernels abort the process on some inconsistent
# files that pass rnnconv's checks (a fuzzed streaming GRU: SIGABRT in invoke), which would end verify with a signal.
MICRO_TRIAL = """
import sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
it = runtime.Interpreter.from_bytes(sys.stdin.buffer.read(), arena_size=int(sys.argv[1]))
for index in range(int(sys.argv[2])):
    details = it.get_input_details(index)
    it.set_input(np.zeros(details["shape"], details["dtype"]), index)
it.invoke()
"""
MICRO_TRIAL_SECONDS = 300


def _micro(data: bytes, inputs: int) -> Any:
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        raise BackendMissing(
            "running a streaming .tflite in TFLite Micro needs tflite-micro, which is not installed (pip install "
            "'rnnconv[tflite-micro]')"
        ) from None
    arena = 10 * len(data) + MICRO_ARENA
    try:
        trial = subprocess.run(
            [sys.executable, "-c", MICRO_TRIAL, str(arena), str(inputs)],
            input=data,
            capture_output=True,
            timeout=MICRO_TRIAL_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BadInput(f"TFLite Micro's interpreter ran one chunk for over {MICRO_TRIAL_SECONDS} s") from None
    if trial.returncode < 0:
        raise BadInput(
            f"TFLite Micro's interpreter stopped its process on this model (signal {-trial.returncode}): its ops do "
            "not fit together as TFLite Micro's kernels need"
        )
    return runtime.Interpreter.from_bytes(data, arena_size=arena)
