"""What Keras itself computes, for comparing rnnconv's output with the real framework.

Works with Keras 3, tf-keras and Keras 2 (the fixture script uses it under Keras 2
to record an oracle, since Keras 2 cannot be installed beside Keras 3).

- `cudnn_params`: the flat parameter buffer Keras' own TensorFlow backend builds and
  hands to cuDNN for a layer (per direction). The cuDNN op is intercepted before it
  runs, so this works on a CPU; the build is told it is a CUDA build, because the
  GRU's z/r swap only happens on CUDA builds (docs/LAYOUTS.md section 3).
- `Oracle.run`: the layer's own outputs, final h and c for given inputs and
  non-zero initial states, through the Keras runner `verify` uses
  (rnnconv.runners.keras_runner: CuDNN* layers, which cannot run on a CPU, run
  through Keras' own conversion of their weights into the equivalent LSTM/GRU).
"""

from __future__ import annotations

import contextlib
import zlib
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.formats.keras.runner import cell_input_size, directions, is_lstm, run_layer
from rnnconv.formats.keras.wire import KERAS_WRAPPERS
from rnnconv.table.apply import classes_of

RECURRENT = (*classes_of("keras"), *KERAS_WRAPPERS)


def recurrent_layers(model: Any) -> list[Any]:
    found = []
    for layer in model.layers:
        if hasattr(layer, "layers"):
            found += recurrent_layers(layer)
        elif layer.__class__.__name__ in RECURRENT:
            found.append(layer)
    return found


def units_of(layer: Any) -> int:
    return int(getattr(layer, "units", None) or layer.cell.units)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

STEPS, BATCH = 6, 3


class _Captured(Exception):
    def __init__(self, params: Any):
        self.params = params


CUDNN_OPS = ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")


@contextlib.contextmanager
def _intercept_cudnn(tf: Any):
    """Make Keras believe it runs on a CUDA build and capture the params of its cuDNN call."""

    def capture(**kwargs: Any) -> Any:
        raise _Captured(np.asarray(kwargs["params"]))

    # Keras modules reach TensorFlow through several API modules (tf, tf.compat.v2, ...).
    apis = [tf] + [getattr(tf.compat, v) for v in ("v1", "v2") if hasattr(tf.compat, v)]
    saved = []
    for api in apis:
        info = api.sysconfig.get_build_info
        saved.append((api.sysconfig, "get_build_info", info))
        api.sysconfig.get_build_info = lambda info=info: {**info(), "is_cuda_build": True, "is_rocm_build": False}
        for op in CUDNN_OPS:
            if hasattr(api.raw_ops, op):
                saved.append((api.raw_ops, op, getattr(api.raw_ops, op)))
                setattr(api.raw_ops, op, capture)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _is_keras3(keras: Any) -> bool:
    return getattr(keras, "__version__", "2").startswith("3.")


def cudnn_params(keras: Any, layer: Any) -> list[np.ndarray] | None:
    """Per direction, the buffer Keras hands cuDNN; None where Keras has no cuDNN path."""
    import tensorflow as tf

    out = []
    for one in directions(layer):
        cls = one.__class__.__name__
        cell = getattr(one, "cell", None)
        if cls in ("CuDNNLSTM", "CuDNNGRU"):
            units = one.units
            x = tf.zeros((1, 2, one.kernel.shape[0]))
            states = [tf.zeros((1, units))] * (2 if cls == "CuDNNLSTM" else 1)
            call = lambda: one._process_batch(x, states)  # noqa: E731
        elif cls in ("LSTM", "GRU") or (cls == "RNN" and cell.__class__.__name__ in ("LSTMCell", "GRUCell")):
            call = _backend_call(keras, tf, cell)
            if call is None:
                return None
        else:
            return None
        with _intercept_cudnn(tf):
            try:
                call()
            except _Captured as captured:
                out.append(captured.params.astype(np.float32))
                continue
        raise AssertionError(f"Keras did not call cuDNN for {layer.name}")
    return out


def _backend_call(keras: Any, tf: Any, cell: Any):
    lstm = cell.__class__.__name__ == "LSTMCell"
    if not lstm and not getattr(cell, "reset_after", False):
        return None
    units, n_in = cell.units, cell.kernel.shape[0]
    x = tf.zeros((1, 2, n_in))
    h = tf.zeros((1, units))
    kernel, rk = tf.convert_to_tensor(cell.kernel), tf.convert_to_tensor(cell.recurrent_kernel)
    bias = None if cell.bias is None else tf.convert_to_tensor(cell.bias)
    if bias is None:
        # Keras runs bias-free layers outside cuDNN; zero biases are what cuDNN would need.
        bias = tf.zeros((4 * units,)) if lstm else tf.zeros((2, 3 * units))
    if _is_keras3(keras):
        import importlib

        backend = importlib.import_module("keras.src.backend.tensorflow.rnn")

        if lstm:
            return lambda: backend._cudnn_lstm(x, h, h, kernel, rk, bias, None, False, False, True)
        return lambda: backend._cudnn_gru(x, h, kernel, rk, bias, None, False, False, True)
    module = _keras2_rnn_module(keras, "lstm" if lstm else "gru")
    lengths = tf.fill([1], 2)
    if lstm:
        return lambda: module.gpu_lstm(x, h, h, kernel, rk, bias, None, False, False, lengths, True)
    return lambda: module.gpu_gru(x, h, kernel, rk, bias, None, False, False, lengths, True)


def _keras2_rnn_module(keras: Any, name: str) -> Any:
    import importlib

    base = keras.__name__.split(".")[0]
    for path in (f"{base}.src.layers.rnn.{name}", "keras.src.layers.rnn." + name, "keras.layers.rnn." + name):
        with contextlib.suppress(ImportError):
            return importlib.import_module(path)
    raise ImportError(f"no Keras 2 {name} module")


def inputs_for(n_in: int, units: int, num_directions: int, lstm: bool, seed: int) -> dict[str, np.ndarray]:
    """Non-saturating random inputs and distinct non-zero initial states (batch-major x)."""
    rng = np.random.default_rng(seed)
    data = {
        "x": rng.normal(0, 0.8, (BATCH, STEPS, n_in)).astype(np.float32),
        "h0": rng.normal(0, 0.5, (num_directions, BATCH, units)).astype(np.float32),
    }
    data["c0"] = rng.normal(0, 0.5, (num_directions, BATCH, units)).astype(np.float32) if lstm else None
    return data


def record_oracle(keras: Any, models: list[Any], path: Any) -> None:
    """Store cudnn_params and run_layer results of every recurrent layer (for Keras 2)."""
    arrays: dict[str, np.ndarray] = {}
    for model in models:
        for index, layer in enumerate(recurrent_layers(model)):
            prefix = f"{model.name}/{layer.name}"
            params = cudnn_params(keras, layer)
            for d, p in enumerate(params or []):
                arrays[f"{prefix}/params{d}"] = p
            first = directions(layer)[0]
            data = inputs_for(cell_input_size(first), units_of(first), len(directions(layer)), is_lstm(layer), index)
            try:
                result = run_layer(keras, layer, data["x"], data["h0"], data["c0"])
            except Exception:
                continue
            for key, value in {**data, **result}.items():
                if value is not None:
                    arrays[f"{prefix}/{key}"] = value
    np.savez_compressed(path, **arrays)


class Oracle:
    """What one Keras generation computes for a fixture layer."""

    def __init__(self, generation: str):
        self.generation = generation
        if generation == "keras2":
            self.recorded = np.load(FIXTURES / "keras2" / "oracle.npz")
            return
        if generation == "keras3":
            import keras

            self.keras = keras
        else:
            import tf_keras

            self.keras = tf_keras
        self.models: dict[str, object] = {}

    def _model(self, model: str):
        if model not in self.models:
            file = {"single_lstm": "lstm", "single_bf16_gru": "bf16_gru"}.get(model, model)
            if self.generation == "keras3":
                self.models[model] = self.keras.models.load_model(FIXTURES / "keras3" / f"{file}.keras")
            else:
                from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
                from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

                self.models[model] = self.keras.models.load_model(
                    FIXTURES / "tf_keras" / f"{file}.h5",
                    compile=False,
                    custom_objects={"CuDNNLSTM": CuDNNLSTM, "CuDNNGRU": CuDNNGRU},
                )
        return self.models[model]

    def _layer(self, model: str, layer: str):
        return next(found for found in recurrent_layers(self._model(model)) if found.name == layer)

    @cache
    def params(self, model: str, layer: str) -> list[np.ndarray] | None:
        if self.generation == "keras2":
            keys = [f"{model}/{layer}/params{d}" for d in range(2)]
            found = [self.recorded[k] for k in keys if k in self.recorded]
            return found or None
        return cudnn_params(self.keras, self._layer(model, layer))

    @cache
    def run(self, model: str, layer: str) -> dict[str, np.ndarray]:
        if self.generation == "keras2":
            prefix = f"{model}/{layer}/"
            return {k[len(prefix) :]: self.recorded[k] for k in self.recorded.files if k.startswith(prefix)}
        keras_layer = self._layer(model, layer)
        first = directions(keras_layer)[0]
        data = inputs_for(
            cell_input_size(first),
            units_of(first),
            len(directions(keras_layer)),
            is_lstm(keras_layer),
            zlib.crc32(layer.encode()),
        )
        return {
            **{k: v for k, v in data.items() if v is not None},
            **{
                k: v
                for k, v in run_layer(self.keras, keras_layer, data["x"], data["h0"], data["c0"]).items()
                if v is not None
            },
        }


@cache
def oracle(generation: str) -> Oracle:
    return Oracle(generation)
