"""bench/gpu_day.sh as far as a machine without a GPU takes it: every step before the first cuDNN call runs,
and the script stops there with exit 3, one clear last line, and its output folder as the device tool wants it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from rnnconv.gpu.backend import probe

SCRIPT = ROOT / "bench" / "gpu_day.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="no bash")


def gpu_day(*args: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "wheels"), **env}
    environment["SITE"] = str(tmp_path / "site")
    (tmp_path / "wheels").mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=environment, timeout=300, cwd=tmp_path
    )


@pytest.mark.slow
def test_without_a_gpu_it_stops_at_the_battery_with_exit_3_and_leaves_its_output(tmp_path):
    if probe().ok:
        pytest.skip("this machine has a GPU: the script would run the whole battery")
    out = tmp_path / "out"
    result = gpu_day(str(out), "install", "doctor", "battery", tmp_path=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-2]  # the last line is the total time
    assert last.startswith("stopped at 'battery' (exit 3): the GPU battery needs cuDNN on a GPU:"), last
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files), files
    assert {"gpu_day.log", "steps.tsv", "doctor.json", "rest.tar.gz"} <= set(files)
    steps = {line.split("\t")[0]: line.split("\t")[2] for line in (out / "steps.tsv").read_text().splitlines()[1:]}
    assert steps == {"imports": "0", "doctor": "0", "doctor_text": "0", "battery_quick": "3"}
    assert "no wheels in" in (out / "gpu_day.log").read_text()


@pytest.mark.parametrize(
    "args,message",
    [((), "give the output folder"), (("OUT", "bench"), "no step 'bench'; the steps are: install pycuda")],
)
def test_bad_arguments_are_exit_2(args, message, tmp_path):
    result = gpu_day(*args, tmp_path=tmp_path, OUT="")
    assert result.returncode == 2 and message in result.stderr


def test_help_is_the_header(tmp_path):
    result = gpu_day("--help", tmp_path=tmp_path)
    assert result.returncode == 0 and 'bash bench/gpu_day.sh "$OUT"' in result.stdout
