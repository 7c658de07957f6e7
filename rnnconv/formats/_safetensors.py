"""safetensors files, read in place and written tensor by tensor.

The format is an 8-byte little-endian header length, a JSON header, then the
tensors' bytes. Writing tensor by tensor into a preallocated file keeps memory
bounded, and reading never trusts a header: every offset is checked against the
file's size before anything is read. No framework is imported.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rnnconv.core.dtypes import BY_SAFETENSORS, ElementType
from rnnconv.errors import BadInput
from rnnconv.formats.probe import Damaged
from rnnconv.safeio.digests import digest_of
from rnnconv.safeio.inputs import FileArray, json_document, regular_file
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.constants import SAFETENSORS_ITEMSIZE

MAX_HEADER = 100 * 1024 * 1024
HEADER_SLACK = 4096  # room for metadata that is only known after the data is written


Writer = Callable[[BinaryIO], list[str]]  # writes a tensor's bytes at the file's position; returns warnings


@dataclass
class Entry:
    name: str
    etype: ElementType
    shape: tuple[int, ...]
    write: Writer

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.etype.itemsize


Metadata = Callable[[dict[str, list[str]], dict[str, str]], dict[str, str]]


def write(
    path: Path, entries: list[Entry], metadata: Metadata, force: bool = False, digests: bool = False
) -> dict[str, list[str]]:
    """Write `entries` to a safetensors file; `metadata(warnings by entry, digests by entry)` gives `__metadata__`,
    once to size the header and again once the data is written, then with each entry's digest as written where
    `digests` asks for them."""
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise BadInput(f"two tensors share a name in {names}; safetensors keys must differ")
    header: dict[str, Any] = {}
    begin = 0
    for entry in entries:
        header[entry.name] = {
            "dtype": entry.etype.safetensors,
            "shape": list(entry.shape),
            "data_offsets": [begin, begin + entry.nbytes],
        }
        begin += entry.nbytes
    warnings: dict[str, list[str]] = {e.name: [] for e in entries}
    with atomic_outputs([path], force) as (tmp,):
        reserved = _header_bytes(metadata(warnings, {}), header, HEADER_SLACK)
        with open(tmp, "w+b") as f:  # read too: a transposed kernel is written through a map of its place
            f.seek(8 + len(reserved))
            for entry in entries:  # in offset order: the data is written front to back, once
                warnings[entry.name] = entry.write(f)
                lo, hi = header[entry.name]["data_offsets"]
                if f.tell() != 8 + len(reserved) + hi:
                    raise RuntimeError(
                        f"{entry.name}: wrote {f.tell() - 8 - len(reserved) - lo} bytes, expected {hi - lo}"
                    )
            f.flush()
            start = 8 + len(reserved)
            written = {
                entry.name: digest_of(tmp, start=start + header[entry.name]["data_offsets"][0], length=entry.nbytes)
                for entry in (entries if digests else [])
            }
            final = _header_bytes(metadata(warnings, written), header, 0, pad_to=len(reserved))
            f.seek(0)
            f.write(struct.pack("<Q", len(final)))
            f.write(final)
    return warnings


def _header_bytes(meta: dict[str, str], header: dict[str, Any], slack: int, pad_to: int = 0) -> bytes:
    body = {"__metadata__": meta, **header} if meta else header
    raw = json.dumps(body, separators=(",", ":")).encode()
    size = max(pad_to, len(raw) + slack)
    size += -size % 8  # safetensors pads its header with spaces to 8 bytes
    if len(raw) > size:
        raise BadInput("the safetensors metadata outgrew its reserved space (too many warnings)")
    return raw + b" " * (size - len(raw))


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """The header of a safetensors file and where its data starts, checked against the file size.

    Every tensor's dtype, shape and byte range must be well formed, inside the data and apart from
    every other tensor's; `__metadata__` must map strings to strings (as the format says).
    """
    size = regular_file(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BadInput(f"{path} is too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, MAX_HEADER):
                raise BadInput(f"{path} is not a safetensors file (its header length {n} is impossible)")
            header = json_document(f.read(n), f"{path}: the safetensors header")
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(header, dict):
        raise BadInput(f"{path} is not a safetensors file (its header is not a table)")
    meta = header.get("__metadata__")
    if meta is None:  # MLX's save_safetensors writes null
        header.pop("__metadata__", None)
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BadInput(f"{path}: the safetensors metadata must map names to strings")
    start = 8 + n
    spans = []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        spans.append((*_span(path, key, info, size - start), key))
    spans.sort()
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise Damaged(f"{path}: tensors {first!r} and {second!r} overlap (corrupt)")
    return header, start


def _span(path: Path, key: str, info: Any, data_size: int) -> tuple[int, int]:
    """A tensor's byte range in the data, after checking its entry describes it."""
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise BadInput(f"{path}: tensor {key!r} is not described by dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    integers = (
        isinstance(shape, list)
        and isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*shape, *offsets])
    )
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_ITEMSIZE or not integers:
        raise BadInput(f"{path}: tensor {key!r} has a malformed dtype, shape or byte range")
    lo, hi = offsets
    if not lo <= hi <= data_size or hi - lo != math.prod(shape) * SAFETENSORS_ITEMSIZE[dtype]:
        raise Damaged(f"{path}: tensor {key!r} does not fit the file (truncated or corrupt)")
    return lo, hi


def tensor_words(path: Path, header: dict[str, Any], start: int, name: str) -> tuple[FileArray, ElementType]:
    """A tensor's storage words with its shape, still in the file (header already checked)."""
    info = header[name]
    etype = BY_SAFETENSORS.get(info["dtype"])
    if etype is None:
        raise BadInput(f"{path}: tensor {name!r} is {info['dtype']}, not a floating point type rnnconv converts")
    lo = info["data_offsets"][0]
    shape = tuple(int(d) for d in info["shape"])
    return FileArray(path, start + lo, etype.storage, shape), etype
