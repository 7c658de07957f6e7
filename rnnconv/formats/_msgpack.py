"""The msgpack that `flax.serialization` writes, read and written with `msgpack` (Flax's own dependency), without
Flax or JAX.

`flax.serialization.to_bytes` / `msgpack_serialize` pack a tree of dicts whose leaves are arrays; an array is a
msgpack extension of type 1 whose payload is itself msgpack: `(shape, dtype name, C-order bytes)` (type 3: a
numpy scalar, packed the same way). Arrays over 2**30 bytes are split into a chunked dict
(`__msgpack_chunked_array__`). Read from untrusted bytes: msgpack bounds every length by what the data holds, an
array's payload may hold no extension (so extensions cannot nest), the tree may nest MAX_DEPTH levels, a map may
not repeat a key, an array's byte count must equal its shape times its element size, and only the element types
rnnconv reads are accepted. Written as `flax.serialization.to_bytes` writes the same tree, byte for byte (maps in
the tree's order: the writers build them in the order Flax's `init` does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from rnnconv.errors import BadInput, cut

EXT_NDARRAY, EXT_SCALAR = 1, 3  # flax.serialization._MsgpackExtType
CHUNKED = "__msgpack_chunked_array__"
MAX_CHUNK_BYTES = 2**30  # flax.serialization.MAX_CHUNK_SIZE
MAX_DEPTH = 64
MAX_DIMS = 32
# The element types a Flax array may have here (numpy's names, as flax records them); bfloat16 as uint16 words.
ARRAY_TYPES = {"float16": "<f2", "float32": "<f4", "float64": "<f8", "bfloat16": "<u2"}
LEAVES = (np.ndarray, str, bytes, int, float, type(None))  # what a tree's leaves may be (bool is an int)


class Bfloat16Words(np.ndarray):
    """A bfloat16 array as its uint16 words (numpy has no bfloat16): the marker that the words are bfloat16."""


# --- decoding ---------------------------------------------------------------------------------------------------


def _unpacked(data: bytes | memoryview, what: str, extension: Any) -> Any:
    """One msgpack value that is all of `data`, its maps checked (`_map`) and its extensions given to `extension`."""
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,  # integer keys too (an nnx tree's list indices); `_map` checks them
            object_pairs_hook=lambda pairs: _map(pairs, what),
            ext_hook=extension,
            timestamp=0,
        )
    except msgpack.ExtraData as exc:
        raise BadInput(f"{what} has {len(exc.extra)} bytes after its msgpack value") from None
    except msgpack.StackError:
        raise BadInput(f"{what} nests more than {MAX_DEPTH} levels deep: no Flax RNN's tree does") from None
    except UnicodeDecodeError:
        raise BadInput(f"{what} holds a string that is not UTF-8") from None
    except (ValueError, TypeError, OverflowError):  # msgpack's FormatError, incomplete input, a bad timestamp
        raise BadInput(f"{what} is truncated or not msgpack") from None


def _map(pairs: list[tuple[Any, Any]], what: str) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise BadInput(f"{what} has a map key of type {type(key).__name__}: Flax trees have str keys")
        if key in out:
            raise BadInput(f"{what} repeats the key {cut(key)!r} in one map")
        out[key] = value
    return out


def _no_extension(code: int, data: bytes) -> Any:
    raise _Refused(
        "an array whose (shape, dtype, bytes) nests a msgpack extension, which flax.serialization never writes"
    )


class _Refused(Exception):
    """What an extension hook refuses (msgpack would report a BadInput raised there as its own error)."""


def _array(code: int, payload: bytes, what: str) -> np.ndarray:
    """An array of flax's encoding (extension type 1 or 3): msgpack (shape, dtype name, bytes)."""
    if code not in (EXT_NDARRAY, EXT_SCALAR):
        raise _Refused(f"a msgpack extension of type {code}, which Flax writes for no array")
    parts = _unpacked(payload, what, _no_extension)
    if (
        not isinstance(parts, list)
        or len(parts) != 3
        or not isinstance(parts[0], list)
        or not isinstance(parts[2], bytes)
    ):
        raise _Refused("an array that is not (shape, dtype, bytes) as flax.serialization writes one")
    shape, name, buffer = parts
    name = name.decode("ascii", "replace") if isinstance(name, bytes) else name
    if len(shape) > MAX_DIMS or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise _Refused(f"an array of shape {cut(shape)}")
    if name not in ARRAY_TYPES:
        raise _Refused(f"an array of type {cut(name)!r}; rnnconv reads {', '.join(ARRAY_TYPES)}")
    dtype = np.dtype(ARRAY_TYPES[name])
    if math.prod(shape) * dtype.itemsize != len(buffer):
        raise _Refused(f"a {name} array of shape {tuple(shape)} in {len(buffer)} bytes")
    values = np.frombuffer(buffer, dtype=dtype).reshape(shape)
    return values.view(Bfloat16Words) if name == "bfloat16" else values


def _check_tree(tree: Any, what: str) -> None:
    """The tree's dicts and lists nest at most MAX_DEPTH levels and its leaves are values Flax writes (walked without
    recursion: the tree is untrusted)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise BadInput(f"{what} nests more than {MAX_DEPTH} levels deep: no Flax RNN's tree does")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
        elif not isinstance(node, LEAVES):
            raise BadInput(f"{what} holds a msgpack {type(node).__name__}, which Flax writes for no value")


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
            raise BadInput(f"{what} holds a chunked array whose chunks do not fill its shape {cut(dims)}")
        joined = np.concatenate(parts).reshape(dims)
        return joined.view(type(parts[0])) if isinstance(parts[0], Bfloat16Words) else joined
    return {key: _unchunked(value, what) for key, value in tree.items()}


def loads(data: bytes, what: str) -> Any:
    """The tree of a flax msgpack file (dicts, lists, numbers, strings, numpy arrays), checked as it is read."""
    try:
        tree = _unpacked(data, what, lambda code, payload: _array(code, payload, what))
    except _Refused as exc:
        raise BadInput(f"{what} holds {exc}") from None
    _check_tree(tree, what)
    return _unchunked(tree, what)


# --- encoding ---------------------------------------------------------------------------------------------------


def _extension(value: Any) -> msgpack.ExtType:
    """An array as flax.serialization packs one (`_ndarray_to_bytes`): (shape, dtype name, C-order bytes)."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"cannot pack a {type(value).__name__}")
    name = "bfloat16" if isinstance(value, Bfloat16Words) else value.dtype.name
    contiguous = np.ascontiguousarray(value, dtype=np.dtype(ARRAY_TYPES[name]))
    return msgpack.ExtType(EXT_NDARRAY, msgpack.packb((contiguous.shape, name, contiguous.tobytes())))


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
    return msgpack.packb(_chunked(tree), default=_extension)
