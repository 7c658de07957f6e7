"""The worker interpreters of `convert_many(jobs=N)`: results in any order, a worker that dies costs only its task,
and nothing of the caller's script runs in them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

import rnnconv
from rnnconv import pool


def square_or_die(value: int) -> tuple[int, int]:
    if value < 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return value * value, os.getpid()


@pytest.fixture(autouse=True)
def workers_find_this_module(monkeypatch):
    """The workers import `square_or_die` by its module's name, as pytest imported it."""
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, str(ROOT), os.environ.get("PYTHONPATH")])))


def test_every_task_comes_back_once():
    results = {index: value for index, value, lost in pool.run(square_or_die, [(n,) for n in range(7)], jobs=3)}
    assert {index: value[0] for index, value in results.items()} == {n: n * n for n in range(7)}
    assert len({pid for _, pid in results.values()}) <= 3 and os.getpid() not in {pid for _, pid in results.values()}


def test_a_worker_that_dies_costs_only_its_task():
    outcome = {index: (value, lost) for index, value, lost in pool.run(square_or_die, [(2,), (-1,), (3,), (4,)], 2)}
    assert outcome[1] == (None, "the process converting it was killed by signal 9")
    assert [outcome[i][0][0] for i in (0, 2, 3)] == [4, 9, 16]


def test_a_script_without_a_main_guard_is_not_run_again_in_the_workers(tmp_path):
    marker = tmp_path / "runs"
    script = tmp_path / "batch.py"
    script.write_text(
        "import os, rnnconv\n"
        f"open({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        f"items = rnnconv.convert_many([{str(FIXTURES / 'keras3' / 'lstm.h5')!r}, "
        f"{str(FIXTURES / 'torch' / 'rnn_tanh.pt')!r}], {str(tmp_path / 'out')!r} + '/', jobs=2).root\n"
        "print([item.exit_code for item in items])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "[0, 0]", result.stderr
    assert len(marker.read_text().split()) == 1  # the script ran once: in its own process, never in a worker
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "lstm.bin",
        "lstm.bin.json",
        "rnn_tanh.bin",
        "rnn_tanh.bin.json",
    ]


def test_a_batch_stopped_by_sigterm_leaves_no_temporary(tmp_path):
    sources = [tmp_path / f"m{n}.h5" for n in range(6)]
    for source in sources:
        source.write_bytes((FIXTURES / "keras3" / "lstm.h5").read_bytes())
    out = tmp_path / "out"
    command = [sys.executable, "-m", "rnnconv", "convert", *map(str, sources), f"{out}/", "-j", "2", "--to", "torch"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120  # the folder is made once the command runs (its SIGTERM handler set) and the
    while not out.exists() and process.poll() is None and time.monotonic() < deadline:  # batch is planned: a loaded
        time.sleep(0.01)  # machine's slow start is not a kill before the handler; then it lands mid-batch or after
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode in (0, 143), stderr
    assert "Traceback" not in stderr
    left = [p.name for p in Path(out).iterdir()] if out.exists() else []
    assert not [name for name in left if name.startswith(".")], left  # no temporary folder left behind
    assert all(name.endswith(".pt") and (out / name).stat().st_size > 0 for name in left), left


def started_then_cut_short(marker: str) -> None:
    """What numpy's import does when a SIGTERM's exit unwinds through it: the SystemExit becomes another error."""
    Path(marker).touch()
    try:
        time.sleep(60)
    except SystemExit as exc:
        raise ImportError("cut short") from exc


def bare_worker() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", pool.WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_worker_stopped_mid_task_ends_quietly_whatever_its_unwinding_breaks(tmp_path):
    worker, marker = bare_worker(), tmp_path / "started"
    pool._send(worker.stdin, (started_then_cut_short, (str(marker),)))
    deadline = time.monotonic() + 120
    while not marker.exists() and worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 128 + signal.SIGTERM and not stderr, stderr.decode()


def test_a_worker_whose_caller_stopped_listening_ends_quietly():
    worker = bare_worker()
    pool._send(worker.stdin, (time.sleep, (1.0,)))
    worker.stdout.close()  # the caller, terminated, reads no result
    worker.stdin.close()
    assert worker.wait(timeout=60) == 0
    assert not worker.stderr.read(), "the worker said something"


def converted_and_what_it_imported(source: str, output: str) -> tuple[object, list[str]]:
    from rnnconv import api

    outcome = api._convert_one(source, output, {})
    return outcome, sorted(name for name in ("pydantic", "rnnconv.core.report_contracts") if name in sys.modules)


def test_a_worker_converts_without_importing_pydantic_and_the_caller_makes_the_batchs_entries(tmp_path):
    """A worker's start-up is what -j 2 pays per worker: it returns plain values and records, never the batch's
    pydantic entries, so it imports neither pydantic nor the report contracts."""
    source = FIXTURES / "torch" / "rnn_tanh.pt"
    worker = pool.Worker()
    try:
        outcome, imported = worker.call(converted_and_what_it_imported, (str(source), str(tmp_path / "a.bin")))
    finally:
        worker.end(stop=False)
    assert imported == []
    code, error, result = outcome
    assert (code, error) == (0, None) and result.outputs[0].endswith("a.bin")
    (tmp_path / "bad.pt").write_bytes(b"no checkpoint")
    items = rnnconv.convert_many([source, tmp_path / "bad.pt"], f"{tmp_path}/out/", jobs=2).root
    assert [item.exit_code for item in items] == [0, 2] and "bad.pt" in (items[1].error or "")
    assert items[0].result is not None and items[0].result.outputs[0] == str(tmp_path / "out" / "rnn_tanh.bin")
