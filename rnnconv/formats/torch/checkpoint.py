"""`torch.save`'s zip checkpoints read without torch: a restricted unpickler, storages read in place.

A zip checkpoint is `<name>/data.pkl` (a pickle naming its tensors) beside `<name>/data/<key>`, one
member per storage, stored uncompressed. The pickle is read by an unpickler that resolves only the
globals `torch.load(weights_only=True)` needs for tensors and plain containers (tensor and parameter
rebuild functions, storage classes, dtypes, `torch.Size`, `OrderedDict`); any other global (a module, a
function, a class of the user's) refuses the file before anything is built from it. Tensors become
views of the memory-mapped storages: offsets, sizes and strides are checked against the storage, so a
hostile file can name no byte outside it.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, first_line
from rnnconv.formats import _zip
from rnnconv.safeio import regular_file
from rnnconv.table.constants import TORCH_STORAGES

MAX_PICKLE = 256 << 20  # bytes: a state_dict's pickle names tensors; it holds none of their values


class Refused(Exception):
    """A global the file needs that is not a tensor, a storage or a plain container."""


@dataclass(frozen=True)
class StorageClass:
    name: str  # FloatStorage, ...

    @property
    def dtype(self) -> str:
        return TORCH_STORAGES[self.name]


@dataclass(frozen=True)
class Storage:
    kind: StorageClass
    key: str
    numel: int


@dataclass
class PickledTensor:
    """A tensor as the pickle describes it; `problem` says why its values cannot be used."""

    storage: Storage | None
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # TORCH_STORAGES' numpy dtype name
    problem: str | None = None

    def __setstate__(self, state: Any) -> None:  # a parameter's or subclass's extra state: not weights
        pass


def _ints(values: Any, what: str) -> tuple[int, ...]:
    if not isinstance(values, (tuple, list)) or not all(isinstance(v, int) and v >= 0 for v in values):
        raise BadInput(f"a tensor's {what} is {values!r}, not a tuple of non-negative integers")
    return tuple(values)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> PickledTensor:
    if not isinstance(storage, Storage) or not isinstance(offset, int) or offset < 0:
        raise BadInput("a tensor names no storage torch.save wrote")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise BadInput(f"a tensor's size {shape} and stride {strides} differ in length")
    return PickledTensor(storage, offset, shape, strides, storage.kind.dtype)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


def _rebuild_from_type(func: Any, new_type: Any, args: Any, state: Any = None) -> Any:
    if func is not _rebuild_tensor or new_type not in (_TENSOR_TYPE, _PARAMETER_TYPE) or not isinstance(args, tuple):
        raise Refused("torch._tensor._rebuild_from_type_v2")
    return func(*args)


def _odd_tensor(problem: str) -> Callable[..., PickledTensor]:
    def rebuild(*_: Any) -> PickledTensor:
        return PickledTensor(None, 0, (), (), "", problem)

    return rebuild


def _meta_tensor(dtype: Any, size: Any, *_: Any) -> PickledTensor:
    kind = dtype if isinstance(dtype, str) else ""
    shape = _ints(size, "size")
    return PickledTensor(None, 0, shape, (), kind, "is a meta tensor: the file holds its shape but no values")


def _type_marker(name: str) -> type:
    return type(name, (), {})


_TENSOR_TYPE, _PARAMETER_TYPE = _type_marker("Tensor"), _type_marker("Parameter")
# The dtype objects a pickle may name (torch.float32, ...), as TORCH_STORAGES' numpy dtype names.
_DTYPES = {
    "float32": "<f4",
    "float": "<f4",
    "float64": "<f8",
    "double": "<f8",
    "float16": "<f2",
    "half": "<f2",
    "bfloat16": "bfloat16",
    "int64": "<i8",
    "long": "<i8",
    "int32": "<i4",
    "int": "<i4",
    "int16": "<i2",
    "int8": "i1",
    "uint8": "u1",
    "bool": "?",
    "complex64": "<c8",
    "complex128": "<c16",
}
SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): Counter,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "set"): set,
    ("torch", "Size"): tuple,
    ("torch", "Tensor"): _TENSOR_TYPE,
    ("torch.nn.parameter", "Parameter"): _PARAMETER_TYPE,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch._utils", "_rebuild_sparse_tensor"): _odd_tensor("is a sparse tensor, not a dense one"),
    ("torch._utils", "_rebuild_sparse_csr_tensor"): _odd_tensor("is a sparse tensor, not a dense one"),
    ("torch._utils", "_rebuild_qtensor"): _odd_tensor("is a quantized tensor, not a floating point one"),
    ("torch._utils", "_rebuild_nested_tensor"): _odd_tensor("is a nested tensor, not a dense one"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _meta_tensor,
    ("torch.serialization", "_get_layout"): str,
    **{("torch", name): StorageClass(name) for name in TORCH_STORAGES},
    **{("torch", name): dtype for name, dtype in _DTYPES.items()},
}


class _Unpickler(pickle.Unpickler):
    """Resolves SAFE_GLOBALS only; storages by their persistent ids."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.storages: dict[str, Storage] = {}  # by key, as the pickle names them

    def find_class(self, module: str, name: str) -> Any:
        found = SAFE_GLOBALS.get((module, name))
        if found is None:
            raise Refused(f"{module}.{name}")
        return found

    def persistent_load(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise BadInput(f"the pickle names a persistent object {str(pid)[:80]} that is no storage")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, StorageClass) or not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise BadInput(f"the pickle names storage {str(pid)[:80]}, not one torch.save writes")
        storage = self.storages.setdefault(key, Storage(kind, key, numel))
        if storage != Storage(kind, key, numel):
            raise BadInput(f"the pickle gives storage {key!r} two sizes or types")
        return storage


@dataclass
class ZipCheckpoint:
    """What a zip checkpoint holds (PickledTensor leaves), and the storages' bytes mapped in place (the map
    lives as long as a view of it does)."""

    path: Path
    root: Any
    _storages: dict[str, np.ndarray]

    def values(self, tensor: PickledTensor) -> np.ndarray:
        """The tensor's values: a read-only strided view of its storage, every index checked inside it."""
        if tensor.storage is None:
            raise BadInput(f"{self.path}: a tensor {tensor.problem}")
        words = self._storages[tensor.storage.key]
        extent = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride)) + 1
        if any(n == 0 for n in tensor.shape):
            return np.zeros(tensor.shape, words.dtype)
        if tensor.offset + extent > len(words):
            raise BadInput(
                f"{self.path}: a tensor of shape {tensor.shape} reaches past its storage "
                f"{tensor.storage.key!r} ({len(words)} elements)"
            )
        view = np.lib.stride_tricks.as_strided(
            words[tensor.offset :],
            shape=tensor.shape,
            strides=tuple(s * words.itemsize for s in tensor.stride),
            writeable=False,
        )
        return view.astype(words.dtype.newbyteorder("<")) if words.dtype.byteorder == ">" else view


def is_zip_checkpoint(path: Path, head: bytes) -> bool:
    return head.startswith(b"PK\x03\x04") and path.suffix.lower() != ".keras"


def read_zip(path: Path) -> ZipCheckpoint:
    """The checkpoint's object tree, tensors as PickledTensor, storages mapped; nothing run from it."""
    size = regular_file(path)
    archive = _zip.open_archive(path, "PyTorch checkpoint")
    with archive:
        infos = {info.filename: info for info in archive.infolist()}
        pickles = [name for name in infos if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise BadInput(f"{path} is a zip archive but not a torch.save checkpoint (no single <name>/data.pkl)")
        folder = pickles[0][: -len("data.pkl")]
        info = infos[pickles[0]]
        _zip.check_member(path, info, size, "torch.save")
        if info.file_size > MAX_PICKLE:
            raise BadInput(f"{path}: its pickle claims {info.file_size} bytes, more than any state_dict's")
        data = _zip.read_member(archive, pickles[0], path)
        order = infos.get(folder + "byteorder")
        big = order is not None and _zip.read_member(archive, order.filename, path).strip() == b"big"
        unpickler = _Unpickler(data)
        try:
            root = unpickler.load()
        except (BadInput, Refused):
            raise
        except RecursionError:
            raise BadInput(f"{path}: its pickle nests deeper than any state_dict") from None
        except Exception as exc:  # a damaged pickle raises anything pickle can raise
            raise BadInput(
                f"{path} is not a readable PyTorch checkpoint (truncated or corrupt: {first_line(exc)})"
            ) from None
        storages: dict[str, np.ndarray] = {}
        file_map = None
        for key, storage in unpickler.storages.items():
            numel = storage.numel
            member = infos.get(f"{folder}data/{key}")
            if member is None:
                raise BadInput(f"{path}: storage {key!r} that the pickle names is not in the archive")
            kind = storage.kind.dtype
            dtype = np.dtype("<u2" if kind == "bfloat16" else kind)
            if big:
                dtype = dtype.newbyteorder(">")
            if numel * dtype.itemsize > member.file_size:
                raise BadInput(f"{path}: storage {key!r} claims {numel} elements, more than its member holds")
            _zip.check_member(path, member, size, "torch.save")
            if member.compress_type == zipfile.ZIP_STORED:
                start = _zip.stored_start(path, member, size)
                if file_map is None:
                    file_map = _map(path)
                words = file_map[start : start + numel * dtype.itemsize].view(dtype) if numel else np.zeros(0, dtype)
            else:
                words = np.frombuffer(_zip.read_member(archive, member.filename, path), dtype, numel)
            storages[key] = words
    return ZipCheckpoint(path, root, storages)


def _map(path: Path) -> np.memmap:
    # np.memmap, not mmap: the views of it know their file, so unchanged bytes are copied in the kernel
    return np.memmap(path, dtype=np.uint8, mode="r")
