"""A .pdparams' RNN run in PaddlePaddle itself (CPU), for `verify` to compare with.

The file is never given to `paddle.load`, which unpickles whatever it names: its arrays, read by rnnconv's inert
reader, go to `set_state_dict` of the paddle.nn module the spec describes, every key of the module's own state_dict
required (a wrong spec cannot load), and the module runs batch-major from the given states, as its users run it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats.paddle.reader import CELL, load_state_dict
from rnnconv.formats.paddle.wire import BIDIRECTIONAL, flat_names
from rnnconv.formats.paddle.writer import activation_of, paddle_class
from rnnconv.table.apply import row_for_mode, tensor_name
from rnnconv.table.constants import LSTM, RNN


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Paddle warns on import (no ccache: it compiles extensions) and on keys it skips: rnnconv speaks for itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def require_paddle() -> Any:
    try:
        with _quiet():
            import paddle
    except ImportError:
        raise BackendMissing(
            "running PaddlePaddle needs the paddlepaddle package, which is not installed (pip install "
            "'rnnconv[paddle]'); .pdparams are read and written without it"
        ) from None
    return paddle


def build(paddle: Any, spec: RNNSpec, arrays: dict[str, np.ndarray], what: str) -> Any:
    """The paddle.nn module of `spec`, its every parameter set from `arrays` (keys as its state_dict names them)."""
    paddle.set_device("cpu")
    kwargs: dict[str, Any] = {"num_layers": spec.num_layers}
    if spec.bidirectional:
        kwargs["direction"] = BIDIRECTIONAL
    if spec.proj_size:
        kwargs["proj_size"] = spec.proj_size
    if spec.cell == RNN:
        kwargs["activation"] = activation_of(spec)
    dtype = "float64" if spec.dtype == "float64" else "float32"
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)
    try:
        module = getattr(paddle.nn, paddle_class(spec))(spec.input_size, spec.hidden_size, **kwargs)
    finally:
        paddle.set_default_dtype(previous)
    # The cells' own keys are what Paddle computes with; its aliases (PyTorch's names) are given the same arrays.
    row = row_for_mode("paddle", spec.mode)[0]
    aliases = flat_names(spec.num_layers, spec.num_directions, (True, True), spec.proj_size > 0)
    directions = spec.num_directions
    cell_keys = {name: tensor_name(row, role, k, d, directions) for name, (k, d, role) in aliases.items()}
    own = module.state_dict()
    given = {key: arrays.get(cell_keys.get(key, key)) for key in own}
    missing = [cell_keys.get(key, key) for key, value in given.items() if value is None]
    wrong = [key for key, value in given.items() if value is not None and tuple(value.shape) != tuple(own[key].shape)]
    stray = [key for key in arrays if CELL.match(key) and key not in own]
    if missing or wrong or stray:
        first = (
            f"{missing[0]}, which it lacks" if missing
            else f"{wrong[0]} of shape {tuple(own[wrong[0]].shape)}" if wrong
            else f"no {stray[0]}"
        )  # fmt: skip
        raise BadInput(f"the blob's spec does not describe {what}: paddle.nn.{paddle_class(spec)} has {first}")
    with _quiet():
        module.set_state_dict({key: np.asarray(value, dtype) for key, value in given.items()})
    module.eval()
    return module


def run_module(paddle: Any, module: Any, spec: RNNSpec, inputs: Inputs) -> Outputs:
    """y (T, B, D*out), h_n (L*D, B, out), c_n (L*D, B, H) or None, sequence-major as cuDNN's, from batch-major runs."""
    if inputs.get("lengths") is not None and len(set(np.asarray(inputs["lengths"]).tolist())) > 1:
        raise Unsupported("rnnconv runs Paddle's RNNs on whole sequences: verify PaddlePaddle without --ragged")
    dtype = "float64" if spec.dtype == "float64" else "float32"
    x = paddle.to_tensor(np.ascontiguousarray(np.asarray(inputs["x"], dtype).transpose(1, 0, 2)))
    h0 = paddle.to_tensor(np.asarray(inputs["h0"], dtype))
    lstm = spec.cell == LSTM
    states = (h0, paddle.to_tensor(np.asarray(inputs["c0"], dtype))) if lstm else h0
    with paddle.no_grad():
        y, final = module(x, states)
    h_n, c_n = (final[0].numpy(), final[1].numpy()) if lstm else (final.numpy(), None)
    return {"y": y.numpy().transpose(1, 0, 2), "h_n": h_n, "c_n": c_n}


def run_source(path: Path, prefix: str, spec: RNNSpec, inputs: Inputs) -> tuple[Outputs, str]:
    """The RNN under `prefix` in the .pdparams: its own y, h_n, c_n (sequence-major), and how it ran."""
    paddle = require_paddle()
    arrays = {k[len(prefix) :]: v for k, v in load_state_dict(path).arrays.items() if k.startswith(prefix)}
    module = build(paddle, spec, arrays, f"the RNN {prefix.rstrip('.') or 'rnn'!r} in {path}")
    how = f"paddle {paddle.__version__} (CPU): paddle.nn.{paddle_class(spec)}.set_state_dict"
    return run_module(paddle, module, spec, inputs), how
