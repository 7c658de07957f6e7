"""cuDNN weight spaces on disk: a raw `.bin` with a JSON sidecar, or an rnnconv `.safetensors`.

`.bin`: the weight space exactly as cuDNN takes it (little-endian, nothing else in
the file) and `<blob>.json` beside it: the `Sidecar` document (spec, cuDNN
settings, layout, every tensor's offset, the source). `.safetensors`: one 1-D
tensor per RNN, keyed by its name, with the same document in `__metadata__`
under that name. A raw blob without a sidecar is described by a spec instead.

Reading goes through the same layout (`weightspace.regions`) the writer used, so a
blob read back is exactly what was written. No framework is imported.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.contracts import (
    SIDECAR_FORMAT,
    CudnnSettings,
    InspectEntry,
    InspectReport,
    LayoutInfo,
    Provenance,
    Sidecar,
    WeightSpaceInfo,
    dump,
    parse,
)
from rnnconv.dtypes import ElementType, count_non_finite, decode, element_type, stored_words
from rnnconv.errors import BadInput, no_such_rnn
from rnnconv.formats import _safetensors, registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import (
    JSON_LIMIT,
    SIDECAR_SUFFIX,
    FileArray,
    atomic_outputs,
    json_document,
    open_source,
    regular_file,
    write_array,
)
from rnnconv.table.constants import BIAS_MODE, CUDNN_MODES, DIRECTION, INPUT_MODE, Kind
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.version import __version__
from rnnconv.weightspace import (
    LAYOUT,
    LAYOUT_NAME,
    LAYOUT_VERSION,
    REPORTED_LAYOUT_NAME,
    Region,
    lin_layer_id,
    region_map,
    regions,
    size_formula,
    weight_space_elements,
)

KIND_BIN = "cudnn-bin"
KIND_SAFETENSORS = "cudnn-safetensors"
RAW_SPEC_FLAGS = "--mode, --input-size, --hidden-size (and --num-layers, --bidirectional, --proj-size, --dtype)"

ByteProgress = Callable[[int], None]  # called with a number of bytes written


def sidecar_path(blob: Path) -> Path:
    return blob.with_name(blob.name + SIDECAR_SUFFIX)


def cudnn_settings(spec: RNNSpec, etype: ElementType) -> CudnnSettings:
    return CudnnSettings(
        cudnnRNNMode_t=CUDNN_MODES[spec.mode][1],
        cudnnRNNBiasMode_t=BIAS_MODE["double"],
        cudnnDirectionMode_t=DIRECTION[spec.bidirectional],
        cudnnRNNInputMode_t=INPUT_MODE["linear"],
        cudnnDataType_t=etype.cudnn,
        inputSize=spec.input_size,
        hiddenSize=spec.hidden_size,
        projSize=spec.output_size,
        numLayers=spec.num_layers,
    )


def describe(rnn: CanonicalRNN, etype: ElementType, warnings: list[str], output: Path, wait: bool = True) -> Sidecar:
    """The sidecar document: everything a C/C++ user needs to hand this blob to cuDNN (written as `output`)."""
    spec = rnn.spec
    elements = weight_space_elements(spec)
    source = registry.recorded_source(rnn, output, wait)
    return Sidecar(
        format=SIDECAR_FORMAT,
        rnnconv_version=__version__,
        name=rnn.name,
        spec=spec.to_model(dtype=etype.name, bias_mode="double"),
        layout=LAYOUT,
        cudnn=cudnn_settings(spec, etype),
        weight_space=WeightSpaceInfo(elements=elements, bytes=elements * etype.itemsize),
        source=source,
        notes=list(rnn.notes),
        warnings=warnings,
        tensors=[r.entry(etype.itemsize) for r in regions(spec)],
    )


def write_weight_space(
    rnn: CanonicalRNN, f: BinaryIO, etype: ElementType, progress: ByteProgress | None = None
) -> list[str]:
    """Write every tensor of `rnn` at the file's position, in layout order (front to back); return warnings.

    Each block is scanned for NaN and Inf on another core while the next one is written; one scan at a
    time, so no more than two blocks are ever held.
    """
    counts: list[tuple[Region, int]] = []
    scanning: tuple[Region, Future[int]] | None = None
    for region in regions(rnn.spec):
        in_file = _in_file(rnn, region.key, etype)
        block = rnn.param(region.key) if in_file is None else in_file
        if scanning is not None:
            counts.append((scanning[0], scanning[1].result()))
        scanning = region, _SCANNER.submit(count_non_finite, block)
        write_array(f, stored_words(block, etype))
        if progress:
            progress(region.size * etype.itemsize)
    if scanning is not None:
        counts.append((scanning[0], scanning[1].result()))
    return [f"{rnn.name}: {region.key.label} holds {bad} NaN or Inf value(s)" for region, bad in counts if bad]


_SCANNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rnnconv-scan")  # numpy's sums release the GIL


def _in_file(rnn: CanonicalRNN, key: ParamKey, etype: ElementType) -> FileArray | None:
    """The tensor's bytes in the source file, when the source holds its gates stacked in cuDNN's order, as
    `etype`'s words (a state_dict, another weight space): then they are copied file to file, never read."""
    stacked = rnn.stacked(key.layer, key.direction, key.kind)
    if not isinstance(stacked, FileArray) or stacked.dtype != etype.storage or etype.name == "bfloat16":
        return None
    gates = 1 if key.kind == Kind.P else len(rnn.spec.gates)
    index = 0 if key.kind == Kind.P else rnn.spec.gates.index(key.gate)
    rows = rnn.spec.param_shape(key)[0]
    if stacked.shape != (gates * rows, *rnn.spec.param_shape(key)[1:]):
        return None
    block: FileArray = stacked[index * rows : (index + 1) * rows]
    return block


def write_bin(
    rnn: CanonicalRNN, path: Path, dtype: str, force: bool = False, progress: ByteProgress | None = None
) -> list[str]:
    etype = element_type(dtype)
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        with open(blob_tmp, "wb") as f:
            warnings = write_weight_space(rnn, f, etype, progress)
        doc = describe(rnn, etype, warnings, path)
        if blob_tmp.stat().st_size != doc.weight_space.bytes:
            raise RuntimeError(f"wrote {blob_tmp.stat().st_size} bytes, the layout has {doc.weight_space.bytes}")
        side_tmp.write_text(json.dumps(dump(doc), indent=1) + "\n")
    return warnings


def write_safetensors(
    rnns: Iterable[CanonicalRNN], path: Path, dtype: str, force: bool = False, progress: ByteProgress | None = None
) -> list[str]:
    etype = element_type(dtype)
    rnns = list(rnns)
    entries = [
        _safetensors.Entry(r.name, etype, (weight_space_elements(r.spec),), _space_writer(r, etype, progress))
        for r in rnns
    ]
    calls: list[bool] = []

    def metadata(warnings: dict[str, list[str]]) -> dict[str, str]:
        final = bool(calls)  # the first call sizes the header before the data exists
        calls.append(final)
        meta = {"format": SIDECAR_FORMAT, "rnnconv_version": __version__}
        meta.update({r.name: json.dumps(dump(describe(r, etype, warnings[r.name], path, wait=final))) for r in rnns})
        return meta

    warnings = _safetensors.write(path, entries, metadata, force)
    return [w for r in rnns for w in warnings[r.name]]


def _space_writer(rnn: CanonicalRNN, etype: ElementType, progress: ByteProgress | None) -> _safetensors.Writer:
    return lambda f: write_weight_space(rnn, f, etype, progress)


# --- reading -----------------------------------------------------------------------------------


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


def in_memory_blob(rnn: CanonicalRNN, path: Path, kind: str) -> Blob:
    """The weight space of an RNN read from a file of another format (`path`, of file kind `kind`), in memory: what
    verify checks and diagnoses when it runs that file itself. Its source is the one the file records, if any."""
    etype = element_type(rnn.spec.dtype)
    buffer = io.BytesIO()
    write_weight_space(rnn, buffer, etype)
    words = np.frombuffer(buffer.getbuffer(), dtype=etype.storage)
    sidecar = describe(rnn, etype, [], path).model_copy(update={"source": rnn.origin or Provenance()})
    return Blob(rnn.name, rnn.spec, etype, words, sidecar, path, kind=kind)


def write_relayout(
    blob: Blob, placed: dict[ParamKey, int], total_bytes: int, path: Path, cudnn_version: str, force: bool = False
) -> None:
    """The blob rewritten with every tensor at the byte offset (`placed`) a GPU's cuDNN reported for it."""
    itemsize = blob.etype.itemsize
    missing = [r.key.label for r in blob.places.values() if r.key not in placed]
    if missing:
        raise BadInput(f"cuDNN reported no place for {missing[0]}, so the blob cannot be laid out its way")
    layout = LayoutInfo(
        name=REPORTED_LAYOUT_NAME,
        version=cudnn_version,
        verified_on_gpu=True,
        order=f"the offsets cudnnGetRNNWeightParams of cuDNN {cudnn_version} reported",
    )
    tensors = sorted((r.entry(itemsize, placed[r.key]) for r in blob.places.values()), key=lambda t: t.offset_bytes)
    doc = Sidecar(
        format=SIDECAR_FORMAT,
        rnnconv_version=__version__,
        name=blob.name,
        spec=blob.spec.to_model(bias_mode="double"),
        layout=layout,
        cudnn=cudnn_settings(blob.spec, blob.etype),
        weight_space=WeightSpaceInfo(elements=total_bytes // itemsize, bytes=total_bytes),
        source=blob.source,
        notes=blob.notes,
        tensors=tensors,
    )
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        with open(blob_tmp, "wb") as f:  # written, not mapped: a full disk is an error, never SIGBUS
            f.truncate(total_bytes)
            for region in blob.places.values():
                f.seek(placed[region.key] // itemsize * itemsize)
                write_array(f, blob.words[region.offset : region.offset + region.size])
        side_tmp.write_text(json.dumps(dump(doc), indent=1) + "\n")


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
    if raw_spec is not None:
        return [open_bin(path, raw_spec)]
    probe = Probe(path)
    if CudnnFormat.is_rnnconv_safetensors(probe):
        return open_safetensors(path)
    if sidecar_path(path).exists():
        return [open_bin(path)]
    other = next((fmt for fmt in registry.formats() if fmt.name != "cudnn" and fmt.sniff(probe)), None)
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
        names = ", ".join(b.name for b in blobs)
        raise BadInput(f"{path} holds {len(blobs)} RNNs ({names}); pick one with --layer{or_else}")
    return blobs


@register
class CudnnFormat(Format):
    info = FORMAT_INFO["cudnn"]
    sniff_order = 10  # a blob with a sidecar may hold any bytes; rnnconv's safetensors before PyTorch's

    @staticmethod
    def is_rnnconv_safetensors(probe: Probe) -> bool:
        meta = probe.safetensors_metadata
        return meta is not None and meta.get("format") == SIDECAR_FORMAT

    def sniff(self, probe: Probe) -> bool:
        return sidecar_path(probe.path).exists() or self.is_rnnconv_safetensors(probe)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        blobs = pick_blob(open_blobs(path, options.raw_spec), options.layer, path, options.take_all)
        yield Source([b.to_canonical() for b in blobs])

    def holds_several(self, path: Path) -> bool:
        return path.suffix == ".safetensors"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        dtype = options.dtype or rnns[0].spec.dtype
        total = sum(weight_space_elements(r.spec) for r in rnns) * element_type(dtype).itemsize
        progress = options.progress
        advance = (lambda n: progress(n, total)) if progress else None
        if path.suffix == ".bin":
            if len(rnns) > 1:
                raise BadInput(
                    f"a .bin holds one RNN but {len(rnns)} were selected "
                    f"({', '.join(r.name for r in rnns)}); pick one, or write a .safetensors"
                )
            return Written([path, sidecar_path(path)], write_bin(rnns[0], path, dtype, options.force, advance))
        if path.suffix == ".safetensors":
            return Written([path], write_safetensors(rnns, path, dtype, options.force, advance))
        raise BadInput(f"output {path} must end in .bin (raw weight space + JSON sidecar) or .safetensors")

    def inspect(self, path: Path) -> InspectReport:
        blobs = open_blobs(path)
        rnns = [
            InspectEntry(
                name=b.name,
                layer_class="cuDNN weight space",
                spec=b.spec.to_model(),
                converts=True,
                notes=b.notes,
                source=b.source,
                layout=b.layout,
            )
            for b in blobs
        ]
        return InspectReport(path=str(path), format=blobs[0].kind, rnns=rnns, notes=[])
