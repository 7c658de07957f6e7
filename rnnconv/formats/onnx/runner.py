"""ONNX nodes run in onnxruntime (CPU): a built model, or a source's own nodes as the file holds them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BackendMissing, BadInput, Unsupported, cut, first_line, listing
from rnnconv.formats import sources
from rnnconv.formats._cells import Reading
from rnnconv.formats._graph import reverse_sequences
from rnnconv.formats.onnx.loops import Loop
from rnnconv.formats.onnx.nodes import OnnxNode
from rnnconv.formats.onnx.reader import require_onnx
from rnnconv.formats.onnx.wire import ONNX_QUANTIZED_OPS
from rnnconv.formats.onnx.writer import Layer, build_model
from rnnconv.formats.streaming import check_stream_names
from rnnconv.safeio.inputs import regular_file

MAX_CELL_NODES = 4096  # nodes of one cell run on its own: a body's are a few dozen
MODEL_OUTPUTS = ("Y", "Y_h", "Y_c")  # what a built model gives: y, h_n and (an LSTM's) c_n


def model_feeds(inputs: Mapping[str, Any], lstm: bool) -> dict[str, np.ndarray]:
    """What a built model is fed of verify's inputs: X and every layer's initial states, float32."""
    feeds = {"X": inputs["x"].astype(np.float32), "initial_h": inputs["h0"].astype(np.float32)}
    if lstm:
        feeds["initial_c"] = inputs["c0"].astype(np.float32)
    return feeds


def cudnn_outputs(got: Mapping[str, np.ndarray]) -> dict[str, np.ndarray | None]:
    """A built model's outputs as cuDNN names them."""
    return {"y": got["Y"], "h_n": got["Y_h"], "c_n": got.get("Y_c")}


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise BackendMissing(
            "running ONNX needs onnxruntime, which is not installed (pip install 'rnnconv[onnx]')"
        ) from None
    return onnxruntime


def run_model(model: Any, inputs: Mapping[str, Any], lstm: bool) -> dict[str, np.ndarray | None]:
    """The model in onnxruntime (CPU): y, h_n, c_n, sequence-major as cuDNN's."""
    onnxruntime = _onnxruntime()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    feeds = model_feeds(inputs, lstm)
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
    return cudnn_outputs(got)


def run_nodes(
    chain: list[OnnxNode], spec: RNNSpec, inputs: dict[str, np.ndarray | None], layer: str | None
) -> tuple[dict[str, np.ndarray | None], str]:
    """A chain of the file's nodes, their weights and attributes as they are in the file, run in onnxruntime; and
    how it ran."""
    layers = []
    for node in chain:
        # no weights to run (a quantized node has its own; a node of dequantized weights computes with them)
        if node.refusal is not None and not node.stored and (not node.qdq or node.rounded):
            raise Unsupported(node.refusal)
        attributes = {k: v for k, v in node.attributes.items() if k != "layout"}  # sequence-major I/O here
        if node.quantized:  # the quantized node itself, its int8 weights as stored
            domain = ONNX_QUANTIZED_OPS[node.source_class][0]
            layers.append(Layer(node.source_class, attributes, dict(node.stored), domain))
            continue
        weights = {k: v.astype(np.float32) for k, v in node.weights.items()}
        layers.append(Layer(node.op, attributes, weights))
    if chain[0].input_size != spec.input_size or len(chain) != spec.num_layers:
        raise BadInput(f"the ONNX nodes {layer} are not the RNN the blob describes ({spec.describe()})")
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


class CompiledCell:
    """One ONNX Loop's (or Scan's) cell as onnxruntime runs it: the body's own nodes from the values rnnconv read as
    the step's input and carried state (each made a graph input) to its new state, each other value they read the
    constant it is (the weights the body carries, started from the graph's constants), a model of its own in the
    file's opsets; stepped by `_cells.run_loops` as the Loop steps it, a `SteppedLoop`."""

    reading: Reading | None
    reversed: bool
    batch: int | None

    def __init__(self, loop: Loop, opsets: Any, ir_version: int):
        reading = loop.reading
        if reading is None or loop.refusal is not None:
            raise Unsupported(loop.refusal or f"the Loop {loop.name!r} computes no cell rnnconv reads")
        self.reading, self.reversed, self.batch = reading, loop.reversed, loop.batch
        onnx = require_onnx()
        self._given = [v for v in (reading.x, reading.h, reading.c) if v is not None]
        self._outputs, self._what = reading.outputs, f"the Loop {loop.name!r}"
        body = loop.body
        nodes: dict[str, Any] = {}
        constants: dict[str, np.ndarray] = {}
        waiting = list(self._outputs)
        while waiting:  # from the new state back to the step's input and state, through the body's nodes
            value = waiting.pop()
            if value in self._given or value in constants or value in nodes:
                continue
            produced = body.produced.get(value)
            if produced is None or len(nodes) > MAX_CELL_NODES:
                folded = loop.finder.constant(value)
                if folded is None:
                    raise Unsupported(
                        f"the cell of {self._what} reads {cut(value)!r}, which is neither its step's input, its state "
                        "nor a constant, so it cannot be run on its own"
                    )
                constants[value] = folded
                continue
            nodes[value] = produced[0]
            waiting += [name for name in produced[0].input if name]
        order = {id(node): place for place, node in enumerate(body.graph.node)}
        ran = sorted({id(node): node for node in nodes.values()}.values(), key=lambda node: order[id(node)])
        sizes = {reading.x: reading.input_size, reading.h: reading.hidden, reading.c: reading.hidden}
        helper = onnx.helper
        graph = helper.make_graph(
            ran,
            "cell",
            [helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, [loop.batch, sizes[v]]) for v in self._given],
            [helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None) for v in self._outputs],
            [onnx.numpy_helper.from_array(np.asarray(array), name) for name, array in constants.items()],
        )
        model = helper.make_model(graph, opset_imports=list(opsets), ir_version=ir_version)
        onnxruntime = _onnxruntime()
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        try:
            self._session = onnxruntime.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's own errors: a cell it refuses
            raise Unsupported(f"onnxruntime cannot run the cell of {self._what}: {onnxruntime_reason(exc)}") from None

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            got = self._session.run(list(self._outputs), {v: np.asarray(feeds[v], np.float32) for v in self._given})
        except Exception as exc:  # onnxruntime's own errors
            raise BadInput(f"onnxruntime cannot run the cell of {self._what}: {onnxruntime_reason(exc)}") from None
        return {value: np.asarray(array, np.float32) for value, array in zip(self._outputs, got, strict=True)}


def compiled_cells(path: Path, chain: list[OnnxNode]) -> tuple[list[list[CompiledCell]], str]:
    """A chain of Loop layers' cells, each a model of the body's own nodes run in onnxruntime (`CompiledCell`); and
    how they run."""
    onnx = require_onnx()
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and others: the file changed since it was read
        raise BadInput(f"{path} is not a readable ONNX model ({type(exc).__name__})") from None
    cells = [[CompiledCell(loop, model.opset_import, model.ir_version) for loop in node.loops] for node in chain]
    version = _onnxruntime().__version__
    return cells, f"onnxruntime {version}: the file's Loop bodies' cells, stepped by rnnconv"


ONNX_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}


# Where onnxruntime says which of its source lines refused ("[ONNXRuntimeError] : 1 : FAIL : /.../model.cc:256
# onnxruntime::Model::Model(onnx::ModelProto&&, ...) Unsupported model IR version: ..."), nested as its checks nest:
# what it says is wrong is what follows the last place, less the function named there.
ONNXRUNTIME_PLACE = re.compile(r"\S+\.(?:cc|h):\d+ ")
ONNXRUNTIME_FUNCTION = re.compile(
    r"^(?:(?:[\w:~<>*&]+ )*\w[\w:~<>]*::[\w~<>]+\((?:[^()]|\([^()]*\))*\)(?: const)? |[A-Z][a-z]+[A-Z]\w* )"
)
ONNXRUNTIME_CODE = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")


def onnxruntime_reason(exc: BaseException) -> str:
    """What onnxruntime says is wrong, without where in its source it said so."""
    if isinstance(exc, UnicodeDecodeError):
        return "it refuses the model, its message not UTF-8 text"
    text = ONNXRUNTIME_CODE.sub("", " ".join(str(exc).split()))
    said = ONNXRUNTIME_FUNCTION.sub("", ONNXRUNTIME_PLACE.split(text)[-1], count=1).strip()
    return said[:300] or first_line(exc, 300)


class OnnxStream:
    """A streaming .onnx loaded in onnxruntime (CPU), called a chunk at a time (`streaming.Stream`)."""

    chunk = None  # its x takes any number of steps

    def __init__(self, path: Path):
        onnx = require_onnx()
        onnxruntime = _onnxruntime()
        regular_file(path)
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # protobuf's DecodeError and others: a damaged or foreign file
            raise BadInput(f"{path} is not a readable ONNX model ({type(exc).__name__})") from None
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            raise BadInput(f"{path.name} is no streaming model rnnconv writes: its weights lie in other files")
        records = [p.value for p in model.metadata_props if p.key == sources.SOURCE_KEY]
        self.source = sources.read_source_record(records[0], path) if records else None
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        try:  # the model as read (no file beside it is opened)
            self.session = onnxruntime.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's own errors (its message undecodable where it quotes the model)
            if not (type(exc).__module__.startswith("onnxruntime") or isinstance(exc, UnicodeDecodeError)):
                raise
            raise BadInput(f"onnxruntime cannot load {path.name}: {onnxruntime_reason(exc)}") from None
        self.types = {i.name: ONNX_TYPES.get(i.type, np.float32) for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        check_stream_names(path, list(self.types), self.outputs)
        self.how = f"onnxruntime {onnxruntime.__version__}"
        self.versions = {"onnxruntime": onnxruntime.__version__}

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.types if name not in feeds]
        if missing:
            raise BadInput(f"the streaming model takes inputs rnnconv does not write: {listing(missing)}")
        try:
            got = self.session.run(self.outputs, {k: feeds[k].astype(t) for k, t in self.types.items()})
        except Exception as exc:
            if not type(exc).__module__.startswith("onnxruntime"):
                raise
            raise BadInput(f"onnxruntime cannot run this streaming model: {onnxruntime_reason(exc)}") from None
        return {name: np.asarray(value, np.float32) for name, value in zip(self.outputs, got)}
