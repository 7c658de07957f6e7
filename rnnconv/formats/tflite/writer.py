"""The .tflite of a canonical RNN: its ops, each stored tensor made by the table's TFLite row when the file is
written (a block still in the source file copied as it is), and where the RNN came from in the metadata."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN
from rnnconv.dtypes import element_type
from rnnconv.errors import Unsupported
from rnnconv.formats import registry
from rnnconv.formats.registry import WriteOptions
from rnnconv.formats.tflite.builder import Constant, Graph, build_graph, serialize, write_graph
from rnnconv.formats.tflite.model import slot_of
from rnnconv.formats.tflite.streaming import streaming_graph
from rnnconv.formats.tflite.wire import FORMAT, TFLITE_ACTIVATIONS, TFLITE_CELL_OPS
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row
from rnnconv.table.constants import GRU, TORCH_REVERSE_SUFFIX
from rnnconv.table.rows import Row
from rnnconv.table.writing import StoredTensor, stored

FLOAT32 = element_type("float32")  # what TFLite's LSTM and RNN ops compute with
NO_GRU = "TFLite has no fused GRU op (only UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN)"


def _writable(rnn: CanonicalRNN, dtype: str | None) -> str:
    """The op that holds the RNN; Unsupported (one sentence) where TFLite cannot hold it exactly."""
    if rnn.spec.cell == GRU:
        raise Unsupported(NO_GRU)
    _in_float32(rnn, dtype)
    return TFLITE_CELL_OPS[rnn.spec.cell]


def _in_float32(rnn: CanonicalRNN, dtype: str | None) -> None:
    """Unsupported (one sentence) where the RNN's weights would not be float32 exactly, as TFLite computes."""
    spec = rnn.spec
    if dtype not in (None, "float32"):
        raise Unsupported(f"TFLite's LSTM and RNN ops compute with float32 weights, not {dtype}")
    if dtype is None and spec.dtype == "float64":
        raise Unsupported(
            "TFLite's LSTM and RNN ops compute with float32 weights: the source's float64 weights would be rounded; "
            "say --dtype float32 to accept that"
        )


def graph_of(rnn: CanonicalRNN, dtype: str | None = None) -> Graph:
    """The graph of a canonical RNN, each weight made by the table's writing as the file is written (a matrix still
    in a float32 source file copied from it), one layer and direction at a time; biases always (zeros where the RNN
    has none)."""
    op_name = _writable(rnn, dtype)
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
    rnn = registry.only_rnn(rnns, "a .tflite")
    if options.streaming:
        _in_float32(rnn, options.dtype)
        graph = streaming_graph(rnn, options.chunk or 1)
    else:
        graph = graph_of(rnn, options.dtype)

    def recorded(wait: bool = True) -> np.ndarray:  # the source's digest is still being computed: written last
        text = registry.recorded_source(rnn, path, wait).model_dump_json(by_alias=True, exclude_none=True)
        return np.frombuffer(text.encode(), np.uint8)

    graph.buffers.append(Constant(registry.SOURCE_KEY, (len(recorded(wait=False)),), "uint8", recorded))
    graph.metadata[registry.SOURCE_KEY] = len(graph.buffers) - 1
    serialize(graph)  # refuses a model over the flatbuffer's limit before any file is made
    with atomic_outputs([path], options.force) as (tmp,), open(tmp, "wb") as f:
        write_graph(graph, f, options.progress)
    return rnn


def tflite_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What TFLite's fused ops cannot hold of `rnn`: a GRU (there is no fused GRU op)."""
    if rnn.spec.cell != GRU:
        return []
    return [registry.Loss(NO_GRU)]
