"""One ONNX RNN node read: its attributes, each of the type its op defines, its weights (stored, folded from
constants, or dequantized), and the RNN nodes an exporter unrolled into per-step operations, as nodes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rnnconv.core.contracts import RoundedInput
from rnnconv.core.dtypes import element_type
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats._cells import LoopLayer, Reading
from rnnconv.formats._graph import chained
from rnnconv.formats._quantized import QUANTIZED_RANGES, Quantization, dequantized, exact_dtype, quantization
from rnnconv.formats.onnx.folding import SUBGRAPH, Folder, NotFoldable, Scope, node_name
from rnnconv.formats.onnx.loops import Loop
from rnnconv.formats.onnx.unrolled import Cell, Unrolled
from rnnconv.formats.onnx.wire import (
    ONNX_ACTIVATIONS,
    ONNX_ATTRIBUTES,
    ONNX_DEFAULT_ACTIVATIONS,
    ONNX_DIRECTIONS,
    ONNX_ELEMENT_TYPES,
    ONNX_FLAGS,
    ONNX_INPUTS,
    ONNX_ONE_OP_ATTRIBUTES,
    ONNX_OPS,
    ONNX_QUANTIZED_INPUTS,
    ONNX_QUANTIZED_OPS,
)
from rnnconv.table.constants import CUDNN_GATES, CUDNN_MODES, NONLINEARITIES
from rnnconv.table.rows import GRU_GATES_ZRH, ONNX_LSTM_GATES, RNN_GATES

MAX_HIDDEN = 1 << 20  # far beyond any real RNN; keeps sizes computed from a hostile file small
RNN_OPS = {op: cell for cell, op in ONNX_OPS.items()}
# The inputs a QuantizeLinear/DequantizeLinear pair may round, as a RoundedInput names them.
ROUNDED_VALUES: dict[str, Literal["x", "h0", "c0"]] = {"X": "x", "initial_h": "h0", "initial_c": "c0"}
ONNX_GATE_ORDER = {"LSTM": ONNX_LSTM_GATES, "GRU": GRU_GATES_ZRH, "RNN": RNN_GATES}  # the ONNX rows' orders
ONNX_MODE_ACTIVATIONS = {
    mode: op for op, name in ONNX_ACTIVATIONS.items() for act, mode in NONLINEARITIES.items() if name == act
}


@dataclass
class OnnxNode:
    """One LSTM/GRU/RNN node: its attributes and weights (W, R, B, P as numpy, one row per direction)."""

    name: str  # the node's name, after the path of the subgraph it is in (If_1::then_branch::LSTM)
    op: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any]
    weights: dict[str, np.ndarray]
    dtype: str
    short: str = ""  # the node's own name
    refusal: str | None = None  # why its weights cannot be read (computed in a way rnnconv does not fold)
    sources: dict[str, frozenset[str]] = field(default_factory=dict)  # role -> the stored tensors it comes from
    source_class: str = ""  # the node's op as the table's rows name it: op, or a quantized op
    unrolled: int = 0  # for an RNN an exporter unrolled into per-step ops: its steps
    stored: dict[str, np.ndarray] = field(default_factory=dict)  # a quantized node's inputs as stored (int8 W, R...)
    qdq: dict[str, tuple[str, Quantization]] = field(default_factory=dict)  # role -> its DequantizeLinear's q, scales
    rounded: list[str] = field(default_factory=list)  # its inputs that QuantizeLinear/DequantizeLinear pairs round
    rounding: list[RoundedInput] = field(default_factory=list)  # how they round them (layer 0: set in the chain)
    probed: float | None = None  # a cell read by what it computes: how far its reading was from it on probes
    scanned: bool = False  # a cell that is a Scan's body, stepped over the Scan's sequence
    loops: list[Loop] = field(default_factory=list)  # the Loops stepping its cell (its directions), where it is theirs
    quantized_type: str | None = None  # the integer type its weights are stored in, where they are quantized

    def __post_init__(self) -> None:
        self.source_class = self.source_class or self.op

    @property
    def hidden(self) -> int:
        return int(self.attributes["hidden_size"])

    @property
    def direction(self) -> str:
        return str(self.attributes["direction"])

    @property
    def directions(self) -> int:
        return ONNX_DIRECTIONS[self.direction]

    @property
    def shown_class(self) -> str:
        if self.scanned or self.loops:
            return f"{self.op} cell ({'Scan' if self.scanned else 'Loop'} body)"
        if self.probed is not None and self.unrolled > 1:
            return f"{self.op} cell (unrolled, {self.unrolled} steps)"
        if self.probed is not None or self.source_class.endswith(" cell"):
            return f"{self.op} cell (unrolled)"
        if self.source_class.endswith(" cell"):
            return f"{self.source_class} (unrolled)"
        return f"{self.source_class} (unrolled, {self.unrolled} steps)" if self.unrolled else self.source_class

    @property
    def quantized(self) -> bool:
        return self.source_class in ONNX_QUANTIZED_OPS

    @property
    def input_size(self) -> int:
        return int(self.weights["W"].shape[1 if self.quantized else 2])

    @property
    def width(self) -> int:
        return self.directions * self.hidden

    @property
    def sized(self) -> bool:
        """Whether its weights tell its sizes (a node refused before they were read has none)."""
        w = self.weights.get("W")
        return w is not None and w.ndim == 3 and w.shape[2] >= 1

    @property
    def kind(self) -> object:
        """What the nodes of one RNN have alike; None for a node whose weights are not read (a quantized node
        chains, converting or not) or that is batch-major (layout=1: the exporters' glue moves no such Y)."""
        if "W" not in self.weights or int(self.attributes.get("layout", 0)):
            return None
        config = self.config()
        return self.source_class, self.op, self.hidden, self.direction, self.activations(), config

    def expected_shapes(self, input_size: int) -> dict[str, tuple[int, ...]]:
        """The shape each weight must have (a quantized op's W and R are transposed)."""
        dirs, hidden = self.directions, self.hidden
        rows = len(CUDNN_GATES[RNN_OPS[self.op]]) * hidden
        if self.quantized:
            matrices = {"W": (dirs, input_size, rows), "R": (dirs, hidden, rows)}
        else:
            matrices = {"W": (dirs, rows, input_size), "R": (dirs, rows, hidden)}
        return {**matrices, "B": (dirs, 2 * rows), "P": (dirs, 3 * hidden)}

    def activations(self) -> list[str]:
        names = self.attributes.get("activations")
        default = ONNX_DEFAULT_ACTIVATIONS[self.op]
        if names is None:
            return list(default) * self.directions
        return [str(n) for n in names]

    def config(self) -> dict[str, Any]:
        """The node as the table's ONNX row reads it (activation names, linear_before_reset)."""
        acts = self.activations()
        per = len(ONNX_DEFAULT_ACTIVATIONS[self.op])
        first = acts[:per]
        named = [ONNX_ACTIVATIONS.get(a, a.lower()) for a in first]
        config: dict[str, Any] = {"activation": named[-1] if self.op != "LSTM" else named[1]}
        if self.op != "RNN":
            config["recurrent_activation"] = named[0]
        if self.op == "LSTM" and named[1] != named[2]:
            config["activation"] = f"{named[1]} (cell input) with {named[2]} (cell output)"
        if "linear_before_reset" in self.attributes:
            config["linear_before_reset"] = int(self.attributes["linear_before_reset"])
        return config


def _float_weights(values: np.ndarray, what: str) -> tuple[np.ndarray, str]:
    """A weight tensor as numpy floats (bfloat16 widened to float32 exactly) and its dtype's name."""
    if values.dtype.name == "bfloat16":
        words = np.ascontiguousarray(values).view(np.uint16)
        return (words.astype(np.uint32) << np.uint32(16)).view(np.float32), "bfloat16"
    names = {element_type(name).storage: name for name in ONNX_ELEMENT_TYPES if name != "bfloat16"}
    if values.dtype not in names:
        raise BadInput(f"{what} is of type {values.dtype}, not a float type rnnconv reads")
    return np.asarray(values), names[values.dtype]


def attribute_value(attribute: Any) -> Any:
    from onnx import helper

    return helper.get_attribute_value(attribute)


def _attributes(node: Any, name: str, op: str) -> dict[str, Any]:
    """The node's attributes, each of the type and range its op (`op`: the one a quantized op quantizes) defines."""
    attributes: dict[str, Any] = {}
    for attribute in node.attribute:
        expected = ONNX_ATTRIBUTES.get(attribute.name)
        if expected is None or ONNX_ONE_OP_ATTRIBUTES.get(attribute.name, op) != op:
            raise Unsupported(f"node {name!r} has an attribute {attribute.name!r} that {node.op_type} does not define")
        if attribute.type != expected:
            raise BadInput(f"node {name!r}: attribute {attribute.name!r} is not of the type {node.op_type} defines")
        value = attribute_value(attribute)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        attributes[attribute.name] = value
    hidden = attributes.get("hidden_size")
    if not isinstance(hidden, int) or not 1 <= hidden <= MAX_HIDDEN:
        raise BadInput(f"node {name!r}: hidden_size is {hidden!r}, not a size from 1 to {MAX_HIDDEN}")
    if attributes.setdefault("direction", "forward") not in ONNX_DIRECTIONS:
        raise BadInput(f"node {name!r}: direction {attributes['direction']!r} is not forward, reverse or bidirectional")
    for flag in ONNX_FLAGS:
        if attributes.get(flag, 0) not in (0, 1):
            raise BadInput(f"node {name!r}: {flag} is {attributes[flag]}, not 0 or 1")
    return attributes


def is_rnn(node: Any) -> bool:
    """An ONNX RNN node, or a quantized one of onnxruntime's domain."""
    if node.op_type in RNN_OPS:
        return node.domain in ("", "ai.onnx")
    return node.op_type in ONNX_QUANTIZED_OPS and node.domain == ONNX_QUANTIZED_OPS[node.op_type][0]


def read_node(node: Any, index: int, scope: Scope, folding: Folder, dequantize: bool) -> OnnxNode:
    """One RNN node (or quantized RNN node), its attributes and the shapes of its weights checked against each
    other. Weights computed in a way rnnconv cannot fold leave the node listed, with the reason."""
    short = node_name(node, index)
    name = scope.qualified(short)
    quantized = node.op_type in ONNX_QUANTIZED_OPS
    op = ONNX_QUANTIZED_OPS[node.op_type][1] if quantized else node.op_type
    roles = ONNX_INPUTS + (ONNX_QUANTIZED_INPUTS if quantized else ())
    if len(node.input) > len(roles):
        raise BadInput(f"node {name!r} has {len(node.input)} inputs; {node.op_type} has {len(roles)}")
    inputs = list(node.input) + [""] * (len(roles) - len(node.input))
    attributes = _attributes(node, name, op)
    stored, sources, refusal, qdq, stored_types = {}, {}, None, {}, {}
    for role in ("W", "R", "B", "P", *ONNX_QUANTIZED_INPUTS):
        source = inputs[roles.index(role)] if role in roles else ""
        if not source:
            continue
        try:
            dequantizing = _dequantize_node(source, scope)
            if dequantizing is None:
                stored[role] = folding.value(source, scope)
            else:
                stored[role], qdq[role], stored_types[role] = _qdq_weight(
                    dequantizing, scope, folding, f"node {name!r}: its {role}"
                )
                source = dequantizing.input[0]
        except NotFoldable as exc:
            refusal = (
                refusal or f"node {name!r}: its {role} is computed in the graph in a way rnnconv does not fold: {exc}"
            )
            continue
        sources[role] = folding.stored_sources(source, scope)
    if not inputs[roles.index("W")] or not inputs[roles.index("R")]:
        raise BadInput(f"node {name!r} has no W or R input")
    found = OnnxNode(name, op, inputs, list(node.output), attributes, {}, "", short, refusal, sources, node.op_type)
    found.qdq = qdq
    if quantized and inputs[roles.index("W")] and "W" in stored:
        stored_types["W"] = stored["W"].dtype.name  # the quantized op's int8 or uint8 W
    found.quantized_type = "/".join(sorted(set(stored_types.values()))) or None
    if refusal is not None:
        return found
    if qdq:  # one type for the node's weights: float64 where a product of a scale and an integer needs it
        wide = exact_dtype(stored[role] for role in qdq)
        stored.update({role: values.astype(wide) for role, values in stored.items() if role in ("W", "R", "B", "P")})
        found.refusal = _qdq_refusal(found, scope, folding, dequantize)
    if quantized:
        found.stored = stored
        stored = _dequantized(found, stored)
        if not dequantize:
            found.refusal = (
                f"node {name!r} is a quantized LSTM ({node.op_type}) whose W and R are int8 dynamically quantized "
                f"weights, which cuDNN does not compute with; --dequantize converts the float model they "
                f"approximate, (q - zero_point) * scale"
            )
    dtypes = []
    for role in ("W", "R", "B", "P"):
        if role in stored:
            found.weights[role], dtype = _float_weights(stored[role], f"node {name!r}: its {role}")
            dtypes.append(dtype)
    w = found.weights["W"]
    n_in = w.shape[1 if quantized else 2] if w.ndim == 3 else -1
    expected = found.expected_shapes(n_in)
    for role, values in found.weights.items():
        if values.shape != expected[role] or n_in < 1:
            raise BadInput(
                f"node {name!r}: {role} has shape {tuple(values.shape)}, but a {found.directions}-direction "
                f"{node.op_type} with hidden_size {found.hidden} needs {expected[role]}"
            )
    if len(set(dtypes)) > 1:
        raise BadInput(f"node {name!r}: its weights are of different types ({', '.join(dtypes)})")
    found.dtype = dtypes[0]
    return found


def _dequantize_node(value: str, scope: Scope) -> Any | None:
    """The standard DequantizeLinear node computing `value`, None where another node or no node does."""
    owner = scope.owner(value)
    if owner is None or value not in owner.produced:
        return None
    node = owner.produced[value][0]
    return node if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx") else None


def _qdq_weight(
    node: Any, scope: Scope, folding: Folder, where: str
) -> tuple[np.ndarray, tuple[str, Quantization], str]:
    """A weight a DequantizeLinear node computes of stored integers, `scale * (q - zero_point)` per tensor or per
    channel along its axis, exactly (float32 where that holds every product, else float64), with its quantization
    and the integers' type."""
    inputs = list(node.input) + [""] * (3 - len(node.input))
    if len(node.input) > 3 or not inputs[0] or not inputs[1]:
        raise BadInput(f"{where} is computed by a DequantizeLinear node without its quantized values and scale")
    q, scale = folding.value(inputs[0], scope), folding.value(inputs[1], scope)
    if q.dtype not in (np.int8, np.uint8):
        raise BadInput(f"{where} is DequantizeLinear of {q.dtype} values, not int8 or uint8 ones rnnconv reads")
    zero = folding.value(inputs[2], scope) if inputs[2] else np.zeros(scale.shape, q.dtype)
    if scale.dtype != np.float32 or zero.dtype != q.dtype or scale.ndim > 1 or zero.shape != scale.shape:
        raise BadInput(
            f"{where}: its DequantizeLinear's scale ({scale.dtype}, shape {list(scale.shape)}) and zero point "
            f"({zero.dtype}, shape {list(zero.shape)}) are not float32 and {q.dtype} of one shape, one or one per "
            f"channel"
        )
    axis = next((attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
    if not isinstance(axis, int) or not -q.ndim <= axis < q.ndim:
        raise BadInput(f"{where}: its DequantizeLinear's axis {axis!r} is no axis of a {q.ndim}-dimensional tensor")
    if scale.ndim == 1 and scale.size == 1:
        scale, zero = scale.reshape(()), zero.reshape(())
    quant = quantization(
        scale.ravel().tolist(), zero.ravel().tolist(), axis % q.ndim, tuple(q.shape), str(q.dtype), where
    )
    values = dequantized(q, quant)
    return values.astype(exact_dtype([values])), (inputs[0], quant), q.dtype.name


def _rounding(pair: Any, role: str, scope: Scope, folding: Folder, where: str) -> RoundedInput:
    """An input a QuantizeLinear and DequantizeLinear pair (`pair`: the DequantizeLinear) rounds: clamped to the
    integer type's range and rounded to its scale's steps, the pair's scales and zero points one and the same."""
    quantizing = _producer(pair.input[0], scope) if pair.input else None
    if quantizing is None or quantizing.op_type != "QuantizeLinear" or len(pair.input) < 2:
        raise BadInput(f"{where}: its {role} is DequantizeLinear of no QuantizeLinear's output, nor stored integers")
    parts = []
    for node in (quantizing, pair):
        inputs = list(node.input) + [""] * (3 - len(node.input))
        try:
            scales = folding.value(inputs[1], scope)
            zeros = folding.value(inputs[2], scope) if inputs[2] else np.zeros((), np.uint8)
        except NotFoldable as exc:
            raise Unsupported(
                f"{where}: its {role}'s {node.op_type} has a scale or zero point rnnconv cannot compute ({exc})"
            ) from None
        if scales.size != 1 or zeros.size != 1 or zeros.dtype.name not in QUANTIZED_RANGES:
            raise Unsupported(
                f"{where}: its {role} is rounded by a {node.op_type} of {scales.size} scales and {zeros.size} zero "
                f"points of type {zeros.dtype}: rnnconv reads a per-tensor rounding to int8 or uint8 steps"
            )
        parts.append((float(scales.reshape(-1)[0]), int(zeros.reshape(-1)[0]), zeros.dtype.name))
    if parts[0] != parts[1]:
        raise Unsupported(
            f"{where}: its {role}'s QuantizeLinear and DequantizeLinear have different scales or zero points, which "
            f"round and rescale it: no RNN's input is rescaled"
        )
    scale, zero, dtype = parts[0]
    quantization([scale], [zero], 0, (1,), dtype, f"{where}: its {role}'s rounding")  # its scale and zero point
    low, high = QUANTIZED_RANGES[dtype]
    value = ROUNDED_VALUES[role]
    by = f"QuantizeLinear/DequantizeLinear {node_name(pair, 0)!r}"
    return RoundedInput(value=value, layer=0, low=(low - zero) * scale, step=scale, levels=high - low + 1, by=by)


def _producer(value: str, scope: Scope) -> Any | None:
    owner = scope.owner(value)
    return owner.produced[value][0] if owner is not None and value in owner.produced else None


def _qdq_refusal(node: OnnxNode, scope: Scope, folding: Folder, dequantize: bool) -> str | None:
    """Why a node whose weights are dequantized integers is not read without --dequantize; its inputs that
    QuantizeLinear/DequantizeLinear pairs round too (quantized activations: the chain refuses them without
    --allow-lossy) kept with how they are rounded."""
    for role in ROUNDED_VALUES:
        value = node.inputs[ONNX_INPUTS.index(role)]
        pair = _dequantize_node(value, scope) if value else None
        if pair is not None:
            node.rounded.append(role)
            try:
                node.rounding.append(_rounding(pair, role, scope, folding, f"node {node.name!r}"))
            except Unsupported as exc:
                return str(exc)
    if dequantize:
        return None
    roles = ", ".join(node.qdq)
    return (
        f"node {node.name!r} has its {roles} computed by DequantizeLinear of stored integers (quantized weights); "
        f"--dequantize reads them exactly as scale * (q - zero_point), the float model the node computes with"
    )


def _dequantized(node: OnnxNode, stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A quantized LSTM's W and R as floats, (q - zero_point) * scale, per direction or per column as the
    contrib op defines; B and P as they are."""
    out: dict[str, np.ndarray] = {role: stored[role] for role in ("B", "P") if role in stored}
    for role in ("W", "R"):
        scale_role, zero_role = f"{role}_scale", f"{role}_zero_point"
        if scale_role not in stored or zero_role not in stored:
            raise BadInput(f"node {node.name!r} has no {scale_role} or {zero_role}")
        q, scale, zero = stored[role], stored[scale_role], stored[zero_role]
        if q.dtype not in (np.int8, np.uint8) or zero.dtype != q.dtype:
            raise BadInput(
                f"node {node.name!r}: its {role} is of type {q.dtype} and its zero point of type {zero.dtype}; "
                f"{node.source_class} takes int8 or uint8 for both"
            )
        if scale.dtype != np.float32:
            raise BadInput(f"node {node.name!r}: its {scale_role} is of type {scale.dtype}, not float32")
        dirs = node.directions
        if q.ndim != 3 or q.shape[0] != dirs or scale.shape not in ((dirs,), (dirs, q.shape[2])):
            raise BadInput(
                f"node {node.name!r}: {role} has shape {tuple(q.shape)} and {scale_role} {tuple(scale.shape)}, "
                f"which do not fit a {dirs}-direction {node.source_class}"
            )
        if zero.shape != scale.shape:
            raise BadInput(f"node {node.name!r}: {zero_role} has shape {tuple(zero.shape)}, {scale_role} {scale.shape}")
        for d in range(dirs):  # each direction's scales finite and positive, its zero points within the type's range
            where = f"the {scale_role} of node {node.name!r} (direction {d})"
            quantization(scale[d].ravel().tolist(), zero[d].ravel().tolist(), 1, q.shape[1:], str(q.dtype), where)
        per = (slice(None), None, slice(None)) if scale.ndim == 2 else (slice(None), None, None)
        centred = q.astype(np.int32) - zero.astype(np.int32)[per]
        out[role] = centred.astype(np.float32) * scale[per]
    return out


def unrolled_layer(layer: list[Unrolled]) -> OnnxNode:
    """An RNN layer from recognised recurrences (one direction, or forward and reverse), as an RNN node would hold
    it: W (D, H, in), R (D, H, H), B (D, 2H)."""
    first = layer[0]
    name = "+".join(u.name for u in layer)
    directions = "bidirectional" if len(layer) == 2 else "reverse" if first.flipped else "forward"
    activation = first.steps[0].activation.op_type
    attributes: dict[str, Any] = {
        "hidden_size": first.hidden,
        "direction": directions,
        "activations": [activation] * len(layer),
    }
    zeros = np.zeros(2 * first.hidden, first.weights["W"].dtype)
    stored = {role: [u.weights.get(role, zeros) for u in layer] for role in ("W", "R", "B")}
    if not any("B" in u.weights for u in layer):
        del stored["B"]
    for role, values in stored.items():  # forward and reverse over one input, but not one layer's two directions
        if len({v.shape for v in values}) > 1:
            shapes = " and ".join(str(tuple(v.shape)) for v in values)
            reason = (
                f"the per-step operations at {name!r} read one input forward and in reverse like a bidirectional "
                f"RNN, but the two directions' {role} differ in shape ({shapes})"
            )
            return _refused_unrolled(name, len(first.steps), reason)
    weights = {role: np.stack(values) for role, values in stored.items()}
    found = {role: _float_weights(values, f"the unrolled RNN {name!r}: its {role}") for role, values in weights.items()}
    dtypes = {dtype for _, dtype in found.values()}
    if len(dtypes) > 1:
        raise BadInput(f"the unrolled RNN {name!r}: its weights are of different types ({', '.join(sorted(dtypes))})")
    node = OnnxNode(name, "RNN", [first.x], [], attributes, {r: v for r, (v, _) in found.items()}, dtypes.pop())
    node.short, node.unrolled = name.split(SUBGRAPH)[-1], len(first.steps)
    return node


def unrolled_refused(recurrence: Unrolled) -> OnnxNode:
    """Steps that look like an unrolled RNN but are not one, listed with what did not match."""
    name = recurrence.name
    reason = (
        f"the {len(recurrence.steps)} per-step {recurrence.steps[0].activation.op_type} operations at {name!r} look "
        f"like an unrolled RNN, but {recurrence.refusal}"
    )
    return _refused_unrolled(name, len(recurrence.steps), reason)


def _refused_unrolled(name: str, steps: int, reason: str) -> OnnxNode:
    node = OnnxNode(name, "RNN", [], [], {"hidden_size": 1, "direction": "forward"}, {}, "", refusal=reason)
    node.short, node.unrolled = name.rsplit(SUBGRAPH, maxsplit=1)[-1], steps
    return node


def unrolled_cell(cell: Cell, steps: int = 1, scanned: bool = False) -> OnnxNode:
    """A cell unrolled into matrix products and activations (stepped `steps` times, or a Scan's body over its
    sequence: one layer of an RNN): read as the RNN node of one layer that computes what it computes, or listed
    with its sizes and why it does not convert."""
    if cell.reading is not None:
        node = _cell_node(cell.name, [cell.reading], steps)
        node.scanned = scanned
        return node
    reason = (
        f"{cut(cell.name)!r} looks like {'a' if cell.kind == 'GRU' else 'an'} {cell.kind} cell unrolled into matrix "
        f"products and activations, but it {cell.refusal}; convert the checkpoint it was exported from (its weights "
        f"are {', '.join(repr(cut(w)) for w in cell.weights)})"
    )
    gates = len(CUDNN_GATES[RNN_OPS[cell.kind]])
    sizes = {"W": np.broadcast_to(np.float32(0), (1, gates * cell.hidden, cell.input_size))}  # shapes only
    node = OnnxNode(
        cell.name, cell.kind, [], [], {"hidden_size": cell.hidden, "direction": "forward"}, sizes, "float32"
    )
    node.refusal, node.short, node.source_class = reason, cell.name.split(SUBGRAPH)[-1], f"{cell.kind} cell"
    node.unrolled = 1
    return node


def _cell_node(name: str, readings: list[Reading], steps: int) -> OnnxNode:
    """The RNN node (one layer: forward, or forward and backward) recognised cells are: each one's gates in the ONNX
    row's order."""
    reading = readings[0]
    op = ONNX_OPS[CUDNN_MODES[reading.mode][0]]
    order = ONNX_GATE_ORDER[op]
    w, r, bw, br = ([[one.gates[g][k] for g in order] for one in readings] for k in range(4))
    weights = {"W": np.stack([np.concatenate(d) for d in w]), "R": np.stack([np.concatenate(d) for d in r])}
    if any(one.has_bias for one in readings):
        weights["B"] = np.stack([np.concatenate(f + b) for f, b in zip(bw, br)])
    direction = "bidirectional" if len(readings) == 2 else "forward"
    attributes: dict[str, Any] = {"hidden_size": reading.hidden, "direction": direction}
    if op == "GRU":
        attributes["linear_before_reset"] = int(reading.reset_after)
    if op == "RNN":
        attributes["activations"] = [ONNX_MODE_ACTIVATIONS[one.mode] for one in readings]
    found = {role: _float_weights(values, f"the cell {name!r}: its {role}") for role, values in weights.items()}
    dtypes = {dtype for _, dtype in found.values()}
    if len(dtypes) > 1:
        raise BadInput(f"the cell {name!r}: its weights are of different types ({', '.join(sorted(dtypes))})")
    node = OnnxNode(name, op, [reading.x], [], attributes, {role: v for role, (v, _) in found.items()}, dtypes.pop())
    node.short, node.unrolled = name.rsplit(SUBGRAPH, maxsplit=1)[-1], steps
    node.probed = max(one.error for one in readings)
    return node


def looped_chains(layers: list[LoopLayer[Loop]]) -> list[list[OnnxNode]]:
    """Loop layers as nodes, in runs of the layers of one RNN (each reading the output sequence of the one below)."""
    read = {id(layer): looped_layer(layer) for layer in layers}
    below = {id(read[id(layer)]): read[id(layer.below)] for layer in layers if layer.below is not None}
    return chained(list(read.values()), lambda node: below.get(id(node)))


def looped_layer(layer: LoopLayer[Loop]) -> OnnxNode:
    """A layer of Loops stepping a cell (forward, or forward and backward): read as the RNN node that computes what
    they compute, or listed with its sizes and why it does not convert."""
    first = layer.loops[0]
    name = "+".join(loop.name for loop in layer.loops)
    refusal = next((loop.refusal for loop in layer.loops if loop.refusal is not None), None)
    readings = [loop.reading for loop in layer.loops if loop.reading is not None]
    if refusal is None and len(readings) == len(layer.loops):
        node = _cell_node(name, readings, 1)  # a reset-before GRU: linear_before_reset=0
    else:
        gates, input_size, hidden = first.sizes
        op = {1: "RNN", 3: "GRU", 4: "LSTM"}.get(gates, "RNN")
        reason = (
            f"Loop {cut(first.name)!r} steps matrix products like {'a' if op == 'GRU' else 'an'} {op} cell, but "
            f"{refusal}; convert the model it was exported from"
        )
        shapes = (1, len(CUDNN_GATES[RNN_OPS[op]]) * hidden, input_size)
        sizes = {"W": np.broadcast_to(np.float32(0), shapes)} if hidden and input_size else {}
        node = OnnxNode(name, op, [], [], {"hidden_size": max(hidden, 1), "direction": "forward"}, sizes, "float32")
        node.refusal, node.short, node.source_class = reason, name.split(SUBGRAPH)[-1], f"{op} cell"
    node.loops = layer.loops
    return node


def fingerprint(node: OnnxNode) -> str:
    """What a node computes, as one string: op, attributes, and its weights' types, shapes and bytes (hashed)."""
    digest = hashlib.blake2b(repr((node.op, node.source_class, sorted(node.attributes.items()))).encode())
    for role in sorted(node.weights):
        values = np.ascontiguousarray(node.weights[role])
        digest.update(f"{role}{values.dtype}{values.shape}".encode())
        digest.update(values.view(np.uint8).reshape(-1).data if values.size else b"")
    return digest.hexdigest()


def why_refused(node: OnnxNode) -> str | None:
    """Why cuDNN cannot compute a node, beyond what the table's row says."""
    if node.refusal is not None:
        return node.refusal
    if "clip" in node.attributes:
        return f"node {node.name!r} clips its cell state (clip={node.attributes['clip']}), which cuDNN does not"
    if int(node.attributes.get("input_forget", 0)):
        return f"node {node.name!r} couples its input and forget gates (input_forget=1), which cuDNN does not"
    if "P" in node.weights and np.any(node.weights["P"]):
        return f"node {node.name!r} has peephole weights (P), which cuDNN's LSTM has not"
    acts = node.activations()
    per = len(ONNX_DEFAULT_ACTIVATIONS[node.op])
    if len(acts) != per * node.directions or (node.directions == 2 and acts[:per] != acts[per:]):
        return (
            f"node {cut(node.name)!r} uses activations {listing(acts)}: cuDNN computes both directions with the same "
            "ones"
        )
    if "activation_alpha" in node.attributes or "activation_beta" in node.attributes:
        return f"node {node.name!r} gives its activations alpha/beta parameters, which cuDNN's have not"
    return None
