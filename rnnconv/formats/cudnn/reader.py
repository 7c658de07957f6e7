"""cuDNN weight spaces read where they lie: a .bin described by its sidecar (or by a spec), an rnnconv .safetensors,
each tensor placed by the layout the description names (a GPU's reported layout checked to fit)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from rnnconv.core.blob import KIND_SAFETENSORS, Blob
from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.contracts import SIDECAR_FORMAT, Sidecar, parse
from rnnconv.core.dtypes import ElementType, element_type
from rnnconv.core.weightspace import (
    LAYOUT_NAME,
    LAYOUT_VERSION,
    REPORTED_LAYOUT_NAME,
    Region,
    lin_layer_id,
    region_map,
    size_formula,
    weight_space_elements,
)
from rnnconv.errors import BadInput
from rnnconv.formats import _safetensors, registry
from rnnconv.formats.cudnn.wire import is_rnnconv_safetensors, sidecar_path
from rnnconv.formats.probe import Probe
from rnnconv.safeio.inputs import JSON_LIMIT, FileArray, json_document, open_source, regular_file
from rnnconv.safeio.outputs import SIDECAR_SUFFIX

RAW_SPEC_FLAGS = "--mode, --input-size, --hidden-size (and --num-layers, --bidirectional, --proj-size, --dtype)"


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
    if sidecar.spec.reset_after is False:  # cuDNN computes no such GRU: a weight space of one is no cuDNN blob
        raise BadInput(f"{where} says its GRU applies its reset gate before the recurrent product: cuDNN's does not")
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
