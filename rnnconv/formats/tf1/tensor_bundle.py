"""TensorFlow's checkpoint files (the V2 "tensor bundle" that `Saver` and `tf.train.Checkpoint` write), read
without TensorFlow.

`X.index` is a LevelDB table (TensorFlow's copy: tensorflow/core/lib/io/format.cc, block.cc,
table_builder.cc): blocks of prefix-compressed entries, each block followed by its compression type and
masked crc32c, an index block naming the data blocks, and a 48-byte footer ending in a magic number. Its
first entry, under the empty key, is a `BundleHeaderProto` (how many data files, their byte order, the
format's version); every other key is a tensor's name and its value a `BundleEntryProto` (dtype, shape, data
file, offset, size, masked crc32c of the bytes). The values lie raw in `X.data-0000k-of-0000n`
(tensorflow/core/util/tensor_bundle/tensor_bundle.cc). Every number is checked before it is used, and every
block's crc32c when the index is read (docs/LAYOUTS.md section 9); a tensor's values are read from its data
file, and their crc32c is computed on the other core: outputs are committed only if it matches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import google_crc32c
import numpy as np

from rnnconv.core.dtypes import decode, element_type
from rnnconv.errors import BadInput
from rnnconv.formats.tf1.wire import FOOTER_BYTES, TABLE_MAGIC, checkpoint_prefix, index_file
from rnnconv.safeio.digests import checksum_guard
from rnnconv.safeio.inputs import Guard, add_guard, read_array, regular_file, unchanged
from rnnconv.table.constants import ELEMENT_TYPE_CODES

BLOCK_TRAILER_BYTES = 5  # after each block: its compression type, then the masked crc32c of block and type
NO_COMPRESSION, SNAPPY = 0, 1
BUNDLE_VERSION = 1  # kTensorBundleVersion: the consumer version this reader is
INDEX_LIMIT = 64 << 20  # bytes: names and offsets only; a checkpoint of a million tensors has a smaller index
ENTRY_LIMIT = 1 << 20  # entries and blocks in an index
SHARD_LIMIT = 1 << 14  # data files of one checkpoint
MAX_RANK = 254  # TensorShape::MaxDimensions()
# DataType numbers (tensorflow/core/framework/types.proto) and the names TensorFlow gives them.
DATA_TYPE_NAMES = (
    "invalid float32 float64 int32 uint8 int16 int8 string complex64 int64 bool qint8 quint8 qint32 bfloat16 "
    "qint16 quint16 uint16 complex128 float16 resource variant uint32 uint64 float8_e5m2 float8_e4m3fn "
    "float8_e4m3fnuz float8_e4m3b11fnuz float8_e5m2fnuz int4 uint4 int2 uint2 float4_e2m1fn"
)
DATA_TYPES = dict(enumerate(DATA_TYPE_NAMES.split()))
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5  # protobuf wire types
PACKED = -1  # in a schema: a repeated varint field, packed or not


class Corrupt(ValueError):
    """What in an index does not fit its format: the reason, which the caller turns into one sentence."""


def masked_crc32c(data: bytes) -> int:
    """crc32c::Mask of the data's crc32c, as the files store it: rotated right by 15 bits, plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def unmasked(masked: int) -> int:
    """crc32c::Unmask: the crc32c a stored (masked) one was made of."""
    rotated = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


# --- protobuf's wire format -------------------------------------------------------------------------------


def _varint(data: bytes, pos: int, end: int, bits: int = 64) -> tuple[int, int]:
    """The base-128 varint at `pos` (at most `bits` wide, before `end`) and the position after it."""
    value = shift = 0
    while shift < bits:
        if pos >= end:
            raise Corrupt("a varint runs past its end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if shift >= bits or value >> bits:
        raise Corrupt(f"a varint exceeds {bits} bits")
    return value, pos


def _signed(value: int) -> int:
    """An int32/int64 field's value: negative numbers are sent as 64-bit two's complement."""
    return value - (1 << 64) if value >> 63 else value


def _message(data: bytes, schema: dict[int, int]) -> dict[int, list[int | bytes]]:
    """The fields of a protobuf message that `schema` names (number -> wire type), each field's values in
    order; fields it does not name are skipped, as protobuf readers do."""
    fields: dict[int, list[int | bytes]] = {}
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == VARINT:
            value, pos = _varint(data, pos, end)
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > end:
                raise Corrupt("a protobuf field runs past its message")
            value, pos = int.from_bytes(data[pos : pos + width], "little"), pos + width
        elif wire == LENGTH:
            length, pos = _varint(data, pos, end)
            if length > end - pos:
                raise Corrupt("a protobuf field runs past its message")
            value, pos = data[pos : pos + length], pos + length
        else:  # groups (3, 4) are in no message of a checkpoint
            raise Corrupt(f"a protobuf field has wire type {wire}")
        expected = schema.get(number)
        if expected is None:
            continue
        if expected == PACKED and isinstance(value, bytes):
            fields.setdefault(number, []).extend(_packed(value))
        elif wire == expected or (expected == PACKED and wire == VARINT):
            fields.setdefault(number, []).append(value)
        else:
            raise Corrupt(f"protobuf field {number} has wire type {wire}, not {expected}")
    return fields


def _packed(data: bytes) -> Iterator[int]:
    pos = 0
    while pos < len(data):
        value, pos = _varint(data, pos, len(data))
        yield value


def _number(fields: dict[int, list[int | bytes]], number: int) -> int:
    """A scalar field's value: its last occurrence (protobuf's rule), 0 when absent."""
    value = fields.get(number, [0])[-1]
    assert isinstance(value, int)  # _message checked the wire type
    return value


def _embedded(fields: dict[int, list[int | bytes]], number: int) -> bytes:
    """An embedded message's bytes: its occurrences joined, which protobuf reads as one message, merged."""
    return b"".join(value for value in fields.get(number, []) if isinstance(value, bytes))


# --- the index: a LevelDB table ---------------------------------------------------------------------------


def _handle(data: bytes, pos: int, end: int) -> tuple[tuple[int, int], int]:
    """A BlockHandle (offset, size: two varints) and the position after it."""
    offset, pos = _varint(data, pos, end)
    size, pos = _varint(data, pos, end)
    return (offset, size), pos


def _block(table: bytes, handle: tuple[int, int], end: int) -> bytes:
    """A block's contents, inside the table before `end`, its crc32c checked."""
    offset, size = handle
    if offset + size + BLOCK_TRAILER_BYTES > end:
        raise Corrupt(f"a block of {size} bytes at byte {offset} runs past the table's end ({end})")
    stored = int.from_bytes(table[offset + size + 1 : offset + size + BLOCK_TRAILER_BYTES], "little")
    if masked_crc32c(table[offset : offset + size + 1]) != stored:
        raise Corrupt(f"the block at byte {offset} does not match its crc32c (damaged)")
    compression = table[offset + size]
    if compression == SNAPPY:  # TensorFlow 1.1 wrote such indexes; every later release writes them plain
        raise Corrupt("its blocks are snappy-compressed, which rnnconv does not read (save it again with TF >= 1.2)")
    if compression != NO_COMPRESSION:
        raise Corrupt(f"the block at byte {offset} has compression type {compression}, which TensorFlow never writes")
    return table[offset : offset + size]


def _entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """A block's (key, value) entries: each key shares a prefix with the one before; restart points end it."""
    if len(block) < 4:
        raise Corrupt("a block is too short to hold its restart count")
    restarts = int.from_bytes(block[-4:], "little")
    if restarts > (len(block) - 4) // 4:
        raise Corrupt("a block claims more restart points than it holds")
    end = len(block) - 4 * (restarts + 1) if restarts else 0  # no restart point: TF's reader sees no entry
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos, end, 32)
        unshared, pos = _varint(block, pos, end, 32)
        value_size, pos = _varint(block, pos, end, 32)
        if shared > len(key) or unshared + value_size > end - pos:
            raise Corrupt("a block entry runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + value_size]
        pos += value_size


def read_table(path: Path) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a LevelDB table, in order: blocks in file order, keys rising, crc32cs checked."""
    regular_file(path, "the checkpoint index")
    with open(path, "rb") as f:
        table = f.read(INDEX_LIMIT + 1)
    if len(table) > INDEX_LIMIT:
        raise BadInput(f"{path} is more than {INDEX_LIMIT} bytes, more than a checkpoint index of names needs")
    try:
        if len(table) < FOOTER_BYTES:
            raise Corrupt(f"it is {len(table)} bytes, shorter than a table's footer")
        footer_at = len(table) - FOOTER_BYTES
        if table[-len(TABLE_MAGIC) :] != TABLE_MAGIC:
            raise Corrupt("it does not end with the table's magic number")
        _, pos = _handle(table, footer_at, len(table) - len(TABLE_MAGIC))  # the metaindex: empty, unread
        index_handle, _ = _handle(table, pos, len(table) - len(TABLE_MAGIC))
        entries: list[tuple[bytes, bytes]] = []
        blocks_end = 0  # data blocks follow one another: none is read twice
        for blocks, (separator, encoded) in enumerate(_entries(_block(table, index_handle, footer_at)), 1):
            handle, _ = _handle(encoded, 0, len(encoded))
            if handle[0] < blocks_end:
                raise Corrupt("its index names overlapping blocks")
            blocks_end = handle[0] + handle[1] + BLOCK_TRAILER_BYTES
            for key, value in _entries(_block(table, handle, footer_at)):
                if (entries and key <= entries[-1][0]) or key > separator:
                    raise Corrupt("its keys are not in order")
                entries.append((key, value))
                _count(blocks + len(entries))
            _count(blocks + len(entries))
    except Corrupt as exc:
        raise BadInput(f"{path} is not a readable TensorFlow checkpoint: {exc}") from None
    return entries


def _count(items: int) -> None:
    """Bounds the work a hostile index can ask for."""
    if items > ENTRY_LIMIT:
        raise Corrupt(f"it holds more than {ENTRY_LIMIT} entries and blocks, more than any checkpoint")


# --- the bundle -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleEntry:
    """Where a tensor's bytes are (BundleEntryProto): data file, offset, size, masked crc32c."""

    dtype: str  # TensorFlow's name of its DataType
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int
    sliced: bool  # a partitioned variable: its slices are entries of their own, the fields above unused


def _entry(value: bytes) -> BundleEntry:
    fields = _message(value, {1: VARINT, 2: LENGTH, 3: VARINT, 4: VARINT, 5: VARINT, 6: FIXED32, 7: LENGTH})
    shape = _message(_embedded(fields, 2), {2: LENGTH, 3: VARINT})
    if _number(shape, 3):
        raise Corrupt("its shape is of unknown rank")
    dims = shape.get(2, [])
    if len(dims) > MAX_RANK:
        raise Corrupt(f"its shape has {len(dims)} dimensions")
    sizes = []
    for dim in dims:
        assert isinstance(dim, bytes)
        sizes.append(_signed(_number(_message(dim, {1: VARINT}), 1)))
    if any(size < 0 for size in sizes):
        raise Corrupt(f"its shape {sizes} has a negative dimension")
    dtype = _number(fields, 1)
    return BundleEntry(
        dtype=DATA_TYPES.get(dtype, f"DataType {dtype}"),
        shape=tuple(sizes),
        shard=_signed(_number(fields, 3)),
        offset=_signed(_number(fields, 4)),
        size=_signed(_number(fields, 5)),
        crc32c=_number(fields, 6),
        sliced=7 in fields,
    )


def _shard_count(index: Path, header: bytes) -> int:
    """The number of data files a BundleHeaderProto names, its byte order and version checked."""
    fields = _message(header, {1: VARINT, 2: VARINT, 3: LENGTH})
    version = _message(_embedded(fields, 3), {1: VARINT, 2: VARINT, 3: PACKED})
    if _number(fields, 2) != 0:  # Endianness LITTLE
        raise BadInput(f"{index} was written on a big-endian machine; rnnconv reads little-endian checkpoints only")
    producer, min_consumer = _signed(_number(version, 1)), _signed(_number(version, 2))
    if producer < 0 or min_consumer > BUNDLE_VERSION or BUNDLE_VERSION in version.get(3, []):
        raise BadInput(
            f"{index} is a checkpoint of format version {producer} that readers of version {BUNDLE_VERSION} "
            f"(TensorFlow's and rnnconv's) may not read (it asks for >= {min_consumer})"
        )
    shards = _signed(_number(fields, 1))
    if not 1 <= shards <= SHARD_LIMIT:
        raise BadInput(f"{index} claims {shards} data files")
    return shards


def _data_files(index: Path, table: list[tuple[bytes, bytes]]) -> list[Path]:
    """The data files the bundle header (the index's first entry) names: X.data-00000-of-00002, ..."""
    if not table or table[0][0] != b"":
        raise BadInput(f"{index} is not a readable TensorFlow checkpoint: it has no bundle header")
    try:
        count = _shard_count(index, table[0][1])
    except Corrupt as exc:
        raise BadInput(f"{index} is not a readable TensorFlow checkpoint: its header is damaged ({exc})") from None
    prefix = checkpoint_prefix(index)
    return [prefix.with_name(f"{prefix.name}.data-{k:05d}-of-{count:05d}") for k in range(count)]


def data_files(path: Path) -> list[Path]:
    """The data files of the checkpoint `path` names (its index, a data file or its prefix)."""
    index = index_file(path)
    return _data_files(index, read_table(index))


@dataclass
class Checkpoint:
    """A checkpoint's tensors (names, dtypes, shapes) from its index; values read from its data files."""

    index: Path
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    entries: dict[str, BundleEntry] = field(repr=False)
    shards: list[Path] = field(repr=False)
    checks: dict[str, Guard] = field(default_factory=dict, repr=False)  # crc32c checks of the tensors read

    @classmethod
    def open(cls, path: Path) -> Checkpoint:
        index = index_file(path)
        table = read_table(index)
        shards = _data_files(index, table)
        for shard in shards:
            if not shard.exists():
                raise BadInput(
                    f"the checkpoint {checkpoint_prefix(index)} has no data file ({shard.name} is missing beside its "
                    f"index)"
                )
        sizes = [regular_file(shard, "the checkpoint's data file") for shard in shards]
        for shard in shards:  # part of the source: one that changes from here on commits nothing either
            add_guard(unchanged(shard))
        entries = {}
        for key, value in table[1:]:
            if key.startswith(b"\x00"):  # a slice of a partitioned variable (EncodeTensorNameSlice), not listed
                continue
            try:
                name = key.decode()
            except UnicodeDecodeError:
                raise BadInput(
                    f"{index} is not a readable TensorFlow checkpoint: the name {key!r} is not UTF-8"
                ) from None
            try:
                entries[name] = entry = _entry(value)
            except Corrupt as exc:
                raise BadInput(f"{index} is not a readable TensorFlow checkpoint: tensor {name!r}: {exc}") from None
            if not entry.sliced:
                _check_place(index, name, entry, shards, sizes)
        shapes = {name: entry.shape for name, entry in entries.items()}
        dtypes = {name: entry.dtype for name, entry in entries.items()}
        return cls(index, shapes, dtypes, entries, shards)

    def tensor(self, name: str) -> np.ndarray:
        """One tensor's values, read from its data file (bfloat16 widened to float32 exactly); its crc32c is
        computed in the background the first time, and outputs are committed only if it matches."""
        entry = self.entries.get(name)
        if entry is None or entry.dtype not in ELEMENT_TYPE_CODES:
            dtype = entry.dtype if entry else None
            raise BadInput(f"{self.index}: tensor {name!r} is {dtype}, not a float type rnnconv reads")
        if entry.sliced:
            raise BadInput(
                f"{self.index}: tensor {name!r} is saved in slices (a partitioned variable); rnnconv reads whole "
                f"tensors only"
            )
        etype = element_type(entry.dtype)
        shard = self.shards[entry.shard]
        if name not in self.checks:
            damaged = f"{self.index}: tensor {name!r} does not match its crc32c (damaged); nothing was written"
            crc = unmasked(entry.crc32c)
            check = checksum_guard(shard, entry.offset, entry.size, google_crc32c.extend, crc, damaged)
            self.checks[name] = check
            add_guard(check)
        words = read_array(shard, entry.offset, etype.storage, entry.shape)  # a shorter file: SourceChanged
        return decode(words, etype)

    def string(self, name: str, limit: int) -> bytes | None:
        """A scalar string tensor's bytes (a TF2 checkpoint's object graph), its crc32c checked at once; None where
        the checkpoint has no such tensor. The bundle stores it as its length (a varint), that length's masked
        crc32c, then the bytes; the entry's crc32c covers all of them."""
        entry = self.entries.get(name)
        if entry is None:
            return None
        what = f"{self.index}: tensor {name!r}"
        if entry.dtype != "string" or entry.shape or entry.sliced:
            raise BadInput(f"{what} is {entry.dtype} of shape {list(entry.shape)}, not the string TensorFlow writes")
        if entry.size > limit:
            raise BadInput(f"{what} claims {entry.size} bytes, more than {limit}, more than any object graph needs")
        data = read_array(self.shards[entry.shard], entry.offset, np.uint8, (entry.size,)).tobytes()
        try:
            length, pos = _varint(data, 0, len(data))
        except Corrupt as exc:
            raise BadInput(f"{what} is damaged ({exc})") from None
        if pos + 4 + length != len(data):
            raise BadInput(f"{what} holds {len(data)} bytes, not the {length} its length says and their checksum")
        # WriteStringTensor's checksum: the length as a 4-byte word (8 past 4 GiB), its masked crc32c, the bytes
        size = length.to_bytes(4 if length < 1 << 32 else 8, "little")
        sized = google_crc32c.value(size)
        crc = google_crc32c.extend(sized, data[pos : pos + 4])
        stored_sized = int.from_bytes(data[pos : pos + 4], "little")
        if stored_sized != masked_crc32c(size) or google_crc32c.extend(crc, data[pos + 4 :]) != unmasked(entry.crc32c):
            raise BadInput(f"{what} does not match its crc32c (damaged)")
        return data[pos + 4 :]

    def check_read(self) -> None:
        """Wait for the crc32c checks of every tensor read so far: BadInput if one does not match."""
        for check in self.checks.values():
            check()


def _check_place(index: Path, name: str, entry: BundleEntry, shards: list[Path], sizes: list[int]) -> None:
    """A whole tensor's bytes lie in one of the data files, as many as its dtype and shape need."""
    if not 0 <= entry.shard < len(shards):
        raise BadInput(f"{index}: tensor {name!r} names data file {entry.shard}, of {len(shards)}")
    if entry.offset < 0 or entry.size < 0 or entry.offset + entry.size > sizes[entry.shard]:
        raise BadInput(
            f"{index}: tensor {name!r} claims {entry.size} bytes at byte {entry.offset} of "
            f"{shards[entry.shard].name}, more than its data files hold ({sizes[entry.shard]} bytes)"
        )
    if entry.dtype in ELEMENT_TYPE_CODES:
        needed = math.prod(entry.shape) * element_type(entry.dtype).itemsize
        if entry.size != needed:
            raise BadInput(
                f"{index}: tensor {name!r} claims {entry.size} bytes, but {entry.dtype} of shape "
                f"{list(entry.shape)} is {needed}"
            )
