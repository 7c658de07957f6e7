"""How far a quantized RNN's outputs can be from its float model's: a bound computed from the quantization's steps.

Two things move a quantized run away from the float one: its weights, each within `weight_error` of the float
weight (half a quantization step, from the scales; 0 when the float model is the dequantized weights themselves),
and, in a hybrid kernel (LiteRT's, onnxruntime's DynamicQuantizeLSTM), each step's matrix inputs x and h quantized
to 8 bits at run time: each within half a step of max|value| / 127 (the largest step of a symmetric int8 scheme over
the values' range, which also bounds an asymmetric uint8 or int8 one). The bound follows both through cuDNN's
equations step by step, elementwise, in the float model's own values: a product's error from its operands' (|W|
times the input's error plus the weight error times |input|), sigmoid's slope at most 1/4, tanh's and ReLU's at most
1, each gate's error at most its range, and the states' errors carried to the next step and the next layer. It is an
upper bound, not an estimate: a quantized file whose outputs leave it was not quantized from that float model as its
scales say (a gate swapped, a scale on the wrong axis, a wrong zero point).

A file that rounds an input before its RNN computes with it (OpenVINO's FakeQuantize, ONNX's QuantizeLinear and
DequantizeLinear pairs: `contracts.RoundedInput`) moves each rounded value by at most half its step, beside the
distance of the float value outside the range it is clamped to: added to that input's error where it enters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.contracts import RoundedInput
from rnnconv.core.reference import ACTIVATIONS, sigmoid
from rnnconv.table.constants import GRU, LSTM, Kind

ACTIVATION_STEPS = 127  # a step of the kernel's 8-bit inputs is at most max|value| / 127


def rounded(values: np.ndarray, rounding: RoundedInput) -> np.ndarray:
    """`values` as the file rounds them: clamped to the rounding's range, each the nearest of its levels (float64)."""
    level = np.clip(np.rint((np.asarray(values, np.float64) - rounding.low) / rounding.step), 0, rounding.levels - 1)
    return rounding.low + level * rounding.step


def rounding_error(rounding: RoundedInput, values: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """The bound of a rounded value's difference from the float one, `values` the float values and `errors` the
    bound of the rounding's own input's difference from them: half a step, and the distance outside the range."""
    high = rounding.low + rounding.step * (rounding.levels - 1)
    outside = np.maximum(rounding.low - values, 0.0) + np.maximum(values - high, 0.0)
    return errors + rounding.step / 2 + outside


def quantization_bound(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    x: np.ndarray,
    h0: np.ndarray | None,
    c0: np.ndarray | None,
    weight_error: float,
    quantized_inputs: bool = True,
    rounded_inputs: Sequence[RoundedInput] = (),
) -> float:
    """The largest difference a quantized run's y, h_n and c_n can have from the float model's (`param`) on these
    inputs, when each matrix weight is within `weight_error`, (`quantized_inputs`) each step's matrix inputs are
    quantized to 8 bits and the file rounds the inputs `rounded_inputs` names (a layer's x, its initial states)."""
    x = np.asarray(x, np.float64)
    batch, dirs = x.shape[1], spec.num_directions
    h0 = np.zeros((spec.num_layers * dirs, batch, spec.output_size)) if h0 is None else np.asarray(h0, np.float64)
    c0 = np.zeros((spec.num_layers * dirs, batch, spec.hidden_size)) if c0 is None else np.asarray(c0, np.float64)
    values, errors = x, np.zeros_like(x)
    worst = 0.0
    roundings = {(r.value, r.layer): r for r in rounded_inputs}
    for layer in range(spec.num_layers):
        if ("x", layer) in roundings:
            errors = rounding_error(roundings["x", layer], values, errors)
        outputs, bounds = [], []
        for direction in range(dirs):
            pseudo = layer * dirs + direction
            states = [np.zeros_like(h0[pseudo]), np.zeros_like(c0[pseudo])]
            for index, (state, value) in enumerate(zip((h0, c0), ("initial_h", "initial_c"), strict=True)):
                if (value, layer) in roundings:
                    states[index] = rounding_error(roundings[value, layer], state[pseudo], states[index])
            y, dy, dh, dc = _direction(
                spec,
                param,
                layer,
                direction,
                values,
                errors,
                (h0[pseudo], states[0]),
                (c0[pseudo], states[1]),
                weight_error,
                quantized_inputs,
            )
            outputs.append(y)
            bounds.append(dy)
            worst = max(worst, float(dh.max()), float(dc.max()) if spec.mode == LSTM else 0.0)
        values, errors = np.concatenate(outputs, axis=-1), np.concatenate(bounds, axis=-1)
    return max(worst, float(errors.max()))


def _stacked(spec: RNNSpec, param: Callable[[ParamKey], np.ndarray], layer: int, d: int, kind: str) -> np.ndarray:
    return np.concatenate([np.asarray(param(ParamKey(layer, d, kind, g)), np.float64) for g in spec.gates], axis=0)


def _product_error(
    values: np.ndarray, errors: np.ndarray, matrix: np.ndarray, weight_error: float, quantized: bool
) -> np.ndarray:
    """The bound of (W' v')'s difference from W v, rows of v (B, n) within `errors`, W' within `weight_error`."""
    off = errors
    if quantized:  # the kernel's 8-bit copy of v': within half its step of v'
        step = (np.abs(values) + errors).max(axis=-1, keepdims=True) / ACTIVATION_STEPS
        off = errors + step / 2
    return off @ np.abs(matrix).T + weight_error * (np.abs(values) + off).sum(axis=-1, keepdims=True)


def _direction(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    layer: int,
    direction: int,
    x: np.ndarray,
    dx: np.ndarray,
    initial_h: tuple[np.ndarray, np.ndarray],
    initial_c: tuple[np.ndarray, np.ndarray],
    weight_error: float,
    quantized: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One direction of one layer: its outputs and their bounds, and its final states' bounds (`initial_h`,
    `initial_c`: each state with the bound of its difference where the run starts)."""
    steps, batch, _ = x.shape
    w, r, bw, br = (_stacked(spec, param, layer, direction, kind) for kind in (Kind.W, Kind.R, Kind.bW, Kind.bR))
    proj = np.asarray(param(ParamKey(layer, direction, Kind.P, "")), np.float64) if spec.proj_size else None
    gates = len(spec.gates)
    y = np.zeros((steps, batch, spec.output_size))
    dy = np.zeros_like(y)
    (h, dh), (c, dc) = ((state.copy(), error.copy()) for state, error in (initial_h, initial_c))
    for t in range(steps) if direction == 0 else range(steps - 1, -1, -1):
        pre_x, pre_h = x[t] @ w.T + bw, h @ r.T + br
        e_x = _product_error(x[t], dx[t], w, weight_error, quantized)
        e_h = _product_error(h, dh, r, weight_error, quantized)
        if spec.mode == LSTM:
            a = dict(zip(spec.gates, np.split(pre_x + pre_h, gates, axis=-1)))
            e = dict(zip(spec.gates, np.split(e_x + e_h, gates, axis=-1)))
            f, i, g, o = sigmoid(a["f"]), sigmoid(a["i"]), np.tanh(a["c"]), sigmoid(a["o"])
            df, di, do = np.minimum(e["f"] / 4, 1.0), np.minimum(e["i"] / 4, 1.0), np.minimum(e["o"] / 4, 1.0)
            dg = np.minimum(e["c"], 2.0)
            new_c = f * c + i * g
            dc = f * dc + df * (np.abs(c) + dc) + i * dg + di * (np.abs(g) + dg)
            cell = np.tanh(new_c)
            new_h = o * cell
            dh = o * np.minimum(dc, 2.0) + do * (np.abs(cell) + np.minimum(dc, 2.0))
            if proj is not None:
                dh = _product_error(new_h, dh, proj, weight_error, quantized)
                new_h = new_h @ proj.T
            c = new_c
        elif spec.mode == GRU:
            ax, ah = (dict(zip(spec.gates, np.split(v, 3, axis=-1))) for v in (pre_x, pre_h))
            ex, eh = (dict(zip(spec.gates, np.split(v, 3, axis=-1))) for v in (e_x, e_h))
            reset, update = sigmoid(ax["r"] + ah["r"]), sigmoid(ax["z"] + ah["z"])
            d_reset = np.minimum((ex["r"] + eh["r"]) / 4, 1.0)
            d_update = np.minimum((ex["z"] + eh["z"]) / 4, 1.0)
            candidate = np.tanh(ax["h"] + reset * ah["h"])
            d_candidate = np.minimum(ex["h"] + reset * eh["h"] + d_reset * (np.abs(ah["h"]) + eh["h"]), 2.0)
            new_h = (1.0 - update) * candidate + update * h
            dh = (
                (1.0 - update) * d_candidate
                + update * dh
                + d_update * (np.abs(candidate) + np.abs(h) + d_candidate + dh)
            )
        else:  # tanh and ReLU: slope at most 1
            new_h = ACTIVATIONS[spec.mode](pre_x + pre_h)
            dh = e_x + e_h
        h = new_h
        y[t], dy[t] = new_h, dh
    return y, dy, dh, dc
