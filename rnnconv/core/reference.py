"""cuDNN's RNN equations in numpy (float64): the reference a converted blob is run through.

Weights come from a `param(key)` function; `verify` passes one that reads the
blob itself through the weight-space layout, so a layout mistake cannot verify
itself. Inputs are sequence-major like cuDNN's SEQ_MAJOR layouts: x (T, B, I),
h0 (L*D, B, out), c0 (L*D, B, H). Sequences shorter than T are right-padded:
padded outputs are zero and h_n/c_n come from each sequence's last valid step,
as cudnnRNNForward does.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.table.constants import GRU, LSTM, Kind


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # equal to 1/(1+e^-x), without overflow warnings


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "rnn_tanh": np.tanh,
    "rnn_relu": lambda v: np.maximum(v, 0.0),
}


def forward(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    x: np.ndarray,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
    lengths: np.ndarray | None = None,
    clip: tuple[float, float] = (0.0, 0.0),
    trajectory: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] | None = None,
    round_input: Callable[[int, np.ndarray], np.ndarray] | None = None,
    round_state: Callable[[int, str, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Run the RNN; return y (T, B, D*out), h_n (L*D, B, out) and c_n (L*D, B, H) or None.

    `trajectory`, where given, gets each layer's and direction's states as they enter each step, (h (T, B, out),
    c (T, B, H)) by (layer, direction): a reverse direction's at step t are those it left step t + 1 with.

    `clip`: an LSTM's cell state and projected output clipped to within those bounds at every step (0: not), as
    TFLite's cell_clip and proj_clip do, which cuDNN does not: what --allow-lossy measures when it drops them.
    A GRU's reset gate is applied after the recurrent product, as cuDNN's, or before it where the spec says
    reset_after=False (TF1's GRUCell, Keras reset_after=False, ONNX linear_before_reset=0).
    `round_input`: each layer's input (layer, values) as a quantized file rounds it before computing with it, which
    cuDNN does not: what --allow-lossy measures when it leaves the rounding out; `round_state`: each step's new
    states (layer, "h" or "c", values) as an integer kernel rounds them, likewise."""
    x = np.asarray(x, dtype=np.float64)
    steps, batch, _ = x.shape
    dirs, out_size, hidden = spec.num_directions, spec.output_size, spec.hidden_size
    lengths = np.full(batch, steps) if lengths is None else np.asarray(lengths)
    h0 = np.zeros((spec.num_layers * dirs, batch, out_size)) if h0 is None else np.asarray(h0, np.float64)
    c0 = np.zeros((spec.num_layers * dirs, batch, hidden)) if c0 is None else np.asarray(c0, np.float64)
    h_n = np.zeros_like(h0)
    c_n = np.zeros_like(c0)
    layer_input = x
    for layer in range(spec.num_layers):
        if round_input is not None:
            layer_input = round_input(layer, layer_input)
        outputs = []
        for direction in range(dirs):
            pseudo = layer * dirs + direction
            entering = None if trajectory is None else trajectory.setdefault((layer, direction), _states(h0, c0, steps))
            y, h_n[pseudo], c_n[pseudo] = _run_direction(
                spec,
                param,
                layer,
                direction,
                layer_input,
                h0[pseudo],
                c0[pseudo],
                lengths,
                clip,
                entering,
                None if round_state is None else partial(round_state, layer),
            )
            outputs.append(y)
        layer_input = np.concatenate(outputs, axis=-1)
    return layer_input, h_n, (c_n if spec.mode == LSTM else None)


def _states(h0: np.ndarray, c0: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((steps, *h0.shape[1:])), np.zeros((steps, *c0.shape[1:]))


def _stacked(
    spec: RNNSpec, param: Callable[[ParamKey], np.ndarray], layer: int, direction: int, kind: str
) -> np.ndarray:
    """All gates of one kind, stacked in cuDNN order, as float64."""
    return np.concatenate(
        [np.asarray(param(ParamKey(layer, direction, kind, g)), dtype=np.float64) for g in spec.gates], axis=0
    )


def _run_direction(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    layer: int,
    direction: int,
    x: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    lengths: np.ndarray,
    clip: tuple[float, float],
    entering: tuple[np.ndarray, np.ndarray] | None = None,
    round_state: Callable[[str, np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps, batch, _ = x.shape
    cell_clip, proj_clip = clip
    w, r, bw, br = (_stacked(spec, param, layer, direction, kind) for kind in (Kind.W, Kind.R, Kind.bW, Kind.bR))
    proj = np.asarray(param(ParamKey(layer, direction, Kind.P, "")), dtype=np.float64) if spec.proj_size else None
    input_part = x @ w.T + bw  # (T, B, G*H), every step at once
    y = np.zeros((steps, batch, spec.output_size))
    order = range(steps) if direction == 0 else range(steps - 1, -1, -1)
    h, c = h.copy(), c.copy()
    for t in order:
        live = (t < lengths)[:, None]  # sequences that have a step t; the rest keep their state
        if entering is not None:
            entering[0][t], entering[1][t] = h, c
        pre_x = input_part[t]
        pre_h = h @ r.T + br
        new_c = c
        if spec.mode == LSTM:
            g = dict(zip(spec.gates, np.split(pre_x + pre_h, len(spec.gates), axis=-1)))
            new_c = sigmoid(g["f"]) * c + sigmoid(g["i"]) * np.tanh(g["c"])
            if cell_clip:
                new_c = np.clip(new_c, -cell_clip, cell_clip)
            new_h = sigmoid(g["o"]) * np.tanh(new_c)
            if proj is not None:
                new_h = new_h @ proj.T
                if proj_clip:
                    new_h = np.clip(new_h, -proj_clip, proj_clip)
        elif spec.mode == GRU:
            gx = dict(zip(spec.gates, np.split(pre_x, 3, axis=-1)))
            gh = dict(zip(spec.gates, np.split(pre_h, 3, axis=-1)))
            reset = sigmoid(gx["r"] + gh["r"])
            update = sigmoid(gx["z"] + gh["z"])
            if not spec.reset_after:  # h' = tanh(Wh x + Rh (r*h) + bRh + bWh)
                r_h, b_h = (dict(zip(spec.gates, np.split(v, 3)))["h"] for v in (r, br))
                candidate = np.tanh(gx["h"] + (reset * h) @ r_h.T + b_h)
            else:  # reset after the recurrent matrix and its bias
                candidate = np.tanh(gx["h"] + reset * gh["h"])
            new_h = (1.0 - update) * candidate + update * h
        else:
            new_h = ACTIVATIONS[spec.mode](pre_x + pre_h)
        if round_state is not None:
            new_h, new_c = round_state("h", new_h), round_state("c", new_c) if spec.mode == LSTM else new_c
        h = np.where(live, new_h, h)
        c = np.where(live, new_c, c)
        y[t] = np.where(live, new_h, 0.0)
    return y, h, c
