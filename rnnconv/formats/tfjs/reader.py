"""TensorFlow.js layers models read without TensorFlow.js: model.json's topology (its recurrent layers, through the
Keras config walk), its manifest (each weight's group, offset and dtype, checked against the shards' sizes), the
layers stacked one after the other that are one RNN, and each one's canonical form through the table's tfjs rows."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats import sources
from rnnconv.formats._graph import Chain, Graph, consecutive, named, same_rnn
from rnnconv.formats.keras.config import MAX_NESTING, ConfigEntry, walk_config
from rnnconv.formats.reading import Found, StoredCell, read, settle
from rnnconv.formats.tfjs.wire import (
    DIRECTION_PREFIXES,
    DTYPE_BYTES,
    KIND,
    LAYERS_MODEL,
    MANIFEST,
    METADATA,
    QUANTIZED_BYTES,
    TOPOLOGY,
)
from rnnconv.safeio.inputs import JSON_LIMIT, json_document, read_array, regular_file, resolved
from rnnconv.table.apply import classes_of, find_row
from rnnconv.table.constants import KERAS_VARIABLES, MAX_SIZE

MAX_RANK = 8  # dimensions of a weight's shape: far beyond any layer's
TFJS_CLASSES = classes_of("tfjs")


@dataclass(frozen=True)
class Group:
    """A manifest group's shards, concatenated in order: their paths and sizes."""

    paths: tuple[Path, ...]
    sizes: tuple[int, ...]

    def read(self, start: int, count: int) -> np.ndarray:
        """Bytes [start, start + count) of the shards joined, read now, across shard boundaries."""
        pieces, at = [], 0
        for path, size in zip(self.paths, self.sizes):
            low, high = max(start, at), min(start + count, at + size)
            if low < high:
                pieces.append(read_array(path, low - at, np.uint8, (high - low,)))
            at += size
        return np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)


@dataclass(frozen=True)
class Weight:
    """One weight of the manifest: where its bytes lie, how they are stored, what they dequantize to."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    group: Group
    offset: int
    quantization: dict[str, Any] | None = None

    @property
    def stored(self) -> str:
        return self.quantization["dtype"] if self.quantization else self.dtype

    def values(self) -> np.ndarray:
        """The float32 values TensorFlow.js loads (quantized ones dequantized as tfjs-core's decodeWeights does)."""
        count = math.prod(self.shape)
        size = QUANTIZED_BYTES.get(self.stored) or DTYPE_BYTES[self.stored]
        words = self.group.read(self.offset, count * size)
        if self.stored == "float16":
            values = words.view("<f2").astype(np.float32)
        elif self.quantization:
            q = self.quantization
            values = (words.view("<u2" if self.stored == "uint16" else "u1") * q["scale"] + q["min"]).astype(np.float32)
        else:
            values = words.view("<f4").astype(np.float32)
        return values.reshape(self.shape)


@dataclass
class TfjsLayer:
    """One recurrent layer of the topology: its class, config, wrapper, and weights by direction and role."""

    name: str
    source_class: str
    config: dict[str, Any]
    wrapper: str | None
    extra: dict[str, Any] = field(default_factory=dict)  # go_backwards, merge_mode
    tensors: list[dict[str, Weight]] = field(default_factory=list)
    refusal: str | None = None
    damaged: bool = False  # whether the refusal is of a damaged file (BadInput), not of a layer cuDNN cannot run
    position: int = -1  # its index among the model's top-level layers (-1: inside a nested model)
    fed_by: str | None = None  # the layer its input comes from, where the topology says (a functional model)

    @property
    def directions(self) -> int:
        return max(len(self.tensors), 1)

    def _dim(self, role: str, axis: int) -> int:
        shape = self.tensors[0][role].shape if self.tensors and role in self.tensors[0] else ()
        return shape[axis] if len(shape) == 2 else 0

    @property
    def input_size(self) -> int:
        return self._dim("input_matrix", 0)

    @property
    def hidden(self) -> int:
        return self._dim("recurrent_matrix", 0)

    @property
    def has_bias(self) -> bool:
        return bool(self.tensors) and "bias" in self.tensors[0]

    @property
    def width(self) -> int:
        return self.directions * self.hidden

    @property
    def kind(self) -> object:
        if self.refusal is not None:
            return None
        settings = tuple(str(self.config.get(k)) for k in ("activation", "recurrent_activation"))
        return (self.source_class, self.hidden, self.directions, self.has_bias, settings)

    @property
    def shown_class(self) -> str:
        return f"{self.wrapper}({self.source_class})" if self.wrapper else self.source_class


class TfjsFile(Graph[TfjsLayer]):
    """A layers model: its recurrent layers, and the stacks of them that are one RNN."""

    what = "recurrent layer"

    def __init__(
        self,
        path: Path,
        layers: list[TfjsLayer],
        recorded: Provenance | None,
        shards: list[Path],
        ends: tuple[list[str], list[str]] = ([], []),
    ):
        super().__init__(path, KIND, layers, _chains(layers), recorded)
        self.shards = shards
        self.input_names, self.output_names = ends  # a functional model's input and output layers (a Sequential: none)
        self.never_loads: str | None = None  # why TensorFlow.js's loader would never finish loading it (`stuck_call`)

    def nothing_held(self) -> str:
        return f"{self.path} is a TensorFlow.js layers model with no recurrent layer ({', '.join(TFJS_CLASSES)})"

    @classmethod
    def load(cls, path: Path) -> TfjsFile:
        size = regular_file(path)
        if size > JSON_LIMIT:
            raise BadInput(f"{path} is {size} bytes, more than any model.json needs")
        document = json_document(path.read_bytes(), str(path))
        if not isinstance(document, dict) or not isinstance(document.get(TOPOLOGY), dict):
            raise BadInput(f"{path} is no TensorFlow.js layers model: it has no {TOPOLOGY} object")
        kind = document.get("format", LAYERS_MODEL)
        if kind != LAYERS_MODEL:
            raise BadInput(
                f"{path} is a TensorFlow.js {cut(kind)!r} model, not a layers model: rnnconv reads the recurrent "
                f"layers of a {LAYERS_MODEL}"
            )
        weights = _manifest(path, document.get(MANIFEST))
        topology = document[TOPOLOGY]
        model = topology.get("model_config", topology)  # the converter of Keras 2.1 files nests it so
        if not isinstance(model, dict) or "config" not in model:
            raise BadInput(f"{path} is damaged: its {TOPOLOGY} has no model config (the model's class and layers)")
        order, fed_by = _top_level(model)
        layers = []
        for entry in walk_config(model):
            layer = _layer(entry, weights)
            if entry.top == entry.name:
                layer.position = order.get(entry.name, -1)
                layer.fed_by = fed_by.get(entry.name)
            layers.append(layer)
        metadata = document.get(METADATA)
        record = metadata.get(sources.SOURCE_KEY) if isinstance(metadata, dict) else None
        recorded = None if record is None else sources.read_source_record(_text(record, path), path)
        shards = list(dict.fromkeys(p for w in weights.values() for p in w.group.paths))
        file = cls(path, layers, recorded, shards, (_ends(model, "input_layers"), _ends(model, "output_layers")))
        file.never_loads = stuck_call(model)
        return file


def _text(record: Any, path: Path) -> str:
    if not isinstance(record, str):
        raise BadInput(f"{path}: its {METADATA}.{sources.SOURCE_KEY} is no string")
    return record


def _manifest(path: Path, manifest: Any) -> dict[str, Weight]:
    """Every weight of the manifest by name, located in its group's shards (which must hold them all)."""
    if not isinstance(manifest, list):
        raise BadInput(f"{path} has no {MANIFEST} list (the groups of its weights)")
    weights: dict[str, Weight] = {}
    for number, group in enumerate(manifest, 1):
        where = f"{path}: weight group {number}"
        if not isinstance(group, dict) or not isinstance(group.get("paths"), list):
            raise BadInput(f"{where} has no paths list")
        if not isinstance(group.get("weights"), list):
            raise BadInput(f"{where} has no weights list")
        shards = tuple(_shard(path, p, where) for p in group["paths"])
        sizes = tuple(regular_file(shard, "the weight shard") for shard in shards)
        held = Group(shards, sizes)
        offset = 0
        for spec in group["weights"]:
            weight = _weight(spec, held, offset, where)
            if weight.name in weights:
                raise BadInput(f"{path} lists weight {cut(weight.name)!r} twice")
            weights[weight.name] = weight
            size = QUANTIZED_BYTES.get(weight.stored) or DTYPE_BYTES[weight.stored]
            offset += math.prod(weight.shape) * size
        if offset > sum(sizes):
            raise BadInput(
                f"{where}'s weights take {offset} bytes and its shards ({listing(p.name for p in shards)}) hold "
                f"{sum(sizes)}: a shard is missing or cut short"
            )
    return weights


def _shard(model: Path, name: Any, where: str) -> Path:
    """A shard's path: a relative name inside the model's folder, as TensorFlow.js's file loader joins it."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise BadInput(f"{where} names a shard that is no file name")
    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive:
        raise BadInput(f"{where} names shard {cut(name)!r} by an absolute path: shards lie beside model.json")
    folder = resolved(model).parent
    shard = resolved(folder / name)
    if ".." in PurePosixPath(name.replace("\\", "/")).parts or not shard.is_relative_to(folder):
        raise BadInput(f"{where} names shard {cut(name)!r} outside the model's folder: shards lie beside model.json")
    return shard


def _weight(spec: Any, group: Group, offset: int, where: str) -> Weight:
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise BadInput(f"{where} holds a weight with no name")
    name = spec["name"]
    what = f"{where}: weight {cut(name)!r}"
    shape = spec.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_RANK
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_SIZE for d in shape)
    ):
        raise BadInput(f"{what} has shape {cut(shape)}, not a list of sizes")
    dtype = spec.get("dtype")
    if dtype not in DTYPE_BYTES:
        known = ", ".join(DTYPE_BYTES)
        raise BadInput(f"{what} has dtype {cut(dtype)!r}; a layers model's weights are {known}")
    quantization = spec.get("quantization")
    if quantization is not None:
        if not isinstance(quantization, dict) or quantization.get("dtype") not in QUANTIZED_BYTES:
            raise BadInput(
                f"{what} is quantized to {cut(quantization)}; TensorFlow.js quantizes to uint8, uint16 or float16"
            )
        if quantization["dtype"] != "float16" and not all(
            isinstance(quantization.get(k), (int, float)) and math.isfinite(quantization[k]) for k in ("scale", "min")
        ):
            raise BadInput(f"{what} is quantized to {quantization['dtype']} without a finite scale and min")
    return Weight(name, tuple(shape), dtype, group, offset, quantization)


def _top_level(model: Any) -> tuple[dict[str, int], dict[str, str]]:
    """The top-level layers' positions by name, and (a functional model) the layer each one's input comes from."""
    entries = _entries(model)
    inputs = set(_ends(model, "input_layers"))
    order: dict[str, int] = {}
    fed_by: dict[str, str] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        name = _name(entry)
        if isinstance(name, str):
            order[name] = index
            source = _inbound(entry.get("inbound_nodes"), inputs)
            if source is not None:
                fed_by[name] = source
    return order, fed_by


def _entries(model: Any) -> list[Any]:
    config = model.get("config") if isinstance(model, dict) else None
    entries = config if isinstance(config, list) else config.get("layers") if isinstance(config, dict) else None
    return entries if isinstance(entries, list) else []


def stuck_call(model: Any, depth: int = 0) -> str | None:
    """Why TensorFlow.js's loader would never finish loading a functional model, None where it would: a layer called
    on a layer the model does not have, on a call of it that is never made, or in a cycle. Its Container.fromConfig
    puts back a call it cannot make yet and tries again until every call is made, so such a model hangs it (no
    error). The calls are made here as it makes them, each as soon as what it is called on exists."""
    entries = [e for e in _entries(model) if isinstance(e, dict)]
    made: dict[str, int] = {}  # each layer's calls made (an InputLayer's one, on its creation)
    calls: list[tuple[str, dict[str, int] | None]] = []  # (layer, the calls of each layer it needs made), in order
    for entry in entries:
        name = _name(entry)
        if not isinstance(name, str):
            continue
        made[name] = 1 if entry.get("class_name") == "InputLayer" else 0
        nodes = entry.get("inbound_nodes")
        # (a call on nothing makes none: TensorFlow.js calls the layer on no tensors)
        calls += [
            (name, _needs(node))
            for node in (nodes if isinstance(nodes, list) else [])
            if node and isinstance(node, list)
        ]
        config = entry.get("config")
        nested = depth < MAX_NESTING and isinstance(config, dict) and "layers" in config  # a model, loaded alike
        if nested and (found := stuck_call(entry, depth + 1)):
            return found
    waiting: dict[tuple[str, int], list[int]] = {}  # (layer, its calls made) -> the calls that wait for that many
    ready, left = list(range(len(calls))), len(calls)
    while ready:
        index = ready.pop()
        layer, needs = calls[index]
        unmet = [(name, count) for name, count in (needs or {"": 1}).items() if made.get(name, 0) < count]
        if unmet:
            waiting.setdefault(unmet[0], []).append(index)
            continue
        made[layer] += 1
        left -= 1
        ready += waiting.pop((layer, made[layer]), [])
    if not left:
        return None
    # the first stuck call in the config's order: where a cycle closes, not what waits downstream of it
    (name, count), index = min(((key, i) for key, waiters in waiting.items() for i in waiters), key=lambda x: x[1])
    on = f"call {count - 1} of layer {cut(name)!r}" if name else "something that is no [layer, call, output]"
    return (
        f"layer {cut(calls[index][0])!r} is called on {on}, which the model never makes (no such layer, fewer calls, "
        f"or a cycle): TensorFlow.js's loader would wait for it forever"
    )


def _needs(node: list[Any]) -> dict[str, int] | None:
    """The calls of each layer a call ([[name, call, output, kwargs], ...]) needs made: one more than the highest of
    its it is called on; None where an input is no [name, call, ...]."""
    needs: dict[str, int] = {}
    for given in node:
        if not (isinstance(given, list) and len(given) >= 2 and isinstance(given[0], str)):
            return None
        call = given[1]
        if not isinstance(call, int) or isinstance(call, bool) or call < 0:
            return None
        needs[given[0]] = max(needs.get(given[0], 0), call + 1)
    return needs


def _name(entry: dict[str, Any]) -> Any:
    own = entry.get("config")
    return entry.get("name") or (own.get("name") if isinstance(own, dict) else None)


def _ends(model: Any, key: str) -> list[str]:
    """The names of the layers a functional model's config gives as its inputs or outputs (`input_layers`,
    `output_layers`: [[name, 0, 0], ...]), in order; none for a Sequential."""
    config = model.get("config") if isinstance(model, dict) else None
    ends = config.get(key) if isinstance(config, dict) else None
    listed = ends if isinstance(ends, list) else []
    return [end[0] for end in listed if isinstance(end, list) and end and isinstance(end[0], str)]


def _inbound(nodes: Any, inputs: set[str]) -> str | None:
    """The one layer a functional model's layer is called on ([[[name, 0, 0, {}]]]), where it is one. A recurrent
    layer called on [x, h, c] takes the others as its initial states (Keras 2's and TensorFlow.js's RNN call): it is
    fed by x's where they are the model's inputs, as in a streaming model."""
    if nodes is None:
        return None
    if isinstance(nodes, list) and len(nodes) == 1 and isinstance(nodes[0], list) and nodes[0]:
        call, *states = nodes[0]
        given = all(isinstance(s, list) and s and isinstance(s[0], str) and s[0] in inputs for s in states)
        if isinstance(call, list) and call and isinstance(call[0], str) and given:
            return call[0]
    return ""  # called on several, or on something else: fed by no one layer


def _layer(entry: ConfigEntry, weights: dict[str, Weight]) -> TfjsLayer:
    """A recurrent layer of the topology with its weights found by name (with or without the cell's name)."""
    layer = TfjsLayer(entry.name, entry.source_class, entry.config, entry.wrapper, entry.extra, refusal=entry.refusal)
    what = f"layer {cut(entry.name)!r} ({layer.shown_class})"
    base = re.escape(entry.name)
    bidirectional = entry.wrapper == "Bidirectional"
    scopes = [f"{base}/{re.escape(p)}[^/]*" for p in DIRECTION_PREFIXES] if bidirectional else [base]
    for scope in scopes:
        found: dict[str, Weight] = {}
        for role, variable in KERAS_VARIABLES.items():
            pattern = re.compile(f"{scope}/(?:[^/]+/)?{variable}")
            matches = [w for n, w in weights.items() if pattern.fullmatch(n)]
            if len(matches) > 1 and layer.refusal is None:
                layer.refusal = (
                    f"{what} has {len(matches)} weights named {variable}: {listing(w.name for w in matches)}"
                )
                layer.damaged = True
            elif matches:
                found[role] = matches[0]
        layer.tensors.append(found)
    if layer.refusal is None:
        layer.damaged = (damage := _damage(layer, what)) is not None
        layer.refusal = damage or _refusal(layer, what)
    return layer


def _damage(layer: TfjsLayer, what: str) -> str | None:
    """What is wrong with a layer's weights or config, as a file's damage; None where nothing is."""
    config = layer.config
    for direction, found in enumerate(layer.tensors):
        missing = [KERAS_VARIABLES[r] for r in ("input_matrix", "recurrent_matrix") if r not in found]
        if config.get("use_bias", True) is True and "bias" not in found:
            missing.append(KERAS_VARIABLES["bias"])
        if missing:
            side = f" {DIRECTION_PREFIXES[direction].rstrip('_')}" if layer.wrapper == "Bidirectional" else ""
            return f"{what} has no{side} {' or '.join(missing)} among the manifest's weights"
        for role, weight in found.items():
            if weight.dtype != "float32":
                return f"{what}: weight {cut(weight.name)!r} is {weight.dtype}, not float32"
            if role != "bias" and len(weight.shape) != 2:
                return f"{what}: weight {cut(weight.name)!r} has shape {weight.shape}, not a matrix"
    units = config.get("units")
    if units is not None and units != layer.hidden:
        return f"{what} has units={cut(units)} and a {KERAS_VARIABLES['recurrent_matrix']} of {layer.hidden} rows"
    return None


def _refusal(layer: TfjsLayer, what: str) -> str | None:
    """Why a layer does not convert, beyond its row's refusal; None where it does."""
    if layer.source_class not in TFJS_CLASSES:
        return f"{what} is not among TensorFlow.js's recurrent layers rnnconv converts ({', '.join(TFJS_CLASSES)})"
    if layer.extra.get("go_backwards"):
        return f"{what} has go_backwards=true: it reads its sequence reversed, which no cuDNN layer does"
    if layer.wrapper == "Bidirectional" and layer.extra.get("merge_mode") != "concat":
        return f"{what} merges its directions by {cut(layer.extra.get('merge_mode'))!r}; cuDNN concatenates them"
    return None


def _chains(layers: list[TfjsLayer]) -> list[Chain[TfjsLayer]]:
    """Layers one after the other at the top level, alike, each fed all the one before gives: one RNN each run."""

    def link(below: TfjsLayer, above: TfjsLayer) -> bool:
        follows = below.position >= 0 and above.position == below.position + 1
        return follows and above.fed_by in (None, below.name) and same_rnn(below, above)

    return named(consecutive(layers, link))


def to_canonical(chain: Chain[TfjsLayer], source: Provenance, file: TfjsFile) -> CanonicalRNN:
    first = chain.first
    for layer in chain.layers:
        if layer.refusal:
            raise BadInput(layer.refusal) if layer.damaged else Unsupported(layer.refusal)
    row = find_row("tfjs", first.source_class, first.config)
    settled = settle(row, first.config, chain.name, unstored=())

    def cell_of(index: int, direction: int, spec: RNNSpec) -> StoredCell:
        layer = chain.layers[index]
        found = layer.tensors[direction]
        return StoredCell(
            fetch=lambda role: found[role].values(),
            shapes={role: w.shape for role, w in found.items()},
            names={role: w.name for role, w in found.items()},
            where=f"layer {cut(layer.name)!r}",
        )

    found = Found(
        chain.name,
        row,
        settled,
        input_size=first.input_size,
        hidden=first.hidden,
        dtype="float32",
        cell=cell_of,
        layer_class=first.shown_class,
        num_layers=len(chain.layers),
        bidirectional=first.directions == 2,
        has_bias=first.has_bias,
        without_bias="use_bias=false",
        provenance={"stacked": [x.name for x in chain.layers] if len(chain.layers) > 1 else None},
    )
    rnn = read(found, source)
    rnn.origin = file.recorded
    return rnn
