"""A flatbuffer file read without the flatbuffers package: every offset, vector and buffer checked to lie inside the
file (the generated readers follow offsets unchecked, so a hostile file would read anywhere), a block at a time. What
TFLite models and ExecuTorch programs are read with, each naming itself in the sentence that refuses a damaged file."""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import read_array

MAX_COUNT = 1 << 18  # tensors, ops or buffers in one file: far beyond any RNN model; keeps a hostile count small


class Flat:
    """A flatbuffer file's bytes, read (never mapped: a file cut short meanwhile must not kill the process) a block at
    a time as the parser asks for them, every position checked against the file's size (BadInput otherwise)."""

    BLOCK = 1 << 16

    def __init__(self, path: Path, size: int, data: bytes | None = None, what: str = "flatbuffer"):
        self.path, self.size, self.data = path, size, data  # data: the whole file, given (tests, small files)
        self.what = what  # what the file is, as a refusal names it ("TFLite model")
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def damaged(self, why: str) -> BadInput:
        return BadInput(f"{self.path} is not a readable {self.what}: {why}")

    def _block(self, index: int) -> bytes:
        if index in self._blocks:
            self._blocks.move_to_end(index)
            return self._blocks[index]
        start = index * self.BLOCK
        block = read_array(self.path, start, np.uint8, (min(self.BLOCK, self.size - start),)).tobytes()
        self._blocks[index] = block
        if len(self._blocks) > 256:  # 16 MiB at most, whatever a hostile file makes the parser visit
            self._blocks.popitem(last=False)
        return block

    def read(self, pos: int, length: int) -> bytes:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.damaged("an offset points outside the file")
        if self.data is not None:
            return self.data[pos : pos + length]
        first, last = pos // self.BLOCK, (pos + length - 1) // self.BLOCK
        if length == 0:
            return b""
        if first == last:
            offset = pos - first * self.BLOCK
            return self._block(first)[offset : offset + length]
        return read_array(self.path, pos, np.uint8, (length,)).tobytes()

    def _at(self, fmt: str, pos: int) -> Any:
        return struct.unpack(fmt, self.read(pos, struct.calcsize(fmt)))[0]

    def u8(self, pos: int) -> int:
        return int(self._at("<B", pos))

    def u16(self, pos: int) -> int:
        return int(self._at("<H", pos))

    def i32(self, pos: int) -> int:
        return int(self._at("<i", pos))

    def u32(self, pos: int) -> int:
        return int(self._at("<I", pos))

    def u64(self, pos: int) -> int:
        return int(self._at("<Q", pos))

    def f32(self, pos: int) -> float:
        return float(self._at("<f", pos))

    def table(self, pos: int) -> Table:
        vtable = pos - self.i32(pos)
        length = self.u16(vtable)
        if length < 4 or length % 2:
            raise self.damaged("a table's vtable is damaged")
        return Table(self, pos, vtable, length)

    def root(self) -> Table:
        return self.table(self.u32(0))

    def vector(self, pos: int, width: int) -> tuple[int, int]:
        """(first element's position, count) of the vector at pos, every element inside the file."""
        count = self.u32(pos)
        if pos + 4 + count * width > self.size:
            raise self.damaged("a vector runs past the end of the file")
        return pos + 4, count


@dataclass(frozen=True)
class Table:
    flat: Flat
    pos: int
    vtable: int
    vtable_length: int

    def _field(self, slot: int) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > self.vtable_length:
            return None
        offset = self.flat.u16(self.vtable + entry)
        return None if offset == 0 else self.pos + offset

    def scalar(self, slot: int, kind: str, default: Any) -> Any:
        pos = self._field(slot)
        return default if pos is None else getattr(self.flat, kind)(pos)

    def _target(self, slot: int) -> int | None:
        pos = self._field(slot)
        return None if pos is None else pos + self.flat.u32(pos)

    def table(self, slot: int) -> Table | None:
        target = self._target(slot)
        return None if target is None else self.flat.table(target)

    def tables(self, slot: int) -> list[Table]:
        target = self._target(slot)
        if target is None:
            return []
        start, count = self.flat.vector(target, 4)
        if count > MAX_COUNT:
            raise self.flat.damaged(f"it claims {count} entries in a table")
        return [self.flat.table(start + 4 * i + self.flat.u32(start + 4 * i)) for i in range(count)]

    def ints(self, slot: int) -> list[int] | None:
        target = self._target(slot)
        if target is None:
            return None
        start, count = self.flat.vector(target, 4)
        if count > MAX_COUNT:
            raise self.flat.damaged(f"it claims {count} entries in a list")
        return [self.flat.i32(start + 4 * i) for i in range(count)]

    def u64s(self, slot: int) -> list[int] | None:
        target = self._target(slot)
        if target is None:
            return None
        start, count = self.flat.vector(target, 8)
        if count > MAX_COUNT:
            raise self.flat.damaged(f"it claims {count} entries in a list")
        return [self.flat.u64(start + 8 * i) for i in range(count)]

    def numbers(self, slot: int, dtype: str) -> np.ndarray | None:
        """A vector of scalars of numpy type `dtype` ("<f4", "<i8", ...), read at once."""
        target = self._target(slot)
        if target is None:
            return None
        width = np.dtype(dtype).itemsize
        start, count = self.flat.vector(target, width)
        if count > MAX_COUNT:
            raise self.flat.damaged(f"it claims {count} entries in a list")
        return np.frombuffer(self.flat.read(start, width * count), dtype)

    def bytes_at(self, slot: int) -> tuple[int, int] | None:
        """(position, length) of a [ubyte] vector."""
        target = self._target(slot)
        return None if target is None else self.flat.vector(target, 1)

    def string(self, slot: int) -> str:
        found = self.bytes_at(slot)
        if found is None:
            return ""
        start, length = found
        return self.flat.read(start, min(length, 4096)).decode("utf-8", "replace")
