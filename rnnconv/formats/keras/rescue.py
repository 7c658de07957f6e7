"""A whole Keras model whose `.keras` archive current Keras refuses, written as the archive Keras 3.15 loads.

tf.keras 2.13 to 2.15 and Keras 3.0 wrote `.keras` archives that Keras 3.15 refuses (a tf.keras RNN's
`time_major`, a tf.keras Functional model's module) or that the Keras that wrote them refused to load again
(Keras 3.0's Bidirectional). Their weights are all in the file: the config is translated as data (JSON in, JSON
out, never run), each of the known differences below with why, and every layer's variables are copied, as they are
stored, to the places Keras 3.15 reads them from. What the translation does not know (a custom layer, a key or a
class it has no rule for) is refused, naming the layer and what; nothing is dropped unsaid.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rnnconv.core.dtypes import count_non_finite
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats.keras.config import MAX_NESTING, snake_case
from rnnconv.formats.keras.hdf5 import MAX_OBJECTS, as_dataset, as_group, check_tensor, follow, holds, is_bfloat16
from rnnconv.formats.keras.reader import KerasFile
from rnnconv.formats.keras.wire import (
    KERAS3_ACTIVATIONS,
    KERAS3_LAYER_KEYS,
    KERAS3_OBJECTS,
    KERAS_DIRECTION_GROUPS,
    RESCUE_FUNCTIONAL_MODULES,
    RESCUED_BEFORE,
    SAME_ACTIVATIONS,
)
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row, stored_shapes, version_number
from rnnconv.table.constants import KERAS_VARIABLES

RECURRENT = ("LSTM", "GRU", "SimpleRNN")  # the recurrent layers the rescue carries (Bidirectional of any of them)
ENTRY_KEYS = {"module", "class_name", "config", "registered_name", "build_config"}  # a layer entry of a Sequential
NODE_KEYS = {"name", "inbound_nodes"}  # and a Functional model's layer entries besides
# The known differences between the Kerases that wrote these files and Keras 3.15, each with why it is translated
# as it is.
TIME_MAJOR = "time_major"  # tf.keras' RNN argument; Keras 3 RNNs take batch-major inputs only
IMPLEMENTATION = "implementation"  # tf.keras' choice between two ways of computing the same gates; Keras 3 has one
BATCH_INPUT_SHAPE = "batch_input_shape"  # tf.keras' input shape: Keras 3's InputLayer calls it batch_shape, and
# other layers take none (tf.keras used it on a Sequential's first layer only, to make that InputLayer)
INPUT_LENGTH = "input_length"  # tf.keras' Embedding argument, used only to infer shapes; Keras 3 has none
COMPILE_CONFIG = "compile_config"  # the training set-up (optimizer, loss): not what the model computes
OPTIMIZER_GROUP = "optimizer"  # the optimizer's variables, saved with the training set-up
ARCHIVE_MEMBERS = {"config.json", "metadata.json", "model.weights.h5"}  # all a rescued archive is written from
MASKING = ("Masking",)  # tf.keras 2 and Keras 3 differ in what an RNN outputs at a masked step


@dataclass
class Rescued:
    """A model's config as Keras 3.15 reads it, the variables to copy (target path -> source dataset) and what
    was left out, said."""

    config: dict[str, Any]
    variables: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    groups: list[str | None] = field(default_factory=list)  # each layer's group (None: a Sequential's InputLayer)
    non_finite: dict[str, int] = field(default_factory=dict)  # a copied variable's NaN and Inf values, counted


class Translation:
    """One source file's translation: its config walked once, each layer's variables claimed from its weights."""

    def __init__(self, keras_file: KerasFile) -> None:
        self.file = keras_file
        self.path = keras_file.path
        self.version = keras_file.versions.get("keras_version", "")
        self.tf_keras = self.version.startswith("2.")
        self.variables: dict[str, Any] = {}
        self.dropped: list[str] = []
        self.groups: list[str | None] = []

    def refuse(self, what: str) -> Unsupported:
        return Unsupported(
            f"{self.path}: {what}, which the rescue for Keras 3 does not translate; nothing was written (convert one "
            f"RNN alone with --layer NAME)"
        )

    # --- the model ------------------------------------------------------------------------

    def model(self) -> dict[str, Any]:
        top = self.file.config
        if not isinstance(top, dict):
            raise BadInput(f"{self.path} holds no model config to rescue")
        extra = sorted(set(self.file.members) - ARCHIVE_MEMBERS)
        if extra:
            raise self.refuse(f"the archive holds {_said(extra[0])} besides its model (assets a layer would read)")
        cls = top.get("class_name")
        if cls not in ("Sequential", "Functional"):
            raise self.refuse(f"its model is a {_said(cls)}, not a Sequential or Functional model")
        _known_keys(top, ENTRY_KEYS | {COMPILE_CONFIG}, f"the model {cls}", self.refuse)
        if top.get(COMPILE_CONFIG) is not None:
            self.dropped.append(
                "the training set-up (compile_config and the optimizer's variables): recompile the model to train it"
            )
        config = _object(top.get("config"), f"the config of the {cls} model")
        layers = config.get("layers")
        if not isinstance(layers, list) or not layers:
            raise BadInput(f"{self.path}: the {cls} model's config lists no layers")
        if len(layers) > MAX_OBJECTS:
            raise BadInput(f"{self.path}: the model lists {len(layers)} layers, more than any Keras model has")
        functional = cls == "Functional"
        model_keys = {"name", "trainable", "dtype", "layers"} | (
            {"input_layers", "output_layers"} if functional else {"build_input_shape"}  # Keras 3.0's, 3.15 reads it
        )
        _known_keys(config, model_keys, f"the {cls} model's config", self.refuse)
        entries = [_object(e, f"a layer of the {cls} model") for e in layers]
        if not functional and entries[0].get("class_name") != "InputLayer":
            entries.insert(0, self.input_in_front(entries[0]))
        self.masked(entries)
        translated = [self.entry(e, functional) for e in entries]
        self.claim_weights(translated, functional)
        new_config = {**config, "layers": translated}
        if functional:
            module = top.get("module")
            if module not in RESCUE_FUNCTIONAL_MODULES:
                raise self.refuse(f"its Functional model names module {_said(module)}")
            names = {e["name"] for e in translated}
            for key in ("input_layers", "output_layers"):
                new_config[key] = self.ends(config.get(key), key, names)
        out = {
            "module": "keras.src.models.functional" if functional else "keras",
            "class_name": cls,
            "config": new_config,
            "registered_name": "Functional" if functional else None,
        }
        if "build_config" in top:
            out["build_config"] = self.build_config(top["build_config"], f"the {cls} model")
        return out

    def input_in_front(self, first: dict[str, Any]) -> dict[str, Any]:
        """tf.keras' Sequential given its input shape on its first layer: Keras 3's InputLayer in front of it."""
        cfg = _object(first.get("config"), "the config of the first layer")
        shape = cfg.get(BATCH_INPUT_SHAPE)
        if shape is None:
            raise self.refuse("its Sequential model has no InputLayer and no input shape (it was never built)")
        return {
            "module": "keras.layers",
            "class_name": "InputLayer",
            "config": {"batch_shape": shape, "dtype": cfg.get("dtype", "float32"), "name": "input_layer"},
            "registered_name": None,
        }

    def masked(self, entries: list[dict[str, Any]]) -> None:
        if not self.tf_keras:
            return
        for entry in entries:
            cfg = entry.get("config")
            if entry.get("class_name") in MASKING or (isinstance(cfg, dict) and cfg.get("mask_zero") is True):
                raise self.refuse(
                    f"layer {_said(_name_of(entry))} masks steps, and an RNN's output at a masked step differs "
                    f"between tf.keras 2 and Keras 3 (zero_output_for_mask), which the file does not record"
                )

    def ends(self, value: Any, key: str, names: set[str]) -> Any:
        """A Functional model's inputs or outputs: [[name, node, tensor], ...]; one of them as Keras 3 writes it,
        alone (a list of one is a model called with a list, returning a list)."""
        if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str):
            value = [value]
        if not isinstance(value, list) or not value or len(value) > MAX_OBJECTS:
            raise BadInput(f"{self.path}: the Functional model's {key} is not a list of layer outputs")
        for end in value:
            if not (
                isinstance(end, list)
                and len(end) == 3
                and isinstance(end[0], str)
                and end[0] in names
                and all(type(i) is int and 0 <= i < MAX_OBJECTS for i in end[1:])
            ):
                raise BadInput(f"{self.path}: the Functional model's {key} names {_said(end)}, no layer's output")
        return value[0] if len(value) == 1 else value

    # --- a layer ----------------------------------------------------------------------------

    def entry(self, entry: dict[str, Any], functional: bool, depth: int = 0) -> dict[str, Any]:
        cls, name = entry.get("class_name"), _name_of(entry)
        where = f"layer {_said(name)}"
        if depth > MAX_NESTING:
            raise BadInput(f"{self.path}: the model config nests layers more than {MAX_NESTING} deep")
        if entry.get("registered_name") is not None or entry.get("module") not in (None, "keras.layers"):
            raise self.refuse(f"{where} is a custom layer ({_said(entry.get('registered_name') or entry['module'])})")
        if not isinstance(cls, str) or cls not in KERAS3_LAYER_KEYS:
            raise self.refuse(f"{where} is a {_said(cls)}, a layer class it has no rule for")
        _known_keys(entry, ENTRY_KEYS | (NODE_KEYS if functional and depth == 0 else set()), where, self.refuse)
        cfg = dict(_object(entry.get("config"), f"the config of {where}"))
        if not isinstance(cfg.get("name"), str):
            raise BadInput(f"{self.path}: {where} has no name")
        if cls in RECURRENT:
            self.recurrent_keys(cfg, where)
        if cls == "InputLayer":
            if BATCH_INPUT_SHAPE in cfg:
                cfg.setdefault("batch_shape", cfg.pop(BATCH_INPUT_SHAPE))
        else:
            cfg.pop(BATCH_INPUT_SHAPE, None)
        if cls == "Embedding":
            cfg.pop(INPUT_LENGTH, None)
        if cls == "Bidirectional":
            if cfg.get("layer") is None:
                raise BadInput(f"{self.path}: {where} is a Bidirectional wrapping no layer")
            for key in ("layer", "backward_layer"):
                if cfg.get(key) is not None:
                    inner = _object(cfg[key], f"the {key} of {where}")
                    if inner.get("class_name") not in RECURRENT:
                        raise self.refuse(f"{where} wraps a {_said(inner.get('class_name'))}")
                    cfg[key] = self.entry(inner, functional, depth + 1)
            if cfg.get("merge_mode", "concat") not in ("concat", "sum", "mul", "ave", None):
                raise self.refuse(f"{where} merges its directions by {_said(cfg['merge_mode'])}")
        _known_keys(cfg, KERAS3_LAYER_KEYS[cls], f"the config of {where}", self.refuse)
        for key, value in cfg.items():
            self.setting(key, value, where)
        out: dict[str, Any] = {"module": "keras.layers", "class_name": cls, "config": cfg, "registered_name": None}
        if "build_config" in entry:
            out["build_config"] = self.build_config(entry["build_config"], where)
        if functional and depth == 0:
            out["name"] = cfg["name"]
            out["inbound_nodes"] = self.nodes(entry.get("inbound_nodes", []), where)
        return out

    def recurrent_keys(self, cfg: dict[str, Any], where: str) -> None:
        if cfg.get(TIME_MAJOR, False) is not False:
            raise self.refuse(
                f"{where} takes its inputs time-major ({TIME_MAJOR}={_said(cfg[TIME_MAJOR])}), which no Keras 3 "
                f"RNN does"
            )
        cfg.pop(TIME_MAJOR, None)
        cfg.pop(IMPLEMENTATION, None)

    def setting(self, key: str, value: Any, where: str) -> None:
        """A value Keras 3.15 reads as the old Keras meant it: an activation it has, a dtype, a built-in
        initializer, regularizer or constraint (the rest are plain values, checked by Keras as it builds)."""
        if key in ("activation", "recurrent_activation"):
            if not isinstance(value, str) or value not in KERAS3_ACTIVATIONS:
                raise self.refuse(f"{where} has {key} {_said(value)}, not one of Keras 3's own")
            if self.tf_keras and value not in SAME_ACTIVATIONS:
                raise self.refuse(
                    f"{where} has {key} {value!r}, which Keras 3 computes otherwise than tf.keras 2 did"
                    + (" (0.2x + 0.5 there, x/6 + 0.5 in Keras 3)" if value == "hard_sigmoid" else "")
                )
        if key == "dtype" and not _dtype(value):
            raise self.refuse(f"{where} has dtype {_said(value)}")
        kind = key.rsplit("_", 1)[-1]
        if kind in KERAS3_OBJECTS and value is not None:
            known = KERAS3_OBJECTS[kind]
            if isinstance(value, str):
                return
            held = _object(value, f"the {key} of {where}")
            if (
                held.get("module") not in (None, f"keras.{kind}s")
                or held.get("registered_name") is not None
                or not isinstance(held.get("class_name"), str)
                or held["class_name"] not in known
            ):
                raise self.refuse(f"{where} has {key} {_said(held.get('class_name'))}, not one of Keras' own")

    def build_config(self, value: Any, where: str) -> dict[str, Any]:
        held = _object(value, f"the build_config of {where}")
        _known_keys(held, {"input_shape"}, f"the build_config of {where}", self.refuse)
        if held.get("input_shape") is not None and not _shape_tree(held["input_shape"]):  # Keras 3's Functional: None
            raise BadInput(f"{self.path}: the build_config of {where} gives no input shape")
        return held

    def nodes(self, value: Any, where: str) -> list[Any]:
        """tf.keras' inbound nodes, [[[layer, node, tensor, kwargs], ...]] (Keras 3.15 reads them), or Keras 3's."""
        if not isinstance(value, list) or len(value) > MAX_OBJECTS:
            raise BadInput(f"{self.path}: the inbound nodes of {where} are not a list")
        for node in value:
            if isinstance(node, dict):  # Keras 3's own form
                continue
            if not isinstance(node, list) or len(node) > MAX_OBJECTS:
                raise BadInput(f"{self.path}: an inbound node of {where} is not a list")
            for call in node:
                if not (
                    isinstance(call, list)
                    and len(call) == 4
                    and isinstance(call[0], str)
                    and all(type(i) is int and 0 <= i < MAX_OBJECTS for i in call[1:3])
                ):
                    raise BadInput(f"{self.path}: an inbound node of {where} is not [layer, node, tensor, kwargs]")
                if call[3] != {}:
                    raise self.refuse(f"{where} is called with arguments ({_said(call[3])})")
        return value

    # --- the weights --------------------------------------------------------------------------

    def claim_weights(self, entries: list[dict[str, Any]], functional: bool) -> None:
        """Each layer's variables, where Keras 3.15 reads them (layers/<class>[_N]/...), from the same place in the
        source: the Kerases that wrote these files name a layer's group the same way. Every other dataset is
        refused, but for the optimizer's, left out with the training set-up.

        A Bidirectional's `layer` group is not carried: Keras 3.0 to 3.3.2's Bidirectional was a Wrapper tracking
        its template layer, never built, so saved without variables beside its two directions, and built when
        loading, which then expected its variables ("Layer 'lstm_cell' expected 3 variables, but received 0");
        Keras 3.3.3 made it a plain Layer of its two directions (keras-team/keras 67419fb), whose files hold
        forward_layer and backward_layer alone, as Keras 3.15 reads them.
        """
        used: dict[str, int] = {}
        root = self.file.root
        for entry in entries:
            if entry["class_name"] == "InputLayer" and not functional:
                self.groups.append(None)  # a Sequential's `layers` leaves its InputLayer out, and so does its file
                continue
            snake = snake_case(entry["class_name"])
            index = used.get(snake, 0)
            used[snake] = index + 1
            group = f"layers/{snake}" + (f"_{index}" if index else "")
            self.groups.append(group)
            self.layer_variables(entry, group)
        claimed = {dataset.name.lstrip("/") for dataset in self.variables.values()}
        for name in _datasets(root, self.path):
            top = name.split("/", 1)[0]
            if name in claimed or (top == OPTIMIZER_GROUP and self.dropped):
                continue
            raise self.refuse(f"model.weights.h5 holds {name}, which no layer of its config owns")

    def layer_variables(self, entry: dict[str, Any], group: str) -> None:
        cls, cfg = entry["class_name"], entry["config"]
        where = f"layer {cfg['name']!r}"
        if cls == "Dense":
            units = _count(cfg.get("units"), f"the units of {where}", self.path)
            self.expect(group, [(None, units)] + ([(units,)] if cfg.get("use_bias", True) else []), where)
        elif cls == "Embedding":
            rows = _count(cfg.get("input_dim"), f"the input_dim of {where}", self.path)
            columns = _count(cfg.get("output_dim"), f"the output_dim of {where}", self.path)
            self.expect(group, [(rows, columns)], where)
        elif cls in RECURRENT:
            self.cell(cls, cfg, f"{group}/cell", where)
        elif cls == "Bidirectional":
            backward = cfg.get("backward_layer") or cfg["layer"]
            for direction, inner in zip(KERAS_DIRECTION_GROUPS, (cfg["layer"], backward)):
                self.cell(inner["class_name"], inner["config"], f"{group}/{direction}/cell", where)
        else:
            self.expect(group, [], where)

    def cell(self, cls: str, cfg: dict[str, Any], group: str, where: str) -> None:
        units = _count(cfg.get("units"), f"the units of {where}", self.path)
        try:
            row = find_row("keras", cls, cfg)
        except Unsupported as exc:
            raise self.refuse(f"{where}: {exc}") from None
        bias = cfg.get("use_bias", True)
        kernel = f"{group}/vars/0"
        n_in = self.dataset(kernel, where).shape[0] if holds(self.file.root, kernel) else 0
        shapes = stored_shapes(row, units, n_in, units, has_bias=bias is not False)
        self.expect(group, [shapes[role] for role in KERAS_VARIABLES if role in shapes], where)

    def expect(self, group: str, shapes: list[tuple[int | None, ...]], where: str) -> None:
        """The layer's variables vars/0, vars/1, ... of these shapes (None: any size) and no others."""
        root = self.file.root
        for index, shape in enumerate(shapes):
            name = f"{group}/vars/{index}"
            if not holds(root, name):
                raise BadInput(f"{self.path}: {where} has no variable {name} in model.weights.h5")
            dataset = self.dataset(name, where)
            if len(dataset.shape) != len(shape) or any(n not in (None, m) for n, m in zip(shape, dataset.shape)):
                expected = "(" + ", ".join("any" if n is None else str(n) for n in shape) + ")"
                raise BadInput(f"{self.path}: {where}'s variable {name} has shape {dataset.shape}, not {expected}")
            self.variables[name] = dataset

    def dataset(self, name: str, where: str) -> h5py.Dataset:
        dataset = as_dataset(follow(self.file.root, name), name)
        check_tensor(dataset, f"{self.path}: {where}'s variable {name}", self.file.limit)
        return dataset


def rescue(keras_file: KerasFile) -> Rescued:
    """The model of a Keras file that holds one, as Keras 3.15 reads it."""
    translation = Translation(keras_file)
    config = translation.model()
    return Rescued(config, translation.variables, translation.dropped, translation.groups)


def weights_file(rescued: Rescued) -> bytes:
    """model.weights.h5 as Keras 3.15 lays it out: each layer's group, its vars, its variables as stored."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        h5.create_group("vars")
        for name, dataset in rescued.variables.items():
            values = np.asarray(dataset[...])
            if values.dtype.kind == "f" and (bad := count_non_finite(values)):  # copied as stored, and said
                rescued.non_finite[name] = bad
            written = h5.create_dataset(name, data=values)
            if is_bfloat16(dataset):
                written.attrs["dtype"] = "bfloat16"
        for group in list(_groups(h5)):  # every layer and cell group has its vars, as Keras writes them
            if "vars" not in group and not group.name.endswith("/vars") and group.name != "/layers":
                group.create_group("vars")
    return buffer.getvalue()


def _groups(h5: h5py.File) -> Iterator[h5py.Group]:
    found: list[h5py.Group] = []
    h5.visititems(lambda _, obj: found.append(obj) if isinstance(obj, h5py.Group) else None)
    return iter(found)


def _datasets(root: h5py.Group, path: Path) -> Iterator[str]:
    """Every dataset's path under the weights' top group, through hard links only, each group once."""
    pending, seen, count = [("", root)], {root.id}, 0
    while pending:
        prefix, group = pending.pop()
        for key in group:
            count += 1
            if count > MAX_OBJECTS:
                raise BadInput(f"{path}: model.weights.h5 holds more than {MAX_OBJECTS} objects")
            child = follow(group, key)
            if child.id in seen:
                continue
            seen.add(child.id)
            if isinstance(child, h5py.Group):
                pending.append((f"{prefix}{key}/", as_group(child, key)))
            else:
                yield prefix + key


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadInput(f"the model config is damaged: {what} is not an object")
    return value


def _known_keys(held: dict[str, Any], known: set[str] | frozenset[str], where: str, refuse: Any) -> None:
    unknown = sorted(str(k) for k in set(held) - set(known))
    if unknown:
        raise refuse(f"{where} has {', '.join(_said(k) for k in unknown[:3])}, a setting it has no rule for")


def _name_of(entry: dict[str, Any]) -> Any:
    cfg = entry.get("config")
    return cfg.get("name") if isinstance(cfg, dict) else entry.get("name")


def _said(value: Any) -> str:
    """A value from the file, quoted and cut short for a sentence."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dtype(value: Any) -> bool:
    if isinstance(value, str):
        return value in ("float16", "float32", "float64", "bfloat16", "int32", "int64", "uint8", "bool")
    return (
        isinstance(value, dict)
        and value.get("class_name") in ("DTypePolicy", "FloatDTypePolicy")
        and value.get("module") in ("keras", "keras.dtype_policies")
        and isinstance(value.get("config"), dict)
        and _dtype(value["config"].get("name"))
    )


def _shape_tree(value: Any, depth: int = 0) -> bool:
    """An input shape: a list of sizes (None: any) or, for a layer of several inputs, a list of shapes."""
    if not isinstance(value, list) or depth > 4 or len(value) > 64:
        return False
    if all(n is None or (type(n) is int and 0 <= n <= 1 << 31) for n in value):
        return True
    return all(_shape_tree(v, depth + 1) for v in value)


def _count(value: Any, what: str, path: Path) -> int:
    if type(value) is not int or not 0 < value <= 1 << 24:
        raise BadInput(f"{path}: {what} is {_said(value)}, not a positive number")
    return value


def holds_model(source: Path, rescued: bool = False) -> bool:
    """Whether a file is a .keras archive of a user's model (not one rnnconv wrote of RNNs alone); with `rescued`,
    one a Keras before 3.3.3 wrote, whose whole model a conversion to Keras rescues."""
    from rnnconv.formats.probe import ZIP_MAGIC

    with open(source, "rb") as f:
        if f.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            return False
    with KerasFile(source) as keras_file:
        number = version_number(keras_file.versions.get("keras_version"))
        return not keras_file.records and not (rescued and (number is None or number >= RESCUED_BEFORE))


def write_rescued(source: Path, path: Path, force: bool = False) -> Rescued:
    """The whole model of `source` as a `.keras` archive Keras 3.15 loads, or its `.weights.h5` alone."""
    from rnnconv.formats.keras.writer import write_archive

    with KerasFile(source) as keras_file:
        if keras_file.kind != "keras-archive":
            raise BadInput(f"{source} is no .keras archive: the rescue of a whole model reads .keras archives")
        rescued = rescue(keras_file)
        weights = weights_file(rescued)
    if path.name.endswith(".weights.h5"):
        with atomic_outputs([path], force) as (tmp,):
            tmp.write_bytes(weights)
    elif path.suffix == ".keras":
        write_archive(path, rescued.config, weights, force)
    else:
        raise BadInput(f"output {path} must end in .keras or .weights.h5 for Keras")
    return rescued
