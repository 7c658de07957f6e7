"""What the documentation claims, held against what rnnconv does: what each format needs (every framework and runtime
hidden), the tolerance table (the code's), and what a `.tflite` converted back holds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, ROOT, doc_code, run_cli

from rnnconv.core.compare import NARROWED, TOLERANCES

DOCS = ROOT / "docs"
HIDDEN = (
    *("onnx", "onnxruntime", "flatbuffers", "torch", "tensorflow", "keras", "tf_keras", "openvino"),
    *("mlx", "ncnn", "jax", "flax", "equinox", "ai_edge_litert", "paddle", "tensorstore"),
)
ONE_LSTM = FIXTURES / "ncnn" / "lstm.pt"  # one layer, one direction: every target holds it
# The install page's rows -> a file of that format (None: made from ONE_LSTM with this name), and what is written.
SOURCES = {
    "cuDNN blob": None,
    "Keras": FIXTURES / "keras3" / "lstm.h5",
    "PyTorch": FIXTURES / "torch" / "rnn_tanh.pt",
    "ONNX": FIXTURES / "onnx" / "rnn_relu_torchscript.onnx",
    "OpenVINO IR": FIXTURES / "openvino" / "rnn_tanh.xml",
    "TFLite / LiteRT": FIXTURES / "tflite" / "rnn_tanh.tflite",
    "Flax linen, flax.nnx": None,
    "Equinox": None,
    "MLX": FIXTURES / "mlx" / "lstm.safetensors",
    "ncnn": FIXTURES / "ncnn" / "lstm.param",
    "PaddlePaddle": FIXTURES / "paddle" / "lstm_bi2.pdparams",
    "TensorFlow.js": None,
    "TF1 checkpoints": FIXTURES / "tf1" / "rnn_tanh.ckpt",
    "Orbax checkpoints": FIXTURES / "orbax" / "gru",
}
WRITTEN = {
    "cuDNN blob": "made.bin",
    "Keras": "made.keras",
    "PyTorch": "made.pt",
    "ONNX": "made.onnx",
    "OpenVINO IR": "ir/made.xml",
    "TFLite / LiteRT": "made.tflite",
    "Flax linen, flax.nnx": "made.msgpack",
    "Equinox": "made.eqx",
    "MLX": "made.mlx.safetensors",
    "ncnn": "ncnn/made.param",
    "PaddlePaddle": "made.pdparams",
    "TensorFlow.js": "tfjs/model.json",
}


def needs_table() -> dict[str, tuple[str, str]]:
    """The install page's table: format -> (what reading needs, what writing needs)."""
    rows = re.findall(
        r"^\| \[([^\]]+)\]\([^)]+\)[^|]*\| ([^|]+) \| ([^|]+) \|", (DOCS / "install.md").read_text(), re.M
    )
    return {name: (reading.strip(), writing.strip()) for name, reading, writing in rows}


def package(cell: str) -> str | None:
    """The package a cell says is needed (`onnx (`onnx`)` -> onnx), or None for nothing."""
    return None if cell.startswith(("nothing", "read-only")) else cell.split(maxsplit=1)[0]


# Runs each command of argv[2] (JSON) as `python -m rnnconv ARGS` in a child forked from an interpreter that has
# imported only modules every conversion imports before it reads its file (the command line, the library and its
# rendering: no format's reader or writer, no framework), so each starts as a fresh one would, nothing a command
# before it imported, without the half second of those imports each time. A child leaves the loop by SystemExit,
# which the interpreter handles as it does for `python -m`; the parent prints each (exit code, stdout, stderr).
FORKING = """
import gc, json, os, runpy, signal, sys
from pathlib import Path
gc.disable()  # as rnnconv.__main__ does before these imports
import rnnconv.api, rnnconv.cli.commands, rnnconv.cli.render
streams, commands = sys.argv[1], json.loads(sys.argv[2])
results = []
for index, args in enumerate(commands):
    out, err = f"{streams}/{index}.out", f"{streams}/{index}.err"
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["-m", *args]
        signal.alarm(300)  # a command that hangs is killed, as fresh_cli's timeout would
        runpy.run_module("rnnconv", run_name="__main__", alter_sys=True)
        sys.exit(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    results.append((code, Path(out).read_text(), Path(err).read_text()))
print(json.dumps(results))
"""


def forked_clis(commands: list[list[str | Path]], env: dict, streams: Path) -> list[subprocess.CompletedProcess]:
    """Each command run as `python -m rnnconv ARGS` in a fresh interpreter with `env` added to the environment would
    be, but forked from one such interpreter (FORKING), its stdout and stderr kept in `streams`."""
    streams.mkdir()
    listed = json.dumps([[str(a) for a in args] for args in commands])
    forking = subprocess.run(
        [sys.executable, "-c", FORKING, str(streams), listed],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    assert forking.returncode == 0, forking.stderr
    return [
        subprocess.CompletedProcess(["rnnconv", *map(str, args)], code, out, err)
        for args, (code, out, err) in zip(commands, json.loads(forking.stdout), strict=True)
    ]


@pytest.mark.slow
def test_each_format_needs_what_the_install_page_says(tmp_path):
    """With every framework and runtime hidden, a format reads and writes where the page says "nothing", and where
    it names a package the command exits 3 naming it."""
    table = needs_table()
    assert set(table) == set(SOURCES), set(table) ^ set(SOURCES)
    shadow = tmp_path / "hidden"
    shadow.mkdir()
    for module in HIDDEN:
        (shadow / f"{module}.py").write_text(f'raise ImportError("No module named {module} (hidden)")\n')
    hidden = {"PYTHONPATH": f"{shadow}:{ROOT}"}
    (tmp_path / "ir").mkdir()
    (tmp_path / "ncnn").mkdir()
    (tmp_path / "tfjs").mkdir()
    made = {"cuDNN blob": "made.bin", "Flax linen, flax.nnx": "made.msgpack", "Equinox": "made.eqx"}
    made["TensorFlow.js"] = "model.json"
    for name, file in made.items():  # the sources no fixture holds, made with everything installed
        assert run_cli("convert", ONE_LSTM, tmp_path / f"source_{file}").returncode == 0
        SOURCES[name] = tmp_path / f"source_{file}"
    legacy = FIXTURES / "torch" / "lstm_legacy.pt"
    commands = {}  # (format, what is checked) -> the command that checks it
    for name, (reading, _) in table.items():
        source = legacy if "legacy" in reading else SOURCES[name]
        commands[name, "read"] = ["convert", source, tmp_path / f"read_{name.split()[0]}.bin"]
        if package(reading) is None or "legacy" in reading:
            commands[name, "ordinary"] = ["convert", SOURCES[name], tmp_path / f"ordinary_{name.split()[0]}.bin"]
        if name in WRITTEN:
            commands[name, "write"] = ["convert", SOURCES["cuDNN blob"], tmp_path / WRITTEN[name]]
    results = dict(zip(commands, forked_clis(list(commands.values()), hidden, tmp_path / "streams"), strict=True))
    for name, (reading, writing) in table.items():
        needed = package(reading)
        result = results[name, "read"]
        if needed is None or "legacy" in reading:
            ordinary = results[name, "ordinary"]
            assert ordinary.returncode == 0, (name, ordinary.stderr)
        if needed is not None:
            assert result.returncode == 3 and needed in result.stderr, (name, result.stderr)
        if name not in WRITTEN:
            assert writing == "read-only", name
            continue
        result = results[name, "write"]
        needed = package(writing)
        if needed is None:
            assert result.returncode == 0, (name, result.stderr)
        else:
            assert result.returncode == 3 and needed in result.stderr, (name, result.stderr)


def tolerance_rows() -> dict[str, list[tuple[float, float]]]:
    """The verify page's tolerance table: engine -> (atol, rtol) of each column, in order."""
    section = (DOCS / "verify.md").read_text().split("| where the blob runs |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in section.splitlines()[2:]:
        engine, *cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        pairs = [re.match(r"([0-9.e-]+) \+ ([0-9.e-]+)·", cell) for cell in cells]
        rows[engine.split()[0].rstrip(":")] = [(float(p.group(1)), float(p.group(2))) for p in pairs if p]
    return rows


def test_the_tolerance_table_is_the_codes():
    rows = tolerance_rows()
    assert set(rows) == {"numpy", "cudnn", "a"}, rows  # "a runtime: ..."
    for engine, key in (("numpy", "numpy"), ("cudnn", "cudnn"), ("a", "runtime")):
        assert rows[engine] == [TOLERANCES[(key, "float32")], NARROWED["float16"], NARROWED["bfloat16"]], engine
    assert "5e-5 + 1e-4" in (DOCS / "verify.md").read_text()  # cuDNN's float64
    assert TOLERANCES[("cudnn", "float64")] == (5e-5, 1e-4)


def test_a_tflite_converted_back_is_the_same_function_not_the_same_weights(tmp_path):
    """docs/formats/tflite.md says so of `convert model.tflite back.pt`; it is so: the matrices bit for bit, the
    biases summed into bias_hh (bias_ih zero), and the outputs those of the source."""
    line = next(line for line in doc_code("docs/formats/tflite.md", "bash").splitlines() if "back.pt" in line)
    assert "not the same weights" in line, line
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True)
    torch.save(lstm.state_dict(), tmp_path / "source.pt")
    for source, output in (("source.pt", "model.tflite"), ("model.tflite", "back.pt")):
        assert run_cli("convert", tmp_path / source, tmp_path / output).returncode == 0
    before, after = lstm.state_dict(), torch.load(tmp_path / "back.pt", weights_only=True)
    for key, value in before.items():
        if key.startswith("weight"):
            assert torch.equal(value, after[key]), key
        elif key.startswith("bias_ih"):
            recurrent = key.replace("bias_ih", "bias_hh")
            assert not torch.equal(value, after[key]) and not after[key].any(), key
            torch.testing.assert_close(after[recurrent], value + before[recurrent], rtol=0, atol=1e-6)
    back = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True)
    back.load_state_dict(after)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(6, 3, 5)).astype(np.float32))
    with torch.no_grad():
        torch.testing.assert_close(back(x)[0], lstm(x)[0], rtol=0, atol=1e-6)
