"""A source's digest (recorded in every file rnnconv writes), the finiteness of the values still in it, and a stored
checksum's check, computed on another core while the conversion reads and writes."""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import FileArray, Guard, open_source

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


def _hasher(algorithm: str) -> Any:
    return _blake3().blake3(max_threads=1) if algorithm == "blake3" else hashlib.sha256()


def _hash_file(digest: Any, path: Path, view: memoryview, start: int = 0, length: int | None = None) -> None:
    left: float = math.inf if length is None else length
    with open_source(path) as f:
        f.seek(start)
        while left > 0 and (n := f.readinto(view[: int(min(DIGEST_RUN, left))])):
            digest.update(view[:n])  # blake3 and hashlib release the GIL on large buffers
            left -= n


def _hash_parts(digest: Any, path: Path, parts: Sequence[Path], view: memoryview) -> None:
    """The other files of a source of several (a checkpoint's data files, a SavedModel's variables), after its own
    bytes: each one's name seen from the source's folder, then its bytes, so that no change to any goes unseen."""
    for part in parts:
        digest.update(b"\0" + os.fsencode(os.path.relpath(part, path.parent)) + b"\0")
        _hash_file(digest, part, view)


def digest_of(
    path: Path,
    algorithm: str = DIGEST_ALGORITHM,
    start: int = 0,
    length: int | None = None,
    parts: Sequence[Path] = (),
) -> str:
    """`algorithm:hex` of the file's bytes, or of `length` of them from byte `start`, then of its source's other
    `parts` (one thread: the conversion has the other core).

    Read a cache-sized run at a time, never mapped: a file cut short meanwhile gives the digest of fewer bytes
    (its guard then says the source changed), never SIGBUS.
    """
    digest = _hasher(algorithm)
    view = memoryview(bytearray(DIGEST_RUN))
    _hash_file(digest, path, view, start, length)
    _hash_parts(digest, path, parts, view)
    return f"{algorithm}:{digest.hexdigest()}"


class TrailingDigest:
    """The digest of a file written front to back, computed on another core behind its writer: told how far the
    file is written (`written`), a thread hashes up to there, reading the bytes back from the page cache, so the
    digest is done soon after the last byte is written instead of taking a read of its own after it.

    The same digest as `digest_of` gives of the finished file. Used as a context manager; leaving it on an error
    stops the thread."""

    def __init__(self, path: Path, algorithm: str = DIGEST_ALGORITHM):
        self._algorithm, self._digest = algorithm, _hasher(algorithm)
        self._told = self._hashed = 0
        self._finished = False
        self._changed = threading.Condition()
        self._failure: BaseException | None = None
        self._file = open(path, "rb")  # noqa: SIM115 - closed by __exit__, after the thread stopped
        self._thread = threading.Thread(target=self._hash, name="rnnconv-written-digest", daemon=True)
        self._thread.start()

    def __enter__(self) -> TrailingDigest:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()
        self._file.close()

    def written(self, end: int) -> None:
        """The file's bytes up to `end` are written (flushed to the file, not held in a buffer)."""
        with self._changed:
            self._told = max(self._told, end)
            self._changed.notify()

    def result(self) -> str:
        """`algorithm:hex` of the bytes told written, once the thread has hashed them all."""
        self._stop()
        if self._failure is not None:
            raise self._failure
        return f"{self._algorithm}:{self._digest.hexdigest()}"

    def _stop(self) -> None:
        with self._changed:
            self._finished = True
            self._changed.notify()
        self._thread.join()

    def _hash(self) -> None:
        view = memoryview(bytearray(DIGEST_RUN))
        try:
            while True:
                with self._changed:
                    while self._hashed >= self._told and not self._finished:
                        self._changed.wait()
                    end, finished = self._told, self._finished
                while self._hashed < end:
                    n = os.preadv(self._file.fileno(), [view[: min(DIGEST_RUN, end - self._hashed)]], self._hashed)
                    if n == 0:
                        raise RuntimeError(f"{self._file.name} is shorter than the {end} bytes written to it")
                    self._digest.update(view[:n])  # blake3 and hashlib release the GIL on large buffers
                    self._hashed += n
                if finished:
                    return
        except BaseException as exc:  # told to the writer by `result`
            self._failure = exc


def digest_placeholder() -> str:
    """A digest of the final one's length, for a header sized before the digest is known."""
    return f"{DIGEST_ALGORITHM}:{'0' * 64}"


def digest_differs(
    path: Path, recorded: str, start: int = 0, length: int | None = None, parts: Sequence[Path] = ()
) -> bool | None:
    """Whether the file's digest (or that of `length` bytes from `start`; with its source's other `parts`) differs
    from `recorded` ("ALGORITHM:HEX"); None when it cannot be computed here."""
    algorithm, _, _ = recorded.partition(":")
    if algorithm not in DIGEST_ALGORITHMS or (algorithm == "blake3" and _blake3() is None):
        return None
    return digest_of(path, algorithm, start, length, parts) != recorded


_HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rnnconv-background")


def in_background(work: Callable[[], T]) -> Future[T]:
    """Work (a digest, a checksum) done on another core while the conversion reads and writes."""
    return _HASHER.submit(work)


@dataclass
class _Watched:
    """A range of a source whose values the pass checks: `known` is True once every run of it summed finite."""

    start: int
    end: int
    dtype: np.dtype
    known: Future[bool] = field(default_factory=Future)


@dataclass
class _Checked:
    """A run of a source's bytes a stored checksum was made of, computed as the pass reads past it."""

    start: int
    end: int
    extend: Callable[[int, memoryview], int]
    value: int = 0
    known: Future[int] = field(default_factory=Future)


class SourcePass:
    """One read of a source, front to back on another core, for its digest, for whether the values of the arrays
    still in it are all finite (`watch`) and for the checksums stored of its parts (`checksum`), all asked before
    `start`.

    A writer's NaN and Inf scan of bytes it copies file to file then reads nothing again: on two cores the second
    read of the source, beside the digest's, was what a big conversion waited for. A range is read in runs that
    start at its first byte, so its values are never split; a range that overlaps an earlier one is not read as its
    own (its values may lie across the other's runs), and the writer counts its values itself.
    """

    def __init__(self, path: Path, parts: Sequence[Path] = ()) -> None:
        self.path = path
        self.parts = parts  # the source's other files, which its digest covers after it (`digest_of`)
        self.digest: Future[str] = Future()
        self._watched: dict[tuple[int, int], _Watched] = {}
        self._ordered: list[_Watched] = []  # from `start`: the watched ranges that overlap none before them
        self._starts: list[int] = []
        self._checked: list[_Checked] = []
        self._started = False

    def watch(self, array: FileArray) -> None:
        """Check `array`'s values for NaN and Inf in the pass (floats of any width, until it starts)."""
        if not self._started and array.path == self.path and array.dtype.kind == "f" and array.nbytes:
            key = (array.offset, array.offset + array.nbytes)
            self._watched.setdefault(key, _Watched(*key, array.dtype))

    def finite(self, array: FileArray) -> Future[bool] | None:
        """Whether every value of the watched range holding `array` (its values, as they lie) is finite (False:
        some may not be), or None where no range read holds it."""
        at = bisect.bisect_right(self._starts, array.offset) - 1
        if at < 0 or array.path != self.path:
            return None
        found = self._ordered[at]
        inside = array.offset + array.nbytes <= found.end and (array.offset - found.start) % found.dtype.itemsize == 0
        return found.known if inside and array.dtype == found.dtype else None

    def checksum(
        self, start: int, size: int, extend: Callable[[int, memoryview], int], expected: int, damaged: str
    ) -> Guard | None:
        """A guard that objects (BadInput `damaged`) unless `size` bytes from `start` are those a stored checksum
        was made of (`extend(checksum, chunk)` over them, as the pass reads them); None once the pass has started."""
        if self._started:
            return None
        checked = _Checked(start, start + size, extend)
        self._checked.append(checked)

        def check() -> None:
            if checked.known.result() != expected:
                raise BadInput(damaged)

        return check

    def start(self) -> SourcePass:
        if not self._started:
            self._started = True
            for watched in sorted(self._watched.values(), key=lambda w: (w.start, w.end)):
                if self._ordered and watched.start < self._ordered[-1].end:
                    watched.known.set_result(False)
                else:
                    self._ordered.append(watched)
            self._starts = [w.start for w in self._ordered]
            self._checked.sort(key=lambda c: c.start)
            in_background(self._read)
        return self

    def _read(self) -> None:
        try:
            self.digest.set_result(self._digest_and_scan())
        except BaseException as exc:  # the digest's and the checksums' waiters say it; the writer counts the values
            self.digest.set_exception(exc)
            for checked in self._checked:
                if not checked.known.done():
                    checked.known.set_exception(exc)
        for watched in self._ordered:
            if not watched.known.done():
                watched.known.set_result(False)
        for checked in self._checked:  # a file cut short gives the checksum of fewer bytes, which does not match
            if not checked.known.done():
                checked.known.set_result(checked.value)

    def _digest_and_scan(self) -> str:
        digest = _hasher(DIGEST_ALGORITHM)
        view = memoryview(bytearray(DIGEST_RUN))
        position, index = 0, 0  # index: the first range not read past
        checking: list[_Checked] = []
        following = 0  # the first checksum not yet begun
        with open_source(self.path) as f:
            while True:
                while index < len(self._ordered) and self._ordered[index].end <= position:
                    index += 1
                current = self._ordered[index] if index < len(self._ordered) else None
                stop = position + DIGEST_RUN
                if current is not None:  # a run ends where the range begins or ends
                    stop = min(stop, current.start if position < current.start else current.end)
                n = f.readinto(view[: stop - position])
                if not n:
                    break
                digest.update(view[:n])  # blake3, hashlib and numpy's sums let the GIL go on large buffers
                while following < len(self._checked) and self._checked[following].start < position + n:
                    checking.append(self._checked[following])
                    following += 1
                checking = [c for c in checking if _extended(c, view[:n], position)]
                if current is not None and current.start <= position and not current.known.done():
                    _scan(view[:n], position - current.start, current.dtype, current.known)
                    if position + n == current.end and not current.known.done():
                        current.known.set_result(True)  # every run of it read, and each sum finite
                position += n
        _hash_parts(digest, self.path, self.parts, view)
        return f"{DIGEST_ALGORITHM}:{digest.hexdigest()}"


def _extended(checked: _Checked, run: memoryview, position: int) -> bool:
    """A checksum extended by the part of a run (from `position`) it covers; whether it goes on past the run."""
    first, last = max(checked.start, position), min(checked.end, position + len(run))
    if first < last:
        checked.value = checked.extend(checked.value, run[first - position : last - position])
    if checked.end > position + len(run):
        return True
    checked.known.set_result(checked.value)
    return False


def _scan(run: memoryview, at: int, dtype: np.dtype, known: Future[bool]) -> None:
    """One run of a watched range (starting `at` bytes into it): a non-finite sum, or a split value, settles it."""
    if at % dtype.itemsize or len(run) % dtype.itemsize:
        known.set_result(False)
        return
    accumulate = np.float64 if dtype.itemsize == 8 else np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(np.frombuffer(run, dtype), dtype=accumulate)
    if not np.isfinite(total):  # a NaN or an Inf, or finite values whose sum overflows: counted by the writer
        known.set_result(False)


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
