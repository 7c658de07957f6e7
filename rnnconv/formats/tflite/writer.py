"""The .tflite of a canonical RNN: its ops, each stored tensor made by the table's TFLite row when the file is
written (a block still in the source file copied as it is), and where the RNN came from in the metadata."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.dtypes import element_type
from rnnconv.formats import sources, writing
from rnnconv.formats.settings import WriteOptions
from rnnconv.formats.tflite.builder import Constant, Graph, build_graph, serialize, write_graph
from rnnconv.formats.tflite.model import slot_of
from rnnconv.formats.tflite.streaming import streaming_graph
from rnnconv.formats.tflite.wire import FORMAT, TFLITE_ACTIVATIONS, TFLITE_CELL_OPS
from rnnconv.formats.writing import StoredTensor, stored
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row
from rnnconv.table.constants import TORCH_REVERSE_SUFFIX
from rnnconv.table.rows import Row

FLOAT32 = element_type("float32")  # what TFLite's LSTM and RNN ops compute with


def graph_of(rnn: CanonicalRNN) -> Graph:
    """The graph of a canonical RNN, each weight made by the table's writing as the file is written (a matrix still
    in a float32 source file copied from it), one layer and direction at a time; biases always (zeros where the RNN
    has none)."""
    op_name = TFLITE_CELL_OPS[rnn.spec.cell]
    spec = rnn.spec
    row = find_row(FORMAT, op_name)
    layers = []
    for layer in range(spec.num_layers):
        directions = []
        for direction in range(spec.num_directions):
            suffix = TORCH_REVERSE_SUFFIX if direction else ""
            tensors = stored(rnn, row, layer, direction, bias=True)
            directions.append(
                {
                    slot_of(op_name, key): Constant(
                        f"layer{layer}{suffix}/{row.tensors[key]}", tensor.shape, "float32", _one_run(tensor)
                    )
                    for key, tensor in tensors.items()
                }
            )
        layers.append(directions)
    activation = _activation_code(row, spec.mode)
    return build_graph(
        op_name, spec.input_size, (spec.hidden_size, spec.output_size), layers, {"activation": activation}
    )


def _one_run(tensor: StoredTensor) -> Callable[[], np.ndarray | FileArray]:
    """A stored tensor of TFLite's row (a gate's matrix or bias, the projection) as one run of float32 words."""

    def values() -> np.ndarray | FileArray:
        (run,) = tensor.words(FLOAT32)
        return run

    return values


def _activation_code(row: Row, mode: str) -> int:
    name = next(activation for activation, runs in row.modes.items() if runs == mode)
    return TFLITE_ACTIVATIONS[name]


def write_tflite(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> CanonicalRNN:
    rnn = writing.only_rnn(rnns, "a .tflite")
    graph = streaming_graph(rnn, options.chunk or 1) if options.streaming else graph_of(rnn)

    def recorded(wait: bool = True) -> np.ndarray:  # the source's digest is still being computed: written last
        text = sources.recorded_source(rnn, path, wait).model_dump_json(by_alias=True, exclude_none=True)
        return np.frombuffer(text.encode(), np.uint8)

    graph.buffers.append(Constant(sources.SOURCE_KEY, (len(recorded(wait=False)),), "uint8", recorded))
    graph.metadata[sources.SOURCE_KEY] = len(graph.buffers) - 1
    serialize(graph)  # refuses a model over the flatbuffer's limit before any file is made
    with atomic_outputs([path], options.force) as (tmp,), open(tmp, "wb") as f:
        write_graph(graph, f, options.progress)
    return rnn
