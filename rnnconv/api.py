"""rnnconv as a Python library: the functions the command line is built on.

Every function takes `str` or `os.PathLike` paths, prints nothing, and raises the
typed errors of `rnnconv.errors` (`BadInput`, `Unsupported`, `BackendMissing`;
each carries the exit code the CLI uses). A verification that ran and disagrees
is not an error: its `Report` says `verdict == "mismatch"`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rnnconv.conversion import convert as _convert
from rnnconv.conversion import holdable, open_source, output_name
from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import ConversionResult, InspectReport
from rnnconv.errors import EXIT_INTERNAL, BadInput, RnnconvError, Unsupported, failure
from rnnconv.formats import registry
from rnnconv.formats.base import Format
from rnnconv.formats.settings import ReadOptions, WriteOptions, split
from rnnconv.safeio.inputs import check_guards, explained, reading, regular_file, resolved, unguarded, watching
from rnnconv.safeio.outputs import SIDECAR_SUFFIX, check_writable

if TYPE_CHECKING:
    from rnnconv.core.report_contracts import BatchItem, BatchResults, Identification, Report, Reports
    from rnnconv.verification.run import Stage, Writer
    from rnnconv.verification.subject import VerifyOptions

PathLike = str | os.PathLike[str]


class RNNs(list[CanonicalRNN]):
    """The RNNs `load` read: a list, and a context manager that closes the file they read from.

    Their tensors are read on demand (`rnn.param(key)`, `rnn.arrays()`) while the file is
    open; it closes on `close()`, at the end of a `with` block, or when the list is dropped.
    """

    def __init__(self, rnns: list[CanonicalRNN], stack: ExitStack):
        super().__init__(rnns)
        self._stack = stack

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> RNNs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(path: PathLike, **options: Any) -> RNNs:
    """The RNNs of a file of any format rnnconv reads (`formats()`), in cuDNN's convention (`CanonicalRNN`).

    `options` are the fields of `ReadOptions` (rnnconv.formats.settings), the command line's source options:
    `layer` picks one RNN by the name `inspect` gives it (what that is in each format: `rnnconv convert --help`);
    with several in the file and no `layer`, `all_rnns=True` returns every one that converts. `spec` describes a
    raw cuDNN weight space that has no sidecar; the other fields (what a file does not store, a format's own) as
    for `convert`.

        >>> with rnnconv.load("model.h5", layer="encoder") as (rnn,):
        ...     w_input_gate = rnn.param(ParamKey(0, 0, "W", "i"))
    """
    settings = ReadOptions.of(options, "load")
    stack = ExitStack()
    try:
        source = stack.enter_context(open_source(Path(path), settings))
    except BaseException:
        stack.close()
        raise
    return RNNs(source.rnns, stack)


def raw_spec(
    mode: str | None,
    input_size: int | None,
    hidden_size: int | None,
    num_layers: int | None = 1,
    bidirectional: bool | None = False,
    proj_size: int | None = 0,
    dtype: str | None = None,
) -> RNNSpec | None:
    """The spec of a raw weight space stated piece by piece (the CLI's flags), or None when nothing is stated."""
    if mode is None and input_size is None and hidden_size is None:
        return None
    missing = [
        flag
        for flag, value in (("--mode", mode), ("--input-size", input_size), ("--hidden-size", hidden_size))
        if value is None
    ]
    if missing or mode is None or input_size is None or hidden_size is None:
        raise BadInput(f"a raw blob needs {', '.join(missing)} as well")
    return RNNSpec(
        mode, input_size, hidden_size, num_layers or 1, bool(bidirectional), proj_size or 0, dtype or "float32"
    )


def convert(source: PathLike, output: PathLike | None = None, **options: Any) -> ConversionResult:
    """Convert `source` to `output` (a cuDNN `.bin` beside the source by default) and say what was written.

    `options` are the fields of `ReadOptions`, `WriteOptions` and `TargetOptions` (rnnconv.formats.settings), the
    command line's options by the same names. The source's format comes from its content (`source_format`
    insists on one); the target from `to` (a format's name, as `formats()` lists them) or the output's name. An
    existing output is replaced only with `force`. `dtype` converts the elements (default: the source's, where the
    target stores it); `spec` describes a raw weight space without a sidecar. What a file does not store (a simple
    RNN's `nonlinearity`, a bare Keras file's `activation` and `recurrent_activation`) is taken from these
    arguments, or assumed and recorded (`require_stated` refuses to assume). `hash_source=False` leaves the source's
    digest out of the output's description. A format's own settings (`rnnconv convert --help` says each one's) apply
    to its files alone. `progress` is told (bytes just written, total bytes) as a blob is written. A target that
    cannot hold a term of the source is refused naming it; `allow_lossy` writes it without the term and warns how much
    that changes.

    With `into` (a model file of the user's, of a format that `writes_into`), `output` is a copy of it with
    the RNNs' tensors replaced and nothing else changed: each goes where its blob came from (its
    sidecar's source), or where `layer` names in `into` (`layer` then picks nothing in `source`).
    """
    read, write, target = split(options, "convert")
    return _convert(
        Path(source),
        None if output is None else Path(output),
        target.to,
        read,
        write,
        expect=target.source_format,
        into=target.into,
    )


def convert_many(
    sources: Sequence[PathLike],
    output_dir: PathLike | None = None,
    *,
    jobs: int = 1,
    on_result: Callable[[BatchItem], None] | None = None,
    **options: Any,
) -> BatchResults:
    """Convert each source to `output_dir/<its stem><the target's suffix>` (beside it without `output_dir`).

    `options` are `convert`'s (to, layer, dtype, force, ...; not `into`, which patches one model). Names
    are planned before any work: two sources that would write one output, or an output that is another
    source, refuse the whole batch.
    `output_dir` is an existing directory, or a name ending in `/`, which is created. With `jobs` > 1
    the sources are converted that many at a time, each in a process of its own. A source that fails
    does not stop the others: its entry holds its exit code and sentence. `on_result` is called with
    each entry as its source finishes; the entries come back in the order of `sources`.
    """
    from rnnconv.core.report_contracts import BatchItem, BatchResults

    if options.get("into") is not None:
        raise BadInput("--into writes one patched model: give one source")
    split(options, "convert_many")  # a setting that is wrong is wrong for every source: said once, before any work
    if jobs < 1:
        raise BadInput(f"--jobs must be at least 1, not {jobs}")
    if not sources:
        raise BadInput("no source to convert")
    outputs = _plan_outputs([registry.source_file(Path(s)) for s in sources], output_dir, options.get("to"))
    tasks = [(str(source), str(output), options) for source, output in zip(sources, outputs)]
    items: dict[int, BatchItem] = {}

    def finished(index: int, outcome: tuple[int, str | None, ConversionResult | None]) -> None:
        source, output, _ = tasks[index]
        code, error, result = outcome
        items[index] = BatchItem(source=source, output=output, exit_code=code, error=error, result=result)
        if on_result:
            on_result(items[index])

    if jobs == 1:
        for index, task in enumerate(tasks):
            finished(index, _convert_one(*task))
    else:
        from rnnconv.pool import run as in_workers

        for index, outcome, lost in in_workers(_convert_one, tasks, jobs):
            finished(index, outcome or (EXIT_INTERNAL, lost, None))
    return BatchResults([items[index] for index in range(len(tasks))])


def is_directory_name(output: PathLike | None) -> bool:
    """Whether an output names a directory: an existing one, or a name ending in a path separator."""
    return output is not None and (os.fspath(output).endswith(("/", os.sep)) or Path(output).is_dir())


def _plan_outputs(sources: list[Path], output_dir: PathLike | None, to: str | None) -> list[Path]:
    """Each source's output; the whole batch is refused when two collide or one is another source."""
    target = registry.get(to or "cudnn")
    folder = None if output_dir is None else Path(output_dir)
    made = folder is not None and not os.path.lexists(folder) and is_directory_name(output_dir)  # DIR/: created
    if folder is not None and not folder.is_dir() and not made:
        state = "is no directory" if os.path.lexists(folder) else "does not exist (end it with / to create it)"
        raise BadInput(f"several sources are written to a directory, and {folder} {state}")
    outputs = [(source.parent if folder is None else folder) / output_name(source, target) for source in sources]
    protected = {resolved(p): s for s in sources for p in (s, s.with_name(s.name + SIDECAR_SUFFIX))}
    claimed: dict[Path, Path] = {}
    for source, output in zip(sources, outputs):
        real = resolved(output)
        if real in claimed:
            raise BadInput(
                f"{claimed[real]} and {source} would both be written to {output}; convert them to different directories"
            )
        if real in protected:
            raise BadInput(f"{source} would be written to {output}, which is a source: {protected[real]}")
        claimed[real] = source
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    return outputs


def _convert_one(source: str, output: str, options: dict[str, Any]) -> tuple[int, str | None, ConversionResult | None]:
    """One source of a batch, its failure caught: its exit code, sentence and result. A process of the pool runs
    this, so it returns plain values and records: the batch's pydantic entries are made by the caller alone (a worker
    that imported pydantic to make them took 0.13 s longer to start)."""
    try:
        return 0, None, convert(source, output, **options)
    except Exception as exc:
        return *failure(exc), None


def verify(
    blob: PathLike,
    *,
    against: PathLike | None = None,
    report: PathLike | None = None,
    junit: PathLike | None = None,
    plot: PathLike | None = None,
    summary: PathLike | None = None,
    stage: Stage | None = None,
    convert: bool = False,
    **options: Any,
) -> Report:
    """Run a cuDNN blob and its source model on the same inputs and compare: the report holds the verdict.

    `options` are those of `VerifyOptions` (backend, seq_len, batch, seed, ragged, atol, rtol,
    layer, raw_spec, require_source, diagnose, relayout, force, accept_recorded_loss). With `report`, the report is
    also written there as JSON, with `junit` as JUnit XML and with `summary` as a markdown table (a CI job's summary:
    `rnnconv.verification.summary`), each also when verify cannot run; with `plot` its per-step errors are drawn
    (.svg or .png; needs matplotlib). No file is replaced without `force`. `stage` is told what verify starts doing
    next.

    With `convert`, the blob is first made from `against` (its RNN `layer`), as `convert` would: one
    call for a CI step, whose report and JUnit file also say so when the conversion fails.
    """
    from rnnconv.verification.run import failed_report
    from rnnconv.verification.run import verify as _verify  # its engines and writers: not on a conversion's path
    from rnnconv.verification.subject import VerifyOptions

    path = Path(blob)
    outputs = _Outputs(report, junit, plot, summary)
    converting = f"converting {against} to {path} failed, so nothing was verified: "
    with _reported_early(path, against, outputs, bool(options.get("force")), lambda e: failed_report(path, e)):
        if convert and (against is None or options.get("raw_spec") is not None):
            raise BadInput("--convert makes the blob from a source model: name it with --against (no raw-blob flags)")
        try:
            source = None if against is None else registry.source_file(Path(against))
            if convert and source is not None:
                regular_file(source)
        except RnnconvError as exc:
            raise type(exc)((converting if convert else "") + str(exc)) from None
        settings = VerifyOptions(against=source, **options)

    def make_blob() -> None:
        assert source is not None
        if stage:
            stage(f"converting {source} to {path}")
        try:
            _convert(source, path, None, ReadOptions(layer=settings.layer), WriteOptions(force=settings.force))
        except RnnconvError as exc:
            raise type(exc)(converting + str(exc)) from None

    return _reported(
        path,
        settings,
        outputs,
        lambda: _verify(path, settings, stage),
        lambda e: failed_report(path, e),
        make_blob if convert else None,
    )


def verify_all(
    blob: PathLike,
    *,
    against: PathLike | None = None,
    report: PathLike | None = None,
    junit: PathLike | None = None,
    plot: PathLike | None = None,
    summary: PathLike | None = None,
    stage: Stage | None = None,
    convert: bool = False,
    **options: Any,
) -> Reports:
    """`verify` for every RNN of an rnnconv `.safetensors` (or the one of a `.bin`): one report each.

    An RNN that cannot be verified (its source is missing, a backend is) gets a report saying why
    (verdict `error` or `backend-missing`) and the others go on. `options` are `verify`'s, less
    `layer` and `relayout`, which name one RNN. With `report`, the list is written there as JSON;
    with `junit`, one JUnit test suite per RNN. `plot` draws one RNN's errors: refused here.
    """
    from rnnconv.core.report_contracts import Reports
    from rnnconv.verification.run import failed_report
    from rnnconv.verification.subject import VerifyOptions, rnn_names

    if plot is not None:
        raise BadInput("--plot draws one RNN's errors: with --all, leave it out (or verify one with --layer)")
    path = Path(blob)
    outputs = _Outputs(report, junit, None, summary)
    force = bool(options.get("force"))
    with _reported_early(path, against, outputs, force, lambda e: Reports([failed_report(path, e)])):
        if convert:
            raise BadInput("--convert makes one blob from one RNN of its source: verify it without --all")
        settings = VerifyOptions(against=None if against is None else registry.source_file(Path(against)), **options)
        if settings.layer is not None or settings.relayout is not None:
            raise BadInput("--all verifies every RNN of the file; --layer and --relayout name one, so leave them out")

    def each() -> Reports:
        names = rnn_names(path, settings)
        return Reports([_verify_rnn(path, dataclasses.replace(settings, layer=name), stage) for name in names])

    return _reported(path, settings, outputs, each, lambda exc: Reports([failed_report(path, exc)]))


def verify_changed(
    files: Sequence[PathLike],
    *,
    report: PathLike | None = None,
    junit: PathLike | None = None,
    summary: PathLike | None = None,
    stage: Stage | None = None,
    **options: Any,
) -> Reports:
    """`verify` for every file rnnconv wrote that a change to `files` touches
    (`rnnconv.verification.changed.to_verify`): those among them (or whose sidecar, weights or record changed), and
    those git tracks that were made from one of them; each against the source it records, every RNN of it (as
    `verify_all`). No file to verify gives no report.

    `options` are `verify`'s that name no RNN nor source (backend, seq_len, batch, seed, ragged, atol, rtol, diagnose,
    allow_structure_only, accept_recorded_loss, require_stated, force). `report`, `junit` and `summary` are written
    as for `verify_all`, never over a file verified.
    """
    from rnnconv.core.report_contracts import Reports
    from rnnconv.verification.changed import to_verify
    from rnnconv.verification.run import failed_report, write_outputs, writers
    from rnnconv.verification.subject import VerifyOptions, rnn_names

    settings = VerifyOptions(**options)
    outputs = _Outputs(report, junit, None, summary)
    report_path, junit_path, _, summary_path = outputs.paths()
    asked = [p for p in (report_path, junit_path, summary_path) if p is not None]
    check_writable(asked, settings.force)
    changed = [Path(f) for f in files]
    for path in changed:  # a name that is no file is a mistake (pre-commit passes the files a commit keeps)
        regular_file(path)
    written = to_verify(changed)
    if any(_names_an_input(p, written) for p in asked):
        raise BadInput("--report, --junit and --summary must not name a file verified or its sidecar")
    rows = []
    for path in written:
        try:
            names = rnn_names(path, settings)
        except RnnconvError as exc:  # the others are still verified
            rows.append(failed_report(path, exc))
            continue
        rows += [_verify_rnn(path, dataclasses.replace(settings, layer=name), stage) for name in names]
    result = Reports(rows)
    chosen = writers(result, report_path, junit_path, None)
    if summary_path is not None:
        chosen[summary_path] = _summary_writer(result)
    write_outputs(chosen, settings.force)
    return result


def audits(blob: PathLike, against: PathLike | None, layers: Sequence[str] = (), raw: bool = False) -> bool:
    """Whether `verify BLOB --against AGAINST` (with these --layer values) is the audit of a deployed whole model
    (`audit`): pairs asked for (DEPLOYED=CHECKPOINT), or, with no --layer, a model file (not a cuDNN blob) holding
    several RNNs, or one RNN that records no source while the checkpoint holds several."""
    from rnnconv.verification.audit import wanted

    return wanted(Path(blob), None if against is None else Path(against), layers, raw)


def one_layer(layers: Sequence[str]) -> str | None:
    """verify's --layer outside the audit: one RNN's name, given once."""
    if len(layers) > 1:
        raise BadInput("--layer names one RNN to verify (given several times, it pairs DEPLOYED=CHECKPOINT RNNs)")
    return layers[0] if layers else None


def audit(
    blob: PathLike,
    *,
    against: PathLike | None,
    pairs: Sequence[str] = (),
    report: PathLike | None = None,
    junit: PathLike | None = None,
    summary: PathLike | None = None,
    stage: Stage | None = None,
    **options: Any,
) -> Reports:
    """Audit a deployed whole model (`blob`: an .onnx, an OpenVINO IR, a .tflite, ...) against its training
    checkpoint (`against`, any source format): one report per RNN, in the deployed file's order.

    Each RNN of the deployed file is paired with one of the checkpoint's (`pairs`: "DEPLOYED=CHECKPOINT" names;
    the rest by position and sizes), and each pair is run as `verify` runs one RNN: the deployed one in its own
    runtime, the checkpoint's in its framework. A pair that differs is diagnosed (a GRU's reset placement, a clip
    the checkpoint has not, swapped gates, ...); an RNN with no partner gets the verdict not-found. `options` are
    `verify`'s that do not name one RNN (backend, seq_len, batch, seed, ragged, atol, rtol, diagnose, force, ...).
    """
    from rnnconv.core.report_contracts import Reports
    from rnnconv.verification.audit import audit as _audit
    from rnnconv.verification.audit import pairs_named
    from rnnconv.verification.run import failed_report
    from rnnconv.verification.subject import VerifyOptions

    path = Path(blob)
    outputs = _Outputs(report, junit, None, summary)
    with _reported_early(
        path, against, outputs, bool(options.get("force")), lambda e: Reports([failed_report(path, e)])
    ):
        one_rnn = ("convert", "plot", "relayout", "raw_spec", "streaming", "stream_runtime")
        one = [name for name in one_rnn if options.pop(name, None)]
        if one:
            raise BadInput(f"--{one[0].replace('_', '-')} is for one RNN; the audit of a whole model takes none")
        if options.get("backend", "auto") != "auto":  # each deployed RNN runs in its own runtime, as written
            raise BadInput("--backend picks the engine of a blob; the audit runs each deployed RNN in its own runtime")
        if against is None:
            raise BadInput(
                "--layer DEPLOYED=CHECKPOINT pairs a model's RNNs with its checkpoint's: name it with --against"
            )
        options.pop("all", None)  # the audit checks every RNN anyway
        checkpoint = registry.source_file(Path(against))
        regular_file(checkpoint, "--against")
        settings = VerifyOptions(against=checkpoint, **options)
        named = pairs_named(pairs)
    return _reported(
        path,
        settings,
        outputs,
        lambda: _audit(path, settings, named, stage),
        lambda e: Reports([failed_report(path, e)]),
    )


def _verify_rnn(path: Path, settings: VerifyOptions, stage: Stage | None) -> Report:
    """One RNN's report; a failure the user can fix (not a bug) becomes its report, so the others still run."""
    from rnnconv.verification.run import failed_report
    from rnnconv.verification.run import verify as _verify

    try:
        return _verify(path, settings, stage)
    except RnnconvError as exc:
        return failed_report(path, exc).model_copy(update={"name": settings.layer or ""})


Verified = TypeVar("Verified", "Report", "Reports")


@dataclasses.dataclass
class _Outputs:
    """The files a verify writes besides its answer."""

    report: PathLike | None
    junit: PathLike | None
    plot: PathLike | None
    summary: PathLike | None = None

    def paths(self) -> tuple[Path | None, ...]:
        return tuple(None if p is None else Path(p) for p in (self.report, self.junit, self.plot, self.summary))


def _summary_writer(document: Report | Reports) -> Writer:
    """`--summary`: the reports as the markdown table a CI job shows."""
    from rnnconv.core.report_contracts import Reports
    from rnnconv.verification.summary import markdown

    each = document.root if isinstance(document, Reports) else [document]
    return lambda tmp: tmp.write_text(markdown(each), encoding="utf-8")


def _reported(
    blob: Path,
    settings: VerifyOptions,
    outputs: _Outputs,
    run: Callable[[], Verified],
    failed: Callable[[BaseException], Verified],
    make_blob: Callable[[], None] | None = None,
) -> Verified:
    """`run`, its result also written where `outputs` ask; a verify that fails still writes `failed(exc)`.
    `make_blob` (verify --convert) writes the blob first, once the outputs are known to be writable."""
    from rnnconv.core.report_contracts import Reports
    from rnnconv.verification.run import write_outputs, writers

    inputs_read = [blob, *([settings.against] if settings.against else [])]
    report_path, junit_path, picture, summary_path = outputs.paths()
    written = False
    with ExitStack() as inputs:  # no output (report, relayout) may be written over the blob or the source
        try:
            asked = [p for p in (report_path, junit_path, picture, summary_path) if p is not None]
            for read in inputs_read:
                if read is blob and make_blob is not None:
                    if any(_names_an_input(p, [blob]) for p in asked):
                        raise BadInput(
                            f"--report, --junit, --summary and --plot must not name the blob {blob} or its sidecar"
                        )
                    continue
                inputs.enter_context(reading(read))
            check_writable(asked, settings.force)
            if picture is not None:
                from rnnconv.verification.plot import check_plot

                check_plot(picture)
            if make_blob is not None:
                make_blob()
                inputs.enter_context(reading(blob))
            result = run()
            check_guards()  # a verdict on a blob or a source that changed meanwhile would be on neither
            reports = result.root if isinstance(result, Reports) else [result]
            if picture is not None and reports[0].comparison is None:
                reports[0].warnings.append(f"nothing was compared step by step, so {picture} was not drawn")
                picture = None
            chosen = writers(result, report_path, junit_path, picture)
            if summary_path is not None:
                chosen[summary_path] = _summary_writer(result)
            if chosen:
                for each in reports:
                    if each.source and os.path.lexists(each.source.path):
                        inputs.enter_context(reading(Path(each.source.path)))
                written = True
                write_outputs(chosen, settings.force)
        except Exception as exc:  # a CI step that asked for a report gets one, saying why verify could not run
            cause = explained(exc)  # an input that changed meanwhile, if one did
            if not written:
                _write_failure(failed(cause), outputs, inputs_read, settings.force)
            if cause is not exc:
                raise cause from None
            raise
    return result


@contextlib.contextmanager
def _reported_early(
    blob: Path, against: PathLike | None, outputs: _Outputs, force: bool, failed: Callable[[BaseException], Verified]
) -> Iterator[None]:
    """Settings refused before verify starts (a source that is not there, impossible options) are reported too."""
    try:
        yield
    except Exception as exc:
        _write_failure(failed(exc), outputs, [blob, *([Path(against)] if against is not None else [])], force)
        raise


def _write_failure(document: Report | Reports, outputs: _Outputs, inputs_read: list[Path], force: bool) -> None:
    """The report and JUnit file of a verify that could not run, where asked (never over one of its inputs)."""
    from rnnconv.verification.run import write_outputs, writers

    report_path, junit_path, _, summary_path = outputs.paths()
    report_left, junit_left, summary_left = (
        None if p is None or _names_an_input(p, inputs_read) else p for p in (report_path, junit_path, summary_path)
    )
    if report_left or junit_left or summary_left:
        chosen = writers(document, report_left, junit_left, None)
        if summary_left is not None:
            chosen[summary_left] = _summary_writer(document)
        with contextlib.suppress(RnnconvError), unguarded():  # e.g. a report that exists: left as is
            write_outputs(chosen, force)


def _names_an_input(path: Path, inputs: list[Path]) -> bool:
    """Whether `path` is an input or its sidecar (whether they exist or not: a failed read may not have
    registered them as sources)."""
    names = {resolved(p) for read in inputs for p in (read, read.with_name(read.name + SIDECAR_SUFFIX))}
    return resolved(path) in names


def inspect(path: PathLike, profile: str | None = None, to: str | None = None) -> InspectReport:
    """Every RNN in a file: its spec, its class, and whether it converts (why not); with `to` (a format's name),
    whether it converts to that format's files, as a conversion would refuse it; with `profile` (a consumer of the
    file's format, where it has them: ONNX's), each of the consumer's documented limits the file breaks."""
    path = registry.source_file(Path(path))
    target = None if to is None else registry.get(to)
    if target is not None and not target.info.writes:
        raise BadInput(f"--to {to}: rnnconv reads {target.title} files but does not write them")
    with watching(path) as still_unchanged:
        fmt = registry.detect(path)
        report = fmt.inspect(path)
        if profile is not None:
            report.profile, report.broken_limits = profile, fmt.broken_limits(path, profile)
        if target is not None:
            report.target = target.name
            held_by(target, fmt, path, report)
        still_unchanged()  # a file that changed meanwhile may be described as neither it nor its new self
    return report


def held_by(target: Format, fmt: Format, path: Path, report: InspectReport) -> None:
    """Each RNN of the report that converts, checked against what `target` can hold, as a conversion to it would
    refuse it (the refusal its reason)."""
    converting = {entry.name: entry for entry in report.rnns if entry.converts}
    if not converting:
        return
    with fmt.read(path, ReadOptions(take_all=True, hash_source=False, drop_clip=False)) as found:
        for rnn in found.rnns:
            entry = converting.get(rnn.name)
            if entry is None:
                continue
            try:
                target.written_dtype(rnn.spec, None)
                holdable(target, rnn, WriteOptions())
            except Unsupported as exc:
                entry.converts, entry.reason = False, str(exc)


def identify(
    blob: PathLike,
    *,
    mode: str | None,
    input_size: int | None,
    hidden_size: int | None,
    num_layers: int = 1,
    bidirectional: bool = False,
    proj_size: int = 0,
    dtype: str | None = None,
    probe: PathLike | None = None,
    candidate: str | None = None,
    output: PathLike | None = None,
    to: str | None = None,
    force: bool = False,
) -> Identification:
    """Which known layouts a headerless flat blob can be in, for the stated sizes; with `probe` (an `.npz` of one
    input and its expected outputs: `rnnconv.verification.identify.PROBE_KEYS`), the one that reproduces them.

    Every row of the layout table for the mode (gate order, matrix storage, bias layout), with and without
    biases, under every packing (`rnnconv.table.packings`), in `dtype` or every element type, is sized; those
    that fit the blob's size are the candidates. `verdict` is "identified" (one layout), "ambiguous" (several:
    `candidates`) or "unidentified". `candidate` keeps only the layout with that id. With `output`, the layout
    identified is written as `convert` writes (`to`, or the output's name; an existing file only with `force`).
    """
    from rnnconv.verification.identify import identify as search

    spec = raw_spec(mode, input_size, hidden_size, num_layers, bidirectional, proj_size, dtype)
    if spec is None:
        raise BadInput("identify needs the sizes the blob is for: --mode, --input-size and --hidden-size")
    return search(
        Path(blob),
        spec,
        None if dtype is None else (spec.dtype,),
        None if probe is None else Path(probe),
        candidate,
        None if output is None else Path(output),
        to,
        force,
    )


def schema(name: str) -> dict[str, Any]:
    """The JSON schema of a document rnnconv writes (`sidecar`, `report`, `reports`, `inspect`, `conversion`,
    `batch`, `error`, `identify`)."""
    from rnnconv.core.report_contracts import SCHEMAS

    if name not in SCHEMAS:
        close = difflib.get_close_matches(name, SCHEMAS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise BadInput(f"no document named {name!r} (choose {', '.join(SCHEMAS)}){hint}")
    return SCHEMAS[name].model_json_schema(by_alias=True)


def formats() -> Iterator[str]:
    """The names of the formats rnnconv reads and writes (from their plugins: no format's code is imported)."""
    from rnnconv.formats.catalog import in_sniffing_order

    return (plugin.info.name for plugin in in_sniffing_order())
