"""`rnnconv verify DEPLOYED --against CHECKPOINT`: audit a deployed whole model against its training checkpoint.

Every RNN of the deployed file (as its format's reader lists them) is paired with one of the checkpoint's: by `--layer
DEPLOYED=CHECKPOINT`, else by position and sizes (the first of the checkpoint's RNNs not yet paired that has the same
sizes, and the same cell where both files tell it; for a multi-layer RNN no one RNN fits, the first run of consecutive
unpaired ones that stack into it, as `convert --layer a,b` reads them). Each pair runs on verify's seeded inputs: the
deployed RNN in its own runtime as written (its ops, weights and attributes: a clip, a reset placement), the
checkpoint's in its own framework, compared as verify compares. A pair that differs is diagnosed by trying the
exporters' known mistakes until one explains it: the checkpoint's GRU computed with the reset gate before the
recurrent matrix (ONNX's linear_before_reset=0), the deployed reading without its clip (TensorFlow's converter writes
cell_clip=10 for every Keras LSTM), then verify's usual mistakes on the deployed reading (gates swapped, ...). One row
per RNN: match, mismatch with its diagnosis, or not-found (an RNN with no partner on the other side); where --layer
pairs say what is deployed, a checkpoint's RNN they leave out is not-deployed (the deployed file holds only some of
the checkpoint's RNNs: an encoder deployed alone), which fails nothing.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.compare import STATE_SCALE, Inputs, Outputs, compare, make_inputs, tolerance
from rnnconv.core.contracts import BackendInfo, InspectEntry, Provenance
from rnnconv.core.reference import forward
from rnnconv.core.report_contracts import WHOLE_MODEL, Diagnosis, InputsInfo, Report, Reports, SourceRun, Tolerance
from rnnconv.errors import BadInput, RnnconvError, Unsupported, cut, listing, no_such_rnn
from rnnconv.formats import base, registry
from rnnconv.formats.holding import reset_before_settings
from rnnconv.formats.settings import ReadOptions
from rnnconv.table.constants import CUDNN_MODES, GRU, LSTM
from rnnconv.verification.diagnose import diagnose
from rnnconv.verification.quantized import proof_checks, prove, proved, said, terms_failed
from rnnconv.verification.run import Stage, failed_report
from rnnconv.verification.subject import SAME_RNN, VerifyOptions, as_held, check_same_rnn
from rnnconv.version import __version__

STACK = ","  # consecutive RNNs of a checkpoint named as one stack (convert's --layer a,b)
RESET_PLACEMENT = (
    f"the deployed GRU applies its reset gate before the recurrent matrix ({reset_before_settings()}), where the "
    f"checkpoint's applies it after (as cuDNN's GRU does): the checkpoint's GRU computed with the reset before gives "
    f"what the file computes, so the exporter wrote the wrong reset placement"
)


@dataclass
class Side:
    """A file of the audit, its format and its RNNs in the file's order."""

    fmt: base.Format
    path: Path
    rnns: list[InspectEntry]

    @classmethod
    def of(cls, path: Path) -> Side:
        fmt = registry.detect(path)
        return cls(fmt, path, fmt.listed(path))


def pairs_named(layers: Sequence[str]) -> dict[str, str]:
    """--layer DEPLOYED=CHECKPOINT, each given once: the deployed RNN's name for each checkpoint RNN's."""
    named: dict[str, str] = {}
    for text in layers:
        deployed, equals, checkpoint = text.partition("=")
        if not equals or not deployed or not checkpoint:
            raise BadInput(f"--layer {cut(text)!r} pairs no RNNs: the audit takes --layer DEPLOYED=CHECKPOINT")
        if deployed in named or checkpoint in named.values():
            raise BadInput(f"--layer {cut(text)!r} pairs an RNN that another --layer pairs already")
        named[deployed] = checkpoint
    return named


def wanted(path: Path, against: Path | None, layers: Sequence[str], raw: bool) -> bool:
    """Whether `verify FILE --against SOURCE` is the audit: pairs asked for (--layer a=b), or, with no --layer, a
    file that its own runtime or framework runs (not a cuDNN blob) holding several RNNs, or one RNN that does not
    read into rnnconv's form (a clip, a reset placement cuDNN has not: the audit runs it as written), or one that
    records no source (rnnconv did not write it) while the checkpoint holds several. Anything else is verify's one
    RNN."""
    if any("=" in layer for layer in layers):
        return True
    if against is None or layers or raw:
        return False
    try:
        fmt = registry.detect(path)
        if fmt.name == "cudnn":
            return False
        if fmt.copies_model(path, against) and registry.detect(against) is fmt:  # the model checked whole too
            return True
        deployed = fmt.listed(path)
        if len(deployed) != 1:
            return len(deployed) > 1
        if not deployed[0].converts:  # verify's one RNN reads it; the audit runs it as written
            return True
        return deployed[0].source is None and len(registry.detect(against).listed(against)) > 1
    except RnnconvError:  # verify's one RNN then says what is wrong with the file, in its words
        return False


def _sizes(entry: InspectEntry) -> tuple[object, ...] | None:
    return None if entry.sizes is None else tuple(getattr(entry.sizes, name) for name in SAME_RNN)


def _cell(entry: InspectEntry) -> str | None:
    return None if entry.spec is None else CUDNN_MODES[entry.spec.mode][0]


def _fits(deployed: InspectEntry, checkpoint: InspectEntry) -> bool:
    cells = {_cell(deployed), _cell(checkpoint)} - {None}
    return _sizes(deployed) is not None and _sizes(deployed) == _sizes(checkpoint) and len(cells) <= 1


def _stacked(checkpoint: Side, entries: Sequence[InspectEntry]) -> InspectEntry | None:
    """Consecutive RNNs of the checkpoint read as one RNN of their layers stacked, as `convert --layer a,b` reads
    them (a Keras model's stacked layers, which a deployed file holds as one multi-layer RNN): its entry, its
    provenance saying the stack; None where the format does not stack them."""
    name = STACK.join(e.name for e in entries)
    try:
        with checkpoint.fmt.read(checkpoint.path, ReadOptions(layer=name, hash_source=False)) as found:
            (rnn,) = found.rnns
    except (RnnconvError, ValueError):  # not layers of one stack (or a format that stacks none)
        return None
    if not rnn.source.stacked:
        return None
    return InspectEntry(
        name=name, layer_class=entries[0].layer_class, spec=rnn.spec.to_model(), converts=True, source=rnn.source
    )


def _stack_for(deployed: InspectEntry, checkpoint: Side, free: list[InspectEntry]) -> InspectEntry | None:
    """The first run of consecutive unpaired RNNs of the checkpoint whose layers stacked are the deployed RNN's."""
    sizes = deployed.sizes
    if sizes is None or sizes.num_layers < 2:
        return None
    order = [e for e in checkpoint.rnns if e in free]
    for start, first in enumerate(order):
        if first.sizes is None or first.sizes.input_size != sizes.input_size:
            continue
        run, layers = [], 0
        for entry in order[start:]:
            alike = entry.sizes is not None and (entry.sizes.hidden_size, entry.sizes.bidirectional) == (
                sizes.hidden_size,
                sizes.bidirectional,
            )
            if not alike or layers >= sizes.num_layers:
                break
            run.append(entry)
            layers += entry.sizes.num_layers if entry.sizes is not None else 0
        if layers == sizes.num_layers and len(run) > 1:
            stack = _stacked(checkpoint, run)
            if stack is not None and _fits(deployed, stack):
                return stack
    return None


def pair(
    deployed: Side, checkpoint: Side, named: dict[str, str]
) -> list[tuple[InspectEntry | None, InspectEntry | None]]:
    """The rows: each deployed RNN with its partner (None: none), in the deployed file's order, then the
    checkpoint's RNNs left without one. A partner may be consecutive RNNs of the checkpoint stacked (`_stacked`):
    named so by --layer (DEPLOYED=a,b), or found where no one RNN of the checkpoint fits."""
    held = {e.name: e for e in checkpoint.rnns}
    known = [e.name for e in deployed.rnns]
    for name in named:
        if name not in known:
            raise no_such_rnn(f"--layer: {deployed.path} has no RNN", name, known)
    taken = set(named.values())
    for name in named.values():
        parts = name.split(STACK) if name not in held else [name]
        for part in parts:
            if part not in held:
                raise no_such_rnn(f"--layer: {checkpoint.path} has no RNN", part, list(held))
        if len(parts) > 1:
            stack = _stacked(checkpoint, [held[part] for part in parts])
            if stack is None:
                raise BadInput(
                    f"--layer: {checkpoint.path.name}'s {listing(parts)} do not stack into one RNN (consecutive "
                    f"layers of one class, units and directions, nothing between them)"
                )
            held[name] = stack
            taken |= set(parts)
    free = [e for e in checkpoint.rnns if e.name not in taken]
    rows: list[tuple[InspectEntry | None, InspectEntry | None]] = []
    for entry in deployed.rnns:
        partner = held[named[entry.name]] if entry.name in named else next((e for e in free if _fits(entry, e)), None)
        if partner is None and entry.name not in named:
            partner = _stack_for(entry, checkpoint, free)
        if partner in free:
            free.remove(partner)
        elif partner is not None and partner.name not in held:  # a stack found: its layers are paired
            free = [e for e in free if e.name not in partner.name.split(STACK)]
        rows.append((entry, partner))
    return rows + [(None, entry) for entry in free]


def _described(entry: InspectEntry) -> str:
    sizes = entry.sizes
    if sizes is None:
        return "sizes unknown"
    text = f"{entry.layer_class}, in {sizes.input_size} hidden {sizes.hidden_size}"
    return (
        text
        + (f", {sizes.num_layers} layers" if sizes.num_layers > 1 else "")
        + (", bidirectional" if sizes.bidirectional else "")
    )


def audit(path: Path, options: VerifyOptions, named: dict[str, str], stage: Stage | None = None) -> Reports:
    """One report per RNN of the deployed file and of the checkpoint (`options.against`): a pair's verify, or a
    not-found row for an RNN without a partner."""
    assert options.against is not None
    deployed = Side.of(path)
    if deployed.fmt.name == "cudnn":
        raise BadInput(
            f"{path} is a cuDNN blob, not a deployed model: verify its RNNs against their sources with --all (the "
            f"audit pairs the RNNs of a model file, such as an .onnx, with a checkpoint's)"
        )
    checkpoint = Side.of(options.against)
    rows = []
    if deployed.fmt is checkpoint.fmt and deployed.fmt.copies_model(path, checkpoint.path):
        if stage:
            stage(f"checking the whole model against {cut(checkpoint.path.name)}")
        try:
            rows.append(
                deployed.fmt.model_report(
                    path, checkpoint.path, options.batch, options.seq_len, options.seed, options.atol
                )
            )
        except RnnconvError as exc:
            rows.append(failed_report(path, exc).model_copy(update={"name": WHOLE_MODEL}))
    for ours, theirs in pair(deployed, checkpoint, named):
        if ours is None and theirs is not None and named:  # --layer said what is deployed: the rest is not
            rows.append(_not_deployed(deployed, checkpoint, theirs))
            continue
        if ours is None or theirs is None:
            rows.append(_not_found(deployed, checkpoint, ours, theirs))
            continue
        if stage:
            stage(f"checking {cut(ours.name)} against {cut(theirs.name)}")
        try:
            rows.append(_row(deployed, ours.name, checkpoint, theirs, options))
        except RnnconvError as exc:  # a pair that cannot run says why; the others go on
            report = failed_report(path, exc)
            report.name, report.source = ours.name, _source_run(checkpoint, theirs.name, "not run")
            rows.append(report)
    return Reports(rows)


def _source_run(checkpoint: Side, name: str, how: str) -> SourceRun:
    return SourceRun(path=str(checkpoint.path), format=checkpoint.fmt.name, layer=name, run=how)


def _not_found(deployed: Side, checkpoint: Side, ours: InspectEntry | None, theirs: InspectEntry | None) -> Report:
    pairing = "pair them with --layer DEPLOYED=CHECKPOINT"
    if ours is not None:
        summary = (
            f"{ours.name} ({_described(ours)}) has no partner in {checkpoint.path.name}: none of its RNNs left "
            f"unpaired has these sizes (it holds {listing(e.name for e in checkpoint.rnns) or 'none'}); {pairing}"
        )
        return Report(verdict="not-found", summary=summary, blob=str(deployed.path), name=ours.name, spec=ours.spec)
    assert theirs is not None
    summary = (
        f"{checkpoint.path.name}'s {theirs.name} ({_described(theirs)}) is not found in {deployed.path.name}: none of "
        f"its RNNs left unpaired has these sizes; {pairing} where the exporter changed them, or where "
        f"{deployed.path.name} holds only some of {checkpoint.path.name}'s RNNs (the others are then not deployed)"
    )
    return Report(
        verdict="not-found",
        summary=summary,
        blob=str(deployed.path),
        spec=theirs.spec,
        source=_source_run(checkpoint, theirs.name, "not run: no partner"),
    )


def _not_deployed(deployed: Side, checkpoint: Side, theirs: InspectEntry) -> Report:
    """A checkpoint's RNN that --layer's pairs leave out: not in the deployed file, which is no failure of it."""
    summary = (
        f"{checkpoint.path.name}'s {theirs.name} ({_described(theirs)}) is not deployed: --layer pairs the RNNs of "
        f"{deployed.path.name} with others of {checkpoint.path.name}, so nothing was held against it"
    )
    return Report(
        verdict="not-deployed",
        summary=summary,
        blob=str(deployed.path),
        spec=theirs.spec,
        source=_source_run(checkpoint, theirs.name, "not run: not deployed"),
    )


def _reading(deployed: Side, name: str, stack: ExitStack) -> CanonicalRNN | None:
    """The deployed RNN read into the canonical form (a clip dropped, and recorded), or None where it does not read
    (a reset placement cuDNN has not): the file still runs as written; only the diagnosis misses the reading."""
    options = ReadOptions(layer=name, hash_source=False, drop_clip=True, dequantize=True)
    try:
        (rnn,) = stack.enter_context(deployed.fmt.read(deployed.path, options)).rnns
    except Unsupported:
        return None
    return rnn


def _row(deployed: Side, ours: str, checkpoint: Side, partner: InspectEntry, options: VerifyOptions) -> Report:
    """A pair run on the same inputs, each side as its own runtime runs it, compared; diagnosed when it differs."""
    theirs = partner.name
    stacked = partner.source if partner.source is not None and partner.source.stacked else None
    source = stacked or checkpoint.fmt.resolve(checkpoint.path, Provenance(), theirs)
    held = checkpoint.fmt.source_spec(checkpoint.path, source)
    with ExitStack() as stack:
        reading = _reading(deployed, ours, stack)
        spec = held if reading is None else reading.spec
        check_same_rnn(spec, held, deployed.path, checkpoint.path, against=True)
        where = (
            deployed.fmt.resolve(deployed.path, Provenance(path=str(deployed.path)), ours)
            if reading is None
            else reading.source
        )
        inputs = make_inputs(spec, options.seq_len, options.batch, options.seed, options.ragged)
        want, how = checkpoint.fmt.run(checkpoint.path, source, as_held(spec, held), inputs)
        got, ran = deployed.fmt.run(deployed.path, where, spec, inputs)
        engine = deployed.fmt.make_engine()
        name = deployed.fmt.name if engine is None else engine.name
        tol = tolerance(name, spec.dtype, source.dtype, options.atol, options.rtol)
        comparison = compare(spec, got, want, tol, inputs["lengths"])
        quantized = reading is not None and reading.source.dequantized is not None
        proof = None
        if quantized and not options.ragged:
            assert reading is not None and reading.source.dequantized is not None
            written = None if reading.origin is None else reading.origin.quantized  # what rnnconv's --quantize wrote
            with checkpoint.fmt.read(checkpoint.path, checkpoint.fmt.source_options(source)) as found:
                proof, comparison, tol = prove(
                    reading,
                    found.rnns[0],
                    written or reading.source.dequantized,  # what its kernel rounds: what was written, or read
                    inputs,
                    (got, want),
                    lambda step: deployed.fmt.run(deployed.path, where, spec, step)[0],
                    options.bound,
                )
        lengths = None if inputs["lengths"] is None else [int(v) for v in inputs["lengths"]]
        report = Report(
            verdict=("within-bound" if proved(proof) else "mismatch")
            if proof is not None
            else ("match" if comparison.match else "mismatch"),
            summary="",
            blob=str(deployed.path),
            name=ours,
            spec=spec.to_model(),
            versions={
                "rnnconv": __version__,
                "numpy": np.__version__,
                "python": platform.python_version(),
                **({} if engine is None else engine.versions()),
                "source_framework": how.split(":")[0],
            },
            source=_source_run(checkpoint, theirs, how),
            backend=BackendInfo(name=name, detail=f"{ran}, {deployed.path.name} run as written"),
            tolerance=tol,
            inputs=InputsInfo(
                seed=options.seed,
                seq_len=options.seq_len,
                batch=options.batch,
                lengths=lengths,
                state_distribution=f"normal(0, {STATE_SCALE}), {'h0 and c0' if spec.mode == LSTM else 'h0'} non-zero",
            ),
            comparison=comparison,
            quantization=proof,
        )
        if proof is not None:
            report.checks += proof_checks(proof)
            if not proved(proof):
                report.diagnosis = Diagnosis(found=False, tried=0, message=terms_failed(proof))
        # the file as its runtime computes it where it is deployed, where that is not what the comparison ran
        config = options.deployed_config()
        if proof is not None or config:
            bound = proof.end_to_end.bound if proof is not None else tol.atol
            deployment = deployed.fmt.deployed_check(deployed.path, where, spec, bound, config)
            if deployment is not None:
                report.checks.append(deployment)
                if not deployment.ok:
                    report.verdict = "mismatch"
                    report.problems.append(f"{deployed.path.name}: {deployment.detail}")
        loss = None if reading is None else reading.source.loss
        rounds = reading is not None and bool(reading.source.dequantized and reading.source.dequantized.rounded)
        if loss is not None and comparison.match and rounds:  # an integer kernel's grids: in the bound, not beside it
            terms = listing(loss.dropped, 2, separator="; ", longest=400)
            report.warnings.append(
                f"it rounds and clips where {theirs} of {checkpoint.path.name} does not ({terms}); its quantization's "
                "bound takes that rounding in, and it holds here"
            )
        elif loss is not None and comparison.match:  # honest about what these inputs never reached
            report.warnings.append(
                f"it clips where {theirs} of {checkpoint.path.name} does not ({'; '.join(loss.dropped)}); verify's "
                f"inputs never reach the clip, so it matches here"
            )
        if not comparison.match and proof is None and options.diagnose:
            report.diagnosis = _diagnosis(reading, deployed, checkpoint, source, spec, inputs, got, want, tol)
    what = f"{theirs} of {checkpoint.path.name}"
    tolerated = f"{comparison.worst:.3g} (tolerance {tol.described()})"
    if proof is not None and proved(proof):
        what_held = f"{ours} computes what {what} computes within its quantization's bound ({said(proof)})"
    elif proof is None and comparison.match:
        what_held = f"{ours} computes what {what} computes: largest difference {tolerated}"
    else:
        what_held = None
    if what_held is not None:  # a mismatch here is the file as deployed, not the comparison: said after what held
        report.summary = what_held + "".join(f"; but {problem}" for problem in report.problems)
    else:
        report.summary = (
            f"{ours} differs from {what} by up to {tolerated}"
            + "".join(f"; {problem}" for problem in report.problems)
            + (f". {report.diagnosis.message}" if report.diagnosis else "")
        )
    return report


def _outputs(spec: RNNSpec, rnn: CanonicalRNN, inputs: Inputs) -> Outputs:
    y, h_n, c_n = forward(spec, rnn.param, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
    return {"y": y, "h_n": h_n, "c_n": c_n}


def _diagnosis(
    reading: CanonicalRNN | None,
    deployed: Side,
    checkpoint: Side,
    source: Provenance,
    spec: RNNSpec,
    inputs: Inputs,
    got: Outputs,
    want: Outputs,
    tol: Tolerance,
) -> Diagnosis:
    """The exporter's known mistake that explains the difference: the first whose reading agrees."""
    tried = 0
    for description, agrees in _known_mistakes(reading, checkpoint, source, spec, inputs, got, want, tol):
        tried += 1
        if agrees:
            message = description[0].upper() + description[1:]
            return Diagnosis(found=True, tried=tried, mistake=description, message=message)
    if reading is None:
        return Diagnosis(
            found=False,
            tried=tried,
            message=f"none of the {tried} known exporter mistakes tried explains it (the deployed RNN does not read "
            f"into rnnconv's form, so verify's usual mistakes were not tried)",
        )
    kind = next(iter(deployed.fmt.info.kinds))
    blob = registry.weight_spaces().in_memory(reading, deployed.path, kind)
    found = diagnose(blob, inputs, want, tol, subject=deployed.path.name, source=checkpoint.path.name)
    return found.model_copy(update={"tried": found.tried + tried})


def _known_mistakes(
    reading: CanonicalRNN | None,
    checkpoint: Side,
    source: Provenance,
    spec: RNNSpec,
    inputs: Inputs,
    got: Outputs,
    want: Outputs,
    tol: Tolerance,
) -> Iterator[tuple[str, bool]]:
    """Each known exporter mistake, and whether it explains the difference."""
    lengths = inputs["lengths"]
    if spec.mode == GRU:  # the checkpoint's reset-after GRU with the reset before: does it give what the file gives?
        with checkpoint.fmt.read(checkpoint.path, checkpoint.fmt.source_options(source)) as found:
            held = found.rnns[0]
            moved = None if not held.spec.reset_after else _outputs(replace(held.spec, reset_after=False), held, inputs)
        if moved is not None:
            yield RESET_PLACEMENT, compare(spec, got, moved, tol, lengths).match
    loss = None if reading is None else reading.source.loss
    if reading is not None and loss is not None:  # the deployed reading without its clip: the checkpoint's outputs?
        unclipped = compare(spec, _outputs(reading.spec, reading, inputs), want, tol, lengths)
        yield (
            f"the deployed file clips where the checkpoint does not ({'; '.join(loss.dropped)}): read without the "
            f"clip, its weights compute what the checkpoint computes (TensorFlow's converter writes cell_clip=10 for "
            f"every Keras LSTM)",
            unclipped.match,
        )
