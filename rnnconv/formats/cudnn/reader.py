"""cuDNN weight spaces read where they lie: a .bin described by its sidecar (or by a spec), an rnnconv .safetensors,
each tensor placed by the layout the description names (a GPU's reported layout checked to fit)."""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.contracts import SIDECAR_FORMAT, LayoutInfo, Provenance, Sidecar, parse
from rnnconv.dtypes import ElementType, decode, element_type
from rnnconv.errors import BadInput, listing, no_such_rnn
from rnnconv.formats import _safetensors, registry
from rnnconv.formats.cudnn.wire import is_rnnconv_safetensors, sidecar_path
from rnnconv.formats.probe import Probe
from rnnconv.safeio.inputs import JSON_LIMIT, FileArray, json_document, open_source, regular_file
from rnnconv.safeio.outputs import SIDECAR_SUFFIX
from rnnconv.table.constants import Kind
from rnnconv.weightspace import (
    LAYOUT_NAME,
    LAYOUT_VERSION,
    REPORTED_LAYOUT_NAME,
    Region,
    lin_layer_id,
    region_map,
    size_formula,
    weight_space_elements,
)

KIND_BIN = "cudnn-bin"
KIND_SAFETENSORS = "cudnn-safetensors"
RAW_SPEC_FLAGS = "--mode, --input-size, --hidden-size (and --num-layers, --bidirectional, --proj-size, --dtype)"


@dataclass
class Blob:
    """A weight space on disk, read where it lies, with its description."""

    name: str
    spec: RNNSpec
    etype: ElementType
    words: FileArray | np.ndarray  # storage words, 1-D, still in the file (in memory: a file verify runs itself)
    sidecar: Sidecar | None = None  # None: a raw blob described by flags
    path: Path | None = None
    places: dict[ParamKey, Region] = field(default_factory=dict)  # where each tensor is; the layout's by default
    kind: str = KIND_BIN

    def __post_init__(self) -> None:
        self.places = self.places or region_map(self.spec)

    @property
    def layout(self) -> LayoutInfo | None:
        return self.sidecar.layout if self.sidecar else None

    @property
    def source(self) -> Provenance:
        return self.sidecar.source if self.sidecar else Provenance()

    @property
    def notes(self) -> list[str]:
        return list(self.sidecar.notes) if self.sidecar else []

    def decoded(self, start: int, stop: int) -> np.ndarray:
        """A run of the weight space's elements as numbers (for scans that must not load it whole)."""
        return decode(np.asarray(self.words[start:stop]), self.etype)

    def param(self, key: ParamKey) -> np.ndarray:
        region = self.places[key]
        words = self.words[region.offset : region.offset + region.size]
        return decode(np.asarray(words), self.etype).reshape(region.shape)

    def to_canonical(self) -> CanonicalRNN:
        if not self.spec.bias:
            nonzero = [r.key.label for r in self.places.values() if r.is_bias and self.param(r.key).any()]
            if nonzero:
                raise BadInput(
                    f"{self.path}: its spec says the RNN has no biases, but {nonzero[0]} holds non-zero values"
                )
        source = Provenance(path=str(self.path), format=self.kind, name=self.name)
        return CanonicalRNN(
            self.name,
            self.spec,
            {key: functools.partial(self.param, key) for key in self.spec.param_keys()},
            source=source,
            notes=self.notes,
            stacked=self.stacked,
            keepalive=self,
            origin=self.sidecar.source if self.sidecar else None,
        )

    def stacked(self, layer: int, direction: int, kind: str) -> np.ndarray | FileArray | None:
        """The gates of one kind, in cuDNN order, when they lie back to back: still in the file (bfloat16 words
        read and widened)."""
        gates = [""] if kind == Kind.P else list(self.spec.gates)
        parts = [self.places[ParamKey(layer, direction, kind, g)] for g in gates]
        if any(b.offset != a.offset + a.size for a, b in itertools.pairwise(parts)):
            return None
        words = self.words[parts[0].offset : parts[-1].offset + parts[-1].size]
        shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
        if self.etype.name == "bfloat16":
            return decode(np.asarray(words), self.etype).reshape(shape)
        stacked: FileArray | np.ndarray = words.reshape(shape)
        return stacked


def read_sidecar(blob: Path) -> Sidecar:
    side = sidecar_path(blob)
    if not os.path.lexists(side):
        raise BadInput(f"{blob} has no sidecar {side.name}; state the spec with {RAW_SPEC_FLAGS}")
    regular_file(side, "the sidecar")
    if side.stat().st_size > JSON_LIMIT:
        raise BadInput(f"the sidecar {side} is larger than any weight-space description")
    with open_source(side) as f:  # not blocked by a FIFO put at its name meanwhile
        data = f.read(JSON_LIMIT + 1)
    return check_sidecar(json_document(data, f"the sidecar {side}"), str(side))


def check_sidecar(doc: object, where: str) -> Sidecar:
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
        raise BadInput(f"{where} is not an rnnconv weight-space description")
    sidecar = parse(Sidecar, doc, where)
    layout = sidecar.layout
    if (layout.name, layout.version) != (LAYOUT_NAME, LAYOUT_VERSION) and layout.name != REPORTED_LAYOUT_NAME:
        raise BadInput(
            f"{where} uses layout {layout.name} v{layout.version}; this rnnconv reads {LAYOUT_NAME} "
            f"v{LAYOUT_VERSION} and {REPORTED_LAYOUT_NAME}"
        )
    return sidecar


def placement(
    sidecar: Sidecar | None, spec: RNNSpec, etype: ElementType, where: str, size: int
) -> tuple[dict[ParamKey, Region], int]:
    """Each tensor's region and the weight space's size in elements, from the layout the sidecar names.

    Sizes are checked against the file's `size` in bytes (from the closed form, or the sidecar's
    own count) before any region is laid out; a reported layout's regions must fit and not overlap.
    """
    reported = sidecar is not None and sidecar.layout.name == REPORTED_LAYOUT_NAME
    elements = sidecar.weight_space.bytes // etype.itemsize if sidecar and reported else weight_space_elements(spec)
    if size != elements * etype.itemsize:
        raise BadInput(
            f"{where.removesuffix(SIDECAR_SUFFIX)} holds {size} bytes, but a {spec.describe()} weight "
            f"space is {elements * etype.itemsize} bytes: {size_formula(spec)} x {etype.itemsize} bytes"
        )
    if sidecar is None or not reported:
        return region_map(spec), elements
    try:
        places = {r.key: r for r in (Region.from_entry(t, etype.itemsize) for t in sidecar.tensors)}
    except ValueError as exc:
        raise BadInput(f"{where}: its tensor table is unreadable ({exc})") from None
    for key in spec.param_keys():
        region = places.get(key)
        if region is None or region.shape != spec.param_shape(key) or region.offset + region.size > elements:
            raise BadInput(f"{where}: its tensor table does not place {key.label} inside the weight space")
        ids = (key.layer * spec.num_directions + key.direction, lin_layer_id(spec, key))
        if (region.pseudo_layer, region.lin_layer_id) != ids:
            raise BadInput(
                f"{where}: its tensor table gives {key.label} pseudo-layer {region.pseudo_layer} and linLayerID "
                f"{region.lin_layer_id}, but cuDNN numbers that tensor {ids[0]} and {ids[1]}"
            )
    spans = sorted((r.offset, r.offset + r.size, r.key.label) for r in places.values())
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise BadInput(f"{where}: its tensor table places {first} and {second} over each other")
    return places, elements


def open_bin(path: Path, spec: RNNSpec | None = None, name: str | None = None) -> Blob:
    """A raw blob, described by its sidecar or by `spec` (flags); size checked before mapping."""
    size = regular_file(path)
    sidecar = None
    if spec is None:
        sidecar = read_sidecar(path)
        spec = RNNSpec.from_model(sidecar.spec)
        name = name or sidecar.name
    etype = element_type(spec.dtype)
    places, elements = placement(sidecar, spec, etype, str(sidecar_path(path)), size)
    words = FileArray(path, 0, etype.storage, (elements,))
    return Blob(name or path.stem, spec, etype, words, sidecar, path, places)


def open_safetensors(path: Path) -> list[Blob]:
    """Every weight space in a safetensors file written by rnnconv."""
    header, start = _safetensors.read_header(path)
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise BadInput(f"{path} is a safetensors file but not one written by rnnconv (no weight-space metadata)")
    blobs = []
    for name in header:
        if name == "__metadata__":
            continue
        where = f"{path} [{name}]"
        if name not in meta:
            raise BadInput(f"{path}: tensor {name!r} has no weight-space description in the metadata")
        doc = json_document(meta[name], f"{path}: the description of {name!r}")
        sidecar = check_sidecar(doc, where)
        spec = RNNSpec.from_model(sidecar.spec)
        words, etype = _safetensors.tensor_words(path, header, start, name)
        if etype.name != spec.dtype:
            raise BadInput(f"{path}: tensor {name!r} is {etype.name}, its spec says {spec.dtype}")
        if words.ndim != 1:
            raise BadInput(f"{path}: tensor {name!r} has shape {words.shape}; a weight space is one vector")
        places, _ = placement(sidecar, spec, etype, where, words.size * etype.itemsize)
        blobs.append(Blob(name, spec, etype, words, sidecar, path, places, KIND_SAFETENSORS))
    return blobs


def open_blobs(path: Path, raw_spec: RNNSpec | None = None) -> list[Blob]:
    """The weight spaces of a `.bin` (sidecar or `raw_spec`) or an rnnconv `.safetensors`."""
    probe = Probe(path)  # an empty or damaged file is told as every command tells it, a raw blob's too
    if raw_spec is not None:
        return [open_bin(path, raw_spec)]
    if is_rnnconv_safetensors(probe):
        return open_safetensors(path)
    if sidecar_path(path).exists():
        return [open_bin(path)]
    other = registry.sniffed(probe, but="cudnn")
    if other is not None:  # e.g. a PyTorch checkpoint named pytorch_model.bin
        raise BadInput(
            f"{path} holds {other.title} weights, not a cuDNN blob; convert it first "
            f"(rnnconv {other.name}-to-cudnn {path}) and verify the result"
        )
    if path.suffix == ".safetensors":  # no sidecar is meant: what is wrong is the file's own (its header, ...)
        return open_safetensors(path)
    raise BadInput(
        f"{path} is not a cuDNN blob: no sidecar {sidecar_path(path).name} beside it and not an rnnconv "
        f".safetensors; a raw blob needs {RAW_SPEC_FLAGS}"
    )


def pick_blob(
    blobs: list[registry.Item], layer: str | None, path: Path, take_all: bool = False, or_else: str = ""
) -> list[registry.Item]:
    """The blob `layer` names, or the only one (every one with `take_all`); `or_else` ends the advice when the
    file holds several and none was named (verify: its --all)."""
    if layer is not None:
        chosen = [b for b in blobs if b.name == layer]
        if not chosen:
            raise no_such_rnn(f"{path} has no RNN named", layer, [b.name for b in blobs])
        return chosen
    if len(blobs) > 1 and not take_all:
        raise BadInput(
            f"{path} holds {len(blobs)} RNNs ({listing(b.name for b in blobs)}); pick one with --layer{or_else}"
        )
    return blobs
