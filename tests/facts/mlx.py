"""MLX's test facts: a written .mlx.safetensors loaded by mlx.nn's load_weights into the documented modules."""

from __future__ import annotations

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Outputs, Runtime, Way


def documented_stack():
    """The Stack module docs/formats/mlx.md shows, as printed."""
    from conftest import doc_code

    scope: dict = {}
    exec(doc_code("docs/formats/mlx.md"), scope)
    return scope["Stack"]


def mlx_model(spec: RNNSpec, path):
    """The module the file is for, built as docs/formats/mlx.md says, loaded by MLX's own load_weights."""
    nn = pytest.importorskip("mlx.nn")
    kwargs = {"bias": spec.bias}
    if spec.mode == "rnn_relu":
        kwargs["nonlinearity"] = nn.relu
    cls = {"lstm": nn.LSTM, "gru": nn.GRU}.get(spec.mode, nn.RNN)
    layers = []
    for k in range(spec.num_layers):
        width = spec.input_size if k == 0 else spec.num_directions * spec.hidden_size
        pair = [cls(width, spec.hidden_size, **kwargs) for _ in range(spec.num_directions)]
        layers.append(pair if spec.bidirectional else pair[0])
    model = layers[0] if len(layers) == 1 and not spec.bidirectional else documented_stack()(layers)
    model.load_weights(str(path))  # strict: every parameter, its shape, nothing more
    return model


def mlx_run(model, spec: RNNSpec, x, h0, c0):
    """Run in MLX (batch-major), sequence-major outputs as cuDNN's."""
    mx = pytest.importorskip("mlx.core")
    nn = pytest.importorskip("mlx.nn")
    xb = mx.array(np.ascontiguousarray(np.asarray(x).transpose(1, 0, 2)))
    lstm = spec.mode == "lstm"
    if isinstance(model, (nn.LSTM, nn.GRU, nn.RNN)):
        out = model(xb, hidden=mx.array(h0[0]), cell=mx.array(c0[0])) if lstm else model(xb, hidden=mx.array(h0[0]))
        y, c = out if lstm else (out, None)
        hs, cs = [y[:, -1]], [c[:, -1]] if lstm else []
    else:
        y, hs, cs = model(xb, hidden=[mx.array(h) for h in h0], cell=[mx.array(c) for c in c0] if lstm else None)
    c_n = np.stack([np.array(c) for c in cs]) if lstm else None
    return np.array(y).transpose(1, 0, 2), np.stack([np.array(h) for h in hs]), c_n


def _mlx(path, spec, x, h0, c0, lengths=None) -> Outputs:
    return mlx_run(mlx_model(spec, path), spec, x, h0, c0)


RUNTIME = Runtime((".mlx.safetensors",), 1e-5, (Way("mlx.nn", _mlx),), None, True)
