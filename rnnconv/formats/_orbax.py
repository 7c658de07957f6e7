"""Orbax checkpoints (`StandardCheckpointer`, `PyTreeCheckpointer`, a `CheckpointManager`'s steps): the tree of a
Flax model's arrays, read as a tree of numpy arrays for the Flax formats' readers, without JAX or Orbax.

A checkpoint is a directory: `_METADATA` (JSON: each leaf's key path and value type), `_CHECKPOINT_METADATA`,
and the arrays, each a zarr (v2) array named by its key path joined with dots, either in an OCDBT key-value store
(`manifest.ocdbt`, `ocdbt.process_*/`, data files under `d/`: Orbax's default) or as a folder of chunk files each
(`use_ocdbt=False`). Every part of that storage is zstd-compressed (OCDBT's manifests and b-tree nodes, the zarr
chunks): Python before 3.14 has no zstd and rnnconv depends on no decompressor, so the storage is read by
TensorStore (Orbax's own reader, `pip install 'rnnconv[orbax]'`), given only what rnnconv checked first: a
directory of regular files and folders alone (a symbolic link anywhere is refused, so nothing leads outside it;
TensorStore's file store refuses keys with `..` besides), its sizes and counts bounded, each array's zarr
metadata read and checked here (its shape that of `_METADATA`, an element type rnnconv reads, its chunks counted)
before TensorStore reads its values, in a bounded time, and every file unchanged from first look to last.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from rnnconv.core.dtypes import ELEMENT_TYPES
from rnnconv.errors import BackendMissing, BadInput, cut
from rnnconv.formats._msgpack import Bfloat16Words
from rnnconv.formats.flax.wire import ORBAX_METADATA as METADATA
from rnnconv.safeio.inputs import SourceChanged, add_guard, json_document

CHECKPOINT_METADATA: Final = "_CHECKPOINT_METADATA"  # a checkpoint's (or a CheckpointManager step's) own record
ZARRAY: Final = ".zarray"  # a zarr v2 array's metadata
ARRAY_TYPES: Final = ("jax.Array", "np.ndarray")  # the value types Orbax stores as arrays
# The zarr element types an RNN's params may have: numpy's little-endian codes of the table's, and TensorStore's name
# for bfloat16 (which numpy has no code for).
FLOAT_TYPES: Final = {
    (name if name == "bfloat16" else etype.storage.str): name for name, etype in ELEMENT_TYPES.items()
}
COMPRESSORS: Final = ("zstd", None)  # what Orbax writes its chunks with: zstd, or none
EXTRA: Final = "orbax"

MAX_FILES = 100_000  # files and folders in a checkpoint
MAX_DEPTH = 8  # folders deep (a checkpoint has ocdbt.process_N/d/)
MAX_BYTES = 1 << 34  # bytes of arrays read, as the Flax reader reads a file whole
MAX_LEAVES = 100_000
MAX_KEYS = 32  # keys in a leaf's path
MAX_KEY_CHARS = 1000
MAX_CHUNKS = 1 << 20  # chunks of one array
ZARRAY_LIMIT = 64 << 10  # bytes of an array's zarr metadata
JSON_LIMIT = 1 << 28  # bytes of a metadata file Orbax's restore reads (one entry per array: large for a large tree)
READ_SECONDS = 120.0  # what TensorStore may take to read one array
# TensorStore's status codes (absl's), which begin its error messages.
STATUS_CODES: Final = (
    "NOT_FOUND", "DATA_LOSS", "FAILED_PRECONDITION", "INVALID_ARGUMENT", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "RESOURCE_EXHAUSTED", "INTERNAL", "UNKNOWN", "ABORTED", "CANCELLED", "DEADLINE_EXCEEDED", "UNAVAILABLE",
)  # fmt: skip
FILE_NAMED: Final = re.compile(r'local file "([^"]{1,4096})"')  # the file a TensorStore error names
# The files besides _METADATA and the arrays that Orbax's restore reads (JSON), checked before Orbax is called.
RESTORE_JSON: Final = ("_CHECKPOINT_METADATA", "_sharding")
ARRAY_METADATAS: Final = "array_metadatas"
REMEDY: Final = "save the checkpoint again, or copy it whole"  # the way out of a damaged checkpoint


class Unread:
    """A leaf rnnconv does not read (no array, or not of a float type rnnconv reads): no cell's param."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}>"


# --- the checkpoint a folder stands for ----------------------------------------------------------------------------


def checkpoint_in(folder: Path) -> Path | None:
    """The `_METADATA` of the checkpoint a folder is (or, a CheckpointManager step, holds as its one item), else
    None; a step of several items, or a CheckpointManager's folder of steps, is refused naming what to pick."""
    if not folder.is_dir() or folder.is_symlink():
        return None
    if os.path.lexists(folder / METADATA):
        return folder / METADATA
    items = sorted(p.name for p in _subfolders(folder) if os.path.lexists(p / METADATA))
    if len(items) == 1 and os.path.lexists(folder / CHECKPOINT_METADATA):
        return folder / items[0] / METADATA
    if items:
        raise BadInput(
            f"{folder} is an Orbax checkpoint of several items ({', '.join(cut(i) for i in items[:8])}); "
            f"name the one that holds the model's params ({cut(str(folder / items[0]))})"
        )
    steps = sorted(p.name for p in _subfolders(folder) if os.path.lexists(p / CHECKPOINT_METADATA))
    if steps:
        raise BadInput(
            f"{folder} is an Orbax CheckpointManager's folder (steps {', '.join(cut(s) for s in steps[-8:])}); name "
            f"the step to read ({cut(str(folder / steps[-1]))})"
        )
    return None


def _subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for _, e in zip(range(MAX_FILES), entries) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def is_checkpoint(path: Path) -> bool:
    return path.name == METADATA


# --- the folder, checked --------------------------------------------------------------------------------------------


@dataclass
class Folder:
    """A checkpoint's folder as first looked at: every file's identity (what changes when its content may have)."""

    root: Path
    files: dict[str, tuple[int, ...]]

    def check(self) -> None:
        """SourceChanged when any file changed, went or came since the first look."""
        if _look(self.root) != self.files:
            raise SourceChanged(self.root)


def _look(root: Path) -> dict[str, tuple[int, ...]]:
    """Each file's identity under `root` (relative name -> size, times, inode); BadInput for a symbolic link, anything
    but files and folders, too many, too deep or too large."""
    found: dict[str, tuple[int, ...]] = {}
    total = 0
    pending = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as scan:
                entries = list(zip(range(MAX_FILES + 1), scan))
        except OSError as exc:
            raise BadInput(f"cannot read the Orbax checkpoint folder {folder}: {exc.strerror}") from None
        for _, entry in entries:
            where = Path(entry.path)
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                raise BadInput(
                    f"{where} is a symbolic link: rnnconv reads an Orbax checkpoint's own files only (copy the "
                    f"checkpoint without links)"
                )
            if stat.S_ISDIR(info.st_mode):
                if depth >= MAX_DEPTH:
                    raise BadInput(f"{where} lies {depth + 1} folders deep: no Orbax checkpoint nests so deep")
                pending.append((where, depth + 1))
                continue
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(
                    f"{where} is not a regular file (a device, pipe or socket): no Orbax checkpoint holds one"
                )
            total += info.st_size
            found[str(where.relative_to(root))] = (
                info.st_size,
                info.st_mtime_ns,
                info.st_ctime_ns,
                info.st_ino,
                info.st_dev,
            )
            if len(found) > MAX_FILES or total > MAX_BYTES:
                raise BadInput(
                    f"the Orbax checkpoint {root} is larger than rnnconv reads ({MAX_FILES} files, {MAX_BYTES} bytes)"
                )
    return found


# --- _METADATA ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    keys: tuple[str, ...]
    array: bool  # stored as an array (else a value rnnconv does not read)
    write_shape: tuple[int, ...] | None

    @property
    def param_name(self) -> str:
        """Where its array is: its keys joined with dots, as Orbax names it."""
        return ".".join(self.keys)


def _leaves(document: Any, where: Path) -> tuple[list[Leaf], bool]:
    """Each leaf of `_METADATA`'s tree, and whether the arrays are in OCDBT."""

    def bad(what: str) -> BadInput:
        return BadInput(f"{where} is not the metadata Orbax writes: {what}")

    if not isinstance(document, dict) or not isinstance(document.get("tree_metadata"), dict):
        raise bad("no tree_metadata map")
    tree = document["tree_metadata"]
    if len(tree) > MAX_LEAVES:
        raise bad(f"it lists {len(tree)} leaves, more than rnnconv reads ({MAX_LEAVES})")
    if document.get("use_zarr3", False) is not False:
        raise BadInput(
            f"{where}: the checkpoint was saved with use_zarr3=True, and rnnconv reads Orbax's zarr (v2) arrays "
            f"only (save with use_zarr3=False, Orbax's default)"
        )
    ocdbt = document.get("use_ocdbt", True)
    if not isinstance(ocdbt, bool):
        raise bad("use_ocdbt is no true or false")
    leaves = []
    for entry in tree.values():
        keys = entry.get("key_metadata") if isinstance(entry, dict) else None
        value = entry.get("value_metadata") if isinstance(entry, dict) else None
        if not isinstance(keys, list) or not 0 < len(keys) <= MAX_KEYS or not isinstance(value, dict):
            raise bad("a leaf without its key path and value metadata")
        found = [k.get("key") if isinstance(k, dict) else None for k in keys]
        for name in found:
            if not isinstance(name, str) or not 0 < len(name) <= MAX_KEY_CHARS or "/" in name or "\0" in name:
                raise bad(f"a leaf's key {cut(str(name))!r} is no name Orbax gives an array")
        names = tuple(str(name) for name in found)
        shape = value.get("write_shape")
        if shape is not None and not (
            isinstance(shape, list) and len(shape) <= MAX_KEYS and all(_count(n) for n in shape)
        ):
            raise bad(f"leaf {cut('.'.join(names))!r} has write_shape {cut(str(shape))}")
        stored = value.get("value_type") in ARRAY_TYPES and value.get("skip_deserialize") is not True
        leaves.append(Leaf(names, stored, None if shape is None else tuple(shape)))
    return leaves, ocdbt


def _count(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 40


def _tree(leaves: list[Leaf], value: Callable[[Leaf], Any], where: Path) -> dict[str, Any]:
    """The nested maps of the leaves' key paths, each leaf's `value` at its place."""
    tree: dict[str, Any] = {}
    for leaf in leaves:
        node = tree
        for key in leaf.keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise BadInput(f"{where}: leaf {cut(leaf.param_name)!r} lies under another leaf")
        if leaf.keys[-1] in node:
            raise BadInput(f"{where}: the tree holds {cut(leaf.param_name)!r} twice, or a leaf where it has a subtree")
        node[leaf.keys[-1]] = value(leaf)
    return tree


# --- the arrays -----------------------------------------------------------------------------------------------------


def _tensorstore() -> Any:
    try:
        import tensorstore
    except ImportError:
        raise BackendMissing(
            f"reading an Orbax checkpoint's arrays needs TensorStore, which is not installed "
            f"(pip install 'rnnconv[{EXTRA}]')"
        ) from None
    return tensorstore


@dataclass(frozen=True)
class ZarrArray:
    """An array's zarr metadata, checked."""

    shape: tuple[int, ...]
    dtype: str  # rnnconv's name, or "" for a type it does not read
    stored: str  # zarr's

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ELEMENT_TYPES[self.dtype].itemsize


def _zarray(data: bytes, leaf: Leaf, where: str) -> tuple[ZarrArray, dict[str, Any]]:
    if len(data) > ZARRAY_LIMIT:
        raise BadInput(f"{where} is {len(data)} bytes, more than any zarr array's metadata")
    meta = json_document(data, where)

    def bad(what: str) -> BadInput:
        return BadInput(f"{where} is not the zarr (v2) metadata Orbax writes: {what}")

    if not isinstance(meta, dict) or meta.get("zarr_format") != 2:
        raise bad("no zarr_format 2")
    shape, chunks, dtype = meta.get("shape"), meta.get("chunks"), meta.get("dtype")
    if not isinstance(shape, list) or len(shape) > MAX_KEYS or not all(_count(n) for n in shape):
        raise bad(f"shape {cut(str(shape))}")
    if not isinstance(chunks, list) or len(chunks) != len(shape) or not all(_count(n) and n > 0 for n in chunks):
        raise bad(f"chunks {cut(str(chunks))} for shape {shape}")
    if math.prod(-(-n // c) for n, c in zip(shape, chunks)) > MAX_CHUNKS:
        raise bad(f"shape {shape} in chunks {chunks} is more than {MAX_CHUNKS} chunks")
    if leaf.write_shape is not None and tuple(shape) != leaf.write_shape:
        raise BadInput(f"{where}: the array's shape {shape} is not the {list(leaf.write_shape)} _METADATA gives it")
    if not isinstance(dtype, str):
        raise bad(f"dtype {cut(str(dtype))}")
    compressor = meta.get("compressor")
    compressor_id = compressor.get("id") if isinstance(compressor, dict) else compressor
    if compressor_id not in COMPRESSORS or meta.get("filters") is not None or meta.get("order") not in ("C", "F"):
        raise bad(
            f"compressor {cut(str(compressor))}, filters {cut(str(meta.get('filters')))} (Orbax writes zstd, none)"
        )
    return ZarrArray(tuple(shape), FLOAT_TYPES.get(dtype, ""), dtype), meta


def refusal(exc: BaseException, root: Path) -> str:
    """TensorStore's refusal (its status code, the checkpoint's file it names) as the end of a sentence, without its
    internal text (byte offsets, specs, decoder names): what is wrong and the way out."""
    text = str(exc)
    code = next((c for c in STATUS_CODES if text.startswith(c + ":")), "")
    named = FILE_NAMED.search(text)
    file = ""
    if named and os.path.normpath(named.group(1)).startswith(str(root) + os.sep):
        file = f" (file {cut(os.path.relpath(named.group(1), root))})"
    what = "is missing" if code == "NOT_FOUND" else "is damaged or cut short"
    return f"its stored data{file} {what}{f' (TensorStore: {code})' if code else ''}; {REMEDY}"


def _restore_refusal(exc: BaseException, root: Path) -> str:
    """Orbax's refusal of a restore as the end of a sentence: TensorStore's said as `refusal` says it, Python's own
    (a metadata file's JSON of other types than Orbax writes) said as such."""
    text = str(exc)
    if text.startswith(STATUS_CODES) or "TensorStore" in text:
        return refusal(exc, root)
    if isinstance(exc, (AttributeError, TypeError, KeyError, IndexError, json.JSONDecodeError)) or not text:
        files = ", ".join((METADATA, *RESTORE_JSON, ARRAY_METADATAS))
        return f"a metadata file ({files}) is not as Orbax writes it; {REMEDY}"
    return f"{cut(text.splitlines()[0], 300)}; {REMEDY}"


class Store:
    """A checkpoint's arrays, read by TensorStore from the folder rnnconv checked: in its OCDBT store, or each in
    its own folder."""

    def __init__(self, folder: Folder, ocdbt: bool, where: Path):
        self.ts = _tensorstore()
        self.folder, self.ocdbt, self.where = folder, ocdbt, where
        self.context = self.ts.Context(
            {
                "cache_pool": {"total_bytes_limit": 0},
                "data_copy_concurrency": {"limit": 1},
                "file_io_concurrency": {"limit": 2},
            }
        )
        base = {"driver": "file", "path": str(folder.root) + "/"}
        self.kvstore = {"driver": "ocdbt", "base": base} if ocdbt else base
        self.store = (
            self._ask(lambda: self.ts.KvStore.open(self.kvstore, context=self.context), "its OCDBT store")
            if ocdbt
            else None
        )

    def _ask(self, start: Callable[[], Any], what: str) -> Any:
        """What TensorStore gives (a future's result, in bounded time), its refusal said in one sentence."""
        try:
            return start().result(timeout=READ_SECONDS)
        except TimeoutError:
            raise BadInput(
                f"{self.where}: reading {what} took more than {READ_SECONDS:.0f} s (the checkpoint is damaged or too "
                f"large)"
            ) from None
        except (ValueError, RuntimeError, OSError) as exc:  # TensorStore's errors are ValueErrors
            self.folder.check()
            raise BadInput(f"{self.where}: {what} cannot be read: {refusal(exc, self.folder.root)}") from None

    def metadata(self, leaf: Leaf) -> bytes:
        name = f"{leaf.param_name}/{ZARRAY}"
        if self.store is not None:
            store = self.store
            read = self._ask(lambda: store.read(name), f"array {cut(leaf.param_name)!r}'s metadata")
            if read.state != "value":
                raise BadInput(
                    f"{self.where}: array {cut(leaf.param_name)!r} is missing from the checkpoint's OCDBT store"
                )
            return bytes(read.value)
        if name not in self.folder.files:
            raise BadInput(
                f"{self.where}: array {cut(leaf.param_name)!r} is missing (no {cut(name)} in the checkpoint)"
            )
        size = self.folder.files[name][0]
        if size > ZARRAY_LIMIT:
            raise BadInput(f"{self.folder.root / name} is {size} bytes, more than any zarr array's metadata")
        with open(self.folder.root / name, "rb") as f:
            return f.read(ZARRAY_LIMIT + 1)

    def read(self, leaf: Leaf, zarr: ZarrArray, meta: dict[str, Any]) -> np.ndarray:
        what = f"array {cut(leaf.param_name)!r}"
        kvstore = {**self.kvstore, "path": f"{leaf.param_name}/"}
        if not self.ocdbt:
            kvstore = {"driver": "file", "path": str(self.folder.root / leaf.param_name) + "/"}
        # A chunk missing is refused, as Orbax refuses it, not read as the fill value (zeros where none is given).
        spec = {"driver": "zarr", "kvstore": kvstore, "metadata": meta, "open": True, "fill_missing_data_reads": False}
        array = self._ask(lambda: self.ts.open(spec, context=self.context, read=True), what)
        values = self._ask(array.read, what)
        values = np.asarray(values)
        if values.shape != zarr.shape or values.dtype.name != zarr.dtype:
            raise BadInput(
                f"{self.where}: {what} read as {values.dtype.name} {list(values.shape)}, not as its metadata says"
            )
        if zarr.dtype == "bfloat16":
            return np.ascontiguousarray(values).view(np.uint16).view(Bfloat16Words)
        return np.ascontiguousarray(values)


def _checked(metadata: Path) -> tuple[Folder, list[Leaf], bool]:
    """The checkpoint's folder looked at and its `_METADATA` read, both checked."""
    root = metadata.parent
    folder = Folder(root, _look(root))
    if METADATA not in folder.files:
        raise BadInput(f"{metadata} is not an Orbax checkpoint's metadata (no such file)")
    size = folder.files[METADATA][0]
    with open(metadata, "rb") as f:
        data = f.read(size + 1)
    leaves, ocdbt = _leaves(json_document(data, str(metadata)), metadata)
    return folder, leaves, ocdbt


def source_parts(metadata: Path) -> list[Path]:
    """Every file of the checkpoint but its `_METADATA`, in the order of their names: what its reading and Orbax's
    restore may open (OCDBT's manifests and data files, the zarr chunks, _sharding, array_metadatas/)."""
    root = metadata.parent
    return [root / name for name in sorted(_look(root)) if name != METADATA]


def top_keys(metadata: Path) -> set[str]:
    """The keys at the top of the checkpoint's tree (a Flax linen model's variables have "params")."""
    _, leaves, _ = _checked(metadata)
    return {leaf.keys[0] for leaf in leaves}


def load_tree(metadata: Path) -> dict[str, Any]:
    """The checkpoint's tree: each array of a float type rnnconv reads as numpy (bfloat16 as its words), every
    other leaf `Unread`; its files guarded until what is written from them is committed."""
    folder, leaves, ocdbt = _checked(metadata)
    store = Store(folder, ocdbt, metadata.parent)
    arrays: dict[str, tuple[ZarrArray, dict[str, Any]]] = {}
    for leaf in leaves:
        if leaf.array:
            where = f"{metadata.parent}: array {cut(leaf.param_name)!r}'s {ZARRAY}"
            arrays[leaf.param_name] = _zarray(store.metadata(leaf), leaf, where)
    total = sum(z.nbytes for z, _ in arrays.values() if z.dtype)
    if total > MAX_BYTES:
        raise BadInput(f"{metadata.parent} holds {total} bytes of arrays, more than rnnconv reads ({MAX_BYTES})")

    def value(leaf: Leaf) -> Any:
        if not leaf.array:
            return Unread("a value Orbax does not store as an array")
        zarr, meta = arrays[leaf.param_name]
        if not zarr.dtype:
            return Unread(f"an array of {zarr.stored}")
        return store.read(leaf, zarr, meta)

    tree = _tree(leaves, value, metadata)
    folder.check()
    add_guard(folder.check)
    return tree


def restored(metadata: Path) -> Any:
    """The checkpoint restored by Orbax itself (for verify: the run rests on Orbax's reading, not on rnnconv's), as
    numpy; called after `load_tree` checked it, and the other files Orbax reads checked here first."""
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise BackendMissing(
            "running an Orbax checkpoint needs orbax-checkpoint (pip install 'rnnconv[flax]')"
        ) from None
    import jax

    root = metadata.parent
    folder = Folder(root, _look(root))
    for name in sorted(folder.files):
        if name in RESTORE_JSON or name.startswith(ARRAY_METADATAS + os.sep):
            size = folder.files[name][0]
            if size > JSON_LIMIT:
                raise BadInput(f"{root / name} is {size} bytes, more than Orbax writes of any checkpoint's metadata")
            with open(root / name, "rb") as f:
                json_document(f.read(size + 1), str(root / name))
    with warnings.catch_warnings():  # that it takes the shardings from the checkpoint: on one CPU, as saved
        warnings.simplefilter("ignore")
        try:
            with _draining_loops():
                tree = ocp.PyTreeCheckpointer().restore(str(root))
        except Exception as exc:  # Orbax's own refusal of a damaged checkpoint, of whatever type it raises
            folder.check()
            raise BadInput(f"Orbax itself cannot restore {root}: {_restore_refusal(exc, root)}") from None
    return jax.tree_util.tree_map(lambda value: _numpy(jax, value), tree)


class _DrainingLoop(asyncio.SelectorEventLoop):
    """An event loop that, closed, first lets the tasks still running end (each read of an array Orbax began: its
    restore closes its loop as soon as one fails, and their TensorStore futures would then call into a closed loop
    from TensorStore's threads, and their coroutines be destroyed pending), their outcomes taken."""

    def close(self) -> None:
        if not self.is_closed() and not self.is_running():
            pending = asyncio.all_tasks(self)
            if pending:
                _, late = self.run_until_complete(asyncio.wait(pending, timeout=READ_SECONDS))
                for task in late:
                    task.cancel()
                self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        super().close()


class _DrainingPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _DrainingLoop()


@contextlib.contextmanager
def _draining_loops() -> Iterator[None]:
    """Orbax's event loops (it makes a new one for each restore) drain before they close, while this lasts."""
    before = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(_DrainingPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(before)


def _numpy(jax: Any, value: Any) -> Any:
    if jax.dtypes.issubdtype(getattr(value, "dtype", None), jax.dtypes.prng_key):
        return Unread("a random key")  # nnx's rngs, no param
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        return np.ascontiguousarray(array).view(np.uint16).view(Bfloat16Words)
    return array
