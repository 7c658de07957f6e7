"""Every number rnnconv writes into a .tflite, held against TFLite's own schema: the flatbuffers classes generated
from schema.fbs that LiteRT ships (`ai_edge_litert.schema_py_generated`), not numbers copied by hand.

The codes (operators, options, activations, tensor types, the options' slots) are compared with the schema's
enums and accessors; a model rnnconv writes is read back field by field through the generated classes, which
holds every slot number of the builder (a wrong one reads back as another field or as the default).
"""

from __future__ import annotations

import inspect
import json
import re

import numpy as np
import pytest
from conftest import FIXTURES

import rnnconv
from rnnconv.formats import sources
from rnnconv.formats.tflite import builder, wire
from rnnconv.formats.tflite.streaming import streaming_graph
from rnnconv.formats.tflite.writer import graph_of

schema = pytest.importorskip("ai_edge_litert.schema_py_generated")

# The options table of each op rnnconv writes or reads (schema.fbs's BuiltinOptions union).
OPTIONS_TABLES = {
    "CONCATENATION": "ConcatenationOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptions",
    "REVERSE_V2": "ReverseV2Options",
    "FULLY_CONNECTED": "FullyConnectedOptions",
    "ADD": "AddOptions",
    "SUB": "SubOptions",
    "MUL": "MulOptions",
    "SPLIT": "SplitOptions",
    "SPLIT_V": "SplitVOptions",
    "GATHER": "GatherOptions",
    "STRIDED_SLICE": "StridedSliceOptions",
    "RESHAPE": "ReshapeOptions",
    "PACK": "PackOptions",
    "UNPACK": "UnpackOptions",
}


def accessor(field: str) -> str:
    """The schema's accessor of an options field rnnconv names in snake case (activation: its fused one)."""
    return "FusedActivationFunction" if field == "activation" else "".join(w.title() for w in field.split("_"))


# Each options slot rnnconv names, as the schema's table calls its field.
SLOT_FIELDS = {
    "UnidirectionalSequenceLSTMOptions": (
        wire.LSTM_OPTION_SLOTS,
        {
            "activation": "FusedActivationFunction",
            "cell_clip": "CellClip",
            "proj_clip": "ProjClip",
            "time_major": "TimeMajor",
            "asymmetric_quantize_inputs": "AsymmetricQuantizeInputs",
            "diagonal": "DiagonalRecurrentTensors",
        },
    ),
    "SequenceRNNOptions": (
        wire.RNN_OPTION_SLOTS,
        {
            "time_major": "TimeMajor",
            "activation": "FusedActivationFunction",
            "asymmetric_quantize_inputs": "AsymmetricQuantizeInputs",
        },
    ),
    **{
        OPTIONS_TABLES[op]: (
            {name: slot for name, (slot, *_) in fields.items()},
            {name: accessor(name) for name in fields},
        )
        for op, fields in wire.TFLITE_OPTION_FIELDS.items()
    },
    "QuantizationParameters": (
        wire.QUANTIZATION_SLOTS,
        {"scale": "Scale", "zero_point": "ZeroPoint", "quantized_dimension": "QuantizedDimension"},
    ),
    "Tensor": ({"quantization": wire.TENSOR_QUANTIZATION_SLOT}, {"quantization": "Quantization"}),
    "Operator": ({"intermediates": wire.OPERATOR_INTERMEDIATES_SLOT}, {"intermediates": "Intermediates"}),
}
TENSOR_TYPES = {
    "float32": "FLOAT32",
    "float16": "FLOAT16",
    "int32": "INT32",
    "uint8": "UINT8",
    "int64": "INT64",
    "bool": "BOOL",
    "int16": "INT16",
    "int8": "INT8",
    "float64": "FLOAT64",
}


def slot(table: str, field: str) -> int:
    """The slot of a table's field, from its generated accessor (`self._tab.Offset(4 + 2 * slot)`)."""
    found = re.search(r"self\._tab\.Offset\((\d+)\)", inspect.getsource(getattr(getattr(schema, table), field)))
    assert found, (table, field)
    return (int(found.group(1)) - 4) // 2


def test_the_codes_are_the_schemas():
    assert {name: getattr(schema.BuiltinOperator, name) for name in wire.TFLITE_OPS} == wire.TFLITE_OPS
    assert {op: getattr(schema.BuiltinOptions, OPTIONS_TABLES[op]) for op in wire.TFLITE_OPTIONS} == wire.TFLITE_OPTIONS
    named = {name: "NONE" if name == "linear" else name.upper() for name in wire.TFLITE_ACTIVATIONS}
    assert {name: getattr(schema.ActivationFunctionType, named[name]) for name in named} == wire.TFLITE_ACTIVATIONS
    types = wire.TFLITE_TENSOR_TYPES
    assert {name: getattr(schema.TensorType, TENSOR_TYPES[name]) for name in types} == types


@pytest.mark.parametrize("table", sorted(SLOT_FIELDS))
def test_the_option_slots_are_the_schemas(table):
    slots, fields = SLOT_FIELDS[table]
    assert {name: slot(table, fields[name]) for name in slots} == slots


def _check_graph(data: bytes, graph: builder.Graph, recorded: bool) -> None:
    """The model read through the schema's classes holds what rnnconv's graph says it wrote, field by field (and,
    `recorded`, the source record the writer adds: one more buffer, named in the metadata)."""
    assert schema.Model.ModelBufferHasIdentifier(data, 0)
    model = schema.ModelT.InitFromPackedBuf(data, 0)
    assert model.version == wire.TFLITE_SCHEMA_VERSION and model.description == b"rnnconv"
    codes = list(dict.fromkeys(op for op, *_ in graph.ops))
    assert [(c.builtinCode, c.deprecatedBuiltinCode, c.version) for c in model.operatorCodes] == [
        (wire.TFLITE_OPS[op], min(wire.TFLITE_OPS[op], 127), 1) for op in codes
    ]
    (subgraph,) = model.subgraphs
    assert subgraph.name == b"main"
    assert list(subgraph.inputs) == graph.inputs and list(subgraph.outputs) == graph.outputs
    assert len(subgraph.tensors) == len(graph.tensors)
    for read, made in zip(subgraph.tensors, graph.tensors):
        assert read.name.decode() == made.name and list(read.shape) == made.shape
        assert read.type == wire.TFLITE_TENSOR_TYPES[made.dtype] and read.buffer == made.buffer
        assert bool(read.isVariable) == made.variable
        assert (None if read.shapeSignature is None else list(read.shapeSignature)) == made.signature
    assert len(subgraph.operators) == len(graph.ops)
    for read, (op, inputs, outputs, options) in zip(subgraph.operators, graph.ops):
        assert codes[read.opcodeIndex] == op and list(read.inputs) == inputs and list(read.outputs) == outputs
        if op in ("UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_LSTM"):
            assert read.builtinOptionsType == wire.TFLITE_OPTIONS[op]
            assert read.builtinOptions.fusedActivationFunction == options["activation"]
            assert not read.builtinOptions.timeMajor  # batch-major, as rnnconv writes x
        if op == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            assert read.builtinOptions.cellClip == options.get("cell_clip", 0.0)
            assert read.builtinOptions.projClip == options.get("proj_clip", 0.0)
        if op == "BIDIRECTIONAL_SEQUENCE_LSTM":
            assert read.builtinOptions.mergeOutputs == options.get("merge_outputs", True)
        if op == "CONCATENATION":
            assert read.builtinOptionsType == wire.TFLITE_OPTIONS[op] and read.builtinOptions.axis == options["axis"]
        if op == "REVERSE_V2":
            assert read.builtinOptionsType == 0
        if op in wire.TFLITE_OPTION_FIELDS:  # each field given as written, the rest the schema's defaults
            assert read.builtinOptionsType == wire.TFLITE_OPTIONS[op]
            for name, (_, kind, default) in wire.TFLITE_OPTION_FIELDS[op].items():
                got = getattr(read.builtinOptions, accessor(name)[0].lower() + accessor(name)[1:])
                got = list(got) if kind == "[i32]" and got is not None else got
                assert got == options.get(name, default), (op, name)
    assert len(model.buffers) == len(graph.buffers) + recorded
    for index, (read, made) in enumerate(zip(model.buffers, graph.buffers)):
        if made is None:
            assert read.data is None, index
        else:
            expected = np.ascontiguousarray(made.values(), builder.STORAGE[made.dtype]).tobytes()
            assert bytes(np.asarray(read.data, np.uint8)) == expected, made.name
    metadata = {m.name.decode(): m.buffer for m in model.metadata or []}
    assert metadata == ({sources.SOURCE_KEY: len(graph.buffers)} if recorded else {})
    if recorded:
        record = json.loads(bytes(np.asarray(model.buffers[-1].data, np.uint8)))
        assert record["path"] and record["format"]


@pytest.mark.parametrize(
    "source, options",
    [
        (FIXTURES / "torch" / "lstm_proj.pt", {}),  # projections, two layers
        (FIXTURES / "keras3" / "mixed.keras", {"layer": "bidi_lstm"}),  # two directions: REVERSE_V2, CONCATENATION
        (FIXTURES / "torch" / "rnn_tanh.pt", {}),
    ],
    ids=["lstm projection", "bidirectional lstm", "rnn"],
)
def test_a_written_model_reads_back_through_the_schema(source, options, tmp_path):
    path = tmp_path / "model.tflite"
    rnnconv.convert(source, path, **options)
    with rnnconv.load(source, **options) as (rnn,):  # the graph's constants are read from the source as compared
        _check_graph(path.read_bytes(), graph_of(rnn), recorded=True)


@pytest.mark.parametrize("layer", ["lstm", "gru", "rnn"])
def test_a_streaming_model_reads_back_through_the_schema(layer, tmp_path):
    source = FIXTURES / "streaming" / "stacks.pt"
    path = tmp_path / "stream.tflite"
    rnnconv.convert(source, path, layer=layer, streaming=True, chunk=3)
    with rnnconv.load(source, layer=layer) as (rnn,):
        _check_graph(path.read_bytes(), streaming_graph(rnn, 3), recorded=True)


def test_a_bidirectional_op_reads_back_through_the_schema():
    """BIDIRECTIONAL_SEQUENCE_LSTM's options, which the builder writes for the tests that make such files."""
    graph = builder.Graph()
    x = graph.activation("x", 3)
    y = graph.activation("y", 8)
    graph.inputs, graph.outputs = [x], [y]
    graph.ops.append(("BIDIRECTIONAL_SEQUENCE_LSTM", [x], [y], {"activation": 4, "merge_outputs": True}))
    _check_graph(builder.model_bytes(graph), graph, recorded=False)


def test_every_option_field_of_a_loop_bodys_ops_reads_back_through_the_schema():
    """Each field of the plain ops' options the builder writes again for a loop body's cell, set to a value of its
    own: each reads back as that field, none as another."""
    graph = builder.Graph()
    x = graph.activation("x", 3)
    graph.inputs = [x]
    for number, (op, fields) in enumerate(wire.TFLITE_OPTION_FIELDS.items()):
        options = {
            name: [2, -1, number] if kind == "[i32]" else 1 - default if kind == "u8" else number * 10 + k + 1
            for k, (name, (_, kind, default)) in enumerate(fields.items())
        }
        y = graph.activation(f"y{number}", 3)
        graph.ops.append((op, [x], [y], options))
        graph.outputs = [y]
    _check_graph(builder.model_bytes(graph), graph, recorded=False)
