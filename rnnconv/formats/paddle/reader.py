"""Reading `.pdparams`: the state_dict `paddle.save` pickles, read inertly, and the RNNs its cells' keys name.

The pickle is read by rnnconv's inert unpickler (`formats/_pickled.py`): numpy arrays and plain containers become
values, every other global an inert record, and a file that names any (a `__reduce__` payload that `paddle.load`
would run, a pickled Layer) is refused. An RNN is a key prefix with cells' parameters, `{k}.cell.weight_ih` (`cell_fw`
and `cell_bw` both ways): those are what Paddle computes with, since `set_state_dict` loads them after the aliases
`RNNBase` gives the same parameters under PyTorch's names (`wire.flat_names`), which are checked against them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance, RNNSizes
from rnnconv.errors import BadInput, listing
from rnnconv.formats import _pickled
from rnnconv.formats.paddle.wire import (
    CELL_ROLES,
    FLAT_ROLES,
    NAME_TABLE,
    NESTED_TENSOR,
    flat_names,
)
from rnnconv.formats.reading import Found, StoredCell, held_grid, nonlinearity_note, read, settle_nonlinearity
from rnnconv.formats.sources import SOURCE_KEY, pick_by_prefix, recorded_by_prefix
from rnnconv.safeio.inputs import read_array, regular_file
from rnnconv.table.apply import find_row, rows_for
from rnnconv.table.constants import (
    MAX_LAYERS,
    MAX_SIZE,
    NONLINEARITY_KEY,
    PADDLE_CELLS,
    TORCH_REVERSE_SUFFIX,
)

CELL = re.compile(
    rf"^(?P<prefix>(?:.*\.)?)(?P<layer>\d+)\.(?P<cell>{'|'.join(PADDLE_CELLS[2] + PADDLE_CELLS[1])})\."
    rf"(?P<name>{'|'.join(CELL_ROLES)})$"
)
FLAT = re.compile(
    rf"^(?P<prefix>(?:.*\.)?)(?P<name>{'|'.join(FLAT_ROLES)})_l(?P<layer>\d+)(?:{TORCH_REVERSE_SUFFIX})?$"
)
# The layer class of each gate count, from the table's paddle rows.
CLASS_BY_GATES = {row.gates: row.source_class for row in rows_for("paddle")}
FLOATS = ("float32", "float64", "float16")  # what Paddle saves of a floating point tensor (bfloat16: as uint16)
MAX_NESTING = 64


# --- the file ------------------------------------------------------------------------------------------------------


@dataclass
class StateDict:
    """A .pdparams' arrays by dotted key (a nested save's containers as prefixes), and what rnnconv recorded beside
    them when it wrote the file (`records`, by name)."""

    arrays: dict[str, np.ndarray]
    records: dict[str, str] = field(default_factory=dict)

    def recorded(self, path: Path) -> tuple[dict[str, Provenance], dict[str, str]]:
        """The source of each RNN and each SimpleRNN's activation that the file records, by key prefix."""
        return recorded_by_prefix(self.records, path)


def load_state_dict(path: Path) -> StateDict:
    """Every array of a .pdparams, read inertly; a file that names anything but arrays and containers is refused."""
    size = regular_file(path)
    if size > _pickled.MAX_PICKLE:
        raise BadInput(
            f"{path} is {size:,} bytes, more than the {_pickled.MAX_PICKLE:,} rnnconv reads of a pickle (a .pdparams "
            f"holds its values inside its pickle)"
        )
    data = read_array(path, 0, np.uint8, (size,)).tobytes()
    root = _pickled.load(data, str(path))
    named = [g for g in _pickled.globals_named(root) if g != ".".join(NESTED_TENSOR)]
    if named:
        raise BadInput(
            f"{path} was refused: it names {listing(named)}, which paddle.load would run, and rnnconv never runs "
            f"anything a file names; save model.state_dict() with paddle.save"
        )
    if not isinstance(root, dict):
        raise BadInput(
            f"{path} is a pickle of a {type(root).__name__}, not the dict of arrays paddle.save writes of a state_dict"
        )
    out = StateDict({})
    for key in (SOURCE_KEY, NONLINEARITY_KEY):
        if isinstance(root.get(key), str):
            out.records[key] = root[key]
    for key, value in _flatten(root, path):
        out.arrays[key] = value
    return out


def _flatten(root: dict, path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """(dotted key, array) of each array in the tree: a dict's keys become prefixes, a nested save's (name, array)
    tensors their arrays; the name table and everything else are passed over. Bounded: nothing nests past
    MAX_NESTING, and a container shared many times over is walked once."""
    seen: set[int] = set()

    def walk(node: Any, prefix: str, depth: int) -> Iterator[tuple[str, np.ndarray]]:
        if depth > MAX_NESTING:
            raise BadInput(f"{path} nests containers more than {MAX_NESTING} deep, more than any state_dict")
        for key, value in node.items():
            if not isinstance(key, str) or key == NAME_TABLE:
                continue
            held = value
            if isinstance(value, _pickled.Object) and type(value).of(*NESTED_TENSOR) and len(value.args) == 1:
                held = value.args[0]  # builtins.tuple(((name, array),))
            if _is_named_tensor(held):
                held = held[1]
            if isinstance(held, np.ndarray):
                yield prefix + key, held
            elif isinstance(held, dict) and id(held) not in seen:
                seen.add(id(held))
                yield from walk(held, f"{prefix}{key}.", depth + 1)

    return walk(root, "", 0)


def _is_named_tensor(value: Any) -> bool:
    """(name, array): how paddle.save pickles a tensor inside a nested container (as a call of builtins.tuple)."""
    return (
        isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], np.ndarray)
    )


# --- finding RNNs ----------------------------------------------------------------------------------------------------


@dataclass
class PaddleRNN:
    """One paddle.nn.LSTM/GRU/SimpleRNN found in a state_dict: its cells' arrays by (layer, cell attribute, role),
    and its aliases (PyTorch's names RNNBase also gives them), by key without the prefix."""

    prefix: str  # "encoder.lstm." ("" for a bare module's state_dict)
    cells: dict[tuple[int, str, str], np.ndarray] = field(default_factory=dict)
    flat: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.prefix.rstrip(".") or "rnn"

    def key(self, layer: int, cell: str, role: str) -> str:
        return f"{self.prefix}{layer}.{cell}.{CELL_ROLES_NAMES[role]}"


CELL_ROLES_NAMES = {role: name for name, role in CELL_ROLES.items()}
FLAT_NAMES = {role: name for name, role in FLAT_ROLES.items()}


def find_rnns(state: StateDict) -> list[PaddleRNN]:
    """RNNs by their cells' parameter names (and the prefixes that hold only the aliases, refused when read)."""
    found: dict[str, PaddleRNN] = {}
    for key, array in state.arrays.items():
        cell, flat = CELL.match(key), FLAT.match(key)
        if cell:
            rnn = found.setdefault(cell["prefix"], PaddleRNN(cell["prefix"]))
            rnn.cells[(int(cell["layer"]), cell["cell"], CELL_ROLES[cell["name"]])] = array
        elif flat:
            rnn = found.setdefault(flat["prefix"], PaddleRNN(flat["prefix"]))
            rnn.flat[key[len(flat["prefix"]) :]] = array
    return list(found.values())


def pick(rnns: list[PaddleRNN], prefix: str | None, path: Path) -> PaddleRNN:
    if not rnns:
        first = rows_for("paddle", "LSTM")[0].tensors["input_matrix"].format(layer=0, cell=PADDLE_CELLS[1][0])
        raise BadInput(f"{path} holds no PaddlePaddle RNN weights (no {first} under any prefix)")
    return pick_by_prefix(rnns, prefix, path)


# --- to the canonical form -------------------------------------------------------------------------------------------


def _directions(rnn: PaddleRNN, what: str) -> tuple[str, ...]:
    """The cell attributes of its layers: `cell` one way, `cell_fw` and `cell_bw` both ways."""
    used = {cell for _, cell, _ in rnn.cells}
    for cells in PADDLE_CELLS.values():
        if used <= set(cells):
            return cells
    raise BadInput(f"{what} mixes one-way cells ({PADDLE_CELLS[1][0]}) with two-way ones, which no RNNBase has")


def to_canonical(rnn: PaddleRNN, source: Provenance, nonlinearity: str | None = None) -> CanonicalRNN:
    """The canonical RNN of a state_dict's RNN; a SimpleRNN's activation is `nonlinearity`, or assumed tanh."""
    what = f"RNN {rnn.name!r}"
    if not rnn.cells:
        some = listing(sorted(rnn.prefix + key for key in rnn.flat))
        raise BadInput(
            f"{what} holds only {some}, the names RNNBase gives its cells' parameters a second time, and none of its "
            f"cells' own ({rnn.key(0, PADDLE_CELLS[1][0], 'input_matrix')}), which are what Paddle computes with"
        )
    cells = _directions(rnn, what)
    num_layers, bidirectional = held_grid(
        what, {(layer, cells.index(cell)) for layer, cell, _ in rnn.cells}, len(cells)
    )
    t = rnn.cells
    first = cells[0]
    for role in ("input_matrix", "recurrent_matrix"):
        if (0, first, role) not in t:
            held = listing(sorted(rnn.key(0, first, r) for (k, c, r) in t if (k, c) == (0, first)))
            raise BadInput(f"{what} is incomplete: its first cell has no {rnn.key(0, first, role)} beside {held}")
    ih, hh, ho = t[(0, first, "input_matrix")], t[(0, first, "recurrent_matrix")], t.get((0, first, "projection"))
    for (layer, attribute, role), array in t.items():
        if array.dtype.name not in FLOATS:
            raise BadInput(
                f"{what}: {rnn.key(layer, attribute, role)} is {array.dtype.name}, not floating point (Paddle saves "
                f"bfloat16 as uint16, which rnnconv does not take for bfloat16)"
            )
    if ih.ndim != 2:
        raise BadInput(f"{what}: {rnn.key(0, first, 'input_matrix')} has shape {ih.shape}, not (G*H, I)")
    if ho is not None and ho.ndim != 2:
        raise BadInput(f"{what}: {rnn.key(0, first, 'projection')} has shape {ho.shape}, not (H, P)")
    hidden = ho.shape[0] if ho is not None else (hh.shape[1] if hh.ndim == 2 else 0)
    if hh.ndim != 2 or hidden == 0 or hh.shape[0] % hidden or hh.shape[0] // hidden not in CLASS_BY_GATES:
        raise BadInput(
            f"{what}: {rnn.key(0, first, 'recurrent_matrix')} has shape {hh.shape}, which is no "
            f"{', '.join(CLASS_BY_GATES.values())} {CELL_ROLES_NAMES['recurrent_matrix']} (G*H, H) for G = "
            f"{', '.join(map(str, CLASS_BY_GATES))}"
        )
    cls = CLASS_BY_GATES[hh.shape[0] // hidden]
    row = find_row("paddle", cls)
    refusal = f"{what} is a {cls}: --nonlinearity applies to SimpleRNN only"
    settled = settle_nonlinearity(row, nonlinearity, rnn.name, refusal)
    proj = ho.shape[1] if ho is not None else 0
    has_bias = (0, first, "input_bias") in t
    notes = nonlinearity_note(rnn.name, settled, row, "a state_dict")
    notes += _check_aliases(rnn, what, num_layers, cells, proj > 0)

    def cell(index: int, direction: int, spec: RNNSpec) -> StoredCell:
        name = cells[direction]
        here = {role: array for (layer, c, role), array in t.items() if (layer, c) == (index, name)}

        def check(expected: Mapping[str, tuple[int, ...]]) -> None:
            extra = sorted(rnn.key(index, name, role) for role in here if role not in expected)
            if extra:
                raise BadInput(
                    f"{what}: {', '.join(extra)} does not fit a {cls} {'with' if has_bias else 'without'} biases"
                    f"{' and projection' if proj else ''}"
                )

        return StoredCell(
            fetch=lambda role: _native(here[role]),
            shapes={role: tuple(array.shape) for role, array in here.items()},
            names={role: rnn.key(index, name, role) for role in row.tensors},
            where=f"{what} ({spec.describe()})",
            check=check,
        )

    found = Found(
        rnn.name,
        row,
        settled,
        input_size=ih.shape[1],
        hidden=hidden,
        dtype=ih.dtype.name,
        cell=cell,
        layer_class=f"paddle.nn.{cls}",
        num_layers=num_layers,
        bidirectional=bidirectional,
        proj=proj,
        has_bias=has_bias,
        without_bias=f"its cells have no {CELL_ROLES_NAMES['input_bias']}",
        notes=notes,
        provenance={"prefix": rnn.prefix},
    )
    return read(found, source)


def _native(array: np.ndarray) -> np.ndarray:
    """An array in the machine's byte order (a pickle may hold a big-endian one)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _check_aliases(rnn: PaddleRNN, what: str, num_layers: int, cells: tuple[str, ...], projection: bool) -> list[str]:
    """The aliases must be those RNNBase gives a module of these cells (a file with none is read from its cells' keys
    alone); where one holds other bits than the parameter it falls on, Paddle loads the cell's over it, and so does
    rnnconv, saying so."""
    if not rnn.flat:
        return []
    biases = (f"{FLAT_NAMES['input_bias']}_l0" in rnn.flat, f"{FLAT_NAMES['recurrent_bias']}_l0" in rnn.flat)
    expected = flat_names(num_layers, len(cells), biases, projection)
    stray, missing = sorted(set(rnn.flat) - set(expected)), sorted(set(expected) - set(rnn.flat))
    if stray or missing:
        odd = f"{listing(rnn.prefix + k for k in stray)} beside its cells" if stray else ""
        gone = f"no {listing(rnn.prefix + k for k in missing)}" if missing else ""
        raise BadInput(
            f"{what} has {' and '.join(p for p in (odd, gone) if p)}: not the names Paddle's module of these cells "
            f"has, so the file is not a state_dict paddle.save wrote of one"
        )
    differ = []
    for key, (layer, direction, role) in expected.items():
        held = rnn.cells.get((layer, cells[direction], role))
        alias = rnn.flat[key]
        same = held is not None and (held.dtype, held.shape) == (alias.dtype, alias.shape)
        if not (same and held is not None and held.tobytes() == alias.tobytes()):  # an alias is the very parameter
            differ.append(rnn.prefix + key)
    if not differ:
        return []
    return [
        f"{rnn.name}: {listing(differ)} hold other values than the cells' parameters they name; the cells' are taken, "
        f"as Paddle's set_state_dict loads them last"
    ]


def rnn_sizes(rnn: PaddleRNN) -> tuple[str, RNNSizes | None]:
    """The class (paddle.nn.LSTM, ...) and sizes an RNN's arrays give, also when it does not convert."""
    unknown = "paddle.nn.?", None
    cells = {cell for _, cell, _ in rnn.cells}
    first = PADDLE_CELLS[2][0] if PADDLE_CELLS[2][0] in cells else PADDLE_CELLS[1][0]
    ih, hh = rnn.cells.get((0, first, "input_matrix")), rnn.cells.get((0, first, "recurrent_matrix"))
    if ih is None or hh is None or ih.ndim != 2 or hh.ndim != 2 or not hh.shape[1]:
        return unknown
    ho = rnn.cells.get((0, first, "projection"))
    hidden = ho.shape[0] if ho is not None and ho.ndim == 2 else hh.shape[1]
    proj = ho.shape[1] if ho is not None and ho.ndim == 2 else 0
    gates = hh.shape[0] // hidden if hidden and not hh.shape[0] % hidden else 0
    if gates not in CLASS_BY_GATES:
        return unknown
    sizes = RNNSizes(
        input_size=min(ih.shape[1], MAX_SIZE),
        hidden_size=min(hidden, MAX_SIZE),
        num_layers=min(max(1, len({layer for layer, _, _ in rnn.cells})), MAX_LAYERS),
        bidirectional=first == PADDLE_CELLS[2][0],
        proj_size=min(proj, MAX_SIZE),
        dtype=ih.dtype.name,
        bias=(0, first, "input_bias") in rnn.cells,
    )
    return f"paddle.nn.{CLASS_BY_GATES[gates]}", sizes
