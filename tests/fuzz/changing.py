"""The `changing_source` family: sources truncated, extended, rewritten, replaced or removed while rnnconv reads them.

Its seeds are one model large enough for a conversion to take a while (a 2-layer bidirectional LSTM, input 128,
hidden 320: 14.5 MB of float32) in every format whose values rnnconv reads in place: a PyTorch zip checkpoint and
a `.safetensors` state_dict (torch), a legacy `.h5` and a `.keras` (Keras 3), a TF1 checkpoint (TensorFlow's Saver),
an ONNX model with external data (onnx), a cuDNN blob with its sidecar, rnnconv's `.safetensors` and a raw blob
described by flags. Each case copies one, starts a command reading it in the worker, and changes one of its files
after a random delay within the time that command takes (measured on the unchanged seed), while it runs. (A change
that comes before rnnconv's first look leaves a file that is merely broken or different: any clean outcome is right.)

Besides the harness' own checks (no signal, traceback, internal error, temporary, output of a failed command),
an output of a command that succeeded must be the conversion of the file before the change or of the file after
it: anything else was read half from each, and counts as a partial output.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

INPUT, HIDDEN, LAYERS = 128, 320, 2
MUTATIONS = ("truncate", "truncate_to_zero", "extend", "rewrite", "replace", "remove", "fifo")
WEIGHTS = (30, 8, 15, 20, 15, 7, 5)
# Calibration measures how long an unchanged seed takes, so it waits as long as a loaded machine needs (not a hang).
CALIBRATION_LIMIT = 600.0

MAKE = f"""
import os, sys
from pathlib import Path
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out, fixtures = Path(sys.argv[1]), Path(sys.argv[2])
INPUT, HIDDEN, LAYERS = {INPUT}, {HIDDEN}, {LAYERS}
import numpy as np
import torch
torch.manual_seed(0)
torch.save(torch.nn.LSTM(INPUT, HIDDEN, LAYERS, bidirectional=True).state_dict(), out / "big.pt")
import keras
layers = [keras.Input((None, INPUT))]
for k in range(LAYERS):
    layers.append(keras.layers.Bidirectional(keras.layers.LSTM(HIDDEN, return_sequences=True), name=f"lstm{{k}}"))
model = keras.Sequential(layers)
rng = np.random.default_rng(0)
for layer in model.layers:
    layer.set_weights([rng.standard_normal(w.shape, dtype=np.float32) * 0.05 for w in layer.get_weights()])
model.save(out / "big.h5")
model.save(out / "big.keras")
sys.path.insert(0, str(fixtures))
import make_tf1_fixtures as tf1
tf1.OUT = out
tf1.save("big_tf1.ckpt", tf1.cudnn_layer("cudnn_lstm", "cudnn_compatible_lstm_cell", INPUT, HIDDEN, LAYERS, False))
"""


@dataclass
class Seed:
    """A source in one format: its files (the first the one named), how commands name it, what they do."""

    kind: str
    files: list[str]
    path: str  # the source as commands name it ({dir}: the case's folder)
    options: list[str]  # what a conversion of it needs (--layer, a raw blob's spec)
    commands: list[list[str]]  # {src}: the source, {opts}: its options, {out}: an output in the case's folder
    victims: list[tuple[str, float]] = field(default_factory=list)  # which file a change hits, how often (the first)
    reference: dict[str, tuple[float, str | None]] = field(default_factory=dict)  # command -> seconds, digest
    home: Path = Path()  # where its files are made


STACKED = ["--layer", "lstm0,lstm1"]  # the Keras model's two Bidirectional layers, as one 2-layer cuDNN RNN


def prepare(work: Path, worker) -> list[Seed]:
    """Make the seeds in `work`, then run each command once on each (in `worker`) for its time and output."""
    import onnx

    import rnnconv

    work.mkdir(parents=True, exist_ok=True)
    fixtures = Path(__file__).resolve().parents[2] / "fixtures"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, "-c", MAKE, str(work), str(fixtures)], check=True, env=env, timeout=900)
    big = work / "big.pt"
    rnnconv.convert(big, work / "big.bin")
    rnnconv.convert(big, work / "big.safetensors")
    rnnconv.convert(big, work / "big_state.safetensors", to="torch")
    shutil.copy(work / "big.bin", work / "big.raw")
    rnnconv.convert(big, work / "inline.onnx")
    model = onnx.load(work / "inline.onnx")
    onnx.save_model(
        model, work / "big_ext.onnx", save_as_external_data=True, location="big_ext.onnx.data", size_threshold=0
    )
    raw = ["--mode", "lstm", "--input-size", str(INPUT), "--hidden-size", str(HIDDEN)]
    raw += ["--num-layers", str(LAYERS), "--bidirectional"]
    to_bin, to_pt = ["convert", "{src}", "{out}.bin", "{opts}"], ["convert", "{src}", "{out}.pt", "{opts}"]
    inspect = ["inspect", "{src}"]
    # --no-diagnose: a blob changed before the first look mismatches, and trying 68 mistakes on it takes seconds
    verify_against = ["verify", "{dir}/big.bin", "--against", "{src}", "--backend", "numpy", "--seq-len", "4"]
    verify_against.append("--no-diagnose")
    verify = ["verify", "{src}", "--backend", "numpy", "--seq-len", "4", "--no-diagnose"]
    data, index = "big_tf1.ckpt.data-00000-of-00001", "big_tf1.ckpt.index"
    seeds = [
        Seed("pt", ["big.pt", "big.bin", "big.bin.json"], "big.pt", [], [to_bin, to_pt, inspect, verify_against]),
        Seed("torch_safetensors", ["big_state.safetensors"], "big_state.safetensors", [], [to_bin, to_pt]),
        Seed("h5", ["big.h5"], "big.h5", STACKED, [to_bin, to_pt, inspect]),
        Seed("keras", ["big.keras"], "big.keras", STACKED, [to_bin, to_pt, inspect]),
        Seed("tf1", [data, index], "big_tf1.ckpt", [], [to_bin, to_pt, inspect], [(data, 0.8), (index, 0.2)]),
        Seed(
            "onnx_external",
            ["big_ext.onnx.data", "big_ext.onnx"],
            "big_ext.onnx",
            ["--layer", "layer1"],  # rnnconv writes one node per layer
            [to_bin, to_pt],
            [("big_ext.onnx.data", 0.8), ("big_ext.onnx", 0.2)],
        ),
        Seed(
            "bin",
            ["big.bin", "big.bin.json", "big.pt"],
            "big.bin",
            [],
            [to_pt, verify],
            [("big.bin", 0.9), ("big.bin.json", 0.1)],
        ),
        Seed("rnnconv_safetensors", ["big.safetensors"], "big.safetensors", [], [to_pt, to_bin]),
        Seed("raw", ["big.raw"], "big.raw", raw, [to_pt, to_bin]),
    ]
    calibration = work / "calibration"
    for seed in seeds:
        seed.home = work
        for command in seed.commands:
            for _ in range(2):  # the second run, its libraries imported and its files cached, is the one timed
                shutil.rmtree(calibration, ignore_errors=True)
                calibration.mkdir()
                copy_files(seed, calibration)
                args = expand(command, seed, calibration, calibration)
                start = time.monotonic()
                result = worker.run(args, CALIBRATION_LIMIT)
                seconds = time.monotonic() - start
                if not isinstance(result, dict) or result["code"] not in (0, 1):
                    raise RuntimeError(f"the seed {seed.kind} does not convert: {' '.join(args)}: {result}")
            seed.reference[key(command)] = (seconds, output_digest(calibration, command))
    shutil.rmtree(calibration, ignore_errors=True)
    return seeds


def key(command: list[str]) -> str:
    return " ".join(command)


def copy_files(seed: Seed, folder: Path) -> None:
    for name in seed.files:
        shutil.copy(seed.home / name, folder / name)


def expand(command: list[str], seed: Seed, folder: Path, outputs: Path) -> list[str]:
    """A command's arguments for a case in `folder`, its output in `outputs` (always named `out`: a PyTorch
    checkpoint holds its own name)."""
    args: list[str] = []
    for part in command:
        if part == "{opts}":
            args += seed.options
        else:
            args.append(part.replace("{src}", str(folder / seed.path)).replace("{out}", str(outputs / "out")))
    return [a.replace("{dir}", str(folder)) for a in args]


def output_digest(outputs: Path, command: list[str]) -> str | None:
    """What a conversion wrote, as a digest of its data: a blob without its sidecar, a checkpoint without its
    `rnnconv.source` record (both name the source's path, which differs from case to case, and its digest); None for
    a command that writes nothing."""
    if command[0] != "convert":
        return None
    written = outputs / ("out" + Path(command[2]).suffix)
    if not written.exists():
        return "missing"
    digest = hashlib.blake2b(digest_size=16)
    if zipfile.is_zipfile(written):
        with zipfile.ZipFile(written) as archive:
            for name in sorted(n for n in archive.namelist() if not n.endswith("rnnconv.source")):
                digest.update(name.encode() + archive.read(name))
    else:
        digest.update(written.read_bytes())
    return digest.hexdigest()


def mutate(path: Path, how: str, rng: random.Random) -> None:
    """Change `path` the way a writer of it might, at this moment."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    if how == "truncate":
        os.truncate(path, rng.randrange(max(size, 1)))
    elif how == "truncate_to_zero":
        os.truncate(path, 0)
    elif how == "extend":
        with open(path, "ab") as f:
            f.write(rng.randbytes(rng.choice([1, 7, 4096, 1 << 20])))
    elif how == "rewrite":  # the same size, other bytes: a training job saving over the file in place
        with open(path, "r+b") as f:
            start = rng.randrange(max(size, 1))
            f.seek(start)
            f.write(rng.randbytes(min(size - start, rng.choice([1, 64, 1 << 16, size]))))
    elif how == "replace":  # a writer that saves to a new file and renames it over this one
        other = path.with_name(path.name + ".saving")
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 8)):
            if data:
                data[rng.randrange(len(data))] ^= 0xFF
        other.write_bytes(bytes(data[: rng.choice([len(data), len(data) // 2])]))
        os.replace(other, path)
    elif how == "remove":
        path.unlink()
    elif how == "fifo":  # something that is no regular file put at its name
        path.unlink()
        os.mkfifo(path)


def run_case(
    seeds: list[Seed], work: Path, rng: random.Random, index: int, worker_box: list, marker: Path, tally, keep
) -> None:
    """One case: a command on a copy of a seed, one of its files changed while the command runs."""
    from tests.fuzz.harness import TIME_LIMIT, Worker, snapshot

    seed = rng.choice(seeds)
    command = rng.choice(seed.commands)
    how = rng.choices(MUTATIONS, WEIGHTS)[0]
    victims = seed.victims or [(seed.files[0], 1.0)]
    victim = rng.choices([v for v, _ in victims], [w for _, w in victims])[0]
    seconds, expected = seed.reference[key(command)]
    delay = rng.uniform(0.1, 1.15) * seconds  # mostly after rnnconv's first look, before it is done
    name = f"{index:06d}_changing_source_{seed.kind}_{command[0]}_{how}"
    folder = work / "cases" / name
    folder.mkdir(parents=True)
    copy_files(seed, folder)
    before = snapshot(folder)
    args = expand(command, seed, folder, folder)
    worker = worker_box[0]
    tally.cases["changing_source"] += 1
    tally.commands["changing_source"] += 1
    label = f"{name}: {' '.join(command)} ({victim} {how} after {delay * 1000:.0f} ms of about {seconds * 1000:.0f})"
    assert worker.process.stdin is not None
    worker.process.stdin.write(json.dumps({"args": args}) + "\n")
    worker.process.stdin.flush()
    time.sleep(delay)
    mutate(folder / victim, how, rng)
    result = worker._read(max(TIME_LIMIT, 20 * seconds))  # a verify takes seconds; on a loaded machine, tens
    problems: list[str] = []
    if isinstance(result, str):  # hang, memory, or the worker died (a signal: SIGBUS from a mapped source)
        worker.kill()
        worker_box[0] = Worker(marker)
        problems.append({"hang": "hang", "memory": "memory"}.get(result, "internal_error"))
        tally.exits[result] += 1
        code, stderr = None, result
    else:
        code, stderr = result["code"], result["stderr"]
        tally.exits[str(code)] += 1
        if code == 4:
            problems.append("internal_error")
        elif code not in (0, 1, 2, 3):
            problems.append("bad_exit_code")
        if "Traceback" in stderr:
            problems.append("traceback")
        after = snapshot(folder)
        created = set(after) - set(before)
        if any(".part" in n or n.startswith(".") or "/." in n for n in created):
            problems.append("temp_left")
        outputs = {n for n in created if n.startswith("out")}
        if code not in (0, 1) and outputs:
            problems.append("partial_output")
        mixed = code == 0 and expected is not None and output_digest(folder, command) != expected
        if mixed and not _converts_to_the_same(worker_box, command, seed, folder):
            problems.append("partial_output")  # read half before the change, half after
        if "changed while it was being read" in stderr:
            tally.exits["2: said the source changed"] += 1
    for problem in problems:
        tally.fail("changing_source", problem, f"{label} -> exit {code}: {stderr[-300:]}")
    if problems and keep is not None:
        target = keep / name
        shutil.rmtree(target, ignore_errors=True)
        fifos = [p.name for p in folder.iterdir() if p.is_fifo()]  # copying one would wait for a writer
        shutil.copytree(folder, target, symlinks=True, ignore=lambda _, names: [n for n in names if n in fifos])
        (target / "failure.json").write_text(json.dumps({"case": label, "args": args, "result": result}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)


def _converts_to_the_same(worker_box: list, command: list[str], seed: Seed, folder: Path) -> bool:
    """Whether the changed files, converted now, give what the case wrote (the change came before rnnconv's first
    look, and it read the changed file whole). The case's outputs move aside to `first/` and the conversion writes
    where they were: an output records its source's path relative to itself, which another folder would change."""
    first = folder / "first"
    first.mkdir()
    for written in folder.glob("out*"):
        written.rename(first / written.name)
    result = worker_box[0].run(expand(command, seed, folder, folder))
    return (
        isinstance(result, dict)
        and result["code"] == 0
        and output_digest(folder, command) == output_digest(first, command)
    )
