"""Worker interpreters for conversions of several sources at once (`convert_many(..., jobs=N)`).

Each worker is a fresh `python -c` process. Unlike multiprocessing's spawn and forkserver children, it never
re-runs the caller's `__main__`, so a script pasted without `if __name__ == "__main__":` works; unlike a fork,
it copies no thread of the caller (a digest computed in the background, a framework's thread pool). Tasks and
results travel pickled over the worker's stdin and stdout: between this process and the children it started,
never from a file.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

WORKER = "from rnnconv.pool import serve; serve()"
LENGTH = struct.Struct("<Q")
PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])  # where this rnnconv is imported from: the workers' too


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        raise EOFError
    (length,) = LENGTH.unpack(head)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError
    return pickle.loads(data)


def serve() -> None:
    """A worker: run each `(function, args)` sent on stdin and send its result back, until stdin closes."""
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what a framework prints goes to stderr, not into results
    stopped: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stopped.append(signum)
        sys.exit(128 + signum)  # unwinds: temporaries removed

    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            try:
                function, args = _receive(sys.stdin.buffer)
            except EOFError:
                return
            result = function(*args)
            try:
                _send(results, result)
            except BrokenPipeError:  # the caller stopped listening (it is being terminated): nobody to tell
                with contextlib.suppress(OSError):
                    results.close()  # not flushed again at exit, which would print the same error
                return
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the caller says what happened
        sys.exit(130)
    except Exception:
        if stopped:  # what the unwinding broke on its way (an import cut short): the caller asked for it, and says so
            sys.exit(128 + stopped[0])
        raise


class Worker:
    def __init__(self, quiet: bool = False) -> None:
        """A worker interpreter; `quiet`: what it prints to stderr (a library's diagnostics) is dropped."""
        path = os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if quiet else None,
            env={**os.environ, "PYTHONPATH": path},
        )

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], seconds: float | None = None) -> Any:
        """`function(*args)` run by the worker, its result; with `seconds`, TimeoutError where it is not back by
        then (the worker is still at it: end it)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        _send(self.process.stdin, (function, args))
        if seconds is not None and not select.select([self.process.stdout], [], [], seconds)[0]:
            raise TimeoutError
        return _receive(self.process.stdout)

    def end(self, stop: bool) -> None:
        """Close its input (it ends by itself), or with `stop` also ask it to stop now; then wait for it."""
        if stop and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self.process.wait()

    def lost(self) -> str:
        """Why a worker that stopped answering is gone."""
        code = self.process.wait()
        return f"was killed by signal {-code}" if code < 0 else f"ended with exit code {code}"


def run(
    function: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], jobs: int
) -> Iterator[tuple[int, Any, str | None]]:
    """`(index, function(*task), None)` for each task as it finishes, `jobs` at a time in worker interpreters;
    `(index, None, why)` for a task whose worker died under it (another takes the tasks left)."""
    finished: queue.Queue[tuple[int, Any, str | None]] = queue.Queue()
    pending = iter(list(enumerate(tasks)))
    taking = threading.Lock()
    workers: list[Worker] = []
    stopping = threading.Event()

    def drive() -> None:
        worker = Worker()
        workers.append(worker)
        while not stopping.is_set():
            with taking:
                index, task = next(pending, (None, None))
            if index is None or task is None:
                break
            try:
                finished.put((index, worker.call(function, task), None))
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # ValueError: closed while stopping
                finished.put((index, None, f"the process converting it {worker.lost()}"))
                if stopping.is_set():
                    break
                worker = Worker()
                workers.append(worker)
        worker.end(stop=False)

    threads = [threading.Thread(target=drive, daemon=True) for _ in range(min(jobs, len(tasks)))]
    for thread in threads:
        thread.start()
    completed = False
    try:
        for _ in range(len(tasks)):
            yield finished.get()
        completed = True
    finally:
        stopping.set()
        if not completed:  # an interrupt, or the caller stopped early: what runs stops, what waits never starts
            for worker in list(workers):
                worker.end(stop=True)
        for thread in threads:
            thread.join()
