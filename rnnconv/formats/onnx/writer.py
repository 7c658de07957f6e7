"""The ONNX graph of a canonical RNN: its nodes (weights stored as the table's ONNX row says) stacked into one
model, X (seq, batch, input) to Y, Y_h, Y_c; the same builder runs a source's own nodes in onnxruntime.

With --quantize, the weight matrices int8, symmetric, a scale per output channel: an LSTM as onnxruntime's
DynamicQuantizeLSTM (its hybrid kernel quantizes each step's inputs at run time), a GRU or an RNN as ONNX's own node
with DequantizeLinear (axis 1, a scale per row, shared by the two directions) before its W and R, which onnxruntime
computes in float with the dequantized weights."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.dtypes import element_type, encode
from rnnconv.errors import Unsupported
from rnnconv.formats import sources, writing
from rnnconv.formats._quantized import Quantization, largest_rounding, quantized_note, symmetric, written_record
from rnnconv.formats.onnx import profile as profiles
from rnnconv.formats.onnx.nodes import RNN_OPS
from rnnconv.formats.onnx.reader import require_onnx
from rnnconv.formats.onnx.wire import (
    ONNX_ACTIVATIONS,
    ONNX_DEFAULT_ACTIVATIONS,
    ONNX_DIRECTIONS,
    ONNX_ELEMENT_TYPES,
    ONNX_OPSET,
    ONNX_QUANTIZED_INPUTS,
    ONNX_QUANTIZED_OPS,
)
from rnnconv.formats.streaming import STATE_INPUT, STATE_OUTPUT, STREAM_INPUT, STREAM_OUTPUT
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row, row_for_mode
from rnnconv.table.constants import CUDNN_GATES, STATES

# The op each ONNX op is written as with --quantize, where onnxruntime has a quantized one (its hybrid kernel).
QUANTIZING_OPS = {base: op for op, (_, base) in ONNX_QUANTIZED_OPS.items()}


@dataclass
class Layer:
    """One node of a built graph: its op, attributes, and weights (W, R, B[, P], and a quantized op's scales and
    zero points) by input name."""

    op: str
    attributes: dict[str, Any]
    weights: dict[str, np.ndarray]
    domain: str = ""
    # the roles whose stored integers a DequantizeLinear node dequantizes before the node: role -> (scale, zero point)
    dequantized: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def layers_of(
    rnn: CanonicalRNN, dtype: str, quantize: str | None = None
) -> tuple[list[Layer], list[tuple[str, Quantization]], float]:
    """The ONNX nodes of a canonical RNN, its tensors stored as the table's ONNX row says; with `quantize`, its
    matrices quantized (an LSTM's node onnxruntime's quantized one), each quantized tensor's scheme, and the largest
    rounding of a weight."""
    spec = rnn.spec
    row, activation = row_for_mode("onnx", spec.mode, reset_after=spec.reset_after)
    attributes: dict[str, Any] = {
        "hidden_size": spec.hidden_size,
        "direction": "bidirectional" if spec.bidirectional else "forward",
        "layout": 0,  # stated, not left to the default: sequence-major, the only layout TensorRT takes
    }
    if row.source_class == "LSTM":
        attributes["input_forget"] = 0
    if "linear_before_reset" in row.when:
        attributes["linear_before_reset"] = row.when["linear_before_reset"]
    activations = _activations_for(row.source_class, activation, spec.num_directions)
    if activations:
        attributes["activations"] = activations
    hybrid = quantize is not None and row.source_class in QUANTIZING_OPS
    if hybrid:  # onnxruntime's quantized LSTM: its matrices transposed, no layout attribute (sequence-major)
        row = find_row("onnx", QUANTIZING_OPS[row.source_class])
        attributes.pop("layout")
    etype = element_type(dtype)
    layers: list[Layer] = []
    held: list[tuple[str, Quantization]] = []
    rounded = 0.0
    for layer in range(spec.num_layers):
        stored = [rnn.stored(row, layer, d) for d in range(spec.num_directions)]
        matrices = {
            "W": np.stack([s["input_matrix"] for s in stored]),
            "R": np.stack([s["recurrent_matrix"] for s in stored]),
        }
        dequantized: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if quantize is None:
            weights = {k: encode(v, etype) for k, v in matrices.items()}
        else:
            weights, dequantized, rounding = _quantized(matrices, layer, hybrid, quantize, held)
            rounded = max(rounded, rounding)
        if spec.bias:
            weights["B"] = encode(np.stack([s["bias"] for s in stored]), etype)
        domain = ONNX_QUANTIZED_OPS[row.source_class][0] if hybrid else ""
        layers.append(Layer(row.source_class, dict(attributes), weights, domain, dequantized))
    return layers, held, rounded


def _quantized(
    matrices: dict[str, np.ndarray], layer: int, hybrid: bool, quantize: str, held: list[tuple[str, Quantization]]
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]], float]:
    """A layer's W and R quantized, a scale per output channel: per direction and column (the hybrid op's own
    inputs), or per row (DequantizeLinear's one axis, shared by the directions); the node's weights, what
    DequantizeLinear nodes dequantize, and the largest rounding of a weight (each tensor's scheme added to `held`)."""
    weights, dequantized, rounded = {}, {}, 0.0
    for role, values in matrices.items():
        q, scales = symmetric(values, (0, 2) if hybrid else (1,), quantize)
        rounded = max(rounded, largest_rounding(values, q, scales))
        zeros = np.zeros(scales.shape, q.dtype)
        held.append(
            (f"{role}_{layer}", Quantization(tuple(scales.ravel().tolist()), (0,) * scales.size, 2 if hybrid else 1))
        )
        weights[role] = q
        if hybrid:  # (directions, 4H): a scale and zero point per direction and column
            weights[f"{role}_scale"], weights[f"{role}_zero_point"] = scales[:, 0, :], zeros[:, 0, :]
        else:
            dequantized[role] = (scales.ravel(), zeros.ravel())
    return weights, dequantized, rounded


def _activations_for(op: str, activation: str, directions: int) -> list[str] | None:
    """The activations attribute a node needs, or None when the op's default is it."""
    names = {value: key for key, value in ONNX_ACTIVATIONS.items()}
    default = list(ONNX_DEFAULT_ACTIVATIONS[op])
    wanted = [names[activation]] if op == "RNN" else default
    return None if wanted == default else wanted * directions


def build_model(layers: list[Layer], input_size: int, dtype: str, sequence_lens: bool = False) -> Any:
    """A model of the layers, stacked: X (seq, batch, input), initial_h[, initial_c] (layers*dirs, batch, hidden) ->
    Y (seq, batch, D*H), Y_h[, Y_c].

    Every consumer's form (docs/formats/onnx.md, "What every consumer takes"): the initial states are plain graph
    inputs (MNN and TensorRT take an initializer that is also an input as a constant), and every node names each
    input up to its last (B zeros where the RNN has none; sequence_lens every item's full length, from X's shape,
    or with `sequence_lens` an int32 (batch,) input): no empty names, which onnxjs refuses.
    """
    require_onnx()
    from onnx import TensorProto, helper

    elem = ONNX_ELEMENT_TYPES[dtype]
    storage = element_type(dtype).storage
    first = layers[0]
    hidden = int(first.attributes["hidden_size"])
    dirs = ONNX_DIRECTIONS[first.attributes.get("direction", "forward")]
    op = ONNX_QUANTIZED_OPS.get(first.op, ("", first.op))[1]
    lstm = op == "LSTM"
    depth = len(layers) * dirs
    nodes: list[Any] = []
    initializers: list[Any] = []
    constant = _constants(initializers, dtype)
    state_names = ["initial_h"] + (["initial_c"] if lstm else [])
    inputs = [helper.make_tensor_value_info("X", elem, ["seq", "batch", input_size])]
    inputs += [helper.make_tensor_value_info(state, elem, [depth, "batch", hidden]) for state in state_names]
    if sequence_lens:
        inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["batch"]))
    else:
        nodes += _full_lengths("X", constant)
    constant("merge_shape", np.array([0, 0, -1], np.int64))
    constant("state_axis", np.array([0], np.int64))
    x, hs, cs = "X", [], []
    for index, layer in enumerate(layers):
        names = _weight_names(layer, index, constant, storage)
        for role, (scale, zero) in layer.dequantized.items():  # a scale and zero point per row
            dequantizing = [
                names[role],
                constant(f"{role}_{index}_scale", scale),
                constant(f"{role}_{index}_zero", zero),
            ]
            names[role] = f"{role}_{index}_dequantized"
            nodes.append(helper.make_node("DequantizeLinear", dequantizing, [names[role]], axis=1))
        constant(f"layer_{index}_lo", np.array([index * dirs], np.int64))
        constant(f"layer_{index}_hi", np.array([(index + 1) * dirs], np.int64))
        for state in state_names:
            bounds = [f"layer_{index}_lo", f"layer_{index}_hi", "state_axis"]
            nodes.append(helper.make_node("Slice", [state, *bounds], [f"{state}_{index}"]))
        node_inputs = [
            x,
            names["W"],
            names["R"],
            names["B"],
            "sequence_lens",
            f"initial_h_{index}",
            f"initial_c_{index}" if lstm else "",
            names.get("P", ""),
            *(names.get(role, "") for role in ONNX_QUANTIZED_INPUTS),
        ]
        while not node_inputs[-1]:
            node_inputs.pop()
        node_outputs = [f"y_{index}", f"y_h_{index}"] + ([f"y_c_{index}"] if lstm else [])
        nodes.append(
            helper.make_node(
                layer.op, node_inputs, node_outputs, name=f"layer{index}", domain=layer.domain, **layer.attributes
            )
        )
        nodes.append(helper.make_node("Transpose", [f"y_{index}"], [f"y_t_{index}"], perm=[0, 2, 1, 3]))
        x = "Y" if index == len(layers) - 1 else f"x_{index + 1}"
        nodes.append(helper.make_node("Reshape", [f"y_t_{index}", "merge_shape"], [x]))
        hs.append(f"y_h_{index}")
        cs.append(f"y_c_{index}")
    nodes.append(helper.make_node("Concat", hs, ["Y_h"], axis=0))
    outputs = [
        helper.make_tensor_value_info("Y", elem, ["seq", "batch", dirs * hidden]),
        helper.make_tensor_value_info("Y_h", elem, [depth, "batch", hidden]),
    ]
    if lstm:
        nodes.append(helper.make_node("Concat", cs, ["Y_c"], axis=0))
        outputs.append(helper.make_tensor_value_info("Y_c", elem, [depth, "batch", hidden]))
    return _model(layers, nodes, inputs, outputs, initializers)


def _full_lengths(x: str, constant: Callable[[str, np.ndarray], str]) -> list[Any]:
    """The nodes that give `sequence_lens`, every item's full length: the first dimension of `x` (steps, batch,
    ...), once per batch item."""
    from onnx import TensorProto, helper

    return [
        helper.make_node("Shape", [x], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", constant("steps_index", np.array([0], np.int64))], ["steps"]),
        helper.make_node("Gather", ["x_shape", constant("batch_index", np.array([1], np.int64))], ["batch"]),
        helper.make_node("Expand", ["steps", "batch"], ["full_lengths"]),
        helper.make_node("Cast", ["full_lengths"], ["sequence_lens"], to=TensorProto.INT32),
    ]


def _weight_names(
    layer: Layer, index: int, constant: Callable[[str, np.ndarray], str], storage: np.dtype
) -> dict[str, str]:
    """The initializers of a layer's weights by role, B zeros where it has none (and P, before a quantized op's
    scales: zeros, no peepholes)."""
    dirs = ONNX_DIRECTIONS[layer.attributes.get("direction", "forward")]
    hidden = int(layer.attributes["hidden_size"])
    op = ONNX_QUANTIZED_OPS.get(layer.op, ("", layer.op))[1]
    weights = dict(layer.weights)
    weights.setdefault("B", np.zeros((dirs, 2 * len(CUDNN_GATES[RNN_OPS[op]]) * hidden), storage))
    if layer.domain:
        weights.setdefault("P", np.zeros((dirs, 3 * hidden), storage))
    return {role: constant(f"{role}_{index}", values) for role, values in weights.items()}


def _constants(initializers: list[Any], dtype: str) -> Callable[[str, np.ndarray], str]:
    """A function that adds an initializer of given values to `initializers` and gives its name."""
    from onnx import TensorProto, numpy_helper

    def constant(name: str, values: np.ndarray) -> str:
        tensor = numpy_helper.from_array(np.ascontiguousarray(values), name)
        if dtype == "bfloat16" and values.dtype == np.uint16:
            tensor.data_type = TensorProto.BFLOAT16
        initializers.append(tensor)
        return name

    return constant


def _model(
    layers: list[Layer], nodes: list[Any], inputs: list[Any], outputs: list[Any], initializers: list[Any]
) -> Any:
    """The checked model of a graph's nodes, the opsets its layers' ops need imported."""
    onnx = require_onnx()
    from onnx import helper

    graph = helper.make_graph(nodes, "rnnconv", inputs, outputs, initializers)
    domains = [helper.make_opsetid(d, 1) for d in sorted({layer.domain for layer in layers} - {""})]
    opsets = [helper.make_opsetid("", ONNX_OPSET), *domains]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="rnnconv")
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime reads
    onnx.checker.check_model(model)
    return model


def build_streaming_model(layers: list[Layer], input_size: int, dtype: str) -> Any:
    """A streaming model of the layers (one direction each): x (batch, chunk, input) and each layer's states h_l0
    (batch, output), c_l0 (an LSTM's) to y (batch, chunk, output) and the new states h_l0_next, ...; each node given
    every input by name, none left to a default or empty (every consumer's form, as `build_model`'s; layout 0: the
    nodes take and give sequence-major tensors)."""
    require_onnx()
    from onnx import helper

    elem = ONNX_ELEMENT_TYPES[dtype]
    storage = element_type(dtype).storage
    hidden = int(layers[0].attributes["hidden_size"])
    lstm = layers[0].op == "LSTM"
    nodes: list[Any] = []
    initializers: list[Any] = []
    constant = _constants(initializers, dtype)
    constant("state_axis", np.array([0], np.int64))  # a node's states are (directions, batch, size)
    constant("direction_axis", np.array([1], np.int64))  # its Y is (steps, directions, batch, size)
    inputs = [helper.make_tensor_value_info(STREAM_INPUT, elem, ["batch", "chunk", input_size])]
    outputs = []
    nodes.append(helper.make_node("Transpose", [STREAM_INPUT], ["x_steps"], perm=[1, 0, 2]))
    nodes += _full_lengths("x_steps", constant)
    x = "x_steps"
    for index, layer in enumerate(layers):
        names = _weight_names(layer, index, constant, storage)
        states, news, news_names = [], [], []
        for state in STATES if lstm else STATES[:1]:
            name, new = STATE_INPUT.format(state=state, layer=index), STATE_OUTPUT.format(state=state, layer=index)
            inputs.append(helper.make_tensor_value_info(name, elem, ["batch", hidden]))
            outputs.append(helper.make_tensor_value_info(new, elem, ["batch", hidden]))
            nodes.append(helper.make_node("Unsqueeze", [name, "state_axis"], [f"{name}_node"]))
            states.append(f"{name}_node")
            news.append(f"{new}_node")
            news_names.append(new)
        node_inputs = [x, names["W"], names["R"], names["B"], "sequence_lens", *states]
        node_outputs = [f"y_{index}", *news]
        nodes.append(helper.make_node(layer.op, node_inputs, node_outputs, name=f"layer{index}", **layer.attributes))
        nodes += [helper.make_node("Squeeze", [f"{new}_node", "state_axis"], [new]) for new in news_names]
        x = f"x_{index + 1}"
        nodes.append(helper.make_node("Squeeze", [f"y_{index}", "direction_axis"], [x]))
    nodes.append(helper.make_node("Transpose", [x], [STREAM_OUTPUT], perm=[1, 0, 2]))
    outputs.insert(0, helper.make_tensor_value_info(STREAM_OUTPUT, elem, ["batch", "chunk", hidden]))
    return _model(layers, nodes, inputs, outputs, initializers)


def write_onnx(
    rnns: list[CanonicalRNN],
    path: Path,
    dtype: str,
    force: bool,
    profile: str | None = None,
    streaming: bool = False,
    quantize: str | None = None,
) -> list[str]:
    """The file, and the warnings its writing gives (what --quantize wrote)."""
    rnn = writing.only_rnn(rnns, "an .onnx")
    build = build_streaming_model if streaming else build_model
    layers, held, rounded = layers_of(rnn, dtype, quantize)
    model = build(layers, rnn.spec.input_size, dtype)
    if profile is not None and (broken := profiles.broken(model, profiles.check_profile(profile))):
        raise Unsupported(f"{rnn.name} cannot be written within {profile}'s limits: {broken[0].line(profile)}")
    warnings = []
    if quantize is not None:  # the record says what was written: verify holds the file to it
        quantized = written_record(rnn, held, quantize, rounded, inputs_quantized=bool(layers[0].domain))
        rnn = dataclasses.replace(rnn, source=rnn.source.model_copy(update={"quantized": quantized}))
        warnings.append(quantized_note(rnn.name, quantized, "ONNX"))
    entry = model.metadata_props.add()  # where the RNN came from, for `verify model.onnx`
    entry.key, entry.value = sources.SOURCE_KEY, sources.source_record(rnn, path)
    with atomic_outputs([path], force) as (tmp,):
        tmp.write_bytes(model.SerializeToString())
    return warnings
