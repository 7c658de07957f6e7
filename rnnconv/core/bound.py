"""How far a quantized RNN's outputs can be from its float model's: a bound computed from the quantization's steps.

Two things move a quantized run away from the float one: its weights, each within `weight_error` of the float
weight (half a quantization step, from the scales; 0 when the float model is the dequantized weights themselves),
and values rounded on a grid before they are computed with: each within half the grid's step of its float value,
beside its distance outside the range the grid clamps to (`on_grid`). Two things round so:

- a hybrid kernel, each step's matrix inputs x and h at run time, on a grid it takes from their range
  (`InputRounding`): LiteRT's and onnxruntime's DynamicQuantizeLSTM at most max|value| / 127 per row (the largest
  step of a symmetric int8 scheme over the values' range, which also bounds an asymmetric uint8 or int8 one);
  PyTorch's dynamic kernels (fbgemm's `PackedLinearWeight::apply_dynamic`) one step over the whole input,
  (max(v, 0) - min(v, 0)) / 127 (uint8 with `reduce_range`, which halves it to 0..127: what quantize_dynamic's RNNs
  record) or / 255, the integer product then exact and rescaled with the float bias added; a kernel of the
  dequantized weights in float (OpenVINO's CPU plugin, a QDQ node onnxruntime computes in float) rounds none;
- the file itself, a layer's input or initial states on a fixed grid (OpenVINO's FakeQuantize, ONNX's
  QuantizeLinear and DequantizeLinear pairs: `contracts.RoundedInput`), added to that input's error where it enters.

The bound follows both through cuDNN's equations step by step, elementwise, in the float model's own values: a
product's error from its operands' (|W| times the input's error plus the weight error times |input|), sigmoid's slope
at most 1/4, tanh's and ReLU's at most 1, each gate's error at most its range, and the states' errors carried to the
next step and the next layer. It is an upper bound, not an estimate: a quantized file whose outputs leave it was not
quantized from that float model as its scales say (a gate swapped, a scale on the wrong axis, a wrong zero point).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.contracts import Dequantized, Quantized, RoundedInput
from rnnconv.core.reference import ACTIVATIONS, forward, sigmoid
from rnnconv.table.constants import GRU, LSTM, Kind

ACTIVATION_STEPS = 127  # a step of the kernel's 8-bit inputs is at most max|value| / 127


def on_grid(
    values: np.ndarray, errors: np.ndarray, step: np.ndarray | float, low: float = -np.inf, high: float = np.inf
) -> np.ndarray:
    """The bound of a value's difference from its float one (`values`) once rounded on a grid `step` apart that
    clamps to low..high, `errors` the bound of the rounding's own input's difference: half a step more, and the float
    value's distance outside the range."""
    outside = np.maximum(low - values, 0.0) + np.maximum(values - high, 0.0)
    return errors + np.asarray(step) / 2 + outside


@dataclass(frozen=True)
class InputRounding:
    """How a hybrid kernel rounds a product's input at run time: on a grid of `levels` steps across a span that is
    2 max|v| (symmetric) or max(v, 0) - min(v, 0) (asymmetric: 0 exactly representable), of each row or of the whole
    input; the span covers every value, so nothing is clamped."""

    levels: int
    per_tensor: bool
    asymmetric: bool

    def step(self, values: np.ndarray, errors: np.ndarray) -> np.ndarray:
        """The largest step it takes for an input within `errors` of `values` (B, n): (B, 1) or (1, 1)."""
        axis = None if self.per_tensor else -1
        if self.asymmetric:
            high = np.maximum((values + errors).max(axis=axis, keepdims=True), 0.0)
            low = np.minimum((values - errors).min(axis=axis, keepdims=True), 0.0)
            span = high - low
        else:
            span = 2 * (np.abs(values) + errors).max(axis=axis, keepdims=True)
        return np.asarray(span / self.levels)

    def error(self, values: np.ndarray, errors: np.ndarray) -> np.ndarray:
        """The bound of the rounded copy's difference from `values`: `on_grid` on the grid it takes."""
        return on_grid(values, errors, self.step(values, errors))


SYMMETRIC_ROWS = InputRounding(2 * ACTIVATION_STEPS, per_tensor=False, asymmetric=False)
# The schemes a record names (contracts.Dequantized.inputs); None: SYMMETRIC_ROWS.
INPUT_ROUNDINGS: dict[str, InputRounding | None] = {
    "uint8 per tensor, 7 bits": InputRounding(127, per_tensor=True, asymmetric=True),  # fbgemm, reduce_range
    "uint8 per tensor": InputRounding(255, per_tensor=True, asymmetric=True),
    "float": None,  # a kernel of the dequantized weights in float (OpenVINO's CPU plugin): it rounds no input
    "integer": None,  # an integer kernel: its inputs and states are on the file's grids already (`rounded`)
}


@dataclass(frozen=True)
class IntegerGates:
    """How an integer LSTM kernel computes its gates (LiteRT's, for full-integer quantization): each gate's
    pre-activation, its two products rescaled to int16 on a grid `step` apart (each within half a step), clamped to
    low..high, its sigmoid and tanh (and the cell's tanh) computed in fixed point within `activation` of the float
    ones, and each of the cell's two products rounded to the cell state's grid before they are summed."""

    step: float
    low: float
    high: float
    activation: float


# LiteRT's 8x8_16 LSTM without layer normalization: gates in int16 at 2^-12 (Q3.12, so within +-8), activations out in
# Q0.15; `activation` allows 8 of the output's steps for the fixed-point sigmoid and tanh.
LITERT_INTEGER_GATES = IntegerGates(2.0**-12, -8.0, 8.0 - 2.0**-12, 2.0**-12)


def integer_gates(record: Dequantized) -> IntegerGates | None:
    """The gates' integer arithmetic of the kernel a record's weights were read from (None: a float one)."""
    return LITERT_INTEGER_GATES if record.inputs == "integer" else None


def input_rounding(record: Dequantized) -> InputRounding | None:
    """The run-time rounding of the kernel a record's weights were read from (None: a kernel that computes in float
    with its dequantized weights, as the record says or as a file --quantize wrote for such a kernel)."""
    if isinstance(record, Quantized) and not record.inputs_quantized:
        return None
    return SYMMETRIC_ROWS if record.inputs is None else INPUT_ROUNDINGS[record.inputs]


def rounded(values: np.ndarray, rounding: RoundedInput) -> np.ndarray:
    """`values` as the file rounds them: clamped to the rounding's range, each the nearest of its levels (float64)."""
    level = np.clip(np.rint((np.asarray(values, np.float64) - rounding.low) / rounding.step), 0, rounding.levels - 1)
    return rounding.low + level * rounding.step


def rounding_error(rounding: RoundedInput, values: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """The bound of a value the file rounds: `on_grid` on the rounding's fixed grid."""
    return on_grid(values, errors, rounding.step, rounding.low, rounding.high)


def quantization_bound(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    x: np.ndarray,
    h0: np.ndarray | None,
    c0: np.ndarray | None,
    weight_error: float,
    kernel: InputRounding | None = SYMMETRIC_ROWS,
    rounded_inputs: Sequence[RoundedInput] = (),
    gates: IntegerGates | None = None,
) -> float:
    """The largest difference a quantized run's y, h_n and c_n can have from the float model's (`param`) on these
    inputs, when each matrix weight is within `weight_error`, each step's matrix inputs are rounded as `kernel` says
    (None: not), the file rounds the inputs `rounded_inputs` names (a layer's x, its initial states, each step's new
    states) and an integer LSTM kernel computes its gates as `gates` says (None: in float)."""
    x = np.asarray(x, np.float64)
    batch, dirs = x.shape[1], spec.num_directions
    h0 = np.zeros((spec.num_layers * dirs, batch, spec.output_size)) if h0 is None else np.asarray(h0, np.float64)
    c0 = np.zeros((spec.num_layers * dirs, batch, spec.hidden_size)) if c0 is None else np.asarray(c0, np.float64)
    values, errors = x, np.zeros_like(x)
    worst = 0.0
    roundings: dict[tuple[str, int], RoundedInput] = {(r.value, r.layer): r for r in rounded_inputs}
    for layer in range(spec.num_layers):
        if ("x", layer) in roundings:
            errors = rounding_error(roundings["x", layer], values, errors)
        outputs, bounds = [], []
        for direction in range(dirs):
            pseudo = layer * dirs + direction
            states = [np.zeros_like(h0[pseudo]), np.zeros_like(c0[pseudo])]
            for index, (state, value) in enumerate(zip((h0, c0), ("h0", "c0"), strict=True)):
                # an initial state on its grid, or on the grid every step's state is rounded to
                rounding = roundings.get((value, layer)) or roundings.get((value[0], layer))
                if rounding is not None:
                    states[index] = rounding_error(rounding, state[pseudo], states[index])
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
                kernel,
                (roundings.get(("h", layer)), roundings.get(("c", layer))),
                gates,
            )
            outputs.append(y)
            bounds.append(dy)
            worst = max(worst, float(dh.max()), float(dc.max()) if spec.mode == LSTM else 0.0)
        values, errors = np.concatenate(outputs, axis=-1), np.concatenate(bounds, axis=-1)
    return max(worst, float(errors.max()))


def float_states(
    spec: RNNSpec, param: Callable[[ParamKey], np.ndarray], x: np.ndarray, h0: np.ndarray | None, c0: np.ndarray | None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Each step's input with the states each direction of each layer enters it with in the float model (its
    trajectory in the numpy reference, as float32: a forward direction's from the steps before, a reverse one's from
    the steps after): where a step of a quantized run is compared with the float model's."""
    trajectory: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    forward(spec, param, x, h0, c0, trajectory=trajectory)
    cells = [trajectory[(layer, d)] for layer in range(spec.num_layers) for d in range(spec.num_directions)]
    for t in range(x.shape[0]):
        h = np.stack([states[0][t] for states in cells]).astype(np.float32)
        c = np.stack([states[1][t] for states in cells]).astype(np.float32) if spec.mode == LSTM else None
        yield x[t : t + 1], h, c


def stepwise_bound(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    x: np.ndarray,
    h0: np.ndarray | None,
    c0: np.ndarray | None,
    weight_error: float,
    kernel: InputRounding | None,
) -> float:
    """The largest bound of any step, each from the float model's states (`float_states`)."""
    return max(
        quantization_bound(spec, param, x_t, h, c, weight_error, kernel)
        for x_t, h, c in float_states(spec, param, x, h0, c0)
    )


def _stacked(spec: RNNSpec, param: Callable[[ParamKey], np.ndarray], layer: int, d: int, kind: str) -> np.ndarray:
    return np.concatenate([np.asarray(param(ParamKey(layer, d, kind, g)), np.float64) for g in spec.gates], axis=0)


def _product_error(
    values: np.ndarray, errors: np.ndarray, matrix: np.ndarray, weight_error: float, rounding: InputRounding | None
) -> np.ndarray:
    """The bound of (W' v')'s difference from W v, rows of v (B, n) within `errors`, W' within `weight_error`."""
    off = errors if rounding is None else rounding.error(values, errors)  # the kernel's integer copy of v'
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
    kernel: InputRounding | None,
    step_states: tuple[RoundedInput | None, RoundedInput | None] = (None, None),
    gates: IntegerGates | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One direction of one layer: its outputs and their bounds, and its final states' bounds (`initial_h`,
    `initial_c`: each state with the bound of its difference where the run starts; `step_states`: the grids each
    step's new h and c are rounded to)."""
    round_h, round_c = step_states
    act = gates.activation if gates is not None else 0.0
    steps, batch, _ = x.shape
    w, r, bw, br = (_stacked(spec, param, layer, direction, kind) for kind in (Kind.W, Kind.R, Kind.bW, Kind.bR))
    proj = np.asarray(param(ParamKey(layer, direction, Kind.P, "")), np.float64) if spec.proj_size else None
    count = len(spec.gates)
    y = np.zeros((steps, batch, spec.output_size))
    dy = np.zeros_like(y)
    (h, dh), (c, dc) = ((state.copy(), error.copy()) for state, error in (initial_h, initial_c))
    for t in range(steps) if direction == 0 else range(steps - 1, -1, -1):
        pre_x, pre_h = x[t] @ w.T + bw, h @ r.T + br
        e_x = _product_error(x[t], dx[t], w, weight_error, kernel)
        e_h = _product_error(h, dh, r, weight_error, kernel)
        if spec.mode == LSTM:
            pre, e_pre = pre_x + pre_h, e_x + e_h
            if gates is not None:  # two products rescaled onto int16's grid (half a step each), clamped
                e_pre = on_grid(pre, e_pre, 2 * gates.step, gates.low, gates.high)
            a = dict(zip(spec.gates, np.split(pre, count, axis=-1)))
            e = dict(zip(spec.gates, np.split(e_pre, count, axis=-1)))
            f, i, g, o = sigmoid(a["f"]), sigmoid(a["i"]), np.tanh(a["c"]), sigmoid(a["o"])
            df, di, do = (
                np.minimum(e["f"] / 4, 1.0) + act,
                np.minimum(e["i"] / 4, 1.0) + act,
                np.minimum(e["o"] / 4, 1.0) + act,
            )
            dg = np.minimum(e["c"], 2.0) + act
            new_c = f * c + i * g
            dc = f * dc + df * (np.abs(c) + dc) + i * dg + di * (np.abs(g) + dg)
            if round_c is not None:  # an integer kernel's two products, each on the cell's grid, then the sum's
                dc = rounding_error(round_c, new_c, dc + round_c.step if gates is not None else dc)
            cell = np.tanh(new_c)
            new_h = o * cell
            dh = o * (np.minimum(dc, 2.0) + act) + do * (np.abs(cell) + np.minimum(dc, 2.0) + act)
            if proj is not None:
                dh = _product_error(new_h, dh, proj, weight_error, kernel)
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
        if round_h is not None:
            dh = rounding_error(round_h, new_h, dh)
        h = new_h
        y[t], dy[t] = new_h, dh
    return y, dy, dh, dc
