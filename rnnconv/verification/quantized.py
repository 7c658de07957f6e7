"""A quantized RNN held to its own error bound: each step of the quantized run, from the float model's states, against
the float model's step, within the bound its scales give (`core.bound`), and its weights within half a step of the
float checkpoint's.

Over a whole sequence a quantized run's errors are carried from step to step, and no bound that holds for every
input stays useful there; one step from the same states is where the scales bound the difference tightly enough to
tell a faithful quantization from a wrong one (a gate swapped, a scale on the wrong axis, a wrong zero point moves a
step far beyond it). So verify runs both sides a step at a time, each from the float model's own states (its
trajectory, computed in the numpy reference: a forward direction's from the steps before, a reverse one's from
the steps after), and compares the steps; the whole sequence's difference is reported beside it.

A quantized file proved against its float source (one rnnconv wrote with --quantize, or a deployed one the audit
holds to its checkpoint) is proved in three terms (`prove`), each with its number: its weights (each within half a
step of the float source's: exact), its kernel (the file in its runtime against the float run of its own dequantized
weights, a step at a time: the rounding of each step's inputs, within the bound its scales give) and end to end (the
file against the float source, a step at a time within the bound the other two give, or over the whole sequence
within --bound). A mistake in the file (a gate swapped, a scale on the wrong tensor) leaves the kernel's term small
and puts the end to end one far above it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from rnnconv.core.bound import float_states, input_rounding, integer_gates, quantization_bound
from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.compare import Inputs, Outputs, compare
from rnnconv.core.contracts import Dequantized
from rnnconv.core.reference import forward
from rnnconv.core.report_contracts import Check, Comparison, QuantizationProof, QuantizationTerm, Tolerance
from rnnconv.table.constants import BIAS_KINDS, DIRECTION_WORDS, GRU, LSTM, MANTISSA_BITS, Kind

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
    bound of any step, plus float32's. `record`, what was dequantized (or quantized), says what the quantized side
    rounds: its kernel's inputs, and the inputs the file itself rounds."""
    x = inputs["x"]
    kernel, rounded_inputs, gates = input_rounding(record), record.rounded or (), integer_gates(record)
    assert x is not None
    stepped: tuple[list[Outputs], list[Outputs]] = ([], [])
    bound = 0.0
    for x_t, h, c in float_states(spec, param, x, inputs["h0"], inputs["c0"]):
        step: Inputs = {"x": x_t, "h0": h, "c0": c, "lengths": None}
        bound = max(bound, quantization_bound(spec, param, x_t, h, c, weight_error, kernel, rounded_inputs, gates))
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


def farthest_weight(reading: CanonicalRNN, float_model: CanonicalRNN) -> tuple[float, ParamKey | None]:
    """The largest difference of a dequantized weight from the float model's, and the block it is in. A gate's
    biases are compared as their sum where they add (all but a GRU's candidate, whose bR its reset gate scales): a
    file may hold only the sum (OpenVINO's and ONNX's B)."""
    worst, where = 0.0, None
    for key in reading.spec.param_keys():
        if key.kind == Kind.bR and _summed(reading.spec, key):
            continue
        got, want = (_compared(rnn, key) for rnn in (reading, float_model))
        off = float(np.max(np.abs(got - want), initial=0))
        if off > worst:
            worst, where = off, key
    return worst, where


def _half_step(step: float) -> float:
    """Half a step, and float32's rounding: of a scale (max|W| / 127.5) over the 128 steps to the largest weight."""
    return step / 2 + step * 2.0**-16


def weights_off(
    reading: CanonicalRNN, float_model: CanonicalRNN, step: float, whose: str = "the checkpoint's"
) -> str | None:
    """Where a dequantized weight is more than half a step from the float model's (`whose` it is; None: nowhere):
    the tensor and gate block, and by how much."""
    worst, where = farthest_weight(reading, float_model)
    if where is None or worst <= _half_step(step):
        return None
    direction = f" {DIRECTION_WORDS[where.direction]}" if reading.spec.bidirectional else ""
    tensor = "bW + bR" if where.kind == Kind.bW and _summed(reading.spec, where) else where.kind
    return (
        f"its {tensor} of gate {where.gate or '-'} (layer {where.layer}{direction}) is {worst:.3g} from {whose}, "
        f"more than half its largest quantization step ({step / 2:.3g}): it was not quantized from these weights as "
        f"its scales say"
    )


def holds_its_reading(rnn: CanonicalRNN, reading: CanonicalRNN, source: str) -> Check:
    """A file converted from a quantized source against the source's dequantized reading, which the conversion
    writes as it is (rounded only to the file's element type): the check each weight holds. The step-by-step bound
    is a worst case over the kernel's rounding and lets a wrong weight pass (a matrix 10% off is 0.106 against a
    TFLite loop's bound of 0.134); this check does not."""
    worst, where = farthest_weight(rnn, reading)
    largest = max(float(np.max(np.abs(_compared(reading, key)), initial=0)) for key in reading.spec.param_keys())
    bits = min(MANTISSA_BITS[rnn.spec.dtype], MANTISSA_BITS[reading.spec.dtype])
    rounding = 2 * largest * 2.0**-bits  # each weight (and a bias sum's two) rounded to the narrower type
    name = "dequantized weights"
    if where is None or worst <= rounding:
        rounded = "exactly" if worst == 0 else f"within {worst:.3g} ({rnn.spec.dtype}'s rounding)"
        return Check(check=name, ok=True, detail=f"each is {source}'s, {rounded}")
    direction = f" {DIRECTION_WORDS[where.direction]}" if rnn.spec.bidirectional else ""
    tensor = "bW + bR" if where.kind == Kind.bW and _summed(rnn.spec, where) else where.kind
    return Check(
        check=name,
        ok=False,
        detail=f"its {tensor} of gate {where.gate or '-'} (layer {where.layer}{direction}) is {worst:.3g} from "
        f"{source}'s dequantized weight, which a conversion writes as it is (up to {rounding:.3g} of rounding): the "
        f"file does not hold the float model of the source's weights",
    )


def _summed(spec: RNNSpec, key: ParamKey) -> bool:
    return key.kind in BIAS_KINDS and not (spec.mode == GRU and key.gate == "h")


def _compared(rnn: CanonicalRNN, key: ParamKey) -> np.ndarray:
    """The tensor `farthest_weight` compares at `key`: the weight, or a gate's bias sum."""
    value = _value(rnn, key)
    if key.kind == Kind.bW and _summed(rnn.spec, key):
        value = value + _value(rnn, dataclasses.replace(key, kind=Kind.bR))
    return value


def _value(rnn: CanonicalRNN, key: ParamKey) -> np.ndarray:
    """A tensor in float64; a bias the RNN has none of, zeros (a target that always has biases holds them so)."""
    if key not in rnn.loaders:
        return np.zeros(rnn.spec.param_shape(key))
    return np.asarray(rnn.param(key), np.float64)


FAR_ABOVE = 10.0  # an end-to-end difference this many times the kernel's is no rounding: a mistake in the file


def _reference(rnn: CanonicalRNN) -> Callable[[Inputs], Outputs]:
    def run(step: Inputs) -> Outputs:
        y, h_n, c_n = forward(rnn.spec, rnn.param, step["x"], step["h0"], step["c0"])
        return {"y": y, "h_n": h_n, "c_n": c_n}

    return run


def _held(
    rnn: CanonicalRNN, inputs: Inputs, quantized: Callable[[Inputs], Outputs], weight_error: float, record: Dequantized
) -> tuple[Comparison, Tolerance]:
    """The quantized run against `rnn`'s float one, a step at a time from `rnn`'s states, within the bound its scales
    give (`record`: what the quantized side rounds)."""
    got, want, tol = stepwise(rnn.spec, rnn.param, inputs, (quantized, _reference(rnn)), weight_error, record)
    return compare(rnn.spec, got, want, tol, None), tol


def _float32(tol: Tolerance) -> str:
    """What a term's tolerance adds to the quantization's bound: float32's rounding in the runtime."""
    return f" (+ {FLOAT_ATOL:g} + {FLOAT_RTOL:g} x |value| for float32's rounding)" if tol.rtol else ""


def prove(
    reading: CanonicalRNN,
    float_model: CanonicalRNN,
    record: Dequantized,
    inputs: Inputs,
    runs: tuple[Outputs, Outputs],
    file_run: Callable[[Inputs], Outputs],
    bound: float | None,
) -> tuple[QuantizationProof, Comparison, Tolerance]:
    """A quantized file (`reading`: its dequantized weights; `record`: its scheme and what its kernel rounds, what
    --quantize wrote or what was read of it) proved against its float source (`float_model`) in three terms: its
    weights, each within half a step of the source's; its kernel (`file_run`) against the float run of its own
    dequantized weights, a step at a time from the same states, within the bound its scales give (weights exact,
    each step's inputs rounded as the kernel does); and end to end, the file against the float source: by default a
    step at a time from the source's states within the bound of the other two (each weight within half a step, each
    step's inputs rounded), or with `bound` over the whole sequence (`runs`: the file's outputs, the source's in its
    framework). The proof, the end-to-end comparison and its tolerance."""
    spec = reading.spec
    # the source as verify runs it: with the settings it does not store taken from the file (an nn.RNN's nonlinearity)
    float_model = dataclasses.replace(float_model, spec=dataclasses.replace(float_model.spec, mode=spec.mode))
    off, _ = farthest_weight(reading, float_model)
    half = _half_step(record.largest_step)
    weights_detail = weights_off(reading, float_model, record.largest_step, "the float source's") or (
        f"every dequantized weight within {off:.3g} of the float source's (half the largest step: {half:.3g})"
    )
    weights = QuantizationTerm(measured=off, bound=half, ok=off <= half, detail=weights_detail)
    how = "each step from the same states"
    kernel_cmp, kernel_tol = _held(reading, inputs, file_run, 0.0, record)
    assert kernel_tol.bound is not None
    kernel = QuantizationTerm(
        measured=kernel_cmp.worst,
        bound=kernel_tol.atol,
        ok=kernel_cmp.match,
        detail=f"the file in its runtime against the float run of its dequantized weights ({how}): up to "
        f"{kernel_cmp.worst:.3g}, held to the bound its scales give, {kernel_tol.bound:.3g}{_float32(kernel_tol)}",
    )
    whole = compare(spec, runs[0], runs[1], Tolerance(atol=0.0, rtol=0.0), inputs["lengths"]).worst
    if bound is not None:  # the user's own bound on the whole sequence
        end_tol = Tolerance(atol=bound, rtol=0.0, bound=bound)
        end_cmp = compare(spec, runs[0], runs[1], end_tol, inputs["lengths"])
        held = f"over the whole sequence: up to {end_cmp.worst:.3g}, held to --bound {bound:.3g}"
    else:
        end_cmp, end_tol = _held(float_model, inputs, file_run, record.largest_step / 2, record)
        assert end_tol.bound is not None
        held = (
            f"({how}, the source's steps in the numpy reference): up to {end_cmp.worst:.3g}, held to the bound of "
            f"weights within half a step and the kernel's rounding, {end_tol.bound:.3g}{_float32(end_tol)}; over the "
            f"whole sequence the outputs differ by up to {whole:.3g}, each step's rounding carried to the next"
        )
    end_to_end = QuantizationTerm(
        measured=end_cmp.worst,
        bound=end_tol.atol,
        ok=end_cmp.match,
        detail=f"the file in its runtime against the float source {held}",
    )
    proof = QuantizationProof(
        scheme=record.scheme,
        bits=record.bits,
        weights=weights,
        kernel=kernel,
        end_to_end=end_to_end,
        bound_given=bound is not None,
    )
    return proof, end_cmp, end_tol


def terms(proof: QuantizationProof) -> list[tuple[str, QuantizationTerm]]:
    """The proof's terms in their order (weights, kernel, end to end), each with its name as the report says it."""
    return [(name.replace("_", " "), value) for name, value in proof if isinstance(value, QuantizationTerm)]


def proof_checks(proof: QuantizationProof) -> list[Check]:
    """The report's checks of a proof: one for each term, with its number."""
    return [Check(check=f"quantized {name}", ok=term.ok, detail=term.detail) for name, term in terms(proof)]


def said(proof: QuantizationProof) -> str:
    """A proof's terms as a summary says them, each with its number and bound."""
    held = ", ".join(f"{name} {term.measured:.3g} (bound {term.bound:.3g})" for name, term in terms(proof))
    return f"{proof.scheme}, int{proof.bits}: {held}"


def proved(proof: QuantizationProof) -> bool:
    return all(term.ok for _, term in terms(proof))


def terms_failed(proof: QuantizationProof) -> str:
    """What a proof's failed terms say, and the mistake an end-to-end difference far above the kernel's points to."""
    failed = [f"{name}: {term.detail}" for name, term in terms(proof) if not term.ok]
    kernel = max(proof.kernel.measured, FLOAT_ATOL)  # what the kernel's rounding moved a step, at least float32's
    if not proof.end_to_end.ok and proof.end_to_end.measured > FAR_ABOVE * kernel:
        failed.append(
            f"end to end it is {proof.end_to_end.measured / kernel:.3g} times the kernel's difference, which no "
            f"rounding explains: the file computes another RNN than its source (a gate swapped, a scale on the wrong "
            f"tensor or axis, a wrong zero point, a clip)"
        )
    return "; ".join(failed)
