"""What a target can hold of an RNN, derived from two declarations: the format's table rows (the cells it writes,
their activations, whether an LSTM's projection has a tensor, the biases its layouts store) and its `Holds` (element
types, layers, directions).

Every refusal of a term a target cannot hold (`losses`), the element type it writes (`written_dtype`) and the warning
when that is not the source's (`dtype_warning`) come from here; no format says them in code (a refusal's ways out,
the formats whose declarations hold the RNN, are asked of each: `conversion.ways_out`). A format overrides a verb of
its `Format` only where it truly differs (TFLite's streaming model, whose plain ops compute every cell), with one
line saying why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.errors import BadInput, Unsupported, cut, either
from rnnconv.formats.catalog import FORMAT_INFO
from rnnconv.formats.plugin import FormatInfo
from rnnconv.table.apply import row_for_mode
from rnnconv.table.constants import (
    CELL_NAMES,
    CUDNN_GATES,
    DIRECTION_WORDS,
    EXPONENT_BITS,
    GRU,
    MANTISSA_BITS,
    NONLINEARITIES,
    PROJECTION,
    Kind,
)
from rnnconv.table.rows import TABLE, Row

PROBE_STEPS, PROBE_BATCH, PROBE_SEED = 8, 3, 0  # the inputs on which --allow-lossy measures what it changes
CLIP_PROBE_STEPS, CLIP_PROBE_SCALE = 64, 10.0  # inputs large enough to reach a clip: longer, x and c0 scaled up
RESET_BEFORE_TERM = "its reset gate applied before the recurrent product"  # a reset-before GRU, as refusals name it


@dataclass
class Loss:
    """A term of an RNN that a target cannot hold: `term` is the sentence that names it (in the refusal);
    `nearest` gives the RNN the target can hold without it (what --allow-lossy writes), None where there is none."""

    term: str
    nearest: Callable[[CanonicalRNN], CanonicalRNN] | None = None


def written_row(fmt: str, spec: RNNSpec) -> Row | None:
    """The layout-table row a format's writer stores `spec`'s RNN as (a layer's, else a cell's), None where it has
    none."""
    for cell_class in (False, True):
        with contextlib.suppress(Unsupported):
            return row_for_mode(fmt, spec.mode, cell_class, spec.reset_after)[0]
    return None


def _exactly(wider: str, narrower: str) -> bool:
    """Whether every value of element type `narrower` is one of `wider`."""
    return MANTISSA_BITS[wider] >= MANTISSA_BITS[narrower] and EXPONENT_BITS[wider] >= EXPONENT_BITS[narrower]


def written_dtype(info: FormatInfo, spec: RNNSpec, requested: str | None) -> str:
    """The element type a format's writer stores `spec`'s RNN in: --dtype where the format stores it, else the
    source's where the format keeps it, else the type its runtime computes with where that holds the source's values
    exactly; refused in one sentence otherwise."""
    holds = info.holds
    if requested is not None:
        if requested not in holds.dtypes:
            raise Unsupported(f"{info.title} stores {either(holds.dtypes)} weights, not {requested} (--dtype)")
        return requested
    if spec.dtype in holds.kept:
        return spec.dtype
    computes = holds.dtypes[0]
    if not _exactly(computes, spec.dtype):
        raise Unsupported(
            f"{info.title} computes with {computes} weights: the source's {spec.dtype} weights would be rounded; say "
            f"--dtype {computes} to accept that"
        )
    return computes


def dtype_warning(info: FormatInfo, rnn: CanonicalRNN, requested: str | None) -> str | None:
    """What a conversion says where the target writes another element type than the source's, unasked."""
    dtype = written_dtype(info, rnn.spec, requested)
    if requested is not None or dtype == rnn.spec.dtype:
        return None
    return f"{rnn.name}: written as {dtype}, what {info.title} computes with, from the source's {rnn.spec.dtype}"


def _family_rows(fmt: str, cell: str) -> list[Row]:
    return [row for row in TABLE if row.format == fmt and row.adapter and row.cell == cell]


def _no_cell(info: FormatInfo, spec: RNNSpec) -> str:
    """Why a format writes no cell of `spec`'s mode: its row's refusal, that its GRUs apply the reset gate after the
    recurrent product, the activations its class computes, or the classes it has."""
    if not spec.reset_after:
        return reset_before_term(info.title)
    rows = _family_rows(info.name, spec.cell)
    refused = next((row.refusal for row in rows if row.refusal), None)
    if refused:
        return refused
    if rows:
        computed = [name for row in rows for name in row.modes]
        own = next(name for name, mode in NONLINEARITIES.items() if mode == spec.mode)
        return f"{info.title}'s {rows[0].source_class} computes {either(computed)} only, not the source's {own}"
    classes = list(dict.fromkeys(row.source_class for row in TABLE if row.format == info.name and row.adapter))
    has = " and ".join([", ".join(classes[:-1]), classes[-1]] if len(classes) > 1 else classes)
    return f"{info.title} has no {CELL_NAMES[spec.cell]} (it has {has})"


def reset_before_term(title: str) -> str:
    """The refusal of a GRU whose reset gate is applied before the recurrent product, by a format whose files rnnconv
    writes hold none: the term, and the settings of the formats that hold it (no nearest GRU computes the same)."""
    return (
        f"this GRU has {RESET_BEFORE_TERM} (h' = tanh(Wh x + Rh (r*h) + b), not cuDNN's tanh(Wh x + r*(Rh h + bRh) + "
        f"b)), which no {title} file rnnconv writes computes (it writes that GRU as {reset_before_settings()})"
    )


def reset_before_settings() -> str:
    """The settings by which formats write a GRU whose reset gate is applied before the recurrent product, as their
    table rows say (reset_after False, written): what a sentence about that form names, the ways out of a refusal."""
    named = [
        f"{FORMAT_INFO[row.format].title}'s " + ", ".join(f"{key}={value}" for key, value in row.when.items())
        for row in TABLE
        if row.cell == GRU and not row.reset_after and not row.refusal and row.when and row.format in FORMAT_INFO
    ]
    return either(list(dict.fromkeys(named)))


def b_hn_keys(spec: RNNSpec) -> list[ParamKey]:
    """Every b_hn of a GRU: the new gate's recurrent bias, which acts inside the reset product."""
    if spec.mode != GRU or not spec.bias:
        return []
    new_gate = CUDNN_GATES[GRU][-1]
    return [
        ParamKey(layer, direction, Kind.bR, new_gate)
        for layer in range(spec.num_layers)
        for direction in range(spec.num_directions)
    ]


def without_b_hn(rnn: CanonicalRNN) -> CanonicalRNN:
    """The GRU with every b_hn zero: the nearest RNN a layout without b_hn holds."""
    loaders = dict(rnn.loaders)
    for key in b_hn_keys(rnn.spec):
        shape, dtype = rnn.spec.param_shape(key), np.float64 if rnn.spec.dtype == "float64" else np.float32
        loaders[key] = functools.partial(np.zeros, shape, dtype)
    return dataclasses.replace(rnn, loaders=loaders)


def _where(keys: Iterable[ParamKey], spec: RNNSpec) -> str:
    return ", ".join(
        f"layer {k.layer}" + (f" {DIRECTION_WORDS[k.direction]}" if spec.bidirectional else "") for k in keys
    )


def losses(info: FormatInfo, rnn: CanonicalRNN) -> list[Loss]:
    """Every term of `rnn` the format's files cannot hold, as its declarations say: its cell (or that cell's
    activation), several layers or directions, a projection, a GRU's non-zero b_hn."""
    spec, holds = rnn.spec, info.holds
    found = []
    row = written_row(info.name, spec)
    if row is None:
        found.append(Loss(_no_cell(info, spec)))
    if (spec.num_layers > 1 and not holds.layers) or (spec.bidirectional and not holds.directions):
        lacks = " or ".join(["multi-layer"] * (not holds.layers) + ["bidirectional"] * (not holds.directions))
        layers = f"{spec.num_layers} layer{'s' * (spec.num_layers > 1)}"
        found.append(
            Loss(
                f"{info.title} has no {lacks} RNN (a file holds one {row.source_class if row else 'cell'}), and this "
                f"RNN has {layers} and {spec.num_directions} direction{'s' * spec.bidirectional}"
            )
        )
    if spec.proj_size and row is not None and PROJECTION not in row.tensors:
        found.append(
            Loss(f"{info.title}'s {row.source_class} has no projection (h = W_hr h', proj_size={spec.proj_size})")
        )
    if row is not None and not row.bias.holds_recurrent(row.gate_order, row.gate_order[-1]):
        nonzero = [key for key in b_hn_keys(spec) if np.any(rnn.param(key) != 0)]
        if nonzero:
            found.append(
                Loss(
                    f"{info.title}'s {row.source_class} has no b_hn (the hidden bias inside the reset product); the "
                    f"source's b_hn is non-zero ({_where(nonzero[:2], spec)})",
                    nearest=without_b_hn,
                )
            )
    return found


def check_quantizable(info: FormatInfo, quantize: str | None, dtype: str | None, streaming: bool) -> None:
    """Refuse, in one sentence, a --quantize the target cannot hold (as its `Holds` says) or that another setting
    contradicts."""
    if quantize is None:
        return
    every = sorted({kind for other in FORMAT_INFO.values() for kind in other.holds.quantizes})
    if quantize not in every:
        raise BadInput(f"unknown --quantize {cut(quantize)!r} (choose {either(every)})")
    if quantize not in info.holds.quantizes:
        holders = [other.title for other in FORMAT_INFO.values() if quantize in other.holds.quantizes]
        raise Unsupported(
            f"{info.title} holds no {quantize} quantized weights (--quantize {quantize}): {either(holders)} do"
        )
    if streaming:
        raise BadInput(
            f"--quantize writes the RNN's ops with {quantize} weights, not a streaming model: leave out --streaming or "
            "--quantize"
        )
    if dtype is not None and dtype != info.holds.dtypes[0]:
        raise BadInput(
            f"--quantize {quantize} writes {quantize} weight matrices with {info.holds.dtypes[0]} biases and states: "
            f"leave out --dtype {dtype}"
        )


def check_held(info: FormatInfo, rnn: CanonicalRNN, requested: str | None) -> None:
    """Refuse, in one sentence, an RNN the format cannot hold exactly: what a write asks before it starts where no
    conversion asked (a blob run in a format's runtime)."""
    written_dtype(info, rnn.spec, requested)
    lost = losses(info, rnn)
    if lost:
        raise Unsupported(f"{info.title} cannot hold {rnn.name} exactly: {'; '.join(loss.term for loss in lost)}")
