"""Files rnnconv writes: every file is written to a temporary name beside its final one and put in place only when
all is well. No existing file is replaced without `force` (the final name is created by a hard link, which fails
when the name exists, so two writers racing for one output cannot both win), nothing is committed while a guard
objects (the source changed while it was read, a stored checksum does not match), and on any error or signal the
temporaries go. A temporary is the file NAME inside a private folder `.NAME.rnnconv-PID-*.part` beside the output,
made by the writer itself: a file created new, not one truncated on opening, which ext4 would flush to disk when
closed. One left by a killed process is removed by the next run that writes there. Values still in a source file
are copied file to file, never held whole: inside the kernel where they keep their place within a page, else a
cache-sized run at a time read and written once (the kernel's copy shifts each byte more slowly than that)."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import (
    FileArray,
    SourceChanged,
    byte_view,
    check_guards,
    open_source,
    resolved,
    sources_read,
)

TEMP_TAG = ".rnnconv-"
TEMP_SUFFIX = ".part"
SIDECAR_SUFFIX = ".json"  # X.bin's sidecar is X.bin.json: an output must never be a source's sidecar either
LIVE_TEMPS: set[Path] = set()  # temporary folders, for a signal handler that must clean up before the process ends


def check_writable(paths: list[Path], force: bool) -> None:
    """Refuse before any work when an output exists (without --force), cannot be written, or is a source."""
    protected = {
        resolved(p) for source in sources_read() for p in (source, source.with_name(source.name + SIDECAR_SUFFIX))
    }
    for path in paths:
        if resolved(path) in protected:
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
        check_guards()
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


def write_array(f: BinaryIO, array: np.ndarray | FileArray) -> list[str]:
    """An array's bytes, C order, at the file's position, without an intermediate copy when contiguous.

    Values still in a source file (a `FileArray`: a PyTorch storage, a blob's tensors) are copied file to file
    (`_file_copy`), never held whole in this process's memory; a source cut short meanwhile gives SourceChanged.
    """
    if isinstance(array, FileArray):
        if not _file_copy(array.path, array.offset, array.nbytes, f):
            for run in array.runs():
                f.write(run.data)
        return []
    f.write(byte_view(array).data)
    return []


@contextlib.contextmanager
def mapped_run(f: BinaryIO, nbytes: int) -> Iterator[memoryview | None]:
    """The next `nbytes` of the output `f`, from its position, mapped to be written in place (a transpose's tiles go
    straight there: no copy of the whole in this process), the position then after them; None where `f` is no file
    open for reading and writing or its file system cannot allocate blocks ahead (the caller then writes the bytes).

    The blocks are allocated before the mapping, so a full disk is an error here, never SIGBUS while the map is
    written. The view must be let go (every array made on it with it) before the context ends."""
    if not hasattr(os, "posix_fallocate") or nbytes <= 0:
        yield None
        return
    try:
        fd = f.fileno()
    except (OSError, ValueError):  # a file object with no file under it (io.BytesIO)
        yield None
        return
    if not f.readable():  # a map needs a file open for reading too ("w+b")
        yield None
        return
    f.flush()
    position = f.tell()
    try:
        os.posix_fallocate(fd, position, nbytes)
    except OSError as exc:
        if exc.errno not in _NO_ALLOCATION:
            raise
        yield None
        return
    start = position - position % mmap.ALLOCATIONGRANULARITY
    region = mmap.mmap(fd, position + nbytes - start, offset=start)
    view = memoryview(region)[position - start :]
    try:
        yield view
    except BaseException:
        with contextlib.suppress(BufferError):  # arrays on the view live on in the traceback: the map goes with them
            view.release()
            region.close()
        raise
    view.release()
    region.close()
    f.seek(position + nbytes)


_NO_ALLOCATION = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV, errno.ESPIPE, errno.EBADF}


PAGE = mmap.PAGESIZE
SHIFTED_RUN = 1 << 21  # bytes read, then written, at a time where a copy shifts its bytes within a page


def _file_copy(source: Path, offset: int, size: int, f: BinaryIO) -> bool:
    """Copy `size` bytes of `source` from `offset` to `f`'s position; False when `f` is no file or this system has
    no positioned reads (nothing written).

    Bytes that keep their place within a page (the output's position and the source's offset a whole number of
    pages apart, as `cp` copies) go inside the kernel; shifted ones (a weight space's or a runtime file's tensor,
    placed where the source did not put it) a run at a time through one buffer, read and written once: the kernel's
    copy moves a shifted byte at two thirds the speed (bench/bench.py's rows of the copies)."""
    if not hasattr(os, "preadv"):  # no positioned reads here (Windows): the runs go through `f.write`
        return False
    try:
        f.fileno()
    except (OSError, ValueError):  # a file object with no file under it (io.BytesIO)
        return False
    f.flush()
    position = f.tell()
    with open_source(source) as src:
        if (offset - position) % PAGE or not _kernel_copy(src.fileno(), f.fileno(), offset, position, size, source):
            _read_and_write(src.fileno(), f.fileno(), offset, position, size, source)
    f.seek(position + size)
    return True


def _kernel_copy(src: int, dst: int, offset: int, position: int, size: int, source: Path) -> bool:
    """The copy inside the kernel; False when this kernel or file system has none (nothing written)."""
    for copy in _KERNEL_COPIES:
        done = 0
        try:
            while done < size:
                n = copy(src, dst, offset + done, position + done, size - done)
                if n == 0:  # short of what the file held at first look
                    raise SourceChanged(source)
                done += n
        except OSError as exc:
            if done or exc.errno not in _NO_KERNEL_COPY:
                raise
            continue
        return True
    return False


def _read_and_write(src: int, dst: int, offset: int, position: int, size: int, source: Path) -> None:
    """The copy through one buffer of this process, a run at a time (each run stays in the core's cache)."""
    buffer = memoryview(bytearray(min(size, SHIFTED_RUN)))
    done = 0
    while done < size:
        n = os.preadv(src, [buffer[: min(size - done, len(buffer))]], offset + done)
        if n == 0:  # short of what the file held at first look
            raise SourceChanged(source)
        written = 0
        while written < n:
            written += os.pwrite(dst, buffer[written:n], position + done + written)
        done += n


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
