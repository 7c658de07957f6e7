"""rnnconv's speed and memory as ratios to `cp`, one row for each job of the speed issue's table, in one run.

    python bench/bench.py [--workdir /tmp/rnnconv-bench-0.6gb] [--repeat 5] [--small-only] [--peers]

Makes (once, with the real frameworks: bench/make_models.py) a 2-layer bidirectional LSTM, input 1024, hidden
2048, float32 (0.60 GB) as a PyTorch `.pt`, a Keras legacy `.h5` and a `.keras`, and a 1-layer LSTM as a `.pt` and
an `.h5`. Each job runs in a fresh process, paired with its baseline (`cp` of its source for a big conversion, an
empty interpreter for a small job): the two run one after the other, --repeat times after an untimed pair, their
order swapped every pair, the source read into the page cache and every output removed (and `sync`) before each
run of either, so both see the same cache. A row prints the job's best and median wall time, its baseline's, the
ratio of the bests and the median of the pairs' ratios, its CPU time, the peak resident memory of the job's
process, and its goal, met or missed (a missed one against its floor row). The floors follow: an empty
interpreter, `import numpy`, numpy and the typed contracts (pydantic) that every conversion imports (and h5py, that a
Keras file's needs), the same small conversion through the library (no command line), the contracts' start-up then
`cp` in the kernel (the floor of a conversion that copies every byte unchanged), then the kernel copy with the
tensors shifted to new places (the floor of a conversion to a weight space or a runtime's file), and a bare h5py
read of the `.h5`'s datasets (then with numpy's transpose of each matrix), against `cp` of the same file.
`--peers` adds the frameworks' own ways (minutes). Python writes its bytecode caches as on a user's machine
(PYTHONDONTWRITEBYTECODE is dropped). A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
RNNCONV = [PYTHON, "-m", "rnnconv"]
LAYERS = "lstm0,lstm1"
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
EMPTY = [PYTHON, "-c", "pass"]
# What every conversion imports by design: the canonical form's numpy and the typed contracts' pydantic.
DESIGN = "import numpy, rnnconv.core.contracts"
# The floors a missed goal is shown against: what any conversion of this design takes before its own work.
SHIFTED_FLOOR = "the floor: numpy and the contracts, then cp to new places"
TRANSPOSE_FLOOR = "... and numpy's transpose of its matrices"
START_FLOOR = "the floor: import numpy and the contracts (pydantic)"
H5_START_FLOOR = "... and h5py"
LIBRARY = "import sys, rnnconv; rnnconv.convert(sys.argv[1], sys.argv[2], to='cudnn', force=True)"

# A weight space puts each tensor where cuDNN wants it, not where the source has it: the bytes from the source's first
# tensor on, copied in the kernel to the start of the output (the shift, not a multiple of a page, is what costs).
SHIFTED_COPY = """
import os, sys
source, output, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
src, dst = os.open(source, os.O_RDONLY), os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
left, at = os.fstat(src).st_size - start, start
while left:
    n = os.copy_file_range(src, dst, left, at, at - start)
    left, at = left - n, at + n
"""

BARE_H5PY = """
import sys, h5py, numpy as np
def read(group):
    for item in group.values():
        if isinstance(item, h5py.Group):
            read(item)
        else:
            values = item[...]
            if sys.argv[2:] and values.ndim == 2:  # and each matrix transposed, as a Keras kernel must be
                np.ascontiguousarray(values.T)
with h5py.File(sys.argv[1], "r") as f:
    read(f)
"""
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


@dataclass
class Job:
    label: str
    command: list[str]
    outputs: list[Path] = field(default_factory=list)
    warm: Path | None = None  # a source read into the page cache before each run
    prepare: Callable[[], None] | None = None  # run (untimed) before each run: an output to replace


@dataclass
class Row:
    label: str
    best: float
    median: float
    baseline: str
    baseline_best: float
    baseline_median: float
    ratio_median: float
    cpu: float  # the job's best CPU seconds: what a loaded machine inflates least
    peak_mb: float
    goal: str  # "x 2" (ratio to the baseline), "s 0.3" (seconds), "" (none)
    floor: str = ""  # the label of the row that is this job's floor, where a goal is missed


def run(job: Job) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one fresh process, after its outputs are
    removed and its source read."""
    for path in job.outputs:
        if path.is_dir():
            shutil.rmtree(path)
        path.unlink(missing_ok=True)
    if job.prepare is not None:
        job.prepare()
    if job.warm is not None:
        with open(job.warm, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass
    os.sync()
    start = time.perf_counter()
    process = subprocess.Popen(job.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        assert process.stderr is not None
        raise SystemExit(f"failed ({code}): {' '.join(map(str, job.command))}\n{process.stderr.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def paired(job: Job, baseline: Job, repeat: int, goal: str, floor: str = "") -> Row:
    """`job` and `baseline` in interleaved pairs (order swapped every pair), after an untimed pair."""
    walls: list[float] = []
    bases: list[float] = []
    cpus: list[float] = []
    peaks: list[float] = []
    for attempt in range(repeat + 1):
        order = (baseline, job) if attempt % 2 else (job, baseline)
        timed = {id(one): run(one) for one in order}
        if attempt:  # the first writes bytecode caches and warms the libraries' files
            walls.append(timed[id(job)][0])
            cpus.append(timed[id(job)][1])
            peaks.append(timed[id(job)][2])
            bases.append(timed[id(baseline)][0])
    for path in job.outputs + baseline.outputs:
        path.unlink(missing_ok=True)
    ratios = [w / b for w, b in zip(walls, bases)]
    row = Row(
        job.label,
        min(walls),
        statistics.median(walls),
        baseline.label,
        min(bases),
        statistics.median(bases),
        statistics.median(ratios),
        min(cpus),
        max(peaks),
        goal,
        floor,
    )
    print(f"  {job.label}: {row.best:.3f} s, {row.best / row.baseline_best:.2f} x {baseline.label}", flush=True)
    return row


def first_tensor(pt: Path) -> int:
    """Where the first tensor's bytes begin in a PyTorch zip checkpoint."""
    with zipfile.ZipFile(pt) as archive:
        first = min((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.header_offset)
    with open(pt, "rb") as f:
        f.seek(first.header_offset)
        local = f.read(30)  # the local header: its name and extra field come before the bytes
    return first.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")


def cp(source: Path, work: Path) -> Job:
    copy = work / "copy.tmp"
    return Job(f"cp {source.name}", ["cp", str(source), str(copy)], [copy], source)


def big(work: Path, repeat: int) -> list[Row]:
    """The big conversions and the runtime writers, each against cp of its source; replacing an output apart."""
    pt, h5, archive = work / "large.pt", work / "large.h5", work / "large.keras"
    blob, kept = work / "t.bin", work / "kept.bin"
    blob_out = [blob, Path(f"{blob}.json")]
    subprocess.run([*RNNCONV, "torch-to-cudnn", str(pt), "-o", str(kept), "-q", "--force"], check=True, env=ENV)

    def existing() -> None:  # an output to replace, as large as the one written
        shutil.copyfile(kept, blob)
        shutil.copyfile(f"{kept}.json", f"{blob}.json")

    t2c = [*RNNCONV, "torch-to-cudnn", str(pt), "-o", str(blob), "-q"]
    k2c = [*RNNCONV, "keras-to-cudnn", str(h5), "--layer", LAYERS, "-o", str(work / "k.bin"), "-q"]
    xml, tflite = work / "model.xml", work / "model.tflite"
    keras_out = [work / "k.bin", work / "k.bin.json"]
    rows = [
        paired(Job(f"torch-to-cudnn {pt.name}", t2c, blob_out, pt), cp(pt, work), repeat, "x 2", SHIFTED_FLOOR),
        paired(Job(f"torch-to-cudnn {pt.name} --no-hash", [*t2c, "--no-hash"], blob_out, pt), cp(pt, work), repeat, ""),
        paired(
            Job(f"torch-to-cudnn {pt.name} --force over an existing output", [*t2c, "--force"], blob_out, pt, existing),
            cp(pt, work),
            repeat,
            "",
        ),
        paired(
            Job(f"keras-to-cudnn {h5.name}", k2c, [work / "k.bin", work / "k.bin.json"], h5),
            cp(h5, work),
            repeat,
            "x 2",
            TRANSPOSE_FLOOR,
        ),
        paired(
            Job(f"keras-to-cudnn {archive.name}", [*k2c[:4], str(archive), *k2c[5:]], keras_out, archive),
            cp(archive, work),
            repeat,
            "",
        ),
        paired(
            Job(f"the floor: a bare h5py read of {h5.name}", [PYTHON, "-c", BARE_H5PY, str(h5)], [], h5),
            cp(h5, work),
            repeat,
            "",
        ),
        paired(
            Job(TRANSPOSE_FLOOR, [PYTHON, "-c", BARE_H5PY, str(h5), "T"], [], h5),
            cp(h5, work),
            repeat,
            "",
        ),
        paired(
            Job(
                "the floor: numpy and the contracts, then cp in the kernel",
                [PYTHON, "-c", f"{DESIGN}; import shutil, sys; shutil.copyfile(*sys.argv[1:])", str(pt), str(blob)],
                blob_out,
                pt,
            ),
            cp(pt, work),
            repeat,
            "",
        ),
        paired(
            Job(
                SHIFTED_FLOOR,
                [PYTHON, "-c", f"{DESIGN}; {SHIFTED_COPY}", str(pt), str(blob), str(first_tensor(pt))],
                blob_out,
                pt,
            ),
            cp(pt, work),
            repeat,
            "",
        ),
        paired(
            Job(
                f"convert {pt.name} model.xml (OpenVINO)",
                [*RNNCONV, "convert", str(pt), str(xml), "-q"],
                [xml, xml.with_suffix(".bin")],
                pt,
            ),
            cp(pt, work),
            repeat,
            "x 2",
            SHIFTED_FLOOR,
        ),
        paired(
            Job(
                f"convert {pt.name} model.tflite (TFLite)",
                [*RNNCONV, "convert", str(pt), str(tflite), "-q"],
                [tflite],
                pt,
            ),
            cp(pt, work),
            repeat,
            "x 2",
            SHIFTED_FLOOR,
        ),
    ]
    for path in [kept, Path(f"{kept}.json")]:
        path.unlink(missing_ok=True)
    return rows


def small(work: Path, repeat: int) -> list[Row]:
    """The small conversions and --help, against an empty interpreter; the floor of `import numpy` beside them."""
    out = work / "small.bin"
    outputs = [out, Path(f"{out}.json")]
    empty = Job("python -c pass", EMPTY)
    return [
        paired(
            Job("small: small.pt -> .bin", [*RNNCONV, "convert", str(work / "small.pt"), str(out), "-q"], outputs),
            empty,
            repeat,
            "s 0.3",
            START_FLOOR,
        ),
        paired(
            Job("small: small.h5 -> .bin", [*RNNCONV, "convert", str(work / "small.h5"), str(out), "-q"], outputs),
            empty,
            repeat,
            "s 0.3",
            H5_START_FLOOR,
        ),
        paired(
            Job(
                "small: small.pt -> .bin, its result printed",
                [*RNNCONV, "convert", str(work / "small.pt"), str(out)],
                outputs,
            ),
            empty,
            repeat,
            "s 0.3",
            START_FLOOR,
        ),
        paired(Job("rnnconv --help", [*RNNCONV, "--help"]), empty, repeat, "s 0.15"),
        paired(Job("the floor: python -c 'import numpy'", [PYTHON, "-c", "import numpy"]), empty, repeat, ""),
        paired(Job(START_FLOOR, [PYTHON, "-c", DESIGN]), empty, repeat, ""),
        paired(Job(H5_START_FLOOR, [PYTHON, "-c", f"{DESIGN}, h5py"]), empty, repeat, ""),
        paired(
            Job(
                "small.pt -> .bin by rnnconv.convert, no command line",
                [PYTHON, "-c", LIBRARY, str(work / "small.pt"), str(out)],
                outputs,
            ),
            empty,
            repeat,
            "",
        ),
    ]


def peers(work: Path, repeat: int) -> list[Row]:
    """The frameworks' own ways, once each (minutes)."""
    naive = work / "naive.out"
    ways = (
        ("Keras load_model + _standardize_cudnn_weights", NAIVE_KERAS, work / "large.h5"),
        ("torch.load + torch.cat", NAIVE_TORCH, work / "large.pt"),
    )
    return [
        paired(
            Job(f"peer: {label}", [PYTHON, "-c", code, str(source), str(naive)], [naive], source),
            cp(source, work),
            1,
            "",
        )
        for label, code, source in ways
    ]


def report(rows: list[Row], repeat: int) -> None:
    print(
        f"\n{'job':58} {'best s':>7} {'median':>7} {'base s':>7} {'ratio':>6} {'r med':>6} {'cpu s':>6} {'peak MB':>8}"
        "  goal"
    )
    for r in rows:
        ratio = r.best / r.baseline_best
        verdict = ""
        if r.goal.startswith("x "):
            limit = float(r.goal[2:])
            verdict = f"<= {limit:g} x {r.baseline.split()[0]}: {'met' if ratio <= limit else 'MISSED'}"
        elif r.goal.startswith("s "):
            limit = float(r.goal[2:])
            verdict = f"<= {limit:g} s: {'met' if r.best <= limit else 'MISSED'}"
        floor = next((f for f in rows if f.label == r.floor), None)
        if floor is not None and "MISSED" in verdict:
            above = r.best - floor.best
            limit = floor.best / floor.baseline_best if r.goal.startswith("x ") else floor.best
            unit = " x" if r.goal.startswith("x ") else " s"
            verdict += f" (its floor {limit:.2f}{unit}; {abs(above):.3f} s {'above' if above >= 0 else 'below'} it)"
        print(
            f"{r.label:58} {r.best:7.3f} {r.median:7.3f} {r.baseline_best:7.3f} {ratio:6.2f} {r.ratio_median:6.2f} "
            f"{r.cpu:6.3f} {r.peak_mb:8.0f}  {verdict}"
        )
    print(
        f"\n(each job paired with its baseline, base s: cp of its source for a big job, `python -c pass` for a "
        f"small one; best and median of {repeat} interleaved pairs after an untimed one; ratio = best / baseline's "
        f"best, r med = median of the pairs' ratios; cpu s = the job's best user + system seconds, all its threads "
        f"and the processes it waited for (what a loaded machine inflates least); peak = largest resident set of "
        f"the job's process, counting the source pages it maps; {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f} at the end; python {sys.version.split()[0]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rnnconv-bench-0.6gb"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small-only", action="store_true", help="only the small jobs and their floors")
    parser.add_argument("--peers", action="store_true", help="add the frameworks' own ways (minutes)")
    args = parser.parse_args()
    work = args.workdir
    subprocess.run([PYTHON, str(ROOT / "bench" / "make_models.py"), str(work)], check=True, env=ENV)
    print(
        f"model: 2-layer bidirectional LSTM, input 1024, hidden 2048, float32, "
        f"{(work / 'large.pt').stat().st_size / 1e9:.2f} GB"
    )
    rows = small(work, args.repeat)
    if not args.small_only:
        rows = big(work, args.repeat) + rows
        if args.peers:
            rows += peers(work, args.repeat)
    report(rows, args.repeat)


if __name__ == "__main__":
    main()
