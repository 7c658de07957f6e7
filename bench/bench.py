"""rnnconv's speed and memory next to `cp` and the frameworks' own ways, as ratios, against the targets.

    python bench/bench.py [--workdir /tmp/rnnconv-bench] [--repeat 3] [--skip-peers] [--small-only]

Makes (once) a 4-layer bidirectional LSTM, input 1024, hidden 2048, float32 (1.41 GB)
as a Keras legacy .h5, a .keras and a PyTorch .pt (bench/make_models.py), then times
fresh processes: each big conversion against `cp` of its source (source in the page
cache, after `sync`), the peers' own ways (Keras' load_model + _standardize_cudnn_weights,
torch.load + torch.cat, torch.save), a small conversion from every format, and
the import of the libraries every rnnconv command needs, with the one a format's files need
(h5py, onnx): the floor of a small conversion, each small task's ratio is to its floor; and an
empty interpreter (`python -c pass`). `--small-only` times just the small tasks and their floors.
Python writes its bytecode caches here as on any user's machine (PYTHONDONTWRITEBYTECODE is
dropped, and every command runs once before it is timed). It prints the best and median
wall time of --repeat runs, the peak resident memory, and each target with whether it is
met. A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
RNNCONV = [PYTHON, "-m", "rnnconv"]
LAYERS = "lstm0,lstm1,lstm2,lstm3"
FIXTURES = ROOT / "fixtures"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
SPEED_TARGET, SMALL_TARGET = 2.0, 0.3  # x cp for big conversions; seconds for a small one (--help: help_speed.py)
MEMORY_TARGET, MEMORY_SLACK_MB = 1.3, 150  # peak RSS <= 1.3 x the model + 150 MB

NAIVE_KERAS = """
import os, sys, numpy as np
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras, tensorflow as tf
from keras.src.backend.tensorflow.rnn import _standardize_cudnn_weights
model = keras.models.load_model(sys.argv[1], compile=False)
with open(sys.argv[2], "wb") as out:
    for layer in model.layers:
        for one in (layer.forward_layer, layer.backward_layer):
            kernel, recurrent, bias = one.cell.kernel, one.cell.recurrent_kernel, one.cell.bias
            weights = tf.split(kernel, 4, axis=1) + tf.split(recurrent, 4, axis=1)
            biases = tf.split(tf.concat((tf.zeros_like(bias), bias), 0), 8)
            params = _standardize_cudnn_weights(weights=weights, biases=biases, shape=tf.constant([-1]),
                                                transpose_weights=True)
            out.write(np.asarray(params).tobytes())
"""
NAIVE_TORCH = """
import sys, torch
state = torch.load(sys.argv[1], weights_only=True)
torch.cat([t.reshape(-1) for t in state.values()]).numpy().tofile(sys.argv[2])
"""
NAIVE_TORCH_SAVE = """
import sys, torch
torch.save(torch.load(sys.argv[1], weights_only=True, mmap=True), sys.argv[2])
"""
LIBRARIES = "import numpy, pydantic, typer, typer._adapters, rich.console"
FLOORS = {  # the library a format's files need beyond LIBRARIES -> its floor's label
    "": "the floor: python -c 'import numpy, pydantic, typer, rich'",
    "h5py": "the floor of a Keras file: ... and h5py",
    "onnx": "the floor of an ONNX file: ... and onnx",
}


@dataclass
class Row:
    label: str
    wall: float
    median: float
    peak_mb: float
    baseline: str | None = None  # the cp row this one is a ratio of
    target: str = ""  # what it must meet: "x cp", "small", "memory"


def run(command: list[str], warm: Path | None) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MB) and exit code of one fresh process."""
    if warm is not None:  # the source in the page cache, as for cp
        with open(warm, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass
    os.sync()
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    _, status, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def measure(
    command: list[str], repeat: int, warm: Path | None, outputs: list[Path], warmup: bool = True
) -> tuple[float, float, float]:
    """Best and median wall time and the largest peak RSS of `repeat` runs (after one untimed run)."""
    walls, peaks = [], []
    for attempt in range(repeat + 1 if warmup else repeat):
        for path in outputs:
            path.unlink(missing_ok=True)
        wall, peak, code = run(command, warm)
        if code != 0:
            raise SystemExit(f"failed ({code}): {' '.join(map(str, command))}")
        if attempt or not warmup:  # the first run writes bytecode caches and warms the libraries' files
            walls.append(wall)
            peaks.append(peak)
    for path in outputs:
        path.unlink(missing_ok=True)
    return min(walls), statistics.median(walls), max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rnnconv-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-peers", action="store_true", help="leave out the frameworks' own ways (minutes)")
    parser.add_argument("--small-only", action="store_true", help="only the small tasks and their floors")
    args = parser.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []

    def row(
        label: str, command: list[str], warm: Path | None, out: list[Path], baseline=None, target="", once=False
    ) -> None:
        wall, median, peak = measure(command, 1 if once else args.repeat, warm, out, warmup=not once)
        rows.append(Row(label, wall, median, peak, baseline, target))
        print(f"  {label}: {wall:.2f} s", flush=True)

    model_mb = None if args.small_only else big(work, args.skip_peers, row)
    small_tasks(work, row)
    report(rows, model_mb, args.repeat)


def big(work: Path, skip_peers: bool, row: Callable[..., None]) -> float:
    """The 1.41 GB model: each conversion against cp of its source, and the frameworks' own ways."""
    subprocess.run([PYTHON, str(ROOT / "bench" / "make_models.py"), str(work)], check=True, env=ENV)
    h5, archive, pt = work / "large.h5", work / "large.keras", work / "large.pt"
    blob, back, copy, naive = work / "out.bin", work / "back.pt", work / "copy.tmp", work / "naive.out"
    model_mb = pt.stat().st_size / 1e6
    print(f"model: 4-layer bidirectional LSTM, input 1024, hidden 2048, float32, {model_mb:.0f} MB")
    subprocess.run(RNNCONV + ["torch-to-cudnn", str(pt), "-o", str(blob), "-q", "--force"], check=True, env=ENV)
    blob_out = [blob, Path(f"{blob}.json")]
    for source in (h5, archive, pt, blob):
        row(f"cp {source.name}", ["cp", str(source), str(copy)], source, [copy])
    row("cat large.pt > copy (a user-space copy)", ["sh", "-c", f"cat '{pt}' > '{copy}'"], pt, [copy], "cp large.pt")
    keras_out = [work / "k.bin", work / "k.bin.json"]
    for source in (h5, archive):
        command = RNNCONV + ["keras-to-cudnn", str(source), "--layer", LAYERS, "-o", str(keras_out[0]), "-q"]
        row(f"keras-to-cudnn {source.name}", command, source, keras_out, f"cp {source.name}", "speed")
        row(f"keras-to-cudnn {source.name} --no-hash", [*command, "--no-hash"], source, keras_out, f"cp {source.name}")
    t2c = RNNCONV + ["torch-to-cudnn", str(pt), "-o", str(work / "t.bin"), "-q"]
    torch_out = [work / "t.bin", work / "t.bin.json"]
    row("torch-to-cudnn large.pt", t2c, pt, torch_out, "cp large.pt", "speed")
    row("torch-to-cudnn large.pt --no-hash", [*t2c, "--no-hash"], pt, torch_out, "cp large.pt")
    c2t = RNNCONV + ["cudnn-to-torch", str(blob), "-o", str(back), "-q"]
    row("cudnn-to-torch out.bin", c2t, blob, [back], "cp out.bin", "speed")
    row(
        "cudnn-to-cudnn out.bin -> .safetensors",
        RNNCONV + ["convert", str(blob), str(work / "s.safetensors"), "-q"],
        blob,
        [work / "s.safetensors"],
        "cp out.bin",
    )
    row(
        "verify out.bin (numpy, 8 steps, batch 2, source large.pt)",
        RNNCONV + ["verify", str(blob), "--backend", "numpy", "--seq-len", "8", "--batch", "2", "-q"],
        blob,
        [],
    )
    if not skip_peers:
        peers = (
            ("Keras load_model + _standardize_cudnn_weights", NAIVE_KERAS, h5),
            ("torch.load + torch.cat", NAIVE_TORCH, pt),
            ("torch.save of the loaded state_dict", NAIVE_TORCH_SAVE, pt),
        )
        for label, code, source in peers:
            command = [PYTHON, "-c", code, str(source), str(naive)]
            row(f"peer: {label}", command, source, [naive], f"cp {source.name}", once=True)
    for path in [blob, *blob_out]:
        path.unlink(missing_ok=True)
    return model_mb


def small_tasks(work: Path, row: Callable[..., None]) -> None:
    """A small conversion from every format, each against the import floor of what it must import (the libraries
    every command needs, and h5py for a Keras file, onnx for an ONNX one). `--help` is bench/help_speed.py's."""
    row("python -c pass (an empty interpreter)", [PYTHON, "-c", "pass"], None, [])
    for library, label in FLOORS.items():
        row(label, [PYTHON, "-c", LIBRARIES + (f", {library}" if library else "")], None, [])
    small = work / "small.bin"
    smalls = {  # name: (file, the library its format needs)
        "keras3/lstm.h5": (FIXTURES / "keras3" / "lstm.h5", "h5py"),
        "keras3/lstm.keras": (FIXTURES / "keras3" / "lstm.keras", "h5py"),
        "torch/rnn_tanh.pt": (FIXTURES / "torch" / "rnn_tanh.pt", ""),
        "onnx/gru3_bi_torchscript.onnx": (FIXTURES / "onnx" / "gru3_bi_torchscript.onnx", "onnx"),
        "tf1/rnn_tanh.ckpt": (FIXTURES / "tf1" / "rnn_tanh.ckpt", ""),
    }
    for name, (source, library) in smalls.items():
        row(
            f"small: {name} -> .bin",
            RNNCONV + ["convert", str(source), str(small), "-q"],
            None,
            [small, Path(f"{small}.json")],
            FLOORS[library],
            "small",
        )
    subprocess.run(RNNCONV + ["convert", str(smalls["torch/rnn_tanh.pt"][0]), str(small), "-q"], check=True, env=ENV)
    row(
        "small: cuDNN .bin -> .pt",
        RNNCONV + ["convert", str(small), str(work / "small.pt"), "-q"],
        None,
        [work / "small.pt"],
        FLOORS[""],
        "small",
    )
    for path in [small, Path(f"{small}.json")]:
        path.unlink(missing_ok=True)


def report(rows: list[Row], model_mb: float | None, repeat: int) -> None:
    walls = {r.label: r.wall for r in rows}
    memory_limit = MEMORY_TARGET * (model_mb or 0) + MEMORY_SLACK_MB
    print(f"\n{'task':58} {'best s':>7} {'median':>7} {'ratio':>6} {'GB/s':>6} {'peak MB':>8} {'/model':>7}  target")
    for r in rows:
        ratio = r.wall / walls[r.baseline] if r.baseline else None
        big = model_mb and (r.label.startswith("cp ") or (r.baseline or "").startswith("cp ") or r.target == "speed")
        rate = f"{model_mb / 1000 / r.wall:.2f}" if big else ""
        per_model = f"{r.peak_mb / model_mb:.2f}" if big else ""
        verdicts = []
        if r.target == "speed" and ratio is not None:
            verdicts.append(f"<= {SPEED_TARGET:g} x cp: {'met' if ratio <= SPEED_TARGET else 'MISSED'}")
            verdicts.append(f"RSS <= {memory_limit:.0f} MB: {'met' if r.peak_mb <= memory_limit else 'MISSED'}")
        if r.target == "small":
            verdicts.append(f"<= {SMALL_TARGET:g} s: {'met' if r.wall <= SMALL_TARGET else 'MISSED'}")
            verdicts.append(f"{r.wall - walls[r.baseline or '']:+.3f} s over its floor")
        print(
            f"{r.label:58} {r.wall:7.2f} {r.median:7.2f} {'' if ratio is None else f'{ratio:.2f}':>6} {rate:>6} "
            f"{r.peak_mb:8.0f} {per_model:>7}  {'; '.join(verdicts)}"
        )
    print(
        f"\n(best and median of {repeat} runs after an untimed one, peers run once; ratio and GB/s from the best: "
        f"a big conversion's to cp of its source, a small task's to the floor; "
        f"peak = largest resident set, counting the source pages a process maps; {os.cpu_count()} cores; "
        f"python {sys.version.split()[0]})"
    )


if __name__ == "__main__":
    main()
