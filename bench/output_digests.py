"""Every shipped fixture converted to every target, each output's SHA-256 (or the refusal's sentence) on one line.

Run it before and after a change that should not change what rnnconv writes, and diff the two listings:

    python bench/output_digests.py > /tmp/before.txt   # (on the old commit)
    python bench/output_digests.py > /tmp/after.txt
    diff /tmp/before.txt /tmp/after.txt

Each source is copied into one fixed folder first (its sidecar records where the source was: the same place on
every run), each RNN of a file of several converted alone (`--layer`, the names `inspect` gives), and each conversion
asked with no options beyond the target, as a user's first try is. The last line counts what was written and what
was refused.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.gettempdir()) / "rnnconv-output-digests"  # the same place on every run: sidecars record it


def digest(path: Path) -> str:
    """The file's SHA-256; of a .keras archive, its members' (each member's name and bytes), the date Keras records
    in metadata.json (and the archive's timestamps) left out: it is the time of writing."""
    if not zipfile.is_zipfile(path) or path.suffix != ".keras":
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    made = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            data = archive.read(member)
            if member.filename == "metadata.json":
                data = re.sub(rb'"date_saved": "[^"]*"', b"", data)
            made.update(member.filename.encode() + b"\0" + data)
    return made.hexdigest()[:16]


def sources(fixtures: Path) -> list[Path]:
    """The files of `fixtures` that rnnconv recognises (a model's weights beside it are its own, not a source)."""
    from rnnconv.errors import RnnconvError
    from rnnconv.formats import registry

    found = []
    for path in sorted(p for p in fixtures.rglob("*") if p.is_file()):
        try:
            registry.detect(path)
        except RnnconvError:
            continue
        found.append(path)
    return found


def layers(path: Path) -> list[str | None]:
    """The RNNs to convert one at a time: each one inspect lists as converting, or the file as a whole."""
    import rnnconv
    from rnnconv.errors import RnnconvError

    try:
        listed = [entry.name for entry in rnnconv.inspect(path).rnns if entry.converts]
    except RnnconvError:
        return [None]
    return [None] if len(listed) <= 1 else list(listed)


def main() -> int:
    import rnnconv
    from rnnconv.errors import RnnconvError
    from rnnconv.formats.catalog import FORMAT_INFO

    shutil.rmtree(WORK, ignore_errors=True)
    fixtures = WORK / "fixtures"
    shutil.copytree(ROOT / "fixtures", fixtures, ignore=shutil.ignore_patterns("*.py", "*.cjs"))
    targets = [info for info in FORMAT_INFO.values() if info.writes]
    written = refused = 0
    for source in sources(fixtures):
        for layer in layers(source):
            for info in targets:
                out = WORK / "out" / info.name
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(parents=True)
                ending = info.default_for[0]
                output = out / (f"model{ending}" if ending.startswith(".") else ending)
                what = f"{source.relative_to(fixtures)}{'' if layer is None else ' --layer ' + layer} -> {info.name}"
                try:
                    result = rnnconv.convert(source, output, to=info.name, layer=layer, force=True)
                except RnnconvError as exc:
                    print(f"{what}: refused ({type(exc).__name__}): {exc}")
                    refused += 1
                    continue
                files = " ".join(f"{Path(p).name}={digest(Path(p))}" for p in result.outputs)
                print(f"{what}: {result.dtype} {files}" + "".join(f" | warns: {w}" for w in result.warnings))
                written += 1
    print(f"{written} written, {refused} refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
