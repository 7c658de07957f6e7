"""PaddlePaddle's test facts: a written .pdparams loaded by paddle.load and set_state_dict into the paddle.nn module
the usage line names, every key of the module's state_dict given and of its shape, run batch-major from given states."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Outputs, Runtime, Way


def paddle_module(spec: RNNSpec, path):
    """The module the file is for, built as the usage line builds it, loaded by Paddle's own paddle.load."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Paddle's import warns that it finds no ccache
        paddle = pytest.importorskip("paddle")
    paddle.set_device("cpu")
    kwargs = {"num_layers": spec.num_layers}
    if spec.bidirectional:
        kwargs["direction"] = "bidirect"
    if spec.proj_size:
        kwargs["proj_size"] = spec.proj_size
    if spec.mode.startswith("rnn"):
        kwargs["activation"] = spec.mode[4:]
    cls = {"lstm": paddle.nn.LSTM, "gru": paddle.nn.GRU}.get(spec.mode, paddle.nn.SimpleRNN)
    paddle.set_default_dtype("float64" if spec.dtype == "float64" else "float32")
    try:
        module = cls(spec.input_size, spec.hidden_size, **kwargs)
    finally:
        paddle.set_default_dtype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key it skips (missing, or of another shape) is a warning: fail on it
        missing, _ = module.set_state_dict(paddle.load(str(path)))
    assert not missing, missing
    module.eval()
    return paddle, module


def paddle_outputs(paddle, module, spec: RNNSpec, x, h0, c0) -> Outputs:
    """The module's outputs from given states, sequence-major in and out as cuDNN's (it runs batch-major)."""
    dtype = "float64" if spec.dtype == "float64" else "float32"
    xb = paddle.to_tensor(np.ascontiguousarray(np.asarray(x, dtype).transpose(1, 0, 2)))
    h = paddle.to_tensor(np.asarray(h0, dtype))
    lstm = spec.mode == "lstm"
    with paddle.no_grad():
        y, final = module(xb, (h, paddle.to_tensor(np.asarray(c0, dtype))) if lstm else h)
    y = y.numpy().transpose(1, 0, 2)
    return (y, final[0].numpy(), final[1].numpy()) if lstm else (y, final.numpy(), None)


def _paddle(path, spec, x, h0, c0, lengths=None) -> Outputs:
    paddle, module = paddle_module(spec, path)
    return paddle_outputs(paddle, module, spec, x, h0, c0)


RUNTIME = Runtime((".pdparams",), 1e-5, (Way("paddle.nn", _paddle),))

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py): what paddle.save wrote.
SEEDS = ["paddle/lstm_bi2.pdparams", "paddle/tagger.pdparams", "paddle/lstm_proj.pdparams", "paddle/rnn_relu.pdparams"]
