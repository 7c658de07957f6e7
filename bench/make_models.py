"""Make the benchmark's models with the real frameworks (run by bench.py when they are missing).

A 2-layer bidirectional LSTM, input 1024, hidden 2048, float32 (151 M weights, 0.60 GB), as:
- large.h5     Keras 3 legacy HDF5 (model.save), two Bidirectional(LSTM) layers stacked
- large.keras  Keras 3 archive of the same model
- large.pt     PyTorch state_dict of nn.LSTM(1024, 2048, num_layers=2, bidirectional=True)
- small.h5 / small.pt   a 1-layer LSTM (input 8, hidden 16), the same two ways: a small conversion's source
- small-100/   100 copies of small.pt: a conversion of many small files (-j 1, -j 2)
- grow-0.06gb.pt / grow-6gb.pt   the same 2-layer bidirectional LSTM, a tenth and ten times the size (hidden 640 and
               6400, input half the hidden): how the cost grows. The 6 GB one only with --large, and only where the
               disk has room for it, its output and cp's copy of it (bench.py deletes it after its row).

    python bench/make_models.py DIR [--large]
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

INPUT, HIDDEN, LAYERS = 1024, 2048, 2
SMALL = (8, 16)  # input, hidden of the small LSTM
MANY = 100  # small files converted in one command
# The growth rows' models: (name, input, hidden) of the 2-layer bidirectional LSTM, 144 * hidden**2 bytes.
GROWTH = {"0.06": ("grow-0.06gb.pt", 320, 640), "6": ("grow-6gb.pt", 3200, 6400)}


def make_keras(out: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np

    layers = [keras.Input((None, INPUT))]
    for k in range(LAYERS):
        layers.append(keras.layers.Bidirectional(keras.layers.LSTM(HIDDEN, return_sequences=True), name=f"lstm{k}"))
    model = keras.Sequential(layers, name="large")
    rng = np.random.default_rng(0)
    for layer in model.layers:
        layer.set_weights([(rng.standard_normal(w.shape, dtype=np.float32) * 0.02) for w in layer.get_weights()])
    model.save(out / "large.h5")
    model.save(out / "large.keras")
    small = keras.Sequential([keras.Input((None, SMALL[0])), keras.layers.LSTM(SMALL[1], name="lstm")], name="small")
    small.save(out / "small.h5")


def make_torch(out: Path, name: str, input_size: int, hidden: int) -> None:
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        lstm = torch.nn.LSTM(input_size, hidden, LAYERS, bidirectional=True)
    torch.save(lstm.state_dict(), out / name)


def make_many(out: Path) -> None:
    many = out / "small-100"
    many.mkdir(exist_ok=True)
    for k in range(MANY):
        shutil.copyfile(out / "small.pt", many / f"small{k:03}.pt")


def room_for(out: Path, gigabytes: float) -> bool:
    """Whether the disk holds a model of this size three times: itself, a conversion's output and cp's copy."""
    return shutil.disk_usage(out).free > 3 * gigabytes * 1e9 + 5e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", default=Path("/tmp/rnnconv-bench-0.6gb"))
    parser.add_argument("--large", action="store_true", help="also the 6 GB model of the growth rows")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "small.h5").exists():
        make_keras(out)
    if not (out / "small.pt").exists():
        make_torch(out, "large.pt", INPUT, HIDDEN)
        import torch

        torch.manual_seed(0)
        torch.save(torch.nn.LSTM(*SMALL).state_dict(), out / "small.pt")
    if not (out / "small-100").exists():
        make_many(out)
    for size, (name, input_size, hidden) in GROWTH.items():
        if (out / name).exists() or (size == "6" and not args.large):
            continue
        if not room_for(out, float(size)):
            raise SystemExit(f"{out}: not enough free disk for the {size} GB model (3 x its size and 5 GB besides)")
        make_torch(out, name, input_size, hidden)


if __name__ == "__main__":
    main()
