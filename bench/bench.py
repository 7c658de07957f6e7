"""rnnconv's speed and memory as ratios to `cp`, one row for each job of the speed issue's table, in one run.

    python bench/bench.py [--workdir /tmp/rnnconv-bench-0.6gb] [--repeat 5] [--rows big,small,...] [--only TEXT]
                          [--quick] [--large] [--peers] [--small-only]

Makes (once, with the real frameworks: bench/make_models.py) a 2-layer bidirectional LSTM, input 1024, hidden 2048,
float32 (0.60 GB) as a PyTorch `.pt`, a Keras legacy `.h5` and a `.keras`, a 1-layer LSTM as a `.pt` and an `.h5`,
100 copies of the small `.pt`, and the big LSTM a tenth the size (and, with --large, ten times: 6 GB, deleted after
its row). Each job runs in a fresh process, paired with its baseline (`cp` of its source for a big conversion, an
empty interpreter for a small job, one small conversion for the 100 files): the two run one after the other,
--repeat times after an untimed pair, their order swapped every pair, the source read into the page cache and every
output removed (and `sync`) before each run of either, so both see the same cache. A row prints the job's best and
median wall time, its baseline's, the ratio of the bests and the median of the pairs' ratios, its CPU time, the peak
resident memory of the job's process, and its goal, met or missed (a missed one against its floor row); a
conversion's row also holds its peak memory to 1.3 x the model + 150 MB. The floors follow: an empty interpreter,
`import numpy`, numpy and the typed contracts (records; pydantic only where a document is validated from outside)
that every conversion imports (and h5py, that a Keras file's needs), numpy and typer (the libraries' own floor of a
conversion on this command line), the same small conversion through the library (no command line), the contracts'
start-up then `cp` in the kernel (the floor of a conversion that copies every byte unchanged), then the copy with
the tensors shifted to new places (the floor of a conversion to a weight space or a runtime's file), in the kernel
and, as rnnconv copies a shifted byte, through one buffer read and written once, and a bare h5py read of the `.h5`'s
datasets (then with numpy's transpose of each matrix), against `cp` of the same file.

Groups of rows (--rows; all but peers by default): big (the 0.60 GB conversions and their floors), growth (0.06 GB,
and 6 GB with --large: how the ratio and the memory grow), batch (100 small files, -j 1 and -j 2), small (small
conversions, --help and their floors), transpose (the Keras kernels transposed in memory, bench/transpose_speed.py:
numpy's way, rnnconv's tiles on one and two threads, transposed into memory then written, and straight into a map of
each kernel's place in the output as a Keras conversion writes them now, against a plain copy of the same bytes),
verify (verify of the small and the 0.60 GB models in each backend, split into its phases, bench/verify_phases.py:
once each, after the conversion that made the file), peers (the frameworks' own ways, minutes: --peers). --only
keeps the rows whose label holds TEXT; --quick is --repeat 1. The tables are printed twice: as text, then as
markdown rows for docs/speed.md. Python writes its bytecode caches as on a user's machine (PYTHONDONTWRITEBYTECODE
is dropped). A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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
# What every conversion imports by design: the canonical form's numpy and the typed contracts (records, whose
# pydantic model is made only where a document is validated from outside or its schema printed).
DESIGN = "import numpy, rnnconv.core.contracts"
# The floors a missed goal is shown against: what any conversion of this design takes before its own work.
SHIFTED_FLOOR = "the floor: numpy and the contracts, then cp to new places"
BUFFERED_FLOOR = "... the same shifted copy through one buffer (rnnconv's)"
TRANSPOSE_FLOOR = "... and numpy's transpose of its matrices"
START_FLOOR = "the floor: import numpy and the contracts"
# numpy and typer (whose pydantic adapters the command line builds only for a value that needs one): the libraries'
# floor of a conversion on this command line.
LIBRARIES_FLOOR = "the floor: import numpy and typer"
H5_START_FLOOR = "... and h5py"
SMALL_ONE = "small: small.pt -> .bin"
LIBRARY = "import sys, rnnconv; rnnconv.convert(sys.argv[1], sys.argv[2], to='cudnn', force=True)"
GROUPS = ("big", "growth", "batch", "small", "transpose", "verify", "peers")
RSS_SHARE, RSS_MB = 1.3, 150  # a conversion's peak memory: at most 1.3 x the model + 150 MB

# A weight space puts each tensor where cuDNN wants it, not where the source has it: the bytes from the source's first
# tensor on, copied in the kernel to the start of the output (the shift, not a multiple of a page, is what costs).
SHIFTED_COPY = """
import os, sys
source, output, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
src, dst = os.open(source, os.O_RDONLY), os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
left, at = os.fstat(src).st_size - start, start
if sys.argv[4:]:  # through one buffer, read and written once, as rnnconv copies a shifted byte
    buffer = memoryview(bytearray(1 << 21))
    while left:
        n = os.preadv(src, [buffer[: min(left, len(buffer))]], at)
        os.pwrite(dst, buffer[:n], at - start)
        left, at = left - n, at + n
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
    model_mb: float = 0.0  # a conversion's source: its peak memory is held to RSS_SHARE x this + RSS_MB


@dataclass
class VerifyRow:
    label: str
    backend: str
    phases: dict[str, float]  # import, read, source, written, compare, total (seconds)
    verdict: str
    peak_mb: float


@dataclass
class Case:
    """One row, made only when its group is asked for and its label kept by --only."""

    group: str
    label: str
    make: Callable[[], Row | VerifyRow | list[Row]]


def run(job: Job) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one fresh process, after its outputs are
    removed and its source read."""
    wall, cpu, peak, _ = timed(job)
    return wall, cpu, peak


def timed(job: Job) -> tuple[float, float, float, bytes]:
    """`run`, with what the process printed on stdout."""
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
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(job.command, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=ENV)
        assert process.stdout is not None
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.stdout.close()
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"failed ({code}): {' '.join(map(str, job.command))}\n{err.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def paired(job: Job, baseline: Job, repeat: int, goal: str, floor: str = "", model: Path | None = None) -> Row:
    """`job` and `baseline` in interleaved pairs (order swapped every pair), after an untimed pair."""
    walls: list[float] = []
    bases: list[float] = []
    cpus: list[float] = []
    peaks: list[float] = []
    for attempt in range(repeat + 1):
        order = (baseline, job) if attempt % 2 else (job, baseline)
        timings = {id(one): run(one) for one in order}
        if attempt:  # the first writes bytecode caches and warms the libraries' files
            walls.append(timings[id(job)][0])
            cpus.append(timings[id(job)][1])
            peaks.append(timings[id(job)][2])
            bases.append(timings[id(baseline)][0])
    for path in job.outputs + baseline.outputs:
        if path.is_dir():
            shutil.rmtree(path)
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
        0.0 if model is None else model.stat().st_size / 1e6,
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


def big(work: Path, repeat: int) -> list[Case]:
    """The big conversions and the runtime writers, each against cp of its source; replacing an output apart."""
    pt, h5, archive = work / "large.pt", work / "large.h5", work / "large.keras"
    blob, kept = work / "t.bin", work / "kept.bin"
    blob_out = [blob, Path(f"{blob}.json")]

    def existing() -> None:  # an output to replace, as large as the one written
        if not kept.exists():
            subprocess.run([*RNNCONV, "torch-to-cudnn", str(pt), "-o", str(kept), "-q", "--force"], check=True, env=ENV)
        shutil.copyfile(kept, blob)
        shutil.copyfile(f"{kept}.json", f"{blob}.json")

    t2c = [*RNNCONV, "torch-to-cudnn", str(pt), "-o", str(blob), "-q"]
    k2c = [*RNNCONV, "keras-to-cudnn", str(h5), "--layer", LAYERS, "-o", str(work / "k.bin"), "-q"]
    xml, tflite = work / "model.xml", work / "model.tflite"
    keras_out = [work / "k.bin", work / "k.bin.json"]
    shifted = [PYTHON, "-c", f"{DESIGN}; {SHIFTED_COPY}", str(pt), str(blob), str(first_tensor(pt))]

    def case(label: str, job: Callable[[], Row]) -> Case:
        return Case("big", label, job)

    return [
        case(
            f"torch-to-cudnn {pt.name}",
            lambda: paired(Job(f"torch-to-cudnn {pt.name}", t2c, blob_out, pt), cp(pt, work), repeat, "x 2",
                           SHIFTED_FLOOR, pt),
        ),
        case(
            f"torch-to-cudnn {pt.name} --no-hash",
            lambda: paired(Job(f"torch-to-cudnn {pt.name} --no-hash", [*t2c, "--no-hash"], blob_out, pt),
                           cp(pt, work), repeat, ""),
        ),
        case(
            f"torch-to-cudnn {pt.name} --force over an existing output",
            lambda: paired(
                Job(f"torch-to-cudnn {pt.name} --force over an existing output", [*t2c, "--force"], blob_out, pt,
                    existing),
                cp(pt, work),
                repeat,
                "",
            ),
        ),
        case(
            f"keras-to-cudnn {h5.name}",
            lambda: paired(Job(f"keras-to-cudnn {h5.name}", k2c, keras_out, h5), cp(h5, work), repeat, "x 3",
                           TRANSPOSE_FLOOR, h5),
        ),
        case(
            f"keras-to-cudnn {archive.name}",
            lambda: paired(
                Job(f"keras-to-cudnn {archive.name}", [*k2c[:4], str(archive), *k2c[5:]], keras_out, archive),
                cp(archive, work),
                repeat,
                "x 3",
                TRANSPOSE_FLOOR,
                archive,
            ),
        ),
        case(
            f"the floor: a bare h5py read of {h5.name}",
            lambda: paired(Job(f"the floor: a bare h5py read of {h5.name}", [PYTHON, "-c", BARE_H5PY, str(h5)], [],
                               h5), cp(h5, work), repeat, ""),
        ),
        case(
            TRANSPOSE_FLOOR,
            lambda: paired(Job(TRANSPOSE_FLOOR, [PYTHON, "-c", BARE_H5PY, str(h5), "T"], [], h5), cp(h5, work),
                           repeat, ""),
        ),
        case(
            "the floor: numpy and the contracts, then cp in the kernel",
            lambda: paired(
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
        ),
        case(SHIFTED_FLOOR, lambda: paired(Job(SHIFTED_FLOOR, shifted, blob_out, pt), cp(pt, work), repeat, "")),
        case(
            BUFFERED_FLOOR,
            lambda: paired(Job(BUFFERED_FLOOR, [*shifted, "buffer"], blob_out, pt), cp(pt, work), repeat, ""),
        ),
        case(
            f"convert {pt.name} model.xml (OpenVINO)",
            lambda: paired(
                Job(f"convert {pt.name} model.xml (OpenVINO)", [*RNNCONV, "convert", str(pt), str(xml), "-q"],
                    [xml, xml.with_suffix(".bin")], pt),
                cp(pt, work),
                repeat,
                "x 2.5",
                BUFFERED_FLOOR,
                pt,
            ),
        ),
        case(
            f"convert {pt.name} model.tflite (TFLite)",
            lambda: paired(
                Job(f"convert {pt.name} model.tflite (TFLite)", [*RNNCONV, "convert", str(pt), str(tflite), "-q"],
                    [tflite], pt),
                cp(pt, work),
                repeat,
                "x 2.5",
                BUFFERED_FLOOR,
                pt,
            ),
        ),
    ]  # fmt: skip


def growth(work: Path, repeat: int, large: bool) -> list[Case]:
    """torch-to-cudnn of the same LSTM a tenth (and, with --large, ten times) the size of large.pt, against cp of it:
    with the 0.60 GB row of `big`, how the ratio and the peak memory grow. The 6 GB model is made for its row and
    deleted after it."""
    from make_models import GROWTH

    sizes = ["0.06", *(["6"] if large else [])]

    def row(size: str) -> Row:
        source = work / GROWTH[size][0]
        if not source.exists():
            subprocess.run([PYTHON, str(ROOT / "bench" / "make_models.py"), str(work), "--large"], check=True, env=ENV)
        out = work / "grow.bin"
        try:
            return paired(
                Job(
                    f"torch-to-cudnn {source.name}",
                    [*RNNCONV, "torch-to-cudnn", str(source), "-o", str(out), "-q"],
                    [out, Path(f"{out}.json")],
                    source,
                ),
                cp(source, work),
                repeat,
                "x 2",
                "",
                source,
            )
        finally:
            if size == "6":
                source.unlink(missing_ok=True)

    return [Case("growth", f"torch-to-cudnn {GROWTH[size][0]}", lambda size=size: row(size)) for size in sizes]  # type: ignore[misc]


def batch(work: Path, repeat: int) -> list[Case]:
    """100 small files in one command, -j 1 and -j 2, against one small conversion (the ratio: what 100 cost where
    one costs 1)."""
    many, out = sorted((work / "small-100").glob("*.pt")), work / "many"
    one = work / "small.bin"
    single = Job(SMALL_ONE, [*RNNCONV, "convert", str(work / "small.pt"), str(one), "-q"], [one, Path(f"{one}.json")])
    return [
        Case(
            "batch",
            f"100 small .pt -> .bin, -j {jobs}",
            lambda jobs=jobs: paired(  # type: ignore[misc]
                Job(f"100 small .pt -> .bin, -j {jobs}",
                    [*RNNCONV, "convert", *map(str, many), "-o", f"{out}/", "-j", str(jobs), "-q"], [out]),
                single,
                min(repeat, 3),
                "",
            ),
        )
        for jobs in (1, 2)
    ]  # fmt: skip


def small(work: Path, repeat: int) -> list[Case]:
    """The small conversions and --help, against an empty interpreter; the floor of `import numpy` beside them."""
    out = work / "small.bin"
    outputs = [out, Path(f"{out}.json")]
    empty = Job("python -c pass", EMPTY)
    jobs = [
        (Job(SMALL_ONE, [*RNNCONV, "convert", str(work / "small.pt"), str(out), "-q"], outputs), "s 0.15",
         LIBRARIES_FLOOR),
        (Job("small: small.h5 -> .bin", [*RNNCONV, "convert", str(work / "small.h5"), str(out), "-q"], outputs),
         "s 0.15", H5_START_FLOOR),
        (Job("small: small.pt -> .bin, its result printed", [*RNNCONV, "convert", str(work / "small.pt"), str(out)],
             outputs), "s 0.15", START_FLOOR),
        (Job("rnnconv --help", [*RNNCONV, "--help"]), "s 0.08", ""),
        (Job("the floor: python -c 'import numpy'", [PYTHON, "-c", "import numpy"]), "", ""),
        (Job(START_FLOOR, [PYTHON, "-c", DESIGN]), "s 0.1", ""),
        (Job(H5_START_FLOOR, [PYTHON, "-c", f"{DESIGN}, h5py"]), "", ""),
        (Job(LIBRARIES_FLOOR, [PYTHON, "-c", "import numpy, typer.main"]), "", ""),
        (Job("small.pt -> .bin by rnnconv.convert, no command line",
             [PYTHON, "-c", LIBRARY, str(work / "small.pt"), str(out)], outputs), "", ""),
    ]  # fmt: skip
    return [
        Case("small", job.label, lambda job=job, goal=goal, floor=floor: paired(job, empty, repeat, goal, floor))  # type: ignore[misc]
        for job, goal, floor in jobs
    ]


def transposes(work: Path, repeat: int) -> list[Case]:
    """The Keras kernels of the large model transposed in memory each way, in one process, against a plain copy of
    the same bytes (bench/transpose_speed.py)."""

    def rows() -> list[Row]:
        command = [PYTHON, str(ROOT / "bench" / "transpose_speed.py"), "--repeat", str(repeat), "--workdir", str(work)]
        _, _, peak, out = timed(Job("transposes", command))
        times = json.loads(out)
        plain = times.pop("plain copy")
        made = [
            Row(f"transpose: {way}", best, median, "a plain copy", plain[0], plain[1], median / plain[1], 0.0, peak, "")
            for way, (best, median) in times.items()
        ]
        for row in made:
            print(f"  {row.label}: {row.best:.3f} s, {row.best / row.baseline_best:.2f} x a plain copy", flush=True)
        return made

    return [Case("transpose", "transpose: the large model's Keras kernels", rows)]


# Each backend's verify: (label, source, the conversion's target file, --layer, backend, frameworks imported first).
VERIFIES = (
    ("numpy reference", "pt", "v.bin", "numpy", "torch"),
    ("torch", "h5", "v.pt", "torch", "keras,torch"),
    ("Keras", "pt", "v.keras", "keras", "torch,keras"),
    ("onnxruntime", "pt", "v.onnx", "onnxruntime", "torch,onnxruntime"),
    ("OpenVINO", "pt", "v.xml", "openvino", "torch,openvino"),
)


def verifies(work: Path) -> list[Case]:
    """verify of a file written from the small and the large model, in each backend, split into its phases
    (bench/verify_phases.py); once each, after the conversion that writes the file (untimed)."""
    folder = work / "verify"

    def row(size: str, backend: str, suffix: str, written: str, engine: str, frameworks: str) -> VerifyRow:
        source = work / f"{size}.{suffix}"
        target = folder / f"{size}-{written}"
        layer = ["--layer", LAYERS] if (size, suffix) == ("large", "h5") else []
        folder.mkdir(exist_ok=True)
        subprocess.run([*RNNCONV, "convert", str(source), str(target), *layer, "-q", "--force"], check=True, env=ENV)
        command = [PYTHON, str(ROOT / "bench" / "verify_phases.py"), str(target), engine, frameworks]
        _, _, peak, out = timed(Job(f"verify {target.name}", command, [], source))
        shutil.rmtree(folder)
        found = json.loads(out)
        verdict = found.pop("verdict")
        label = f"verify {size}: {target.name.split('-', 1)[1]} from {source.name}"
        print(f"  {label} ({backend}): {found['total']:.2f} s, {verdict}", flush=True)
        return VerifyRow(label, backend, found, verdict, peak)

    return [
        Case("verify", f"verify {size} {backend}", lambda size=size, spec=spec: row(size, *spec))  # type: ignore[misc]
        for size in ("small", "large")
        for backend, *_ in VERIFIES
        for spec in [next(v for v in VERIFIES if v[0] == backend)]
    ]


def peers(work: Path) -> list[Case]:
    """The frameworks' own ways, once each (minutes)."""
    naive = work / "naive.out"
    ways = (
        ("Keras load_model + _standardize_cudnn_weights", NAIVE_KERAS, work / "large.h5"),
        ("torch.load + torch.cat", NAIVE_TORCH, work / "large.pt"),
    )
    return [
        Case(
            "peers",
            f"peer: {label}",
            lambda label=label, code=code, source=source: paired(  # type: ignore[misc]
                Job(f"peer: {label}", [PYTHON, "-c", code, str(source), str(naive)], [naive], source),
                cp(source, work),
                1,
                "",
            ),
        )
        for label, code, source in ways
    ]


def verdict_of(r: Row, rows: list[Row]) -> str:
    """The goal, met or missed (a missed one against its floor), and a conversion's memory against its bound."""
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
    if r.model_mb:
        bound = RSS_SHARE * r.model_mb + RSS_MB
        verdict += f"; peak <= {bound:.0f} MB: {'met' if r.peak_mb <= bound else 'MISSED'}"
    return verdict


def report(rows: list[Row], verified: list[VerifyRow], repeat: int) -> None:
    print(
        f"\n{'job':58} {'best s':>7} {'median':>7} {'base s':>7} {'ratio':>6} {'r med':>6} {'cpu s':>6} {'peak MB':>8}"
        "  goal"
    )
    for r in rows:
        print(
            f"{r.label:58} {r.best:7.3f} {r.median:7.3f} {r.baseline_best:7.3f} {r.best / r.baseline_best:6.2f} "
            f"{r.ratio_median:6.2f} {r.cpu:6.3f} {r.peak_mb:8.0f}  {verdict_of(r, rows)}"
        )
    phases = ("import", "read", "source", "written", "compare", "total")
    if verified:
        print(f"\n{'verify':50} {'backend':16}" + "".join(f" {p:>8}" for p in phases) + "  peak MB  verdict")
        for v in verified:
            print(
                f"{v.label:50} {v.backend:16}"
                + "".join(f" {v.phases.get(p, 0.0):8.3f}" for p in phases)
                + f"  {v.peak_mb:7.0f}  {v.verdict}"
            )
    print(
        f"\n(each job paired with its baseline, base s: cp of its source for a big job, `python -c pass` for a "
        f"small one, one small conversion for 100; best and median of {repeat} interleaved pairs after an untimed one; "
        f"ratio = best / baseline's best, r med = median of the pairs' ratios; cpu s = the job's best user + system "
        f"seconds, all its threads and the processes it waited for (what a loaded machine inflates least); peak = "
        f"largest resident set of the job's process, counting the source pages it maps; a verify row is one run, "
        f"its phases verify's stages: import = the frameworks, read = rnnconv and the files opened, source = the "
        f"source loaded and run, written = the written file run, compare = the comparison and the report; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end; python {sys.version.split()[0]})"
    )
    print("\nThe same as markdown rows, for docs/speed.md:\n")
    print("| job | best s | median s | base s | x base | median x | cpu s | peak MB | goal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r.label.replace('|', '/')} | {r.best:.3f} | {r.median:.3f} | {r.baseline_best:.3f} | "
            f"{r.best / r.baseline_best:.2f} | {r.ratio_median:.2f} | {r.cpu:.3f} | {r.peak_mb:.0f} | "
            f"{verdict_of(r, rows)} |"
        )
    if verified:
        print("\n| verify | backend | " + " | ".join(f"{p} s" for p in phases) + " | peak MB | verdict |")
        print("| --- " * (len(phases) + 4) + "|")
        for v in verified:
            cells = " | ".join(f"{v.phases.get(p, 0.0):.3f}" for p in phases)
            print(f"| {v.label} | {v.backend} | {cells} | {v.peak_mb:.0f} | {v.verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rnnconv-bench-0.6gb"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", default=",".join(g for g in GROUPS if g != "peers"), help="the groups of rows")
    parser.add_argument("--only", action="append", default=[], help="only the rows whose label holds TEXT")
    parser.add_argument("--quick", action="store_true", help="one pair per row (--repeat 1)")
    parser.add_argument("--large", action="store_true", help="add the 6 GB growth row (makes and deletes 6 GB)")
    parser.add_argument("--small-only", action="store_true", help="only the small jobs and their floors")
    parser.add_argument("--peers", action="store_true", help="add the frameworks' own ways (minutes)")
    args = parser.parse_args()
    work, repeat = args.workdir, 1 if args.quick else args.repeat
    groups = {"small"} if args.small_only else set(args.rows.split(",")) | ({"peers"} if args.peers else set())
    if unknown := groups - set(GROUPS):
        parser.error(f"unknown group(s) {', '.join(sorted(unknown))} (choose from {', '.join(GROUPS)})")
    subprocess.run([PYTHON, str(ROOT / "bench" / "make_models.py"), str(work)], check=True, env=ENV)
    print(
        f"model: 2-layer bidirectional LSTM, input 1024, hidden 2048, float32, "
        f"{(work / 'large.pt').stat().st_size / 1e9:.2f} GB"
    )
    cases = [
        *big(work, repeat),
        *growth(work, repeat, args.large),
        *batch(work, repeat),
        *small(work, repeat),
        *transposes(work, repeat),
        *verifies(work),
        *peers(work),
    ]
    chosen = [c for c in cases if c.group in groups and (not args.only or any(t in c.label for t in args.only))]
    rows: list[Row] = []
    verified: list[VerifyRow] = []
    for case in chosen:
        made = case.make()
        if isinstance(made, VerifyRow):
            verified.append(made)
        else:
            rows += made if isinstance(made, list) else [made]
    for path in [work / "kept.bin", work / "kept.bin.json"]:
        path.unlink(missing_ok=True)
    report(rows, verified, repeat)


if __name__ == "__main__":
    main()
