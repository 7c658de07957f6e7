"""The msgpack that `flax.serialization` writes, read and written without msgpack, Flax or JAX.

`flax.serialization.to_bytes` / `msgpack_serialize` pack a tree of dicts whose leaves are arrays; an array is a
msgpack extension of type 1 whose payload is itself msgpack: `(shape, dtype name, C-order bytes)` (type 3: a
numpy scalar, packed the same way). Arrays over 2**30 bytes are split into a chunked dict
(`__msgpack_chunked_array__`). Only that subset is decoded, from untrusted bytes: every length is checked against
what is left, nesting is bounded, an array's byte count must equal its shape times its element size, and only
the element types rnnconv reads are accepted. The encoder writes what `flax.serialization.to_bytes` writes for
the same tree, byte for byte (maps in the tree's order: the writers build them in the order Flax's `init` does).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from rnnconv.errors import BadInput

EXT_NDARRAY, EXT_SCALAR = 1, 3  # flax.serialization._MsgpackExtType
CHUNKED = "__msgpack_chunked_array__"
MAX_CHUNK_BYTES = 2**30  # flax.serialization.MAX_CHUNK_SIZE
MAX_DEPTH = 64
MAX_DIMS = 32
# The element types a Flax array may have here (numpy's names, as flax records them); bfloat16 as uint16 words.
ARRAY_TYPES = {"float16": "<f2", "float32": "<f4", "float64": "<f8", "bfloat16": "<u2"}
_FIX = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}  # fixext 1..16


class Bfloat16Words(np.ndarray):
    """A bfloat16 array as its uint16 words (numpy has no bfloat16): the marker that the words are bfloat16."""


# --- decoding ---------------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | memoryview, what: str):
        self.data, self.pos, self.what = memoryview(data), 0, what

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise BadInput(f"{self.what} is truncated or not msgpack (a value runs past its end)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def number(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, n: int, least: int) -> int:
        """A container's count, possible only if that many values of `least` bytes each are left."""
        if n * least > len(self.data) - self.pos:
            raise BadInput(f"{self.what} is truncated or not msgpack (a container claims {n} values)")
        return n

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise BadInput(f"{self.what} nests more than {MAX_DEPTH} levels deep: no Flax RNN's tree does")
        code = self.take(1)[0]
        if code <= 0x7F:
            return code
        if code >= 0xE0:
            return code - 0x100
        if 0x80 <= code <= 0x8F:
            return self.map(code & 0x0F, depth)
        if 0x90 <= code <= 0x9F:
            return self.array(code & 0x0F, depth)
        if 0xA0 <= code <= 0xBF:
            return self.text(code & 0x1F)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if code in simple:
            return simple[code]
        sized = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}
        if code in sized:
            return bytes(self.take(self.number(sized[code])))
        ext = {0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}
        if code in ext:
            n = self.number(ext[code])
            return self.extension(self.number(">b"), n)
        fixext = {v: k for k, v in _FIX.items()}
        if code in fixext:
            return self.extension(self.number(">b"), fixext[code])
        numbers = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q"}
        numbers |= {0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if code in numbers:
            return self.number(numbers[code])
        texts = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
        if code in texts:
            return self.text(self.number(texts[code]))
        if code in (0xDC, 0xDD):
            return self.array(self.number(">H" if code == 0xDC else ">I"), depth)
        if code in (0xDE, 0xDF):
            return self.map(self.number(">H" if code == 0xDE else ">I"), depth)
        raise BadInput(f"{self.what} is not msgpack (byte 0x{code:02x} at offset {self.pos - 1})")

    def text(self, n: int) -> str:
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{self.what} holds a string that is not UTF-8") from None

    def array(self, n: int, depth: int) -> list[Any]:
        return [self.value(depth + 1) for _ in range(self.count(n, 1))]

    def map(self, n: int, depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for _ in range(self.count(n, 2)):
            key = self.value(depth + 1)
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise BadInput(f"{self.what} has a map key of type {type(key).__name__}: Flax trees have str keys")
            if key in out:
                raise BadInput(f"{self.what} repeats the key {key!r} in one map")
            out[key] = self.value(depth + 1)
        return out

    def extension(self, kind: int, n: int) -> np.ndarray:
        payload = self.take(n)
        if kind not in (EXT_NDARRAY, EXT_SCALAR):
            raise BadInput(f"{self.what} holds a msgpack extension of type {kind}, which Flax writes for no array")
        return _array(payload, self.what)


def _array(payload: memoryview, what: str) -> np.ndarray:
    """An array of flax's encoding: msgpack (shape, dtype name, bytes)."""
    inner = _Reader(payload, what)
    parts = inner.value(MAX_DEPTH - 2)
    if (
        not isinstance(parts, list)
        or len(parts) != 3
        or not isinstance(parts[0], list)
        or not isinstance(parts[2], bytes)
        or inner.pos != len(payload)
    ):
        raise BadInput(f"{what} holds an array that is not (shape, dtype, bytes) as flax.serialization writes one")
    shape, name, buffer = parts
    name = name.decode("ascii", "replace") if isinstance(name, bytes) else name
    if len(shape) > MAX_DIMS or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise BadInput(f"{what} holds an array of shape {shape!r}")
    if name not in ARRAY_TYPES:
        raise BadInput(f"{what} holds an array of type {name!r}; rnnconv reads {', '.join(ARRAY_TYPES)}")
    dtype = np.dtype(ARRAY_TYPES[name])
    if math.prod(shape) * dtype.itemsize != len(buffer):
        raise BadInput(f"{what} holds a {name} array of shape {tuple(shape)} in {len(buffer)} bytes")
    values = np.frombuffer(buffer, dtype=dtype).reshape(shape)
    return values.view(Bfloat16Words) if name == "bfloat16" else values


def _unchunked(tree: Any, what: str) -> Any:
    """flax's chunked arrays (over 2**30 bytes) joined again."""
    if not isinstance(tree, dict):
        return tree
    if tree.get(CHUNKED) is True:
        shape, chunks = tree.get("shape"), tree.get("chunks")
        if not isinstance(shape, dict) or not isinstance(chunks, dict):
            raise BadInput(f"{what} holds a chunked array without its shape or chunks")
        try:
            dims = [shape[str(i)] for i in range(len(shape))]
            parts = [chunks[str(i)] for i in range(len(chunks))]
        except KeyError:
            raise BadInput(f"{what} holds a chunked array whose parts are not numbered 0, 1, ...") from None
        if not parts or not all(isinstance(p, np.ndarray) and p.ndim == 1 for p in parts):
            raise BadInput(f"{what} holds a chunked array whose chunks are not flat arrays")
        if len({p.dtype for p in parts}) != 1 or len({type(p) for p in parts}) != 1:
            raise BadInput(f"{what} holds a chunked array whose chunks differ in type")
        if not all(isinstance(n, int) and n >= 0 for n in dims) or math.prod(dims) != sum(p.size for p in parts):
            raise BadInput(f"{what} holds a chunked array whose chunks do not fill its shape {dims}")
        joined = np.concatenate(parts).reshape(dims)
        return joined.view(type(parts[0])) if isinstance(parts[0], Bfloat16Words) else joined
    return {key: _unchunked(value, what) for key, value in tree.items()}


def loads(data: bytes, what: str) -> Any:
    """The tree of a flax msgpack file (dicts, lists, numbers, strings, numpy arrays), checked as it is read."""
    reader = _Reader(data, what)
    tree = reader.value()
    if reader.pos != len(reader.data):
        raise BadInput(f"{what} has {len(reader.data) - reader.pos} bytes after its msgpack value")
    return _unchunked(tree, what)


# --- encoding ---------------------------------------------------------------------------------------------------


def _head(n: int, fix: int | None, fix_limit: int, codes: tuple[int, int, int]) -> bytes:
    if fix is not None and n < fix_limit:
        return bytes([fix | n])
    for code, fmt in zip(codes, (">B", ">H", ">I")):
        if code and n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([code]) + struct.pack(fmt, n)
    raise ValueError(f"{n} is too long for msgpack")


def _pack(value: Any, out: list[bytes]) -> None:
    if isinstance(value, np.ndarray):
        name = "bfloat16" if isinstance(value, Bfloat16Words) else value.dtype.name
        contiguous = np.ascontiguousarray(value, dtype=np.dtype(ARRAY_TYPES[name]))
        inner: list[bytes] = [b"\x93"]
        _pack(list(contiguous.shape), inner)
        _pack(name, inner)
        raw = contiguous.tobytes()
        inner += [_head(len(raw), None, 0, (0xC4, 0xC5, 0xC6)), raw]
        payload = b"".join(inner)
        head = bytes([_FIX[len(payload)]]) if len(payload) in _FIX else _head(len(payload), None, 0, (0xC7, 0xC8, 0xC9))
        out += [head, bytes([EXT_NDARRAY]), payload]
    elif isinstance(value, Mapping):
        out.append(_head(len(value), 0x80, 16, (0, 0xDE, 0xDF)))
        for key in value:
            _pack(key, out)
            _pack(value[key], out)
    elif isinstance(value, (list, tuple)):
        out.append(_head(len(value), 0x90, 16, (0, 0xDC, 0xDD)))
        for item in value:
            _pack(item, out)
    elif isinstance(value, bool):
        out.append(b"\xc3" if value else b"\xc2")
    elif isinstance(value, int):
        if 0 <= value < 128:
            out.append(bytes([value]))
        else:
            fmt, code = next((f, c) for f, c in ((">B", 0xCC), (">H", 0xCD), (">I", 0xCE), (">Q", 0xCF))
                             if value < 1 << (8 * struct.calcsize(f)))  # fmt: skip
            out.append(bytes([code]) + struct.pack(fmt, value))
    elif isinstance(value, str):
        raw = value.encode()
        out += [_head(len(raw), 0xA0, 32, (0xD9, 0xDA, 0xDB)), raw]
    else:
        raise TypeError(f"cannot pack a {type(value).__name__}")


def _chunked(tree: Any) -> Any:
    """Arrays over 2**30 bytes as flax's chunked dicts (what to_bytes writes for them)."""
    if isinstance(tree, Mapping):
        return {key: _chunked(value) for key, value in tree.items()}
    if isinstance(tree, np.ndarray) and tree.nbytes > MAX_CHUNK_BYTES:
        flat = tree.reshape(-1)
        size = max(1, MAX_CHUNK_BYTES // tree.dtype.itemsize)
        chunks = [flat[i : i + size] for i in range(0, flat.size, size)]
        return {
            CHUNKED: True,
            "shape": {str(i): n for i, n in enumerate(tree.shape)},
            "chunks": {str(i): c for i, c in enumerate(chunks)},
        }
    return tree


def dumps(tree: Mapping[Any, Any]) -> bytes:
    """The bytes flax.serialization.msgpack_serialize writes for a tree of dicts with numpy leaves."""
    out: list[bytes] = []
    _pack(_chunked(tree), out)
    return b"".join(out)
