"""The large model's Keras kernels transposed in memory, each way timed in this process: what bench.py's transpose
rows run.

    python bench/transpose_speed.py [--repeat 5] [--workdir DIR]

The kernels of the bench's 2-layer bidirectional LSTM (input 1024, hidden 2048: (in, 4H) and (H, 4H) float32 per
layer and direction, 0.60 GB), made with random values, each copied into one output the size of them all: as a plain
copy of the same bytes (the floor: memory read and written once), by numpy (`out[...] = kernel.T`), by rnnconv's
tiles on one thread and on two, transposed into memory then written to a file (`rnnconv.table.transpose.transposed`,
what a Keras conversion ran before), and by the tiles straight into a map of each kernel's place in an output file
(`safeio.outputs.mapped_run` and `transpose.transpose_into`, what a Keras conversion to a weight space runs now; the
bytes then written back by the kernel). Prints one JSON line: each way's best and median seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnconv.safeio import outputs
from rnnconv.table import transpose

INPUT, HIDDEN = 1024, 2048


def kernels() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = [(INPUT, 4 * HIDDEN), (HIDDEN, 4 * HIDDEN)] * 2 + [(2 * HIDDEN, 4 * HIDDEN), (HIDDEN, 4 * HIDDEN)] * 2
    return [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]


def places(out: np.ndarray, blocks: list[np.ndarray]) -> list[np.ndarray]:
    """Each block's transposed place in `out`, one after the other."""
    views, at = [], 0
    for block in blocks:
        views.append(out[at : at + block.size].reshape(block.shape[::-1]))
        at += block.size
    return views


def tiles(block: np.ndarray, out: np.ndarray, workers: int) -> None:
    """rnnconv's tiles, on `workers` threads, into `out` (the rows split as `transposed` splits them)."""
    step = 64 // block.itemsize
    bounds = np.linspace(0, block.shape[0] // step, workers + 1).astype(int) * step
    bounds[-1] = block.shape[0]
    parts = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds) if hi > lo]
    whole = [(0, block.shape[1], 0)]
    for done in [
        transpose._POOL.submit(transpose._copy_tiles, block, out, lo, hi, step, whole, False) for lo, hi in parts
    ]:
        done.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rnnconv-bench-0.6gb"))
    args = parser.parse_args()
    blocks = kernels()
    total = sum(b.size for b in blocks)
    out = np.empty(total, np.float32)
    mapped_path = args.workdir / "transposed.tmp"

    def into_map() -> None:
        mapped_path.unlink(missing_ok=True)
        with open(mapped_path, "w+b") as f:
            for block in blocks:
                with outputs.mapped_run(f, block.nbytes) as place:
                    assert place is not None, "this file system cannot allocate blocks ahead"
                    transpose.transpose_into(block, np.frombuffer(place, block.dtype).reshape(block.shape[::-1]))

    def then_written() -> None:
        mapped_path.unlink(missing_ok=True)
        with open(mapped_path, "wb") as f:
            for block in blocks:
                f.write(transpose.transposed(block).data)

    ways: dict[str, Callable[[], None]] = {
        "plain copy": lambda: [np.copyto(p, b.reshape(p.shape)) for b, p in zip(blocks, places(out, blocks))],
        "numpy": lambda: [np.copyto(p, b.T) for b, p in zip(blocks, places(out, blocks))],
        "tiles, one thread": lambda: [tiles(b, p, 1) for b, p in zip(blocks, places(out, blocks))],
        "tiles, two threads": lambda: [tiles(b, p, 2) for b, p in zip(blocks, places(out, blocks))],
        "transposed() then written": then_written,
        "transpose_into() a map of its place in the output": into_map,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeat + 1):  # the first run of each way faults its pages in
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - start)
    mapped_path.unlink(missing_ok=True)
    print(json.dumps({name: [min(t[1:]), statistics.median(t[1:])] for name, t in times.items()}))


if __name__ == "__main__":
    main()
