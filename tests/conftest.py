from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rnnconv.formats import _node
from rnnconv.formats.catalog import plugins

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # exact float32 matmuls, comparable with numpy

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Largest error of each comparison with a framework, printed after the run for the notes. pytest loads this
# file as `tests.conftest`, the test files import it as `conftest`: both must fill and print one dict.
_loaded_by_pytest = getattr(sys.modules.get("tests.conftest"), "LARGEST_ERRORS", None)
LARGEST_ERRORS: dict[str, float] = {} if _loaded_by_pytest is None else _loaded_by_pytest


def pytest_sessionfinish(session) -> None:
    """An xdist worker hands its comparisons to the controller, which prints them; and its heap is collected once
    more and frozen, before it says it is finished.

    What pytest does after (its garbage collections at unconfigure) walked every framework's objects for seconds, and
    execnet sends SIGINT to a worker still running 5 s after it is told to end: the KeyboardInterrupt landed in
    hypothesis's gc callback, a traceback at the end of a green run. Frozen, those collections walk only what is new,
    as the `rnnconv` command freezes its heap before it exits (`rnnconv.__main__`)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["largest_errors"] = json.dumps(LARGEST_ERRORS)
    gc.collect()  # an object's __del__ failing is still reported (pytest's unraisable hook is on until unconfigure)
    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    LARGEST_ERRORS.update(json.loads(getattr(node, "workeroutput", {}).get("largest_errors", "{}")))


def pytest_terminal_summary(terminalreporter) -> None:
    narrow = ("float16]", "bfloat16]", "bf16")
    for title, keep in (
        ("full precision", lambda k: not any(n in k for n in narrow)),
        ("half precision", lambda k: any(n in k for n in narrow)),
    ):
        chosen = {k: v for k, v in LARGEST_ERRORS.items() if keep(k)}
        if chosen:
            worst = max(chosen, key=chosen.get)
            terminalreporter.write_line(
                f"largest error against a framework, {title}: {chosen[worst]:.3g} ({worst}), {len(chosen)} comparisons"
            )


def pytest_runtest_setup(item) -> None:
    """A test marked `needs(...)` skips where what it names is not installed, before any fixture of it is made: a
    module (pytest.importorskip), or "cudnn", the cuDNN library (required instead under RNNCONV_REQUIRE_CUDNN=1)."""
    for marker in item.iter_markers("needs"):
        for name in marker.args:
            if name == "cudnn":
                cudnn_or_skip()
            else:
                pytest.importorskip(name)


def cudnn_or_skip():
    """The cuDNN library (rnnconv.gpu.api.Cudnn), or a skip saying it is not installed; a failure where
    RNNCONV_REQUIRE_CUDNN is set (CI installs it: its tests must run there, not skip)."""
    from rnnconv.errors import BackendMissing
    from rnnconv.gpu import api

    try:
        return api.Cudnn()
    except BackendMissing as exc:
        if os.environ.get("RNNCONV_REQUIRE_CUDNN"):
            raise
        pytest.skip(f"libcudnn is not installed here: {exc}")


@pytest.fixture(autouse=True)
def _gpu_gate(request) -> None:
    """A test marked `gpu` skips, with the reason, where cuDNN cannot run on a GPU (RNNCONV_REQUIRE_GPU=1: fails)."""
    if request.node.get_closest_marker("gpu") is None:
        return
    why = _no_gpu_reason()
    if why and os.environ.get("RNNCONV_REQUIRE_GPU"):
        pytest.fail(f"RNNCONV_REQUIRE_GPU is set but cuDNN does not run on a GPU here: {why}")
    if why:
        pytest.skip(f"needs a GPU with cuDNN: {why}")


_NO_GPU: list[str] = []


def _no_gpu_reason() -> str:
    """Why cuDNN cannot run here ('' when it can), asked once per session."""
    if not _NO_GPU:
        from rnnconv.gpu.backend import probe

        status = probe()
        _NO_GPU.append("" if status.ok else status.reason)
    return _NO_GPU[0]


def run_cli(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m rnnconv ARGS` as a user would: through the command's own entry point in this interpreter, its
    file descriptors 1 and 2 captured, unless `env` changes the environment, which an interpreter reads as it starts
    (then in a fresh one, as `fresh_cli`). A fresh interpreter costs half a second of imports, and more for a
    framework; what a test holds of imports, signals or environments needs one (`fresh_cli`)."""
    if env:
        return fresh_cli(*args, cwd=cwd, env=env)
    return _in_this_interpreter([str(a) for a in args], cwd)


def fresh_cli(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m rnnconv ARGS` in a fresh interpreter, with `env` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "rnnconv", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


# Runs each command of argv[1] (JSON) with `run_cli` in this interpreter and prints (exit code, stdout, stderr) of each.
_RUN_EACH = """
import json, sys
sys.path.insert(0, sys.argv[2])
from conftest import run_cli
results = [run_cli(*args) for args in json.loads(sys.argv[1])]
print(json.dumps([(result.returncode, result.stdout, result.stderr) for result in results]))
"""


def fresh_clis(*commands: list[str | Path], env: dict) -> list[subprocess.CompletedProcess]:
    """Run each of `commands` as `python -m rnnconv ARGS`, one after another (as `run_cli` runs one here), in one fresh
    interpreter with `env` added to the environment: for commands that need a fresh interpreter, but not one each (a
    framework they import is imported once for all of them)."""
    listed = json.dumps([[str(a) for a in args] for args in commands])
    session = subprocess.run(
        [sys.executable, "-c", _RUN_EACH, listed, str(Path(__file__).resolve().parent)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300 * len(commands),
    )
    assert session.returncode == 0, session.stderr
    return [
        subprocess.CompletedProcess(["rnnconv", *map(str, args)], code, out, err)
        for args, (code, out, err) in zip(commands, json.loads(session.stdout), strict=True)
    ]


class _TimedOut(BaseException):
    """Raised by the alarm in an in-process run: a BaseException, so the command's own handlers let it through."""


def _in_this_interpreter(args: list[str], cwd: Path | None) -> subprocess.CompletedProcess:
    """`python -m rnnconv ARGS` run by `rnnconv.cli.commands.main` here, as the interpreter would run it: sys.argv and
    the `__main__` module it reads its program name from, descriptors 1 and 2 on files (so what a native library
    writes is caught too), the interpreter's default warning filters (a warning is printed on stderr, as it would be),
    an uncaught exception printed as a traceback with exit status 1; the environment, working folder, signal handlers
    and streams put back after. Timed out after 300 seconds, as `fresh_cli`."""
    import io
    import locale
    import signal
    import tempfile
    import traceback
    import types
    import warnings

    import rnnconv
    from rnnconv.cli.commands import main

    encoding = locale.getpreferredencoding(False)
    saved_streams, saved_argv, saved_main = (sys.stdout, sys.stderr), sys.argv, sys.modules["__main__"]
    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGALRM)}
    run_as_module = types.ModuleType("__main__")
    run_as_module.__package__ = "rnnconv"  # click names the program `python -m rnnconv` from this, as a user sees
    for stream in saved_streams:
        stream.flush()
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        saved_fds = os.dup(1), os.dup(2)
        code: int | str | None = 0
        try:
            os.dup2(out_file.fileno(), 1)
            os.dup2(err_file.fileno(), 2)
            # as the interpreter opens them on a pipe: stdout strict, stderr backslashreplace
            sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding, write_through=True)  # noqa: SIM115
            err = open(2, "wb", closefd=False)  # noqa: SIM115
            sys.stderr = io.TextIOWrapper(err, encoding, errors="backslashreplace", write_through=True)
            sys.argv = [str(Path(rnnconv.__file__).parent / "__main__.py"), *args]
            sys.modules["__main__"] = run_as_module
            if cwd is not None:
                os.chdir(cwd)

            def timed_out(signum: int, frame: object) -> None:
                raise _TimedOut

            signal.signal(signal.SIGALRM, timed_out)
            signal.alarm(300)
            with warnings.catch_warnings():
                warnings.resetwarnings()
                for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                    warnings.simplefilter("ignore", category)
                try:
                    main()
                except SystemExit as exc:
                    code = exc.code
                except _TimedOut:
                    pytest.fail(f"rnnconv {' '.join(args)} ran for more than 300 seconds")
                except Exception:
                    traceback.print_exc()
                    code = 1
        finally:
            signal.alarm(0)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            sys.argv, sys.modules["__main__"] = saved_argv, saved_main
            os.environ.clear()
            os.environ.update(saved_environ)
            os.chdir(saved_cwd)
            for signum, handler in saved_handlers.items():
                signal.signal(signum, handler)
        captured = []
        for file in (out_file, err_file):  # decoded as subprocess.run(text=True) decodes: universal newlines
            file.seek(0)
            captured.append(io.TextIOWrapper(io.BytesIO(file.read()), encoding).read())
    returncode = code if isinstance(code, int) else 0 if code is None else 1
    return subprocess.CompletedProcess(["rnnconv", *args], returncode, *captured)


# TensorFlow.js's tests run Node.js and @tensorflow/tfjs (npm ci --ignore-scripts), and skip where either is absent.
needs_tfjs = pytest.mark.skipif(
    _node.node() is None or _node.package_version("@tensorflow/tfjs") is None,
    reason="TensorFlow.js is not installed (npm ci --ignore-scripts)",
)

# Every format's test dependencies, as its plugin declares them: the frameworks a conversion must not import.
FRAMEWORKS = tuple(dict.fromkeys(module for plugin in plugins() for module in plugin.frameworks))


def assert_no_framework_imported(*chain: Path, allowed: tuple[str, ...] = ()) -> None:
    """Converting each file of `chain` into the next and inspecting them all, in a fresh interpreter, imports no
    framework (but `allowed`): rnnconv reads and writes every format itself."""
    code = (
        "import sys, rnnconv\n"
        "for source, output in zip(sys.argv[1:], sys.argv[2:]):\n"
        "    rnnconv.convert(source, output)\n"
        "for path in sys.argv[1:]:\n"
        "    rnnconv.inspect(path)\n"
        f"found = set({[f for f in FRAMEWORKS if f not in allowed]!r}) & set(sys.modules)\n"
        "assert not found, f'{found} imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code, *map(str, chain)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def largest_difference(got, expected) -> float:
    """The largest absolute difference between outputs (y, h_n, c_n) and a framework's; a None expected is skipped."""
    return max(float(np.abs(np.asarray(g) - np.asarray(e)).max()) for g, e in zip(got, expected) if e is not None)


def assert_clean_failure(result: subprocess.CompletedProcess, code: int, *phrases: str) -> None:
    """A failure is one sentence on stderr with the documented code: never a traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    text = " ".join(result.stderr.split())
    for phrase in phrases:
        assert phrase in text, (phrase, result.stderr)


def doc_code(page: str, language: str = "python", after: str = "") -> str:
    """The first ```LANGUAGE block of README.md or a documentation page (`docs/...`), after the line starting with
    `after` where given: the tests run the documentation's examples as printed."""
    text = (ROOT / page).read_text()
    if after:
        found = re.search(rf"^{re.escape(after)}.*$", text, re.M)
        assert found, f"{page} has no line starting with {after!r}"
        text = text[found.end() :]
    block = re.search(rf"```{language}\n(.*?)```", text, re.S)
    assert block, f"{page} has no ```{language} block after {after!r}"
    return block.group(1)


def per_direction_weight_space(blob, direction: int) -> np.ndarray:
    """The unidirectional weight space of one direction, cut out of a blob through its layout."""
    from rnnconv.core.weightspace import regions

    parts = [blob.param(r.key).reshape(-1) for r in regions(blob.spec) if r.key.direction == direction]
    return np.concatenate(parts)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


def declared_refusal(target: str, rnn) -> str | None:
    """What a target's refusal of an RNN it cannot hold names (None: it holds it), as the target's declarations say
    (its plugin's `Holds` and its table rows, read by `formats/holding.py`): the element type it would round, else
    the first term it has no place for. The grids hold every file a target does write against its runtime."""
    from rnnconv.errors import Unsupported
    from rnnconv.formats import registry

    fmt = registry.get(target)
    try:
        fmt.written_dtype(rnn.spec, None)
    except Unsupported as exc:
        return str(exc)
    lost = fmt.losses(rnn)
    return lost[0].term if lost else None
