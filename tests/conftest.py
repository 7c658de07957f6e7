from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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
        from rnnconv.cudnn.backend import probe

        status = probe()
        _NO_GPU.append("" if status.ok else status.reason)
    return _NO_GPU[0]


def run_cli(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m rnnconv` as a user would, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "rnnconv", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=300,
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
    from rnnconv.weightspace import regions

    parts = [blob.param(r.key).reshape(-1) for r in regions(blob.spec) if r.key.direction == direction]
    return np.concatenate(parts)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
