"""Graphs run in LiteRT's interpreter (CPU): a blob's, or a file's own ops with their weights as stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rnnconv.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported, first_line
from rnnconv.formats import registry
from rnnconv.formats.tflite.builder import Constant, Graph, build_graph, model_bytes
from rnnconv.formats.tflite.model import Chain, TfliteFile, input_of, op_options
from rnnconv.formats.tflite.wire import (
    FORMAT,
    UNSET,
)
from rnnconv.formats.tflite.writer import graph_of, tflite_losses
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
        interpreter.allocate_tensors()
        interpreter.set_tensor(graph.inputs[0], np.ascontiguousarray(x.transpose(1, 0, 2), np.float32))
        given = [inputs.get("h0"), inputs.get("c0")]
        for index, states in enumerate(graph.states):
            for k, t in enumerate(states):
                start = given[k]
                if start is not None:
                    interpreter.set_tensor(t, np.ascontiguousarray(np.asarray(start)[index], np.float32))
        interpreter.invoke()
        y = interpreter.get_tensor(graph.outputs[0]).transpose(1, 0, 2)
        finals = [
            np.stack([interpreter.get_tensor(states[k]) for states in graph.states])
            for k in range(2)
            if all(len(states) > k for states in graph.states)
        ]
    except (RuntimeError, ValueError) as exc:
        raise BadInput(f"LiteRT's interpreter cannot run this model: {first_line(exc, 300)}") from None
    return {"y": y, "h_n": finals[0], "c_n": finals[1] if len(finals) > 1 else None}


def _stored(file: TfliteFile, t: int) -> Callable[[], np.ndarray]:
    return lambda: file.constant(t, "a weight").astype(np.float32)


def graph_of_file(file: TfliteFile, chain: Chain) -> Graph:
    """The chain's own ops in rnnconv's graph: every input as the file stores it (widened to float32), and its
    options as stored but for the layout of x and y (batch-major here)."""
    first = chain.first
    layers = []
    for held in chain.layers:
        directions = []
        for op in held.ops:
            constants = {}
            for slot, t in enumerate(op.inputs):
                tensor = file.tensors[t] if t != UNSET else None
                if slot and tensor is not None and tensor.data is not None:
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


class TfliteEngine(registry.RuntimeEngine):
    """The blob as the .tflite rnnconv writes, in LiteRT's interpreter: kernels nobody here wrote. Its graph is run
    as built, never written: the interpreter computes float32 whatever the blob holds."""

    def run(self, blob: Any, inputs: Inputs) -> Outputs:
        rnn = blob.to_canonical()
        if losses := tflite_losses(rnn):
            raise Unsupported(losses[0].term)
        return run_graph(graph_of(rnn, "float32"), inputs)
