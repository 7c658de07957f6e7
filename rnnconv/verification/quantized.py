"""A quantized RNN held to its own error bound: each step of the quantized run, from the float model's states, against
the float model's step, within the bound its scales give (`core.bound`), and its weights within half a step of the
float checkpoint's.

Over a whole sequence a quantized run's errors are carried from step to step, and no bound that holds for every
input stays useful there; one step from the same states is where the scales bound the difference tightly enough to
tell a faithful quantization from a wrong one (a gate swapped, a scale on the wrong axis, a wrong zero point moves a
step far beyond it). So verify runs both sides a step at a time, each from the float model's own states (its
trajectory, computed in the numpy reference: a forward direction's from the steps before, a reverse one's from
the steps after), and compares the steps; the whole sequence's difference is reported beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from rnnconv.core.bound import input_rounding, quantization_bound
from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import Dequantized, Tolerance
from rnnconv.core.reference import forward
from rnnconv.table.constants import BIAS_KINDS, DIRECTION_WORDS, GRU, LSTM, Kind

# A step's runtime rounds in float32 besides: the runtime's own tolerance, added to the bound.
FLOAT_ATOL, FLOAT_RTOL = 1e-4, 1e-3


def stepwise(
    spec: RNNSpec,
    param: Callable[[ParamKey], np.ndarray],
    inputs: Inputs,
    runs: tuple[Callable[[Inputs], Outputs], Callable[[Inputs], Outputs]],
    weight_error: float,
    record: Dequantized,
) -> tuple[Outputs, Outputs, Tolerance]:
    """Both runs (`runs`: the quantized one, the float one) a step at a time from the float model's states, each
    step's outputs stacked as a sequence's (y per step, the last step's h_n and c_n), and the tolerance: the largest
    bound of any step, plus float32's. `record`, what was dequantized, says what the quantized side rounds: its
    kernel's inputs, and the inputs the file itself rounds."""
    x = inputs["x"]
    kernel, rounded_inputs = input_rounding(record), record.rounded or ()
    assert x is not None
    trajectory: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    forward(spec, param, x, inputs["h0"], inputs["c0"], trajectory=trajectory)
    cells = [trajectory[(layer, d)] for layer in range(spec.num_layers) for d in range(spec.num_directions)]
    stepped: tuple[list[Outputs], list[Outputs]] = ([], [])
    bound = 0.0
    for t in range(x.shape[0]):  # each direction of each layer entering step t as the float model does
        h = np.stack([states[0][t] for states in cells]).astype(np.float32)
        c = np.stack([states[1][t] for states in cells]).astype(np.float32) if spec.mode == LSTM else None
        step: Inputs = {"x": x[t : t + 1], "h0": h, "c0": c, "lengths": None}
        step_bound = quantization_bound(spec, param, x[t : t + 1], h, c, weight_error, kernel, rounded_inputs)
        bound = max(bound, step_bound)
        for run, outputs in zip(runs, stepped, strict=True):
            outputs.append(run(step))
    joined = tuple(_joined(outputs, spec) for outputs in stepped)
    return joined[0], joined[1], Tolerance(atol=bound + FLOAT_ATOL, rtol=FLOAT_RTOL, bound=bound)


def _joined(steps: list[Outputs], spec: RNNSpec) -> Outputs:
    """The steps' outputs as a sequence's: y of every step; h_n and c_n of the last step a direction takes (a
    reverse direction's is the first)."""
    last = [steps[-1] if d == 0 else steps[0] for _ in range(spec.num_layers) for d in range(spec.num_directions)]
    states = ("h_n", "c_n") if spec.mode == LSTM else ("h_n",)
    return {
        "y": np.concatenate([np.asarray(s["y"]) for s in steps], axis=0),
        **{name: np.stack([np.asarray(s[name])[i] for i, s in enumerate(last)]) for name in states},
        **({} if spec.mode == LSTM else {"c_n": None}),
    }


def weights_off(reading: CanonicalRNN, float_model: CanonicalRNN, step: float) -> str | None:
    """Where a dequantized weight is more than half a step from the float checkpoint's (None: nowhere): the tensor
    and gate block, and by how much. A gate's biases are compared as their sum where they add (all but a GRU's
    candidate, whose bR its reset gate scales): a file may hold only the sum (OpenVINO's and ONNX's B)."""
    worst, where = 0.0, None
    for key in reading.spec.param_keys():
        if key.kind == Kind.bR and _summed(reading.spec, key):
            continue
        got, want = (_compared(rnn, key) for rnn in (reading, float_model))
        off = float(np.max(np.abs(got - want), initial=0))
        if off > worst:
            worst, where = off, key
    slack = step * 2.0**-16  # float32 rounding: of a scale (max|W| / 127.5) over the 128 steps to the largest weight
    if where is None or worst <= step / 2 + slack:
        return None
    direction = f" {DIRECTION_WORDS[where.direction]}" if reading.spec.bidirectional else ""
    tensor = "bW + bR" if where.kind == Kind.bW and _summed(reading.spec, where) else where.kind
    return (
        f"its {tensor} of gate {where.gate or '-'} (layer {where.layer}{direction}) is {worst:.3g} from the "
        f"checkpoint's, more than half its largest quantization step ({step / 2:.3g}): it was not quantized from "
        f"this checkpoint's weights as its scales say"
    )


def _summed(spec: RNNSpec, key: ParamKey) -> bool:
    return key.kind in BIAS_KINDS and not (spec.mode == GRU and key.gate == "h")


def _compared(rnn: CanonicalRNN, key: ParamKey) -> np.ndarray:
    """The tensor `weights_off` compares at `key`: the weight, or a gate's bias sum."""
    value = np.asarray(rnn.param(key), np.float64)
    if key.kind == Kind.bW and _summed(rnn.spec, key):
        value = value + np.asarray(rnn.param(dataclasses.replace(key, kind=Kind.bR)), np.float64)
    return value
