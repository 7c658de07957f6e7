"""Keras model configs: the recurrent layers a config names (at any depth, wrapped or not), their settings and
the defaults of the Keras version that wrote the file. Read as JSON; nothing in a config is ever run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnconv.errors import BadInput, listing, no_such_rnn, several_rnns
from rnnconv.formats.keras.wire import KERAS_CELLS, KERAS_RECURRENT_NAMES
from rnnconv.table.apply import classes_of, keras_era, rows_for, stored_shapes
from rnnconv.table.constants import KERAS_VARIABLES, MAX_LAYERS

RECURRENT_CLASSES = set(classes_of("keras"))
ROLE_OF_NAME = {name: role for role, name in KERAS_VARIABLES.items()}  # kernel -> input_matrix, ...


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
    # Why nothing can say a setting its tensors do not show (a TF2 checkpoint keeps no config): each such setting is
    # then refused unless stated, never assumed.
    unrecorded: str | None = None

    @property
    def bidirectional(self) -> bool:
        return len(self.tensors) == 2

    @property
    def display_class(self) -> str:
        return f"{self.wrapper}({self.source_class})" if self.wrapper else self.source_class


@dataclass
class ConfigEntry:
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


def walk_config(model: Any, top: str | None = None, group: str = "", depth: int = 0) -> Iterator[ConfigEntry]:
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
            yield from walk_config(entry, owner, path + "/", depth + 1)
            continue
        found = _recurrent(cls, _object(cfg, f"the config of layer {name or cls!r}"), f"layer {name or cls!r}")
        if found:
            yield ConfigEntry(
                name, found.source_class, found.config, found.wrapper, found.extra, owner, path, found.refusal
            )


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


def inferred_layer(name: str, tensors: list[dict[str, Any]], names: list[Any], named: bool) -> KerasLayer | None:
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


MAX_NESTING = 64  # models and groups nested deeper than this are no Keras model


def pick_layer(layers: list[KerasLayer], name: str | None, path: Path) -> KerasLayer:
    """The recurrent layer `name` names (its whole name, or the last part of a SavedModel's layer path), or the
    only one."""
    if name is None:
        if len(layers) == 1:
            return layers[0]
        if not layers:
            raise BadInput(f"{path} has no recurrent layer (LSTM, GRU, SimpleRNN, CuDNNLSTM, CuDNNGRU)")
        raise several_rnns(path, f"has {len(layers)} recurrent layers ({listing(n.name for n in layers)})")
    matches = [n for n in layers if n.name == name] or [n for n in layers if n.name.rsplit("/", 1)[-1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        ending = listing(n.name for n in matches)
        raise BadInput(f"{len(matches)} recurrent layers of {path} end in {name!r} ({ending}); give the whole name")
    raise no_such_rnn(f"{path} has no recurrent layer named", name, [n.name for n in layers])
