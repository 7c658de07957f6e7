"""A format's runtime: whether its packages import here and their versions, and the face of an engine that runs a blob
(`Engine`): rnnconv's own (`verification/engines.py`) and each format's (`base.RuntimeEngine`)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any, Protocol

from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import BackendInfo
from rnnconv.errors import BackendMissing, first_line
from rnnconv.formats.plugin import version as installed_version


class Engine(Protocol):
    """Where `verify` runs a blob (a cuDNN weight space, `formats.cudnn.Blob`): a name, notes about how it was
    chosen, what it is (`describe`), the versions it ran with, and `run`. cuDNN and the numpy reference of its
    equations are rnnconv's own (`engines.py`); a format whose runtime can run the blob offers one (`Format.engine`)."""

    name: str
    notes: list[str]

    def describe(self) -> BackendInfo: ...

    def versions(self) -> dict[str, str]: ...

    def run(self, blob: Any, inputs: Inputs) -> Outputs: ...


NOT_INSTALLED = "not installed"


def absent(modules: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Which of a runtime's packages cannot be imported here, by their names in the report: why (`not installed`,
    or the error its import raised)."""
    found = {}
    for name, module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            found[name] = NOT_INSTALLED
        except Exception as exc:  # installed but broken (a missing library, a mismatched build): it cannot run
            found[name] = f"installed but its import fails ({type(exc).__name__}: {first_line(exc)})"
    return found


def versions_of(modules: tuple[tuple[str, str], ...], extra: str | None, what: str) -> dict[str, str]:
    """The versions of a runtime's packages, by their names in the report (each one imported); BackendMissing (exit 3)
    naming them and the extra that installs them, where one cannot be imported (`what` needs them)."""
    missing = absent(modules)
    if missing:
        needs = f"{what} needs {' and '.join(missing)}"
        if set(missing.values()) == {NOT_INSTALLED}:
            needs += f", which {'is' if len(missing) == 1 else 'are'} {NOT_INSTALLED}"
        else:
            needs += ": " + "; ".join(f"{name} is {why}" for name, why in missing.items())
        raise BackendMissing(f"{needs} (pip install 'rnnconv[{extra}]')")
    versions = {}
    for name, module in modules:
        told = getattr(importlib.import_module(module), "__version__", None)  # else its package's metadata
        versions[name] = str(told or installed_version(name, module) or "(version unknown)")
    return versions


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
