"""`rnnconv verify`: does the blob compute what its source model computes?

The source runs in its own framework (its format's runner, on the CPU); the blob
runs through an engine: cuDNN or, without a GPU, the numpy reference of cuDNN's
equations, which reads every weight from the blob itself through the layout
table. Both get the same seeded inputs and non-zero initial states; outputs,
final h and final c are compared overall, per time step and per layer and
direction. On a mismatch, `diagnose` tries the usual mistakes on the blob and
names the one that explains it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnconv.canonical import RNNSpec
from rnnconv.compare import STATE_SCALE, Inputs, Outputs, compare, make_inputs, tolerance
from rnnconv.contracts import (
    BackendInfo,
    Check,
    InputsInfo,
    LossCheck,
    Provenance,
    Report,
    Reports,
    Sidecar,
    SourceRun,
    dump,
)
from rnnconv.conversion import without
from rnnconv.cudnn.backend import LayoutMismatch
from rnnconv.diagnose import diagnose
from rnnconv.dtypes import count_non_finite
from rnnconv.engines import select_engine
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, cut
from rnnconv.formats import registry
from rnnconv.formats.cudnn.reader import Blob, open_blobs, pick_blob
from rnnconv.formats.cudnn.writer import in_memory_blob, write_relayout
from rnnconv.identification import PROBE_KIND, probe_comparison
from rnnconv.junit import junit_xml
from rnnconv.reference import forward
from rnnconv.safeio.digests import digest_differs
from rnnconv.safeio.inputs import FileArray, check_guards, regular_file
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.streaming import StreamRun
from rnnconv.table.constants import CUDNN_MODES, DIRECTION, LSTM, MANTISSA_BITS
from rnnconv.version import __version__
from rnnconv.weightspace import REPORTED_LAYOUT_NAME, regions

MAX_STEPS = 1 << 16  # test inputs stay small: enough steps and items to show any layout mistake
Stage = Callable[[str], None]  # told what verify starts doing next ("running the source (Keras)")
Writer = Callable[[Path], object]  # writes one output file to the (temporary) path it is given


@dataclass
class VerifyOptions:
    against: Path | None = None  # the source model, when not the one the blob names
    backend: str = "auto"  # auto, cudnn or numpy
    seq_len: int = 8
    batch: int = 3
    seed: int = 0
    ragged: bool = False
    atol: float | None = None
    rtol: float | None = None
    layer: str | None = None  # the RNN to check in an rnnconv .safetensors (and in --against)
    raw_spec: RNNSpec | None = None
    require_source: bool = False  # no source: exit 2 without a report (the default gives a structure-only report)
    diagnose: bool = True
    relayout: Path | None = None  # where to write the blob in cuDNN's layout when they differ
    force: bool = False
    allow_structure_only: bool = False  # accept a structure check alone when the source is nowhere (exit 0)
    require_stated: bool = False  # refuse a blob that assumed a setting its source does not store
    accept_recorded_loss: bool = False  # exit 0 for a file that loses what --allow-lossy recorded, and no more
    streaming: bool = False  # the file is a streaming model: fed in chunks, its states carried
    stream_runtime: str | None = None  # what runs it [default: its format's own runtime]

    def __post_init__(self) -> None:
        """Refuse impossible settings before any work."""
        if not 2 <= self.seq_len <= MAX_STEPS or not 1 <= self.batch <= MAX_STEPS:
            raise BadInput(f"verify needs --seq-len of at least 2 and --batch of at least 1 (each at most {MAX_STEPS})")
        if self.seed < 0 or (self.atol is not None and self.atol < 0) or (self.rtol is not None and self.rtol < 0):
            raise BadInput("--seed, --atol and --rtol cannot be negative")
        if self.stream_runtime is not None and not self.streaming:
            raise BadInput("--stream-runtime runs a streaming model: give it with --streaming")
        if self.streaming and (self.ragged or self.raw_spec is not None):
            raise BadInput("--streaming runs a streaming model on whole sequences: leave out --ragged and the raw spec")
        if self.streaming and self.backend != "auto":
            raise BadInput(
                "--streaming runs a streaming model in its format's runtime (--stream-runtime names another): leave "
                "out --backend"
            )


def open_blob(path: Path, options: VerifyOptions) -> Blob:
    (blob,) = pick_blob(
        open_blobs(path, options.raw_spec), options.layer, path, or_else=", or verify them all with --all"
    )
    return blob


def runtime_format(path: Path, options: VerifyOptions) -> registry.Format | None:
    """The format of a file its own runtime runs (an .onnx rnnconv wrote, ...), or None: a cuDNN blob, or a file
    verify cannot run (open_blob then says what it is)."""
    if options.raw_spec is not None:
        return None
    try:
        fmt = registry.detect(path)
    except BadInput:
        return None
    return fmt if fmt.engine is not None else None


def open_runtime_file(path: Path, fmt: registry.Format, options: VerifyOptions) -> tuple[Blob, Provenance]:
    """The RNN of a runtime's file, read back as a weight space (for the checks and the diagnosis; its source is
    the one the file records), and where it is in the file (what the format's `run` is given)."""
    read = registry.ReadOptions(layer=options.layer, hash_source=False, take_all=True)
    with fmt.read(path, read) as found:
        (rnn,) = pick_blob(found.rnns, options.layer, path, or_else=", or verify them all with --all")
        return in_memory_blob(rnn, path, next(iter(fmt.info.kinds))), rnn.source


def open_streaming_file(path: Path, options: VerifyOptions) -> tuple[Blob, StreamRun]:
    """A streaming model loaded in its runtime, and the weight space of the source it records (a streaming file is
    checked by running it: its ops are not read back as an RNN)."""
    streamed = StreamRun(registry.detect(path), path, options.stream_runtime)
    source = streamed.stream.source
    if source is None:
        raise BadInput(
            f"{path.name} records no source, so rnnconv did not write it: verify --streaming checks the "
            f"streaming models rnnconv writes"
        )
    source_path, why = (options.against, "") if options.against is not None else find_source(path, source)
    if source_path is None:
        raise BadInput(f"no numerical comparison is possible: {why} (give it with --against)")
    fmt = _source_format(source_path, source, options.against is not None)
    if options.against is not None:
        source = fmt.resolve(options.against, source, options.layer)
    with fmt.read(source_path, fmt.source_options(source)) as found:
        blob = in_memory_blob(found.rnns[0], path, next(iter(registry.detect(path).info.kinds)))
    blob.sidecar = blob.sidecar.model_copy(update={"source": source}) if blob.sidecar is not None else None
    return blob, streamed


def rnn_names(path: Path, options: VerifyOptions) -> list[str]:
    """The names of the RNNs a blob or a runtime's file holds (verify --all)."""
    runtime = runtime_format(path, options)
    if runtime is None:
        return [b.name for b in open_blobs(path, options.raw_spec)]
    with runtime.read(path, registry.ReadOptions(hash_source=False, take_all=True)) as found:
        return [rnn.name for rnn in found.rnns]


class FileRun:
    """A runtime's file run as it is, by its format's `run` in that runtime: what `verify FILE` compares."""

    def __init__(self, fmt: registry.Format, path: Path, where: Provenance, engine: registry.RuntimeEngine):
        self.fmt, self.path, self.where, self.engine = fmt, path, where, engine
        self.name = engine.name
        self.notes: list[str] = []
        self.how = ""

    def run(self, blob: Blob, inputs: Inputs) -> Outputs:
        got, self.how = self.engine.run_file(self.path, self.where, blob.spec, inputs)
        return got

    def describe(self) -> BackendInfo:
        ran = f"{self.how}, " if self.how else ""
        return BackendInfo(name=self.name, detail=f"{ran}{self.path.name} run as written")

    def versions(self) -> dict[str, str]:
        return self.engine.versions()


def structural_checks(blob: Blob) -> tuple[list[Check], list[str]]:
    """What can be checked without a source: size (checked on opening), values, description."""
    checks = [
        Check(check="size", ok=True, detail=f"{blob.words.size * blob.etype.itemsize} bytes = the spec's weight space")
    ]
    problems = []
    nonfinite = 0
    chunk = 1 << 22
    for start in range(0, blob.words.size, chunk):
        values = blob.decoded(start, start + chunk)
        nonfinite += count_non_finite(values)
    checks.append(
        Check(
            check="finite values",
            ok=nonfinite == 0,
            detail=f"{nonfinite} NaN or Inf values" if nonfinite else "all finite",
        )
    )
    if nonfinite:
        problems.append(f"the blob holds {nonfinite} NaN or Inf values")
    sidecar = blob.sidecar
    if sidecar is None:
        return checks, problems
    if sidecar.layout.name == REPORTED_LAYOUT_NAME:
        checks.append(Check(check="tensor table", ok=True, detail="offsets a GPU's cuDNN reported"))
    else:
        ok = sidecar.tensors == [r.entry(blob.etype.itemsize) for r in regions(blob.spec)]
        checks.append(
            Check(
                check="tensor table",
                ok=ok,
                detail="matches the layout" if ok else "differs from the layout this rnnconv computes",
            )
        )
        if not ok:
            problems.append("the sidecar's tensor offsets differ from the layout rnnconv computes for its spec")
    cudnn = sidecar.cudnn
    if cudnn is not None:
        spec = blob.spec
        ok = (
            cudnn.cudnnRNNMode_t == CUDNN_MODES[spec.mode][1]
            and cudnn.hiddenSize == spec.hidden_size
            and cudnn.inputSize == spec.input_size
            and cudnn.numLayers == spec.num_layers
            and cudnn.cudnnDirectionMode_t == DIRECTION[spec.bidirectional]
            and cudnn.cudnnDataType_t == blob.etype.cudnn
        )
        checks.append(
            Check(check="cuDNN settings", ok=ok, detail="agree with the spec" if ok else "contradict the spec")
        )
        if not ok:
            problems.append("the sidecar's cuDNN settings contradict its spec")
    if isinstance(blob.words, FileArray):  # a blob on disk: are its bytes those it was written with?
        checks.append(written_digest(blob.words, sidecar))
    return checks, problems


WRITTEN_DIGEST = "written digest"


def written_digest(words: FileArray, sidecar: Sidecar) -> Check:
    """The weight space's bytes against the digest its sidecar recorded when it was written: a blob changed since
    (a flipped bit that still computes within the tolerance) is said, whatever the verdict."""
    recorded = sidecar.weight_space.digest
    if recorded is None:
        return Check(
            check=WRITTEN_DIGEST,
            ok=True,
            detail=f"none recorded (a schema {sidecar.schema_version} sidecar, from an rnnconv before 0.4): a change "
            "since it was written cannot be told",
        )
    algorithm = recorded.partition(":")[0]
    differs = digest_differs(words.path, recorded, words.offset, words.nbytes)
    if differs is None:
        return Check(check=WRITTEN_DIGEST, ok=True, detail=f"{cut(algorithm)}, which this installation cannot compute")
    if differs:
        return Check(
            check=WRITTEN_DIGEST,
            ok=False,
            detail=f"the blob changed since it was written: its {algorithm} differs from the one its sidecar recorded",
        )
    return Check(check=WRITTEN_DIGEST, ok=True, detail=f"the bytes it was written with ({algorithm})")


def _source_format(path: Path, source: Provenance, against: bool) -> registry.Format:
    fmt = registry.detect(path) if against or not source.format else registry.for_kind(source.format)
    if fmt.name == "cudnn":
        raise BadInput(
            f"{'--against ' if against else 'the recorded source '}{path} is a cuDNN blob; give the "
            f"Keras or PyTorch model it came from"
        )
    return fmt


def verify(path: Path, options: VerifyOptions | None = None, stage: Stage | None = None) -> Report:
    """Run the blob and its source on the same inputs and compare; the report holds the verdict.

    `stage` is told what verify starts doing next (a command line shows it while the user waits).
    """
    options = options or VerifyOptions()
    stage = stage or (lambda text: None)
    stage("reading the blob")
    runtime = runtime_format(path, options)
    streamed = None
    if options.streaming:
        blob, streamed, where = *open_streaming_file(path, options), None
    else:
        blob, where = (open_blob(path, options), None) if runtime is None else open_runtime_file(path, runtime, options)
    checks, problems = structural_checks(blob)
    if runtime is not None:  # the weight space is rnnconv's own reading of the file: only its values say anything
        checks = [c for c in checks if c.check == "finite values" and streamed is None]
    source = blob.source
    versions = {"rnnconv": __version__, "numpy": np.__version__, "python": platform.python_version()}
    report = Report(
        verdict="structure-only",
        summary="",
        blob=str(path),
        name=blob.name,
        spec=blob.spec.to_model(),
        layout=blob.layout if runtime is None else None,
        checks=checks,
        problems=problems,
        versions=versions,
        assumptions=source.assumptions,
        allow_structure_only=options.allow_structure_only,
        accept_recorded_loss=options.accept_recorded_loss,
    )
    report.warnings += [c.detail for c in checks if c.check == WRITTEN_DIGEST and not c.ok]  # said with -q too
    if options.require_stated and source.assumptions:
        raise BadInput(
            f"--require-stated: the blob was made assuming {source.assumptions[0]}, which its source does not store"
        )
    source_path: Path | None
    if options.against is not None:
        regular_file(options.against, "--against")
        source_path, why = options.against, ""
    else:
        source_path, why = find_source(path, source)
        if runtime is not None and not source.path:
            why = (
                f"{path.name} is a {runtime.title} file that records no source, so rnnconv did not write it (to "
                f"check a conversion from it, verify what `rnnconv convert {path} OUT` writes)"
            )
    if source_path is None:
        if options.require_source:
            raise BadInput(f"no numerical comparison is possible: {why} (give it with --against)")
        report.verdict = "mismatch" if problems else "structure-only"
        allowed = "" if options.allow_structure_only else " (--allow-structure-only accepts that)"
        report.summary = f"no numerical comparison was possible: {why}; give the source with --against{allowed}. " + (
            "Structure: " + "; ".join(problems) if problems else "The structure checks passed."
        )
        return report
    if why:
        report.warnings.append(why)
    report.warnings += source_changed(source, source_path) if options.against is None else []
    probed = source.format == PROBE_KIND and options.against is None  # identify -o wrote it: the probe is its source
    fmt = None if probed else _source_format(source_path, source, options.against is not None)
    if fmt is not None and options.against is not None:
        source = fmt.resolve(options.against, source, options.layer)
    if source.dtype is not None and source.dtype not in MANTISSA_BITS:  # the record is the file's: untrusted
        raise BadInput(
            f"{path} records its source's element type as {cut(source.dtype)!r}, none rnnconv knows "
            f"({', '.join(MANTISSA_BITS)})"
        )
    own = None if runtime is None else runtime.make_engine(None if options.backend == "auto" else options.backend)
    engine: registry.Engine
    if streamed is not None:
        engine = streamed
    elif runtime is not None and own is not None and where is not None:
        engine = FileRun(runtime, path, where, own)  # the file itself, in its own runtime
    else:  # a blob; or the weights read back from a runtime's file, in the engine asked for
        engine = select_engine(options.backend)
    report.warnings += engine.notes
    steps = options.seq_len if streamed is None else streamed.steps(options.seq_len)
    if fmt is None:
        stage("reading the probe identify found the file's layout with")
        runs = probe_comparison(source_path, blob.spec)  # the probe's input and outputs, each way its shapes allow
        how = "identify's probe: the outputs the blob's model gave for the probe's input"
    else:
        inputs = make_inputs(blob.spec, steps, options.batch, options.seed, options.ragged)
        stage(f"loading and running the source ({fmt.info.title})")
        held = fmt.source_spec(source_path, source)
        check_same_rnn(blob.spec, held, path, source_path, options.against is not None)
        try:
            want, how = fmt.run(source_path, source, dataclasses.replace(blob.spec, bias=held.bias), inputs)
        except BackendMissing as exc:  # the blob's side may miss its framework too: both are named
            runtime_engine = engine.engine if isinstance(engine, FileRun) else engine
            also = runtime_engine.missing(path.name) if isinstance(runtime_engine, registry.RuntimeEngine) else None
            if also is None:
                raise
            raise BackendMissing(f"{exc}; and {also}") from None
        runs = [(inputs, want)]
    report.versions.update(engine.versions())
    report.versions["source_framework"] = how.split(":")[0]
    report.source = SourceRun(path=str(source_path), format=source.format, layer=source.layer, run=how)
    report.backend = engine.describe()
    stage(f"running the blob ({engine.name})")
    try:
        outcomes = [(inputs, want, engine.run(blob, inputs)) for inputs, want in runs]
    except LayoutMismatch as exc:  # cuDNN itself places the tensors elsewhere: no forward run is meaningful
        if options.relayout:
            refusal = exc.relayout_refusal(blob.etype.itemsize)
            if refusal is not None:
                raise Unsupported(
                    f"--relayout refused: it can only move tensors, and cuDNN differs in more ({refusal})"
                ) from None
            placed = {p.key: p.offset_bytes for p in exc.placements}
            write_relayout(blob, placed, exc.weight_space_bytes, options.relayout, exc.cudnn_version, options.force)
            report.relayout = str(options.relayout)
        report.verdict, report.summary, report.layout_findings = "mismatch", str(exc), exc.findings
        report.backend = engine.describe()
        return report
    report.backend = engine.describe()  # now with what it ran on
    stage("comparing")
    report.tolerance = tolerance(engine.name, blob.spec.dtype, source.dtype, options.atol, options.rtol)
    tol = report.tolerance
    compared = [(run, compare(blob.spec, run[2], run[1], tol, run[0]["lengths"])) for run in outcomes]
    (inputs, want, got), report.comparison = min(compared, key=lambda c: (not c[1].match, c[1].worst))
    recorded = blob.source.loss  # written with --allow-lossy: it should compute its source without what it lost
    expected = (
        want
        if recorded is None or fmt is None
        else source_without(fmt, source_path, source, runtime, blob.spec.dtype, inputs)
    )
    if streamed is not None:  # a comparison a chunk size, each a check; the worst is the verdict's
        each = {chunk: compare(blob.spec, out, want, report.tolerance, None) for chunk, out in streamed.runs.items()}
        report.checks += [
            Check(check=f"chunks of {chunk} step(s)", ok=c.match, detail=f"largest difference {c.worst:.3g}")
            for chunk, c in each.items()
        ]
        report.comparison = max(each.values(), key=lambda c: (not c.match, c.worst))
    lengths = None if inputs["lengths"] is None else [int(v) for v in inputs["lengths"]]
    states = "h0 and c0" if blob.spec.mode == LSTM else "h0"  # a GRU or simple RNN has no c
    report.inputs = InputsInfo(
        seed=options.seed,
        seq_len=inputs["x"].shape[0],
        batch=inputs["x"].shape[1],
        lengths=lengths,
        **(
            {"x_distribution": "the probe's x", "state_distribution": f"the probe's {states} (zeros where it has none)"}
            if fmt is None
            else {"state_distribution": f"normal(0, {STATE_SCALE}), {states} non-zero"}
        ),
    )
    report.verdict = "match" if report.comparison.match and not problems else "mismatch"
    if recorded is not None:
        beyond = compare(blob.spec, got, expected, report.tolerance, inputs["lengths"])
        probe = (recorded.seed, recorded.steps, recorded.batch, False)
        report.loss = LossCheck(
            dropped=recorded.dropped,
            recorded=recorded.difference,
            same_inputs=(options.seed, options.seq_len, options.batch, options.ragged) == probe,
            measured=report.comparison.worst,
            beyond=beyond.worst,
            explained=beyond.match,
        )
        if report.verdict == "mismatch" and beyond.match and not problems:
            report.verdict = "lossy-as-recorded"
    if report.verdict == "mismatch" and not report.comparison.match and options.diagnose and streamed is None:
        check_guards()  # a blob or a source that changed meanwhile explains it, without minutes of trying
        stage("looking for the mistake that explains the mismatch")
        report.diagnosis = diagnose(blob, inputs, expected, report.tolerance)  # a mistake beyond a recorded loss
    report.summary = _summary(report, "the blob" if runtime is None else path.name)
    return report


def source_without(
    fmt: registry.Format, path: Path, source: Provenance, target: registry.Format | None, written: str, inputs: Inputs
) -> Outputs:
    """What a file written with --allow-lossy should compute: the source's RNN without what the file's format
    (`target`, None: a cuDNN blob) cannot hold, the nearest RNN it holds as the conversion wrote it, in the numpy
    reference (`written`: the file's element type)."""
    with fmt.read(path, fmt.source_options(source)) as found:
        rnn = found.rnns[0]
        nearest = without((target or registry.get("cudnn")).losses_in(rnn, written), rnn)
        y, h_n, c_n = forward(nearest.spec, nearest.param, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
    return {"y": y, "h_n": h_n, "c_n": c_n}


SAME_RNN = ("input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")


def check_same_rnn(spec: RNNSpec, held: RNNSpec, path: Path, source: Path, against: bool) -> None:
    """Refuse a source whose RNN is not the one the file holds, in one sentence saying what each holds. Biases
    and the element type may differ: a target may hold zero biases, or another type, where its source does not."""
    if held.cell == spec.cell and all(getattr(held, f) == getattr(spec, f) for f in SAME_RNN):
        return
    ending = f"it is not the source of {path.name}" if against else f"{path.name} was not made from it as it is now"
    raise BadInput(
        f"{path.name} holds an RNN ({spec.describe()}), but {source.name} holds another ({held.describe()}): {ending}"
    )


def failed_report(blob: Path, exc: BaseException) -> Report:
    """The report of a verify that could not run: its verdict, and the sentence the command printed."""
    missing = isinstance(exc, BackendMissing)
    summary = str(exc) if isinstance(exc, RnnconvError) else f"internal error: {type(exc).__name__}: {exc}"
    return Report(
        verdict="backend-missing" if missing else "error",
        summary=summary,
        blob=str(blob),
        versions={"rnnconv": __version__},
    )


def writers(
    report: Report | Reports, json_path: Path | None, junit: Path | None, plot: Path | None
) -> dict[Path, Writer]:
    """The files asked for, each with its writer: the report (or `verify --all`'s reports) as JSON, as JUnit XML,
    and one report's per-step errors drawn."""
    chosen: dict[Path, Writer] = {}
    if json_path is not None:
        chosen[json_path] = lambda tmp: tmp.write_text(json.dumps(dump(report), indent=1) + "\n")
    if junit is not None:
        each = report.root if isinstance(report, Reports) else [report]
        chosen[junit] = lambda tmp: tmp.write_bytes(junit_xml(each))
    if plot is not None and isinstance(report, Report):
        from rnnconv.plot import draw_errors

        chosen[plot] = lambda tmp: draw_errors(report, tmp, plot.suffix[1:].lower())
    return chosen


def write_outputs(chosen: dict[Path, Writer], force: bool = False) -> None:
    """Write them together, atomically; an existing file is replaced only with `force`."""
    with atomic_outputs(list(chosen), force) as temps:
        for write, temp in zip(chosen.values(), temps):
            write(temp)


def source_changed(source: Provenance, path: Path) -> list[str]:
    """Warnings when the source named by the blob changed since it was converted, or when that cannot be told."""
    recorded = source.digest or (f"sha256:{source.sha256}" if source.sha256 else None)
    if recorded is None:
        return [f"the blob records no digest of {path} (converted with --no-hash), so a change since cannot be told"]
    differs = digest_differs(path, recorded)
    algorithm = recorded.partition(":")[0]
    if differs is None:
        return [
            f"the blob records a {algorithm} digest of {path}, which this installation cannot compute "
            "(pip install blake3)"
        ]
    if differs:
        return [f"{path} changed since the blob was made ({algorithm} differs); comparing with the file as it is now"]
    return []


def find_source(blob: Path, source: Provenance) -> tuple[Path | None, str]:
    """The source a blob names: where it was, else beside the blob (as it was then, or by name).

    Returns the path and a sentence saying how it was found (empty when where it was), or None and
    why not. A path that names something other than a regular file is refused.
    """
    if not source.path:
        return None, "the blob names no source"
    recorded = Path(source.path)
    candidates = [(recorded, "")]
    for relative in (source.relative_path, recorded.name):
        if relative:
            beside = blob.parent / relative
            candidates.append(
                (beside, f"the source {recorded} is not there any more; using {beside}, found beside the blob")
            )
    for candidate, how in candidates:
        if os.path.lexists(candidate):
            regular_file(candidate, "the blob's source")
            return candidate, how
    return None, f"its source {recorded} is not here, nor beside the blob"


def _summary(report: Report, subject: str) -> str:
    assert report.comparison is not None and report.tolerance is not None and report.source is not None
    worst = report.comparison.worst
    if report.verdict == "match":
        assumed = f" under the assumption that {' and '.join(report.assumptions)}" if report.assumptions else ""
        return (
            f"{subject} computes what {Path(report.source.path).name} computes{assumed}: largest difference "
            f"{worst:.3g} (tolerance {report.tolerance.atol:g} + {report.tolerance.rtol:g}*|x|)"
        )
    loss, source = report.loss, Path(report.source.path).name
    if report.verdict == "lossy-as-recorded":
        assert loss is not None
        same = ", the same" if loss.same_inputs else ""
        accepted = (
            "accepted with --accept-recorded-loss"
            if report.accept_recorded_loss
            else "--accept-recorded-loss accepts that (exit 0)"
        )
        return (
            f"{subject} computes what {source} computes without what --allow-lossy dropped writing it, as its record "
            f"says ({'; '.join(loss.dropped)}): it differs from {source} by up to {loss.measured:.3g} here (the "
            f"conversion measured {loss.recorded:.3g} on its probe inputs{same}), and from {source} without that by "
            f"{loss.beyond:.3g} (tolerance {report.tolerance.atol:g} + {report.tolerance.rtol:g}*|x|); {accepted}"
        )
    text = f"largest difference {worst:.3g}"
    if loss is not None:
        text += (
            f"; the file was written with --allow-lossy ({'; '.join(loss.dropped)}; the conversion measured "
            f"{loss.recorded:.3g}), but differs by up to {loss.beyond:.3g} from {source} without that too: it loses "
            f"more than its record says"
        )
    if report.problems:
        text += "; " + "; ".join(report.problems)
    if report.diagnosis:
        text += ". " + report.diagnosis.message
    return text
