"""Files rnnconv did not write: only regular files are read (a FIFO, a device or a directory is refused at once),
and what a file claims is checked against what it holds. A source is read, never memory-mapped (`FileArray`): a
mapped file that shrinks kills the process with SIGBUS, where a read returns short and says the source changed; a
source that changed in any way (size, times, the file itself) commits no output (`reading`, its guards), and an
error met after it changed is reported as that change (`watching`)."""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import io
import json
import math
import operator
import os
import select
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput

Guard = Callable[[], None]  # raises when outputs must not be committed
_GUARDS: contextvars.ContextVar[tuple[Guard, ...]] = contextvars.ContextVar("rnnconv_guards", default=())
_SOURCES: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar("rnnconv_sources", default=())
_WATCHED: contextvars.ContextVar[tuple[Guard, ...]] = contextvars.ContextVar("rnnconv_watched", default=())


def resolved(path: Path) -> Path:
    """The path with its symlinks followed, as far as they lead: a symlink loop (a shard, an output or a source that
    is a link to itself) stays as it is, for the open or stat that follows to refuse in a sentence (Path.resolve
    raised RuntimeError there, an internal error)."""
    return Path(os.path.realpath(path))


def regular_file(path: Path, what: str = "") -> int:
    """The size of a file that may be read: it exists and is a regular file; BadInput otherwise."""
    label = f"{what} {path}".strip()
    try:
        mode = path.stat()
    except FileNotFoundError:
        raise BadInput(f"{label} does not exist") from None
    except OSError as exc:
        raise BadInput(f"cannot read {label}: {exc.strerror}") from None
    if stat.S_ISDIR(mode.st_mode):
        raise BadInput(f"{label} is a directory, not a model file")
    if not stat.S_ISREG(mode.st_mode):
        raise BadInput(f"{label} is not a regular file (a device, pipe or socket), so not a model file")
    return mode.st_size


JSON_LIMIT = 64 << 20  # bytes: far more than any model config or sidecar


def json_document(data: bytes | str, what: str) -> Any:
    """A JSON document from an untrusted file: too large, not JSON, or nested absurdly deep is BadInput."""
    if len(data) > JSON_LIMIT:
        raise BadInput(f"{what} is {len(data)} bytes of JSON, more than any model description needs")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):  # JSONDecodeError is a ValueError
        raise BadInput(f"{what} cannot be read: it is not valid JSON") from None
    except RecursionError:
        raise BadInput(f"{what} cannot be read: its JSON nests too deep for a model description") from None


class SourceChanged(BadInput):
    """A source is not what it was when rnnconv first looked at it: truncated, extended, rewritten or replaced."""

    def __init__(self, path: Path | str):
        super().__init__(
            f"{path} changed while it was being read (truncated, rewritten or replaced meanwhile), so what was "
            f"read cannot be trusted; nothing was written"
        )


READ_CHUNK = 1 << 20  # bytes a scan reads at a time: a buffer that stays in the core's cache


def open_source(path: Path | str) -> io.FileIO:
    """A source file opened again to read more of it: SourceChanged if it is gone or no longer a regular file (a
    FIFO put at its name would block the open, a device never end), so a swap can neither hang nor fool a read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:  # it was there when the reading began
        raise SourceChanged(path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SourceChanged(path)
    return io.FileIO(fd, "rb")


def pin(path: Path, held: list[Any]) -> str:
    """A name by which a library that opens `path` while holding Python's lock (libhdf5) finds the regular file
    rnnconv looked at, whatever is put at the path meanwhile (a FIFO there would block that open for ever, and
    the lock with it): the file, opened now, named through /proc/self/fd (the path itself where there is no
    such folder). The open file is added to `held`, to be closed with what the library opened."""
    opened = open_source(path)
    held.append(opened)
    name = f"/proc/self/fd/{opened.fileno()}"
    return name if os.path.exists(name) else str(path)


def read_into(path: Path | str, offset: int, buffer: np.ndarray) -> None:
    """Fill `buffer` (C-contiguous) with the bytes of `path` from `offset`; SourceChanged if the file ends first."""
    with open_source(path) as f:
        _fill(f, offset, byte_view(buffer).data, path)


def _fill(f: io.RawIOBase, offset: int, view: memoryview, path: Path | str) -> None:
    f.seek(offset)
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:  # every offset was checked against the size at first look: the file is shorter now
            raise SourceChanged(path)
        done += n


@dataclass(frozen=True)
class FileArray:
    """Values still in a source file: `shape` values of `dtype`, in C order, from byte `offset` of `path`.

    Read with `read` (or np.asarray), never mapped: a file cut short meanwhile gives SourceChanged, where a
    mapping would kill the process with SIGBUS. Slices along the first axis stay in the file, so a writer can
    copy a tensor's bytes file to file in the kernel (`write_array`) and a scan can read them a cache-sized
    run at a time (`runs`), never holding them whole.
    """

    path: Path
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def read(self, out: np.ndarray | None = None) -> np.ndarray:
        """The values, read now into a new array (or into `out`, C-contiguous, of this shape and dtype)."""
        values = np.empty(self.shape, self.dtype) if out is None else out
        if values.shape != self.shape or values.dtype != self.dtype or not values.flags.c_contiguous:
            raise ValueError(f"cannot read {self.shape} {self.dtype} values into {values.shape} {values.dtype}")
        if self.nbytes:
            read_into(self.path, self.offset, values)
        return values

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        values = self.read()
        return values if dtype is None else values.astype(dtype, copy=False)

    def __getitem__(self, index: Any) -> Any:
        """Leading integers and a leading slice (step 1), the rest whole, stay in the file; any other index reads."""
        parts = list(index) if isinstance(index, tuple) else [index]
        found = self
        while parts and found.ndim and isinstance(parts[0], (int, np.integer)) and not isinstance(parts[0], bool):
            found = found._row(operator.index(parts.pop(0)))
        if len(parts) <= found.ndim and all(isinstance(p, slice) and p == slice(None) for p in parts[1:]):
            if not parts:
                return found if found.ndim else found.read()[()]
            if isinstance(parts[0], slice):
                start, stop, step = parts[0].indices(found.shape[0])
                if step == 1:
                    return found._rows(start, max(start, stop))
        return found.read()[tuple(parts)]

    def _row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.itemsize

    def _row(self, i: int) -> FileArray:
        n = self.shape[0]
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
        return FileArray(self.path, self.offset + (i % n) * self._row_bytes(), self.dtype, self.shape[1:])

    def _rows(self, start: int, stop: int) -> FileArray:
        start_byte = self.offset + start * self._row_bytes()
        return FileArray(self.path, start_byte, self.dtype, (stop - start, *self.shape[1:]))

    def reshape(self, *shape: Any) -> FileArray:
        wanted = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if -1 in wanted:
            known = math.prod(n for n in wanted if n != -1)
            wanted = tuple(self.size // known if n == -1 and known else n for n in wanted)
        if math.prod(wanted) != self.size:
            raise ValueError(f"cannot reshape {self.size} values into shape {wanted}")
        return FileArray(self.path, self.offset, self.dtype, wanted)

    def runs(self, size: int = READ_CHUNK) -> Iterator[np.ndarray]:
        """The values in order, flat, a run of about `size` bytes at a time in one buffer (a run is valid until
        the next is read)."""
        count = max(1, size // self.itemsize)
        buffer = np.empty(min(count, self.size), self.dtype)
        with open_source(self.path) as f:
            for start in range(0, self.size, count):
                run = buffer[: min(count, self.size - start)]
                _fill(f, self.offset + start * self.itemsize, byte_view(run).data, self.path)
                yield run


def read_array(path: Path | str, offset: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`shape` values of `dtype` from byte `offset` of a source, read now (the caller checked they lie inside it)."""
    return FileArray(Path(path), offset, np.dtype(dtype), tuple(shape)).read()


def _identity(path: Path) -> tuple[int, ...] | None:
    """What changes whenever a file's content may have: size, modification and change times, the file itself.
    (ctime cannot be set back by a writer, as mtime can.)"""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino, found.st_dev


def unchanged(path: Path) -> Guard:
    """A guard that objects (SourceChanged) when `path` changed (size, times, file) since now."""
    regular_file(path)
    before = _identity(path)

    def check() -> None:
        if _identity(path) != before:
            raise SourceChanged(path)

    return check


@contextlib.contextmanager
def watching(source: Path) -> Iterator[Guard]:
    """While `source` is read: an error met after it changed is reported as that change, its cause (a file cut
    short reads as damaged, or as anything at all). Yields the check that it is unchanged, for a command that
    writes nothing to run before it answers."""
    check = unchanged(source)
    token = _WATCHED.set((*_WATCHED.get(), check))
    _FIFO_WRITER.watch(source)
    try:
        yield check
    except Exception as exc:
        cause = explained(exc)
        if cause is not exc:
            raise cause from None
        raise
    finally:
        _FIFO_WRITER.unwatch(source)
        _WATCHED.reset(token)


class _FifoWriter:
    """A FIFO put at a watched source's name blocks whoever opens it to read (a reader's own open, libhdf5's,
    zipfile's) until a writer comes, for ever: this thread is that writer, for an instant, every PERIOD seconds,
    so the reader finds an empty file, fails, and the failure is reported as the change it is."""

    PERIOD = 0.02

    def __init__(self) -> None:
        self._paths: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def watch(self, path: Path) -> None:
        with self._lock:
            self._paths[str(path)] = self._paths.get(str(path), 0) + 1
            self._start()

    def _start(self) -> None:
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="rnnconv-fifo-writer", daemon=True
            )
            self._thread.start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No writer thread while this lasts (for a fork, which would copy it wherever it was); it starts again after,
        in this process only (not in a child forked meanwhile)."""
        with self._lock:
            thread, stop, self._thread = self._thread, self._stop, None
        if thread is not None:
            stop.set()
            thread.join()
        owner = os.getpid()
        try:
            yield
        finally:
            if thread is not None and os.getpid() == owner:
                with self._lock:
                    self._start()

    def unwatch(self, path: Path) -> None:
        with self._lock:
            left = self._paths.pop(str(path), 1) - 1
            if left:
                self._paths[str(path)] = left

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.PERIOD):
            with self._lock:
                paths = list(self._paths)
            for path in paths:
                try:
                    if stat.S_ISFIFO(os.stat(path).st_mode):
                        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO: nobody waits to read it
                except OSError:
                    pass


_FIFO_WRITER = _FifoWriter()


def explained(exc: Exception) -> Exception:
    """The error to report for `exc`: the change of a source being read (`watching`), when one changed."""
    if not isinstance(exc, SourceChanged):
        for check in _WATCHED.get():
            try:
                check()
            except SourceChanged as changed:
                return changed
    return exc


@contextlib.contextmanager
def unguarded() -> Iterator[None]:
    """For outputs that say why reading failed: they depend on nothing read, so no guard holds them up."""
    token = _GUARDS.set(())
    try:
        yield
    finally:
        _GUARDS.reset(token)


@contextlib.contextmanager
def reading(source: Path, *guards: Guard) -> Iterator[Guard]:
    """`watching` `source`, and outputs are committed only if it stays unchanged (and `guards` agree); no output
    may be the source itself or its sidecar."""
    with watching(source) as check:
        guard_token = _GUARDS.set((*_GUARDS.get(), check, *guards))
        source_token = _SOURCES.set((*_SOURCES.get(), source))
        try:
            yield check
        finally:
            _GUARDS.reset(guard_token)
            _SOURCES.reset(source_token)


def sources_read() -> tuple[Path, ...]:
    """The sources the current `reading`s read: no output may be one of them."""
    return _SOURCES.get()


def check_guards() -> None:
    """Run the guards of the current `reading` now (at the end of a command that writes nothing itself)."""
    for guard in _GUARDS.get():
        guard()


def add_guard(guard: Guard) -> None:
    """One more check before the outputs of the current `reading` are committed (a reader's: a checksum
    computed in the background). Outside `reading` (a file loaded, nothing to write) there is nothing to
    guard, and a guard kept would wrongly hold up a later, unrelated write."""
    if _SOURCES.get():
        _GUARDS.set((*_GUARDS.get(), guard))


def byte_view(array: np.ndarray) -> np.ndarray:
    """The array's bytes in C order as a flat uint8 array: a view when it is contiguous (empty arrays too)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


GUARD_START = 60.0  # seconds the guard interpreter may take to start and import what it runs (once a process)
_GUARD: list[Any] = []  # the guard interpreter (a pool.Worker), started at the first `within` that needs it, kept
_GUARD_LOCK = threading.Lock()


def within(seconds: float, work: Callable[..., Any], args: tuple[Any, ...], stuck: str) -> None:
    """Run `work(*args)` in another process and wait at most `seconds`; BadInput(`stuck`) if it does not finish.

    For library code that may loop forever on a damaged file while holding the interpreter (libhdf5). The other
    process is a fork of this one only where this one runs no other thread (the FIFO writer is paused for the
    instant of the fork): a fork copies every thread stopped wherever it was, locks held, and a deadlock in the
    child would read as a damaged file. Otherwise (a digest, a framework's pool, the caller's own threads) it is the
    guard interpreter, a fresh `python -c` process (`pool.Worker`) started once and kept. So `work` is a module-level
    function and `args` plain data (a path, not an open file: `work` opens the file itself). Its result is thrown
    away, only its finishing in time matters; errors it meets are met again, and reported, by the caller doing the
    real work.
    """
    with _GUARD_LOCK:
        pid = _fork_alone()
        if pid == 0:  # the child: no cleanup handlers, no buffered output of the parent's
            code = 0
            try:
                work(*args)
            except BaseException:
                code = 1
            os._exit(code)
        if pid is not None:
            _wait(pid, seconds, stuck)
        else:
            _in_guard(seconds, work, args, stuck)


# Frameworks whose own native thread pools make a fork unsafe (JAX says so when it is forked); BLAS's idle workers
# register fork handlers and do not count.
FORK_HOSTILE = ("jax", "torch", "tensorflow")


def _fork_alone() -> int | None:
    """os.fork() where this process runs no other Python thread once the FIFO writer is paused, and no framework
    that runs native thread pools is loaded; None elsewhere."""
    if not hasattr(os, "fork") or any(name in sys.modules for name in FORK_HOSTILE):
        return None
    with _FIFO_WRITER.paused():
        return os.fork() if threading.active_count() == 1 else None


def _wait(pid: int, seconds: float, stuck: str) -> None:
    """The forked child waited for until it ends (woken by its end where the kernel offers a descriptor for the
    process, else looking every millisecond), or killed at `seconds`."""
    deadline = time.monotonic() + seconds
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3 or later
        pidfd = None
    ended = select.poll()  # poll, not select: a descriptor numbered past 1023 is no error
    if pidfd is not None:
        ended.register(pidfd, select.POLLIN)
    try:
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise BadInput(stuck)
            if pidfd is None:
                time.sleep(0.001)  # a child done in 7 ms is not waited for 10: a small conversion takes 0.3 s
            else:
                ended.poll(left * 1000)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _in_guard(seconds: float, work: Callable[..., Any], args: tuple[Any, ...], stuck: str) -> None:
    """`work(*args)` in the guard interpreter (started here the first time); killed where it does not finish."""
    from rnnconv.pool import Worker

    if _GUARD and _GUARD[0].process.poll() is not None:  # ended meanwhile (an interrupt reaches it too)
        _GUARD.clear()
    try:
        if not _GUARD:
            _GUARD.append(Worker(quiet=True))
            _GUARD[0].call(_ready, (work.__module__,), GUARD_START)
        _GUARD[0].call(_quietly, (work, args), seconds)
    except TimeoutError:
        _end_guard()
        raise BadInput(stuck) from None
    except (OSError, EOFError, ValueError):  # it died under the work (a crash in the library): the real work
        _end_guard()  # meets what killed it, and says so


def _end_guard() -> None:
    guard = _GUARD.pop()
    guard.process.kill()
    guard.end(stop=False)


def _ready(module: str) -> None:
    """In the guard: import what it will run, before any work is timed."""
    importlib.import_module(module)


def _quietly(work: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """In the guard: `work(*args)`, whatever it raises (the caller meets it again)."""
    with contextlib.suppress(BaseException):
        work(*args)
