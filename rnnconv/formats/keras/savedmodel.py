"""SavedModel directories and TF2 object-based checkpoints, read without TensorFlow.

Both keep their variables in a tensor bundle (a SavedModel's `variables/variables.index` and its data files; a
checkpoint's `X.index`), read by the TF1 format's bundle reader. Under the key `_CHECKPOINTABLE_OBJECT_GRAPH` the
bundle holds a `TrackableObjectGraph` proto: every variable's `full_name`, the name Keras gave it
(`encoder/lstm_cell/kernel`, `bidi/backward_gru/gru_cell/bias`, a Keras 3 model's `gru/gru_cell/kernel`), and the
bundle key its value is under. A recurrent layer is the variables a cell scope holds, named by its layer path;
which layer is which Keras class with which settings is said by the model config tf-keras writes into
`keras_metadata.pb` (a `SavedMetadata` proto: each Keras object's JSON metadata, the root's holding the model
config), read by the Keras reader's own config walk. A Keras 3 `export` and a checkpoint hold no config: their
layers are told by their tensors' shapes, and the settings that shapes do not tell must be stated
(`--activation`, `--recurrent-activation`): nothing is assumed. Protobufs are read by the bundle reader's bounded
wire reader; `saved_model.pb` itself (graphs, functions) is never parsed or run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, RnnconvError
from rnnconv.formats.keras.config import (
    ROLE_OF_NAME,
    ConfigEntry,
    KerasLayer,
    inferred_layer,
    pick_layer,
    walk_config,
)
from rnnconv.formats.keras.hdf5 import TensorReader, check_tensor
from rnnconv.formats.keras.wire import (
    KERAS_DIRECTION_PREFIXES,
    KERAS_METADATA,
    OBJECT_GRAPH_KEY,
    SAVED_MODEL,
    SAVED_MODEL_VARIABLES,
    VALUE_ATTRIBUTE,
)
from rnnconv.formats.tf1.tensor_bundle import (
    LENGTH,
    VARINT,
    Checkpoint,
    Corrupt,
    _embedded,
    _message,
    data_files,
    read_table,
)
from rnnconv.formats.tf1.wire import index_file
from rnnconv.safeio.inputs import add_guard, json_document, read_array, regular_file, unchanged
from rnnconv.table.constants import DIRECTION_WORDS, MAX_LAYERS

GRAPH_LIMIT = 64 << 20  # bytes of an object graph or of keras_metadata.pb: names and JSON, no values
NODE_LIMIT = 1 << 20  # objects in a graph
UNRECORDED = "{what} keeps no layer configs (only variables and the object graph naming them)"
DIRECTION_PREFIXES = tuple(f"{side}_" for side in KERAS_DIRECTION_PREFIXES)  # Bidirectional's forward_gru, ...


def saved_model_in(folder: Path) -> Path | None:
    """The saved_model.pb a SavedModel directory holds, else None."""
    found = folder / SAVED_MODEL
    return found if folder.is_dir() and os.path.lexists(found) else None


def is_object_checkpoint(index: Path) -> bool:
    """Whether a checkpoint's index holds a TF2 object graph (a TF1 Saver's has none)."""
    try:
        return any(key == OBJECT_GRAPH_KEY.encode() for key, _ in read_table(index))
    except BadInput:
        return False


class BundleTensor:
    """A variable in the bundle, as the Keras reader takes a stored tensor: shape, dtype and values when asked."""

    def __init__(self, checkpoint: Checkpoint, key: str, full_name: str):
        self.checkpoint, self.key, self.name = checkpoint, key, full_name
        self.shape: tuple[int, ...] = checkpoint.shapes[key]
        self.ndim, self.size = len(self.shape), int(np.prod(self.shape, dtype=np.int64))
        dtype = checkpoint.dtypes[key]
        self.dtype = np.dtype("float32" if dtype == "bfloat16" else dtype if dtype.startswith("float") else "V1")
        # (bfloat16 is read widened to float32, exactly; any other type is refused by its name, before use)
        self.attrs: dict[str, Any] = {}  # what the Keras reader asks of an HDF5 dataset
        self.copies: list[str] = []  # other keys the graph gives the same variable (a Keras 3 export lists each twice)

    def __getitem__(self, index: Any) -> np.ndarray:
        values = self.checkpoint.tensor(self.key)
        for key in self.copies:  # which one TensorFlow's functions use is theirs to say: they must agree
            if not np.array_equal(self.checkpoint.tensor(key), values, equal_nan=True):
                raise BadInput(
                    f"{self.checkpoint.index}: the object graph gives variable {self.name[:200]!r} two values "
                    f"({self.key[:100]} and {key[:100]}) that differ"
                )
        return values[index]


def _graph_variables(checkpoint: Checkpoint) -> list[tuple[str, str]]:
    """(full_name, bundle key) of every variable the object graph names, in its order."""
    data = checkpoint.string(OBJECT_GRAPH_KEY, GRAPH_LIMIT)
    if data is None:
        raise BadInput(
            f"{checkpoint.index} holds no TF2 object graph ({OBJECT_GRAPH_KEY}), so nothing says which variable "
            f"is which layer's"
        )
    variables = []
    try:
        nodes = _message(data, {1: LENGTH}).get(1, [])
        if len(nodes) > NODE_LIMIT:
            raise Corrupt(f"it names {len(nodes)} objects")
        for node in nodes:
            assert isinstance(node, bytes)
            for attribute in _message(node, {2: LENGTH}).get(2, []):
                assert isinstance(attribute, bytes)
                fields = _message(attribute, {1: LENGTH, 2: LENGTH, 3: LENGTH})
                if _text(fields, 1) == VALUE_ATTRIBUTE:
                    variables.append((_text(fields, 2), _text(fields, 3)))
    except (Corrupt, UnicodeDecodeError) as exc:
        raise BadInput(f"{checkpoint.index}: its object graph ({OBJECT_GRAPH_KEY}) is damaged ({exc})") from None
    for full_name, key in variables:
        if key not in checkpoint.shapes:
            raise BadInput(
                f"{checkpoint.index}: its object graph puts variable {full_name[:200]!r} under {key[:200]!r}, "
                f"which the checkpoint does not hold"
            )
    return variables


def _text(fields: dict[int, list[int | bytes]], number: int) -> str:
    return _embedded(fields, number).decode()


def _layer_cells(checkpoint: Checkpoint, variables: list[tuple[str, str]]) -> dict[str, list[dict[str, BundleTensor]]]:
    """Layer path -> its cells' tensors per direction (forward first): variables grouped by their cell scope."""
    cells: dict[str, dict[str, BundleTensor]] = {}
    for full_name, key in variables:
        parent, _, leaf = full_name.rpartition("/")
        role = ROLE_OF_NAME.get(leaf)
        if not role or not parent:
            continue
        held = cells.setdefault(parent, {}).get(role)
        if held is None:
            cells[parent][role] = BundleTensor(checkpoint, key, full_name)
        elif key != held.key and key not in held.copies:
            if checkpoint.shapes[key] != held.shape:
                raise BadInput(
                    f"{checkpoint.index}: the object graph gives variable {full_name[:200]!r} values of two shapes "
                    f"({list(held.shape)} under {held.key[:100]}, {list(checkpoint.shapes[key])} under {key[:100]})"
                )
            held.copies.append(key)
    layers: dict[str, dict[int, dict[str, BundleTensor]]] = {}
    for parent, roles in cells.items():
        parts = parent.split("/")
        if len(parts) > 1 and parts[-1].endswith("_cell"):  # lstm_cell, gru_cell, simple_rnn_cell
            parts = parts[:-1]
        side = 0
        if len(parts) > 1 and parts[-1].startswith(DIRECTION_PREFIXES):
            side = int(parts[-1].startswith(DIRECTION_PREFIXES[1]))
            parts = parts[:-1]
        sides = layers.setdefault("/".join(parts), {})
        if side in sides:
            raise BadInput(
                f"{checkpoint.index}: layer {'/'.join(parts)[:200]!r} holds two {DIRECTION_WORDS[side]} "
                f"cells' variables, so it is no one recurrent layer"
            )
        sides[side] = roles
    if len(layers) > MAX_LAYERS * 16:
        raise BadInput(f"{checkpoint.index} holds {len(layers)} layers' variables, more than rnnconv reads")
    return {path: [sides[s] for s in sorted(sides)] for path, sides in layers.items() if 0 in sides}


def _keras_metadata(path: Path) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The model config tf-keras wrote into keras_metadata.pb (the root object's, else one made of the top-level
    layers' own), and the Keras version it names; (None, {}) where there is no such file."""
    if not os.path.lexists(path):
        return None, {}
    size = regular_file(path, "the SavedModel's keras_metadata.pb")
    if size > GRAPH_LIMIT:
        raise BadInput(f"{path} is {size} bytes, more than a SavedModel's Keras metadata needs")
    data = read_array(path, 0, np.uint8, (size,)).tobytes()
    objects: dict[str, dict[str, Any]] = {}
    try:
        nodes = _message(data, {1: LENGTH}).get(1, [])
        if len(nodes) > NODE_LIMIT:
            raise Corrupt(f"it names {len(nodes)} objects")
        for node in nodes:
            assert isinstance(node, bytes)
            fields = _message(node, {2: VARINT, 3: LENGTH, 4: LENGTH, 5: LENGTH})
            where = _text(fields, 3)
            meta = (
                json_document(_embedded(fields, 5), f"{path}: the metadata of {where[:100]!r}") if 5 in fields else {}
            )
            if not isinstance(meta, dict):
                raise BadInput(f"{path}: the metadata of {where[:100]!r} is not a JSON object")
            objects[where] = meta
    except (Corrupt, UnicodeDecodeError) as exc:
        raise BadInput(f"{path} is damaged ({exc})") from None
    root = objects.get("root", {})
    version = root.get("keras_version")
    versions = {"keras_version": version[:100]} if isinstance(version, str) else {}
    config = root.get("config")
    if isinstance(config, dict) and "layers" in config:
        return root, versions
    # a subclassed model: its config is not Keras', but each of its layers' own is beside it
    top = [meta for where, meta in objects.items() if where.count(".") == 1 and "class_name" in meta]
    return {"class_name": "Model", "config": {"layers": top}}, versions


def _saved_model_folder(path: Path) -> Path | None:
    """The SavedModel directory whose saved_model.pb or variables index `path` is, else None."""
    if path.name == SAVED_MODEL:
        return path.parent
    folder = path.parent.parent
    in_folder = path.parent.name + "/" + path.name == SAVED_MODEL_VARIABLES + ".index"
    return folder if in_folder and saved_model_in(folder) else None


def source_parts(path: Path) -> list[Path]:
    """The files besides `path` that reading a SavedModel or a TF2 checkpoint reads: the other of saved_model.pb
    and the variables index, the data files, keras_metadata.pb where there is one."""
    folder = _saved_model_folder(path)
    if folder is None:
        return [part for part in [index_file(path), *data_files(path)] if part != path]
    index = folder / (SAVED_MODEL_VARIABLES + ".index")
    metadata = [folder / KERAS_METADATA] if os.path.lexists(folder / KERAS_METADATA) else []
    return [part for part in [folder / SAVED_MODEL, index, *data_files(index), *metadata] if part != path]


class ObjectFile:
    """A SavedModel or a TF2 checkpoint, open: its kind, versions, config and recurrent layers, as a KerasFile."""

    def __init__(self, path: Path):
        self.path = path
        self.reader = TensorReader()
        self.activations: dict[str, str] = {}  # what rnnconv records in files it writes: none here
        self.records: dict[str, Any] = {}
        self.shown: dict[str, dict[str, str]] = {}  # by layer: the settings its serving graph shows
        self.versions: dict[str, str] = {}
        self.config: dict[str, Any] | None = None
        folder = _saved_model_folder(path)  # a SavedModel's variables/variables.index is read as its SavedModel
        if folder is not None:
            self.kind = "keras-savedmodel"
            regular_file(folder / SAVED_MODEL, "the SavedModel's saved_model.pb")
            index = folder / (SAVED_MODEL_VARIABLES + ".index")
            if not os.path.lexists(index):
                raise BadInput(f"{folder} is a SavedModel without variables ({SAVED_MODEL_VARIABLES}.index)")
            add_guard(unchanged(index))  # the files read beside the source: one that changes commits nothing
            if os.path.lexists(folder / KERAS_METADATA):
                add_guard(unchanged(folder / KERAS_METADATA))
            self.config, self.versions = _keras_metadata(folder / KERAS_METADATA)
            what = f"the SavedModel {folder} (a Keras 3 export or another TensorFlow program's)"
        else:
            self.kind, index = "tf2-checkpoint", path
            what = f"the TF2 checkpoint {path}"
        self.checkpoint = Checkpoint.open(index)
        groups = _layer_cells(self.checkpoint, _graph_variables(self.checkpoint))
        if self.config is not None:
            self.layers = [self._configured(entry, groups) for entry in walk_config(self.config)]
        else:
            self.layers = list(_inferred(groups, UNRECORDED.format(what=what)))
            if folder is not None:
                self._read_activations(folder / SAVED_MODEL)
        limit = 2 * sum(shard.stat().st_size for shard in self.checkpoint.shards)  # bfloat16 is read widened
        for layer in self.layers:
            layer.keras_version = self.versions.get("keras_version")
            for tensors in [] if layer.refusal else layer.tensors:
                for role, tensor in tensors.items():
                    what = f"{self.path}: {layer.name} {role} ({tensor.name[:200]})"
                    if tensor.dtype.kind != "f":  # TensorFlow's name of its type, which numpy may have none for
                        stored = self.checkpoint.dtypes[tensor.key]
                        raise BadInput(f"{what} holds {stored} values, not floating point numbers")
                    check_tensor(tensor, what, limit)

    def _read_activations(self, saved_model: Path) -> None:
        """The activations of the layers of each class, where the serving graph's loop bodies of that class are
        as many as those layers' cells and agree (`serving`): set as if a config said them, and noted."""
        from rnnconv.formats.keras.serving import loop_activations

        bodies = loop_activations(saved_model)
        for layer_class, read in bodies.items():
            layers = [layer for layer in self.layers if layer.source_class == layer_class and not layer.refusal]
            if len(read) != sum(len(layer.tensors) for layer in layers) or len(set(read)) != 1:
                continue
            activation, recurrent = read[0]
            settings = {"activation": activation} | ({"recurrent_activation": recurrent} if recurrent else {})
            for layer in layers:
                layer.config.update(settings)
                layer.inferred, layer.unrecorded = False, None
                self.shown[layer.name] = settings

    def _configured(self, entry: ConfigEntry, groups: dict[str, list[dict[str, BundleTensor]]]) -> KerasLayer:
        def tensors() -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
            held = [p for p in groups if entry.name in (p, p.rsplit("/", 1)[-1])]
            if len(held) != 1:
                found = f"variables of {len(held)} layers of that name" if held else "no variables for it"
                raise BadInput(f"{self.path}: the config names layer {entry.name!r}, and the checkpoint holds {found}")
            cells = groups[held[0]]
            if len(cells) != (2 if entry.wrapper == "Bidirectional" else 1):
                raise BadInput(
                    f"{self.path}: layer {entry.name!r} holds {len(cells)} cells, not a {entry.display_class}"
                )
            return cells, [{role: f"{t.name} ({t.key})" for role, t in cell.items()} for cell in cells]

        if not entry.refusal:
            return entry.layer(*tensors())
        try:  # a layer that does not convert, with its tensors where they are found (for its sizes)
            return entry.layer(*tensors())
        except RnnconvError:
            return entry.layer([], [])

    def __enter__(self) -> ObjectFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def layer(self, name: str | None) -> KerasLayer:
        return pick_layer(self.layers, name, self.path)


def shown_notes(layer: KerasLayer, shown: dict[str, str], stated: dict[str, str | None]) -> list[str]:
    """What a layer's serving graph showed of its settings, in a note; a stated one that is not what it shows is
    refused (the graph is what the SavedModel computes)."""
    for key, value in shown.items():
        if stated.get(key) not in (None, value):
            raise BadInput(
                f"layer {layer.name!r}: {key} {stated[key]} was stated, but the SavedModel's serving graph applies "
                f"{value}: state none, the graph says it"
            )
    said = ", ".join(f"{key}={value}" for key, value in shown.items())
    return [
        f"{layer.name}: the SavedModel has no model config; class {layer.display_class} was inferred from tensor "
        f"shapes, and {said} read from its serving graph's loop bodies"
    ]


def _inferred(groups: dict[str, list[dict[str, BundleTensor]]], unrecorded: str) -> Iterator[KerasLayer]:
    """The recurrent layers of a bundle without a config, told by their tensors' shapes: each setting the shapes do
    not tell is refused unless stated."""
    for path, cells in groups.items():
        names = [{role: f"{t.name} ({t.key})" for role, t in cell.items()} for cell in cells]
        layer = inferred_layer(path, list(cells), names, named=True)
        if layer is None:
            continue
        layer.unrecorded = unrecorded
        if layer.source_class == "GRU" and "bias" not in cells[0] and not layer.refusal:
            layer.refusal = (
                f"{unrecorded}, and a GRU without a bias does not show whether it is reset_after=True (cuDNN's) or "
                f"reset_after=False; convert the SavedModel or .h5/.keras that tf-keras saves with its config"
            )
        yield layer
