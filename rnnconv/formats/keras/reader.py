"""Reading Keras files with h5py, zipfile and json alone (no TensorFlow, Keras or torch).

Handles legacy HDF5 (`model.save('m.h5')` and `save_weights`) from Keras 2,
tf-keras and Keras 3; Keras 3 `.weights.h5`; and `.keras` archives. Layers may be
plain, `Bidirectional`, `RNN(cell)`, nested in sub-models, or tf-keras'
`CuDNNLSTM`/`CuDNNGRU`. Every recurrent layer becomes a `KerasLayer`: its class,
config and stored tensors; `to_canonical` turns one into the canonical form
through the Keras rows of the layout table.
"""

from __future__ import annotations

import io
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import Provenance
from rnnconv.dtypes import source_dtype_name
from rnnconv.errors import BadInput, Unsupported, first_line, no_such_rnn
from rnnconv.formats import _zip
from rnnconv.formats.registry import HDF5_MAGIC, ZIP_MAGIC
from rnnconv.safeio import Guard, add_guard, checksum_guard, json_document, regular_file, within
from rnnconv.table.apply import check_shapes, classes_of, find_row, gate_loaders, mode_for, rows_for, stored_shapes
from rnnconv.table.constants import KERAS_CELLS, KERAS_DIRECTION_GROUPS, KERAS_VARIABLES
from rnnconv.table.rows import DEFAULT_BIAS_SPLIT
from rnnconv.transpose import transposed

RECURRENT_CLASSES = set(classes_of("keras"))
ROLE_OF_NAME = {name: role for role, name in KERAS_VARIABLES.items()}


@dataclass
class KerasLayer:
    name: str
    source_class: str  # LSTM, GRU, SimpleRNN, CuDNNLSTM or CuDNNGRU (the cell's layer class)
    config: dict[str, Any]
    tensors: list[dict[str, Any]]  # per direction: role -> h5py dataset
    tensor_names: list[dict[str, str]]  # per direction: role -> name in the file
    wrapper: str | None = None  # "Bidirectional", "RNN" or None
    extra: dict[str, Any] = field(default_factory=dict)  # merge_mode, go_backwards, ...
    inferred: bool = False  # class and activations guessed from a bare weights file

    @property
    def bidirectional(self) -> bool:
        return len(self.tensors) == 2

    @property
    def display_class(self) -> str:
        return f"{self.wrapper}({self.source_class})" if self.wrapper else self.source_class


class KerasFile:
    """An open Keras file: its kind, versions, model config and recurrent layers."""

    def __init__(self, path: Path):
        self.path = path
        self.size = regular_file(path)
        self.reader = TensorReader(path)  # shared by every layer: one tensor in memory at a time
        self._closers: list[Any] = []
        self.config: dict[str, Any] | None = None
        self.versions: dict[str, str] = {}
        self.limit = self.size  # no tensor can hold more bytes than its file (Keras never compresses datasets)
        try:
            self.kind, root = self._open()
            self.layers = self._find_layers(root)
        except BadInput as exc:
            self.close()
            if str(path) in str(exc):
                raise
            raise BadInput(f"{path}: {exc}") from None
        except DAMAGED as exc:  # what h5py and zipfile raise on damaged files, and walking odd structures
            self.close()
            raise BadInput(
                f"{path}: the file is damaged or not laid out as Keras writes it ({first_line(exc)})"
            ) from None
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> KerasFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for closer in reversed(self._closers):
            closer.close()
        self._closers.clear()

    def layer(self, name: str | None) -> KerasLayer:
        if name is None:
            if len(self.layers) == 1:
                return self.layers[0]
            if not self.layers:
                raise BadInput(f"{self.path} has no recurrent layer (LSTM, GRU, SimpleRNN, CuDNNLSTM, CuDNNGRU)")
            raise BadInput(
                f"{self.path} has {len(self.layers)} recurrent layers; pick one with --layer "
                f"({', '.join(found.name for found in self.layers)}), or write them all to a .safetensors"
            )
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise no_such_rnn(f"{self.path} has no recurrent layer named", name, [found.name for found in self.layers])

    # --- opening ----------------------------------------------------------------------------

    def _open(self) -> tuple[str, h5py.Group]:
        path = self.path
        with open(path, "rb") as f:
            head = f.read(8)
        if head.startswith(ZIP_MAGIC):
            return "keras-archive", self._open_archive()
        if head != HDF5_MAGIC:
            raise BadInput(f"{path} is not a Keras file: neither HDF5 (.h5, .weights.h5) nor a .keras archive")
        h5 = self._h5(path)
        if "model_config" in h5.attrs or "model_weights" in h5 or "layer_names" in h5.attrs:
            self.config = _json_attr(h5, "model_config", path)
            self.versions = {k: _text(h5.attrs[k])[:100] for k in ("keras_version", "backend") if k in h5.attrs}
            self.reader.hdf5_at = 0
            return "keras-h5", h5
        if "layers" in h5 or "vars" in h5:
            self.reader.hdf5_at = 0
            return "keras-weights-h5", h5
        raise BadInput(
            f"{path} is an HDF5 file but not a Keras model or weights file (no model_weights, layer_names or layers)"
        )

    def _h5(self, source: Any) -> h5py.File:
        within(
            HDF5_TIMEOUT,
            lambda: _walk_everything(source),
            f"{self.path}: libhdf5 did not finish reading the "
            f"file's structure within {HDF5_TIMEOUT:g} s; the file is damaged (its metadata loops)",
        )
        try:
            h5 = h5py.File(source, "r")
        except OSError as exc:
            raise BadInput(
                f"{self.path} is not a readable HDF5 file (truncated or corrupt: {first_line(exc)})"
            ) from None
        self._closers.append(h5)
        return h5

    def _open_archive(self) -> h5py.Group:
        archive = _zip.open_archive(self.path, ".keras archive")
        self._closers.append(archive)
        names = set(archive.namelist())
        if "config.json" not in names:
            if any(n.endswith("data.pkl") for n in names):
                raise BadInput(f"{self.path} is a PyTorch checkpoint, not a Keras file")
            raise BadInput(f"{self.path} is a zip archive without config.json, so not a .keras model")
        for info in archive.infolist():
            _zip.check_member(self.path, info, self.size, "Keras")
        config = json_document(_zip.read_member(archive, "config.json", self.path), f"{self.path}: config.json")
        meta = (
            json_document(_zip.read_member(archive, "metadata.json", self.path), f"{self.path}: metadata.json")
            if "metadata.json" in names
            else {}
        )
        if not isinstance(config, dict) or not isinstance(meta, dict):
            raise BadInput(f"{self.path}: config.json or metadata.json is not a JSON object")
        self.config = config
        self.versions = {k: meta[k][:100] for k in ("keras_version",) if isinstance(meta.get(k), str)}
        if "model.weights.h5" not in names:
            raise BadInput(f"{self.path} has no model.weights.h5 (sharded or npz weights are not supported)")
        info = archive.getinfo("model.weights.h5")
        self.limit = info.file_size
        if info.compress_type == zipfile.ZIP_STORED:
            member = _StoredMember(self.path, info, self.size)
            self._closers.append(member)
            add_guard(member.crc_guard())
            self.reader.hdf5_at = member.start
            return self._h5(member)
        return self._h5(io.BytesIO(_zip.read_member(archive, "model.weights.h5", self.path)))

    # --- finding the recurrent layers -------------------------------------------------------

    def _find_layers(self, root: h5py.Group) -> list[KerasLayer]:
        if self.kind == "keras-h5":
            weights = _group(_child(root, "model_weights"), "model_weights") if _has(root, "model_weights") else root
            layers = (
                [self._legacy_layer(weights, entry) for entry in _walk_config(self.config)]
                if self.config
                else _infer_legacy(weights)
            )
        elif self.config:
            layers = [self._keras3_layer(root, entry) for entry in _walk_config(self.config)]
        else:
            layers = _infer_keras3(root)
        for layer in layers:
            for tensors in layer.tensors:
                for role, dataset in tensors.items():
                    _check_tensor(dataset, f"{self.path}: {layer.name} {role}", self.limit)
        return layers

    def _legacy_layer(self, weights: h5py.Group, entry: _Entry) -> KerasLayer:
        if not _has(weights, entry.top):
            raise BadInput(f"{self.path}: the config names layer {entry.top!r} but the file holds no weights for it")
        group = _group(_child(weights, entry.top), entry.top)
        names = _weight_names(group)
        if entry.top != entry.name:
            names = [n for n in names if entry.name in n.split("/")]
        per_direction = 2 if entry.wrapper == "Bidirectional" else 1
        if len(names) % per_direction or not names:
            raise BadInput(
                f"{self.path}: layer {entry.name!r} has {len(names)} weights, which does not fit a "
                f"{entry.display_class}"
            )
        half = len(names) // per_direction
        tensors, tensor_names = [], []
        for d in range(per_direction):
            roles: dict[str, Any] = {}
            labels: dict[str, str] = {}
            for name in names[d * half : (d + 1) * half]:
                role = ROLE_OF_NAME.get(name.split("/")[-1].split(":")[0])
                if role is None:
                    raise BadInput(
                        f"{self.path}: weight {name!r} of layer {entry.name!r} is not a "
                        f"{' or '.join(KERAS_VARIABLES.values())}"
                    )
                if not _has(group, name):
                    raise BadInput(f"{self.path}: weight {name!r} of layer {entry.name!r} is listed but missing")
                roles[role], labels[role] = _dataset(_child(group, name), name), name
            tensors.append(roles)
            tensor_names.append(labels)
        return entry.layer(tensors, tensor_names)

    def _keras3_layer(self, root: h5py.Group, entry: _Entry) -> KerasLayer:
        if not _has(root, entry.group_path):
            raise BadInput(
                f"{self.path}: the config names layer {entry.name!r} but the weights file has no "
                f"group {entry.group_path}"
            )
        group = _group(_child(root, entry.group_path), entry.group_path)
        cells = (
            [_group(_child(group, s), s) for s in KERAS_DIRECTION_GROUPS]
            if entry.wrapper == "Bidirectional"
            else [group]
        )
        tensors, tensor_names = zip(*(_keras3_cell(cell) for cell in cells))
        return entry.layer(list(tensors), list(tensor_names))


class _StoredMember(io.RawIOBase):
    """An uncompressed zip member read in place, so h5py needs no copy of a large file."""

    def __init__(self, path: Path, info: zipfile.ZipInfo, archive_size: int):
        self._path, self._info = path, info
        self.start = _zip.stored_start(path, info, archive_size)
        self._size = info.file_size
        self._pos = 0
        self._file = open(path, "rb")  # noqa: SIM115 -- held open as the member's stream; closed by close()

    def crc_guard(self) -> Guard:
        """A check, computed in the background, that the member's bytes are those its CRC-32 was made of."""
        return checksum_guard(
            self._path,
            self.start,
            self._size,
            lambda value, chunk: zlib.crc32(chunk, value),
            self._info.CRC,
            f"{self._path}: the zip entry {self._info.filename} does not match its CRC-32 (damaged); nothing was "
            f"written",
        )

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self._size - self._pos))
        self._file.seek(self.start + self._pos)
        got = self._file.readinto(memoryview(buffer)[:n])
        self._pos += got
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


# --- model configs ---------------------------------------------------------------------------


@dataclass
class _Entry:
    """A recurrent layer found in a model config."""

    name: str
    source_class: str
    config: dict[str, Any]
    wrapper: str | None
    extra: dict[str, Any]
    top: str  # the top-level layer that holds its weights (legacy files)
    group_path: str  # its group in a Keras 3 weights file

    @property
    def display_class(self) -> str:
        return f"{self.wrapper}({self.source_class})" if self.wrapper else self.source_class

    def layer(self, tensors: list[dict[str, Any]], names: list[dict[str, str]]) -> KerasLayer:
        return KerasLayer(self.name, self.source_class, self.config, tensors, names, self.wrapper, self.extra)


def _walk_config(model: Any, top: str | None = None, group: str = "", depth: int = 0) -> Iterator[_Entry]:
    """Recurrent layers of a model config, depth first, with where their weights live."""
    if depth > MAX_NESTING:
        raise BadInput(f"the model config nests models more than {MAX_NESTING} deep")
    config = _mapping(model.get("config")) if isinstance(model, dict) else {}
    layers = config.get("layers")
    if not isinstance(layers, list):
        return
    used: dict[str, int] = {}
    for entry in layers:
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            continue
        cls = entry["class_name"]
        cfg = _mapping(entry.get("config"))
        name = entry.get("name") or cfg.get("name", "")
        if not isinstance(name, str):
            raise BadInput(f"the model config names a {cls} layer with a {type(name).__name__}, not a string")
        snake = snake_case(cls)
        index = used.get(snake, 0)
        used[snake] = index + 1
        path = f"{group}layers/{snake}" + (f"_{index}" if index else "")
        owner = top or name
        found = _recurrent(cls, cfg)
        if found:
            source_class, layer_cfg, wrapper, extra = found
            yield _Entry(name, source_class, layer_cfg, wrapper, extra, owner, path)
        elif isinstance(cfg.get("layers"), list):
            yield from _walk_config(entry, owner, path + "/", depth + 1)


def _recurrent(cls: str, cfg: dict[str, Any]) -> tuple[str, dict[str, Any], str | None, dict[str, Any]] | None:
    if cls in RECURRENT_CLASSES:
        return cls, cfg, None, {"go_backwards": bool(cfg.get("go_backwards", False))}
    if cls == "RNN":
        cell = _mapping(cfg.get("cell"))
        inner = KERAS_CELLS.get(str(cell.get("class_name")))
        if inner:
            return (
                inner,
                {**_mapping(cell.get("config")), "go_backwards": cfg.get("go_backwards", False)},
                "RNN",
                {"go_backwards": bool(cfg.get("go_backwards", False))},
            )
        return None
    if cls == "Bidirectional":
        wrapped = _mapping(cfg.get("layer"))
        found = _recurrent(str(wrapped.get("class_name", "")), _mapping(wrapped.get("config")))
        if not found or found[2] == "Bidirectional":
            return None
        source_class, layer_cfg, _, _ = found
        backward = cfg.get("backward_layer")
        if isinstance(backward, dict):
            back = _recurrent(str(backward.get("class_name", "")), _mapping(backward.get("config")))
            if not back or back[0] != source_class or back[1].get("units") != layer_cfg.get("units"):
                raise Unsupported(
                    "a Bidirectional layer whose backward layer differs from its forward layer has no single cuDNN form"
                )
        return source_class, layer_cfg, "Bidirectional", {"merge_mode": cfg.get("merge_mode", "concat")}
    return None


def snake_case(name: str) -> str:
    """Keras 3's group name for a class (keras.src.utils.naming.to_snake_case)."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


# --- legacy HDF5 ---------------------------------------------------------------------------


def _weight_names(group: h5py.Group) -> list[str]:
    """The layer's `weight_names` attribute, joined from its chunks when it was split."""
    if "weight_names" in group.attrs:
        raw = list(group.attrs["weight_names"])
    else:
        raw, chunk = [], 0
        while f"weight_names{chunk}" in group.attrs:
            raw += list(group.attrs[f"weight_names{chunk}"])
            chunk += 1
    return [_text(n) for n in raw]


def _infer_legacy(weights: h5py.Group) -> list[KerasLayer]:
    """Recurrent layers of a legacy weights file without a model config, from names and shapes."""
    layers: list[KerasLayer] = []
    stored = _attribute_or_none(weights, "layer_names")
    top_names = [] if stored is None else [_text(n) for n in stored]
    for top in top_names:
        if not _has(weights, top):
            continue
        group = _group(_child(weights, top), top)
        cells: dict[str, dict[str, str]] = {}
        for name in _weight_names(group):
            parent, _, leaf = name.rpartition("/")
            role = ROLE_OF_NAME.get(leaf.split(":")[0])
            if role and _has(group, name):
                cells.setdefault(parent, {})[role] = name
        by_layer: dict[str, list[dict[str, str]]] = {}
        for parent, roles in cells.items():
            parts = [p for p in parent.split("/") if not p.endswith("_cell")] or [top]
            if len(parts) > 1 and parts[-1].startswith(("forward_", "backward_")):
                parts = parts[:-1]
            by_layer.setdefault(parts[-1], []).append(roles)
        for name, directions in by_layer.items():
            tensors = [{r: _dataset(_child(group, n), n) for r, n in roles.items()} for roles in directions]
            layer = _inferred_layer(name, tensors, directions)
            if layer:
                layers.append(layer)
    return layers


# --- Keras 3 weights -------------------------------------------------------------------------


def _keras3_cell(group: h5py.Group) -> tuple[dict[str, Any], dict[str, str]]:
    """kernel, recurrent_kernel, bias of a layer group: in `cell/vars`, or `vars` (CuDNNLSTM/CuDNNGRU)."""
    cell = _group(_child(group, "cell"), "cell") if _has(group, "cell") else None
    vars_ = _group(_child(cell, "vars") if cell is not None and _has(cell, "vars") else _child(group, "vars"), "vars")
    roles, names = {}, {}
    for index, (role, variable) in enumerate(KERAS_VARIABLES.items()):
        if _has(vars_, str(index)):
            roles[role] = _dataset(_child(vars_, str(index)), f"{vars_.name}/{index}")
            names[role] = f"{vars_.name}/{index} ({variable})"
    return roles, names


def _infer_keras3(root: h5py.Group) -> list[KerasLayer]:
    """Recurrent layers of a bare .weights.h5, from its groups and shapes.

    Keras 3.x writes each layer's own name as an attribute of its `vars` group;
    files from older writers (tf-keras, Keras 2.15) do not, and their layers are
    named by their group path instead (`sequential/simple_rnn`).
    """
    layers: list[KerasLayer] = []
    seen: set[Any] = set()

    def visit(group: h5py.Group, depth: int) -> None:
        if depth > MAX_NESTING:
            raise BadInput(f"groups nest more than {MAX_NESTING} deep, more than any Keras model")
        for key in group:
            if not isinstance(group.get(key, getlink=True), h5py.HardLink):
                continue  # soft and external links: Keras writes none, and they may loop or leave the file
            child = group[key]
            if not isinstance(child, h5py.Group) or key == "vars" or child.id in seen:
                continue
            seen.add(child.id)
            if all(_has(child, side) for side in KERAS_DIRECTION_GROUPS):
                cells = [_keras3_cell(_group(_child(child, s), s)) for s in KERAS_DIRECTION_GROUPS]
            elif _has(child, "cell/vars") or (_has(child, "vars") and len(_group(_child(child, "vars"), "vars"))):
                cells = [_keras3_cell(child)]
            else:
                visit(child, depth + 1)
                continue
            layer = _inferred_layer(_keras3_name(child), [c[0] for c in cells], [c[1] for c in cells])
            if layer:
                layers.append(layer)

    visit(root, 0)
    return layers


def _keras3_name(group: h5py.Group) -> str:
    if _has(group, "vars") and "name" in _child(group, "vars").attrs:
        return _text(_child(group, "vars").attrs["name"])[:200]
    return "/".join(part for part in group.name.strip("/").split("/") if part != "layers")


def _inferred_layer(name: str, tensors: list[dict[str, Any]], names: list[Any]) -> KerasLayer | None:
    """A layer whose class comes from tensor shapes alone (no config in the file)."""
    first = tensors[0]
    if "input_matrix" not in first or "recurrent_matrix" not in first:
        return None
    rec = first["recurrent_matrix"].shape
    if len(rec) != 2 or rec[0] == 0 or rec[1] % rec[0] or len(first["input_matrix"].shape) != 2:
        return None
    hidden = rec[0]
    has_bias = "bias" in first
    actual = {role: tuple(t.shape) for role, t in first.items()}
    for row in rows_for("keras"):  # the first Keras row whose stored shapes these are
        if row.adapter and stored_shapes(row, hidden, actual["input_matrix"][0], hidden, has_bias=has_bias) == actual:
            config = {**row.defaults, "units": hidden, **row.when, "use_bias": has_bias}
            names = [n if isinstance(n, dict) else {} for n in names]
            return KerasLayer(
                name,
                row.source_class,
                config,
                tensors,
                names,
                wrapper="Bidirectional" if len(tensors) == 2 else None,
                inferred=True,
            )
    return None


# --- to the canonical form -----------------------------------------------------------------


def to_canonical(
    layer: KerasLayer,
    source: Provenance,
    bias_split: str = DEFAULT_BIAS_SPLIT,
    reader: TensorReader | None = None,
    stated: Mapping[str, str | None] | None = None,
    old_defaults: str | None = None,
) -> CanonicalRNN:
    """The canonical RNN of one Keras layer, or Unsupported/BadInput saying why not.

    A layer from a weights file without a model config takes the settings it does not store from
    `stated` (the user's --activation, --recurrent-activation), else from the format's defaults, and
    records each as an assumption; `old_defaults` says why the defaults cannot be trusted for this
    file (a Keras whose recurrent_activation default was hard_sigmoid), and then nothing is assumed.
    """
    row = find_row("keras", layer.source_class, layer.config)
    config, assumptions = dict(layer.config), []
    if layer.inferred:
        for key in row.unstored:
            if (stated or {}).get(key) is not None:
                config[key] = (stated or {})[key]
            elif key == "recurrent_activation" and old_defaults:
                raise Unsupported(
                    f"the file has no model config, and {old_defaults}; converting it as if "
                    f"sigmoid would give a blob that runs and is wrong. If the model set "
                    f"recurrent_activation='sigmoid', say so with --recurrent-activation sigmoid"
                )
            else:
                assumptions.append(f"{layer.name}: {key}={row.setting(config, key)}")
    mode = mode_for(row, config)
    what = f"layer {layer.name!r} ({layer.display_class})"
    use_bias = row.setting(layer.config, "use_bias") if "use_bias" in row.defaults else True
    if not isinstance(use_bias, bool):
        raise BadInput(f"{what}: use_bias is {use_bias!r}, not true or false")
    has_bias = use_bias and "bias" in layer.tensors[0]
    first = layer.tensors[0]
    if "input_matrix" not in first or "recurrent_matrix" not in first:
        raise BadInput(f"{what} lacks its {KERAS_VARIABLES['input_matrix']} or {KERAS_VARIABLES['recurrent_matrix']}")
    n_in = first["input_matrix"].shape[0]
    units = layer.config.get("units", first["recurrent_matrix"].shape[0])
    if not isinstance(units, int) or isinstance(units, bool) or units < 1:
        raise BadInput(f"{what}: units is {units!r}, not a positive integer")
    hidden = units
    expected = stored_shapes(row, hidden, n_in, hidden, has_bias=has_bias)
    if use_bias and not has_bias:
        raise BadInput(f"{what} has use_bias=True in its config but no bias tensor in the file")
    for d, tensors in enumerate(layer.tensors):
        names = {role: (layer.tensor_names[d].get(role) or KERAS_VARIABLES.get(role, role)) for role in expected}
        actual = {role: tuple(t.shape) for role, t in tensors.items()}
        check_shapes(row, actual, expected, names, f"{what} (units={hidden}, input {n_in})")
    dtype = _dtype_name(first["input_matrix"])
    spec = RNNSpec(mode, n_in, hidden, 1, layer.bidirectional, 0, dtype, has_bias)
    cells = {}
    for d, tensors in enumerate(layer.tensors):
        cells[(0, d)] = gate_loaders(
            row, hidden, _fetcher(tensors, reader or TensorReader(), row), has_bias, bias_split
        )
    notes = []
    if layer.inferred:
        settings = ", ".join(f"{key}={row.setting(config, key)}" for key in row.unstored)
        how = "the activations were assumed" if assumptions else "the activations were stated"
        notes.append(
            f"{layer.name}: the file has no model config; class {layer.display_class} was inferred from "
            f"tensor shapes and {how} ({settings})"
        )
    if not has_bias:
        notes.append(f"{layer.name}: use_bias=False, so every bias slot is zero")
    if layer.extra.get("go_backwards"):
        notes.append(f"{layer.name}: go_backwards=True; feed cuDNN the sequence reversed to match Keras")
    merge = layer.extra.get("merge_mode", "concat")
    if layer.wrapper == "Bidirectional" and merge != "concat":
        notes.append(
            f"{layer.name}: merge_mode={merge!r}; cuDNN concatenates the two directions, apply "
            f"{merge!r} to its output halves to match Keras"
        )
    info = source.model_copy(
        update={
            "layer": layer.name,
            "layer_class": layer.display_class,
            "keras_config": _config_summary(layer.name, config, layer.extra),
            "bias_split": bias_split if has_bias and row.bias.summed else None,
            "assumptions": assumptions or None,
        }
    )
    return CanonicalRNN.from_cell_loaders(layer.name, spec, cells, source=info, notes=notes)


def stored_arrays(tensors: dict[str, Any]) -> list[np.ndarray]:
    """kernel, recurrent_kernel[, bias] of one cell as stored (bfloat16 widened), in Keras' weight order."""
    fetch = _fetcher(tensors, TensorReader())
    return [np.asarray(fetch(role)[...]) for role in KERAS_VARIABLES if role in tensors]


class TensorReader:
    """Reads a stored tensor whole and keeps only the last one read.

    A writer takes one tensor's gate blocks one after another, so each tensor is read
    from the file once, sequentially, and memory holds one tensor at a time. Kernels
    stored as (in, G*H) columns are transposed once, whole: every gate block of the
    result is then a contiguous run of rows, ready to be written as it is.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self.hdf5_at: int | None = None  # where the HDF5 file starts in `path` (a .keras member's offset)
        self._key: tuple[Any, bool] | None = None
        self._values: Any = None

    def read(self, dataset: Any, columns: bool = False) -> Any:
        if self._key is None or self._key[0] is not dataset or self._key[1] != columns:
            self._key, self._values = None, None  # let the previous tensor go before reading the next
            try:
                values = _Bfloat16View(dataset)[...] if is_bfloat16(dataset) else self._mapped(dataset)
            except DAMAGED as exc:  # a damaged chunk, a broken B-tree: seen only when the data is read
                raise BadInput(
                    f"{self._path}: weight {dataset.name} cannot be read, the file is damaged ({first_line(exc)})"
                ) from None
            self._values = _Transposed(transposed(values)) if columns and values.ndim == 2 else values
            self._key = (dataset, columns)
        return self._values

    def _mapped(self, dataset: Any) -> Any:
        """A contiguous, unfiltered dataset's values mapped in place from the file (no copy), else read by h5py.

        The mapping is used only when its first and last values are those h5py reads, so an address that
        means something else (a user block, a damaged file) costs a read, never a wrong value.
        """
        if self._path is None or self.hdf5_at is None or dataset.dtype.kind != "f" or dataset.size == 0:
            return dataset[...]
        plist = dataset.id.get_create_plist()
        offset = dataset.id.get_offset()
        contiguous = plist.get_layout() == h5py.h5d.CONTIGUOUS and not plist.get_nfilters()
        if not contiguous or plist.get_external_count() or offset is None:
            return dataset[...]
        start = self.hdf5_at + offset
        if start + dataset.dtype.itemsize * dataset.size > self._path.stat().st_size:
            return dataset[...]  # h5py says what is wrong with the file
        values = np.memmap(self._path, dtype=dataset.dtype, mode="r", offset=start, shape=dataset.shape)
        ends = (tuple(0 for _ in values.shape), tuple(n - 1 for n in values.shape))
        if all(np.array_equal(values[end], dataset[end], equal_nan=True) for end in ends):
            return values
        return dataset[...]


class _Transposed:
    """A (rows, cols) tensor held as its transpose: t[r, c] is the held array's [c, r], as a view."""

    def __init__(self, held: np.ndarray):
        self.held = held
        self.shape = held.shape[::-1]

    def __getitem__(self, index: Any) -> np.ndarray:
        if index is Ellipsis:
            return self.held.T
        rows, cols = index
        return self.held[cols, rows].T


def _fetcher(tensors: dict[str, Any], reader: TensorReader, row: Any = None):
    columns = row is not None and row.matrix.transposed
    return lambda role: reader.read(tensors[role], columns and role in ("input_matrix", "recurrent_matrix"))


def _attribute_or_none(h5_object: Any, name: str) -> Any:
    """An HDF5 attribute, or None. Not attrs.get(): on a missing attribute h5py decodes HDF5's error
    stack, which has raised UnicodeDecodeError on garbage there (seen once in CI, on a valid fixture)."""
    return h5_object.attrs[name] if name in h5_object.attrs else None  # noqa: SIM401


def is_bfloat16(dataset: Any) -> bool:
    """Keras 3 writes bfloat16 as 2-byte opaque words, with a dtype attribute in .weights.h5."""
    marked = _attribute_or_none(dataset, "dtype")
    return (isinstance(marked, (str, bytes)) and _text(marked) == "bfloat16") or (
        dataset.dtype.kind == "V" and dataset.dtype.itemsize == 2
    )


class _Bfloat16View:
    """Keras 3 stores bfloat16 variables as 2-byte words with a dtype attribute."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.shape = dataset.shape

    def __getitem__(self, index: Any) -> np.ndarray:
        words = np.asarray(self.dataset[index]).view(np.uint16)
        return (words.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _dtype_name(dataset: Any) -> str:
    if is_bfloat16(dataset):
        return "bfloat16"  # read widened to float32, written back exactly
    return source_dtype_name(dataset.dtype)


def _config_summary(name: str, config: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("units", "activation", "recurrent_activation", "use_bias", "reset_after", "go_backwards")
    summary = {k: config[k] for k in keys if k in config and isinstance(config[k], (str, int, bool))}
    summary.update({k: v for k, v in extra.items() if isinstance(v, (str, int, bool))})
    return summary


def old_defaults(version: str | None) -> str | None:
    """Why a weights file's Keras version leaves LSTM/GRU recurrent_activation unknown, or None.

    Keras before 2.3.0 and tf.keras in TensorFlow 1.x defaulted it to hard_sigmoid (docs/LAYOUTS.md
    section 7); tf.keras "2.2.4-tf" was both TensorFlow 1.14/1.15's and 2.0/2.1's, so it does not tell.
    """
    if version is None:
        return None  # Keras 3 weights files carry no version; every writer of them defaulted to sigmoid
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not found:
        return f"its keras_version {version[:40]!r} does not say which recurrent_activation default it had"
    number = tuple(int(part) for part in found.groups())
    if version.endswith("-tf") and number == (2, 2, 4):
        return (
            "tf.keras 2.2.4-tf wrote it, the Keras of TensorFlow 1.14/1.15 (recurrent_activation default "
            "hard_sigmoid) and of TensorFlow 2.0/2.1 (sigmoid): the file does not say which"
        )
    if number < (2, 3, 0):
        return (
            f"Keras {version} wrote it, whose LSTM and GRU default recurrent_activation was hard_sigmoid, "
            f"which cuDNN cannot compute"
        )
    return None


def _json_attr(h5: h5py.File, key: str, path: Path) -> dict[str, Any] | None:
    if key not in h5.attrs:
        return None
    config = json_document(_text(h5.attrs[key]), f"{path}: the {key} attribute")
    if not isinstance(config, dict):
        raise BadInput(f"{path}: the {key} attribute is not a JSON object")
    return config


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


# --- what a damaged or hostile file may hold ------------------------------------------------------

HDF5_TIMEOUT = float(os.environ.get("RNNCONV_HDF5_TIMEOUT", "10"))  # seconds for libhdf5 to read a structure
MAX_OBJECTS = 100_000  # groups and datasets: far more than any Keras model holds
SMALL_DATASET = 4 << 20  # bytes: read whole by the structure walk; larger ones at their first and last element


def _walk_everything(source: Any) -> None:
    """Touch everything the reader may touch: every group, attribute and dataset (hard links only).

    Run in a child process with a time limit (`within`): some damaged files make libhdf5 itself loop
    forever, holding the interpreter, and no Python-level watchdog could stop it there.
    """
    if hasattr(source, "seek"):
        source.seek(0)
    with h5py.File(source, "r") as h5:
        pending, visited, count = [h5], {h5.id}, 0
        while pending:
            group = pending.pop()
            for name in group.attrs:
                group.attrs[name]  # the read itself is what is tested
            for key in group:
                count += 1
                if count > MAX_OBJECTS or not isinstance(group.get(key, getlink=True), h5py.HardLink):
                    continue
                child = group[key]
                if child.id in visited:  # a group linked into itself: once is enough
                    continue
                visited.add(child.id)
                if isinstance(child, h5py.Group):
                    pending.append(child)
                    continue
                for name in child.attrs:
                    child.attrs[name]
                if child.size and child.size * child.dtype.itemsize <= SMALL_DATASET:
                    child[()]
                elif child.size and child.ndim:
                    child[(0,) * child.ndim], child[tuple(n - 1 for n in child.shape)]


# What h5py, zipfile and walking an odd structure raise on a damaged file.
DAMAGED = (
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    RuntimeError,
    OSError,
    IndexError,
    RecursionError,
    struct.error,
    UnicodeDecodeError,
    NotImplementedError,
    zipfile.BadZipFile,
    EOFError,
    zlib.error,
)
MAX_NESTING = 64  # models and groups nested deeper than this are no Keras model


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _child(group: h5py.Group, path: str) -> Any:
    """group[path], through hard links only: Keras writes no other kind, and a soft or external link may
    loop, or lead out of the file to anything (a FIFO would block the read forever)."""
    node = group
    for part in (p for p in path.split("/") if p):
        link = node.get(part, getlink=True) if isinstance(node, h5py.Group) else None
        if link is None:
            raise KeyError(path)
        if not isinstance(link, h5py.HardLink):
            kind = "an external link (out of the file)" if isinstance(link, h5py.ExternalLink) else "a soft link"
            raise BadInput(f"{path!r} is {kind}, which Keras never writes")
        node = node[part]
    return node


def _has(group: h5py.Group, path: str) -> bool:
    try:
        _child(group, path)
    except KeyError:
        return False
    return True


def _group(obj: Any, name: str) -> h5py.Group:
    if not isinstance(obj, h5py.Group):
        raise BadInput(f"{name!r} is a {type(obj).__name__.lower()} where Keras writes a group")
    return obj


def _dataset(obj: Any, name: str) -> h5py.Dataset:
    if not isinstance(obj, h5py.Dataset):
        raise BadInput(f"weight {name!r} is a {type(obj).__name__.lower()} where Keras writes a dataset")
    return obj


def _check_tensor(dataset: h5py.Dataset, what: str, limit: int) -> None:
    """A stored weight must be a 1-D or 2-D float dataset that fits in its file."""
    if not (dataset.dtype.kind == "f" or is_bfloat16(dataset)):
        raise BadInput(f"{what} holds {dataset.dtype} values, not floating point numbers")
    if dataset.ndim not in (1, 2):
        raise BadInput(f"{what} has shape {dataset.shape}; a weight is a vector or a matrix")
    if dataset.size * dataset.dtype.itemsize > limit:
        raise BadInput(
            f"{what} claims {dataset.size * dataset.dtype.itemsize} bytes, more than its file holds ({limit} bytes)"
        )
