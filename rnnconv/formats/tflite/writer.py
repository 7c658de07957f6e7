"""The .tflite of a canonical RNN: its ops, each stored tensor made by the table's TFLite row when the file is
written (a block still in the source file copied as it is), and where the RNN came from in the metadata. With
--quantize, the dynamic-range hybrid ops TensorFlow's converter writes with Optimize.DEFAULT: each weight matrix int8,
one symmetric scale per tensor (LiteRT's hybrid kernels take no other), biases and states float32, each step's
inputs quantized asymmetrically at run time (asymmetric_quantize_inputs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.contracts import Quantized
from rnnconv.core.dtypes import element_type
from rnnconv.formats import sources, writing
from rnnconv.formats._quantized import Quantization, largest_rounding, quantized_note, symmetric, written_record
from rnnconv.formats.settings import WriteOptions
from rnnconv.formats.tflite.builder import Constant, Graph, build_graph, serialize, write_graph
from rnnconv.formats.tflite.model import slot_of
from rnnconv.formats.tflite.streaming import streaming_graph
from rnnconv.formats.tflite.wire import FORMAT, TFLITE_ACTIVATIONS, TFLITE_HYBRID_VERSIONS
from rnnconv.formats.writing import StoredTensor, stored
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import row_for_mode
from rnnconv.table.constants import INPUT_MATRIX, PROJECTION, RECURRENT_MATRIX, TORCH_REVERSE_SUFFIX
from rnnconv.table.rows import Row

FLOAT32 = element_type("float32")  # what TFLite's LSTM and RNN ops compute with
MATRICES = (INPUT_MATRIX, RECURRENT_MATRIX, PROJECTION)  # what --quantize quantizes (the hybrid kernels' int8 inputs)


def graph_of(rnn: CanonicalRNN) -> Graph:
    """The graph of a canonical RNN, each weight made by the table's writing as the file is written (a matrix still
    in a float32 source file copied from it), one layer and direction at a time; biases always (zeros where the RNN
    has none)."""
    return _graph(rnn, None)[0]


def quantized_graph(rnn: CanonicalRNN, quantize: str) -> tuple[Graph, Quantized]:
    """The graph of `graph_of` with its matrices quantized (made now: their scales are in the tables), and the record
    of what was written."""
    graph, record = _graph(rnn, quantize)
    assert record is not None
    return graph, record


def _graph(rnn: CanonicalRNN, quantize: str | None) -> tuple[Graph, Quantized | None]:
    spec = rnn.spec
    row, _ = row_for_mode(FORMAT, spec.mode, reset_after=spec.reset_after)  # refuses a cell no op of TFLite computes
    op_name = row.source_class
    layers = []
    held: list[tuple[str, Quantization]] = []
    rounded = 0.0
    for layer in range(spec.num_layers):
        directions = []
        for direction in range(spec.num_directions):
            suffix = TORCH_REVERSE_SUFFIX if direction else ""
            constants = {}
            for key, tensor in stored(rnn, row, layer, direction, bias=True).items():
                name = f"layer{layer}{suffix}/{row.tensors[key]}"
                if quantize is None or key.partition("/")[0] not in MATRICES:
                    constants[slot_of(op_name, key)] = Constant(name, tensor.shape, "float32", _one_run(tensor))
                    continue
                values = tensor.assembled()
                q, scales = symmetric(values, (), quantize)
                quant = Quantization((float(scales.flat[0]),), (0,), None)
                constants[slot_of(op_name, key)] = Constant(name, tensor.shape, quantize, _made(q), quant)
                held.append((name, quant))
                rounded = max(rounded, largest_rounding(values, q, scales))
            directions.append(constants)
        layers.append(directions)
    options: dict[str, object] = {"activation": _activation_code(row, spec.mode)}
    if quantize is not None:
        options["asymmetric_quantize_inputs"] = True
    graph = build_graph(op_name, spec.input_size, (spec.hidden_size, spec.output_size), layers, options)
    if quantize is None:
        return graph, None
    graph.op_versions[op_name] = TFLITE_HYBRID_VERSIONS[op_name]
    return graph, written_record(rnn, held, quantize, rounded, inputs_quantized=True)


def _made(values: np.ndarray) -> Callable[[], np.ndarray]:
    """A constant already made (a quantized matrix, whose scale its table needs before the file is written)."""
    return lambda: values


def _one_run(tensor: StoredTensor) -> Callable[[], np.ndarray | FileArray]:
    """A stored tensor of TFLite's row (a gate's matrix or bias, the projection) as one run of float32 words."""

    def values() -> np.ndarray | FileArray:
        (run,) = tensor.words(FLOAT32)
        return run

    return values


def _activation_code(row: Row, mode: str) -> int:
    name = next(activation for activation, runs in row.modes.items() if runs == mode)
    return TFLITE_ACTIVATIONS[name]


def write_tflite(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> tuple[CanonicalRNN, list[str]]:
    """The file, and the warnings its writing gives (what --quantize wrote)."""
    rnn = writing.only_rnn(rnns, "a .tflite")
    quantized = None
    if options.streaming:
        graph = streaming_graph(rnn, options.chunk or 1)
    elif options.quantize is not None:
        graph, quantized = quantized_graph(rnn, options.quantize)
    else:
        graph = graph_of(rnn)
    warnings = []
    if quantized is not None:  # the record says what was written: verify holds the file to it
        rnn = dataclasses.replace(rnn, source=rnn.source.model_copy(update={"quantized": quantized}))
        warnings.append(quantized_note(rnn.name, quantized, "TFLite"))

    def recorded(wait: bool = True) -> np.ndarray:  # the source's digest is still being computed: written last
        text = sources.recorded_source(rnn, path, wait).model_dump_json(by_alias=True, exclude_none=True)
        return np.frombuffer(text.encode(), np.uint8)

    graph.buffers.append(Constant(sources.SOURCE_KEY, (len(recorded(wait=False)),), "uint8", recorded))
    graph.metadata[sources.SOURCE_KEY] = len(graph.buffers) - 1
    serialize(graph)  # refuses a model over the flatbuffer's limit before any file is made
    with atomic_outputs([path], options.force) as (tmp,), open(tmp, "wb") as f:
        write_graph(graph, f, options.progress)
    return rnn, warnings
