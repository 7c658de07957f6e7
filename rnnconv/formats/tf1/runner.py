"""A checkpoint's tensors, as stored, stepped in TensorFlow on the CPU as the TF cells do: a cuDNN layer's LSTM
through LSTMBlockCell (the kernel CudnnCompatibleLSTMCell runs), the GRU and the simple RNN through their cells'
equations in TF ops (TF 2 has no CPU kernel of cuDNN's reset-after GRU); tf.compat.v1's BasicLSTMCell, LSTMCell and
GRUCell through their `call`'s equations in TF ops, forget_bias and projection included."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BackendMissing
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.tf1.reader import TF1RNN, forget_biases
from rnnconv.formats.tf1.tensor_bundle import Checkpoint
from rnnconv.table.constants import (
    GRU,
    LSTM,
    NONLINEARITIES,
    RNN,
    TF1_BIAS,
    TF1_GRU_CANDIDATE,
    TF1_GRU_CANDIDATE_HIDDEN,
    TF1_GRU_CANDIDATE_INPUT,
    TF1_GRU_GATES,
    TF1_KERNEL,
    TF1_PROJECTION,
)


def require_tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        raise BackendMissing(
            "running a TF1 checkpoint's weights needs TensorFlow, which is not installed (pip install 'rnnconv[keras]')"
        ) from None
    return tf


def run_in_tensorflow(
    checkpoint: Checkpoint, rnn: TF1RNN, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
) -> tuple[dict[str, np.ndarray | None], str]:
    """y, h_n, c_n of the checkpoint's own tensors, stepped in TensorFlow (float32, CPU) as the TF cells do."""
    tf = require_tensorflow()
    x = np.asarray(inputs["x"], np.float32)
    h0, c0 = np.asarray(inputs["h0"], np.float32), inputs["c0"]
    steps, batch, _ = x.shape
    lengths = np.full(batch, steps) if inputs["lengths"] is None else np.asarray(inputs["lengths"])
    dirs = spec.num_directions
    h_n, c_n = np.zeros_like(h0), np.zeros((spec.num_layers * dirs, batch, spec.hidden_size), np.float32)
    layer_input = x
    biases, _ = forget_biases(checkpoint, rnn, ReadOptions())
    with tf.device("/CPU:0"):
        for layer in range(spec.num_layers):
            outputs = []
            for direction in range(dirs):
                pseudo = layer * dirs + direction
                stored = rnn.tensors[(layer, direction)]
                weights = {v: tf.constant(checkpoint.tensor(n).astype(np.float32)) for v, n in stored.items()}
                if rnn.own and rnn.row.cell == GRU:
                    cell = _own_gru(tf, weights)
                elif rnn.own:
                    cell = _own_lstm(tf, weights, biases[(layer, direction)])
                else:
                    cell = _cell(tf, rnn.row.cell, spec.mode, weights, spec.hidden_size)
                c_start = np.asarray(c0, np.float32)[pseudo] if c0 is not None else np.zeros_like(h0[pseudo])
                y, h_n[pseudo], c_n[pseudo] = _steps(tf, cell, layer_input, h0[pseudo], c_start, lengths, direction)
                outputs.append(y)
            layer_input = np.concatenate(outputs, axis=-1)
    how = {
        LSTM: "LSTMBlockCell (forget_bias=0, no clipping, no peepholes) on each layer's kernel and bias",
        GRU: "CudnnCompatibleGRUCell's equations in TF ops (TF 2 has no CPU kernel of cuDNN's GRU)",
        RNN: "BasicRNNCell's equation in TF ops",
    }[rnn.row.cell]
    if rnn.own:
        added = ", with its forget_bias added to f at each step" if rnn.row.cell == LSTM else ""
        how = f"{rnn.cell}'s equations in TF ops{added}"
    result: dict[str, np.ndarray | None] = {"y": layer_input, "h_n": h_n, "c_n": c_n if spec.mode == LSTM else None}
    return result, f"tensorflow {tf.__version__}: {how}"


Cell = Callable[[Any, Any, Any], tuple[Any, Any]]  # (x_t, h, c) -> (new h, new c)


def _cell(tf: Any, cell: str, mode: str, w: dict[str, Any], hidden: int) -> Cell:
    """One step of the TF cell that reads these tensors."""
    if cell == LSTM:
        no_peephole = tf.zeros([hidden], tf.float32)

        def lstm(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            got = tf.raw_ops.LSTMBlockCell(
                x=x, cs_prev=c, h_prev=h, w=w[TF1_KERNEL], wci=no_peephole, wcf=no_peephole, wco=no_peephole,
                b=w[TF1_BIAS], forget_bias=0.0, cell_clip=-1.0, use_peephole=False,
            )  # fmt: skip
            return got.h, got.cs

        return lstm
    if cell == GRU:
        gates_kernel, gates_bias = w[f"{TF1_GRU_GATES}/{TF1_KERNEL}"], w[f"{TF1_GRU_GATES}/{TF1_BIAS}"]
        input_kernel = w[f"{TF1_GRU_CANDIDATE_INPUT}/{TF1_KERNEL}"]
        input_bias = w[f"{TF1_GRU_CANDIDATE_INPUT}/{TF1_BIAS}"]
        hidden_kernel = w[f"{TF1_GRU_CANDIDATE_HIDDEN}/{TF1_KERNEL}"]
        hidden_bias = w[f"{TF1_GRU_CANDIDATE_HIDDEN}/{TF1_BIAS}"]

        def gru(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            value = tf.sigmoid(tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), gates_kernel), gates_bias))
            reset, update = tf.split(value, 2, axis=1)
            candidate = tf.nn.bias_add(tf.matmul(x, input_kernel), input_bias)
            candidate += reset * tf.nn.bias_add(tf.matmul(h, hidden_kernel), hidden_bias)
            return (1 - update) * tf.tanh(candidate) + update * h, c

        return gru
    activation = {NONLINEARITIES["tanh"]: tf.tanh, NONLINEARITIES["relu"]: tf.nn.relu}[mode]

    def simple(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
        return activation(tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), w[TF1_KERNEL]), w[TF1_BIAS])), c

    return simple


def _own_lstm(tf: Any, w: dict[str, Any], forget_bias: float) -> Cell:
    """One step of tf.compat.v1's BasicLSTMCell / LSTMCell (no peepholes, no clipping), as their `call` computes it:
    i, j, f, o = split([x, h] @ kernel + bias); c = c*sigmoid(f + forget_bias) + sigmoid(i)*tanh(j);
    h = sigmoid(o)*tanh(c), then h @ projection/kernel where num_proj made one."""
    projection = w.get(TF1_PROJECTION)

    def lstm(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
        value = tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), w[TF1_KERNEL]), w[TF1_BIAS])
        i, j, f, o = tf.split(value, 4, axis=1)
        c = c * tf.sigmoid(f + forget_bias) + tf.sigmoid(i) * tf.tanh(j)
        m = tf.sigmoid(o) * tf.tanh(c)
        return (m if projection is None else tf.matmul(m, projection)), c

    return lstm


def _own_gru(tf: Any, w: dict[str, Any]) -> Cell:
    """One step of tf.compat.v1's GRUCell, as its `call` computes it: r, u = split(sigmoid([x, h] @ gates/kernel +
    gates/bias)); c = tanh([x, r*h] @ candidate/kernel + candidate/bias); h = u*h + (1 - u)*c."""
    gates_kernel, gates_bias = w[f"{TF1_GRU_GATES}/{TF1_KERNEL}"], w[f"{TF1_GRU_GATES}/{TF1_BIAS}"]
    candidate_kernel, candidate_bias = w[f"{TF1_GRU_CANDIDATE}/{TF1_KERNEL}"], w[f"{TF1_GRU_CANDIDATE}/{TF1_BIAS}"]

    def gru(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
        value = tf.sigmoid(tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), gates_kernel), gates_bias))
        reset, update = tf.split(value, 2, axis=1)
        candidate = tf.tanh(tf.nn.bias_add(tf.matmul(tf.concat([x, reset * h], 1), candidate_kernel), candidate_bias))
        return update * h + (1 - update) * candidate, c

    return gru


def _steps(
    tf: Any, cell: Cell, x: np.ndarray, h0: np.ndarray, c0: np.ndarray, lengths: np.ndarray, direction: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction over the sequence: a sequence past its length keeps its state and outputs zeros (cuDNN's
    padding); the backward direction starts at each sequence's last step, as stack_bidirectional_dynamic_rnn."""
    steps, batch, _ = x.shape
    h, c = tf.constant(h0), tf.constant(c0)
    y = np.zeros((steps, batch, h0.shape[-1]), np.float32)
    for t in range(steps) if direction == 0 else range(steps - 1, -1, -1):
        live = tf.constant((t < lengths)[:, None])
        new_h, new_c = cell(tf.constant(x[t]), h, c)
        h, c = tf.where(live, new_h, h), tf.where(live, new_c, c)
        y[t] = np.asarray(tf.where(live, new_h, tf.zeros_like(new_h)))
    return y, np.asarray(h), np.asarray(c)
