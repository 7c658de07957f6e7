"""Writing a large RNN to .tflite, as a ratio to `cp` of its source (the target: at most 3x).

    python bench/tflite_write.py [--gb 1.41] [--dir /tmp/rnnconv-bench] [--repeat 3]

The source is a PyTorch state_dict of a bidirectional nn.LSTM, input 1024, hidden 2048, with as many layers as make
about --gb gigabytes (4 layers: 352 M weights, 1.41 GB; bench/make_models.py's large.pt has 2, 0.60 GB), made once
with torch. Both are timed warm (the source in the page cache, each output removed before the next run): `cp` of the
source, and `rnnconv.convert(source, model.tflite)` in this process (the file's weights streamed from the source
behind the flatbuffer's tables, the source hashed on another core meanwhile), then without the hash and, for
comparison, to a cuDNN weight space. Prints the best of --repeat runs, the sizes and the ratios. A model over 2 GiB
is refused (flatbuffers' 32-bit offsets): --gb 2.5 shows the sentence.
A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import rnnconv
from rnnconv.errors import RnnconvError

INPUT, HIDDEN = 1024, 2048
FIRST_LAYER = 2 * 4 * 4 * HIDDEN * (INPUT + HIDDEN + 2)  # bytes: two directions, four gates, float32
LATER_LAYER = 2 * 4 * 4 * HIDDEN * (2 * HIDDEN + HIDDEN + 2)


def source(folder: Path, gb: float) -> Path:
    layers = max(1, 1 + round((gb * 1e9 - FIRST_LAYER) / LATER_LAYER))
    path = folder / f"lstm_{layers}_layers.pt"
    if not path.exists():
        import torch

        torch.manual_seed(0)
        torch.save(torch.nn.LSTM(INPUT, HIDDEN, layers, bidirectional=True).state_dict(), path)
    return path


def best(repeat: int, run, output: Path) -> float:
    times = []
    for _ in range(repeat):
        output.unlink(missing_ok=True)
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.41)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/rnnconv-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    model = source(args.dir, args.gb)
    copy, written = args.dir / "copy.pt", args.dir / "model.tflite"
    subprocess.run(["cat", str(model)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    cp = best(args.repeat, lambda: subprocess.run(["cp", str(model), str(copy)], check=True), copy)
    copy.unlink()
    try:
        write = best(args.repeat, lambda: rnnconv.convert(model, written, force=True), written)
    except RnnconvError as exc:
        print(f"source {model.stat().st_size / 1e9:.2f} GB: refused: {exc}")
        return
    size = written.stat().st_size
    unhashed = best(args.repeat, lambda: rnnconv.convert(model, written, force=True, hash_source=False), written)
    blob = args.dir / "model.bin"
    cudnn = best(args.repeat, lambda: rnnconv.convert(model, blob, force=True), blob)
    for path in (written, blob, blob.with_name(blob.name + ".json")):
        path.unlink(missing_ok=True)
    print(f"source {model.name}: {model.stat().st_size / 1e9:.3f} GB; written {size / 1e9:.3f} GB")
    print(f"cp {cp:.2f} s, rnnconv convert to .tflite {write:.2f} s: {write / cp:.2f}x cp (target <= 3x)")
    print(f"  without hashing the source (--no-hash) {unhashed:.2f} s: {unhashed / cp:.2f}x cp")
    print(f"  for comparison, to a cuDNN weight space {cudnn:.2f} s: {cudnn / cp:.2f}x cp")


if __name__ == "__main__":
    main()
