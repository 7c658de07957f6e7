"""Run a Keras source layer in Keras itself (CPU), for `verify` to compare a blob with.

The model is loaded by Keras (`keras.models.load_model` for Keras 3 files,
`tf_keras` for Keras 2 / tf-keras files), the layer found by its name, and run
through a copy that returns its states. Weights-only files have no config: their
layers are built from the class and units rnnconv inferred, holding the file's
own stored tensors. tf-keras' CuDNNLSTM/CuDNNGRU cannot run on a CPU; they run as
the LSTM/GRU that Keras' own loader converts their weights into.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BackendMissing, BadInput

CUDNN_CLASSES = ("CuDNNLSTM", "CuDNNGRU")
RECURRENT = ("LSTM", "GRU", "SimpleRNN", "RNN", "CuDNNLSTM", "CuDNNGRU", "Bidirectional")


@contextlib.contextmanager
def _native_stderr_silenced():
    """TensorFlow's C++ start-up logs to file descriptor 2 before any setting can stop it."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_keras(generation: str) -> Any:
    """Keras 3 (`keras`) or Keras 2 (`tf_keras`), quietly; BackendMissing when absent."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    name = "keras" if generation == "3" else "tf_keras"
    try:
        with _native_stderr_silenced():
            module = importlib.import_module(name)
    except ImportError:
        hint = "pip install 'rnnconv[keras]'" if name == "keras" else "pip install --no-deps tf-keras"
        raise BackendMissing(f"running this Keras {generation} source needs {name}, which is not installed "
                             f"({hint})") from None
    if name == "keras" and not getattr(module, "__version__", "3").startswith("3"):
        raise BackendMissing(f"running this Keras 3 source needs Keras 3, but keras {module.__version__} is installed")
    return module


def directions(layer: Any) -> list[Any]:
    if layer.__class__.__name__ == "Bidirectional":
        return [layer.forward_layer, layer.backward_layer]
    return [layer]


def is_lstm(layer: Any) -> bool:
    first = directions(layer)[0]
    cls = first.__class__.__name__
    return "LSTM" in (first.cell.__class__.__name__ if cls == "RNN" else cls)


def units_of(layer: Any) -> int:
    return int(getattr(layer, "units", None) or layer.cell.units)


def cell_input_size(layer: Any) -> int:
    return int(layer.kernel.shape[0]) if hasattr(layer, "kernel") else int(layer.cell.kernel.shape[0])


def recurrent_layers(model: Any) -> list[Any]:
    found = []
    for layer in model.layers:
        if hasattr(layer, "layers"):
            found += recurrent_layers(layer)
        elif layer.__class__.__name__ in RECURRENT:
            found.append(layer)
    return found


def _plain(keras: Any, layer: Any) -> Any:
    """A fresh layer that runs on the CPU, computes what `layer` computes and returns its states."""
    cls = layer.__class__.__name__
    if cls == "CuDNNLSTM":
        return keras.layers.LSTM(layer.units, return_sequences=True, return_state=True)
    if cls == "CuDNNGRU":
        return keras.layers.GRU(layer.units, return_sequences=True, return_state=True, reset_after=True,
                                recurrent_activation="sigmoid")
    config = layer.get_config()
    config.update(return_sequences=True, return_state=True, go_backwards=False, name=config["name"] + "_probe")
    return layer.__class__.from_config(config)


def _weights(keras: Any, layer: Any, plain: Any) -> list[np.ndarray]:
    weights = [np.asarray(v) for v in layer.get_weights()]
    if layer.__class__.__name__ in CUDNN_CLASSES:
        weights = keras_converts_cudnn(keras, plain, weights, layer.kernel.shape[0])
    return weights


def keras_converts_cudnn(keras: Any, plain: Any, weights: list[np.ndarray], n_in: int) -> list[np.ndarray]:
    """Keras' own loader conversion of CuDNNLSTM/CuDNNGRU weights into LSTM/GRU weights."""
    base = keras.__name__.split(".")[0]
    module = None
    for path in (f"{base}.src.saving.legacy.hdf5_format", "keras.src.saving.legacy.hdf5_format"):
        with contextlib.suppress(ImportError):
            module = importlib.import_module(path)
            break
    if module is None or not hasattr(module, "_convert_rnn_weights"):
        raise BackendMissing("running a CuDNNLSTM/CuDNNGRU source on a CPU needs tf-keras' weight conversion "
                             "(pip install --no-deps tf-keras)")
    plain.build((None, None, n_in))
    return module._convert_rnn_weights(plain, weights)


def run_layer(keras: Any, layer: Any, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
              lengths: np.ndarray | None = None) -> dict[str, np.ndarray | None]:
    """y (B, T, D*units), h_n (D, B, units), c_n (D, B, units) or None, computed by Keras.

    x is batch-major (B, T, I), as Keras takes it; h0/c0 are (D, B, units). With
    `lengths`, steps past a sequence's length are masked.
    """
    import tensorflow as tf

    lstm = is_lstm(layer)
    dirs = directions(layer)
    plain = _plain(keras, dirs[0])
    weights = _weights(keras, dirs[0], plain)
    if len(dirs) == 2:
        back = _plain(keras, dirs[1])
        weights += _weights(keras, dirs[1], back)
        plain = keras.layers.Bidirectional(plain, merge_mode="concat")  # Keras' own Bidirectional
    states = []
    for d in range(len(dirs)):
        states += [tf.constant(h0[d])] + ([tf.constant(c0[d])] if lstm else [])
    inputs = tf.constant(x)
    plain.build(inputs.shape)
    plain.set_weights(weights)
    mask = None
    if lengths is not None:
        mask = tf.constant(np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None])
    got = [np.asarray(t) for t in plain(inputs, initial_state=states, mask=mask)]
    per = 2 if lstm else 1
    finals = got[1:]
    h_n = np.stack([finals[d * per] for d in range(len(dirs))])
    c_n = np.stack([finals[d * per + 1] for d in range(len(dirs))]) if lstm else None
    return {"y": got[0], "h_n": h_n, "c_n": c_n}


# --- finding the source layer ---------------------------------------------------------------

def load_source_layers(path: Path, names: list[str]) -> tuple[Any, list[Any], str]:
    """Keras, the named layers (built and holding the file's weights), and how they were obtained."""
    from rnnconv.formats.keras import KerasFile

    with KerasFile(path) as keras_file:
        generation = "3" if keras_file.kind != "keras-h5" or \
            keras_file.versions.get("keras_version", "3").startswith("3") else "2"
        has_config = keras_file.config is not None
        found = [keras_file.layer(n) for n in names]
        if not has_config:
            keras = import_keras(generation) if generation == "2" else _any_keras()
            layers = [_built_from_tensors(keras, layer) for layer in found]
            return keras, layers, f"{_version(keras)}: layers built from the weights-only file's tensors"
    keras = import_keras(generation)
    custom = {}
    if generation == "2":
        from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
        from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

        custom = {"CuDNNLSTM": CuDNNLSTM, "CuDNNGRU": CuDNNGRU}
    try:
        kwargs = {"safe_mode": True} if generation == "3" else {}
        model = keras.models.load_model(path, compile=False, custom_objects=custom, **kwargs)
    except Exception as exc:  # noqa: BLE001 -- Keras raises anything; the message says what
        raise BadInput(f"{_version(keras)} cannot load {path} to run it ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0][:200]})") from None
    by_name = {layer.name: layer for layer in recurrent_layers(model)}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise BadInput(f"Keras loaded {path} but found no layer {missing[0]!r} in it")
    return keras, [by_name[n] for n in names], f"{_version(keras)}: keras.models.load_model"


def _any_keras() -> Any:
    try:
        return import_keras("3")
    except BackendMissing:
        return import_keras("2")


def _version(keras: Any) -> str:
    return f"{keras.__name__} {getattr(keras, '__version__', '?')}"


def _built_from_tensors(keras: Any, found: Any) -> Any:
    """A Keras layer of the inferred class holding the stored tensors as they are."""
    cls = {"CuDNNLSTM": "LSTM", "CuDNNGRU": "GRU"}.get(found.source_class, found.source_class)
    if found.source_class in CUDNN_CLASSES:
        raise BadInput("a weights-only file of CuDNNLSTM/CuDNNGRU layers cannot be run without its model")
    config = {k: found.config[k] for k in ("units", "use_bias", "reset_after") if k in found.config}
    layer = getattr(keras.layers, cls)(**config, name=found.name.replace("/", "_"))
    if found.wrapper == "Bidirectional":
        layer = keras.layers.Bidirectional(layer)
    from rnnconv.formats.keras import stored_arrays

    stored = [array for tensors in found.tensors for array in stored_arrays(tensors)]
    layer.build((None, None, stored[0].shape[0]))
    layer.set_weights(stored)
    return layer
