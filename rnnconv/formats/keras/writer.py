"""Writing canonical RNNs as Keras 3 files (`.keras` archive or `.weights.h5`), without Keras.

The model is a `Sequential`: one Keras layer per cuDNN layer (`LSTM`, `GRU` with
reset_after=True, `SimpleRNN`), wrapped in `Bidirectional` for two directions,
every layer returning sequences, so `model(x)` is cuDNN's output y. The files
follow what Keras 3 itself writes (config.json + model.weights.h5 with
`layers/<class>[_N]/cell/vars/{0,1,2}`), and the stored tensors come from the
Keras rows of the layout table.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.core.dtypes import element_type, encode
from rnnconv.errors import BadInput
from rnnconv.formats import _zip
from rnnconv.formats.keras.config import KerasLayer, snake_case
from rnnconv.formats.keras.hdf5 import is_bfloat16
from rnnconv.formats.keras.reader import KerasFile, to_canonical
from rnnconv.formats.keras.wire import KERAS_DIRECTION_GROUPS, KERAS_DIRECTION_PREFIXES
from rnnconv.formats.sources import SOURCE_KEY, recorded_source, source_records
from rnnconv.formats.writing import literal
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row, row_for_mode, settings_for_mode
from rnnconv.table.constants import KERAS_VARIABLES, NONLINEARITY_KEY, RNN

KERAS_VERSION = "3.15.1"  # the version whose file layout this writer follows


def _keras_name(text: str) -> str:
    name = re.sub(r"\W", "_", text).strip("_") or "rnn"
    return name if not name[0].isdigit() else f"rnn_{name}"


def _layer_config(spec: RNNSpec, name: str) -> dict[str, Any]:
    """The Keras layer config the table's row for this mode needs (activations, reset_after, ...)."""
    _, settings = settings_for_mode("keras", spec.mode, spec.reset_after)
    return {
        "name": name,
        "trainable": True,
        "dtype": _dtype_policy(spec),
        "return_sequences": True,
        "return_state": False,
        "go_backwards": False,
        "stateful": False,
        "unroll": False,
        "units": spec.hidden_size,
        **settings,
        "use_bias": spec.bias,
    }


def _dtype_policy(spec: RNNSpec) -> dict[str, Any]:
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": spec.dtype}, "registered_name": None}


def _entry(class_name: str, config: dict[str, Any], input_size: int, **extra: Any) -> dict[str, Any]:
    return {
        "module": "keras.layers",
        "class_name": class_name,
        "config": config,
        "registered_name": None,
        "build_config": {"input_shape": [None, None, input_size]},
        **extra,
    }


def model_config(rnns: list[CanonicalRNN]) -> dict[str, Any]:
    """A Sequential of the RNNs' layers, one after the other (a single RNN in the common case)."""
    spec0 = rnns[0].spec
    layers: list[dict[str, Any]] = [
        {
            "module": "keras.layers",
            "class_name": "InputLayer",
            "registered_name": None,
            "config": {
                "batch_shape": [None, None, spec0.input_size],
                "dtype": spec0.dtype,
                "sparse": False,
                "ragged": False,
                "name": "input_layer",
                "optional": False,
            },
        }
    ]
    for rnn in rnns:
        spec = rnn.spec
        for layer in range(spec.num_layers):
            name = layer_name(rnn, layer)
            cls = row_for_mode("keras", spec.mode, reset_after=spec.reset_after)[0].source_class
            config = _layer_config(spec, name)
            n_in = spec.layer_input_size(layer)
            if spec.bidirectional:
                inner = _entry(cls, {**config, "name": f"{KERAS_DIRECTION_PREFIXES[0]}_{name}"}, n_in)
                layers.append(
                    _entry(
                        "Bidirectional",
                        {
                            "name": name,
                            "trainable": True,
                            "dtype": _dtype_policy(spec),
                            "merge_mode": "concat",
                            "layer": inner,
                        },
                        n_in,
                    )
                )
            else:
                layers.append(_entry(cls, config, n_in))
    return {
        "module": "keras",
        "class_name": "Sequential",
        "registered_name": None,
        "config": {"name": "rnnconv", "trainable": True, "dtype": _dtype_policy(spec0), "layers": layers},
        "build_config": {"input_shape": [None, None, spec0.input_size]},
    }


def _layers(rnns: list[CanonicalRNN]) -> list[tuple[str, CanonicalRNN]]:
    """Each Keras layer's name, with the RNN it is a layer of."""
    return [(layer_name(rnn, layer), rnn) for rnn in rnns for layer in range(rnn.spec.num_layers)]


def layer_name(rnn: CanonicalRNN, layer: int) -> str:
    base = _keras_name(rnn.name)
    return base if rnn.spec.num_layers == 1 else f"{base}_layer{layer}"


def _write_weights(rnns: list[CanonicalRNN], h5: h5py.File, dtype: str, path: Path) -> None:
    etype = element_type(dtype)
    h5.create_group("vars").attrs["name"] = "rnnconv"
    # where each RNN came from (for `verify`), by its Keras layers: a,b for one of several layers
    groups = {",".join(layer_name(rnn, layer) for layer in range(rnn.spec.num_layers)): rnn for rnn in rnns}
    h5.attrs[SOURCE_KEY] = source_records({where: recorded_source(rnn, path) for where, rnn in groups.items()})
    # a SimpleRNN's activation, which a .weights.h5 (no model config) does not store otherwise
    activations = {layer: rnn.spec.nonlinearity for layer, rnn in _layers(rnns) if rnn.spec.cell == RNN}
    if activations:
        h5.attrs[NONLINEARITY_KEY] = json.dumps(activations)
    layers = h5.create_group("layers")
    used: dict[str, int] = {}
    for rnn in rnns:
        spec = rnn.spec
        row, _ = row_for_mode("keras", spec.mode, reset_after=spec.reset_after)
        cls = "bidirectional" if spec.bidirectional else snake_case(row.source_class)
        for layer in range(spec.num_layers):
            index = used.get(cls, 0)
            used[cls] = index + 1
            group = layers.create_group(cls + (f"_{index}" if index else ""))
            group.create_group("vars").attrs["name"] = layer_name(rnn, layer)
            for direction in range(spec.num_directions):
                holder = group
                if spec.bidirectional:
                    holder = group.create_group(KERAS_DIRECTION_GROUPS[direction])
                    holder.create_group("vars").attrs["name"] = (
                        f"{KERAS_DIRECTION_PREFIXES[direction]}_{layer_name(rnn, layer)}"
                    )
                stored = rnn.stored(row, layer, direction)
                cell_vars = holder.create_group("cell").create_group("vars")
                cell_vars.attrs["name"] = f"{snake_case(row.source_class)}_cell"
                for index_var, role in enumerate(KERAS_VARIABLES):
                    if role not in stored:  # use_bias=False
                        continue
                    words = encode(stored[role], etype)
                    if etype.name == "bfloat16":
                        dataset = cell_vars.create_dataset(str(index_var), data=words.view(np.dtype("V2")))
                        dataset.attrs["dtype"] = "bfloat16"
                    else:
                        cell_vars.create_dataset(str(index_var), data=words)


def write_keras(rnns: list[CanonicalRNN], path: Path, dtype: str | None = None, force: bool = False) -> None:
    """A `.keras` archive that keras.models.load_model opens, or the `.weights.h5` inside one."""
    if not rnns:
        raise BadInput("nothing to write")
    for before, after in itertools.pairwise(rnns):
        if after.spec.input_size != before.spec.num_directions * before.spec.output_size:
            raise BadInput(
                f"{after.name} takes {after.spec.input_size} inputs but {before.name} gives "
                f"{before.spec.num_directions * before.spec.output_size}: they do not stack into one "
                f"Keras model; convert one at a time (--layer)"
            )
    dtype = dtype or rnns[0].spec.dtype
    rnns = [
        CanonicalRNN(
            r.name, RNNSpec(**{**r.spec.to_dict(), "dtype": dtype}), r.loaders, r.source, r.notes, digest=r.digest
        )
        for r in rnns
    ]
    name = path.name
    if name.endswith(".weights.h5"):
        with atomic_outputs([path], force) as (tmp,), h5py.File(tmp, "w") as h5:
            _write_weights(rnns, h5, dtype, path)
        return
    if path.suffix != ".keras":
        raise BadInput(f"output {path} must end in .keras or .weights.h5 for Keras")
    weights = io.BytesIO()
    with h5py.File(weights, "w") as h5:
        _write_weights(rnns, h5, dtype, path)
    write_archive(path, model_config(rnns), weights.getvalue(), force)


def write_archive(path: Path, config: dict[str, Any], weights: bytes, force: bool = False) -> None:
    """A `.keras` archive as Keras 3 saves one: its metadata, the model's config and its weights file."""
    metadata = {"keras_version": KERAS_VERSION, "date_saved": time.strftime("%Y-%m-%d@%H:%M:%S")}
    with atomic_outputs([path], force) as (tmp,), zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("metadata.json", json.dumps(metadata))
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("model.weights.h5", weights)


def loading_snippet(rnns: list[CanonicalRNN], path: Path) -> str:
    """How to use what `write_keras` wrote."""
    spec = rnns[-1].spec
    run = (
        f"y = model(x)   # x (batch, time, {rnns[0].spec.input_size}), y (batch, time, "
        f"{spec.num_directions * spec.hidden_size}): cuDNN's y, batch first"
    )
    if path.suffix == ".keras":
        return f"import keras\nmodel = keras.models.load_model({literal(path)})\n{run}"
    lines = [f"import keras\nmodel = keras.Sequential([keras.Input((None, {rnns[0].spec.input_size})),"]
    for rnn in rnns:
        spec = rnn.spec
        for _layer in range(spec.num_layers):
            row, activation = row_for_mode("keras", spec.mode, reset_after=spec.reset_after)
            cls = row.source_class
            args = [str(spec.hidden_size), "return_sequences=True"] + ([] if spec.bias else ["use_bias=False"])
            if activation != "tanh":
                args.append(f"activation='{activation}'")
            inner = f"keras.layers.{cls}({', '.join(args)})"
            lines.append(f"    keras.layers.Bidirectional({inner})," if spec.bidirectional else f"    {inner},")
    lines.append("])")
    lines.append(f"model.load_weights({literal(path)})")
    return "\n".join([*lines, run])


def patch_keras_file(
    rnns: list[CanonicalRNN], places: list[Provenance | None], model: Path, path: Path, force: bool = False
) -> None:
    """A copy of the Keras file `model` with each RNN's weights written over those of its Keras layers (`places`
    name them: a layer, `a,b` or a stack for several cuDNN layers; None: its only recurrent layer). Nothing else
    changes: every dataset keeps its shape and dtype, the archive its other members."""
    patches: dict[str, np.ndarray] = {}
    with KerasFile(model) as keras_file:
        sources = dict(keras_file.records)  # the copy records each RNN written into it in place of what it replaces
        for rnn, place in zip(rnns, places):
            names = None if place is None else place.stacked or (place.layer or "").split(",")
            layers = [keras_file.layer(None)] if names is None else [keras_file.layer(n.strip()) for n in names]
            if len(layers) != rnn.spec.num_layers:
                raise BadInput(
                    f"{rnn.name} has {rnn.spec.num_layers} layers and {len(layers)} Keras layers of {model} were named "
                    f"for it; name one per layer with --layer a,b"
                )
            for index, layer in enumerate(layers):
                _patch_layer(rnn, index, layer, keras_file, patches)
            group = [layer.name for layer in layers]
            sources = {where: s for where, s in sources.items() if not set(where.split(",")) & set(group)}
            sources[",".join(group)] = recorded_source(rnn, path)
        archive = keras_file.kind == "keras-archive"
    with atomic_outputs([path], force) as (tmp,):
        if archive:
            _patched_archive(model, tmp, patches, sources)
        else:
            shutil.copyfile(model, tmp)
            with h5py.File(tmp, "r+") as h5:
                _write_patches(h5, patches, sources)


def _patch_layer(
    rnn: CanonicalRNN, index: int, layer: KerasLayer, keras_file: KerasFile, patches: dict[str, np.ndarray]
) -> None:
    """The new values of one Keras layer's datasets (by HDF5 path), from cuDNN layer `index` of `rnn`."""
    what = f"layer {layer.name!r} of {keras_file.path}"
    held = to_canonical(layer, Provenance(), reader=keras_file.reader).spec
    if (held.mode, held.bidirectional) != (rnn.spec.mode, rnn.spec.bidirectional):
        raise BadInput(f"{what} is a {held.describe()}; {rnn.name} is a {rnn.spec.describe()}")
    row = find_row("keras", layer.source_class, layer.config)
    for direction, datasets in enumerate(layer.tensors):
        stored = rnn.stored(row, index, direction)
        if set(stored) != set(datasets):
            raise BadInput(f"{what} stores {', '.join(datasets)}; {rnn.name} gives {', '.join(stored)}")
        for role, dataset in datasets.items():
            label = layer.tensor_names[direction].get(role, role)
            if tuple(dataset.shape) != stored[role].shape:
                raise BadInput(f"{what}: {label} has shape {dataset.shape}, and {rnn.name} gives {stored[role].shape}")
            if dataset.name in patches:
                raise BadInput(f"two RNNs of the source would replace {what}")
            bfloat16 = element_type("bfloat16")
            patches[dataset.name] = (
                encode(stored[role], bfloat16).view(dataset.dtype)  # 2-byte words, as Keras 3 stores them
                if is_bfloat16(dataset)
                else stored[role].astype(dataset.dtype)
            )


def _write_patches(h5: h5py.File, patches: dict[str, np.ndarray], sources: dict[str, Provenance]) -> None:
    for name, values in patches.items():
        h5[name][...] = values
    h5.attrs[SOURCE_KEY] = source_records(sources)


def _patched_archive(model: Path, path: Path, patches: dict[str, np.ndarray], sources: dict[str, Provenance]) -> None:
    """The .keras archive `model` copied member by member, its model.weights.h5 patched (and what it records of
    its RNNs' sources)."""
    with zipfile.ZipFile(model) as source, zipfile.ZipFile(path, "w") as copy:
        for info in source.infolist():  # each member was checked when the model was read
            data = _zip.read_member(source, info.filename, model)
            if info.filename == "model.weights.h5":
                weights = io.BytesIO(data)
                with h5py.File(weights, "r+") as h5:
                    _write_patches(h5, patches, sources)
                data = weights.getvalue()
            copy.writestr(info, data)
