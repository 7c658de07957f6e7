"""`identify`: the layout of a flat blob nobody documented, from its size and, with a probe, from what it computes.

The search space is the layout table: every row of the stated mode's cell that cuDNN can run
(gate order, matrix storage, bias layout), with and without biases, under every packing
(`table/packings.py`: cuDNN's all-matrices-then-all-biases, cell by cell, ...), in every element
type unless one is stated. Rows that put a cell's numbers in the same flat order are one layout.
The search is bounded by the table's size (rows x 2 x packings x element types), and each
candidate's size is a sum over layers: hostile sizes cost nothing, and nothing is read for it.

A probe is one input and the outputs the blob's model gives for it, in an `.npz` (PROBE_KEYS);
each candidate that fits the size is read and run through the numpy reference of cuDNN's
equations, and those that reproduce the outputs within the tolerance are named.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.compare import Inputs, Outputs, tolerance
from rnnconv.core.contracts import Provenance
from rnnconv.core.dtypes import DTYPES, ElementType, decode, element_type, source_dtype_name
from rnnconv.core.reference import forward
from rnnconv.core.report_contracts import Identification, LayoutCandidate, Tolerance
from rnnconv.errors import BadInput, Unsupported, either
from rnnconv.formats import registry
from rnnconv.formats._zip import ZIP_ERRORS
from rnnconv.formats.probe import Probe
from rnnconv.formats.settings import WriteOptions
from rnnconv.safeio.digests import digest_of
from rnnconv.safeio.inputs import FileArray, reading, regular_file, resolved, watching
from rnnconv.table.apply import assemble_stored, gate_loaders, stored_shapes
from rnnconv.table.constants import CUDNN_GATES, KINDS, LSTM, PROJECTION, Kind
from rnnconv.table.packings import MATRICES_THEN_BIASES, Packing, is_matrix, packings_for
from rnnconv.table.rows import DEFAULT_BIAS_SPLIT, TABLE, Row

# The probe's arrays: sequence-major like cuDNN's (batch-major with batch_first=True).
PROBE_KEYS: Final[dict[str, str]] = {
    "x": "input (T, B, I); required",
    "h0": "initial hidden state (L*D, B, P or H) [default: zeros]",
    "c0": "LSTM: initial cell state (L*D, B, H) [default: zeros]",
    "lengths": "each sequence's length (B,), integers 1..T [default: all T]",
    "y": "expected output (T, B, D*(P or H))",
    "h_n": "expected final hidden state (L*D, B, P or H)",
    "c_n": "LSTM: expected final cell state (L*D, B, H)",
    "batch_first": "true when x and y are (B, T, ...) [default: told by the shapes, else tried both ways]",
}
PROBE_KIND: Final = "identify-probe"  # the source a file identify -o wrote records: the probe that identified it
OUTPUT_KEYS: Final = ("y", "h_n", "c_n")
MAX_PROBE_BYTES: Final = 1 << 28  # a probe is one small input: anything bigger is a mistake or a bomb
OWN_FORMAT: Final = "cudnn"  # the row whose layout `convert` reads from a raw blob with the raw-blob flags


@dataclass(frozen=True)
class Layout:
    """One way a flat vector may hold an RNN: the rows that store a cell this way, biases or none, a packing."""

    rows: tuple[Row, ...]
    has_bias: bool
    packing: Packing

    @property
    def row(self) -> Row:
        return self.rows[0]

    def name(self, dtype: str) -> str:
        bias = "" if self.has_bias else "/no-bias"
        return f"{self.row.format}-{self.row.source_class}/{self.packing.name}{bias}/{dtype}".lower()

    def shapes(self, spec: RNNSpec, layer: int) -> dict[str, tuple[int, ...]]:
        return stored_shapes(
            self.row, spec.hidden_size, spec.layer_input_size(layer), spec.output_size, spec.proj_size, self.has_bias
        )

    def elements(self, spec: RNNSpec) -> int:
        first, *rest = (
            sum(math.prod(s) for s in self.shapes(spec, layer).values()) for layer in range(min(2, spec.num_layers))
        )
        return spec.num_directions * (first + (spec.num_layers - 1) * sum(rest))  # every layer above the first alike

    def is_own(self) -> bool:
        """Whether `rnnconv convert` reads it with the raw-blob flags (rnnconv's cuDNN weight space)."""
        return self.has_bias and self.packing is MATRICES_THEN_BIASES and any(r.format == OWN_FORMAT for r in self.rows)

    def candidate(self, spec: RNNSpec) -> LayoutCandidate:
        return LayoutCandidate(
            id=self.name(spec.dtype),
            rows=[f"{row.format} {row.source_class}" for row in self.rows],
            gate_order=list(self.row.gate_order),
            matrix=str(self.row.matrix),
            bias=str(self.row.bias) if self.has_bias else "none",
            packing=self.packing.name,
            packing_order=self.packing.description,
            dtype=spec.dtype,
            spec=spec.to_model(),
        )

    def read(self, spec: RNNSpec, blob: Path, etype: ElementType, name: str) -> CanonicalRNN:
        """The blob read this way, lazily: a stored tensor is read when a loader first needs it."""
        offset = 0
        found: dict[tuple[int, int], dict[str, FileArray]] = {}
        for layer, direction, role, shape in self.packing.segments(
            spec.num_layers, spec.num_directions, self._of(spec)
        ):
            found.setdefault((layer, direction), {})[role] = FileArray(
                blob, offset * etype.itemsize, etype.storage, shape
            )
            offset += math.prod(shape)
        cells = {
            where: gate_loaders(
                self.row, spec.hidden_size, _fetch(tensors, etype), self.has_bias, DEFAULT_BIAS_SPLIT, spec.proj_size
            )
            for where, tensors in found.items()
        }
        return CanonicalRNN.from_cell_loaders(name, dataclasses.replace(spec, bias=self.has_bias), cells)

    def _of(self, spec: RNNSpec) -> Callable[[int], dict[str, tuple[int, ...]]]:
        return lambda layer: self.shapes(spec, layer)


def _fetch(tensors: Mapping[str, FileArray], etype: ElementType) -> Callable[[str], np.ndarray]:
    read: dict[str, np.ndarray] = {}

    def fetch(role: str) -> np.ndarray:
        if role not in read:
            read[role] = decode(tensors[role].read(), etype)
        return read[role]

    return fetch


def _fingerprint(row: Row, has_bias: bool) -> tuple[tuple[str, ...], bytes, bytes]:
    """A cell's numbers in a row's flat order (small sizes, distinct values): rows that agree store alike."""
    rng = np.random.default_rng(0)
    hidden, width = 2, 3
    shapes = {Kind.W: (hidden, width), Kind.R: (hidden, hidden)}
    values = {
        (kind, gate): rng.normal(size=shapes.get(kind, (hidden,)))
        for kind in KINDS
        if kind != Kind.P
        for gate in CUDNN_GATES[row.cell]
    }
    stored = assemble_stored(row, hidden, width, hidden, lambda k, g: values[(k, g)], has_bias, dtype=np.float64)
    matrices = b"".join(stored[role].tobytes() for role in stored if is_matrix(role))
    biases = b"".join(stored[role].tobytes() for role in stored if not is_matrix(role))
    return tuple(stored), matrices, biases


def layouts(spec: RNNSpec) -> list[Layout]:
    """Every distinct layout of the table for this spec's mode and sizes, in the table's order."""
    groups: dict[Any, list[Row]] = {}
    kinds: dict[Any, tuple[bool, Packing]] = {}
    for row in TABLE:
        if row.cell != spec.cell or row.refusal or spec.mode not in row.modes.values():
            continue
        if spec.proj_size and PROJECTION not in row.tensors:
            continue
        for has_bias in (True, False):
            try:
                roles, matrices, biases = _fingerprint(row, has_bias)
            except Unsupported:  # a row that cannot hold every term of a cell (nnx's GRU: no b_hn) stores no blob
                continue
            for packing in packings_for(spec.num_layers, spec.num_directions, spec.proj_size):
                # directions interleaved tensor by tensor: rows that split their biases differently differ
                key = (matrices, biases, has_bias, packing.name, roles if packing.by_layer else ())
                groups.setdefault(key, []).append(row)
                kinds[key] = (has_bias, packing)
    return [Layout(tuple(rows), *kinds[key]) for key, rows in groups.items()]


# --- the probe ---------------------------------------------------------------------------------------------


def read_probe(path: Path, spec: RNNSpec) -> list[Oriented]:
    """The probe's arrays, checked against the stated sizes, sequence-major: read as it says (batch_first), else
    each way its shapes allow (Keras and JAX give batch-major arrays)."""
    regular_file(path, "probe")
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except ZIP_ERRORS:  # NotImplementedError too: a zip version or compression zipfile does not read
        raise BadInput(
            f"probe {path} is not an .npz file (numpy.savez of the arrays {', '.join(PROBE_KEYS)})"
        ) from None
    if declared > MAX_PROBE_BYTES:
        raise BadInput(f"probe {path} holds {declared} bytes of arrays; a probe is one small input (at most 256 MiB)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: np.asarray(archive[name]) for name in archive.files}
    except Exception as exc:  # a damaged member, an object array: numpy's many ways to refuse
        raise BadInput(f"cannot read probe {path}: {str(exc)[:200] or type(exc).__name__}") from None
    unknown = sorted(set(arrays) - set(PROBE_KEYS))
    if unknown:
        raise BadInput(f"probe {path} holds {unknown[0]!r}, which is none of {', '.join(PROBE_KEYS)}")
    return _checked_probe(arrays, spec, f"probe {path}")


@dataclass(frozen=True)
class Oriented:
    """A probe's arrays read one way: sequence-major as cuDNN's, `batch_first` when the file's x and y were (B, T,
    ...)."""

    arrays: dict[str, Any]
    batch_first: bool
    by_shapes: bool  # the probe has no batch_first key: its shapes told the way


def _checked_probe(arrays: dict[str, np.ndarray], spec: RNNSpec, where: str) -> list[Oriented]:
    if "x" not in arrays:
        raise BadInput(f"{where} has no x: it needs the input, and y, h_n or c_n for it")
    if not any(k in arrays for k in OUTPUT_KEYS):
        raise BadInput(f"{where} has no expected output: give y, h_n or c_n")
    flag = arrays.pop("batch_first", None)
    if flag is not None and (flag.shape != () or flag.dtype.kind not in "bi"):
        raise BadInput(f"{where}: batch_first must be one boolean")
    for name, value in arrays.items():
        kind = "iu" if name == "lengths" else "f"
        if value.dtype.kind not in kind or value.dtype.itemsize > 8:
            raise BadInput(
                f"{where}: {name} holds {value.dtype} values, not {'integers' if kind == 'iu' else 'floats'}"
            )
        if kind == "f" and not np.all(np.isfinite(value)):
            raise BadInput(f"{where}: {name} holds NaN or infinite values")
        arrays[name] = value.astype(value.dtype.newbyteorder("="), copy=False)  # a big-endian array reads alike
    x = arrays["x"]
    if x.ndim != 3 or 0 in x.shape:
        raise BadInput(f"{where}: x has shape {x.shape}; it must be (T, B, I) with no empty axis")
    ways = [bool(flag)] if flag is not None else [False, True]
    swapped = ("x", "y")
    read = [
        {k: np.swapaxes(v, 0, 1) if first and k in swapped and v.ndim == 3 else v for k, v in arrays.items()}
        for first in ways
    ]
    problems = [_shape_problem(one, spec, where) for one in read]
    fitting = [Oriented(one, first, flag is None) for one, first, problem in zip(read, ways, problems) if not problem]
    if not fitting:
        raise BadInput(problems[0])  # as the probe says it is, else as sequence-major (cuDNN's) reads it
    return fitting


def _shape_problem(arrays: dict[str, np.ndarray], spec: RNNSpec, where: str) -> str | None:
    """What is wrong with a probe's arrays read sequence-major, or None."""
    steps, batch, _ = arrays["x"].shape
    pseudo, out, hidden = spec.num_layers * spec.num_directions, spec.output_size, spec.hidden_size
    expected = {
        "x": (steps, batch, spec.input_size),
        "h0": (pseudo, batch, out),
        "c0": (pseudo, batch, hidden),
        "lengths": (batch,),
        "y": (steps, batch, spec.num_directions * out),
        "h_n": (pseudo, batch, out),
        "c_n": (pseudo, batch, hidden),
    }
    for name, value in arrays.items():
        if name in ("c0", "c_n") and spec.mode != LSTM:
            return f"{where} holds {name}, but a {spec.mode} has no cell state"
        if value.shape != expected[name]:
            return f"{where}: {name} has shape {value.shape}, the stated sizes need {expected[name]}"
    lengths = arrays.get("lengths")
    if lengths is not None and (lengths.min() < 1 or lengths.max() > steps):
        return f"{where}: lengths must lie between 1 and T = {steps}"
    return None


def probe_comparison(path: Path, spec: RNNSpec) -> list[tuple[Inputs, Outputs]]:
    """What `verify` compares a file identify -o wrote with: the probe's input (zero states where it gives none) and
    the outputs it holds, each way its shapes allow."""
    pseudo = spec.num_layers * spec.num_directions
    runs = []
    for one in read_probe(path, spec):
        held, batch = one.arrays, one.arrays["x"].shape[1]
        zeros = {"h0": (pseudo, batch, spec.output_size), "c0": (pseudo, batch, spec.hidden_size)}
        states = {k: np.asarray(held[k] if k in held else np.zeros(shape), np.float32) for k, shape in zeros.items()}
        inputs = {
            "x": np.asarray(held["x"], np.float32),
            "h0": states["h0"],
            "c0": states["c0"] if spec.mode == LSTM else None,
            "lengths": held.get("lengths"),
        }
        runs.append((inputs, {k: held.get(k) for k in OUTPUT_KEYS}))
    return runs


def _error_either_way(rnn: CanonicalRNN, probes: list[Oriented], tol: Tolerance) -> tuple[float, bool, bool]:
    """`_error` of the probe read each way its shapes allow, the closer one; and whether that one is batch-major by
    its shapes alone."""
    return min(
        ((*_error(rnn, one.arrays, tol), one.batch_first and one.by_shapes) for one in probes),
        key=lambda e: (not e[1], e[0]),
    )


def _error(rnn: CanonicalRNN, probe: Mapping[str, Any], tol: Tolerance) -> tuple[float, bool]:
    """The largest error against the probe's outputs (padded steps left out), and whether all are within `tol`."""
    got = dict(
        zip(
            OUTPUT_KEYS,
            forward(rnn.spec, rnn.param, probe["x"], probe.get("h0"), probe.get("c0"), probe.get("lengths")),
        )
    )
    steps, batch = probe["x"].shape[:2]
    lengths = probe.get("lengths")
    valid = np.ones((steps, batch), bool) if lengths is None else np.arange(steps)[:, None] < lengths[None, :]
    worst, within = 0.0, True
    with np.errstate(all="ignore"):
        for name in OUTPUT_KEYS:
            if name not in probe:
                continue
            want = np.asarray(probe[name], np.float64)
            diff = np.abs(np.asarray(got[name]) - want)
            if name == "y":
                diff = np.where(valid[..., None], diff, 0.0)
            if not np.all(np.isfinite(diff)):
                return math.inf, False
            worst = max(worst, float(diff.max()))
            within &= bool(np.all(diff <= tol.atol + tol.rtol * np.abs(want)))
    return worst, within


# --- the search --------------------------------------------------------------------------------------------


@dataclass
class _Fit:
    layout: Layout
    spec: RNNSpec
    etype: ElementType
    error: float | None = None
    reproduces: bool | None = None
    rnn: CanonicalRNN | None = None
    read_batch_major: bool = False  # the probe, with no batch_first key, read (B, T, ...): the way that reproduces it

    def document(self) -> LayoutCandidate:
        finite = self.error is not None and math.isfinite(self.error)
        return self.layout.candidate(self.spec).model_copy(
            update={"max_abs_error": self.error if finite else None, "reproduces": self.reproduces}
        )


def describe(candidate: LayoutCandidate) -> str:
    """A layout in words, for summaries."""
    bias = "no biases" if candidate.bias == "none" else f"{candidate.bias} biases"
    return (
        f"{' / '.join(candidate.rows)} storage (gates {', '.join(candidate.gate_order)}, {candidate.matrix} matrices, "
        f"{bias}) packed {candidate.packing}, {candidate.dtype}"
    )


def identify(
    blob: Path,
    spec: RNNSpec,
    dtypes: tuple[str, ...] | None = None,
    probe: Path | None = None,
    candidate: str | None = None,
    output: Path | None = None,
    to: str | None = None,
    force: bool = False,
) -> Identification:
    """Name the known layouts a headerless blob can be in (see the module's docstring); with `output`, write the
    one identified (or the `candidate` chosen) as any format `convert` writes."""
    size = Probe(blob).size  # an empty blob is told as every command tells it
    if output is not None and any(resolved(output) == resolved(p) for p in (blob, probe) if p is not None):
        raise BadInput(f"the output {output} is an input of identify (the blob or the probe)")
    dtypes = dtypes or DTYPES
    target = None if output is None else registry.for_output(output, to)  # a wrong output name is said first
    fits, searched, sizes, alike = [], 0, set(), []
    for dtype in dtypes:
        typed, etype = dataclasses.replace(spec, dtype=dtype), element_type(dtype)
        for layout in layouts(typed):
            elements = layout.elements(typed)
            if candidate is not None and layout.name(dtype) != candidate.lower():
                alike += [layout.name(dtype)] if elements * etype.itemsize == size else []
                continue
            searched += 1
            sizes.add((elements * etype.itemsize, dtype))
            if elements * etype.itemsize == size:
                fits.append(_Fit(layout, typed, etype))
    if candidate is not None and not searched:
        raise BadInput(
            f"no layout has the id {candidate!r} for these sizes: run identify without --candidate to list them"
        )
    result = Identification(verdict="unidentified", summary="", blob=str(blob), bytes=size, searched=searched)
    probed = None if probe is None else read_probe(probe, spec)
    with watching(blob) as unchanged:
        if probed is not None:
            result.probe = str(probe)
            outputs = probed[0].arrays
            source_dtype = source_dtype_name(next(outputs[k] for k in OUTPUT_KEYS if k in outputs).dtype)
            for fit in fits:
                fit.rnn = fit.layout.read(fit.spec, blob, fit.etype, blob.stem)
                tol = tolerance("numpy", fit.spec.dtype, source_dtype)
                fit.error, fit.reproduces, fit.read_batch_major = _error_either_way(fit.rnn, probed, tol)
                if not fit.reproduces:
                    fit.rnn = None  # its numbers are not kept: a large blob is read once per candidate, not held
            fits.sort(key=lambda f: (not f.reproduces, f.error))
            result.tolerance = tolerance("numpy", fits[0].spec.dtype, source_dtype) if fits else None
        unchanged()
    result.candidates = [fit.document() for fit in fits]
    chosen = _verdict(result, fits, probed is not None, sizes, spec, blob)
    if candidate is not None and fits:
        result.summary = _chosen_summary(result, fits[0], alike, probed is not None)
    if chosen is not None:
        result.identified = chosen.document()
        result.convert = None if output is not None else _command(blob, chosen)  # -o: what it wrote is the step
    if output is not None:
        result.outputs = _write(blob, chosen, result, output, target, force, probe)
    return result


NAMED = 3  # the other layouts a summary names; the rest are counted


def _chosen_summary(result: Identification, chosen: _Fit, alike: list[str], probed: bool) -> str:
    """What --candidate chose (and whether it reproduces the probe), and how many other known layouts the blob's
    size allows, a few of them named."""
    what = f"{result.blob} is read as {describe(chosen.document())}, the layout --candidate chose"
    if probed:
        does = "reproduces" if chosen.reproduces else "does not reproduce"
        what += f": it {does} the probe (largest error {chosen.error:.3g})"
    if not alike:
        return f"{what}; no other known layout has its size"
    named = ", ".join(alike[:NAMED]) + (f" and {len(alike) - NAMED} more" if len(alike) > NAMED else "")
    advice = "; without --candidate, the probe tries them all" if probed else "; a --probe tells which one is right"
    return f"{what}; {len(alike)} other known layouts have its size too ({named}){'' if chosen.reproduces else advice}"


def _verdict(
    result: Identification, fits: list[_Fit], probed: bool, sizes: set[tuple[int, str]], spec: RNNSpec, blob: Path
) -> _Fit | None:
    """Set the verdict and summary; the layout identified, if one is."""
    if not fits:
        nearest = sorted(sizes, key=lambda known: (abs(known[0] - result.bytes), known))[:3]
        listed = either([f"{n} bytes ({dtype})" for n, dtype in nearest])
        result.summary = (
            f"no known layout of a {spec.describe().rsplit(', ', 1)[0]} RNN is {result.bytes} bytes long (the nearest "
            f"need {listed}): check the sizes, the mode and whether it has a header"
        )
        return None
    if probed:
        good = [fit for fit in fits if fit.reproduces]
        same = [fit for fit in good if _same_numbers(fit, good[0])]
        if not good:
            best = fits[0].error
            result.summary = (
                f"none of the {len(fits)} layouts that fit {blob}'s size reproduces the probe (the closest is off by "
                f"{best:.3g}): the blob is in a layout rnnconv does not know, or the sizes, mode or probe are wrong"
            )
            return None
        if len(same) == len(good):
            others = [fit for fit in fits if not fit.reproduces]
            rest = f"; the next layout is off by {others[0].error:.3g}" if others else ""
            alike = f" ({len(same)} layouts read the same numbers here)" if len(same) > 1 else ""
            result.verdict = "identified"
            read = " read batch-major (x and y (B, T, ...), as its shapes allow)" if fits[0].read_batch_major else ""
            result.summary = (
                f"{blob} is {describe(fits[0].document())}: it reproduces the probe{read} within the tolerance "
                f"(largest error {fits[0].error:.3g}){alike}, {len(fits) - len(good)} of the {len(fits)} layouts of "
                f"its size do not{rest}"
            )
            return fits[0]
        result.verdict = "ambiguous"
        result.summary = (
            f"{len(good)} layouts reproduce the probe ({', '.join(f.layout.name(f.spec.dtype) for f in good)}): give a "
            f"probe with more steps and batch items, or pick one with --candidate"
        )
        return None
    if len(fits) == 1:
        result.verdict = "identified"
        result.summary = f"{blob} can only be {describe(fits[0].document())}: no other known layout has its size"
        return fits[0]
    result.verdict = "ambiguous"
    result.summary = (
        f"{len(fits)} known layouts fit {blob}'s {result.bytes} bytes; sizes alone cannot decide: give --probe with "
        f"one input and the outputs it gives"
    )
    return None


def _same_numbers(one: _Fit, other: _Fit) -> bool:
    """Whether two layouts read the same parameters from the blob (sizes of 1 can make different layouts agree)."""
    if one is other:
        return True
    assert one.rnn is not None and other.rnn is not None
    if one.rnn.spec != other.rnn.spec:
        return False
    mine, theirs = one.rnn.arrays(), other.rnn.arrays()
    return all(np.array_equal(mine[key], theirs[key]) for key in mine)


def _flags(spec: RNNSpec) -> str:
    flags = f"--mode {spec.mode} --input-size {spec.input_size} --hidden-size {spec.hidden_size}"
    flags += f" --num-layers {spec.num_layers}" if spec.num_layers > 1 else ""
    flags += " --bidirectional" if spec.bidirectional else ""
    flags += f" --proj-size {spec.proj_size}" if spec.proj_size else ""
    return flags + f" --dtype {spec.dtype}"


def _command(blob: Path, fit: _Fit) -> str:
    """How to go on from the layout identified: `convert` itself for rnnconv's own layout, else identify -o (never
    the command just run)."""
    quoted = shlex.quote(str(blob))
    if fit.layout.is_own():
        return f"rnnconv convert {quoted} OUTPUT {_flags(fit.spec)}"
    return (
        f"rnnconv identify {quoted} {_flags(fit.spec)} --candidate {fit.layout.name(fit.spec.dtype)} -o OUTPUT"
        f"   # OUTPUT: any file convert writes (model.bin, model.pt, ...)"
    )


def _write(
    blob: Path,
    chosen: _Fit | None,
    result: Identification,
    output: Path,
    target: Any,
    force: bool,
    probe: Path | None,
) -> list[str]:
    if chosen is None:
        raise BadInput(f"nothing written to {output}: {result.summary}; pick a layout with --candidate ID")
    rnn = chosen.rnn or chosen.layout.read(chosen.spec, blob, chosen.etype, blob.stem)
    how = "reproduced the probe" if result.probe else "is the only layout of its size"
    # The source recorded is the probe that identified it, which verify compares the file with (the blob is no
    # model file anything runs); without a probe there is nothing to compare with.
    rnn.source = Provenance(format=None, name=blob.name)
    if probe is not None and chosen.reproduces:
        rnn.source = Provenance(path=str(resolved(probe)), format=PROBE_KIND, digest=digest_of(probe), name=blob.name)
    rnn.notes.append(f"read from the raw blob {blob} as {describe(chosen.document())}, which {how}")
    with reading(blob):
        written = target.write([rnn], output, WriteOptions(force=force))
    return [str(path) for path in written.outputs]
