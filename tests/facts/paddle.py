"""PaddlePaddle's test facts: a written .pdparams loaded by paddle.load and set_state_dict into the paddle.nn module
the usage line names, every key of the module's state_dict given and of its shape (a key Paddle skips warns: an
error here), run batch-major from given states.

Paddle runs in one child interpreter per test process, started when first asked: its native library and
TensorFlow's cannot share a process (Paddle 3.3.1 loaded after TensorFlow 2.21 crashes with SIGSEGV), and a test
process may have imported TensorFlow for Keras."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Outputs, Runtime, Way

_SERVER = """
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")  # Paddle's import warns that it finds no ccache
import paddle
paddle.set_device("cpu")
CLASSES = {"lstm": paddle.nn.LSTM, "gru": paddle.nn.GRU}


def loaded(request):
    kwargs = {"num_layers": request["num_layers"]}
    if request["bidirectional"]:
        kwargs["direction"] = "bidirect"
    if request["proj_size"]:
        kwargs["proj_size"] = request["proj_size"]
    if request["mode"].startswith("rnn"):
        kwargs["activation"] = request["mode"][4:]
    paddle.set_default_dtype(request["dtype"])
    try:
        made = CLASSES.get(request["mode"], paddle.nn.SimpleRNN)
        module = made(request["input_size"], request["hidden_size"], **kwargs)
    finally:
        paddle.set_default_dtype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key it skips (missing, or of another shape) is a warning: fail on it
        missing, _ = module.set_state_dict(paddle.load(request["path"]))
    assert not missing, missing
    module.eval()
    return module


def serve(request):
    given = dict(np.load(request["given"]))
    if "usage" in request:  # the printed code, as a user pastes it, with x given
        scope = {"x": paddle.to_tensor(given["x"])}
        exec(compile(request["usage"], "<usage line>", "exec"), scope)
        np.savez(request["got"], y=scope["y"].numpy())
        return
    module = loaded(request)
    states = paddle.to_tensor(given["h0"])
    if "c0" in given:
        states = (states, paddle.to_tensor(given["c0"]))
    with paddle.no_grad():
        y, final = module(paddle.to_tensor(given["x"]), states)
    out = {"y": y.numpy(), "h_n": (final[0] if "c0" in given else final).numpy()}
    if "c0" in given:
        out["c_n"] = final[1].numpy()
    np.savez(request["got"], **out)


for line in sys.stdin:
    try:
        serve(json.loads(line))
        print(json.dumps({"ok": True}), flush=True)
    except BaseException as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


def needs_paddle() -> None:
    """Skip without Paddle, found, never imported here."""
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("paddlepaddle is not installed")


@functools.cache
def _server() -> subprocess.Popen:
    needs_paddle()
    child = subprocess.Popen(
        [sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    atexit.register(child.kill)
    return child


def paddle_child(request: dict, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One request served by the child: `given` arrays in, the arrays it saved out."""
    child = _server()
    with tempfile.TemporaryDirectory() as folder:
        request = {**request, "given": str(Path(folder) / "given.npz"), "got": str(Path(folder) / "got.npz")}
        np.savez(request["given"], **given)
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(request) + "\n")
        answer = json.loads(child.stdout.readline() or '{"error": "the Paddle child ended"}')
        assert "error" not in answer, answer["error"]
        with np.load(request["got"]) as got:
            return dict(got)


def _paddle(path, spec: RNNSpec, x, h0, c0, lengths=None) -> Outputs:
    """The file loaded by paddle.load into the module the usage line builds; sequence-major in and out as cuDNN's."""
    dtype = "float64" if spec.dtype == "float64" else "float32"
    given = {"x": np.ascontiguousarray(np.asarray(x, dtype).transpose(1, 0, 2)), "h0": np.asarray(h0, dtype)}
    if spec.mode == "lstm":
        given["c0"] = np.asarray(c0, dtype)
    fields = ("mode", "input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")
    request = {"path": str(path), "dtype": dtype, **{name: getattr(spec, name) for name in fields}}
    got = paddle_child(request, given)
    return got["y"].transpose(1, 0, 2), got["h_n"], got.get("c_n")


def run_usage(usage: str, x: np.ndarray) -> np.ndarray:
    """The usage line run as printed, on x (batch, time, I): its y."""
    return paddle_child({"usage": usage}, {"x": x})["y"]


RUNTIME = Runtime((".pdparams",), 1e-5, (Way("paddle.nn", _paddle),))

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py): what paddle.save wrote.
SEEDS = ["paddle/lstm_bi2.pdparams", "paddle/tagger.pdparams", "paddle/lstm_proj.pdparams", "paddle/rnn_relu.pdparams"]
