"""`rnnconv verify`: does the blob compute what its source model computes? (What is verified, against what and run
by what is set up in `subject`; here it is judged.)

The source runs in its own framework (its format's runner, on the CPU); the blob
runs through an engine: cuDNN or, without a GPU, the numpy reference of cuDNN's
equations, which reads every weight from the blob itself through the layout
table. Both get the same seeded inputs and non-zero initial states; outputs,
final h and final c are compared overall, per time step and per layer and
direction. On a mismatch, `diagnose` tries the usual mistakes on the blob and
names the one that explains it.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnconv.conversion import without
from rnnconv.core.compare import STATE_SCALE, Inputs, Outputs, compare, make_inputs, tolerance
from rnnconv.core.contracts import Provenance, dump
from rnnconv.core.reference import forward
from rnnconv.core.report_contracts import (
    Check,
    Diagnosis,
    InputsInfo,
    LossCheck,
    QuantizationProof,
    Report,
    Reports,
    SourceRun,
)
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported
from rnnconv.formats import base, registry, runtimes
from rnnconv.gpu.backend import LayoutMismatch
from rnnconv.safeio.inputs import check_guards
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.constants import LSTM
from rnnconv.verification.diagnose import diagnose
from rnnconv.verification.identify import probe_comparison
from rnnconv.verification.junit import junit_xml
from rnnconv.verification.quantized import (
    holds_its_reading,
    proof_checks,
    prove,
    proved,
    said,
    stepwise,
    terms_failed,
)
from rnnconv.verification.subject import (
    WRITTEN_DIGEST,
    Against,
    FileRun,
    Subject,
    VerifyOptions,
    as_held,
    check_same_rnn,
    choose_engine,
    find_against,
    open_subject,
    structural_checks,
)
from rnnconv.version import __version__

Stage = Callable[[str], None]  # told what verify starts doing next ("running the source (Keras)")
Writer = Callable[[Path], object]  # writes one output file to the (temporary) path it is given


def verify(path: Path, options: VerifyOptions | None = None, stage: Stage | None = None) -> Report:
    """Run the blob and its source on the same inputs and compare; the report holds the verdict.

    `stage` is told what verify starts doing next (a command line shows it while the user waits).
    """
    options = options or VerifyOptions()
    stage = stage or (lambda text: None)
    stage("reading the blob")
    subject = open_subject(path, options)
    report = first_report(subject, options)
    report.warnings += [c.detail for c in report.checks if c.check == WRITTEN_DIGEST and not c.ok]  # said with -q too
    against, why, warnings = find_against(subject, options)
    report.warnings += warnings
    if against is None:
        report.verdict = "mismatch" if report.problems else "structure-only"
        allowed = "" if options.allow_structure_only else " (--allow-structure-only accepts that)"
        report.summary = f"no numerical comparison was possible: {why}; give the source with --against{allowed}. " + (
            "Structure: " + "; ".join(report.problems) if report.problems else "The structure checks passed."
        )
        return report
    return judge(subject, against, choose_engine(subject, options), report, options, stage)


def first_report(subject: Subject, options: VerifyOptions) -> Report:
    """The report before anything runs: what the file holds and its structure's checks."""
    blob, runtime = subject.blob, subject.runtime
    checks, problems = structural_checks(blob)
    if runtime is not None:  # the weight space is rnnconv's own reading of the file: only its values say anything
        checks = [c for c in checks if c.check == "finite values" and subject.streamed is None]
    return Report(
        verdict="structure-only",
        summary="",
        blob=str(subject.path),
        name=blob.name,
        spec=blob.spec.to_model(),
        layout=blob.layout if runtime is None else None,
        checks=checks,
        problems=problems,
        versions={"rnnconv": __version__, "numpy": np.__version__, "python": platform.python_version()},
        assumptions=blob.source.assumptions,
        allow_structure_only=options.allow_structure_only,
        accept_recorded_loss=options.accept_recorded_loss,
    )


def judge(
    subject: Subject, against: Against, engine: runtimes.Engine, report: Report, options: VerifyOptions, stage: Stage
) -> Report:
    """Run the source in its framework and the file in `engine` on the same inputs, compare them, and give the
    verdict: a match, a mismatch with its likely mistake, or a loss the file records and no more."""
    path, blob, runtime, streamed = subject.path, subject.blob, subject.runtime, subject.streamed
    fmt, source_path, source = against.fmt, against.path, against.source
    if options.runtime_config is not None and (fmt is None or source.dequantized is None):
        raise BadInput(
            "--runtime-config sets up the runtime a quantized OpenVINO IR is deployed in: give it to its audit "
            "(verify MODEL.xml --against CHECKPOINT) or to verify of a file converted from one"
        )
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
            want, how = fmt.run(source_path, source, as_held(blob.spec, held), inputs)
        except BackendMissing as exc:  # the blob's side may miss its framework too: both are named
            runtime_engine = engine.engine if isinstance(engine, FileRun) else engine
            also = runtime_engine.missing(path.name) if isinstance(runtime_engine, base.RuntimeEngine) else None
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
            registry.weight_spaces().write_relayout(
                blob, placed, exc.weight_space_bytes, options.relayout, exc.cudnn_version, options.force
            )
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
    quantized_steps: Outputs | None = None
    written = blob.source.quantized  # what --quantize wrote: proved in three terms
    proof: QuantizationProof | None = None
    if written is not None and fmt is not None and isinstance(engine, FileRun) and streamed is None:
        stage("proving the quantized file: its weights, its kernel, end to end")
        with fmt.read(source_path, fmt.source_options(source)) as found:
            proof, report.comparison, report.tolerance = prove(
                blob.to_canonical(),
                found.rnns[0],
                written,
                inputs,
                (got, want),
                lambda step: engine.run(blob, step),
                options.bound,
            )
        report.checks += proof_checks(proof)
        report.quantization = proof
    elif fmt is not None and streamed is None and blob.source.dequantized is not None:
        stage("comparing step by step, within the quantization's bound")
        rnn, spec = blob.to_canonical(), as_held(blob.spec, held)
        quantized_run = lambda step: fmt.run(source_path, source, spec, step)[0]  # noqa: E731
        float_run = lambda step: engine.run(blob, step)  # noqa: E731
        both = (quantized_run, float_run)
        want, got, report.tolerance = stepwise(blob.spec, rnn.param, inputs, both, 0.0, blob.source.dequantized)
        with fmt.read(source_path, fmt.source_options(source)) as found:
            held_weights = holds_its_reading(rnn, found.rnns[0], Path(source_path).name)
        report.checks.append(held_weights)
        if not held_weights.ok:
            report.problems.append(held_weights.detail)
        whole = report.comparison.worst
        report.comparison = compare(blob.spec, got, want, report.tolerance, None)
        quantized_steps = want  # what the file computes, a step at a time: a recorded loss explains nothing beyond
        report.warnings.append(
            f"{Path(source_path).name} computes with quantized weights (its record: {blob.source.dequantized.scheme}, "
            f"int{blob.source.dequantized.bits}): each step was run from the float model's states and held to the "
            f"bound its scales give; over the whole sequence the outputs differ by up to {whole:.3g}, each step's "
            f"rounding carried to the next"
        )
        assert report.tolerance.bound is not None
        deployment = fmt.deployed_check(
            source_path, source, blob.spec, report.tolerance.bound, options.deployed_config()
        )
        if deployment is not None and not deployment.ok:  # the source's own deployment, not what was converted
            report.warnings.append(f"{Path(source_path).name}: {deployment.detail}")
    recorded = blob.source.loss  # written with --allow-lossy: it should compute its source without what it lost
    expected = (
        want
        if recorded is None or fmt is None
        else source_without(fmt, source_path, source, runtime, blob.spec.dtype, inputs)
    )
    if quantized_steps is not None:  # its numpy reading without the loss is no quantized run: held to the file's own
        expected = quantized_steps
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
    report.verdict = "match" if report.comparison.match and not report.problems else "mismatch"
    if proof is not None:
        report.verdict = "within-bound" if proved(proof) and not report.problems else "mismatch"
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
        if report.verdict == "mismatch" and beyond.match and not report.problems:
            report.verdict = "lossy-as-recorded"
    if proof is not None and report.verdict == "mismatch":
        report.diagnosis = Diagnosis(found=False, tried=0, message=terms_failed(proof))
    elif report.verdict == "mismatch" and fmt is not None and blob.spec.reset_after != held.reset_after:
        said = {True: "after", False: "before"}
        report.diagnosis = Diagnosis(
            found=True,
            tried=0,
            mistake="reset placement",
            message=f"{subject.called}'s GRU applies its reset gate {said[blob.spec.reset_after]} the recurrent "
            f"product, {source_path.name}'s {said[held.reset_after]} it: no weights make one GRU compute the other",
        )
    elif report.verdict == "mismatch" and not report.comparison.match and options.diagnose and streamed is None:
        check_guards()  # a blob or a source that changed meanwhile explains it, without minutes of trying
        stage("looking for the mistake that explains the mismatch")
        # a mistake beyond a recorded loss
        report.diagnosis = diagnose(
            blob, inputs, expected, report.tolerance, subject=subject.called, source=source_path.name
        )
    report.summary = _summary(report, subject.called)
    return report


def source_without(
    fmt: base.Format, path: Path, source: Provenance, target: base.Format | None, written: str, inputs: Inputs
) -> Outputs:
    """What a file written with --allow-lossy should compute: the source's RNN without what the file's format
    (`target`, None: a cuDNN blob) cannot hold, the nearest RNN it holds as the conversion wrote it, in the numpy
    reference (`written`: the file's element type)."""
    with fmt.read(path, fmt.source_options(source)) as found:
        rnn = found.rnns[0]
        nearest = without((target or registry.weight_spaces()).losses_in(rnn, written), rnn)
        y, h_n, c_n = forward(nearest.spec, nearest.param, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
    return {"y": y, "h_n": h_n, "c_n": c_n}


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
        from rnnconv.verification.plot import draw_errors

        chosen[plot] = lambda tmp: draw_errors(report, tmp, plot.suffix[1:].lower())
    return chosen


def write_outputs(chosen: dict[Path, Writer], force: bool = False) -> None:
    """Write them together, atomically; an existing file is replaced only with `force`."""
    with atomic_outputs(list(chosen), force) as temps:
        for write, temp in zip(chosen.values(), temps):
            write(temp)


def _summary(report: Report, subject: str) -> str:
    assert report.comparison is not None and report.tolerance is not None and report.source is not None
    worst = report.comparison.worst
    proof = report.quantization
    if report.verdict == "within-bound" and proof is not None:
        source = Path(report.source.path).name
        return f"{subject} computes what {source} computes within its quantization's bound ({said(proof)})"
    if report.verdict == "match":
        assumed = f" under the assumption that {' and '.join(report.assumptions)}" if report.assumptions else ""
        return (
            f"{subject} computes what {Path(report.source.path).name} computes{assumed}: largest difference "
            f"{worst:.3g} (tolerance {report.tolerance.described()})"
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
            f"{loss.beyond:.3g} (tolerance {report.tolerance.described()}); {accepted}"
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
