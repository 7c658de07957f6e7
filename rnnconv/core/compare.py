"""Inputs, tolerances and the comparison of two runs: what verify, diagnose and the GPU battery share.

A leaf: it imports nothing of verify's, so each of them can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BadInput
from rnnconv.table.constants import DIRECTIONS, LSTM, MANTISSA_BITS

if TYPE_CHECKING:
    from rnnconv.core.report_contracts import Comparison, Tolerance

Inputs = dict[str, Any]  # x (T, B, I), h0 (L*D, B, out), c0 (L*D, B, H) or None, lengths (B,) or None
Outputs = dict[str, Any]  # y (T, B, D*out), h_n (L*D, B, out), c_n (L*D, B, H) or None

# (atol, rtol) by engine and the blob's element type, when the blob is as precise as its source.
TOLERANCES: dict[tuple[str, str], tuple[float, float]] = {
    ("numpy", "float64"): (5e-5, 1e-4),
    ("numpy", "float32"): (5e-5, 1e-4),
    ("numpy", "float16"): (5e-5, 1e-4),
    ("numpy", "bfloat16"): (5e-5, 1e-4),
    ("cudnn", "float64"): (5e-5, 1e-4),
    ("cudnn", "float32"): (2e-4, 1e-3),
    ("cudnn", "float16"): (2e-2, 2e-2),
    ("cudnn", "bfloat16"): (6e-2, 6e-2),
    # a format's runtime (onnxruntime, MLX, ncnn) computes in float32, whatever the blob holds
    ("runtime", "float64"): (1e-4, 1e-3),
    ("runtime", "float32"): (1e-4, 1e-3),
    ("runtime", "float16"): (2e-2, 2e-2),
    ("runtime", "bfloat16"): (6e-2, 6e-2),
}
# When the blob or its source is in half precision, that rounding dominates; a dynamically quantized source
# (int8 weights, its inputs quantized to 8 bits at run time) is compared with its dequantized float model.
NARROWED: dict[str, tuple[float, float]] = {
    "float16": (2e-2, 2e-2),
    "bfloat16": (6e-2, 6e-2),
    "int8": (2e-2, 2e-2),
    "uint8": (2e-2, 2e-2),
}
X_SCALE, STATE_SCALE = 0.8, 0.5  # non-saturating: every gate stays in its sensitive range


def make_inputs(spec: RNNSpec, seq_len: int, batch: int, seed: int, ragged: bool) -> Inputs:
    """Seeded, non-saturating inputs, distinct per batch item, with non-zero initial states."""
    if seq_len < 2 or batch < 1:
        raise BadInput("verify needs --seq-len of at least 2 and --batch of at least 1")
    rng = np.random.default_rng(seed)
    pseudo = spec.num_layers * spec.num_directions
    x = rng.normal(0.0, X_SCALE, (seq_len, batch, spec.input_size)).astype(np.float32)
    h0 = rng.normal(0.0, STATE_SCALE, (pseudo, batch, spec.output_size)).astype(np.float32)
    c0 = rng.normal(0.0, STATE_SCALE, (pseudo, batch, spec.hidden_size)).astype(np.float32)
    lengths = None
    if ragged:
        lengths = rng.integers(1, seq_len + 1, batch)
        lengths[0] = seq_len
    return {"x": x, "h0": h0, "c0": c0 if spec.mode == LSTM else None, "lengths": lengths}


def tolerance(
    engine: str, blob_dtype: str, source_dtype: str | None, atol: float | None = None, rtol: float | None = None
) -> Tolerance:
    """The table's tolerance, widened when either side holds or computes in half precision; overrides win."""
    from rnnconv.core.report_contracts import Tolerance  # verify's documents: a conversion's inputs need none

    table_atol, table_rtol = TOLERANCES[(engine if engine in ("numpy", "cudnn") else "runtime", blob_dtype)]
    narrowest = min((blob_dtype, source_dtype or blob_dtype), key=MANTISSA_BITS.__getitem__)
    if narrowest in NARROWED:
        table_atol, table_rtol = max(table_atol, NARROWED[narrowest][0]), max(table_rtol, NARROWED[narrowest][1])
    return Tolerance(atol=table_atol if atol is None else atol, rtol=table_rtol if rtol is None else rtol)


def compare(spec: RNNSpec, got: Outputs, want: Outputs, tol: Tolerance, lengths: np.ndarray | None) -> Comparison:
    """Errors overall, per time step, per output direction and per layer and direction."""
    from rnnconv.core.report_contracts import Comparison, LayerDirectionError, OutputError

    steps, batch = np.shape(got["y"])[:2]  # every run gives y; a probe's expected outputs may leave it out
    valid = np.ones((steps, batch), bool) if lengths is None else np.arange(steps)[:, None] < lengths[None, :]
    errors: dict[str, Any] = {}
    ok = True
    for name in ("y", "h_n", "c_n"):
        if want.get(name) is None:
            continue
        a, b = np.asarray(got[name], np.float64), np.asarray(want[name], np.float64)
        if a.shape != b.shape:
            raise BadInput(
                f"the blob's {name} has shape {a.shape} but the source's has {b.shape}: the blob's spec "
                f"does not describe its source"
            )
        mask = valid[..., None] if name == "y" else np.ones_like(a, bool)
        diff = np.where(mask, np.abs(a - b), 0.0)
        rel = diff / np.maximum(np.abs(b), 1e-6)
        within = bool(np.all(diff <= tol.atol + tol.rtol * np.abs(b)))
        errors[name] = OutputError(max_abs=float(diff.max()), max_rel=float(np.where(mask, rel, 0).max()), match=within)
        ok &= within
        if name == "y":
            # (steps, directions): the last layer's output is the only one a framework shows step by step
            per_step = diff.reshape(steps, batch, spec.num_directions, spec.output_size).max(axis=(1, 3))
            errors["y_per_step"] = per_step.max(axis=1).tolist()
            errors["y_per_direction"] = per_step.max(axis=0).tolist()
            errors["y_per_direction_per_step"] = per_step.T.tolist()
        else:
            errors[f"{name}_per_layer_direction"] = [
                LayerDirectionError(
                    layer=p // spec.num_directions,
                    direction=DIRECTIONS[p % spec.num_directions],
                    max_abs=float(diff[p].max()),
                )
                for p in range(diff.shape[0])
            ]
    return Comparison(match=ok, **errors)
