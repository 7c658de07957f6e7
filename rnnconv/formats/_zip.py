"""Zip archives a format is stored in (`.keras`, `torch.save`'s checkpoints): members checked before use.

A member must use a compression its writer uses, lie inside the archive, and be no compression bomb; a
stored member is read in place (its data start comes from its local header, checked).
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Any

from rnnconv.errors import BadInput, first_line
from rnnconv.formats.probe import ZIP_MAGIC, unreadable_zip
from rnnconv.safeio.digests import SourcePass, checksum_guard
from rnnconv.safeio.inputs import Guard

COMPRESSIONS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
MAX_INFLATION, SMALL_MEMBER = 100, 16 << 20  # a member may inflate 100-fold, or to 16 MiB: beyond that, a bomb
ENCRYPTED = 0x1  # general-purpose flag bit 0
LOCAL_HEADER = 30  # bytes of a local file header before its name and extra field
# What zipfile raises on a damaged archive or member (RuntimeError: a member marked encrypted).
ZIP_ERRORS = (
    zipfile.BadZipFile,
    OSError,
    EOFError,
    zlib.error,
    NotImplementedError,
    ValueError,
    UnicodeDecodeError,
    RuntimeError,
)


def open_archive(path: Path) -> zipfile.ZipFile:
    """The archive, or the sentence every command says of a zip that cannot be read (not zipfile's own words)."""
    try:
        return zipfile.ZipFile(path)
    except ZIP_ERRORS:
        raise unreadable_zip(path) from None


def check_member(path: Path, info: zipfile.ZipInfo, archive_size: int, writer: str) -> None:
    """A member must be stored or deflated, not encrypted, inside the archive, and no compression bomb."""
    if info.flag_bits & ENCRYPTED:
        raise BadInput(f"{path}: member {info.filename!r} is encrypted, which {writer} never does")
    if info.compress_type not in COMPRESSIONS:
        raise BadInput(
            f"{path}: member {info.filename!r} uses compression method {info.compress_type}, which {writer} "
            f"never writes"
        )
    if info.header_offset + info.compress_size > archive_size:
        raise BadInput(f"{path}: member {info.filename!r} claims more bytes than the archive holds")
    if info.file_size > max(MAX_INFLATION * info.compress_size, SMALL_MEMBER):
        raise BadInput(
            f"{path}: member {info.filename!r} would inflate from {info.compress_size} to "
            f"{info.file_size} bytes (a compression bomb)"
        )


def read_member(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    """A member's bytes; zipfile checks its size and CRC-32 as it reads."""
    try:
        return archive.read(name)
    except ZIP_ERRORS as exc:
        raise BadInput(f"{path}: member {name!r} cannot be read ({first_line(exc)})") from None


def crc_guard(path: Path, info: zipfile.ZipInfo, start: int, reading: SourcePass | None = None) -> Guard:
    """A check, computed in the background, that a stored member read in place (`stored_start`) holds the bytes its
    CRC-32 was made of: zipfile checks that only for what it reads itself. Computed by the source's own read
    (`reading`, for its digest) where that has not begun, else by a read of its own."""
    damaged = f"{path}: the zip entry {info.filename} does not match its CRC-32 (damaged); nothing was written"
    in_pass = None if reading is None else reading.checksum(start, info.file_size, _crc32, info.CRC, damaged)
    return in_pass or checksum_guard(path, start, info.file_size, _crc32, info.CRC, damaged)


def _crc32(value: int, chunk: Any) -> int:
    return zlib.crc32(chunk, value)


def stored_start(path: Path, info: zipfile.ZipInfo, archive_size: int) -> int:
    """Where a stored member's bytes begin in the archive file, its local header checked."""
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(LOCAL_HEADER)
    if len(local) < LOCAL_HEADER or local[:4] != ZIP_MAGIC:
        raise BadInput(f"{path}: the zip entry {info.filename} is corrupt")
    name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
    start = info.header_offset + LOCAL_HEADER + name_len + extra_len
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise BadInput(f"{path}: the zip entry {info.filename} is compressed where it must be stored")
    if start + info.file_size > archive_size:
        raise BadInput(f"{path}: the zip entry {info.filename} claims more bytes than the archive holds")
    return start
