"""What each ONNX consumer takes of an RNN node, as data: every limit once, the consumers it binds, and where it is
documented (docs/formats/onnx.md, "Consumer profiles", cites each). `broken` checks a model against one consumer's.

Limits are checked on the file as it is (its main graph and every If, Loop or Scan body in it, as deep as the reader
goes), not on rnnconv's reading of it: a consumer reads the nodes, not the RNN they compute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rnnconv.errors import BadInput, cut, first_line
from rnnconv.formats.onnx.folding import Scope, scopes
from rnnconv.formats.onnx.wire import (
    ONNX_DEFAULT_ACTIVATIONS,
    ONNX_DIRECTIONS,
    ONNX_ELEMENT_TYPES,
    ONNX_PROFILES,
    ONNX_QUANTIZED_OPS,
)

TENSORRT_OPSETS: Final = (9, 20)  # TensorRT 10.0's operators.md: "opset 9 to opset 20"
MNN_ACTIVATIONS: Final = ("Sigmoid", "Tanh", "Relu")  # OnnxLSTMMerge.cpp's _turnStringToAct


@dataclass(frozen=True)
class Limit:
    """One thing a consumer does not take: what it is, who it binds, and where that is documented."""

    name: str
    rule: str  # what the file must do, as a sentence's end: "input_forget must be 0"
    consumers: tuple[str, ...]
    source: str


LIMITS: Final = (
    Limit(
        "onnx-op",
        "the RNN must be ONNX's own op, not onnxruntime's com.microsoft one",
        ("tensorrt", "mnn"),
        "onnx-tensorrt docs/operators.md lists ONNX's operators only; measured with mnn 3.6.1: \"These Op Not "
        'Support: ONNX::DynamicQuantizeLSTM"',
    ),
    Limit("opset", "the default domain's opset must be 9 to 20", ("tensorrt",), "onnx-tensorrt docs/operators.md"),
    Limit(
        "element-type",
        "tensors must be float32, float16 or bfloat16",
        ("tensorrt",),
        "onnx-tensorrt docs/operators.md (LSTM, GRU, RNN: FP32, FP16, BF16)",
    ),
    Limit(
        "input-forget",
        "input_forget must be 0",
        ("tensorrt", "mnn"),
        "onnx-tensorrt docs/operators.md; MNN's OnnxLSTMMerge.cpp does not read it",
    ),
    Limit(
        "layout",
        "layout must be 0",
        ("tensorrt", "mnn"),
        "onnx-tensorrt docs/operators.md; MNN's converter does not read it",
    ),
    Limit(
        "same-activations",
        "both directions must have the same activations",
        ("tensorrt", "mnn"),
        "onnx-tensorrt docs/operators.md; MNN's OnnxLSTMMerge.cpp reads the first direction's only",
    ),
    Limit(
        "mnn-activations",
        "activations must be ones MNN computes (an LSTM's Sigmoid, Tanh or Relu; a GRU's and an RNN's their defaults: "
        "MNN computes tanh for an RNN whatever its activations say)",
        ("mnn",),
        "MNN's OnnxLSTMMerge.cpp reads activations only where there are three (an LSTM's), OnnxSequenceGRUMerge.cpp; "
        "measured with mnn 3.6.1: an RNN with Relu computes tanh",
    ),
    Limit("bias", "B must be given", ("mnn",), "MNN issue 1890 (LSTM not support optional 4th input)"),
    Limit(
        "state-inputs",
        "graph inputs must have no initializer (MNN makes such an input a constant: initial states given are ignored)",
        ("mnn",),
        "MNN's onnxConverter.cpp (inputs with an initializer are constants); measured with mnn 3.6.1",
    ),
    Limit("peepholes", "P (peepholes) must not be given", ("mnn",), "MNN's OnnxLSTMMerge.cpp"),
    Limit(
        "stored-weights",
        "W and R must be stored, not computed by DequantizeLinear (quantized weights, --quantize)",
        ("mnn",),
        "measured with mnn 3.6.1: a GRU whose W and R DequantizeLinear computes gives other numbers (0.63 off)",
    ),
    Limit(
        "sequence-lens",
        "sequence_lens must not be a graph input (MNN runs every item the full length)",
        ("mnn",),
        "MNN's OnnxLSTMMerge.cpp and OnnxSequenceGRUMerge.cpp",
    ),
    Limit("clip", "clip must not be set (MNN ignores it)", ("mnn",), "MNN's converter does not read it"),
    Limit(
        "linear-before-reset",
        "a GRU's linear_before_reset must be 1",
        ("mnn",),
        "measured with mnn 3.6.1: a GRU with linear_before_reset=0 computes other numbers",
    ),
    Limit("empty-inputs", "no input may be named '' (left out)", ("ort-web",), "onnxjs issue 167"),
)
LIMIT_BY_NAME: Final = {limit.name: limit for limit in LIMITS}


@dataclass(frozen=True)
class Facts:
    """What the checks read of the model beyond a node, found once (per node it made the checks quadratic on a graph
    of many nodes and many inputs or initializers)."""

    opsets: tuple[int, ...]  # the default domain's opset versions
    initialized_inputs: bool  # a main-graph input has an initializer
    inputs: dict[int, set[str]]  # each graph's input names, by the graph's id


def facts_of(model: Any, found: list[Scope]) -> Facts:
    main = model.graph
    return Facts(
        opsets=tuple(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        initialized_inputs=bool({i.name for i in main.initializer} & {i.name for i in main.input}),
        inputs={id(scope.graph): {i.name for i in scope.graph.input} for scope in found},
    )


def _attributes(node: Any) -> dict[str, Any]:
    """A node's attributes by name, as values (bytes decoded in lists), read once for every check."""
    from onnx import helper

    found = {}
    for attribute in node.attribute:
        value = helper.get_attribute_value(attribute)
        found[attribute.name] = (
            [v.decode() if isinstance(v, bytes) else v for v in value] if isinstance(value, list) else value
        )
    return found


@dataclass(frozen=True)
class Node:
    """One RNN node as the checks see it: the node, its attributes, its graph and what is known of the model."""

    node: Any
    attributes: dict[str, Any]
    scope: Scope
    facts: Facts

    def attribute(self, name: str, default: Any) -> Any:
        return self.attributes.get(name, default)

    def input(self, index: int) -> str:
        return self.node.input[index] if len(self.node.input) > index else ""

    def activations(self) -> list[str]:
        directions = ONNX_DIRECTIONS.get(self.attribute("direction", b"forward").decode(), 1)
        default = list(ONNX_DEFAULT_ACTIVATIONS[self.node.op_type]) * directions
        return [str(a) for a in self.attribute("activations", default)]


def _same_activations(node: Node) -> bool:
    acts = node.activations()
    half = len(acts) // 2
    return node.attribute("direction", b"forward") != b"bidirectional" or acts[:half] == acts[half:]


def _mnn_activations(node: Node) -> bool:
    acts = node.activations()
    if node.node.op_type in ("GRU", "RNN"):  # MNN reads no activations of theirs
        default = ONNX_DEFAULT_ACTIVATIONS[node.node.op_type]
        return acts == list(default) * (len(acts) // len(default))
    return all(a in MNN_ACTIVATIONS for a in acts)


def _element_types(node: Node) -> bool:
    allowed = {ONNX_ELEMENT_TYPES[name] for name in ("float32", "float16", "bfloat16")}
    owners = ((name, node.scope.owner(name)) for name in node.node.input[1:4] if name)
    return all(owner.stored[name].data_type in allowed for name, owner in owners if owner and name in owner.stored)


def _stored_weights(node: Node) -> bool:
    """Whether no DequantizeLinear node computes W or R."""
    for name in node.node.input[1:3]:
        owner = node.scope.owner(name) if name else None
        if owner is not None and name in owner.produced and owner.produced[name][0].op_type == "DequantizeLinear":
            return False
    return True


def _lengths_given(node: Node) -> bool:
    """Whether sequence_lens is an input of the graph that defines it (the node's, or one around it)."""
    lengths = node.input(4)
    owner = node.scope.owner(lengths) if lengths else None
    return owner is not None and lengths in node.facts.inputs[id(owner.graph)]


def _opset(node: Node) -> bool:
    return all(TENSORRT_OPSETS[0] <= v <= TENSORRT_OPSETS[1] for v in node.facts.opsets)


# Each limit's check: True where the node (in its graph, in its model) keeps it.
CHECKS: Final[dict[str, Callable[[Node], bool]]] = {
    "onnx-op": lambda node: node.node.domain in ("", "ai.onnx"),
    "opset": _opset,
    "element-type": _element_types,
    "input-forget": lambda node: not node.attribute("input_forget", 0),
    "layout": lambda node: not node.attribute("layout", 0),
    "same-activations": _same_activations,
    "mnn-activations": _mnn_activations,
    "bias": lambda node: bool(node.input(3)),
    "state-inputs": lambda node: not node.facts.initialized_inputs,
    "peepholes": lambda node: not node.input(7),
    "stored-weights": _stored_weights,
    "sequence-lens": lambda node: not _lengths_given(node),
    "clip": lambda node: node.attribute("clip", None) is None,
    "linear-before-reset": lambda node: node.node.op_type != "GRU" or node.attribute("linear_before_reset", 0) == 1,
    "empty-inputs": lambda node: all(node.node.input),
}


@dataclass(frozen=True)
class Broken:
    node: str
    limit: Limit

    def line(self, profile: str) -> str:
        return f"node {cut(self.node)!r}: {self.limit.rule} for {profile} ({self.limit.source})"


def broken(model: Any, profile: str) -> list[Broken]:
    """Each RNN node's limits of `profile` that the model breaks, node by node, in the main graph and in every
    subgraph (a node in one is named after its path: Loop_0::body::LSTM)."""
    found, graphs = [], scopes(model.graph)
    facts = facts_of(model, graphs)
    for scope in graphs:
        for index, node in enumerate(scope.graph.node):
            own = node.op_type in ONNX_DEFAULT_ACTIVATIONS and node.domain in ("", "ai.onnx")
            if not own and node.op_type not in ONNX_QUANTIZED_OPS:
                continue
            name = scope.qualified(node.name or f"#{index} ({node.op_type})")
            seen = Node(node, _attributes(node), scope, facts)
            kept = (limit for limit in LIMITS if profile in limit.consumers and (own or limit.name == "onnx-op"))
            found += [Broken(name, limit) for limit in kept if not CHECKS[limit.name](seen)]
    return found


def broken_in_file(path: Path, profile: str) -> list[str]:
    """Each limit of `profile` the RNN nodes of an ONNX file break, a line each."""
    from rnnconv.formats.onnx.reader import require_onnx

    onnx, profile = require_onnx(), check_profile(profile)
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's errors: the reader read it, so only a file changed meanwhile gets here
        raise BadInput(f"{path.name} cannot be read as an ONNX model: {first_line(exc)}") from None
    return [item.line(profile) for item in broken(model, profile)]


def check_profile(profile: str) -> str:
    if profile not in ONNX_PROFILES:
        raise BadInput(f"unknown --profile {profile!r} (choose {', '.join(ONNX_PROFILES)})")
    return profile
