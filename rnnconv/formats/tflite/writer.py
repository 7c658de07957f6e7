"""The .tflite of a canonical RNN: its ops, each stored tensor made by the table's TFLite row when the file is
written (a block still in the source file copied as it is), and where the RNN came from in the metadata."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey
from rnnconv.errors import Unsupported
from rnnconv.formats import registry
from rnnconv.formats.registry import WriteOptions
from rnnconv.formats.tflite.builder import Constant, Graph, build_graph, serialize, write_graph
from rnnconv.formats.tflite.model import slot_of
from rnnconv.formats.tflite.wire import (
    FORMAT,
    TFLITE_ACTIVATIONS,
    TFLITE_CELL_OPS,
)
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row, stored_shapes
from rnnconv.table.constants import (
    BIAS,
    BIAS_KINDS,
    GRU,
    KIND_OF_ROLE,
    MATRIX_ROLES,
    PROJECTION,
    TORCH_REVERSE_SUFFIX,
    Kind,
)
from rnnconv.table.layouts import MATRIX_PER_GATE, per_gate
from rnnconv.table.rows import Row

NO_GRU = (
    "TFLite has no fused GRU op (only UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN): a GRU would have to be written as a "
    "WHILE loop or unrolled ops, which rnnconv does not write; convert it to ONNX (--to onnx)"
)


def _writable(rnn: CanonicalRNN, dtype: str | None) -> str:
    """The op that holds the RNN; Unsupported (one sentence) where TFLite cannot hold it exactly."""
    spec = rnn.spec
    if spec.cell == GRU:
        raise Unsupported(NO_GRU)
    if dtype not in (None, "float32"):
        raise Unsupported(f"TFLite's LSTM and RNN ops compute with float32 weights, not {dtype}")
    if dtype is None and spec.dtype == "float64":
        raise Unsupported(
            "TFLite's LSTM and RNN ops compute with float32 weights: the source's float64 weights would be rounded; "
            "say --dtype float32 to accept that"
        )
    return TFLITE_CELL_OPS[spec.cell]


def graph_of(rnn: CanonicalRNN, dtype: str | None = None) -> Graph:
    """The graph of a canonical RNN, its weights taken from it one layer and direction at a time."""
    op_name = _writable(rnn, dtype)
    spec = rnn.spec
    row = find_row(FORMAT, op_name)
    layers = []
    for layer in range(spec.num_layers):
        width = spec.layer_input_size(layer)
        directions = []
        for direction in range(spec.num_directions):
            suffix = TORCH_REVERSE_SUFFIX if direction else ""
            shapes = stored_shapes(row, spec.hidden_size, width, spec.output_size, spec.proj_size, True)
            directions.append(
                {
                    slot_of(op_name, key): Constant(
                        f"layer{layer}{suffix}/{row.tensors[key]}",
                        shape,
                        "float32",
                        _values(rnn, row, ParamKey(layer, direction, "", ""), key, shape),
                    )
                    for key, shape in shapes.items()
                }
            )
        layers.append(directions)
    activation = _activation_code(row, spec.mode)
    return build_graph(
        op_name, spec.input_size, (spec.hidden_size, spec.output_size), layers, {"activation": activation}
    )


def _values(rnn: CanonicalRNN, row: Row, cell: ParamKey, key: str, shape: tuple[int, ...]) -> Callable[[], Any]:
    """A loader of one stored tensor of a cell, made by the row's layouts from the canonical tensors it needs; a
    matrix still in a float32 source file, stacked in cuDNN's order (a state_dict, a weight space), stays there
    (a FileArray of its rows: written file to file)."""
    found = {per_gate(role, gate): (role, gate) for role in (*MATRIX_ROLES, BIAS) for gate in row.gate_order}
    role, gate = found.get(key, (PROJECTION, ""))

    def param(kind: str, which: str) -> np.ndarray:
        return rnn.param(ParamKey(cell.layer, cell.direction, kind, which))

    def load() -> Any:
        if role in MATRIX_ROLES and row.matrix is MATRIX_PER_GATE:  # the stored tensor is cuDNN's block itself
            block = _in_file(rnn, ParamKey(cell.layer, cell.direction, KIND_OF_ROLE[role], gate))
            if block is not None:
                return block
        out = {key: np.empty(shape, np.float32)}
        if role in MATRIX_ROLES:
            row.matrix.store(out, role, row.gate_order, gate, shape[0], param(KIND_OF_ROLE[role], gate))
        elif role == BIAS:
            row.bias.store(out, row.gate_order, gate, shape[0], *(param(kind, gate) for kind in BIAS_KINDS))
        else:
            out[key][...] = param(Kind.P, "")
        return out[key]

    return load


def _in_file(rnn: CanonicalRNN, key: ParamKey) -> FileArray | None:
    """A matrix's rows in the source file, when the source holds its gates stacked in cuDNN's order as float32."""
    stacked = rnn.stacked(key.layer, key.direction, key.kind)
    if not isinstance(stacked, FileArray) or stacked.dtype != np.float32:
        return None
    gates = 1 if key.kind == Kind.P else len(rnn.spec.gates)
    index = 0 if key.kind == Kind.P else rnn.spec.gates.index(key.gate)
    shape = rnn.spec.param_shape(key)
    if stacked.shape != (gates * shape[0], *shape[1:]):
        return None
    block: FileArray = stacked[index * shape[0] : (index + 1) * shape[0]]
    return block


def _activation_code(row: Row, mode: str) -> int:
    name = next(activation for activation, runs in row.modes.items() if runs == mode)
    return TFLITE_ACTIVATIONS[name]


def write_tflite(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> CanonicalRNN:
    rnn = registry.only_rnn(rnns, "a .tflite")
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
