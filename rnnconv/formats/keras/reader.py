"""Reading Keras files with h5py, zipfile and json alone (no TensorFlow, Keras or torch).

Handles legacy HDF5 (`model.save('m.h5')` and `save_weights`) from Keras 2,
tf-keras and Keras 3; Keras 3 `.weights.h5`; and `.keras` archives. Layers may be
plain, `Bidirectional`, `RNN(cell)`, nested in sub-models, or tf-keras'
`CuDNNLSTM`/`CuDNNGRU`. Every recurrent layer becomes a `KerasLayer`: its class,
config and stored tensors; `to_canonical` turns one into the canonical form
through the Keras rows of the layout table. What a model config says is read in
`config.py`, the HDF5 tensors (and what a damaged file may hold) in `hdf5.py`.
"""

from __future__ import annotations

import dataclasses
import io
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py

from rnnconv.core.canonical import CanonicalRNN, Columns, RNNSpec
from rnnconv.core.contracts import Provenance, RNNSizes
from rnnconv.errors import BadInput, RnnconvError, Unsupported, first_line
from rnnconv.formats import _zip
from rnnconv.formats.keras import PLUGIN
from rnnconv.formats.keras.config import (
    MAX_NESTING,
    ROLE_OF_NAME,
    ConfigEntry,
    KerasLayer,
    inferred_layer,
    old_defaults,
    pick_layer,
    walk_config,
)
from rnnconv.formats.keras.hdf5 import (
    DAMAGED,
    HDF5_TIMEOUT,
    Structure,
    TensorReader,
    Window,
    as_dataset,
    as_group,
    attribute_or_none,
    check_tensor,
    dtype_name,
    fetcher,
    follow,
    holds,
    identity,
    json_attribute,
    text_of,
    walk_structure,
)
from rnnconv.formats.keras.wire import KERAS_DIRECTION_GROUPS
from rnnconv.formats.probe import HDF5_MAGIC, ZIP_MAGIC
from rnnconv.formats.reading import Found, Settled, StoredCell, read, settle
from rnnconv.formats.sources import SOURCE_KEY, read_source_records
from rnnconv.safeio.digests import SourcePass
from rnnconv.safeio.inputs import Guard, add_guard, json_document, pin, regular_file, within
from rnnconv.table.apply import find_row, keras_era, rows_for
from rnnconv.table.constants import KERAS_VARIABLES, KIND_OF_ROLE, MATRIX_ROLES, MAX_SIZE, NONLINEARITY_KEY
from rnnconv.table.rows import DEFAULT_BIAS_SPLIT, VERSIONED_DEFAULTS, Row

if TYPE_CHECKING:
    from rnnconv.formats.keras.savedmodel import ObjectFile


def opened(path: Path, reading: SourcePass | None = None) -> KerasFile | ObjectFile:
    """A Keras file, or a SavedModel's saved_model.pb or a TF2 checkpoint's index, open."""
    from rnnconv.formats.keras.wire import is_object_file

    if is_object_file(path):
        from rnnconv.formats.keras.savedmodel import ObjectFile

        return ObjectFile(path)
    return KerasFile(path, reading)


class KerasFile:
    """An open Keras file: its kind, versions, model config and recurrent layers."""

    def __init__(self, path: Path, reading: SourcePass | None = None):
        """`reading`, the source's read for its digest (not begun), checks a stored member's CRC-32 too."""
        self.path = path
        self._reading = reading
        self.size = regular_file(path)
        self.reader = TensorReader(path)  # shared by every layer: one tensor in memory at a time
        self._closers: list[Any] = []
        self.shown: dict[str, dict[str, str]] = {}  # by layer: settings shown elsewhere than a config (none here)
        self.config: dict[str, Any] | None = None
        self.versions: dict[str, str] = {}
        self.members: tuple[str, ...] = ()  # a .keras archive's member names
        self.limit = self.size  # no tensor can hold more bytes than its file (Keras never compresses datasets)
        try:
            self.kind, root = self._open()
            self.root: h5py.Group = root  # the weights' top group (a whole model's rescue copies every layer's)
            self.layers = self._find_layers(root)
            # of a file rnnconv wrote: each RNN's source, by its layers; each SimpleRNN's activation, by its layer
            recorded = root.attrs.get(SOURCE_KEY)
            self.records = {} if recorded is None else read_source_records(text_of(recorded), path)
            activations = json_document(text_of(root.attrs.get(NONLINEARITY_KEY, "{}")), f"{path}: {NONLINEARITY_KEY}")
            if not isinstance(activations, dict) or not all(isinstance(v, str) for v in activations.values()):
                raise BadInput(f"{path}: its {NONLINEARITY_KEY} record does not map layers to activations")
            self.activations: dict[str, str] = activations
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
        return pick_layer(self.layers, name, self.path)

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
            self.config = json_attribute(h5, "model_config", path)
            self.versions = {k: text_of(h5.attrs[k])[:100] for k in ("keras_version", "backend") if k in h5.attrs}
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
            structure = Structure(str(self.path), identity(source))
        elif isinstance(source, _StoredMember):
            structure = Structure(str(self.path), identity(source.file), source.start, source.size)
        else:
            structure = Structure(data=source.getvalue())
        within(
            HDF5_TIMEOUT,
            walk_structure,
            (structure,),
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
        archive = _zip.open_archive(self.path)
        self._closers.append(archive)
        names = set(archive.namelist())
        self.members = tuple(sorted(names))
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
            self.reader.hdf5_at = member.start
            # the structure walked first: in a fork while this is the only thread, not in an interpreter started
            # for it (0.3 s or more) because the CRC-32's thread runs already
            h5 = self._h5(member)
            add_guard(member.crc_guard(self._reading))
            return h5
        return self._h5(io.BytesIO(_zip.read_member(archive, "model.weights.h5", self.path)))

    # --- finding the recurrent layers -------------------------------------------------------

    def _find_layers(self, root: h5py.Group) -> list[KerasLayer]:
        if self.kind == "keras-h5":
            weights = as_group(follow(root, "model_weights"), "model_weights") if holds(root, "model_weights") else root
            layers = (
                [self._legacy_layer(weights, entry) for entry in walk_config(self.config)]
                if self.config
                else _infer_legacy(weights)
            )
        elif self.config:
            layers = [self._keras3_layer(root, entry) for entry in walk_config(self.config)]
        else:
            layers = _infer_keras3(root)
        for layer in layers:
            layer.keras_version = self.versions.get("keras_version")
            for tensors in [] if layer.refusal else layer.tensors:  # a refused layer's tensors are never read
                for role, dataset in tensors.items():
                    check_tensor(dataset, f"{self.path}: {layer.name} {role}", self.limit)
        return layers

    def _legacy_layer(self, weights: h5py.Group, entry: ConfigEntry) -> KerasLayer:
        if not entry.refusal:
            try:
                return entry.layer(*self._legacy_tensors(weights, entry))
            except Unsupported as exc:  # a recurrent layer of a kind that does not convert
                entry = dataclasses.replace(entry, refusal=str(exc))
        return _best_effort(entry, lambda: self._legacy_tensors(weights, entry))

    def _legacy_tensors(
        self, weights: h5py.Group, entry: ConfigEntry
    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        if not holds(weights, entry.top):
            raise BadInput(f"{self.path}: the config names layer {entry.top!r} but the file holds no weights for it")
        group = as_group(follow(weights, entry.top), entry.top)
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
                if not holds(group, name):
                    raise BadInput(f"{self.path}: weight {name!r} of layer {entry.name!r} is listed but missing")
                roles[role], labels[role] = as_dataset(follow(group, name), name), name
            tensors.append(roles)
            tensor_names.append(labels)
        return tensors, tensor_names

    def _keras3_layer(self, root: h5py.Group, entry: ConfigEntry) -> KerasLayer:
        if entry.refusal:
            return _best_effort(entry, lambda: self._keras3_tensors(root, entry))
        return entry.layer(*self._keras3_tensors(root, entry))

    def _keras3_tensors(
        self, root: h5py.Group, entry: ConfigEntry
    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        if not holds(root, entry.group_path):
            raise BadInput(
                f"{self.path}: the config names layer {entry.name!r} but the weights file has no "
                f"group {entry.group_path}"
            )
        group = as_group(follow(root, entry.group_path), entry.group_path)
        if entry.wrapper == "Bidirectional":
            cells = [as_group(follow(group, s), s) for s in KERAS_DIRECTION_GROUPS]
        elif entry.cells > 1:  # StackedRNNCells: cell/cells/<cell name>, for the sizes of a layer that does not convert
            stacked = as_group(follow(group, "cell/cells"), "cells")
            cells = [as_group(follow(stacked, name), name) for name in sorted(stacked, key=_numbered)]
        else:
            cells = [group]
        tensors, tensor_names = zip(*(_keras3_cell(cell) for cell in cells))
        return list(tensors), list(tensor_names)


def _numbered(name: str) -> tuple[int, str]:
    """Keras' unique names in the order they were made: lstm_cell, lstm_cell_1, lstm_cell_2, ..., lstm_cell_10."""
    found = re.fullmatch(r"(.*?)(?:_(\d+))?", name)
    return (int(found[2]) if found and found[2] else 0), name


def _best_effort(entry: ConfigEntry, tensors: Any) -> KerasLayer:
    """A layer that does not convert, with whatever tensors can be found for its sizes (none if they cannot)."""
    try:
        return entry.layer(*tensors())
    except (RnnconvError, *DAMAGED):
        return entry.layer([], [])


class _StoredMember(Window):
    """An uncompressed zip member read in place, so h5py needs no copy of a large file."""

    def __init__(self, path: Path, info: zipfile.ZipInfo, archive_size: int):
        self._path, self._info = path, info
        self.file = open(path, "rb")  # noqa: SIM115 -- held open as the member's stream; closed by close()
        super().__init__(self.file, _zip.stored_start(path, info, archive_size), info.file_size)

    def crc_guard(self, reading: SourcePass | None) -> Guard:
        """A check, computed in the background, that the member's bytes are those its CRC-32 was made of."""
        return _zip.crc_guard(self._path, self._info, self.start, reading)

    def close(self) -> None:
        self.file.close()
        super().close()


def _weight_names(group: h5py.Group) -> list[str]:
    """The layer's `weight_names` attribute, joined from its chunks when it was split."""
    if "weight_names" in group.attrs:
        raw = list(group.attrs["weight_names"])
    else:
        raw, chunk = [], 0
        while f"weight_names{chunk}" in group.attrs:
            raw += list(group.attrs[f"weight_names{chunk}"])
            chunk += 1
    return [text_of(n) for n in raw]


def _infer_legacy(weights: h5py.Group) -> list[KerasLayer]:
    """Recurrent layers of a legacy weights file without a model config, from names and shapes."""
    layers: list[KerasLayer] = []
    stored = attribute_or_none(weights, "layer_names")
    top_names = [] if stored is None else [text_of(n) for n in stored]
    for top in top_names:
        if not holds(weights, top):
            continue
        group = as_group(follow(weights, top), top)
        cells: dict[str, dict[str, str]] = {}
        for name in _weight_names(group):
            parent, _, leaf = name.rpartition("/")
            role = ROLE_OF_NAME.get(leaf.split(":")[0])
            if role and holds(group, name):
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
            tensors = [{r: as_dataset(follow(group, n), n) for r, n in roles.items()} for roles in directions]
            layer = inferred_layer(name, tensors, directions, named=True)
            if layer:
                layers.append(layer)
    return layers


def _keras3_cell(group: h5py.Group) -> tuple[dict[str, Any], dict[str, str]]:
    """kernel, recurrent_kernel, bias of a layer group: in `cell/vars`, or `vars` (CuDNNLSTM/CuDNNGRU)."""
    cell = as_group(follow(group, "cell"), "cell") if holds(group, "cell") else None
    vars_ = as_group(
        follow(cell, "vars") if cell is not None and holds(cell, "vars") else follow(group, "vars"), "vars"
    )
    roles, names = {}, {}
    for index, (role, variable) in enumerate(KERAS_VARIABLES.items()):
        if holds(vars_, str(index)):
            roles[role] = as_dataset(follow(vars_, str(index)), f"{vars_.name}/{index}")
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
            if all(holds(child, side) for side in KERAS_DIRECTION_GROUPS):
                cells = [_keras3_cell(as_group(follow(child, s), s)) for s in KERAS_DIRECTION_GROUPS]
            elif holds(child, "cell/vars") or (holds(child, "vars") and len(as_group(follow(child, "vars"), "vars"))):
                cells = [_keras3_cell(child)]
            else:
                visit(child, depth + 1)
                continue
            layer = inferred_layer(_keras3_name(child), [c[0] for c in cells], [c[1] for c in cells], named=False)
            if layer:
                layers.append(layer)

    visit(root, 0)
    return layers


def _keras3_name(group: h5py.Group) -> str:
    if holds(group, "vars") and "name" in follow(group, "vars").attrs:
        return text_of(follow(group, "vars").attrs["name"])[:200]
    return "/".join(part for part in group.name.strip("/").split("/") if part != "layers")


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
    unsaid = [key for key in row.unstored if layer.unrecorded and not (stated or {}).get(key)]
    if unsaid:
        flags = " ".join(f"{PLUGIN.read_settings[key].flags[0]} X" for key in unsaid)
        defaults = ", ".join(f"{key}={row.setting(config, key)}" for key in unsaid)
        refusal = (
            f"{layer.unrecorded}, so nothing says the {' or '.join(unsaid)} of layer {layer.name!r} "
            f"({layer.display_class}), and rnnconv assumes none: state the model's own with {flags} (Keras' "
            f"defaults are {defaults})"
        )
        refusals.update(dict.fromkeys(unsaid, refusal))
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

    kernels = reader or TensorReader()

    def cell(_: int, direction: int, spec: RNNSpec) -> StoredCell:
        tensors, names = layer.tensors[direction], layer.tensor_names[direction]
        return StoredCell(
            fetch=fetcher(tensors, kernels, row),
            shapes={role: tuple(t.shape) for role, t in tensors.items()},
            names={role: names.get(role) or name for role, name in KERAS_VARIABLES.items()},
            where=f"{what} (units={units}, input {n_in})",
        )

    def columns(_: int, direction: int, kind: str) -> Columns | None:
        """A kernel whose column blocks are the gates (in the row's order), as `cell` takes its tensors."""
        role = next((r for r in MATRIX_ROLES if KIND_OF_ROLE[r] == kind), None)
        tensor = layer.tensors[direction].get(role) if role is not None and row.matrix.transposed else None
        return None if tensor is None else (kernels.stored(tensor), row.gate_order)

    notes = [f"{layer.name}: {text}" for text in implied]
    if layer.inferred:
        notes.append(_inferred_note(layer, row, settled))
    later = []
    if layer.extra.get("go_backwards"):
        later.append(f"{layer.name}: go_backwards=True; feed the converted RNN the sequence reversed to match Keras")
    merge = layer.extra.get("merge_mode", "concat")
    if layer.wrapper == "Bidirectional" and merge != "concat":
        later.append(
            f"{layer.name}: merge_mode={merge!r}; the converted RNN gives each direction's output (forward, then "
            f"reverse), not merged: apply {merge!r} to them to match Keras"
        )
    found = Found(
        layer.name,
        row,
        settled,
        input_size=n_in,
        hidden=units,
        dtype=dtype_name(first["input_matrix"]),
        cell=cell,
        layer_class=layer.display_class,
        bidirectional=layer.bidirectional,
        has_bias=has_bias,
        bias_split=bias_split,
        without_bias="use_bias=False",
        notes=notes,
        later_notes=later,
        provenance={"keras_config": _config_summary(layer.name, settled.config, layer.extra)},
        handover={"columns": columns},
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
        dtype: str | None = dtype_name(kernel)
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


def _config_summary(name: str, config: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("units", "activation", "recurrent_activation", "use_bias", "reset_after", "go_backwards")
    summary = {k: config[k] for k in keys if k in config and isinstance(config[k], (str, int, bool))}
    summary.update({k: v for k, v in extra.items() if isinstance(v, (str, int, bool))})
    return summary
