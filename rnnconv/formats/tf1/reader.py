"""A TF1 checkpoint's cuDNN layers read without TensorFlow: the canonical tensors saved beside each layer's opaque
buffer found by their names, and each layer's canonical form through the table's tf1 rows (every part's shape
checked)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance, RNNSizes
from rnnconv.errors import BadInput, RnnconvError, Unsupported, listing, several_rnns
from rnnconv.formats.reading import Found, StoredCell, held_grid, nonlinearity_note, read, settle_nonlinearity
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.tf1.tensor_bundle import Checkpoint
from rnnconv.formats.tf1.wire import TF1_BIDIRECTIONAL, TF1_CELLS, TF1_DIRECTIONS, TF1_OPAQUE, TF1_UNIDIRECTIONAL
from rnnconv.table.apply import rows_for
from rnnconv.table.constants import (
    ELEMENT_TYPE_CODES,
    LSTM,
    MAX_LAYERS,
    MAX_SIZE,
    TF1_ALL_ROWS,
    TF1_INPUT_ROWS,
    TF1_KERNEL,
    TF1_VARIABLES,
)
from rnnconv.table.rows import Row


def _template(pattern: str) -> str:
    """A regex for one of the table's scope templates: {layer} a number, {direction} fw or bw."""
    regex = re.escape(pattern).replace(re.escape("{layer}"), r"(?P<layer>\d+)")
    return regex.replace(re.escape("{direction}"), "(?P<direction>" + "|".join(TF1_DIRECTIONS) + ")")


CELL_OF_SCOPE = {scope: cell for cell, scope in TF1_CELLS.items()}
_CELL_SCOPES = "(?P<cell>" + "|".join(map(re.escape, TF1_CELLS.values())) + ")"
STRUCTURES = {  # bidirectional -> how a canonical tensor's name reads
    False: re.compile(rf"^(?:(?P<scope>.+)/)?{_template(TF1_UNIDIRECTIONAL)}/{_CELL_SCOPES}/(?P<variable>.+)$"),
    True: re.compile(rf"^(?:(?P<scope>.+)/)?{_template(TF1_BIDIRECTIONAL)}/{_CELL_SCOPES}/(?P<variable>.+)$"),
}
OPAQUE = re.compile(rf"^(?:(?P<scope>.+)/)?{re.escape(TF1_OPAQUE)}$")
ROW_OF_CELL: dict[str, Row] = {row.cell: row for row in rows_for("tf1")}
KNOWN_VARIABLES = {cell: {v for parts in roles.values() for v, _ in parts} for cell, roles in TF1_VARIABLES.items()}
OPAQUE_REASON = (
    "it holds only the opaque cuDNN buffer {name}, without the canonical tensors TF saves beside it: TF records no "
    "spec for that buffer and its layout depends on the cuDNN version and GPU that wrote it (restore it into its "
    "CudnnLSTM/CudnnGRU/CudnnRNN layer in TensorFlow 1 and save again: the layer's saveable writes the canonical "
    "tensors)"
)


@dataclass
class TF1RNN:
    """One cuDNN layer's canonical tensors: its scope, cell family, and per (layer, direction) variable -> name."""

    name: str
    scope: str
    cell: str
    bidirectional: bool
    tensors: dict[tuple[int, int], dict[str, str]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # tensors in a cell scope that no cuDNN layer saves
    opaque: str | None = None  # the opaque buffer beside them

    @property
    def row(self) -> Row:
        return ROW_OF_CELL[self.cell]


def find_rnns(checkpoint: Checkpoint) -> tuple[list[TF1RNN], list[str]]:
    """The canonical layers of the checkpoint, and the opaque buffers that have no canonical tensors beside them."""
    groups: dict[tuple[str, bool], TF1RNN] = {}
    for name in sorted(checkpoint.shapes):
        for bidirectional, structure in STRUCTURES.items():
            found = structure.match(name)
            if not found:
                continue
            scope, cell = found.group("scope") or "", CELL_OF_SCOPE[found.group("cell")]
            root = (TF1_BIDIRECTIONAL if bidirectional else TF1_UNIDIRECTIONAL).split("/")[0]
            group = groups.setdefault((scope, bidirectional), TF1RNN(scope or root, scope, cell, bidirectional))
            if group.cell != cell:
                raise BadInput(
                    f"{checkpoint.index}: scope {group.name!r} holds both {TF1_CELLS[group.cell]} and "
                    f"{TF1_CELLS[cell]} tensors, so it is no one cuDNN layer"
                )
            direction = TF1_DIRECTIONS.index(found.group("direction")) if bidirectional else 0
            variable, known = found.group("variable"), KNOWN_VARIABLES[cell]
            if variable in known:
                group.tensors.setdefault((int(found.group("layer")), direction), {})[variable] = name
            elif not any(variable.startswith(v + "/") for v in known):  # below a known one: an optimizer's slot
                group.unknown.append(name)
    rnns = list(groups.values())
    opaque_only = []
    for name in checkpoint.shapes:
        found = OPAQUE.match(name)
        if not found:
            continue
        beside = [r for r in rnns if r.scope == (found.group("scope") or "")]
        for rnn in beside:
            rnn.opaque = name
        if not beside:
            opaque_only.append(name)
    return rnns, sorted(opaque_only)


def choose(rnns: list[TF1RNN], opaque_only: list[str], layer: str | None, path: Path) -> list[TF1RNN]:
    """The RNN `layer` names (its scope), else the file's one RNN."""
    names = listing((r.name for r in rnns), show=repr)
    if layer is not None:
        chosen = [r for r in rnns if layer.strip("/") in (r.name, r.scope)]
        if chosen:
            return chosen[:1]
        opaque = [n for n in opaque_only if n.rsplit("/", 1)[0] == layer.strip("/")]
        if opaque:
            reason = OPAQUE_REASON.format(name=opaque[0])
            raise Unsupported(f"RNN {layer!r} in {path} cannot be converted: {reason}")
        raise BadInput(f"{path} has no cuDNN layer {layer!r}; it holds {names or 'none'}")
    if len(rnns) == 1:
        return rnns
    if not rnns:
        if opaque_only:
            raise Unsupported(f"{path} cannot be converted: " + OPAQUE_REASON.format(name=opaque_only[0]))
        lstm = TF1_UNIDIRECTIONAL.format(layer=0) + "/" + TF1_CELLS[LSTM] + "/" + TF1_KERNEL
        raise BadInput(f"{path} holds no tf.contrib.cudnn_rnn weights (no tensor like <scope>/{lstm})")
    raise several_rnns(path, f"holds {len(rnns)} RNNs ({names})")


def _rows(part: str, n_in: int, hidden: int) -> slice:
    """The rows of a stored tensor that a role takes (docs/LAYOUTS.md section 9)."""
    if part == TF1_INPUT_ROWS:
        return slice(0, n_in)
    if part == TF1_ALL_ROWS:
        return slice(None)
    return slice(n_in, n_in + hidden)


def _sizes(checkpoint: Checkpoint, rnn: TF1RNN, what: str) -> tuple[int, int]:
    """(input size, hidden size) from the first layer: the input matrix's columns are G*H."""
    row, names = rnn.row, rnn.tensors[(0, 0)]
    parts = TF1_VARIABLES[rnn.cell]["input_matrix"]
    shapes = []
    for variable, _ in parts:
        if variable not in names:
            raise BadInput(f"{what} lacks its layer 0 {variable}")
        shapes.append(checkpoint.shapes[names[variable]])
    if any(len(shape) != 2 for shape in shapes):
        raise BadInput(f"{what}: its kernels are not matrices ({shapes})")
    columns = sum(shape[1] for shape in shapes)
    hidden = columns // row.gates
    if hidden < 1 or columns % row.gates:
        raise BadInput(f"{what}: {columns} kernel columns are not {row.gates} gates")
    first_variable, first_part = parts[0]
    rows = shapes[0][0]
    n_in = rows - hidden if first_part == TF1_INPUT_ROWS else rows
    if n_in < 1:
        raise BadInput(f"{what}: {first_variable} has {rows} rows for hidden size {hidden}")
    return n_in, hidden


def refused_sizes(checkpoint: Checkpoint, rnn: TF1RNN) -> RNNSizes | None:
    """The sizes of a layer that does not convert, as far as its first layer's tensors tell them."""
    if (0, 0) not in rnn.tensors:
        return None
    try:
        n_in, hidden = _sizes(checkpoint, rnn, rnn.name)
    except RnnconvError:
        return None
    dtype = checkpoint.dtypes.get(rnn.tensors[(0, 0)].get(TF1_VARIABLES[rnn.cell]["input_matrix"][0][0], ""))
    return RNNSizes(
        input_size=min(n_in, MAX_SIZE),
        hidden_size=min(hidden, MAX_SIZE),
        num_layers=min(1 + max(layer for layer, _ in rnn.tensors), MAX_LAYERS),
        bidirectional=rnn.bidirectional,
        dtype=str(dtype) if dtype in ELEMENT_TYPE_CODES else None,
    )


def to_canonical(
    checkpoint: Checkpoint, rnn: TF1RNN, source: Provenance, options: ReadOptions | None = None
) -> CanonicalRNN:
    """The canonical RNN of one cuDNN layer's tensors, every shape checked against the spec they imply."""
    options = options or ReadOptions()
    what = f"RNN {rnn.name!r} in {checkpoint.index}"
    if rnn.unknown:
        raise Unsupported(
            f"it holds {rnn.unknown[0]}, which no tf.contrib.cudnn_rnn layer saves (a projection, or another cell)"
        )
    row = rnn.row
    num_layers, _ = held_grid(what, rnn.tensors, 2 if rnn.bidirectional else 1)
    settled = settle_nonlinearity(
        row,
        options.nonlinearity,
        rnn.name,
        f"{what} is a {row.source_class}: --nonlinearity applies to CudnnRNNTanh/CudnnRNNRelu only",
    )
    n_in, hidden = _sizes(checkpoint, rnn, what)
    dtypes = {checkpoint.dtypes.get(name) for names in rnn.tensors.values() for name in names.values()}
    if len(dtypes) != 1 or not dtypes <= set(ELEMENT_TYPE_CODES):
        raise BadInput(
            f"{what}: its tensors are of types {', '.join(sorted(map(str, dtypes)))}; rnnconv reads RNNs whose "
            f"tensors are all of one of {', '.join(ELEMENT_TYPE_CODES)}"
        )
    (dtype,) = dtypes

    def cell(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        names = rnn.tensors[(layer, direction)]
        layer_in = spec.layer_input_size(layer)
        where = f"{what}, layer {layer}" + (f" {TF1_DIRECTIONS[direction]}" if rnn.bidirectional else "")
        return StoredCell(
            fetch=_fetcher(checkpoint, rnn, names, layer_in, hidden),
            shapes=_composed_shapes(checkpoint, rnn, names, layer_in, hidden, where),
            names=row.tensors,
            where=where,
        )

    notes = [
        f"{rnn.name}: read from TF's canonical tensors ({TF1_CELLS[rnn.cell]}); summed biases split "
        f"--bias-split {options.bias_split} (TF's own restore splits them half and half)"
    ]
    if rnn.opaque:
        notes.append(f"{rnn.name}: the opaque cuDNN buffer {rnn.opaque} beside them was not read")
    found = Found(
        rnn.name,
        row,
        settled,
        input_size=n_in,
        hidden=hidden,
        dtype=str(dtype),
        cell=cell,
        layer_class=row.source_class,
        num_layers=num_layers,
        bidirectional=rnn.bidirectional,
        bias_split=options.bias_split,
        notes=notes + nonlinearity_note(rnn.name, settled, row, "the checkpoint"),
        provenance={"dtype": str(dtype)},
        handover={"keepalive": checkpoint},
    )
    return read(found, source)


def _composed_shapes(
    checkpoint: Checkpoint, rnn: TF1RNN, names: dict[str, str], n_in: int, hidden: int, what: str
) -> dict[str, tuple[int, ...]]:
    """The shape of each role's tensor as the table composes it from its parts, each part's own shape checked."""
    shapes: dict[str, tuple[int, ...]] = {}
    for role, parts in TF1_VARIABLES[rnn.cell].items():
        part_shapes: list[tuple[int, ...]] = []
        for variable, part in parts:
            if variable not in names:
                raise BadInput(f"{what}: {variable} is missing beside {next(iter(names.values()))}")
            shape = checkpoint.shapes[names[variable]]
            if part != TF1_ALL_ROWS:  # a kernel [in + H, n], split at row `in`
                if len(shape) != 2 or shape[0] != n_in + hidden:
                    raise BadInput(
                        f"{what}: {names[variable]} has shape {list(shape)}, but an input of {n_in} and hidden size "
                        f"{hidden} need [{n_in + hidden}, n]"
                    )
                shape = (len(range(n_in + hidden)[_rows(part, n_in, hidden)]), shape[1])
            if not shape or (part_shapes and shape[:-1] != part_shapes[0][:-1]):
                raise BadInput(f"{what}: {names[variable]} has shape {list(shape)}, which does not fit its layer")
            part_shapes.append(shape)
        shapes[role] = (*part_shapes[0][:-1], sum(shape[-1] for shape in part_shapes))
    return shapes


def _fetcher(
    checkpoint: Checkpoint, rnn: TF1RNN, names: dict[str, str], n_in: int, hidden: int
) -> Callable[[str], np.ndarray]:
    """Each role's tensor: its parts read (the last few kept, as writers ask for one cell's gates in turn)."""

    @functools.lru_cache(maxsize=4)
    def fetch(role: str) -> np.ndarray:
        blocks = []
        for variable, part in TF1_VARIABLES[rnn.cell][role]:
            values = checkpoint.tensor(names[variable])
            blocks.append(values[_rows(part, n_in, hidden)])
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=-1)

    return fetch
