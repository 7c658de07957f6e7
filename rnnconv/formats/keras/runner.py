"""Run a Keras source layer in Keras itself (CPU), for `verify` to compare a blob with.

Nothing of the file's model config is deserialised: no `load_model`, no
`from_config` of the file's layers, no custom objects, so a Lambda layer or a
pickled function in the file never runs. Each recurrent layer is built from
what rnnconv's own reader parsed (class, units, activations, bias, reset_after,
dtype), holds the file's stored tensors, and runs through a copy that returns
its states. Keras 2 / tf-keras files run in tf-keras, others in Keras 3.
tf-keras' CuDNNLSTM/CuDNNGRU cannot run on a CPU; they run as the LSTM/GRU that
Keras' own loader converts their weights into.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BackendMissing, BadInput
from rnnconv.formats.keras.wire import KERAS_INITIALIZERS
from rnnconv.formats.runtimes import native_stderr_silenced
from rnnconv.table.apply import classes_of, find_row, settings_for_mode
from rnnconv.table.constants import KERAS_VARIABLES

if TYPE_CHECKING:
    from rnnconv.formats.keras.config import KerasLayer

# Classes that hold cuDNN's own buffers (no CPU kernel); each runs as the plain class of its cuDNN mode.
CUDNN_CLASSES = tuple(c for c in classes_of("keras") if find_row("keras", c).matrix.cudnn_buffer)
# Settings that change what a layer computes; anything else in a config is training or bookkeeping.
COMPUTING_SETTINGS = ("activation", "recurrent_activation", "use_bias", "reset_after")
KERNEL = KERAS_VARIABLES["input_matrix"]  # the attribute a built Keras layer (or its cell) holds it in
DTYPE_POLICIES = ("float32", "float64", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16")


def import_keras(generation: str) -> Any:
    """Keras 3 (`keras`) or Keras 2 (`tf_keras`), quietly; BackendMissing when absent."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    name = "keras" if generation == "3" else "tf_keras"
    try:
        with native_stderr_silenced():  # TensorFlow's C++ start-up, before any setting can stop it
            module = importlib.import_module(name)
    except ImportError:
        hint = (
            "pip install 'rnnconv[keras]'"
            if name == "keras"
            else "pip install 'rnnconv[keras]' && pip install --no-deps tf-keras: tf-keras asks for the full "
            "tensorflow wheel, a second TensorFlow beside tensorflow-cpu"
        )
        raise BackendMissing(
            f"running this Keras {generation} source needs {name}, which is not installed ({hint})"
        ) from None
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


def cell_input_size(layer: Any) -> int:
    holder = layer if hasattr(layer, KERNEL) else layer.cell
    return int(getattr(holder, KERNEL).shape[0])


def _plain(keras: Any, layer: Any) -> Any:
    """A fresh layer that runs on the CPU, computes what `layer` computes and returns its states."""
    cls = layer.__class__.__name__
    if cls in CUDNN_CLASSES:
        plain, settings = settings_for_mode("keras", find_row("keras", cls).modes["tanh"])
        return getattr(keras.layers, plain)(layer.units, return_sequences=True, return_state=True, **settings)
    config = layer.get_config()
    config.update(return_sequences=True, return_state=True, go_backwards=False, name=config["name"] + "_probe")
    return layer.__class__.from_config(config)


def _weights(keras: Any, layer: Any, plain: Any) -> list[np.ndarray]:
    weights = [np.asarray(v) for v in layer.get_weights()]
    if layer.__class__.__name__ in CUDNN_CLASSES:
        weights = keras_converts_cudnn(keras, plain, weights, cell_input_size(layer))
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
        raise BackendMissing(
            "running a CuDNNLSTM/CuDNNGRU source on a CPU needs tf-keras' weight conversion "
            "(pip install --no-deps tf-keras)"
        )
    plain.build((None, None, n_in))
    return module._convert_rnn_weights(plain, weights)


def run_layer(
    keras: Any, layer: Any, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, lengths: np.ndarray | None = None
) -> dict[str, np.ndarray | None]:
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
        states += [tf.constant(h0[d])] + ([tf.constant(c0[d])] if lstm and c0 is not None else [])
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


# --- building the source layers from what rnnconv parsed -----------------------------------------


def run_source(
    path: Path,
    names: list[str],
    spec: RNNSpec,
    inputs: dict[str, np.ndarray | None],
    converted_with: Mapping[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray | None], str]:
    """The named layers' own y, h_n, c_n (sequence-major, cuDNN's shapes) and how they ran.

    Several names are layers stacked into one multi-layer RNN: each feeds the next.
    """
    keras, layers, how = load_source_layers(path, names, converted_with or {}, spec)
    dirs = spec.num_directions
    x = np.asarray(inputs["x"]).transpose(1, 0, 2)
    h0, c0 = np.asarray(inputs["h0"]), inputs["c0"]
    hs: list[np.ndarray] = []
    cs: list[Any] = []
    for k, layer in enumerate(layers):
        part = slice(k * dirs, (k + 1) * dirs)
        got = run_layer(keras, layer, x, h0[part], c0[part] if c0 is not None else None, inputs["lengths"])
        x = np.asarray(got["y"])
        hs.append(np.asarray(got["h_n"]))
        cs.append(got["c_n"])
    c_n = np.concatenate(cs) if cs[0] is not None else None
    return {"y": x.transpose(1, 0, 2), "h_n": np.concatenate(hs), "c_n": c_n}, how


def load_source_layers(
    path: Path, names: list[str], converted_with: Mapping[str, Any], spec: RNNSpec
) -> tuple[Any, list[Any], str]:
    """Keras, the named layers (built by rnnconv, holding the file's weights), and how they were obtained.

    Each layer is first read as a conversion would read it (every check applies), and must compute what
    the blob's spec says: a file changed, or not the blob's source, is refused before Keras sees it.
    """
    from rnnconv.core.contracts import Provenance
    from rnnconv.formats.keras.reader import opened, to_canonical

    with opened(path) as keras_file:
        found = [keras_file.layer(n) for n in names]
        for index, layer in enumerate(found):
            stated = {key: converted_with.get(key) for key in ("activation", "recurrent_activation")}
            read = to_canonical(layer, Provenance(), stated=stated).spec
            expected = (spec.mode, spec.layer_input_size(index), spec.hidden_size, spec.bidirectional, spec.bias)
            if (read.mode, read.input_size, read.hidden_size, read.bidirectional, read.bias) != expected:
                raise BadInput(
                    f"layer {layer.name!r} of {path} is a {read.describe()}, but the blob is a "
                    f"{spec.describe()}: the blob was not made from this file as it is now"
                )
        legacy = keras_file.kind in ("keras-h5", "keras-savedmodel") and not keras_file.versions.get(
            "keras_version", "3"
        ).startswith("3")
        keras = import_keras("2") if legacy or any(f.source_class in CUDNN_CLASSES for f in found) else _any_keras()
        layers = [_built(keras, layer, converted_with) for layer in found]
    what = "the file's tensors" if keras_file.config is None else "the file's tensors and parsed settings"
    return keras, layers, f"{_version(keras)}: layers built by rnnconv from {what}"


def _any_keras() -> Any:
    """Keras 3, else tf-keras: a file whose tensors either builds; with neither, one sentence naming both."""
    try:
        return import_keras("3")
    except BackendMissing as missing_3:
        try:
            return import_keras("2")
        except BackendMissing:
            if "Keras 3, but keras" in str(missing_3):  # a Keras 2 `keras` package: that is the news
                raise missing_3 from None
            raise BackendMissing(
                "running this Keras file needs Keras 3 or tf-keras, and neither is installed "
                "(pip install 'rnnconv[keras]')"
            ) from None


def _version(keras: Any) -> str:
    return f"{keras.__name__} {getattr(keras, '__version__', '?')}"


def _plain_value(found: KerasLayer, key: str, value: Any) -> Any:
    if isinstance(value, (str, bool)) or (isinstance(value, int) and key == "units"):
        return value
    raise BadInput(
        f"layer {found.name!r}: its {key} is {type(value).__name__} {str(value)[:60]!r}, which "
        f"verify cannot build a layer with"
    )


def _dtype(found: KerasLayer) -> str | None:
    """The layer's dtype policy name, when the config states a standard one."""
    value = found.config.get("dtype")
    if isinstance(value, dict):
        inner = value.get("config")
        value = inner.get("name") if isinstance(inner, dict) else None
    return value if value in DTYPE_POLICIES else None


def _built(keras: Any, found: KerasLayer, converted_with: Mapping[str, Any]) -> Any:
    """A Keras layer of the parsed class and settings, holding the stored tensors as they are.

    A layer from a weights file without a config takes the settings it does not store from those the
    blob was converted with (stated by the user, or assumed and recorded as such).
    """
    from rnnconv.formats.keras.hdf5 import stored_arrays

    row = find_row("keras", found.source_class, found.config)
    if found.inferred:
        found = dataclasses.replace(
            found, config={**found.config, **{k: converted_with[k] for k in row.unstored if k in converted_with}}
        )
    settings = {"units": _plain_value(found, "units", found.config.get("units"))}
    if found.source_class not in CUDNN_CLASSES:
        settings.update(
            {
                key: _plain_value(found, key, row.setting(found.config, key))
                for key in COMPUTING_SETTINGS
                if key in row.defaults
            }
        )
    dtype = _dtype(found)
    if dtype:
        settings["dtype"] = dtype
    # The file's tensors replace every weight: initializers that cost nothing (and exist for every dtype).
    settings.update(dict.fromkeys(KERAS_INITIALIZERS, "zeros"))
    name = "".join(c if c.isalnum() else "_" for c in found.name)
    stored = [array for tensors in found.tensors for array in stored_arrays(tensors)]
    try:
        layer = _layer_class(keras, found.source_class)(**settings, name=name)
        if found.wrapper == "Bidirectional":
            layer = keras.layers.Bidirectional(layer)
        layer.build((None, None, stored[0].shape[0]))
        layer.set_weights(stored)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BadInput(
            f"layer {found.name!r}: Keras cannot build it from the file's tensors ({str(exc).splitlines()[0][:200]})"
        ) from None
    return layer


def _layer_class(keras: Any, source_class: str) -> Any:
    if source_class not in CUDNN_CLASSES:
        return getattr(keras.layers, source_class)
    if not keras.__name__.startswith("tf_keras"):
        raise BackendMissing(f"running a {source_class} source needs tf-keras (pip install --no-deps tf-keras)")
    module = importlib.import_module(f"tf_keras.src.layers.rnn.{_snake(source_class)}")
    return getattr(module, source_class)


def _snake(source_class: str) -> str:
    """tf-keras' module of a CuDNN class: CuDNNLSTM -> cudnn_lstm."""
    return source_class.lower().replace("cudnn", "cudnn_")
