"""The command line's standard streams and terminal size, whatever state the caller left them in.

A CI runner or a container may start rnnconv with stdout or stderr closed (`>&-`), on a full device
(`/dev/full`), on a pipe its reader closed early (`| head -c0`), or with COLUMNS and LINES saying 0, a
negative number, a huge one or no number at all. Whatever they say: an error reaches stderr when there is one
to take it, the exit code stays the command's, and nothing crashes or prints a traceback. Only the standard
library is imported here: `rnnconv --help` goes through it.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

# A narrower table would hide its cells (rich gives a column no room below one character); no terminal is wider
# than the upper bound, and a width beyond it would only be padding.
MIN_COLUMNS, MAX_COLUMNS, MAX_LINES = 40, 10_000, 10_000


def prepare() -> None:
    """What every command needs before anything is printed: the three standard file descriptors open, and a
    terminal size that can be used."""
    reserve_standard_descriptors()
    sane_terminal_size()
    # pydantic looks for plugins among every installed distribution's entry points when it builds a model
    # (0.015 s and more with a framework installed); rnnconv's contracts are not for a plugin to watch. A value
    # the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def reserve_standard_descriptors() -> None:
    """Descriptors 0-2 open: one the caller closed gets /dev/null. Otherwise the next file opened takes its
    number, and a library's log line to stderr would land in an output rnnconv is writing."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd` itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name) is None:  # Python saw it closed at startup: printing goes nowhere, as asked
            setattr(sys, name, open(fd, "w", closefd=False, errors="backslashreplace"))  # noqa: SIM115


def sane_terminal_size() -> None:
    """COLUMNS and LINES as rich and click can use them: a positive number is kept within bounds; 0, a negative
    one or no number at all is dropped, so the terminal's own size (80 x 25 off a terminal) is used. (rich
    takes COLUMNS=0 at its word and prints nothing, and a digit like '²' made it fail on import.)"""
    for name, lowest, highest in (("COLUMNS", MIN_COLUMNS, MAX_COLUMNS), ("LINES", 1, MAX_LINES)):
        stated = os.environ.get(name)
        if stated is None:
            continue
        digits = stated.strip()
        if digits.isascii() and digits.isdigit() and int(digits) > 0:
            os.environ[name] = str(min(max(int(digits), lowest), highest))
        else:
            del os.environ[name]


def silence(fd: int) -> None:
    """Point a standard descriptor that cannot be written at /dev/null: what is still buffered for it then goes
    nowhere, instead of failing again when the interpreter exits (which would end it with status 120)."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """What a framework's C++ code logs to file descriptor 2 while this lasts, which no setting of theirs stops
    (TensorFlow's start-up lines, LiteRT's "Created TensorFlow Lite XNNPACK delegate"), kept off the user's
    terminal: their errors reach rnnconv as exceptions, which it says in its own sentence."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()  # what Python wrote before still reaches the terminal
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def reason(exc: OSError | ValueError) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if isinstance(exc, ValueError):
        return "it is closed"
    return exc.strerror or str(exc)


class Tolerant:
    """A standard stream for messages (stderr): a write that fails, on a full device or a pipe closed early, is
    given up and the stream silenced; it never raises, so the exit code stays the command's."""

    def __init__(self, name: str, fd: int):
        self._name, self._fd = name, fd

    def _stream(self) -> Any:
        return getattr(sys, self._name)

    def write(self, text: str) -> int:
        try:
            return int(self._stream().write(text))
        except (OSError, ValueError):
            silence(self._fd)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream().flush()
        except (OSError, ValueError):
            silence(self._fd)

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno: the stream's own
        return getattr(self._stream(), name)


def collecting() -> None:
    """A command starts its own work: where the `rnnconv` command turned the collector off while its libraries were
    imported (`rnnconv.__main__`), what they made is frozen (kept for the process's life, never walked again) and
    the collector turned on, so the work's garbage is collected as before."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def finished(code: int) -> int:
    """The exit code, once stdout and stderr are flushed (before the interpreter tries, and fails, at exit): a
    stdout that cannot take the result (a full device, an I/O error) is an error, said on stderr; a pipe
    closed early ends the output, not the command; a stderr that cannot be written is given up."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence(1)
    except (OSError, ValueError) as exc:
        silence(1)
        Tolerant("stderr", 2).write(f"error: cannot write to stdout: {reason(exc)}\n")
        code = code or 2
    Tolerant("stderr", 2).flush()
    return code


def standalone(app: Callable[[], Any]) -> Callable[[], NoReturn]:
    """The `rnnconv` command: `app` (typer's, which exits) run once the streams and the terminal size are usable,
    its exit code kept whatever the streams do."""

    def main() -> NoReturn:
        prepare()
        try:
            app()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except OSError as exc:  # typer could not write help (stdout) or a usage error (stderr, where nothing shows)
            silence(1)
            Tolerant("stderr", 2).write(f"error: cannot write to stdout: {reason(exc)}\n")
            code = 2
        sys.exit(finished(code))

    return main
