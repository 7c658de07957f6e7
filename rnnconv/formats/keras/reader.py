"""Reading Keras files with h5py, zipfile and json alone (no TensorFlow, Keras or torch).

Handles legacy HDF5 (`model.save('m.h5')` and `save_weights`) from Keras 2,
tf-keras and Keras 3; Keras 3 `.weights.h5`; and `.keras` archives. Layers may be
plain, `Bidirectional`, `RNN(cell)`, nested in sub-models, or tf-keras'
`CuDNNLSTM`/`CuDNNGRU`. Every recurrent layer becomes a `KerasLayer`: its class,
config and stored tensors; `to_canonical` turns one into the canonical form
through the Keras rows of the layout table.
"""

from __future__ import annotations

import dataclasses
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
from rnnconv.contracts import Provenance, RNNSizes
from rnnconv.dtypes import source_dtype_name
from rnnconv.errors import BadInput, RnnconvError, Unsupported, first_line, no_such_rnn, several_rnns
from rnnconv.formats import _zip
from rnnconv.formats.registry import HDF5_MAGIC, ZIP_MAGIC
from rnnconv.safeio import FileArray, Guard, add_guard, checksum_guard, json_document, pin, regular_file, within
from rnnconv.table.apply import classes_of, find_row, keras_era, rows_for, stored_shapes
from rnnconv.table.constants import (
    KERAS_CELLS,
    KERAS_DIRECTION_GROUPS,
    KERAS_RECURRENT_NAMES,
    KERAS_VARIABLES,
    MAX_LAYERS,
    MAX_SIZE,
)
from rnnconv.table.reading import Found, Settled, StoredCell, read, settle
from rnnconv.table.rows import DEFAULT_BIAS_SPLIT, VERSIONED_DEFAULTS, Row
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
    refusal: str | None = None  # why this recurrent layer does not convert (its tensors are then best effort)
    keras_version: str | None = None  # the file's: the defaults of that version fill what its config leaves out

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
            names = ", ".join(found.name for found in self.layers)
            raise several_rnns(self.path, f"has {len(self.layers)} recurrent layers ({names})")
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
        if isinstance(source, Path):  # libhdf5 opens it by a name no FIFO put at the path meanwhile can hold up
            source = pin(source, self._closers)
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
            layer.keras_version = self.versions.get("keras_version")
            for tensors in [] if layer.refusal else layer.tensors:  # a refused layer's tensors are never read
                for role, dataset in tensors.items():
                    _check_tensor(dataset, f"{self.path}: {layer.name} {role}", self.limit)
        return layers

    def _legacy_layer(self, weights: h5py.Group, entry: _Entry) -> KerasLayer:
        if not entry.refusal:
            try:
                return entry.layer(*self._legacy_tensors(weights, entry))
            except Unsupported as exc:  # a recurrent layer of a kind that does not convert
                entry = dataclasses.replace(entry, refusal=str(exc))
        return _best_effort(entry, lambda: self._legacy_tensors(weights, entry))

    def _legacy_tensors(self, weights: h5py.Group, entry: _Entry) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        if not _has(weights, entry.top):
            raise BadInput(f"{self.path}: the config names layer {entry.top!r} but the file holds no weights for it")
        group = _group(_child(weights, entry.top), entry.top)
        names = _weight_names(group)
        if entry.top != entry.name:
            names = [n for n in names if entry.name in n.split("/")]
        per_direction = 2 if entry.wrapper == "Bidirectional" else entry.cells  # chunks of one cell's weights
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
                if role is None and self.versions.get("keras_version", "").startswith("1."):
                    raise Unsupported(
                        f"Keras {self.versions['keras_version']} wrote it, whose recurrent layers store other "
                        f"weights ({name.split('/')[-1]}, ...) than Keras 2's {', '.join(KERAS_VARIABLES.values())}; "
                        f"load the model in Keras 2 and save it again"
                    )
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
        return tensors, tensor_names

    def _keras3_layer(self, root: h5py.Group, entry: _Entry) -> KerasLayer:
        if entry.refusal:
            return _best_effort(entry, lambda: self._keras3_tensors(root, entry))
        return entry.layer(*self._keras3_tensors(root, entry))

    def _keras3_tensors(self, root: h5py.Group, entry: _Entry) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        if not _has(root, entry.group_path):
            raise BadInput(
                f"{self.path}: the config names layer {entry.name!r} but the weights file has no "
                f"group {entry.group_path}"
            )
        group = _group(_child(root, entry.group_path), entry.group_path)
        if entry.wrapper == "Bidirectional":
            cells = [_group(_child(group, s), s) for s in KERAS_DIRECTION_GROUPS]
        elif entry.cells > 1:  # StackedRNNCells: cell/cells/<cell name>, for the sizes of a layer that does not convert
            stacked = _group(_child(group, "cell/cells"), "cells")
            cells = [_group(_child(stacked, name), name) for name in sorted(stacked, key=_numbered)]
        else:
            cells = [group]
        tensors, tensor_names = zip(*(_keras3_cell(cell) for cell in cells))
        return list(tensors), list(tensor_names)


def _numbered(name: str) -> tuple[int, str]:
    """Keras' unique names in the order they were made: lstm_cell, lstm_cell_1, lstm_cell_2, ..., lstm_cell_10."""
    found = re.fullmatch(r"(.*?)(?:_(\d+))?", name)
    return (int(found[2]) if found and found[2] else 0), name


def _best_effort(entry: _Entry, tensors: Any) -> KerasLayer:
    """A layer that does not convert, with whatever tensors can be found for its sizes (none if they cannot)."""
    try:
        return entry.layer(*tensors())
    except (RnnconvError, *DAMAGED):
        return entry.layer([], [])


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
    refusal: str | None = None  # why a recurrent layer of this kind does not convert

    @property
    def display_class(self) -> str:
        return f"{self.wrapper}({self.source_class})" if self.wrapper else self.source_class

    @property
    def cells(self) -> int:
        """How many cells the layer stacks (an RNN over StackedRNNCells), else 1."""
        cells = self.extra.get("cells", 1)
        return cells if isinstance(cells, int) and 1 <= cells <= MAX_LAYERS else 1

    def layer(self, tensors: list[dict[str, Any]], names: list[dict[str, str]]) -> KerasLayer:
        return KerasLayer(
            self.name, self.source_class, self.config, tensors, names, self.wrapper, self.extra, refusal=self.refusal
        )


@dataclass
class _Found:
    """What `_recurrent` recognised: the cell's class and config, its wrapper, and why it does not convert."""

    source_class: str
    config: dict[str, Any]
    wrapper: str | None
    extra: dict[str, Any]
    refusal: str | None = None


def _walk_config(model: Any, top: str | None = None, group: str = "", depth: int = 0) -> Iterator[_Entry]:
    """Recurrent layers of a model config, depth first, with where their weights live.

    A model's config is an object with its `layers`, or (Keras 1 to 2.1 `Sequential`) the list of its layers.
    Anything Keras writes as an object that is something else is a damaged config, refused at whatever depth.
    """
    if depth > MAX_NESTING:
        raise BadInput(f"the model config nests models more than {MAX_NESTING} deep")
    used: dict[str, int] = {}
    for entry in _model_layers(model):
        cls = entry["class_name"]
        cfg = entry.get("config", {})
        name = entry.get("name") or (cfg.get("name", "") if isinstance(cfg, dict) else "")
        if not isinstance(name, str):
            raise BadInput(f"the model config names a {cls} layer with a {type(name).__name__}, not a string")
        snake = snake_case(cls)
        index = used.get(snake, 0)
        used[snake] = index + 1
        path = f"{group}layers/{snake}" + (f"_{index}" if index else "")
        owner = top or name
        if (isinstance(cfg, list) and cls == "Sequential") or (isinstance(cfg, dict) and "layers" in cfg):
            yield from _walk_config(entry, owner, path + "/", depth + 1)
            continue
        found = _recurrent(cls, _object(cfg, f"the config of layer {name or cls!r}"), f"layer {name or cls!r}")
        if found:
            yield _Entry(name, found.source_class, found.config, found.wrapper, found.extra, owner, path, found.refusal)


def _model_layers(model: Any) -> list[dict[str, Any]]:
    """The layer entries of a model's config, each an object with a string class_name."""
    what = f"model {model.get('name') or model.get('class_name')!r}" if isinstance(model, dict) else "the model"
    if not isinstance(model, dict) or "config" not in model:
        return []
    config = model["config"]
    if isinstance(config, list) and model.get("class_name") == "Sequential":
        layers: Any = config  # Keras 1 to 2.1: Sequential.get_config() was the list of its layers
    else:
        layers = _object(config, f"the config of {what}").get("layers", [])
    if not isinstance(layers, list):
        raise BadInput(f"the model config is damaged: the layers of {what} are a {_kind(layers)}, not a list")
    for entry in layers:
        _object(entry, f"a layer of {what}")
        if not isinstance(entry.get("class_name"), str):
            raise BadInput(f"the model config is damaged: a layer of {what} has no class_name string")
    return layers


def _object(value: Any, what: str) -> dict[str, Any]:
    """A config object as Keras writes it; anything else present where it should be is a damaged config."""
    if not isinstance(value, dict):
        raise BadInput(f"the model config is damaged: {what} is a {_kind(value)}, where Keras writes an object")
    return value


def _kind(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "null")


def _nested(cfg: dict[str, Any], key: str, where: str) -> tuple[str, dict[str, Any]] | None:
    """The class and config of a layer or cell held in `cfg[key]` (Bidirectional's layer, RNN's cell), if any."""
    if cfg.get(key) is None:
        return None
    held = _object(cfg[key], f"the {key} of {where}")
    cls = held.get("class_name")
    if not isinstance(cls, str):
        raise BadInput(f"the model config is damaged: the {key} of {where} has no class_name string")
    return cls, _object(held.get("config", {}), f"the config of the {key} of {where}")


def _recurrent(cls: str, cfg: dict[str, Any], where: str) -> _Found | None:
    """The recurrent layer a config entry is, converting or not; None for a layer that is not recurrent."""
    if cls in RECURRENT_CLASSES:
        return _Found(cls, cfg, None, {"go_backwards": bool(cfg.get("go_backwards", False))})
    if cls == "RNN":
        go_backwards = cfg.get("go_backwards", False)
        cell = _nested(cfg, "cell", where)
        if cell is None:
            return _Found("no cell", cfg, "RNN", {}, f"{where} is an RNN layer whose config names no cell")
        inner = KERAS_CELLS.get(cell[0])
        if inner is None:
            cells = cell[1].get("cells")
            extra = {"cells": len(cells)} if isinstance(cells, list) else {}  # StackedRNNCells: for its sizes
            return _Found(cell[0], cell[1], "RNN", extra, _not_converted(f"an RNN layer over a {cell[0]} cell"))
        return _Found(inner, {**cell[1], "go_backwards": go_backwards}, "RNN", {"go_backwards": bool(go_backwards)})
    # A wrapper: Bidirectional, TimeDistributed, ... (another layer's own "layer" setting may be anything)
    held = _nested(cfg, "layer", where) if cls == "Bidirectional" or isinstance(cfg.get("layer"), dict) else None
    if held is not None:
        found = _recurrent(*held, f"the layer wrapped by {where}")
        if found is None:
            return None
        if cls != "Bidirectional" or found.wrapper == "Bidirectional":
            inner = found.source_class if found.wrapper is None else f"{found.wrapper}({found.source_class})"
            return _Found(inner, found.config, cls, found.extra, _not_converted(f"a {cls} wrapper around {inner}"))
        extra = {"merge_mode": cfg.get("merge_mode", "concat")}
        backward = _nested(cfg, "backward_layer", where)
        back = _recurrent(*backward, f"the backward layer of {where}") if backward else found
        if not found.refusal and (
            not back or (back.source_class, back.config.get("units")) != (found.source_class, found.config.get("units"))
        ):
            found.refusal = "a Bidirectional layer whose backward layer differs from its forward one has no cuDNN form"
        return _Found(found.source_class, found.config, "Bidirectional", extra, found.refusal)
    if re.search(KERAS_RECURRENT_NAMES, cls):
        return _Found(cls, cfg, None, {}, _not_converted(f"a {cls} layer"))
    return None


def _not_converted(what: str) -> str:
    known = ", ".join(sorted(RECURRENT_CLASSES))
    return (
        f"{what} is not among the recurrent layers rnnconv converts ({known}, RNN over their cells, and "
        f"Bidirectional of any of them)"
    )


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
            if re.fullmatch(re.escape(top) + r"_\d+", parts[0]):
                parts[0] = top  # TensorFlow's name scope, made unique (`bidirectional_19_1`): the layer's own name
            if len(parts) > 1 and parts[-1].startswith(("forward_", "backward_")):
                parts = parts[:-1]
            by_layer.setdefault(parts[-1], []).append(roles)
        for name, directions in by_layer.items():
            tensors = [{r: _dataset(_child(group, n), n) for r, n in roles.items()} for roles in directions]
            layer = _inferred_layer(name, tensors, directions, named=True)
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
            layer = _inferred_layer(_keras3_name(child), [c[0] for c in cells], [c[1] for c in cells], named=False)
            if layer:
                layers.append(layer)

    visit(root, 0)
    return layers


def _keras3_name(group: h5py.Group) -> str:
    if _has(group, "vars") and "name" in _child(group, "vars").attrs:
        return _text(_child(group, "vars").attrs["name"])[:200]
    return "/".join(part for part in group.name.strip("/").split("/") if part != "layers")


def _inferred_layer(name: str, tensors: list[dict[str, Any]], names: list[Any], named: bool) -> KerasLayer | None:
    """A layer whose class comes from tensor shapes alone (no config in the file).

    A recurrent kernel makes it a recurrent layer, listed as not converting when its shapes fit no row: one
    named so (legacy files), or, where only positions tell (Keras 3 `vars/0..2`), a second matrix of G*H columns
    for H rows beside a first matrix (a Dense layer's second variable is its bias).
    """
    first = tensors[0]
    if "recurrent_matrix" not in first:
        return None
    names = [n if isinstance(n, dict) else {} for n in names]
    wrapper = "Bidirectional" if len(tensors) == 2 else None
    actual = {role: tuple(t.shape) for role, t in first.items()}
    rec, kernel = actual["recurrent_matrix"], actual.get("input_matrix", ())
    recurrent_shaped = len(rec) == 2 and rec[0] and not rec[1] % rec[0] and len(kernel) == 2
    if not (named or recurrent_shaped):
        return None
    if recurrent_shaped:
        hidden, has_bias = rec[0], "bias" in first
        for row in rows_for("keras"):  # the first Keras row whose stored shapes these are
            if row.adapter and stored_shapes(row, hidden, kernel[0], hidden, has_bias=has_bias) == actual:
                config = {**row.defaults, "units": hidden, **row.when, "use_bias": has_bias}
                return KerasLayer(name, row.source_class, config, tensors, names, wrapper, inferred=True)
    shapes = ", ".join(f"{KERAS_VARIABLES.get(role, role)} {shape}" for role, shape in actual.items())
    refusal = f"the file has no model config, and its tensors ({shapes}) fit no Keras recurrent layer rnnconv converts"
    return KerasLayer(name, "unknown", {}, tensors, names, wrapper, inferred=True, refusal=refusal)


# --- to the canonical form -----------------------------------------------------------------


def to_canonical(
    layer: KerasLayer,
    source: Provenance,
    bias_split: str = DEFAULT_BIAS_SPLIT,
    reader: TensorReader | None = None,
    stated: Mapping[str, str | None] | None = None,
) -> CanonicalRNN:
    """The canonical RNN of one Keras layer, or Unsupported/BadInput saying why not.

    A setting the layer's config leaves out means the default of the Keras version that wrote the file
    (the table's Keras eras). A layer from a weights file without a model config takes the settings it
    does not store from `stated` (the user's --activation, --recurrent-activation), else from the
    format's defaults, and records each as an assumption, unless the file's Keras version had other
    defaults (hard_sigmoid): then nothing is assumed.
    """
    if layer.refusal:
        raise Unsupported(layer.refusal)
    config, implied, assumed = _version_defaults(layer)
    row = find_row("keras", layer.source_class, config)
    old = old_defaults(layer.keras_version) if layer.inferred else None
    refusals: dict[str, str] = {}
    if old:
        refusals["recurrent_activation"] = (
            f"the file has no model config, and {old}; converting it as if "
            f"sigmoid would give a blob that runs and is wrong. If the model set "
            f"recurrent_activation='sigmoid', say so with --recurrent-activation sigmoid"
        )
    settled = settle(
        row,
        config,
        layer.name,
        stated,
        unstored=row.unstored if layer.inferred else (),
        refusals=refusals,
        assumed=assumed,
        context=implied,
    )
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
    if use_bias and not has_bias:
        raise BadInput(f"{what} has use_bias=True in its config but no bias tensor in the file")

    def cell(_: int, direction: int, spec: RNNSpec) -> StoredCell:
        tensors, names = layer.tensors[direction], layer.tensor_names[direction]
        return StoredCell(
            fetch=_fetcher(tensors, reader or TensorReader(), row),
            shapes={role: tuple(t.shape) for role, t in tensors.items()},
            names={role: names.get(role) or name for role, name in KERAS_VARIABLES.items()},
            where=f"{what} (units={units}, input {n_in})",
        )

    notes = [f"{layer.name}: {text}" for text in implied]
    if layer.inferred:
        notes.append(_inferred_note(layer, row, settled))
    later = []
    if layer.extra.get("go_backwards"):
        later.append(f"{layer.name}: go_backwards=True; feed cuDNN the sequence reversed to match Keras")
    merge = layer.extra.get("merge_mode", "concat")
    if layer.wrapper == "Bidirectional" and merge != "concat":
        later.append(
            f"{layer.name}: merge_mode={merge!r}; cuDNN concatenates the two directions, apply "
            f"{merge!r} to its output halves to match Keras"
        )
    found = Found(
        layer.name,
        row,
        settled,
        input_size=n_in,
        hidden=units,
        dtype=_dtype_name(first["input_matrix"]),
        cell=cell,
        layer_class=layer.display_class,
        bidirectional=layer.bidirectional,
        has_bias=has_bias,
        bias_split=bias_split,
        without_bias="use_bias=False",
        notes=notes,
        later_notes=later,
        provenance={"keras_config": _config_summary(layer.name, settled.config, layer.extra)},
    )
    return read(found, source)


def _inferred_note(layer: KerasLayer, row: Row, settled: Settled) -> str:
    """What a layer without a model config was taken for: its class from its shapes, its activations."""
    how = settled.how
    settings = ", ".join(f"{key}={settled.setting(row, key)}" for key in row.unstored)
    if not how:
        activations = " (its activations are fixed: the class has no setting for them)"
    elif len(set(how.values())) == 1:
        activations = f" and the activations were {next(iter(how.values()))} ({settings})"
    else:
        activations = "; " + ", ".join(f"{key}={settled.setting(row, key)} was {how[key]}" for key in how)
    return (
        f"{layer.name}: the file has no model config; class {layer.display_class} was inferred from tensor "
        f"shapes{activations}"
    )


def layer_sizes(layer: KerasLayer) -> RNNSizes | None:
    """The sizes a layer's stored tensors give, whether or not it converts; None where they give none."""
    first = layer.tensors[0] if layer.tensors else {}
    kernel, recurrent = first.get("input_matrix"), first.get("recurrent_matrix")
    if kernel is None or recurrent is None or kernel.ndim != 2 or recurrent.ndim != 2:
        return None
    try:
        dtype: str | None = _dtype_name(kernel)
    except (RnnconvError, *DAMAGED):
        dtype = None
    stacked = layer.extra.get("cells", 1) > 1
    return RNNSizes(
        input_size=min(kernel.shape[0], MAX_SIZE),
        hidden_size=min(recurrent.shape[0], MAX_SIZE),
        num_layers=len(layer.tensors) if stacked else 1,
        bidirectional=not stacked and len(layer.tensors) == 2,
        dtype=dtype,
        bias="bias" in first,
    )


def _version_defaults(layer: KerasLayer) -> tuple[dict[str, Any], list[str], list[str]]:
    """The layer's config, with each setting whose default changed between Keras versions and that the config
    leaves out set to the default of the version that wrote the file; what that decided, in words (where the
    version differs from today's default); and what had to be assumed (no version tells)."""
    config: dict[str, Any] = dict(layer.config)
    if layer.inferred:
        return config, [], []  # a bare weights file: its shapes, stated settings or assumptions decide
    era = keras_era(layer.keras_version)
    format_defaults = rows_for("keras", layer.source_class)[0].defaults
    implied, assumed = [], []
    for key in (k for k in VERSIONED_DEFAULTS if k in format_defaults and k not in config):
        if era is not None and era.defaults is not None:
            config[key] = era.defaults[key]
            if config[key] != format_defaults[key] and key in era.lacks:
                implied.append(
                    f"Keras {layer.keras_version} wrote it, and {era.writer} had no {key} setting: its "
                    f"{layer.source_class}s all have {key}={config[key]!r}"
                )
            elif config[key] != format_defaults[key]:
                implied.append(
                    f"its config holds no {key}, and {key}={config[key]!r} was the default of Keras "
                    f"{layer.keras_version}"
                )
        elif key == "reset_after" and layer.tensors and "bias" in layer.tensors[0]:
            config[key] = layer.tensors[0]["bias"].ndim == 2  # (2, 3H): reset-after; (3H,): reset-before
            implied.append(f"the config holds no {key}, and the bias's shape says {key}={config[key]!r}")
        else:
            assumed.append(f"{layer.name}: {key}={format_defaults[key]!r}")
    return config, implied, assumed


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
        """A contiguous, unfiltered dataset's values where they lie in the file (a FileArray, read a band at a
        time by the transpose: no whole copy), else read by h5py.

        The place is used only when its first and last values are those h5py reads, so an address that
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
        values = FileArray(self._path, start, dataset.dtype, dataset.shape)
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

    Keras before 2.3.0 and tf.keras in TensorFlow 1.x defaulted it to hard_sigmoid (the table's Keras
    eras); tf.keras "2.2.4-tf" was both TensorFlow 1.14/1.15's and 2.0/2.1's, so it does not tell.
    """
    if version is None:
        return None  # Keras 3 weights files carry no version; every writer of them defaulted to sigmoid
    era = keras_era(version)
    if era is None:
        return f"its keras_version {version[:40]!r} does not say which recurrent_activation default it had"
    if era.defaults is None:
        return (
            f"{era.writer} wrote it: hard_sigmoid was its recurrent_activation default on TensorFlow 1, "
            f"sigmoid on TensorFlow 2, and the file does not say which"
        )
    if era.defaults["recurrent_activation"] != "sigmoid":
        return (
            f"Keras {version} wrote it, whose LSTM and GRU default recurrent_activation was "
            f"{era.defaults['recurrent_activation']}, which cuDNN cannot compute"
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
