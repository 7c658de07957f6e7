"""Make the benchmark's large models with the real frameworks (run by bench.py when they are missing).

A 2-layer bidirectional LSTM, input 1024, hidden 2048, float32 (151 M weights, 0.60 GB), as:
- large.h5     Keras 3 legacy HDF5 (model.save), two Bidirectional(LSTM) layers stacked
- large.keras  Keras 3 archive of the same model
- large.pt     PyTorch state_dict of nn.LSTM(1024, 2048, num_layers=2, bidirectional=True)
- small.h5 / small.pt   a 1-layer LSTM (input 8, hidden 16), the same two ways: a small conversion's source

    python bench/make_models.py DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

INPUT, HIDDEN, LAYERS = 1024, 2048, 2
SMALL = (8, 16)  # input, hidden of the small LSTM


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


def make_torch(out: Path) -> None:
    import torch

    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(INPUT, HIDDEN, LAYERS, bidirectional=True).state_dict(), out / "large.pt")
    torch.save(torch.nn.LSTM(*SMALL).state_dict(), out / "small.pt")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "small.h5").exists():
        make_keras(out)
    if not (out / "small.pt").exists():
        make_torch(out)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rnnconv-bench-0.6gb"))
