"""What every format's read does with the RNNs it finds in a file: each converted with the provenance that names the
file (and the digest computed meanwhile, on the other core), skipped with its reason or refused; what `inspect` lists
of one; and the record of its source that a file rnnconv wrote keeps (`SOURCE_KEY`), written and read back."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.contracts import InspectEntry, Provenance, RNNSizes, dump
from rnnconv.errors import (
    MESSAGE_LIMIT,
    BadInput,
    RnnconvError,
    Unsupported,
    cut,
    listing,
    no_such_rnn,
    several_rnns,
)
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.writing import arrays_in_source
from rnnconv.safeio.digests import SourcePass
from rnnconv.safeio.inputs import json_document, resolved
from rnnconv.table.constants import NONLINEARITY_KEY


@dataclass
class Source:
    """What `read` yields: the chosen RNNs, and those skipped because they cannot convert (name, why)."""

    rnns: list[CanonicalRNN]
    skipped: list[tuple[str, str]] = field(default_factory=list)


# Where a file that a runtime runs records the source of its RNN (as a cuDNN sidecar's `source` does), for verify.
SOURCE_KEY = "rnnconv.source"
SOURCE_RECORD_LIMIT = 1 << 20


def recorded_source(rnn: CanonicalRNN, output: Path, wait: bool = True) -> Provenance:
    """What a written file records of its RNN's source: where it was (also seen from the output's folder, to find it
    again when both move), its digest and element type."""
    source = rnn.provenance(wait)
    relative = os.path.relpath(source.path, resolved(output).parent) if source.path else None
    return source.model_copy(update={"dtype": source.dtype or rnn.spec.dtype, "relative_path": relative})


def source_record(rnn: CanonicalRNN, output: Path) -> str:
    """`recorded_source` as the JSON text a format stores under `SOURCE_KEY` in its file's metadata."""
    return recorded_source(rnn, output).model_dump_json(by_alias=True, exclude_none=True)


def source_records(sources: dict[str, Provenance]) -> str:
    """The sources of a file's RNNs (a state_dict's, a Keras model's: each one's `recorded_source`), as the JSON text
    the file stores under `SOURCE_KEY`, by the name the file gives the RNN (a key prefix; its layers, a,b)."""
    return json.dumps({where: dump(source) for where, source in sources.items()})


def read_source_records(text: str | bytes, path: Path) -> dict[str, Provenance]:
    """What `source_records` stored; anything else is refused in one sentence."""
    if len(text) > SOURCE_RECORD_LIMIT:
        raise BadInput(f"{path}: its {SOURCE_KEY} record is {len(text)} bytes, more than a source record can be")
    try:
        records = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        records = None
    if not isinstance(records, dict) or not all(isinstance(r, dict) for r in records.values()):
        raise BadInput(f"{path}: its {SOURCE_KEY} record is not the record of the sources rnnconv writes")
    return {where: read_source_record(json.dumps(record), path) for where, record in records.items()}


def recorded_by_prefix(records: Mapping[str, str | bytes], path: Path) -> tuple[dict[str, Provenance], dict[str, str]]:
    """What rnnconv recorded beside a state_dict it wrote (PyTorch's, PaddlePaddle's): the source of each RNN and
    each simple RNN's nonlinearity, by key prefix."""
    sources = records.get(SOURCE_KEY)
    nonlinearities = json_document(records.get(NONLINEARITY_KEY) or "{}", f"{path}: its {NONLINEARITY_KEY}")
    if not isinstance(nonlinearities, dict) or not all(isinstance(v, str) for v in nonlinearities.values()):
        raise BadInput(f"{path}: its {NONLINEARITY_KEY} record does not map key prefixes to nonlinearities")
    return ({} if sources is None else read_source_records(sources, path)), nonlinearities


def read_source_record(text: str | bytes, path: Path) -> Provenance:
    """The source a file records under `SOURCE_KEY`; text that is no such record is refused in one sentence."""
    if len(text) > SOURCE_RECORD_LIMIT:
        raise BadInput(f"{path}: its {SOURCE_KEY} record is {len(text)} bytes, more than a source record can be")
    try:
        return Provenance.model_validate_json(text)
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        raise BadInput(f"{path}: its {SOURCE_KEY} record is not the record of a source rnnconv writes") from None


def inspect_entry(
    name: str, layer_class: str, read: Callable[[], CanonicalRNN], sizes: Callable[[], RNNSizes | None] = lambda: None
) -> InspectEntry:
    """What `inspect` lists for one RNN of a file: its spec and notes where it converts (and the source that a file
    rnnconv wrote records); else the sizes the file tells, as far as it tells them, and the sentence saying why not."""
    try:
        rnn = read()
    except RnnconvError as exc:
        return InspectEntry(name=name, layer_class=layer_class, sizes=sizes(), converts=False, reason=str(exc))
    spec, notes = rnn.spec.to_model(), rnn.notes
    return InspectEntry(name=name, layer_class=layer_class, spec=spec, converts=True, notes=notes, source=rnn.origin)


def each_why(skipped: list[tuple[str, str]]) -> str:
    """The RNNs skipped and why, as a message lists them: the first few, then how many more."""
    return listing((f"{cut(name)}: {why}" for name, why in skipped), separator="; ", longest=MESSAGE_LIMIT)


def check_stated(rnns: list[CanonicalRNN], options: ReadOptions) -> None:
    """With `require_stated`, refuse RNNs whose conversion assumed a setting the file does not store."""
    assumed = [a for rnn in rnns for a in rnn.source.assumptions or []]
    if options.require_stated and assumed:
        raise BadInput(f"--require-stated: the file does not say {assumed[0]}")


class Named(Protocol):
    @property
    def name(self) -> str: ...


Item = TypeVar("Item", bound=Named)


class Prefixed(Named, Protocol):
    prefix: str  # the state_dict keys' common start, with its dot


Keyed = TypeVar("Keyed", bound=Prefixed)
T = TypeVar("T")


def convert_each(
    chosen: list[T],
    convert: Callable[[T], CanonicalRNN],
    name: Callable[[T], str],
    *,
    digest: Future[str] | None = None,
    origin: Provenance | None = None,
    describe: Callable[[T], str] | None = None,
    strict: bool = False,
    things: str = "RNNs",
) -> Source:
    """The RNNs chosen from a file, converted, each given the source's digest (and `origin`, the source a file
    rnnconv wrote records). One that cannot be converted is refused (in the words of `describe`, where given: the
    layer and file), or, of several and unless `strict`, skipped and said; refused all, the sentence names the
    `things` a file of the format holds."""
    rnns, skipped = [], []
    for item in chosen:
        try:
            rnn = convert(item)
        except Unsupported as exc:
            if len(chosen) > 1 and not strict:
                skipped.append((name(item), str(exc)))
                continue
            if describe is None:
                raise
            raise Unsupported(f"{describe(item)} cannot be converted: {exc}") from None
        rnn.digest = digest or rnn.digest
        rnn.origin = origin or rnn.origin
        rnns.append(rnn)
    if not rnns:
        raise Unsupported(f"none of the {things} can be converted: {each_why(skipped)}")
    return Source(rnns, skipped)


def read_chosen(
    path: Path,
    kind: str,
    chosen: list[T],
    convert: Callable[[T, Provenance], CanonicalRNN],
    name: Callable[[T], str],
    options: ReadOptions,
    *,
    origin: Provenance | None = None,
    describe: Callable[[T], str] | None = None,
    things: str = "RNNs",
    parts: Sequence[Path] = (),
) -> Source:
    """What every format's read does with the RNNs chosen from its file (of file kind `kind`): each converted with
    the provenance that names the file, given the file's digest (with the source's other `parts`: its
    `Format.source_parts`; computed meanwhile, on the other core), as `convert_each` converts them."""
    info = Provenance(path=str(resolved(path)), format=kind)
    reading = SourcePass(path, parts) if options.hash_source else None
    digest = None if reading is None else reading.digest
    source = convert_each(
        chosen, lambda item: convert(item, info), name, digest=digest, origin=origin, describe=describe, things=things
    )
    if reading is not None:
        for rnn in source.rnns:
            rnn.source_pass = reading
            for array in arrays_in_source(rnn) if options.check_finite else []:
                reading.watch(array)
        reading.start()  # after the watching: one read of the file for all of it (none for a file refused)
    return source


def pick_named(
    items: list[Item], layer: str | None, path: Path, take_all: bool = False, or_else: str = ""
) -> list[Item]:
    """The RNN (or blob) of a file that `layer` names, or the only one (every one with `take_all`); `or_else` ends the
    advice when the file holds several and none was named (verify: its --all)."""
    if layer is not None:
        chosen = [i for i in items if i.name == layer]
        if not chosen:
            raise no_such_rnn(f"{path} has no RNN named", layer, [i.name for i in items])
        return chosen
    if len(items) > 1 and not take_all:
        raise BadInput(
            f"{path} holds {len(items)} RNNs ({listing(i.name for i in items)}); pick one with --layer{or_else}"
        )
    return items


def pick_by_prefix(rnns: list[Keyed], prefix: str | None, path: Path) -> Keyed:
    """The RNN of a state_dict (PyTorch's, PaddlePaddle's; `rnns` not empty) that `prefix` names (its name, its
    keys' prefix, or that prefix's end), or the only one."""
    if prefix is None:
        if len(rnns) == 1:
            return rnns[0]
        raise several_rnns(path, f"holds {len(rnns)} RNNs ({', '.join(repr(r.name) for r in rnns)})")
    wanted = prefix.rstrip(".")
    matches = [
        r for r in rnns if r.name == wanted or r.prefix.rstrip(".") == wanted or r.prefix.endswith("." + wanted + ".")
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise no_such_rnn(f"{path} has no RNN with prefix", prefix, [r.name for r in rnns])
    raise BadInput(f"prefix {prefix!r} matches several RNNs in {path} ({listing(r.name for r in matches)}); give more")
