"""`torch.save`'s zip checkpoints read and written without torch: an inert unpickler, storages in place.

A zip checkpoint is `<name>/data.pkl` (a pickle naming its tensors) beside `<name>/data/<key>`, one
member per storage, stored uncompressed. The pickle is read by the inert unpickler (`_pickled`), which turns
only torch.save's own words into values (`TORCH_REBUILDS`: tensor and parameter rebuild functions, storage
classes, dtypes, `torch.Size`) beside plain containers; any other global (a module, a function, a class of the
user's) is recorded by name, never imported or called, for the reader to judge. A tensor's values stay
in the file until they are read (never mapped: a file cut short meanwhile is an error, not SIGBUS); offsets,
sizes and strides are checked against the storage, so a hostile file can name no byte outside it.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rnnconv.core.dtypes import ELEMENT_TYPES, encode
from rnnconv.errors import BadInput
from rnnconv.formats import _pickled, _zip
from rnnconv.formats._zip import LOCAL_HEADER
from rnnconv.formats.sources import SOURCE_KEY, SOURCE_RECORD_LIMIT
from rnnconv.formats.torch.wire import TORCH_STORAGES
from rnnconv.safeio.digests import in_background
from rnnconv.safeio.inputs import FileArray, byte_view, regular_file
from rnnconv.safeio.outputs import write_array
from rnnconv.table.constants import NONLINEARITY_KEY

RECORDS = (SOURCE_KEY, NONLINEARITY_KEY)  # what a checkpoint rnnconv wrote records beside its pickle, as members


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
    quantizer: Quantizer | None = None  # a quantized tensor's: its integers stand for scale * (q - zero_point)

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


@dataclass(frozen=True)
class Quantizer:
    """A quantized tensor's quantizer as torch.save pickles it: per tensor one scale and zero point, per channel
    a tensor of each along `axis` (read from their storages only when the tensor is)."""

    scheme: str  # QSCHEMES' names: per_tensor_affine, per_channel_affine
    scales: float | PickledTensor
    zero_points: int | PickledTensor
    axis: int | None  # None: per tensor


# torch's qscheme objects, by the names its pickles give them; only the affine ones are read (as torch.save
# pickles them: torch's _rebuild_qtensor refuses the symmetric ones too)
QSCHEMES = ("per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric")
READ_QSCHEMES = ("per_tensor_affine", "per_channel_affine")


def _rebuild_qtensor(storage: Any, offset: Any, size: Any, stride: Any, params: Any, *_: Any) -> PickledTensor:
    """torch._utils._rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad, hooks)."""
    tensor = _rebuild_tensor(storage, offset, size, stride)
    scheme = params[0] if isinstance(params, tuple) and params else None
    if scheme not in QSCHEMES:
        raise BadInput(f"a quantized tensor's quantizer is {str(params)[:60]}, not one torch.save writes")
    if scheme not in READ_QSCHEMES:
        tensor.problem = f"is quantized {scheme}, which torch.save does not write and rnnconv does not read"
        return tensor
    if scheme == "per_tensor_affine":
        scale, zero_point = params[1:] if len(params) == 3 else (None, None)
        if not isinstance(scale, float) or isinstance(zero_point, bool) or not isinstance(zero_point, int):
            raise BadInput(f"a per-tensor quantized tensor's scale and zero point are {str(params[1:])[:60]}")
        tensor.quantizer = Quantizer(scheme, scale, zero_point, None)
        return tensor
    scales, zero_points, axis = params[1:] if len(params) == 4 else (None, None, None)
    if not isinstance(scales, PickledTensor) or not isinstance(zero_points, PickledTensor):
        raise BadInput("a per-channel quantized tensor's scales and zero points are not tensors")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < max(len(tensor.shape), 1):
        raise BadInput(f"a per-channel quantized tensor of shape {tensor.shape} is quantized along axis {axis!r}")
    tensor.quantizer = Quantizer(scheme, scales, zero_points, axis)
    return tensor


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    return data


def _rebuild_from_type(func: Any, new_type: Any, args: Any, state: Any = None) -> Any:
    if func is not _rebuild_tensor or not isinstance(args, tuple):
        raise BadInput("a tensor is rebuilt by something other than torch's own rebuild")
    if new_type not in (_TENSOR_TYPE, _PARAMETER_TYPE):
        named = new_type.qualified() if isinstance(new_type, type) and issubclass(new_type, _pickled.Object) else "?"
        return _odd_tensor(f"is a tensor of the subclass {named}, not a plain tensor")()
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
# torch.save's own words for tensors, storages and dtypes: what the inert unpickler (`_pickled`) turns into values.
TORCH_REBUILDS: dict[tuple[str, str], Any] = {
    ("torch", "Size"): tuple,
    ("torch", "Tensor"): _TENSOR_TYPE,
    ("torch.nn.parameter", "Parameter"): _PARAMETER_TYPE,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch._utils", "_rebuild_sparse_tensor"): _odd_tensor("is a sparse tensor, not a dense one"),
    ("torch._utils", "_rebuild_sparse_csr_tensor"): _odd_tensor("is a sparse tensor, not a dense one"),
    ("torch._utils", "_rebuild_qtensor"): _rebuild_qtensor,
    ("torch._utils", "_rebuild_nested_tensor"): _odd_tensor("is a nested tensor, not a dense one"),
    ("torch._utils", "_rebuild_meta_tensor_no_storage"): _meta_tensor,
    ("torch.serialization", "_get_layout"): str,
    **{("torch", name): StorageClass(name) for name in TORCH_STORAGES},
    **{("torch", name): dtype for name, dtype in _DTYPES.items()},
    **{("torch", name): name for name in QSCHEMES},
    **{("torch", name): name for name in ("qint8", "quint8", "qint32")},  # a whole quantized model's dtype
}


class Storages:
    """The storages a pickle names by their persistent ids, by key (`persistent_load` for `_pickled.load`)."""

    def __init__(self) -> None:
        self.by_key: dict[str, Storage] = {}

    def __call__(self, pid: Any) -> Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise BadInput(f"the pickle names a persistent object {str(pid)[:80]} that is no storage")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, StorageClass) or not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            named = kind.qualified() if isinstance(kind, type) and issubclass(kind, _pickled.Object) else str(kind)
            raise BadInput(f"the pickle names a storage {str(key)[:40]!r} of {named[:60]}, not one torch.save writes")
        storage = self.by_key.setdefault(key, Storage(kind, key, numel))
        if storage != Storage(kind, key, numel):
            raise BadInput(f"the pickle gives storage {key!r} two sizes or types")
        return storage


@dataclass
class ZipCheckpoint:
    """What a zip checkpoint holds (PickledTensor leaves), and its storages (stored ones still in the file)."""

    path: Path
    root: Any
    _storages: dict[str, np.ndarray | FileArray]
    folder: str = "archive/"  # the members' common folder, as the writer named it
    records: dict[str, bytes] = field(default_factory=dict)  # rnnconv's records beside the pickle (RECORDS), by name
    script: dict[str, str] | None = None  # a TorchScript archive's code of torch.nn's RNN classes, by module; else None

    def code(self, module: str) -> str | None:
        """The TorchScript source of a module (`__torch__.torch.nn.modules.rnn`), where the archive holds it."""
        return (self.script or {}).get(module)

    def values(self, tensor: PickledTensor) -> np.ndarray | FileArray:
        """The tensor's values, every index checked inside its storage: still in the file when they lie there in
        C order, little-endian (to be copied file to file), else read and viewed with the tensor's strides."""
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
        c_strides = [math.prod(tensor.shape[i + 1 :]) for i in range(len(tensor.shape))]
        in_order = all(n == 1 or s == c for n, s, c in zip(tensor.shape, tensor.stride, c_strides))
        big = words.dtype.byteorder == ">"
        if isinstance(words, FileArray) and in_order and not big:
            in_file: FileArray = words[tensor.offset : tensor.offset + math.prod(tensor.shape)].reshape(tensor.shape)
            return in_file
        span = np.asarray(words[tensor.offset : tensor.offset + extent])  # a stored member's span is read now
        view = np.lib.stride_tricks.as_strided(
            span,
            shape=tensor.shape,
            strides=tuple(s * words.itemsize for s in tensor.stride),
            writeable=False,
        )
        return view.astype(words.dtype.newbyteorder("<")) if big else view


def is_zip_checkpoint(path: Path, head: bytes) -> bool:
    return head.startswith(b"PK\x03\x04") and path.suffix.lower() != ".keras"


def read_zip(path: Path) -> ZipCheckpoint:
    """The checkpoint's object tree, tensors as PickledTensor, storages mapped; nothing run from it."""
    size = regular_file(path)
    archive = _zip.open_archive(path)
    with archive:
        infos = {info.filename: info for info in archive.infolist()}
        pickles = [name for name in infos if name.endswith("/data.pkl") and name.count("/") == 1]
        if len(pickles) != 1:
            raise BadInput(f"{path} is a zip archive but not a torch.save checkpoint (no single <name>/data.pkl)")
        folder = pickles[0][: -len("data.pkl")]
        info = infos[pickles[0]]
        _zip.check_member(path, info, size, "torch.save")
        if info.file_size > _pickled.MAX_PICKLE:
            raise BadInput(f"{path}: its pickle claims {info.file_size} bytes, more than any state_dict's")
        data = _zip.read_member(archive, pickles[0], path)
        order = infos.get(folder + "byteorder")
        big = order is not None and _zip.read_member(archive, order.filename, path).strip() == b"big"
        named = Storages()
        root = _pickled.load(data, str(path), TORCH_REBUILDS, named)
        storages: dict[str, np.ndarray | FileArray] = {}
        for key, storage in named.by_key.items():
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
            words: np.ndarray | FileArray
            if member.compress_type == zipfile.ZIP_STORED:
                words = FileArray(path, _zip.stored_start(path, member, size), dtype, (numel,))
            else:
                words = np.frombuffer(_zip.read_member(archive, member.filename, path), dtype, numel)
            storages[key] = words
        records = {}
        for name in (n for n in RECORDS if folder + n in infos):
            record = infos[folder + name]
            _zip.check_member(path, record, size, "rnnconv")
            if record.file_size > SOURCE_RECORD_LIMIT:
                raise BadInput(f"{path}: its {name} member is larger than any record rnnconv writes")
            records[name] = _zip.read_member(archive, record.filename, path)
        script = _script_code(path, archive, infos, folder, size) if folder + SCRIPT_CONSTANTS in infos else None
    return ZipCheckpoint(path, root, storages, folder, records, script)


SCRIPT_CONSTANTS = "constants.pkl"  # what a TorchScript archive holds beside its data.pkl, and torch.save's do not
SCRIPT_RNN_CODE = "code/__torch__/torch/nn/modules/rnn"  # where torch.jit.save writes the code of torch.nn's RNNs
MAX_CODE = 16 << 20  # bytes of that code read, at most: a few KB per RNN class


def _script_code(path: Path, archive: zipfile.ZipFile, infos: dict, folder: str, size: int) -> dict[str, str]:
    """The TorchScript source of torch.nn's RNN classes in an archive, by module (never run: read for what it says)."""
    code, total = {}, 0
    for name, info in infos.items():
        if not (name.startswith(folder + SCRIPT_RNN_CODE) and name.endswith(".py")):
            continue
        _zip.check_member(path, info, size, "torch.jit.save")
        total += info.file_size
        if total > MAX_CODE:
            raise BadInput(f"{path}: its TorchScript code of torch.nn's RNNs is larger than any archive's")
        module = name[len(folder) + len("code/") : -len(".py")].replace("/", ".")
        code[module] = _zip.read_member(archive, name, path).decode("utf-8", "replace")
    return code


# --- writing ----------------------------------------------------------------------------------------
# What torch.save (2.x) writes for a dict of tensors, without torch: the pickle names one storage per
# tensor; each storage is a stored member whose bytes start at a multiple of STORAGE_ALIGNMENT, as
# torch.load(mmap=True) wants them. Storage bytes are copied in the kernel where they are still in a
# source file, and their CRC-32s are computed on the other core meanwhile.

STORAGE_ALIGNMENT = 64
_ZIP64_LIMIT = 0xFFFFFFFF  # sizes and offsets from here on are stated in Zip64 fields
_ZIP64_MARKER = 0xFFFFFFFF  # what a 32-bit field holds then
_UTF8_NAMES = 0x800  # general-purpose flag: member names are UTF-8
_DATE_1980 = (0 << 9) | (1 << 5) | 1  # 1980-01-01: a fixed date, so the same weights give the same file
_PADDING_FIELD = 0x4246  # the extra-field id torch.save pads with ("FB")


@dataclass(frozen=True)
class TensorToSave:
    words: np.ndarray | FileArray  # C-contiguous little-endian storage words (bfloat16 as uint16)
    storage: str  # a TORCH_STORAGES key: FloatStorage, ...


def storage_class(dtype: str) -> str:
    """The storage class torch.save names for an element type (float32, bfloat16, ...)."""
    wanted = "bfloat16" if dtype == "bfloat16" else np.dtype(dtype).newbyteorder("<").str
    return next(name for name, kind in TORCH_STORAGES.items() if kind == wanted)


def write_zip(path: Path, tensors: dict[str, TensorToSave], records: dict[str, str] | None = None) -> None:
    """A checkpoint that torch.load(weights_only=True) reads as {key: tensor}, written to the new file `path`, with
    rnnconv's `records` (RECORDS) as members beside the pickle, which torch.load passes over."""
    folder = path.stem or "archive"
    small = {
        "data.pkl": _state_dict_pickle(tensors),
        ".format_version": b"1",
        ".storage_alignment": str(STORAGE_ALIGNMENT).encode(),
        "byteorder": b"little",
        **{name: text.encode() for name, text in (records or {}).items()},
    }
    members: list[tuple[str, np.ndarray | FileArray | memoryview]] = [
        (f"{folder}/{n}", memoryview(d)) for n, d in small.items()
    ]
    members += [(f"{folder}/data/{index}", tensor.words) for index, tensor in enumerate(tensors.values())]
    _write_archive(path, [*members, (f"{folder}/version", memoryview(b"3\n"))])


def patch_zip(
    checkpoint: ZipCheckpoint,
    path: Path,
    replacements: list[tuple[PickledTensor, np.ndarray | FileArray]],
    tensors: list[PickledTensor],
    records: dict[str, str],
) -> None:
    """A copy of a zip checkpoint, written to the new file `path`, with each replacement's values (in the tensor's
    own dtype) in its place in the storage and rnnconv's `records` (RECORDS) in place of those it had; every other
    member byte for byte, the pickle among them, so keys, nesting and every other object stay as they were. A
    replaced tensor whose storage another of `tensors` (every tensor of the checkpoint) also shows, tied weights, is
    refused: the other would change with it."""
    changed: dict[str, np.ndarray] = {}
    for tensor, values in replacements:
        assert tensor.storage is not None
        words = changed.setdefault(tensor.storage.key, np.array(checkpoint._storages[tensor.storage.key], copy=True))
        etype = ELEMENT_TYPES.get("bfloat16" if tensor.dtype == "bfloat16" else np.dtype(tensor.dtype).name)
        if etype is None:
            raise BadInput(f"{checkpoint.path}: a tensor of the RNN is {tensor.dtype}, not floating point")
        np.lib.stride_tricks.as_strided(
            words[tensor.offset :], tensor.shape, tuple(s * words.itemsize for s in tensor.stride)
        )[...] = encode(np.asarray(values), etype)
    _refuse_ties(checkpoint.path, [tensor for tensor, _ in replacements], tensors)
    archive = _zip.open_archive(checkpoint.path)
    members: list[tuple[str, np.ndarray | FileArray | memoryview]] = []
    size = regular_file(checkpoint.path)
    with archive:
        for info in archive.infolist():
            key = info.filename.removeprefix(f"{checkpoint.folder}data/")
            if info.filename.removeprefix(checkpoint.folder) in RECORDS:
                continue  # the model's own records: the copy's are written after
            if key in changed and info.filename != key:
                members.append((info.filename, changed[key]))
            elif info.compress_type == zipfile.ZIP_STORED and info.file_size:
                start = _zip.stored_start(checkpoint.path, info, size)
                members.append(
                    (info.filename, FileArray(checkpoint.path, start, np.dtype(np.uint8), (info.file_size,)))
                )
            else:
                members.append((info.filename, memoryview(_zip.read_member(archive, info.filename, checkpoint.path))))
    members += [(checkpoint.folder + name, memoryview(text.encode())) for name, text in records.items()]
    _write_archive(path, members)


def _refuse_ties(path: Path, replaced: list[PickledTensor], tensors: list[PickledTensor]) -> None:
    """No tensor but the replaced ones may show an element of theirs."""
    marks = {t.storage.key: np.zeros(t.storage.numel, bool) for t in replaced if t.storage is not None}
    for tensor in replaced:
        if tensor.storage is not None:
            _elements(marks[tensor.storage.key], tensor)[...] = True
    for tensor in tensors:
        shown = tensor.storage is not None and tensor.storage.key in marks and all(t is not tensor for t in replaced)
        if shown and _elements(marks[tensor.storage.key], tensor).any():  # type: ignore[union-attr]
            raise BadInput(
                f"{path}: a tensor of the RNN shares its storage with another tensor (tied weights), which "
                f"would change with it; untie them before patching"
            )


def _elements(marks: np.ndarray, tensor: PickledTensor) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(marks[tensor.offset :], tensor.shape, tensor.stride)


def _write_archive(path: Path, members: list[tuple[str, np.ndarray | FileArray | memoryview]]) -> None:
    """A stored zip archive of these members, each aligned as torch.load(mmap=True) wants, at the new file `path`."""
    records: list[_Record] = []
    with open(path, "wb") as f:
        for name, data in members:
            records.append(_write_record(f, name, data))
        for record in records:  # the local headers' CRC-32s, now that they are known
            f.seek(record.offset + 14)
            f.write(struct.pack("<I", record.crc.result()))
        f.seek(0, io.SEEK_END)
        _write_directory(f, records)


@dataclass
class _Record:
    name: bytes
    offset: int  # of the local header
    size: int
    crc: Future[int]


def _write_record(f: BinaryIO, name: str, data: np.ndarray | FileArray | memoryview) -> _Record:
    encoded = name.encode()
    size = data.nbytes
    offset = f.tell()
    sizes = struct.pack("<HHQQ", 1, 16, size, size) if size >= _ZIP64_LIMIT else b""
    start = offset + LOCAL_HEADER + len(encoded) + len(sizes)
    pad = -start % STORAGE_ALIGNMENT
    pad += STORAGE_ALIGNMENT if 0 < pad < 4 else 0  # a padding field needs 4 bytes of its own
    extra = sizes + (struct.pack("<HH", _PADDING_FIELD, pad - 4) + b"Z" * (pad - 4) if pad else b"")
    stated = _ZIP64_MARKER if sizes else size
    f.write(
        struct.pack(
            "<IHHHHHIIIHH",
            0x04034B50,
            45 if sizes else 20,
            _UTF8_NAMES,
            0,
            0,
            _DATE_1980,
            0,
            stated,
            stated,
            len(encoded),
            len(extra),
        )
        + encoded
        + extra
    )
    if isinstance(data, memoryview):
        f.write(data)
        crc: Future[int] = Future()
        crc.set_result(zlib.crc32(data))
    else:
        crc = in_background(lambda: _crc32(data))
        write_array(f, data)
    if f.tell() != start + pad + size:
        raise RuntimeError(f"{name}: the file holds {f.tell() - start - pad} bytes of it, not {size}")
    return _Record(encoded, offset, size, crc)


def _crc32(data: np.ndarray | FileArray) -> int:
    """The CRC-32 of an array's bytes, or of values still in a file, read a run at a time (zlib lets the GIL go)."""
    if not isinstance(data, FileArray):
        return zlib.crc32(byte_view(data).data)
    value = 0
    for run in data.runs():
        value = zlib.crc32(run.data, value)
    return value


def _write_directory(f: BinaryIO, records: list[_Record]) -> None:
    begin = f.tell()
    for record in records:
        big_size, big_offset = record.size >= _ZIP64_LIMIT, record.offset >= _ZIP64_LIMIT
        extra_values = ([record.size, record.size] if big_size else []) + ([record.offset] if big_offset else [])
        extra = (
            struct.pack(f"<HH{len(extra_values)}Q", 1, 8 * len(extra_values), *extra_values) if extra_values else b""
        )
        version = 45 if extra else 20
        stated = _ZIP64_MARKER if big_size else record.size
        f.write(
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                version,
                version,
                _UTF8_NAMES,
                0,
                0,
                _DATE_1980,
                record.crc.result(),
                stated,
                stated,
                len(record.name),
                len(extra),
                0,
                0,
                0,
                0,
                _ZIP64_MARKER if big_offset else record.offset,
            )
            + record.name
            + extra
        )
    end = f.tell()
    count, size = len(records), end - begin
    if count >= 0xFFFF or begin >= _ZIP64_LIMIT or size >= _ZIP64_LIMIT:
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, begin))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        count, size, begin = 0xFFFF, _ZIP64_MARKER, _ZIP64_MARKER
    f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, size, begin, 0))


def _state_dict_pickle(tensors: dict[str, TensorToSave]) -> bytes:
    """Protocol 2, as torch.save pickles a dict of tensors: each a _rebuild_tensor_v2 of its own storage."""
    out = bytearray(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    for index, (key, tensor) in enumerate(tensors.items()):
        shape = tensor.words.shape
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))  # contiguous, as torch wants
        out += _unicode(key) + b"ctorch._utils\n_rebuild_tensor_v2\n(("  # the function, MARK args, MARK pid
        out += _unicode("storage") + f"ctorch\n{tensor.storage}\n".encode() + _unicode(str(index)) + _unicode("cpu")
        out += _int(tensor.words.size) + b"tQ"  # TUPLE, BINPERSID
        out += _int(0) + _tuple(shape) + _tuple(strides) + b"\x89"  # offset, size, stride, requires_grad False
        out += b"ccollections\nOrderedDict\n)R"  # backward hooks: OrderedDict()
        out += b"tR"  # TUPLE, REDUCE
    out += b"u."  # SETITEMS, STOP
    return bytes(out)


def _unicode(text: str) -> bytes:
    encoded = text.encode()
    return b"X" + struct.pack("<I", len(encoded)) + encoded


def _int(value: int) -> bytes:
    if 0 <= value < 1 << 8:
        return b"K" + struct.pack("<B", value)
    if 0 <= value < 1 << 16:
        return b"M" + struct.pack("<H", value)
    if -(1 << 31) <= value < 1 << 31:
        return b"J" + struct.pack("<i", value)
    encoded = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + struct.pack("<B", len(encoded)) + encoded  # LONG1


def _tuple(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_int(v) for v in values) + b"t" if values else b")"
