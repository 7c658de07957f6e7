"""What OpenVINO's CPU plugin computes for an `LSTMSequence` it runs in u8 (openvino 2026.4.1, measured against
`fixtures/openvino_quantized/lstm_nncf.xml`'s own graph: docs/formats/openvino.md#cpu-plugin-own-graph), for the tests.

The plugin takes this path when the sequence's X is a `FakeQuantize` output (or a u8 dequantization), its W and R
int8 `Const` → `Convert` → `Multiply` by per-row scales, and its initial h a u8 dequantization or a `Const`
(nncf's zero states). It then computes, per step, in float32 but for the roundings named here:

- x as the u8 code of the X `FakeQuantize` (range `lo`..`hi`, 256 levels: step (hi - lo) / 255, zero point
  -lo / step);
- h rounded at every step to a u8 code with X's step and zero point (clamped to 0..255, to nearest), the next step's
  recurrent product taking the code's value; the initial h is the u8 code fed to the op, read with X's step and zero
  point, not with its own dequantization scale (nncf's zero h, code 0, is read as `lo`);
- W and R as their int8 integers, both scaled by W's per-row scales (R's own scales are not used), and those scales
  applied with the f and i blocks exchanged (OpenVINO's gate order f, i, c, o);
- c not rounded; Y the value of each step's h code; h_n the last code times the initial h's dequantization scale.

`u8_lstm` computes that in numpy (float64) for one forward direction (the plugin compiles a bidirectional op as one
such path per direction, the reverse one over the reversed steps), so that a file's own run can be compared with
what the plugin is known to compute rather than with the float LSTM it was converted from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnconv.core.reference import sigmoid

LEVELS = 256


@dataclass(frozen=True)
class U8Grid:
    """The u8 grid of a layer's X `FakeQuantize`: the codes 0..255 stand for `lo + code * step`."""

    lo: float
    hi: float

    @property
    def step(self) -> float:
        return float(np.float32((self.hi - self.lo) / (LEVELS - 1)))

    @property
    def zero_point(self) -> float:
        return -self.lo / self.step

    def code(self, values: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(values / self.step + self.zero_point), 0, LEVELS - 1)

    def value(self, codes: np.ndarray) -> np.ndarray:
        return (codes - self.zero_point) * self.step


@dataclass(frozen=True)
class U8Result:
    y: np.ndarray  # [N, T, H]: each step's h code, as a value
    h_codes: np.ndarray  # [N, H]: the last step's h code
    c: np.ndarray  # [N, H]: the last step's c, not rounded


def plugin_scales(w_scales: np.ndarray, hidden: int) -> np.ndarray:
    """The per-row scales the plugin applies to W's and R's integers: W's, with the f and i blocks exchanged."""
    f, i, c, o = (w_scales[k * hidden : (k + 1) * hidden] for k in range(4))
    return np.concatenate([i, f, c, o])


def u8_lstm(
    x: np.ndarray,
    h0_codes: np.ndarray,
    c0: np.ndarray,
    w_int: np.ndarray,
    r_int: np.ndarray,
    w_scales: np.ndarray,
    bias: np.ndarray,
    grid: U8Grid,
) -> U8Result:
    """One forward LSTMSequence direction as the plugin's u8 path computes it. `x` [N, T, I] (floats: rounded to
    `grid` here, as its `FakeQuantize` does), `h0_codes` [N, H] the u8 codes fed as the initial h, `c0` [N, H],
    `w_int` [4H, I] and `r_int` [4H, H] the stored integers, `w_scales` [4H] W's scales, `bias` [4H]; gates in
    OpenVINO's order f, i, c, o."""
    hidden = r_int.shape[1]
    scales = plugin_scales(np.asarray(w_scales, np.float64).reshape(-1), hidden)[:, None]
    w = np.asarray(w_int, np.float64) * scales
    r = np.asarray(r_int, np.float64) * scales
    b = np.asarray(bias, np.float64).reshape(-1)
    codes = np.asarray(h0_codes, np.float64)
    c = np.asarray(c0, np.float64)
    n, t, _ = x.shape
    y = np.zeros((n, t, hidden))
    for step in range(t):
        gates = grid.value(grid.code(np.asarray(x[:, step], np.float64))) @ w.T + grid.value(codes) @ r.T + b
        f, i, g, o = np.split(gates, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        codes = grid.code(sigmoid(o) * np.tanh(c))
        y[:, step] = grid.value(codes)
    return U8Result(y=y, h_codes=codes, c=c)
