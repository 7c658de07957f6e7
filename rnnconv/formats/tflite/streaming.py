"""The streaming .tflite: each layer's cell written out step by step in plain ops that LiteRT and TFLite Micro both
run (FULLY_CONNECTED, ADD, SUB, MUL, LOGISTIC, TANH, RELU, SPLIT, UNPACK, PACK), its states graph inputs and outputs.

Not the fused ops: they keep their states in variable tensors (state between calls, which a streaming model must not
have), TFLite Micro has no UNIDIRECTIONAL_SEQUENCE_RNN, and neither runtime has a fused GRU; so a GRU streams too.
The steps of a chunk are unrolled, so a model takes one chunk length (--chunk, default 1), as TFLite Micro takes one
shape of every tensor anyway; the batch is 1 in the file (what TFLite Micro runs), -1 in its shape signature (LiteRT
resizes it). Each layer's matrices are stored as cuDNN stacks its gates (the table's PyTorch row: weight_ih, weight_hh,
bias_ih, bias_hh, weight_hr), (gates*hidden, input) as FULLY_CONNECTED takes its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.formats.streaming import STATE_INPUT, STATE_OUTPUT, STREAM_INPUT, STREAM_OUTPUT
from rnnconv.formats.tflite.builder import Constant, Graph, GraphTensor
from rnnconv.formats.tflite.wire import TIME_AXIS, UNSET
from rnnconv.formats.writing import stored
from rnnconv.table.apply import row_for_mode
from rnnconv.table.constants import (
    CUDNN_GATES,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    LSTM,
    PROJECTION,
    RECURRENT_BIAS,
    RECURRENT_MATRIX,
    STATES,
)

ROW_FORMAT = "torch"  # the row whose stacked matrices FULLY_CONNECTED takes as they are
ACTIVATION_OPS = {"sigmoid": "LOGISTIC", "tanh": "TANH", "relu": "RELU"}
# Every op a streaming model is written with, and how many inputs and outputs it has (None: as many as its count).
STREAMING_OPS: dict[str, tuple[int | None, int | None]] = {
    "FULLY_CONNECTED": (3, 1),
    "ADD": (2, 1),
    "SUB": (2, 1),
    "MUL": (2, 1),
    "SPLIT": (2, None),
    "UNPACK": (1, None),
    "PACK": (None, 1),
    **dict.fromkeys(ACTIVATION_OPS.values(), (1, 1)),
}
GATE_FEATURES = 1  # the axis of a step's (batch, gates*hidden) that SPLIT cuts into gates


@dataclass
class _Cell:
    """What one step of one layer needs: its constants' tensors, its widths, its gate order and activation."""

    tensors: dict[str, int]
    gates: tuple[str, ...]
    activation: str
    out: int


def streaming_graph(rnn: CanonicalRNN, chunk: int) -> Graph:
    """The streaming graph of a one-direction RNN: x (1, chunk, input) and each layer's states (1, size) to y and the
    new states, each step of each layer's cell in plain ops."""
    spec = rnn.spec
    row, activation = row_for_mode(ROW_FORMAT, spec.mode, reset_after=spec.reset_after)
    graph = Graph()
    x = graph.tensor(GraphTensor(STREAM_INPUT, [1, chunk, spec.input_size], [UNSET, chunk, spec.input_size]))
    graph.inputs = [x]
    steps = [_activation(graph, f"x_t{t}", spec.input_size) for t in range(chunk)]
    graph.ops.append(("UNPACK", [x], list(steps), {"num": chunk, "axis": TIME_AXIS}))
    axis = graph.constant(Constant("gate_axis", (), "int32", lambda: _scalar(GATE_FEATURES)))
    finals = []
    for layer in range(spec.num_layers):
        held = stored(rnn, row, layer, 0, bias=True)
        tensors = {
            key: graph.constant(Constant(f"layer{layer}/{key}", tensor.shape, "float32", tensor.values))
            for key, tensor in held.items()
        }
        cell = _Cell(tensors, row.gate_order, activation, spec.output_size)
        widths = {"h": spec.output_size, "c": spec.hidden_size}
        names = STATES if spec.mode == LSTM else STATES[:1]
        state = {}
        for name in names:
            state[name] = _activation(graph, STATE_INPUT.format(state=name, layer=layer), widths[name])
            graph.inputs.append(state[name])
        for t, x_t in enumerate(steps):
            last = t == chunk - 1
            state = _step(graph, cell, spec.mode, axis, x_t, state, f"l{layer}_t{t}")
            steps[t] = state["h"]
            if last:
                for name in names:
                    graph.tensors[state[name]].name = STATE_OUTPUT.format(state=name, layer=layer)
                    finals.append(state[name])
    y = graph.tensor(GraphTensor(STREAM_OUTPUT, [1, chunk, spec.output_size], [UNSET, chunk, spec.output_size]))
    graph.ops.append(("PACK", steps, [y], {"values_count": chunk, "axis": TIME_AXIS}))
    graph.outputs = [y, *finals]
    return graph


def _scalar(value: int) -> np.ndarray:
    return np.array(value, np.int32)


def _activation(graph: Graph, name: str, width: int) -> int:
    return graph.tensor(GraphTensor(name, [1, width], [UNSET, width]))


def _op(graph: Graph, op: str, inputs: list[int], name: str, width: int, options: dict[str, Any] | None = None) -> int:
    out = _activation(graph, name, width)
    graph.ops.append((op, inputs, [out], options or {}))
    return out


def _step(graph: Graph, cell: _Cell, mode: str, axis: int, x: int, state: dict[str, int], at: str) -> dict[str, int]:
    """One step of one layer's cell, cuDNN's equations: the new states."""
    t = cell.tensors
    hidden = graph.tensors[t[INPUT_BIAS]].shape[0] // len(cell.gates)
    width = hidden * len(cell.gates)
    h = state["h"]
    gx = _op(graph, "FULLY_CONNECTED", [x, t[INPUT_MATRIX], t[INPUT_BIAS]], f"{at}/x_gates", width)
    gh = _op(graph, "FULLY_CONNECTED", [h, t[RECURRENT_MATRIX], t[RECURRENT_BIAS]], f"{at}/h_gates", width)

    def split(source: int, side: str) -> dict[str, int]:
        parts = [_activation(graph, f"{at}/{side}_{gate}", hidden) for gate in cell.gates]
        graph.ops.append(("SPLIT", [axis, source], parts, {"num_splits": len(parts)}))
        return dict(zip(cell.gates, parts))

    def unary(op: str, source: int, name: str) -> int:
        return _op(graph, op, [source], f"{at}/{name}", hidden)

    def binary(op: str, a: int, b: int, name: str) -> int:
        return _op(graph, op, [a, b], f"{at}/{name}", hidden)

    if mode == LSTM:  # cuDNN's gates i, f, c (the candidate), o; split in the row's order
        pre = split(_op(graph, "ADD", [gx, gh], f"{at}/gates", width), "gate")
        input_gate, forget_gate, cell_gate, output_gate = (pre[gate] for gate in CUDNN_GATES[LSTM])
        i = unary("LOGISTIC", input_gate, "input_gate")
        f = unary("LOGISTIC", forget_gate, "forget_gate")
        o = unary("LOGISTIC", output_gate, "output_gate")
        g = unary("TANH", cell_gate, "candidate")
        c = binary("ADD", binary("MUL", f, state["c"], "kept"), binary("MUL", i, g, "added"), "c")
        h = binary("MUL", o, unary("TANH", c, "c_tanh"), "h")
        if PROJECTION in t:
            h = _op(graph, "FULLY_CONNECTED", [h, t[PROJECTION], UNSET], f"{at}/projected", cell.out)
        return {"h": h, "c": c}
    if mode == GRU:  # cuDNN's gates r, z, h (the candidate): n = tanh(x_n + r * h_n), h' = n + z * (h - n)
        xs, hs = split(gx, "x"), split(gh, "h")
        reset, update, new = CUDNN_GATES[GRU]
        r, z = (unary("LOGISTIC", binary("ADD", xs[g], hs[g], f"{g}_pre"), g) for g in (reset, update))
        n = unary("TANH", binary("ADD", xs[new], binary("MUL", r, hs[new], "reset"), "n_pre"), "n")
        return {"h": binary("ADD", n, binary("MUL", z, binary("SUB", h, n, "h_minus_n"), "kept"), "h")}
    return {"h": unary(ACTIVATION_OPS[cell.activation], binary("ADD", gx, gh, "pre"), "h")}
