"""A source file looked at once, for sniffing: what every format's `wire.sniff` is given (its first bytes, its zip
listing or safetensors header when asked). Light: sniffing imports no format's `format` module, reader or framework."""

from __future__ import annotations

import json
import struct
import zipfile
from functools import cached_property
from pathlib import Path
from typing import Any

from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import regular_file

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"
SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024


class Unrecognized(BadInput):
    """A readable file that none of the formats recognises."""


class Damaged(BadInput):
    """A file too damaged for any format to be of it, whatever its name says: every command tells it in these
    words (a reader that a command expects is not asked to explain it in its own)."""


def unreadable_zip(path: Path) -> Damaged:
    return Damaged(f"{path} looks like a zip archive but cannot be read (truncated or corrupt)")


class Probe:
    """A source file, looked at once: its first bytes, and (when asked) its zip listing or safetensors header."""

    def __init__(self, path: Path):
        self.path = path
        self.size = regular_file(path)
        if self.size == 0:
            raise Damaged(f"{path} is empty (0 bytes)")
        try:
            with open(path, "rb") as f:
                self.head = f.read(32)
        except OSError as exc:
            raise BadInput(f"cannot read {path}: {exc.strerror}") from None

    @cached_property
    def zip_names(self) -> list[str] | None:
        """The member names of a zip archive, or None when the file is no zip."""
        if not self.head.startswith(ZIP_MAGIC):
            return None
        try:
            with zipfile.ZipFile(self.path) as archive:
                return archive.namelist()
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError, ValueError, NotImplementedError, EOFError):
            raise unreadable_zip(self.path) from None

    @cached_property
    def safetensors_metadata(self) -> dict[str, Any] | None:
        """The `__metadata__` of a safetensors file ({} when it has none), or None when the file is no safetensors."""
        if len(self.head) < 9 or self.head[8:9] != b"{":
            return None
        (length,) = struct.unpack("<Q", self.head[:8])
        if length > min(self.size - 8, SAFETENSORS_HEADER_LIMIT):
            return None
        with open(self.path, "rb") as f:
            f.seek(8)
            try:
                header = json.loads(f.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                return None
        if not isinstance(header, dict):
            return None
        meta = header.get("__metadata__", {})
        return meta if isinstance(meta, dict) else {}


def is_msgpack_map(head: bytes) -> bool:
    """Whether bytes begin a msgpack map of 1 to 15 entries (fixmap), as a Flax tree of an RNN does."""
    return len(head) > 2 and 0x81 <= head[0] <= 0x8F
