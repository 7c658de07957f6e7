"""An .eqx read without Equinox or JAX: its .npy leaves (headers parsed, never unpickled), the one cell their count
and shapes tell, and its canonical form through the table's Equinox rows."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import Provenance
from rnnconv.errors import BadInput
from rnnconv.formats import _jax
from rnnconv.formats.equinox.wire import EQUINOX_CLASSES
from rnnconv.formats.registry import ReadOptions
from rnnconv.safeio.inputs import regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import EQUINOX_FIELDS, EQUINOX_NAMES
from rnnconv.table.reading import Found, StoredCell, read, settle

NPY_MAGIC = b"\x93NUMPY"
MAX_BYTES = 1 << 34
MAX_LEAVES = 64
MAX_HEADER = 10_000
LEAF_TYPES = {"<f2": "float16", "<f4": "float32", "<f8": "float64"}  # what the leaves of a cell may be
ROLE_OF_FIELD = {field: role for role, field in EQUINOX_NAMES.items()}


@dataclass
class Leaf:
    dtype: str
    shape: tuple[int, ...]
    offset: int  # of its data in the file


def leaves(data: bytes, what: str) -> list[Leaf]:
    """The .npy leaves of a file, each header parsed as a literal (never unpickled) and its data's size checked."""
    found: list[Leaf] = []
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        if len(found) >= MAX_LEAVES:
            raise BadInput(f"{what} holds more than {MAX_LEAVES} leaves: no Equinox cell has as many")
        if bytes(view[pos : pos + 6]) != NPY_MAGIC or pos + 10 > len(data):
            raise BadInput(f"{what}: leaf {len(found)} at byte {pos} is not a .npy (as np.save writes one)")
        major = data[pos + 6]
        size_bytes = {1: 2, 2: 4, 3: 4}.get(major)
        if size_bytes is None:
            raise BadInput(f"{what}: leaf {len(found)} is a .npy of version {major}, which numpy never wrote")
        start = pos + 8 + size_bytes
        length = int.from_bytes(view[pos + 8 : start], "little")
        if length > MAX_HEADER or start + length > len(data):
            raise BadInput(f"{what}: leaf {len(found)}'s .npy header runs past the file")
        try:
            header = ast.literal_eval(bytes(view[start : start + length]).decode("latin1"))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise BadInput(f"{what}: leaf {len(found)}'s .npy header is not a literal") from None
        if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
            raise BadInput(f"{what}: leaf {len(found)}'s .npy header is not numpy's")
        descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
        if descr not in LEAF_TYPES:
            raise BadInput(
                f"{what}: leaf {len(found)} is of type {descr!r}; an Equinox cell's leaves are "
                f"{', '.join(LEAF_TYPES.values())}"
            )
        if (
            fortran is not False
            or not isinstance(shape, tuple)
            or len(shape) > 2
            or not all(isinstance(n, int) and n >= 0 for n in shape)
        ):
            raise BadInput(f"{what}: leaf {len(found)} has shape {shape!r} (fortran_order={fortran!r})")
        offset = start + length
        pos = offset + math.prod(shape) * np.dtype(descr).itemsize
        if pos > len(data):
            raise BadInput(f"{what}: leaf {len(found)} ({descr} {shape}) runs past the end of the file")
        found.append(Leaf(LEAF_TYPES[descr], shape, offset))
    return found


@dataclass
class EquinoxCell:
    cell: str
    leaves: dict[str, Leaf]  # field -> its leaf
    data: bytes

    @property
    def name(self) -> str:
        return EQUINOX_CLASSES[self.cell]

    def value(self, field: str) -> np.ndarray:
        leaf = self.leaves[field]
        dtype = np.dtype(next(k for k, v in LEAF_TYPES.items() if v == leaf.dtype))
        return np.frombuffer(self.data, dtype, math.prod(leaf.shape), leaf.offset).reshape(leaf.shape)


def load(path: Path) -> EquinoxCell:
    """The one cell of a file: LSTM or GRU, told by the leaves' count and the recurrent weight's shape."""
    if regular_file(path) > MAX_BYTES:
        raise BadInput(f"{path} is larger than rnnconv reads whole ({MAX_BYTES} bytes)")
    data = path.read_bytes()
    found = leaves(data, str(path))
    described = ", ".join(f"{leaf.dtype}{list(leaf.shape)}" for leaf in found)
    if len(found) < 2 or len(found[1].shape) != 2 or found[1].shape[1] < 1:
        raise BadInput(f"{path} holds leaves {described}: no eqx.nn.LSTMCell or GRUCell")
    rows, hidden = found[1].shape
    for cell, fields in EQUINOX_FIELDS.items():
        gates = len(find_row("equinox", EQUINOX_CLASSES[cell]).gate_order)
        if rows == gates * hidden and len(found) in (2, len(fields)):
            return EquinoxCell(cell, dict(zip(fields, found)), data)
    cells = " or ".join(f"{EQUINOX_CLASSES[c]} ({', '.join(fields)})" for c, fields in EQUINOX_FIELDS.items())
    raise BadInput(
        f"{path} holds {len(found)} leaves ({described}): rnnconv reads one eqx.nn.{cells}, or one with "
        f"use_bias=False; a list of cells does not say which is which"
    )


def to_canonical(cell: EquinoxCell, path: Path, source: Provenance, options: ReadOptions | None = None) -> CanonicalRNN:
    options = options or ReadOptions()
    row = find_row("equinox", cell.name)
    settled = settle(row, {}, cell.name)
    dtypes = {leaf.dtype for leaf in cell.leaves.values()}
    if len(dtypes) != 1:
        raise BadInput(f"{path}: its leaves are of types {', '.join(sorted(dtypes))}, not one type")
    shapes = {ROLE_OF_FIELD[field]: leaf.shape for field, leaf in cell.leaves.items()}
    has_bias = len(cell.leaves) > 2
    hidden = cell.leaves[EQUINOX_FIELDS[cell.cell][1]].shape[1]
    n_in = cell.leaves[EQUINOX_FIELDS[cell.cell][0]].shape[-1]

    def stored(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        values = {ROLE_OF_FIELD[field]: field for field in cell.leaves}
        return StoredCell(lambda role: cell.value(values[role]), shapes, row.tensors, f"{cell.name} in {path}")

    found = Found(
        cell.name,
        row,
        settled,
        input_size=n_in,
        hidden=hidden,
        dtype=dtypes.pop(),
        cell=stored,
        layer_class=cell.name,
        has_bias=has_bias,
        without_bias="use_bias=False",
        bias_split=options.bias_split,
        handover={"origin": _jax.recorded_source(path)},
    )
    return read(found, source)
