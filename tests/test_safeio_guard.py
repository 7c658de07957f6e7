"""The guard that stops libhdf5 looping for ever on a damaged file (`safeio.inputs.within`) never forks this
process: a fork copies its other threads (the FIFO writer, a digest, a framework's pools) stopped wherever they were,
locks held, and a deadlock in the child would read as a damaged file. The guard is an interpreter of its own."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

import rnnconv
from rnnconv.errors import BadInput
from rnnconv.formats.keras import reader

K3 = FIXTURES / "keras3"


def deflated(source: Path, target: Path) -> Path:
    """The .keras archive with every member compressed (its weights read from memory, not in place)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info.filename))
    return target


@pytest.fixture
def threads_running():
    """Another thread alive meanwhile, as a digest or the FIFO writer is while a source is read."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.fixture
def no_fork(monkeypatch):
    forks: list[str] = []

    def refuse(*args, **kwargs):
        forks.append(f"forked with {threading.active_count()} threads running")
        raise AssertionError(forks[-1])

    monkeypatch.setattr(os, "fork", refuse)
    if hasattr(os, "forkpty"):
        monkeypatch.setattr(os, "forkpty", refuse)
    yield forks
    assert not forks


@pytest.mark.parametrize("name", ["mixed.h5", "mixed.keras", "deflated.keras", "lstm.weights.h5"])
def test_keras_files_are_read_without_a_fork_while_threads_run(name, threads_running, no_fork, tmp_path):
    source = deflated(K3 / "mixed.keras", tmp_path / name) if name == "deflated.keras" else K3 / name
    assert threading.active_count() > 1
    result = rnnconv.convert(source, tmp_path / "out.safetensors", force=True)
    assert result.rnns


def test_a_structure_that_loops_is_still_stopped_in_time(threads_running, no_fork, monkeypatch, tmp_path):
    """The guard interpreter is killed at the limit, and the next read starts another."""
    monkeypatch.setattr(reader, "HDF5_TIMEOUT", 3.0)
    looping = tmp_path / "loop.h5"
    shutil.copy(ROOT / "tests" / "fuzz" / "regressions" / "hdf5_attribute_loop.h5", looping)
    with pytest.raises(BadInput, match="did not finish reading the file's structure within 3 s"):
        rnnconv.inspect(looping)
    assert rnnconv.inspect(K3 / "mixed.h5").rnns  # a new guard for the next file


FORKS = """
import os, sys, threading
import rnnconv
real, seen = os.fork, []

def fork():
    seen.append(threading.active_count())
    return real()

os.fork = fork
rnnconv.convert(sys.argv[1], sys.argv[2] + "/a.safetensors")  # alone: the FIFO writer paused for the fork
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()
rnnconv.convert(sys.argv[1], sys.argv[2] + "/b.safetensors")  # another thread: the guard interpreter
stop.set()
print(seen)
"""


def test_every_fork_is_made_with_one_thread(tmp_path):
    """A fork is kept where it is safe (one thread: the command line's case, the cheap one); elsewhere none."""
    result = subprocess.run(
        [sys.executable, "-c", FORKS, str(K3 / "mixed.h5"), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[1]"], result.stdout


# The command line converting one file: the forks it makes, and whether it started the guard interpreter.
COMMAND_LINE = """
import os, sys, threading
from rnnconv.safeio import inputs
real, seen = os.fork, []

def fork():
    seen.append(threading.active_count())
    return real()

os.fork = fork
sys.argv = ["rnnconv", "convert", sys.argv[1], sys.argv[2], "-q"]
from rnnconv.cli.commands import main
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
print(seen, len(inputs._GUARD))
"""


@pytest.mark.parametrize("name", ["mixed.h5", "mixed.keras", "deflated.keras", "lstm.weights.h5"])
def test_the_command_line_walks_a_structure_in_a_fork(name, tmp_path):
    """One file on the command line: the structure is walked in a fork of the process, alone then (a .keras
    archive's CRC-32 is started after it), never in a guard interpreter started for it (0.3 s or more)."""
    source = deflated(K3 / "mixed.keras", tmp_path / name) if name == "deflated.keras" else K3 / name
    result = subprocess.run(
        [sys.executable, "-c", COMMAND_LINE, str(source), str(tmp_path / "out.safetensors")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[1]", "0"], result.stdout


def test_no_fork_where_a_framework_with_thread_pools_is_loaded(tmp_path):
    """JAX, PyTorch and TensorFlow run native threads Python does not count: the guard interpreter, not a fork."""
    script = FORKS.replace("import rnnconv\n", "import rnnconv, types\nsys.modules['jax'] = types.ModuleType('jax')\n")
    result = subprocess.run(
        [sys.executable, "-c", script, str(K3 / "mixed.h5"), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"], result.stdout


MANY_FILES_OPEN = """
import os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the next descriptor is numbered past 1023
from rnnconv.formats.keras.hdf5 import Structure, identity, walk_structure
from rnnconv.safeio.inputs import within
within(60, walk_structure, (Structure(sys.argv[1], identity(sys.argv[1])),), "stuck")
print("walked")
"""


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 2048, reason="needs 2048 open files")
def test_the_structure_walk_is_waited_for_in_a_process_with_many_files_open():
    """The walk's child is waited for through a descriptor for the process: numbered past 1023, select() would fail
    on it (ValueError, an internal error); poll takes any."""
    result = subprocess.run(
        [sys.executable, "-c", MANY_FILES_OPEN, str(K3 / "lstm.h5")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["walked"]
