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
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from rnnconv import __version__
from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.dtypes import BY_SAFETENSORS, ElementType, decode, element_type, encode
from rnnconv.errors import BadInput
from rnnconv.fsutil import atomic_outputs
from rnnconv.layouts import CUDNN_MODES
from rnnconv.weightspace import (LAYOUT_DESCRIPTION, LAYOUT_NAME, LAYOUT_VERSION, region_map, regions,
                                 size_formula, weight_space_elements)

SIDECAR_FORMAT = "rnnconv.cudnn-weight-space"
SIDECAR_SUFFIX = ".json"
CUDNN_BIAS_DOUBLE = 2
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024

Progress = Callable[[int], None]  # called with a number of bytes written


def sidecar_path(blob: Path) -> Path:
    return blob.with_name(blob.name + SIDECAR_SUFFIX)


def describe(rnn: CanonicalRNN, etype: ElementType) -> dict[str, Any]:
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
        "source": rnn.source,
        "notes": list(rnn.notes),
        "tensors": [r.to_dict(etype.itemsize) for r in regions(spec)],
    }


def fill_weight_space(rnn: CanonicalRNN, out: np.ndarray, etype: ElementType,
                      progress: Progress | None = None) -> list[str]:
    """Write every tensor of `rnn` to its place in `out` (storage words); return warnings."""
    warnings = []
    for region in regions(rnn.spec):
        block = rnn.param(region.key)
        if not np.isfinite(block).all():
            bad = int(np.size(block) - np.count_nonzero(np.isfinite(block)))
            warnings.append(f"{rnn.name}: {region.key.label} holds {bad} NaN or Inf value(s)")
        out[region.offset: region.offset + region.size] = encode(block, etype).reshape(-1)
        if progress:
            progress(region.size * etype.itemsize)
    return warnings


def write_bin(rnn: CanonicalRNN, path: Path, dtype: str, force: bool = False,
              progress: Progress | None = None) -> list[str]:
    etype = element_type(dtype)
    doc = describe(rnn, etype)
    elements = doc["weight_space"]["elements"]
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        with open(blob_tmp, "r+b") as f:
            f.truncate(elements * etype.itemsize)
        out = np.memmap(blob_tmp, dtype=etype.storage, mode="r+", shape=(elements,))
        warnings = fill_weight_space(rnn, out, etype, progress)
        out.flush()
        del out
        doc["warnings"] = warnings
        side_tmp.write_text(json.dumps(doc, indent=1) + "\n")
    return warnings


def write_safetensors(rnns: Iterable[CanonicalRNN], path: Path, dtype: str, force: bool = False,
                      progress: Progress | None = None) -> list[str]:
    etype = element_type(dtype)
    rnns = list(rnns)
    names = [r.name for r in rnns]
    if len(set(names)) != len(names):
        raise BadInput(f"two RNNs share a name in {names}; safetensors keys must differ")
    docs = {r.name: describe(r, etype) for r in rnns}
    header: dict[str, Any] = {}
    begin = 0
    for rnn in rnns:
        nbytes = docs[rnn.name]["weight_space"]["bytes"]
        header[rnn.name] = {"dtype": etype.safetensors, "shape": [nbytes // etype.itemsize],
                            "data_offsets": [begin, begin + nbytes]}
        begin += nbytes
    warnings: list[str] = []
    with atomic_outputs([path], force) as (tmp,):
        # Warnings are only known after the data is written, and they belong in the
        # header, so the data is written first behind a header of the final size.
        meta = {"format": SIDECAR_FORMAT, "rnnconv_version": __version__}
        meta.update({name: json.dumps({**doc, "warnings": []}) for name, doc in docs.items()})
        probe = _header_bytes(meta, header)
        data_start = 8 + len(probe)
        with open(tmp, "r+b") as f:
            f.truncate(data_start + begin)
        for rnn in rnns:
            lo, hi = header[rnn.name]["data_offsets"]
            out = np.memmap(tmp, dtype=etype.storage, mode="r+", offset=data_start + lo,
                            shape=((hi - lo) // etype.itemsize,))
            mine = fill_weight_space(rnn, out, etype, progress)
            out.flush()
            del out
            meta[rnn.name] = json.dumps({**docs[rnn.name], "warnings": mine})
            warnings += mine
        final = _header_bytes(meta, header, pad_to=len(probe))
        with open(tmp, "r+b") as f:
            f.write(struct.pack("<Q", len(final)))
            f.write(final)
    return warnings


def _header_bytes(meta: dict[str, str], header: dict[str, Any], pad_to: int = 0) -> bytes:
    raw = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    # Room for warnings added after the probe; safetensors pads headers with spaces to 8 bytes.
    size = max(pad_to, len(raw) + 4096)
    size += -size % 8
    if len(raw) > size:
        raise BadInput("the safetensors header outgrew its reserved space (too many warnings)")
    return raw + b" " * (size - len(raw))


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

    def param(self, key) -> np.ndarray:
        region = region_map(self.spec)[key]
        words = self.words[region.offset: region.offset + region.size]
        return decode(np.asarray(words), self.etype).reshape(region.shape)

    def to_canonical(self) -> CanonicalRNN:
        source = {"path": str(self.path), "format": "cudnn", "name": self.name}
        return CanonicalRNN(self.name, self.spec, {k: (lambda k=k: self.param(k)) for k in self.spec.param_keys()},
                            source=source, notes=list(self.doc.get("notes", [])))


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
    if layout.get("name") != LAYOUT_NAME or layout.get("version") != LAYOUT_VERSION:
        raise BadInput(f"{where} uses layout {layout.get('name')} v{layout.get('version')}; this rnnconv "
                       f"reads {LAYOUT_NAME} v{LAYOUT_VERSION}")
    if not isinstance(doc.get("spec"), dict):
        raise BadInput(f"{where} has no spec")
    return doc


def open_bin(path: Path, spec: RNNSpec | None = None, name: str | None = None) -> Blob:
    """A raw blob, described by its sidecar or by `spec` (flags); size checked before mapping."""
    doc: dict[str, Any] = {}
    if spec is None:
        doc = read_sidecar(path)
        spec = RNNSpec.from_dict(doc["spec"], str(sidecar_path(path)))
        name = name or doc.get("name")
    etype = element_type(spec.dtype)
    expected = weight_space_elements(spec) * etype.itemsize
    try:
        actual = path.stat().st_size
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    if actual != expected:
        raise BadInput(f"{path} holds {actual} bytes, but a {spec.describe()} weight space is {expected} bytes: "
                       f"{size_formula(spec)} x {etype.itemsize} bytes")
    words = np.memmap(path, dtype=etype.storage, mode="r", shape=(expected // etype.itemsize,))
    return Blob(name or path.stem, spec, etype, words, doc, path)


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The header of a safetensors file and where its data starts; checked, never trusted."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BadInput(f"{path} is too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, MAX_SAFETENSORS_HEADER):
                raise BadInput(f"{path} is not a safetensors file (its header length {n} is impossible)")
            header = json.loads(f.read(n))
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadInput(f"{path} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path} is not a safetensors file (its header is not a table)")
    start = 8 + n
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            lo, hi = (int(v) for v in info["data_offsets"])
            ok = 0 <= lo <= hi <= size - start
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise BadInput(f"{path}: tensor {key!r} points outside the file (truncated or corrupt)")
    return header, start


def is_rnnconv_safetensors(header: dict[str, Any]) -> bool:
    return header.get("__metadata__", {}).get("format") == SIDECAR_FORMAT


def open_safetensors(path: Path) -> list[Blob]:
    """Every weight space in a safetensors file written by rnnconv."""
    header, start = read_safetensors_header(path)
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
        etype = BY_SAFETENSORS.get(info.get("dtype"))
        if etype is None or etype.name != spec.dtype:
            raise BadInput(f"{path}: tensor {name!r} is {info.get('dtype')}, its spec says {spec.dtype}")
        lo, hi = info["data_offsets"]
        expected = weight_space_elements(spec) * etype.itemsize
        if hi - lo != expected:
            raise BadInput(f"{path}: tensor {name!r} holds {hi - lo} bytes, its spec needs {expected}: "
                           f"{size_formula(spec)}")
        words = np.memmap(path, dtype=etype.storage, mode="r", offset=start + lo, shape=(expected // etype.itemsize,))
        blobs.append(Blob(name, spec, etype, words, doc, path))
    return blobs
