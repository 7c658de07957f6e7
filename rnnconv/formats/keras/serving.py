"""The activations a SavedModel without a Keras config (a Keras 3 `model.export`) applies, read from the While loop
bodies of its serving graph, without TensorFlow.

Keras 3 runs a recurrent layer on TensorFlow as a While loop whose body function computes one step of its cell:
the gate pre-activations split from `x @ kernel + h @ recurrent_kernel + bias` (an LSTM's 4, a GRU's 3 input-side
parts added to its recurrent-side parts, the reset gate's times the candidate's), each passed through the layer's
`activation` or `recurrent_activation`. A body is read as a cell only where every gate's pre-activation has one
activation op applied to it (or Keras 3's `hard_sigmoid`, relu6(x + 3) / 6) and the state update is the cell's:
anything else (a custom activation, another cell) says nothing. The bodies are not tied to their layers by name:
the bodies of each cell class settle the activations of that class's layers only when there are as many as the
layers have cells and they all agree. `saved_model.pb` is decoded by the bounded protobuf reader of the TF1 format's
`.meta` graphs; nothing is run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.errors import BadInput
from rnnconv.formats.keras.wire import (
    SERVING_ACTIVATIONS,
    SERVING_ADD,
    SERVING_BIAS_ADD,
    SERVING_DIVIDE,
    SERVING_HARD_SIGMOID,
    SERVING_IDENTITY,
    SERVING_MATMUL,
    SERVING_MULTIPLY,
    SERVING_RELU6,
    SERVING_SPLIT,
    SERVING_SUBTRACT,
)
from rnnconv.formats.tf1.meta_graph import META_LIMIT, _callers, _const, _name, _output, _Scope, _scopes
from rnnconv.formats.tf1.tensor_bundle import LENGTH, VARINT, Corrupt, _message
from rnnconv.safeio.inputs import read_array, regular_file
from rnnconv.table.apply import rows_for
from rnnconv.table.constants import CUDNN_GATES, GRU, LSTM, RNN

Value = tuple[str, int]  # a node's output (or a function's argument, output 0)
Settings = tuple[str, str | None]  # (activation, recurrent_activation): None for a simple RNN's
# The Keras classes whose activations are settings, by cell family: their rows' gate orders are the splits' orders.
SETTABLE = [row for row in rows_for("keras") if row.adapter and row.unstored and not row.refusal]
KERAS_CLASS = {row.cell: row.source_class for row in SETTABLE}
GATE_ORDER = {row.cell: row.gate_order for row in SETTABLE}
INPUT_GATE, FORGET_GATE, CELL_GATE, OUTPUT_GATE = CUDNN_GATES[LSTM]
RESET_GATE, UPDATE_GATE, NEW_GATE = CUDNN_GATES[GRU]
HARD_SIGMOID_SHIFT, HARD_SIGMOID_SCALE = 3.0, 6.0  # Keras 3's hard_sigmoid: relu6(x + 3) / 6


class _Body:
    """One loop body: its nodes, and who consumes each value."""

    def __init__(self, scope: _Scope):
        self.nodes = scope.nodes
        self.scope = scope
        self.users: dict[Value, list[str]] = {}
        for name, node in scope.nodes.items():
            for ref in node.inputs:
                if not ref.startswith("^"):
                    self.users.setdefault(_value(ref), []).append(name)

    def op(self, value: Value) -> str | None:
        node = self.nodes.get(value[0])
        return node.op if node is not None else None

    def inputs(self, name: str) -> list[Value]:
        return [_value(ref) for ref in self.nodes[name].inputs if not ref.startswith("^")]

    def only_user(self, value: Value) -> str | None:
        """The one node that uses `value` (Identity nodes, which hand it out of the step, aside), else None."""
        users = [u for u in self.users.get(value, []) if self.nodes[u].op != SERVING_IDENTITY]
        return users[0] if len(users) == 1 else None

    def constant(self, value: Value) -> float | None:
        return _const(self.scope, value[0]) if self.op(value) is not None else None

    def node_of(self, op: str, *operands: Value) -> Value | None:
        """The node `op(a, b)` (either order) of the values given, else None."""
        for name in self.users.get(operands[0], []):
            node = self.nodes[name]
            if node.op == op and sorted(self.inputs(name)) == sorted(operands):
                return (name, 0)
        return None

    def activation(self, value: Value) -> tuple[str, Value] | None:
        """The activation applied to `value`, by its Keras name, and its output."""
        user = self.only_user(value)
        if user is None:
            return None
        node = self.nodes[user]
        if node.op in SERVING_ACTIVATIONS and self.inputs(user) == [value]:
            return SERVING_ACTIVATIONS[node.op], (user, 0)
        others = [v for v in self.inputs(user) if v != value]
        if node.op != SERVING_ADD or len(others) != 1 or self.constant(others[0]) != HARD_SIGMOID_SHIFT:
            return None
        relu6 = self.only_user((user, 0))
        if relu6 is None or self.nodes[relu6].op != SERVING_RELU6:
            return None
        divide = self.only_user((relu6, 0))
        if divide is None or self.nodes[divide].op != SERVING_DIVIDE:
            return None
        if self.inputs(divide)[:1] != [(relu6, 0)] or self.constant(self.inputs(divide)[-1]) != HARD_SIGMOID_SCALE:
            return None
        return SERVING_HARD_SIGMOID, (divide, 0)

    def products(self, name: str) -> bool:
        """Whether the node adds a product of a matrix (MatMul, or a MatMul with its bias added): its first operands
        followed, each node once (a damaged graph's inputs may run in a cycle)."""
        seen: set[str] = set()
        while name not in seen:
            seen.add(name)
            node = self.nodes.get(name)
            if node is None or node.op not in (SERVING_MATMUL, SERVING_BIAS_ADD, SERVING_ADD):
                return False
            operands = self.inputs(name)
            if node.op == SERVING_MATMUL or not operands:
                return node.op == SERVING_MATMUL
            name = operands[0][0]
        return False


def _value(ref: str) -> Value:
    return _name(ref), _output(ref)


def _splits(body: _Body, parts: int) -> Iterator[list[Value]]:
    """The outputs of each Split of a product into `parts` parts."""
    for name, node in body.nodes.items():
        if node.op == SERVING_SPLIT and len(node.inputs) == 2 and body.products(_name(node.inputs[1])):
            outputs = {output for (user, output) in body.users if user == name}
            if outputs == set(range(parts)):
                yield [(name, k) for k in range(parts)]


def _lstm(body: _Body) -> Settings | None:
    """An LSTM step: i, f, o = rec(split), c~ = act(split), c' = f*c + i*c~, h' = o*act(c')."""
    order = GATE_ORDER[LSTM]
    for split in _splits(body, len(order)):
        gates = {gate: body.activation(split[order.index(gate)]) for gate in order}
        if any(g is None for g in gates.values()):
            continue
        i, f, c, o = (gates[g] for g in (INPUT_GATE, FORGET_GATE, CELL_GATE, OUTPUT_GATE))
        assert i and f and c and o
        if len({i[0], f[0], o[0]}) != 1:
            continue
        kept = [body.node_of(SERVING_MULTIPLY, f[1], other) for other in _others(body, f[1])]
        added = body.node_of(SERVING_MULTIPLY, i[1], c[1])
        new_c = next((body.node_of(SERVING_ADD, k, added) for k in kept if k and added), None)
        squashed = body.activation(new_c) if new_c else None
        if squashed and squashed[0] == c[0] and body.node_of(SERVING_MULTIPLY, o[1], squashed[1]):
            return c[0], i[0]
    return None


def _others(body: _Body, value: Value) -> list[Value]:
    """The other operands of the nodes that use `value`."""
    return [v for user in body.users.get(value, []) for v in body.inputs(user) if v != value]


def _gru(body: _Body) -> Settings | None:
    """A reset-after GRU step: z, r = rec(x_z + h_z), rec(x_r + h_r); h~ = act(x_h + r*h_h); h' = z*h + (1-z)*h~."""
    order = GATE_ORDER[GRU]
    for split in _splits(body, len(order)):
        users = [body.only_user(split[order.index(gate)]) for gate in (UPDATE_GATE, RESET_GATE, NEW_GATE)]
        sums = [user for user in users if user is not None and body.nodes[user].op == SERVING_ADD]
        if len(sums) != len(order):
            continue
        update, reset, new = (body.activation((added, 0)) for added in sums)
        if not (update and reset and new) or update[0] != reset[0]:
            continue
        recurrent = [v for v in body.inputs(sums[2]) if v != split[order.index(NEW_GATE)]]
        if len(recurrent) != 1 or body.op(recurrent[0]) != SERVING_MULTIPLY:
            continue
        if reset[1] not in body.inputs(recurrent[0][0]):  # the reset times the recurrent part: reset_after=True
            continue
        kept = [s for s in body.users.get(update[1], []) if body.nodes[s].op == SERVING_SUBTRACT]
        if any(body.node_of(SERVING_MULTIPLY, (s, 0), new[1]) for s in kept):
            return new[0], update[0]
    return None


def _simple(body: _Body) -> Settings | None:
    """A simple RNN step: h' = act(x @ kernel + bias + h @ recurrent_kernel), and no split."""
    if any(node.op == SERVING_SPLIT for node in body.nodes.values()):
        return None
    applied = [
        body.activation((name, 0))
        for name, node in body.nodes.items()
        if node.op == SERVING_ADD
        and len(body.inputs(name)) == 2
        and all(body.products(v[0]) for v in body.inputs(name))
    ]
    found = {each[0] for each in applied if each}
    return (found.pop(), None) if applied and all(applied) and len(found) == 1 else None


CELLS = ((LSTM, _lstm), (GRU, _gru), (RNN, _simple))


def loop_activations(saved_model: Path) -> dict[str, list[Settings]]:
    """Per Keras layer class (LSTM, GRU, SimpleRNN), the settings of each loop body of the SavedModel's graph read as
    one of its cells."""
    size = regular_file(saved_model, "the SavedModel's saved_model.pb")
    if size > META_LIMIT:
        raise BadInput(f"{saved_model} is {size} bytes, more than rnnconv reads of a SavedModel's graphs")
    data = read_array(saved_model, 0, np.uint8, (size,)).tobytes()
    try:
        graphs = _message(data, {1: VARINT, 2: LENGTH}).get(2, [])
        if len(graphs) != 1:  # which graph serves is then a tag's to say
            return {}
        assert isinstance(graphs[0], bytes)
        scopes = _scopes(graphs[0])
    except (Corrupt, UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"{saved_model} is not a readable SavedModel ({exc})") from None
    found: dict[str, list[Settings]] = {}
    for name in _callers(scopes):
        if name not in scopes:
            continue
        body = _Body(scopes[name])
        for cell, read in CELLS:
            settings = read(body)
            if settings is not None:
                found.setdefault(KERAS_CLASS[cell], []).append(settings)
                break
    return found
