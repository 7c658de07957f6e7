"""Quantized weights read exactly: integers with their scales and zero points (per tensor, or per channel along one
axis), checked and dequantized, `scale * (q - zero_point)`, into the float type that holds every product exactly,
and the record of what was dequantized (`contracts.Dequantized`) a written file keeps; and the inputs a quantized
file rounds before its RNN computes with them (`contracts.RoundedInput`), refused in one sentence or, with
--allow-lossy, left out, the loss measured and recorded. TFLite's, ONNX's, OpenVINO's and PyTorch's
readers use it. And weights quantized for writing (`--quantize`): symmetric int8 as TensorFlow's converter rounds
them, with the record of what was written (`contracts.Quantized`), which TFLite's, ONNX's and OpenVINO's writers use."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rnnconv.core.bound import SYMMETRIC_ROWS, rounded, stepwise_bound
from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.compare import make_inputs
from rnnconv.core.contracts import Dequantized, Quantized, RecordedLoss, RoundedInput
from rnnconv.core.reference import forward
from rnnconv.errors import BadInput
from rnnconv.formats.holding import PROBE_BATCH, PROBE_SEED, PROBE_STEPS

# The integer types a quantized weight is stored in, with their ranges (a zero point must lie within them).
QUANTIZED_RANGES: dict[str, tuple[int, int]] = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
# An integer kernel's biases (scale: its input's times its weight's), dequantized exactly in float64 while each
# integer is below 2^29 (with a float32 scale's 24 bits, within float64's 53).
BIAS_RANGES: dict[str, tuple[int, int]] = {"int32": (-(1 << 31), (1 << 31) - 1)}
EXACT_BIAS = 1 << 29
MAX_SCALE = 2.0**64  # far beyond any weight's step; a larger one makes products no float32 RNN computes with


@dataclass(frozen=True)
class Quantization:
    """How a stored integer tensor stands for floats: one scale and zero point, or one per channel along `axis`."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None  # None: per tensor

    def scheme(self) -> str:
        return "per-tensor" if self.axis is None else f"per-channel (axis {self.axis})"

    def range(self, dtype: str) -> tuple[float, float]:
        """The floats a tensor of `dtype` holds at most: its integers' range scaled (the widest over channels)."""
        low, high = QUANTIZED_RANGES[dtype]
        ends = [(s * (low - z), s * (high - z)) for s, z in zip(self.scales, self.zero_points, strict=True)]
        return min(a for a, _ in ends), max(b for _, b in ends)


def quantization(
    scales: Sequence[float],
    zero_points: Sequence[int],
    axis: int,
    shape: tuple[int, ...],
    dtype: str,
    where: str,
    signed: bool = False,
    bias: bool = False,
) -> Quantization:
    """A tensor's quantization checked against its shape and type: scales finite and positive (`signed`: finite and
    not 0, as nncf's symmetric compression gives a channel the sign that puts its extreme weight at -128), one or
    one per channel along `axis`, as many zero points (or none: 0), each within the type's range; `bias`: an
    integer kernel's int32 bias."""
    ranges = {**QUANTIZED_RANGES, **BIAS_RANGES} if bias else QUANTIZED_RANGES
    if dtype not in ranges:
        raise BadInput(f"{where} is of type {dtype}, not a quantized type rnnconv reads ({', '.join(ranges)})")
    if not scales:
        raise BadInput(f"{where} is {dtype} with no scale: its values stand for no floats")
    zeros = tuple(int(z) for z in zero_points) or (0,) * len(scales)
    if len(zeros) != len(scales):
        raise BadInput(f"{where} has {len(scales)} scales but {len(zeros)} zero points")
    bad = [float(s) for s in scales if not (np.isfinite(s) and 0.0 < (abs(s) if signed else s) < MAX_SCALE)]
    if bad:
        step = "a finite number, not 0" if signed else "a positive finite number"
        raise BadInput(f"{where} has a scale of {bad[0]:.3g}: a quantization step is {step}")
    low, high = ranges[dtype]
    outside = [z for z in zeros if not low <= z <= high]
    if outside:
        raise BadInput(f"{where} has a zero point of {outside[0]}, outside {dtype}'s range {low} to {high}")
    if len(scales) == 1:
        return Quantization((float(scales[0]),), zeros, None)
    if not 0 <= axis < len(shape) or shape[axis] != len(scales):
        along = f"axis {axis} of its shape {list(shape)}" if 0 <= axis < len(shape) else f"axis {axis}"
        raise BadInput(f"{where} has {len(scales)} scales, one per channel along {along}, which does not fit")
    return Quantization(tuple(float(s) for s in scales), zeros, axis)


def dequantized(q: np.ndarray, quant: Quantization) -> np.ndarray:
    """scale * (q - zero_point), in float64: every such product of a float32 scale and an integer of at most 29
    bits is exact there (`EXACT_BIAS`: an int32 bias beyond it is refused by its reader)."""
    scales = np.asarray(quant.scales, np.float32).astype(np.float64)
    zeros = np.asarray(quant.zero_points, np.int64)
    if quant.axis is not None:
        shape = [1] * q.ndim
        shape[quant.axis] = -1
        scales, zeros = scales.reshape(shape), zeros.reshape(shape)
    return (q.astype(np.int64) - zeros).astype(np.float64) * scales


def exact_dtype(values: Iterable[np.ndarray]) -> str:
    """float32 where it holds every value exactly, else float64."""
    for v in values:
        if v.dtype == np.float64 and not np.array_equal(v.astype(np.float32).astype(np.float64), v):
            return "float64"
    return "float32"


def record(held: Sequence[tuple[str, Quantization]], bits: int) -> Dequantized:
    """What was dequantized of an RNN: each tensor's scheme, the bits, whether every zero point is 0, and the
    largest step, |scale| (each weight lies within half a step of the float it stands for)."""
    schemes = sorted({quant.scheme() for _, quant in held})
    return Dequantized(
        scheme=", ".join(schemes),
        bits=bits,
        symmetric=all(z == 0 for _, quant in held for z in quant.zero_points),
        tensors=[name for name, _ in held],
        largest_step=max(abs(s) for _, quant in held for s in quant.scales),
    )


def note(name: str, rec: Dequantized, dtype: str, how: str) -> str:
    """The conversion's note of what --dequantize read."""
    zero = "zero points 0" if rec.symmetric else "with zero points"
    count = len(rec.tensors)
    return (
        f"{name}: dequantized: {count} int{rec.bits} weight tensor{'s' * (count > 1)} ({rec.scheme}, {zero}, "
        f"largest step {rec.largest_step:.3g}) read as scale * (q - zero_point) in {dtype}, the float model the "
        f"quantized one approximates, not the quantized one ({how})"
    )


# The states an integer kernel rounds as it computes them (each step's, the initial ones too), with the initial
# state each also rounds, as verify's inputs name it.
STEP_STATES = {"h": "each step's h", "c": "each step's c"}
INITIAL_STATES = {"h0": "h", "c0": "c"}


def rounded_term(rounding: RoundedInput) -> str:
    """What a rounding does, as a refusal and a record name it."""
    value = STEP_STATES.get(rounding.value, rounding.value)
    return (
        f"layer {rounding.layer}'s {value} rounded by {rounding.by} to {rounding.levels} levels from "
        f"{rounding.low:.4g} to {rounding.high:.4g} (step {rounding.step:.3g})"
    )


def rounding_refusal(name: str, rounding: Sequence[RoundedInput]) -> str:
    """Why an RNN whose file rounds its inputs is not read without --allow-lossy, in one sentence."""
    terms = "; ".join(rounded_term(r) for r in rounding)
    return (
        f"{name} is quantized with its activations ({terms}): the converted float RNN would leave that rounding "
        f"out (--allow-lossy converts it without the rounding, and says how far that moves the outputs)"
    )


def rounding_dropped(rnn: CanonicalRNN, rounding: Sequence[RoundedInput]) -> CanonicalRNN:
    """An RNN whose file rounds its inputs, read without the rounding as --allow-lossy asks: the loss recorded in
    its source's provenance (what was left out, and how far that moves the outputs on probe inputs, in the numpy
    reference), and the roundings in its record of what was dequantized (verify's bound takes them in)."""
    spec = rnn.spec
    probe = make_inputs(spec, PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    by_value: dict[tuple[str, int], RoundedInput] = {(r.value, r.layer): r for r in rounding}
    dirs = spec.num_directions

    def states(values: np.ndarray | None, name: str) -> np.ndarray | None:
        if values is None:
            return None
        values = np.array(values, np.float64)
        for layer in range(spec.num_layers):
            rounding = by_value.get((name, layer)) or by_value.get((INITIAL_STATES[name], layer))
            if rounding is not None:
                part = slice(layer * dirs, (layer + 1) * dirs)
                values[part] = rounded(values[part], rounding)
        return values

    def round_input(layer: int, values: np.ndarray) -> np.ndarray:
        return rounded(values, by_value["x", layer]) if ("x", layer) in by_value else values

    def round_state(layer: int, state: str, values: np.ndarray) -> np.ndarray:
        return rounded(values, by_value[state, layer]) if (state, layer) in by_value else values

    h0, c0 = states(probe["h0"], "h0"), states(probe["c0"], "c0")
    exact = forward(spec, rnn.param, probe["x"], h0, c0, round_input=round_input, round_state=round_state)
    written = forward(spec, rnn.param, probe["x"], probe["h0"], probe["c0"])
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(exact, written, strict=True) if a is not None)
    if not np.isfinite(moved):  # a weight NaN or so large that the float model overflows: no loss to measure
        raise BadInput(
            f"{rnn.name} computes NaN or infinite outputs on probe inputs (its weights hold NaN or Inf, or overflow), "
            f"so how far leaving its rounding out moves them cannot be measured"
        )
    earlier = rnn.source.loss
    loss = RecordedLoss(
        dropped=[*(earlier.dropped if earlier else []), *(rounded_term(r) for r in rounding)],
        difference=moved + (earlier.difference if earlier else 0.0),
        seed=PROBE_SEED,
        steps=PROBE_STEPS,
        batch=PROBE_BATCH,
    )
    record = rnn.source.dequantized
    update: dict[str, object] = {"loss": loss}
    if record is not None:
        update["dequantized"] = record.model_copy(update={"rounded": list(rounding)})
    return dataclasses.replace(rnn, source=rnn.source.model_copy(update=update))


# The types --quantize writes, each with its symmetric scheme's largest level (int8: -127 to 127, as TensorFlow's
# converter writes).
WRITTEN_TYPES: dict[str, tuple[type[np.signedinteger], int]] = {"int8": (np.int8, 127)}


def symmetric(values: np.ndarray, channel_axes: tuple[int, ...], kind: str = "int8") -> tuple[np.ndarray, np.ndarray]:
    """Float weights quantized symmetrically, as TensorFlow's converter does (SymmetricQuantizeFloats): over each
    channel (the axes `channel_axes` keep; none: the whole tensor) scale = max|W| / 127 in float32 and q =
    round(W * (127 / max|W|)), halves away from zero; a channel of zeros gets scale 1. The integers, and the scales
    in the shape that broadcasts against them."""
    storage, top = WRITTEN_TYPES[kind]
    levels = np.float32(top)
    v = np.asarray(values, np.float32)
    reduced = tuple(axis for axis in range(v.ndim) if axis not in channel_axes)
    largest = np.abs(v).max(axis=reduced, keepdims=True) if v.size else np.ones([1] * v.ndim, np.float32)
    largest = np.where(largest > 0, largest, levels).astype(np.float32)
    scaled = v * (levels / largest).astype(np.float32)
    q = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5)), -levels, levels)
    return q.astype(storage), (largest / levels).astype(np.float32)


def largest_rounding(values: np.ndarray, q: np.ndarray, scales: np.ndarray) -> float:
    """The largest difference of the written weights, scale * q (`scales` broadcast against q), from the float ones:
    in float64, which holds every such product exactly."""
    written = q.astype(np.float64) * scales.astype(np.float64)
    return float(np.max(np.abs(written - np.asarray(values, np.float64)), initial=0.0))


def written_record(
    rnn: CanonicalRNN, held: Sequence[tuple[str, Quantization]], kind: str, weight_error: float, inputs_quantized: bool
) -> Quantized:
    """What a file written with --quantize records of it: the scheme, the largest rounding of a weight, and the bound
    its scales give each step of the float source's run on the conversion's probe inputs (`inputs_quantized`: the
    target's kernel rounds each step's inputs as LiteRT's and onnxruntime's hybrid ones do, per row)."""
    inputs = make_inputs(rnn.spec, PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    kernel = SYMMETRIC_ROWS if inputs_quantized else None
    bound = stepwise_bound(rnn.spec, rnn.param, inputs["x"], inputs["h0"], inputs["c0"], weight_error, kernel)
    return Quantized(
        **record(held, np.dtype(WRITTEN_TYPES[kind][0]).itemsize * 8).model_dump(),
        weight_error=weight_error,
        inputs_quantized=inputs_quantized,
        step_bound=bound,
        seed=PROBE_SEED,
        steps=PROBE_STEPS,
        batch=PROBE_BATCH,
    )


def quantized_note(name: str, rec: Quantized, target: str) -> str:
    """The conversion's warning of what --quantize wrote."""
    inputs = ", each step's inputs quantized to 8 bits at run time" if rec.inputs_quantized else ""
    return (
        f"--quantize: {name}'s {len(rec.tensors)} weight matrices written to {target} as int{rec.bits} ({rec.scheme}, "
        f"symmetric, scale = max|W| / 127{inputs}): each weight within {rec.weight_error:.3g} of the source's (half "
        f"the largest step is {rec.largest_step / 2:.3g}); on probe inputs (seed {rec.seed}, {rec.steps} steps, batch "
        f"{rec.batch}) the bound its scales give a step is {rec.step_bound:.3g}; verify holds each step to the bound "
        "on its own inputs"
    )
