"""cuDNN weight spaces on disk: a raw `.bin` with a JSON sidecar, or `.safetensors`.

`.bin`: the weight space exactly as cuDNN takes it (little-endian, nothing else in
the file) and `<blob>.json` beside it describing the spec, the layout and every
tensor's offset. `.safetensors`: one 1-D tensor per RNN, keyed by its name, with
the same description in `__metadata__` under that name.

Reading goes through the same layout (`weightspace.regions`) the writer used, so a
blob read back is exactly what was written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable

import numpy as np

from rnnconv import __version__
from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.dtypes import ElementType, decode, element_type, encode
from rnnconv.errors import BadInput
from rnnconv.formats import safetensors_io
from rnnconv.fsutil import atomic_outputs, resolved, write_array
from rnnconv.layouts import CUDNN_MODES
from rnnconv.weightspace import (LAYOUT_DESCRIPTION, LAYOUT_NAME, LAYOUT_VERSION, REPORTED_LAYOUT_NAME, Region,
                                 region_map, regions, size_formula, weight_space_elements)

SIDECAR_FORMAT = "rnnconv.cudnn-weight-space"
SIDECAR_SUFFIX = ".json"
CUDNN_BIAS_DOUBLE = 2

Progress = Callable[[int], None]  # called with a number of bytes written


def sidecar_path(blob: Path) -> Path:
    return blob.with_name(blob.name + SIDECAR_SUFFIX)


def describe(rnn: CanonicalRNN, etype: ElementType, wait: bool = True) -> dict[str, Any]:
    """The sidecar document: everything a C/C++ user needs to hand this blob to cuDNN."""
    spec = rnn.spec
    elements = weight_space_elements(spec)
    return {
        "format": SIDECAR_FORMAT,
        "rnnconv_version": __version__,
        "name": rnn.name,
        "spec": {**spec.to_dict(), "dtype": etype.name, "bias_mode": "double"},
        "layout": dict(LAYOUT_DESCRIPTION),
        "cudnn": {
            "cudnnRNNMode_t": CUDNN_MODES[spec.mode][1],
            "cudnnRNNBiasMode_t": CUDNN_BIAS_DOUBLE,
            "cudnnDirectionMode_t": 1 if spec.bidirectional else 0,
            "cudnnRNNInputMode_t": 0,
            "cudnnDataType_t": etype.cudnn,
            "inputSize": spec.input_size,
            "hiddenSize": spec.hidden_size,
            "projSize": spec.output_size,
            "numLayers": spec.num_layers,
        },
        "weight_space": {"elements": elements, "bytes": elements * etype.itemsize, "byte_order": "little"},
        "source": {**resolved(rnn.source, wait), "dtype": rnn.spec.dtype},
        "notes": list(rnn.notes),
        "tensors": [r.to_dict(etype.itemsize) for r in regions(spec)],
    }


def write_weight_space(rnn: CanonicalRNN, f: BinaryIO, etype: ElementType,
                       progress: Progress | None = None) -> list[str]:
    """Write every tensor of `rnn` at the file's position, in layout order (front to back); return warnings."""
    warnings = []
    for region in regions(rnn.spec):
        block = rnn.param(region.key)
        if not np.isfinite(block).all():
            bad = int(np.size(block) - np.count_nonzero(np.isfinite(block)))
            warnings.append(f"{rnn.name}: {region.key.label} holds {bad} NaN or Inf value(s)")
        write_array(f, encode(block, etype))
        if progress:
            progress(region.size * etype.itemsize)
    return warnings


def write_bin(rnn: CanonicalRNN, path: Path, dtype: str, force: bool = False,
              progress: Progress | None = None) -> list[str]:
    etype = element_type(dtype)
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        with open(blob_tmp, "wb") as f:
            warnings = write_weight_space(rnn, f, etype, progress)
        doc = describe(rnn, etype)
        if blob_tmp.stat().st_size != doc["weight_space"]["bytes"]:
            raise RuntimeError(f"wrote {blob_tmp.stat().st_size} bytes, the layout has {doc['weight_space']['bytes']}")
        doc["warnings"] = warnings
        side_tmp.write_text(json.dumps(doc, indent=1) + "\n")
    return warnings


def write_safetensors(rnns: Iterable[CanonicalRNN], path: Path, dtype: str, force: bool = False,
                      progress: Progress | None = None) -> list[str]:
    etype = element_type(dtype)
    rnns = list(rnns)
    entries = [safetensors_io.Entry(r.name, etype, (weight_space_elements(r.spec),),
                                    lambda f, r=r: write_weight_space(r, f, etype, progress)) for r in rnns]
    calls = []

    def metadata(warnings: dict[str, list[str]]) -> dict[str, str]:
        final = bool(calls)  # the first call sizes the header before the data exists
        calls.append(final)
        meta = {"format": SIDECAR_FORMAT, "rnnconv_version": __version__}
        meta.update({r.name: json.dumps({**describe(r, etype, wait=final), "warnings": warnings[r.name]})
                     for r in rnns})
        return meta

    warnings = safetensors_io.write(path, entries, metadata, force)
    return [w for r in rnns for w in warnings[r.name]]


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass
class Blob:
    """A weight space on disk, memory-mapped, with its description."""

    name: str
    spec: RNNSpec
    etype: ElementType
    words: np.ndarray  # storage words, 1-D, memory-mapped
    doc: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    places: dict[ParamKey, Region] = field(default_factory=dict)  # where each tensor is; the layout's by default

    def __post_init__(self) -> None:
        self.places = self.places or region_map(self.spec)

    def decoded(self, start: int, stop: int) -> np.ndarray:
        """A run of the weight space's elements as numbers (for scans that must not load it whole)."""
        return decode(np.asarray(self.words[start:stop]), self.etype)

    def param(self, key: ParamKey) -> np.ndarray:
        region = self.places[key]
        words = self.words[region.offset: region.offset + region.size]
        return decode(np.asarray(words), self.etype).reshape(region.shape)

    def to_canonical(self) -> CanonicalRNN:
        if not self.spec.bias:
            nonzero = [r.key.label for r in self.places.values() if r.is_bias and self.param(r.key).any()]
            if nonzero:
                raise BadInput(f"{self.path}: its spec says the RNN has no biases, but {nonzero[0]} holds non-zero "
                               f"values")
        source = {"path": str(self.path), "format": "cudnn", "name": self.name}
        return CanonicalRNN(self.name, self.spec, {k: (lambda k=k: self.param(k)) for k in self.spec.param_keys()},
                            source=source, notes=list(self.doc.get("notes", [])), stacked=self.stacked)

    def stacked(self, layer: int, direction: int, kind: str) -> np.ndarray | None:
        """The gates of one kind, in cuDNN order, as one view of the blob when they lie back to back."""
        gates = [""] if kind == "P" else list(self.spec.gates)
        parts = [self.places[ParamKey(layer, direction, kind, g)] for g in gates]
        if any(b.offset != a.offset + a.size for a, b in zip(parts, parts[1:])):
            return None
        words = self.words[parts[0].offset: parts[-1].offset + parts[-1].size]
        rows = sum(p.shape[0] for p in parts)
        return decode(np.asarray(words), self.etype).reshape((rows,) + parts[0].shape[1:])


def read_sidecar(blob: Path) -> dict[str, Any]:
    side = sidecar_path(blob)
    try:
        doc = json.loads(side.read_text())
    except FileNotFoundError:
        raise BadInput(f"{blob} has no sidecar {side.name}; state the spec with --mode, --input-size, "
                       f"--hidden-size (and --num-layers, --bidirectional, --proj-size, --dtype)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read the sidecar {side}: {exc}") from None
    return check_doc(doc, str(side))


def check_doc(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
        raise BadInput(f"{where} is not an rnnconv weight-space description")
    layout = doc.get("layout", {})
    known = (layout.get("name"), layout.get("version")) == (LAYOUT_NAME, LAYOUT_VERSION) or \
        layout.get("name") == REPORTED_LAYOUT_NAME
    if not known:
        raise BadInput(f"{where} uses layout {layout.get('name')} v{layout.get('version')}; this rnnconv "
                       f"reads {LAYOUT_NAME} v{LAYOUT_VERSION} and {REPORTED_LAYOUT_NAME}")
    if not isinstance(doc.get("spec"), dict):
        raise BadInput(f"{where} has no spec")
    return doc


def placement(doc: dict[str, Any], spec: RNNSpec, etype: ElementType, where: str) -> tuple[dict, int]:
    """Each tensor's region and the weight space's size in elements, from the layout the doc names."""
    if doc.get("layout", {}).get("name") != REPORTED_LAYOUT_NAME:
        return region_map(spec), weight_space_elements(spec)
    try:
        places = {r.key: r for r in (Region.from_dict(t, etype.itemsize) for t in doc["tensors"])}
        elements = int(doc["weight_space"]["bytes"]) // etype.itemsize
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(f"{where}: its tensor table is unreadable ({exc})") from None
    for key in spec.param_keys():
        region = places.get(key)
        if region is None or region.shape != spec.param_shape(key) or region.offset + region.size > elements:
            raise BadInput(f"{where}: its tensor table does not place {key.label} inside the weight space")
    return places, elements


def open_bin(path: Path, spec: RNNSpec | None = None, name: str | None = None) -> Blob:
    """A raw blob, described by its sidecar or by `spec` (flags); size checked before mapping."""
    doc: dict[str, Any] = {}
    if spec is None:
        doc = read_sidecar(path)
        spec = RNNSpec.from_dict(doc["spec"], str(sidecar_path(path)))
        name = name or doc.get("name")
    etype = element_type(spec.dtype)
    places, elements = placement(doc, spec, etype, str(sidecar_path(path)))
    expected = elements * etype.itemsize
    try:
        actual = path.stat().st_size
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    if actual != expected:
        raise BadInput(f"{path} holds {actual} bytes, but a {spec.describe()} weight space is {expected} bytes: "
                       f"{size_formula(spec)} x {etype.itemsize} bytes")
    words = np.memmap(path, dtype=etype.storage, mode="r", shape=(elements,))
    return Blob(name or path.stem, spec, etype, words, doc, path, places)


def write_relayout(blob: Blob, placed: dict[ParamKey, tuple[int, list[int]]], total_bytes: int, path: Path,
                   cudnn_version: str, force: bool = False) -> None:
    """The blob rewritten with every tensor at the byte offset a GPU's cuDNN reported for it."""
    itemsize = blob.etype.itemsize
    doc = {**blob.doc, "format": SIDECAR_FORMAT, "rnnconv_version": __version__, "name": blob.name,
           "spec": {**blob.spec.to_dict(), "bias_mode": "double"},
           "layout": {"name": REPORTED_LAYOUT_NAME, "version": cudnn_version, "verified_on_gpu": True,
                      "order": f"the offsets cudnnGetRNNWeightParams of cuDNN {cudnn_version} reported"},
           "weight_space": {"elements": total_bytes // itemsize, "bytes": total_bytes, "byte_order": "little"}}
    missing = [r.key.label for r in blob.places.values() if r.key not in placed]
    if missing:
        raise BadInput(f"cuDNN reported no place for {missing[0]}, so the blob cannot be laid out its way")
    tensors = []
    for region in blob.places.values():
        offset_bytes, _ = placed[region.key]
        tensors.append({**region.to_dict(itemsize), "offset_bytes": offset_bytes})
    doc["tensors"] = sorted(tensors, key=lambda t: t["offset_bytes"])
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        with open(blob_tmp, "r+b") as f:
            f.truncate(total_bytes)
        out = np.memmap(blob_tmp, dtype=blob.etype.storage, mode="r+", shape=(total_bytes // itemsize,))
        for region in blob.places.values():
            start = placed[region.key][0] // itemsize
            out[start: start + region.size] = blob.words[region.offset: region.offset + region.size]
        out.flush()
        del out
        side_tmp.write_text(json.dumps(doc, indent=1) + "\n")


def is_rnnconv_safetensors(header: dict[str, Any]) -> bool:
    return header.get("__metadata__", {}).get("format") == SIDECAR_FORMAT


def open_safetensors(path: Path) -> list[Blob]:
    """Every weight space in a safetensors file written by rnnconv."""
    header, start = safetensors_io.read_header(path)
    if not is_rnnconv_safetensors(header):
        raise BadInput(f"{path} is a safetensors file but not one written by rnnconv (no weight-space metadata)")
    meta = header["__metadata__"]
    blobs = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            doc = check_doc(json.loads(meta[name]), f"{path} [{name}]")
        except (KeyError, json.JSONDecodeError):
            raise BadInput(f"{path}: tensor {name!r} has no weight-space description in the metadata") from None
        spec = RNNSpec.from_dict(doc["spec"], f"{path} [{name}]")
        words, etype = safetensors_io.tensor_words(path, header, start, name)
        if etype.name != spec.dtype:
            raise BadInput(f"{path}: tensor {name!r} is {etype.name}, its spec says {spec.dtype}")
        places, elements = placement(doc, spec, etype, f"{path} [{name}]")
        if words.shape != (elements,):
            raise BadInput(f"{path}: tensor {name!r} has shape {words.shape}, its spec needs "
                           f"{size_formula(spec)}")
        blobs.append(Blob(name, spec, etype, words, doc, path, places))
    return blobs
