"""Files rnnconv did not write, and files it writes.

Input: only regular files are read (a FIFO, a device or a directory is refused at once), and what a file
claims is checked against what it holds. Output: every file is written to a temporary name beside its
final one and put in place only when all is well. No existing file is replaced without `force` (the final
name is created by a hard link, which fails when the name exists, so two writers racing for one output
cannot both win), nothing is committed while a guard objects (the source changed while it was read, a
stored checksum does not match), and on any error or signal the temporaries go. A temporary is the file
NAME inside a private folder `.NAME.rnnconv-PID-*.part` beside the output, made by the writer itself: a file
created new, not one truncated on opening, which ext4 would flush to disk when closed. One left by a
killed process is removed by the next run that writes there.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import errno
import hashlib
import json
import mmap
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from rnnconv.errors import BadInput

TEMP_TAG = ".rnnconv-"
TEMP_SUFFIX = ".part"
SIDECAR_SUFFIX = ".json"  # X.bin's sidecar is X.bin.json: an output must never be a source's sidecar either

T = TypeVar("T")
Guard = Callable[[], None]  # raises when outputs must not be committed
_GUARDS: contextvars.ContextVar[tuple[Guard, ...]] = contextvars.ContextVar("rnnconv_guards", default=())
_SOURCES: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar("rnnconv_sources", default=())
LIVE_TEMPS: set[Path] = set()  # temporary folders, for a signal handler that must clean up before the process ends


# --- input ---------------------------------------------------------------------------------------------


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


def unchanged(path: Path) -> Guard:
    """A guard that objects when `path` changed (size, modification time, file) since now."""
    regular_file(path)
    before = path.stat()

    def check() -> None:
        try:
            after = path.stat()
        except OSError:
            after = None
        if after is None or (after.st_size, after.st_mtime_ns, after.st_ino) != (
            before.st_size,
            before.st_mtime_ns,
            before.st_ino,
        ):
            raise BadInput(
                f"{path} changed while it was being read (truncated, rewritten or replaced); nothing was written"
            )

    return check


@contextlib.contextmanager
def reading(source: Path, *guards: Guard) -> Iterator[None]:
    """While reading `source`: outputs are committed only if it stays unchanged (and `guards` agree), and no
    output may be the source itself or its sidecar."""
    guard_token = _GUARDS.set((*_GUARDS.get(), unchanged(source), *guards))
    source_token = _SOURCES.set((*_SOURCES.get(), source))
    try:
        yield
    finally:
        _GUARDS.reset(guard_token)
        _SOURCES.reset(source_token)


def add_guard(guard: Guard) -> None:
    """One more check before the outputs of the current `reading` are committed (a reader's: a checksum
    computed in the background). Outside `reading` (a file loaded, nothing to write) there is nothing to
    guard, and a guard kept would wrongly hold up a later, unrelated write."""
    if _SOURCES.get():
        _GUARDS.set((*_GUARDS.get(), guard))


# --- output --------------------------------------------------------------------------------------------


def check_writable(paths: list[Path], force: bool) -> None:
    """Refuse before any work when an output exists (without --force), cannot be written, or is a source."""
    protected = {
        p.resolve() for source in _SOURCES.get() for p in (source, source.with_name(source.name + SIDECAR_SUFFIX))
    }
    for path in paths:
        if path.resolve() in protected:
            raise BadInput(f"{path} is the source being read (or its sidecar); rnnconv never writes over it")
        if os.path.lexists(path) and not force:  # a symlink, even a dangling one, is an existing file too
            raise BadInput(f"{path} already exists; pass --force to replace it")
        if path.is_dir():
            raise BadInput(f"{path} is a directory, not a file name")
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise BadInput(f"cannot write {path}: the directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise BadInput(f"cannot write {path}: the directory {parent} is not writable")


def _remove_stale_temps(path: Path) -> None:
    """Temporaries of `path` left by a process that no longer runs (killed while writing)."""
    parent = path.parent if str(path.parent) else Path(".")
    for temp in parent.glob(f".{path.name}{TEMP_TAG}*{TEMP_SUFFIX}"):
        pid_text = temp.name[len(f".{path.name}{TEMP_TAG}") :].split("-")[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not _alive(int(pid_text)):
            _remove_temp(temp)


def _remove_temp(temp: Path) -> None:
    """A temporary folder and what it holds (or a temporary file, as rnnconv before 0.6 made them)."""
    with contextlib.suppress(OSError):
        if temp.is_dir() and not temp.is_symlink():
            shutil.rmtree(temp)
        else:
            temp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _commit(temp: Path, path: Path, force: bool) -> None:
    if force:
        os.replace(temp, path)
        return
    try:
        os.link(temp, path)  # fails if the name exists: never replaces what another writer just made
    except FileExistsError:
        raise BadInput(f"{path} appeared while rnnconv was writing it; pass --force to replace it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(path):  # a file system without hard links: check, then rename
            raise BadInput(f"{path} appeared while rnnconv was writing it; pass --force to replace it") from None
        os.replace(temp, path)
    else:
        temp.unlink()


@contextlib.contextmanager
def atomic_outputs(paths: list[Path], force: bool) -> Iterator[list[Path]]:
    """Yield temporary paths next to `paths`; on success move them into place together.

    On any error the temporaries are removed and existing outputs stay untouched. The first path is
    the main output and is put in place last, so a reader that sees it also sees the others (a blob
    implies its sidecar); if it cannot be, the others are taken back.
    """
    check_writable(paths, force)
    folders: list[Path] = []
    temps: list[Path] = []
    committed: list[Path] = []
    try:
        for path in paths:
            _remove_stale_temps(path)
            folder = Path(
                tempfile.mkdtemp(  # private (0700): nobody can put a file or link at the name meanwhile
                    prefix=f".{path.name}{TEMP_TAG}{os.getpid()}-",
                    suffix=TEMP_SUFFIX,
                    dir=path.parent if str(path.parent) else ".",
                )
            )
            folders.append(folder)
            LIVE_TEMPS.add(folder)
            temps.append(folder / path.name)
        try:
            yield temps
        except OSError as exc:  # name the output, never the temporary
            raise BadInput(f"cannot write {paths[0]}: {_reason(exc)}") from None
        for guard in _GUARDS.get():
            guard()
        for temp, path in reversed(list(zip(temps, paths))):
            _commit(temp, path, force)
            committed.append(path)
    except BaseException:
        if not force:
            for path in committed:  # take back the sidecar of a blob that could not be put in place
                with contextlib.suppress(OSError):
                    path.unlink()
        raise
    finally:
        for folder in folders:
            LIVE_TEMPS.discard(folder)
            _remove_temp(folder)


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    return exc.strerror or str(exc)


def remove_live_temps() -> None:
    """Remove every temporary still being written (from a signal handler, before the process ends)."""
    for temp in list(LIVE_TEMPS):
        _remove_temp(temp)


def write_array(f: BinaryIO, array: np.ndarray) -> list[str]:
    """An array's bytes, C order, at the file's position, without an intermediate copy when contiguous.

    Bytes that are a memory-mapped file's, unchanged (a PyTorch storage, a blob's tensors), are copied
    file to file inside the kernel, never through this process's memory.
    """
    place = mapped_place(array)
    if place is None or not _kernel_copy(place[0], place[1], array.nbytes, f):
        f.write(byte_view(array).data)
    return []


def byte_view(array: np.ndarray) -> np.ndarray:
    """The array's bytes in C order as a flat uint8 array: a view when it is contiguous (empty arrays too)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def mapped_place(array: np.ndarray) -> tuple[str, int] | None:
    """(file, byte offset) of a C-contiguous array that is a view of a read-only np.memmap; None otherwise."""
    if not array.flags.c_contiguous or array.flags.writeable or array.nbytes == 0:
        return None
    root: Any = array
    while root is not None and not (isinstance(root, np.memmap) and isinstance(root.base, mmap.mmap)):
        root = getattr(root, "base", None)  # an array's base may be bytes, an mmap, any buffer
    if root is None or root.filename is None:
        return None
    return str(root.filename), root.offset + (array.ctypes.data - root.ctypes.data)


def _kernel_copy(source: str, offset: int, size: int, f: BinaryIO) -> bool:
    """Copy `size` bytes of `source` from `offset` to `f`'s position; False when the kernel cannot (nothing written)."""
    f.flush()
    position = f.tell()
    done = 0
    with open(source, "rb", buffering=0) as src:
        for copy in _KERNEL_COPIES:
            try:
                while done < size:
                    n = copy(src.fileno(), f.fileno(), offset + done, position + done, size - done)
                    if n == 0:
                        raise BadInput(f"{source} ended while it was being read (truncated meanwhile)")
                    done += n
            except OSError as exc:
                if done or exc.errno not in _NO_KERNEL_COPY:
                    raise
                continue
            f.seek(position + size)
            return True
    return False


def _copy_file_range(src: int, dst: int, offset: int, position: int, size: int) -> int:
    return os.copy_file_range(src, dst, min(size, 1 << 30), offset, position)


def _sendfile(src: int, dst: int, offset: int, position: int, size: int) -> int:
    os.lseek(dst, position, os.SEEK_SET)  # sendfile writes at the output's position
    return os.sendfile(dst, src, offset, min(size, 1 << 30))


# In-kernel copies, best first, where this Python and OS have them; errors that mean "not here" try the next.
_KERNEL_COPIES = [
    c for c, name in ((_copy_file_range, "copy_file_range"), (_sendfile, "sendfile")) if hasattr(os, name)
]
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM}


def _blake3() -> Any:
    try:
        import blake3
    except ImportError:  # a platform without its wheel: sha256 then, and the digest says which
        return None
    return blake3


# The source's digest, recorded as "ALGORITHM:HEX" in every sidecar. blake3 hashes the file from its
# mapped pages at several GB/s on one core, so the digest no longer sets a conversion's speed.
DIGEST_ALGORITHM = "blake3" if _blake3() else "sha256"
DIGEST_ALGORITHMS = ("blake3", "sha256")
DIGEST_WINDOW = 64 << 20  # bytes, a multiple of the page size


def digest_of(path: Path, algorithm: str = DIGEST_ALGORITHM) -> str:
    """`algorithm:hex` of the file's bytes (one thread: the conversion has the other core)."""
    if algorithm == "blake3":
        hasher = _blake3().blake3(max_threads=1)
        with open(path, "rb", buffering=0) as f:
            size, offset = os.fstat(f.fileno()).st_size, 0
            while offset < size:  # mapped a window at a time: the whole file mapped would count in the RSS
                length = min(DIGEST_WINDOW, size - offset)
                with mmap.mmap(f.fileno(), length, offset=offset, access=mmap.ACCESS_READ) as window:
                    hasher.update(window)
                offset += length
        return f"blake3:{hasher.hexdigest()}"
    digest = hashlib.sha256()
    buffer = bytearray(1 << 24)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])  # hashlib releases the GIL on large buffers
    return f"sha256:{digest.hexdigest()}"


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
        with open(path, "rb", buffering=0) as f:
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


def within(seconds: float, work: Callable[[], None], stuck: str) -> None:
    """Run `work` in a forked child and wait at most `seconds`; BadInput(`stuck`) if it does not finish.

    For library code that may loop forever on a damaged file while holding the interpreter (libhdf5):
    the child's result is thrown away, only its finishing in time matters; errors it meets are met
    again, and reported, by the caller doing the real work. Where there is no fork, `work` is not run.
    """
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: no cleanup handlers, no buffered output of the parent's
        code = 0
        try:
            work()
        except BaseException:
            code = 1
        os._exit(code)
    deadline = time.monotonic() + seconds
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise BadInput(stuck)
        time.sleep(0.001)  # a child done in 7 ms is not waited for 10: a small conversion takes 0.3 s
