"""A file's modules loaded by MLX's own load_weights into mlx.nn modules and run on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, Unsupported
from rnnconv.formats.mlx.reader import MlxChain
from rnnconv.formats.mlx.wire import MLX_CLASSES
from rnnconv.table.constants import LSTM, NONLINEARITIES, RNN


def require_mlx() -> Any:
    try:
        import mlx.core as mx
        from mlx import nn
    except ImportError:
        raise BackendMissing(
            "running MLX needs the mlx package, which is not installed (pip install 'rnnconv[mlx]'; on Linux it "
            "comes with mlx-cpu)"
        ) from None
    return mx, nn


def run_modules(path: Path, chain: MlxChain, mode: str, inputs: Inputs) -> Outputs:
    """The file's modules, loaded by MLX's own load_weights into mlx.nn modules, run on the CPU layer after layer
    (a backward module on the sequence reversed, its outputs reversed back); sequence-major in and out, as cuDNN's."""
    mx, nn = require_mlx()
    if inputs.get("lengths") is not None and len(set(np.asarray(inputs["lengths"]).tolist())) > 1:
        raise Unsupported("mlx.nn's RNNs take no sequence lengths: verify MLX without --ragged")
    mx.set_default_device(mx.cpu)
    weights = mx.load(str(path))
    x = mx.array(np.ascontiguousarray(np.asarray(inputs["x"], np.float32).transpose(1, 0, 2)))  # (B, T, I)
    hs: list[np.ndarray] = []
    cs: list[np.ndarray] = []
    for pair in chain.pairs:
        outputs = []
        for direction, module in enumerate(pair):
            index = len(hs)
            kwargs: dict[str, Any] = {"bias": module.has_bias}
            if module.cell == RNN:
                kwargs["nonlinearity"] = nn.relu if mode == NONLINEARITIES["relu"] else nn.tanh
            layer = getattr(nn, MLX_CLASSES[module.cell])(module.input_size, module.hidden, **kwargs)
            own = [
                (k[len(module.prefix) :], v.astype(mx.float32))
                for k, v in weights.items()
                if k.startswith(module.prefix)
            ]
            layer.load_weights([(k, v) for k, v in own if "." not in k])
            seq = x[:, ::-1] if direction else x
            h0 = mx.array(np.asarray(inputs["h0"][index], np.float32))
            if module.cell == LSTM:
                c0 = mx.array(np.asarray(inputs["c0"][index], np.float32))
                y, c = layer(seq, hidden=h0, cell=c0)
                cs.append(np.array(c[:, -1, :]))
            else:
                y = layer(seq, hidden=h0)
            hs.append(np.array(y[:, -1, :]))
            outputs.append(y[:, ::-1] if direction else y)
        x = mx.concatenate(outputs, axis=-1)
    return {"y": np.array(x).transpose(1, 0, 2), "h_n": np.stack(hs), "c_n": np.stack(cs) if cs else None}
