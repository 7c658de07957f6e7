"""Files: atomic outputs that are never left half-written, and source fingerprints."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from rnnconv.errors import BadInput


def check_writable(paths: list[Path], force: bool) -> None:
    """Refuse before any work when an output exists (without --force) or cannot be written."""
    for path in paths:
        if path.exists() and not force:
            raise BadInput(f"{path} already exists; pass --force to replace it")
        if path.is_dir():
            raise BadInput(f"{path} is a directory, not a file name")
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise BadInput(f"cannot write {path}: the directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise BadInput(f"cannot write {path}: the directory {parent} is not writable")


@contextlib.contextmanager
def atomic_outputs(paths: list[Path], force: bool) -> Iterator[list[Path]]:
    """Yield temporary paths next to `paths`; on success move them into place together.

    On any error the temporaries are removed and existing outputs stay untouched.
    The first path is the main output and is moved last, so a reader that sees it
    also sees the others (a blob implies its sidecar).
    """
    check_writable(paths, force)
    temps: list[Path] = []
    try:
        for path in paths:
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent or ".")
            os.close(fd)
            os.chmod(name, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
            temps.append(Path(name))
        yield temps
        for temp, path in reversed(list(zip(temps, paths))):
            os.replace(temp, path)
    finally:
        for temp in temps:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
