"""`rnnconv verify-changed FILE...`: the files a change asks verify to check (what the pre-commit hook runs).

A changed file that rnnconv wrote (it records its source: a blob's sidecar, an .onnx's metadata, a `.pt`'s
`rnnconv.source`) is to be verified against that source, and so is one whose part changed (a blob's sidecar, an IR's
or an ncnn model's weights, a record kept beside the file). A changed file that is the source of files the repository
holds has those verified: the repository's files are those git tracks (`git ls-files`) under a name of a format
rnnconv reads, each read only for its record.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from rnnconv.core.contracts import Provenance
from rnnconv.errors import BackendMissing, RnnconvError
from rnnconv.formats import registry
from rnnconv.formats.settings import ReadOptions
from rnnconv.verification.subject import find_source, source_parts

# What a written file keeps beside it under a name of its own: a blob's sidecar (X.bin.json), the record of a format
# with no room for one (X.rnnconv.json), an IR's or an ncnn model's weights (X.xml, X.param: X.bin).
BESIDE = (".json", ".rnnconv.json")
WEIGHTS_OF = (".xml", ".param")


def recorded_sources(path: Path) -> list[Provenance] | None:
    """The sources a file's RNNs record ([]: none, so rnnconv did not write it), or None where reading the file for
    them needs a package that is not installed (verify then says which)."""
    try:
        fmt = registry.detect(path)
        with fmt.read(path, ReadOptions(hash_source=False, take_all=True)) as found:
            return [rnn.origin for rnn in found.rnns if rnn.origin is not None and rnn.origin.path]
    except BackendMissing:
        return None
    except (RnnconvError, OSError):  # a file no format reads, or not one rnnconv wrote: nothing to verify
        return []


def tracked() -> list[Path]:
    """The files git tracks in the working folder's repository that a format of rnnconv's is named like; none
    outside a repository (or without git)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [Path(os.fsdecode(name)) for name in listed.split(b"\0") if name]
    formats = registry.formats()
    return [name for name in names if any(fmt.named(name) for fmt in formats)]


def _same(a: Path, b: Path) -> bool:
    return os.path.lexists(a) and os.path.lexists(b) and os.path.samefile(a, b)


def made_from(written: Path, sources: Iterable[Provenance], changed: Sequence[Path]) -> bool:
    """Whether a file rnnconv wrote records one of the changed files as a source, or as a part of one (a
    checkpoint's data file), where verify would find it."""
    for source in sources:
        try:
            found, _ = find_source(written, source)
            files = [] if found is None else [found, *source_parts(source, found)]
        except RnnconvError:  # a recorded source that is no regular file, or unreadable: verify says so, if asked
            continue
        if any(_same(file, path) for file in files for path in changed):
            return True
    return False


def to_verify(changed: Sequence[Path]) -> list[Path]:
    """The files rnnconv wrote that the change touches, each once, in the order found: those changed (or whose part
    changed), then those the repository holds that were made from a changed file (a blob changed is both)."""
    chosen: list[Path] = []
    for path in changed:
        for candidate in [path, *sorted(parts_owned_by(path))]:
            if candidate in chosen or not os.path.isfile(candidate):
                continue
            sources = recorded_sources(candidate)
            if sources is None or sources:
                chosen.append(candidate)
                break
    touched = [*changed, *chosen]  # a written file touched is the source of what was made from it
    for written in tracked():
        if written not in chosen and os.path.isfile(written):
            sources = recorded_sources(written)
            if sources and made_from(written, sources, touched):
                chosen.append(written)
    return chosen


def parts_owned_by(path: Path) -> set[Path]:
    """The written files `path` may be a part of: X.bin for X.bin.json (its sidecar), X for X.rnnconv.json (a record
    kept beside it), X.xml and X.param for X.bin (an IR's or an ncnn model's weights)."""
    owners = {path.with_name(path.name.removesuffix(suffix)) for suffix in BESIDE if path.name.endswith(suffix)}
    if path.suffix == ".bin":
        owners |= {path.with_suffix(suffix) for suffix in WEIGHTS_OF}
    return owners - {path}
