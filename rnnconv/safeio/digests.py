"""A source's digest (recorded in every file rnnconv writes) and a stored checksum's check, computed on another
core while the conversion reads and writes."""

from __future__ import annotations

import concurrent.futures
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import Guard, open_source

T = TypeVar("T")


def _blake3() -> Any:
    try:
        import blake3
    except ImportError:  # a platform without its wheel: sha256 then, and the digest says which
        return None
    return blake3


# The source's digest, recorded as "ALGORITHM:HEX" in every sidecar. blake3 hashes at several GB/s on one
# core, so the digest no longer sets a conversion's speed.
DIGEST_ALGORITHM = "blake3" if _blake3() else "sha256"
DIGEST_ALGORITHMS = ("blake3", "sha256")
DIGEST_RUN = 2 << 20  # bytes read at a time: in the core's cache, and large enough for the GIL to be let go


def digest_of(path: Path, algorithm: str = DIGEST_ALGORITHM) -> str:
    """`algorithm:hex` of the file's bytes (one thread: the conversion has the other core).

    Read a cache-sized run at a time, never mapped: a file cut short meanwhile gives the digest of fewer bytes
    (its guard then says the source changed), never SIGBUS.
    """
    digest: Any = _blake3().blake3(max_threads=1) if algorithm == "blake3" else hashlib.sha256()
    buffer = bytearray(DIGEST_RUN)
    view = memoryview(buffer)
    with open_source(path) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])  # blake3 and hashlib release the GIL on large buffers
    return f"{algorithm}:{digest.hexdigest()}"


def digest_placeholder() -> str:
    """A digest of the final one's length, for a header sized before the digest is known."""
    return f"{DIGEST_ALGORITHM}:{'0' * 64}"


def digest_differs(path: Path, recorded: str) -> bool | None:
    """Whether the file's digest differs from `recorded` ("ALGORITHM:HEX"); None when it cannot be computed here."""
    algorithm, _, _ = recorded.partition(":")
    if algorithm not in DIGEST_ALGORITHMS or (algorithm == "blake3" and _blake3() is None):
        return None
    return digest_of(path, algorithm) != recorded


_HASHER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rnnconv-background")


def in_background(work: Callable[[], T]) -> concurrent.futures.Future[T]:
    """Work (a digest, a checksum) done on another core while the conversion reads and writes."""
    return _HASHER.submit(work)


def digest_in_background(path: Path) -> concurrent.futures.Future[str]:
    """The file's digest, computed on another core while the conversion reads and writes."""
    return in_background(lambda: digest_of(path))


CHECKSUM_CHUNK = 1 << 24  # bytes read at a time: large enough for a checksum to run without the GIL


def checksum_guard(
    path: Path, start: int, size: int, extend: Callable[[int, bytes], int], expected: int, damaged: str
) -> Guard:
    """A guard that objects (BadInput `damaged`) unless `size` bytes of `path` from `start` are those a stored
    checksum was made of: `extend(checksum, chunk)` runs over them on another core meanwhile."""

    def checksum() -> int:
        with open_source(path) as f:
            f.seek(start)
            value, left = 0, size
            while left > 0 and (chunk := f.read(min(left, CHECKSUM_CHUNK))):
                value, left = extend(value, chunk), left - len(chunk)
        return value  # a file cut short meanwhile gives the checksum of fewer bytes, which does not match

    computed = in_background(checksum)

    def check() -> None:
        if computed.result() != expected:
            raise BadInput(damaged)

    return check
