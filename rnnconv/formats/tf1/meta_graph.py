"""The forget biases of a checkpoint's LSTM cells, read from the `.meta` graph Saver writes beside it, without
TensorFlow: the MetaGraphDef decoded by the tensor bundle's bounded protobuf reader.

`BasicLSTMCell` and `LSTMCell` add their `forget_bias` to the f gate when they run (`f + forget_bias`, f being output
2 of the Split of `[x, h] @ kernel + bias`); the checkpoint does not store it, the graph does, as the Const of that
Add (docs/LAYOUTS.md section 9). Each such Add is traced back from its Split, through the ops a value passes
unchanged (and into a While loop's body function through its arguments, control flow v2; through `Enter`, v1), to
the variables the cell reads: the forget bias is that kernel's. A kernel given two different ones is given none.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnconv.errors import BadInput
from rnnconv.formats.tf1.tensor_bundle import LENGTH, VARINT, Corrupt, _embedded, _message, _number
from rnnconv.formats.tf1.wire import (
    DT_DOUBLE,
    DT_FLOAT,
    META_ADDS,
    META_CONST,
    META_F_OUTPUT,
    META_PASS_THROUGH,
    META_SPLIT,
    META_WHILE_BODY,
    META_WHILES,
)
from rnnconv.safeio.inputs import add_guard, regular_file, unchanged

META_LIMIT = 256 << 20  # bytes: a graph that embeds large constants is still far below this
NODE_LIMIT = 1 << 20  # nodes of the graph and its functions together
TRACE_LIMIT = 64  # nodes visited tracing one Add back to its variables (the cell's are a few steps away)


@dataclass
class _Node:
    op: str
    inputs: list[str]
    attrs: dict[str, bytes]


@dataclass
class _Scope:
    """The graph (name "") or one function of its library: its nodes, and a function's argument names in order."""

    nodes: dict[str, _Node] = field(default_factory=dict)
    arguments: list[str] = field(default_factory=list)


def _node(data: bytes) -> tuple[str, _Node]:
    fields = _message(data, {1: LENGTH, 2: LENGTH, 3: LENGTH, 5: LENGTH})
    attrs = {}
    for entry in fields.get(5, []):
        assert isinstance(entry, bytes)
        pair = _message(entry, {1: LENGTH, 2: LENGTH})
        attrs[_embedded(pair, 1).decode()] = _embedded(pair, 2)
    inputs = [value.decode() for value in fields.get(3, []) if isinstance(value, bytes)]
    name, op = (_embedded(fields, n).decode() for n in (1, 2))
    return name, _Node(op, inputs, attrs)


def _scopes(data: bytes) -> dict[str, _Scope]:
    graph = _message(_embedded(_message(data, {2: LENGTH}), 2), {1: LENGTH, 2: LENGTH})
    scopes = {"": _Scope()}
    count = 0
    for encoded in graph.get(1, []):
        assert isinstance(encoded, bytes)
        name, node = _node(encoded)
        scopes[""].nodes[name] = node
        count += 1
    for function in _message(_embedded(graph, 2), {1: LENGTH}).get(1, []):
        assert isinstance(function, bytes)
        fields = _message(function, {1: LENGTH, 3: LENGTH})
        signature = _message(_embedded(fields, 1), {1: LENGTH, 2: LENGTH})
        scope = scopes.setdefault(_embedded(signature, 1).decode(), _Scope())
        for argument in signature.get(2, []):
            assert isinstance(argument, bytes)
            scope.arguments.append(_embedded(_message(argument, {1: LENGTH}), 1).decode())
        for encoded in fields.get(3, []):
            assert isinstance(encoded, bytes)
            name, node = _node(encoded)
            scope.nodes[name] = node
            count += 1
        if count > NODE_LIMIT:
            raise Corrupt(f"it holds more than {NODE_LIMIT} nodes")
    if count > NODE_LIMIT:
        raise Corrupt(f"it holds more than {NODE_LIMIT} nodes")
    return scopes


def _scalar(tensor: bytes) -> float | None:
    """A TensorProto's value if it is one float32 or float64 number, else None."""
    fields = _message(tensor, {1: VARINT, 2: LENGTH, 4: LENGTH, 5: LENGTH, 6: LENGTH})
    dims = _message(_embedded(fields, 2), {2: LENGTH}).get(2, [])
    width = {DT_FLOAT: "<f4", DT_DOUBLE: "<f8"}.get(_number(fields, 1))
    if dims or width is None:
        return None
    raw = _embedded(fields, 4) or _embedded(fields, 5 if width == "<f4" else 6)
    values = np.frombuffer(raw[: len(raw) - len(raw) % int(width[-1])], width)
    return float(values[-1]) if values.size == 1 else None


def _const(scope: _Scope, ref: str) -> float | None:
    node = scope.nodes.get(_name(ref))
    if node is None or node.op != META_CONST or "value" not in node.attrs:
        return None
    return _scalar(_embedded(_message(node.attrs["value"], {8: LENGTH}), 8))


def _name(ref: str) -> str:
    """The node an input names: `node`, `node:2` (a graph's), `node:output:2` (a function's); `^node` a control."""
    return ref.lstrip("^").split(":", 1)[0]


def _output(ref: str) -> int:
    parts = ref.split(":")
    return int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 0


def _callers(scopes: dict[str, _Scope]) -> dict[str, list[tuple[str, _Node]]]:
    """Each function that is a While loop's body, and the loops (their scope, their node) that run it."""
    callers: dict[str, list[tuple[str, _Node]]] = {}
    for scope_name, scope in scopes.items():
        for node in scope.nodes.values():
            if node.op in META_WHILES and META_WHILE_BODY in node.attrs:
                func = _embedded(_message(node.attrs[META_WHILE_BODY], {10: LENGTH}), 10)
                body = _embedded(_message(func, {1: LENGTH}), 1).decode()
                callers.setdefault(body, []).append((scope_name, node))
    return callers


def _variables(
    scopes: dict[str, _Scope], callers: dict[str, list[tuple[str, _Node]]], start: str, ref: str, names: set[str]
) -> set[str]:
    """The checkpoint's variables (of `names`) that the value `ref` of scope `start` is computed from through
    pass-through ops alone, a bounded walk."""
    found: set[str] = set()
    queue = deque([(start, ref)])
    seen = 0
    while queue and seen < TRACE_LIMIT:
        scope_name, ref = queue.popleft()
        seen += 1
        scope, name = scopes[scope_name], _name(ref)
        if scope_name == "" and name in names:
            found.add(name)
            continue
        node = scope.nodes.get(name)
        if node is None and name in scope.arguments:  # a body function's argument: the loop's input of that place
            index = scope.arguments.index(name)
            queue.extend(
                (outer, loop.inputs[index]) for outer, loop in callers.get(scope_name, ()) if index < len(loop.inputs)
            )
        elif node is not None and node.op in META_PASS_THROUGH:
            queue.extend((scope_name, i) for i in node.inputs if not i.startswith("^"))
    return found


def forget_biases(meta: Path, names: set[str]) -> dict[str, float]:
    """Each LSTM kernel's (of the checkpoint's tensor `names`) forget bias, as the `.meta` graph adds it; a kernel
    the graph gives two different ones is left out."""
    regular_file(meta, "the checkpoint's .meta graph")
    add_guard(unchanged(meta))
    with open(meta, "rb") as f:
        data = f.read(META_LIMIT + 1)
    if len(data) > META_LIMIT:
        raise BadInput(f"{meta} is more than {META_LIMIT} bytes, more than rnnconv reads of a .meta graph")
    try:
        scopes = _scopes(data)
        callers = _callers(scopes)
        biases: dict[str, set[float]] = {}
        for scope_name, scope in scopes.items():
            for node in scope.nodes.values():
                if node.op not in META_ADDS or len(node.inputs) != 2:
                    continue
                for gate, constant in (node.inputs, node.inputs[::-1]):
                    split = scope.nodes.get(_name(gate))
                    value = _const(scope, constant)
                    if split is None or split.op != META_SPLIT or _output(gate) != META_F_OUTPUT or value is None:
                        continue
                    if len(split.inputs) < 2:
                        continue
                    for variable in _variables(scopes, callers, scope_name, split.inputs[1], names):
                        biases.setdefault(variable, set()).add(value)
    except (Corrupt, UnicodeDecodeError, ValueError) as exc:
        raise BadInput(
            f"{meta} is not a readable MetaGraphDef ({exc}); state the forget bias with --forget-bias"
        ) from None
    return {variable: next(iter(values)) for variable, values in biases.items() if len(values) == 1}
