"""Keras weights as HDF5 stores them: tensors read one at a time (mapped in place where they can be), bfloat16
widened, and what a damaged or hostile file may hold (links, odd objects, claims larger than the file)."""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rnnconv.core.dtypes import source_dtype_name
from rnnconv.errors import BadInput, first_line
from rnnconv.safeio.inputs import FileArray, json_document, open_source
from rnnconv.table.constants import KERAS_VARIABLES
from rnnconv.table.transpose import transposed


def stored_arrays(tensors: dict[str, Any]) -> list[np.ndarray]:
    """kernel, recurrent_kernel[, bias] of one cell as stored (bfloat16 widened), in Keras' weight order."""
    fetch = fetcher(tensors, TensorReader())
    return [np.asarray(fetch(role)[...]) for role in KERAS_VARIABLES if role in tensors]


class TensorReader:
    """Reads a stored tensor whole and keeps only the last one read.

    A writer takes one tensor's gate blocks one after another, so each tensor is read
    from the file once, sequentially, and memory holds one tensor at a time. Kernels
    stored as (in, G*H) columns are transposed once, whole: every gate block of the
    result is then a contiguous run of rows, ready to be written as it is.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self.hdf5_at: int | None = None  # where the HDF5 file starts in `path` (a .keras member's offset)
        self._key: tuple[Any, bool] | None = None
        self._values: Any = None

    def read(self, dataset: Any, columns: bool = False) -> Any:
        if self._key is None or self._key[0] is not dataset or self._key[1] != columns:
            self._key, self._values = None, None  # let the previous tensor go before reading the next
            values = self.stored(dataset)
            self._values = _Transposed(transposed(values)) if columns and values.ndim == 2 else values
            self._key = (dataset, columns)
        return self._values

    def stored(self, dataset: Any) -> Any:
        """A tensor's values as stored (bfloat16 widened): where they lie in the file when they can be read there,
        else read now."""
        try:
            return _Bfloat16View(dataset)[...] if is_bfloat16(dataset) else self._mapped(dataset)
        except DAMAGED as exc:  # a damaged chunk, a broken B-tree: seen only when the data is read
            raise BadInput(
                f"{self._path}: weight {dataset.name} cannot be read, the file is damaged ({first_line(exc)})"
            ) from None

    def _mapped(self, dataset: Any) -> Any:
        """A contiguous, unfiltered dataset's values where they lie in the file (a FileArray, read a band at a
        time by the transpose: no whole copy), else read by h5py.

        The place is used only when its first and last values are those h5py reads, so an address that
        means something else (a user block, a damaged file) costs a read, never a wrong value.
        """
        if self._path is None or self.hdf5_at is None or dataset.dtype.kind != "f" or dataset.size == 0:
            return dataset[...]
        plist = dataset.id.get_create_plist()
        offset = dataset.id.get_offset()
        contiguous = plist.get_layout() == h5py.h5d.CONTIGUOUS and not plist.get_nfilters()
        if not contiguous or plist.get_external_count() or offset is None:
            return dataset[...]
        start = self.hdf5_at + offset
        if start + dataset.dtype.itemsize * dataset.size > self._path.stat().st_size:
            return dataset[...]  # h5py says what is wrong with the file
        values = FileArray(self._path, start, dataset.dtype, dataset.shape)
        ends = (tuple(0 for _ in values.shape), tuple(n - 1 for n in values.shape))
        if all(np.array_equal(values[end], dataset[end], equal_nan=True) for end in ends):
            return values
        return dataset[...]


class _Transposed:
    """A (rows, cols) tensor held as its transpose: t[r, c] is the held array's [c, r], as a view."""

    def __init__(self, held: np.ndarray):
        self.held = held
        self.shape = held.shape[::-1]

    def __getitem__(self, index: Any) -> np.ndarray:
        if index is Ellipsis:
            return self.held.T
        rows, cols = index
        return self.held[cols, rows].T


def fetcher(tensors: dict[str, Any], reader: TensorReader, row: Any = None):
    columns = row is not None and row.matrix.transposed
    return lambda role: reader.read(tensors[role], columns and role in ("input_matrix", "recurrent_matrix"))


def attribute_or_none(h5_object: Any, name: str) -> Any:
    """An HDF5 attribute, or None. Not attrs.get(): on a missing attribute h5py decodes HDF5's error
    stack, which has raised UnicodeDecodeError on garbage there (seen once in CI, on a valid fixture)."""
    return h5_object.attrs[name] if name in h5_object.attrs else None  # noqa: SIM401


def is_bfloat16(dataset: Any) -> bool:
    """Keras 3 writes bfloat16 as 2-byte opaque words, with a dtype attribute in .weights.h5."""
    marked = attribute_or_none(dataset, "dtype")
    return (isinstance(marked, (str, bytes)) and text_of(marked) == "bfloat16") or (
        dataset.dtype.kind == "V" and dataset.dtype.itemsize == 2
    )


class _Bfloat16View:
    """Keras 3 stores bfloat16 variables as 2-byte words with a dtype attribute."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self.shape = dataset.shape

    def __getitem__(self, index: Any) -> np.ndarray:
        words = np.asarray(self.dataset[index]).view(np.uint16)
        return (words.astype(np.uint32) << np.uint32(16)).view(np.float32)


def dtype_name(dataset: Any) -> str:
    if is_bfloat16(dataset):
        return "bfloat16"  # read widened to float32, written back exactly
    return source_dtype_name(dataset.dtype)


def json_attribute(h5: h5py.File, key: str, path: Path) -> dict[str, Any] | None:
    if key not in h5.attrs:
        return None
    config = json_document(text_of(h5.attrs[key]), f"{path}: the {key} attribute")
    if not isinstance(config, dict):
        raise BadInput(f"{path}: the {key} attribute is not a JSON object")
    return config


def text_of(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


HDF5_TIMEOUT = float(os.environ.get("RNNCONV_HDF5_TIMEOUT", "10"))  # seconds for libhdf5 to read a structure
MAX_OBJECTS = 100_000  # groups and datasets: far more than any Keras model holds
SMALL_DATASET = 4 << 20  # bytes: read whole by the structure walk; larger ones at their first and last element


class Window(io.RawIOBase):
    """Bytes [start, start + size) of an open file, as a file of their own (an uncompressed zip member, read in
    place)."""

    def __init__(self, file: Any, start: int, size: int):
        self._file, self.start, self.size, self._pos = file, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self.size - self._pos))
        self._file.seek(self.start + self._pos)
        got = int(self._file.readinto(memoryview(buffer)[:n]))
        self._pos += got
        return got


@dataclass(frozen=True)
class Structure:
    """An HDF5 file as the guard interpreter opens it to walk its structure (`within`): bytes [start, start + size)
    of a source (all of it: size None) that must still be the file rnnconv opened (`identity`), or its bytes."""

    path: str = ""
    identity: tuple[int, int] = (0, 0)  # st_dev, st_ino
    start: int = 0
    size: int | None = None
    data: bytes | None = None


def identity(opened: Any) -> tuple[int, int]:
    """Which file an open file (or a name) is: what `Structure.identity` holds."""
    found = os.fstat(opened.fileno()) if hasattr(opened, "fileno") else os.stat(opened)
    return found.st_dev, found.st_ino


def walk_structure(structure: Structure) -> None:
    """In the guard interpreter: `walk_everything` in what `structure` names; nothing where the file at its path is
    another one now (the real read says the source changed)."""
    if structure.data is not None:
        walk_everything(io.BytesIO(structure.data))
        return
    with open_source(structure.path) as f:
        if identity(f) != structure.identity:
            return
        if structure.size is None:
            name = f"/proc/self/fd/{f.fileno()}"  # as the real read opens it (`pin`)
            walk_everything(name if os.path.exists(name) else structure.path)
        else:
            walk_everything(Window(f, structure.start, structure.size))


def walk_everything(source: Any) -> None:
    """Touch everything the reader may touch: every group, attribute and dataset (hard links only).

    Run in the guard interpreter with a time limit (`within`, `walk_structure`): some damaged files make libhdf5
    itself loop forever, holding the interpreter, and no Python-level watchdog could stop it there.
    """
    if hasattr(source, "seek"):
        source.seek(0)
    with h5py.File(source, "r") as h5:
        pending, visited, count = [h5], {h5.id}, 0
        while pending:
            group = pending.pop()
            for name in group.attrs:
                group.attrs[name]  # the read itself is what is tested
            for key in group:
                count += 1
                if count > MAX_OBJECTS or not isinstance(group.get(key, getlink=True), h5py.HardLink):
                    continue
                child = group[key]
                if child.id in visited:  # a group linked into itself: once is enough
                    continue
                visited.add(child.id)
                if isinstance(child, h5py.Group):
                    pending.append(child)
                    continue
                for name in child.attrs:
                    child.attrs[name]
                if child.size and child.size * child.dtype.itemsize <= SMALL_DATASET:
                    child[()]
                elif child.size and child.ndim:
                    child[(0,) * child.ndim], child[tuple(n - 1 for n in child.shape)]


# What h5py, zipfile and walking an odd structure raise on a damaged file.
DAMAGED = (
    KeyError,
    ValueError,
    TypeError,
    AttributeError,
    RuntimeError,
    OSError,
    IndexError,
    RecursionError,
    struct.error,
    UnicodeDecodeError,
    NotImplementedError,
    zipfile.BadZipFile,
    EOFError,
    zlib.error,
)


def follow(group: h5py.Group, path: str) -> Any:
    """group[path], through hard links only: Keras writes no other kind, and a soft or external link may
    loop, or lead out of the file to anything (a FIFO would block the read forever)."""
    node = group
    for part in (p for p in path.split("/") if p):
        link = node.get(part, getlink=True) if isinstance(node, h5py.Group) else None
        if link is None:
            raise KeyError(path)
        if not isinstance(link, h5py.HardLink):
            kind = "an external link (out of the file)" if isinstance(link, h5py.ExternalLink) else "a soft link"
            raise BadInput(f"{path!r} is {kind}, which Keras never writes")
        node = node[part]
    return node


def holds(group: h5py.Group, path: str) -> bool:
    try:
        follow(group, path)
    except KeyError:
        return False
    return True


def as_group(obj: Any, name: str) -> h5py.Group:
    if not isinstance(obj, h5py.Group):
        raise BadInput(f"{name!r} is a {type(obj).__name__.lower()} where Keras writes a group")
    return obj


def as_dataset(obj: Any, name: str) -> h5py.Dataset:
    if not isinstance(obj, h5py.Dataset):
        raise BadInput(f"weight {name!r} is a {type(obj).__name__.lower()} where Keras writes a dataset")
    return obj


def check_tensor(dataset: h5py.Dataset, what: str, limit: int) -> None:
    """A stored weight must be a 1-D or 2-D float dataset that fits in its file."""
    if not (dataset.dtype.kind == "f" or is_bfloat16(dataset)):
        raise BadInput(f"{what} holds {dataset.dtype} values, not floating point numbers")
    if dataset.ndim not in (1, 2):
        raise BadInput(f"{what} has shape {dataset.shape}; a weight is a vector or a matrix")
    if dataset.size * dataset.dtype.itemsize > limit:
        raise BadInput(
            f"{what} claims {dataset.size * dataset.dtype.itemsize} bytes, more than its file holds ({limit} bytes)"
        )
