"""An .eqx read without Equinox or JAX: its .npy leaves (headers parsed, never unpickled), the one cell their count
and shapes tell, and its canonical form through the table's Equinox rows."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput, cut
from rnnconv.formats import _jax
from rnnconv.formats._npy import NPY_MAGIC, npy_header
from rnnconv.formats.equinox.wire import EQUINOX_CLASSES
from rnnconv.formats.reading import Found, StoredCell, read, settle
from rnnconv.formats.settings import ReadOptions
from rnnconv.safeio.inputs import regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import EQUINOX_FIELDS, EQUINOX_NAMES

MAX_BYTES = 1 << 34
MAX_LEAVES = 64
LEAF_TYPES = {"<f2": "float16", "<f4": "float32", "<f8": "float64"}  # what the leaves of a cell may be
ROLE_OF_FIELD = {field: role for role, field in EQUINOX_NAMES.items()}


@dataclass
class Leaf:
    dtype: str
    shape: tuple[int, ...]
    offset: int  # of its data in the file


def leaves(data: bytes, what: str) -> list[Leaf]:
    """The .npy leaves of a file, each header read by numpy's reader (never unpickled) and its data's size checked."""
    found: list[Leaf] = []
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        pos = stream.tell()
        if len(found) >= MAX_LEAVES:
            raise BadInput(f"{what} holds more than {MAX_LEAVES} leaves: no Equinox cell has as many")
        if data[pos : pos + len(NPY_MAGIC)] != NPY_MAGIC:
            raise BadInput(f"{what}: leaf {len(found)} at byte {pos} is not a .npy (as np.save writes one)")
        dtype, shape, fortran, offset = npy_header(stream, f"{what}: leaf {len(found)}")
        if dtype.str not in LEAF_TYPES:
            raise BadInput(
                f"{what}: leaf {len(found)} is of type {cut(dtype.descr if dtype.names else dtype.str)!r}; an Equinox "
                f"cell's leaves are {', '.join(LEAF_TYPES.values())}"
            )
        if fortran or len(shape) > 2:
            raise BadInput(f"{what}: leaf {len(found)} has shape {shape} (fortran_order={fortran})")
        end = offset + math.prod(shape) * dtype.itemsize
        if end > len(data):
            raise BadInput(f"{what}: leaf {len(found)} ({dtype.str} {shape}) runs past the end of the file")
        found.append(Leaf(LEAF_TYPES[dtype.str], shape, offset))
        stream.seek(end)
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
