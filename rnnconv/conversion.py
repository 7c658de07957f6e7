"""Conversions as library calls: any source into canonical RNNs, canonical RNNs into any target.

The source's format comes from its content and the target's from `to` or the
output's name, both through the format registry; every pair goes through the
canonical form, so no pair needs code of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.compare import make_inputs
from rnnconv.core.contracts import ConversionResult, ConvertedRNN, RecordedLoss, Skipped
from rnnconv.core.reference import forward
from rnnconv.errors import BadInput, RnnconvError, SeveralRnns, Unsupported, either, listing
from rnnconv.formats import holding, registry
from rnnconv.formats.base import Format
from rnnconv.formats.holding import PROBE_BATCH, PROBE_SEED, PROBE_STEPS, Loss
from rnnconv.formats.setting_fields import WRITE_FIELDS, foreign_read_setting, not_its_own
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source, check_stated, each_why
from rnnconv.formats.streaming import check_streamable, streams
from rnnconv.safeio.inputs import reading, resolved


def output_name(source: Path, target: Format) -> str:
    """model.h5, model.weights.h5 and model.keras all become model.<target's first suffix>."""
    name = source.name
    endings = sorted(
        {s for f in registry.formats() for s in f.info.read_suffixes + f.info.write_suffixes}, key=len, reverse=True
    )
    for ending in endings:
        if name.endswith(ending) and len(name) > len(ending):
            name = name[: -len(ending)]
            break
    return name + target.info.default_for[0]


def default_output(source: Path, target: Format) -> Path:
    """The output beside the source, named by `output_name`."""
    out = source.with_name(output_name(source, target))
    if out == source:
        raise BadInput(f"the default output would overwrite {source}; name one with -o")
    return out


@contextlib.contextmanager
def several_for(target: Format) -> Iterator[None]:
    """A source of several RNNs, none picked, is told what this target's files can hold."""
    try:
        yield
    except SeveralRnns as exc:
        several_in = next((s for s in target.info.write_suffixes if target.holds_several(Path(f"x{s}"))), None)
        raise exc.for_target(target.title, several_in, target.name) from None


def source_format(path: Path, options: ReadOptions, expect: str | None = None, target: str = "cudnn") -> Format:
    """The source's format; a file no format recognises is explained by the expected format's reader (where its name
    does not say that format: else that reader has explained it, in the words every command uses)."""
    if options.raw_spec is not None:
        return registry.get("cudnn")
    try:
        found = registry.detect(path)
    except registry.Unrecognized:
        if expect is None or registry.get(expect) in registry.named_by(path):
            raise
        return registry.get(expect)
    if expect and found.name != expect:
        others = [f.name for f in registry.formats() if f is not found and f.info.writes]
        targets = [target] if found.name != target else others
        commands = " or ".join(f"`rnnconv {found.name}-to-{name}`" for name in targets)
        raise BadInput(f"{path} is a {found.name} file, not a {expect} one; use {commands}")
    if why := foreign_read_setting(options, found.title, path.name):
        raise BadInput(why)
    return found


@contextlib.contextmanager
def open_source(
    path: Path, options: ReadOptions | None = None, expect: str | None = None, target: str = "cudnn"
) -> Iterator[Source]:
    """The selected RNNs of a file in canonical form (and those skipped), read lazily while the context lasts."""
    options = options or ReadOptions()
    path = registry.source_file(path)
    with source_format(path, options, expect, target).read(path, options) as source:
        yield source


def into_target(into: Path, output: Path | None, to: str | None, write: WriteOptions) -> Format:
    """The format of an `--into` model, which the output must be a copy of; refused before any work."""
    found = registry.detect(into)
    if to is not None and to != found.name:
        raise BadInput(f"--into {into} is a {found.title} file, and this conversion writes {registry.get(to).title}")
    if output is None:
        raise BadInput(f"--into needs -o: the name of the patched copy ({into} itself is never written over)")
    suffixes = [suffix for suffix in dict.fromkeys(found.into_suffixes(into)) if suffix]
    if output.suffix != into.suffix and output.suffix not in suffixes:
        raise BadInput(
            f"the patched copy of {into} is a file of its kind: give -o a name ending in {either(suffixes)}"
            if suffixes
            else f"the patched copy of {into} is a file of its kind: give -o a name without an ending, as {into} has"
        )
    if write.dtype is not None or write.quantize is not None:
        flag = "--dtype" if write.dtype is not None else "--quantize"
        raise BadInput(f"--into keeps the element type of each tensor it replaces; leave out {flag}")
    return found


def check_own_settings(target: Format, write: WriteOptions) -> None:
    """Refuse a setting of another format's own (ONNX's --profile) given for this target."""
    for name, setting in WRITE_FIELDS.items():
        if getattr(write, name) != setting.default and (why := not_its_own(name, target.title, "the output")):
            raise BadInput(why)


def without(losses: list[Loss], rnn: CanonicalRNN) -> CanonicalRNN:
    """The nearest RNN to `rnn` that holds none of `losses` (each has a nearest)."""
    for loss in losses:
        if loss.nearest is None:
            raise Unsupported(f"nothing near {rnn.name} lacks what a target cannot hold: {loss.term}")
        rnn = loss.nearest(rnn)
    return rnn


NAMED_WAYS = 4  # the formats a refusal names that hold the RNN; the rest are counted


def ways_out(target: Format, rnn: CanonicalRNN, write: WriteOptions) -> str:
    """What a refusal adds: what writes `rnn` exactly where `target` cannot, its own streaming model (`--streaming`)
    and the other formats that hold it as it is (a few named, the rest counted)."""
    ways = []
    if target.info.streams and not write.streaming and streams(rnn) and not target.streaming_losses(rnn):
        ways.append("--streaming writes it exactly, as a streaming model (its states inputs and outputs)")
    holders = [f for f in registry.formats() if f.info.writes and f is not target and not f.losses(rnn)]
    if holders:
        named = listing((f"{f.title} ({f.info.default_for[0]})" for f in holders), few=NAMED_WAYS)
        ways.append(f"it is held exactly by {named}")
    return "".join(f"; {way}" for way in ways)


def held_of_several(
    target: Format, found: Source, write: WriteOptions, several: bool
) -> tuple[list[tuple[CanonicalRNN, str]], list[tuple[str, str]]]:
    """Each RNN as `holdable` gives it, before anything is written, and, of several written to one file, those the
    target cannot hold skipped and said (as a reader skips those that do not convert); refused all, one sentence."""
    held, skipped = [], []
    for rnn in found.rnns:
        try:
            held.append(holdable(target, rnn, write))
        except Unsupported as exc:
            if not several:
                raise
            skipped.append((rnn.name, str(exc)))
    if not held:
        raise Unsupported(f"none of the RNNs can be converted: {each_why(skipped)}")
    return held, skipped


def holdable(target: Format, rnn: CanonicalRNN, write: WriteOptions) -> tuple[CanonicalRNN, str]:
    """`rnn` if `target` holds it exactly; else refused naming the term it cannot hold, or with `allow_lossy`, the
    nearest RNN it can hold, and a warning saying how far that one's outputs are from `rnn`'s on probe inputs."""
    losses, allow_lossy = target.losses_in(rnn, write.dtype, write.streaming), write.allow_lossy
    read_without = rnn.source.loss  # what the source's reader left out (a clip), recorded as it was measured
    probe = f"on probe inputs (seed {PROBE_SEED}, {PROBE_STEPS} steps, batch {PROBE_BATCH}, non-zero states)"
    if not losses:
        if read_without is None:
            return rnn, ""
        return rnn, (
            f"--allow-lossy: {rnn.name} read without what cuDNN does not compute "
            f"({'; '.join(read_without.dropped)}); {probe} its outputs move by up to {read_without.difference:.3g}"
        )
    terms = "; ".join(loss.term for loss in losses)
    if not allow_lossy:
        nearest_exists = all(loss.nearest is not None for loss in losses)
        advice = " (--allow-lossy writes it without that, and says how much it changes)" if nearest_exists else ""
        raise Unsupported(
            f"{target.title} cannot hold {rnn.name} exactly: {terms}{advice}{ways_out(target, rnn, write)}"
        )
    cannot = [loss.term for loss in losses if loss.nearest is None]
    if cannot:
        raise Unsupported(
            f"{target.title} cannot hold {rnn.name}, even with --allow-lossy: {'; '.join(cannot)}"
            f"{ways_out(target, rnn, write)}"
        )
    nearest = without(losses, rnn)
    inputs = make_inputs(rnn.spec, PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    exact, written = (forward(r.spec, r.param, inputs["x"], inputs["h0"], inputs["c0"]) for r in (rnn, nearest))
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(exact, written) if a is not None and b is not None)
    earlier = [] if read_without is None else read_without.dropped
    dropped = RecordedLoss(  # with what the reader left out: their differences add up at most
        dropped=[*earlier, *(loss.term for loss in losses)],
        difference=worst + (0.0 if read_without is None else read_without.difference),
        seed=PROBE_SEED,
        steps=PROBE_STEPS,
        batch=PROBE_BATCH,
    )  # what the written file records of its source: verify then knows the difference is no mistake
    nearest = dataclasses.replace(nearest, source=nearest.source.model_copy(update={"loss": dropped}))
    return nearest, (
        f"--allow-lossy: {rnn.name} written without what {target.title} cannot hold ({terms}); {probe} its outputs "
        f"differ from the source's by up to {dropped.difference:.3g}"
    )


def convert(
    source: Path,
    output: Path | None = None,
    to: str | None = None,
    options: ReadOptions | None = None,
    write: WriteOptions | None = None,
    expect: str | None = None,
    into: Path | None = None,
) -> ConversionResult:
    """Convert `source` (of format `expect`, when given) to `output`; the target comes from `to` or the name.

    With `into` (a user's model file), the output is a copy of it with the RNNs' tensors replaced:
    `options.layer` then names the RNN of `into` to replace, and the source's RNNs are all read.
    """
    options = options or ReadOptions()
    write = write or WriteOptions()
    source = registry.source_file(source)
    place = None
    if into is not None:
        into = registry.source_file(into)
        target = into_target(into, output, to, write)
        place, options.layer, options.take_all = options.layer, None, True
    else:
        target = registry.get(to or "cudnn") if output is None else registry.for_output(output, to)
    with reading(source):  # the first look: from here on, a source that changes commits nothing
        fmt = source_format(source, options, expect, target.name)  # a wrong source is said before anything else
        output = output or default_output(source, target)
        if resolved(output) == resolved(source):
            raise BadInput(f"the output {output} is the source itself")
        if into is None and fmt is target and (whole := fmt.write_model(source, output, options, write)):
            return ConversionResult(
                outputs=[str(p) for p in whole.outputs],
                target=target.name,
                dtype="as stored",
                rnns=[],
                warnings=whole.warnings,
                usage=whole.usage,
            )
        options.take_all = options.take_all or target.holds_several(output)
        options.drop_clip = options.drop_clip or write.allow_lossy
        options.check_finite = options.check_finite or target.info.counts_non_finite
        with several_for(target), fmt.read(source, options) as found:
            if not found.rnns:
                raise RnnconvError(f"{source} gave no RNN to write")
            check_stated(found.rnns, options)
            check_streamable(target.info, found.rnns, write)
            holding.check_quantizable(target.info, write.quantize, write.dtype, write.streaming)
            check_own_settings(target, write)
            held, skipped = held_of_several(target, found, write, several=into is None and len(found.rnns) > 1)
            if into is None:
                dtype = target.written_dtype(held[0][0].spec, write.dtype)  # what the file holds, said once
                changed = [holding.dtype_warning(target.info, rnn, write.dtype) for rnn, _ in held]
                written = target.write([rnn for rnn, _ in held], output, write)
                written.warnings += [warning for warning in changed if warning]
            else:
                dtype = found.rnns[0].spec.dtype  # each replaced tensor keeps its own type
                with reading(into):
                    written = target.write_into([rnn for rnn, _ in held], into, output, place, write)
                written.usage = (
                    f"{output} is {into} with {listing(r.name for r in found.rnns)} replaced: load it as you "
                    f"load {into}"
                )
            written.warnings += [warning for _, warning in held if warning]
            return ConversionResult(
                outputs=[str(p) for p in written.outputs],
                target=target.name,
                dtype=dtype,
                rnns=[
                    ConvertedRNN(name=r.name, spec=r.spec.to_model(), notes=r.notes, source=r.provenance())
                    for r in found.rnns
                    if r.name not in dict(skipped)
                ],
                warnings=written.warnings,
                skipped=[Skipped(name=n, reason=why) for n, why in [*found.skipped, *skipped]],
                usage=written.usage,
            )
