"""A TF1 checkpoint's RNNs read without TensorFlow: the canonical tensors saved beside each cuDNN layer's opaque
buffer, and the variables of tf.compat.v1's own cells (BasicLSTMCell, LSTMCell, GRUCell, alone, in a MultiRNNCell or
bidirectional), found by their names; each RNN's canonical form through the table's tf1 rows (every part's shape
checked), an LSTM cell's forget_bias (not stored: the .meta graph's, or stated) joined to its f gate's bias."""

from __future__ import annotations

import functools
import math
import os
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
from rnnconv.formats.tf1.wire import (
    TF1_BIDIRECTIONAL,
    TF1_CELLS,
    TF1_CUDNN_CELLS,
    TF1_DIRECTIONS,
    TF1_MULTI,
    TF1_OPAQUE,
    TF1_OWN_CELLS,
    TF1_UNIDIRECTIONAL,
    meta_graph_of,
)
from rnnconv.table.apply import rows_for
from rnnconv.table.constants import (
    BIAS,
    ELEMENT_TYPE_CODES,
    LSTM,
    MANTISSA_BITS,
    MAX_LAYERS,
    MAX_SIZE,
    PROJECTION,
    TF1_INPUT_ROWS,
    TF1_KERNEL,
    TF1_PEEPHOLES,
    TF1_RECURRENT_ROWS,
    TF1_TRANSPOSED,
    TF1_VARIABLES,
)
from rnnconv.table.rows import Row


def _template(pattern: str) -> str:
    """A regex for one of the table's scope templates: {layer} a number, {direction} fw or bw."""
    regex = re.escape(pattern).replace(re.escape("{layer}"), r"(?P<layer>\d+)")
    return regex.replace(re.escape("{direction}"), "(?P<direction>" + "|".join(TF1_DIRECTIONS) + ")")


CLASS_OF_SCOPE = {scope: layer_class for layer_class, scope in TF1_CELLS.items()}


def _cells(cells: dict[str, str]) -> str:
    return "(?P<cell>" + "|".join(map(re.escape, cells.values())) + ")"


def _structure(where: str, cells: dict[str, str]) -> re.Pattern[str]:
    """A tensor's name below an RNN's scope: `where` (a template of the table's) then a cell scope and its variable."""
    middle = f"{_template(where)}/" if where else ""
    return re.compile(rf"^(?:(?P<scope>.+)/)?{middle}{_cells(cells)}/(?P<variable>.+)$")


# How a tensor's name reads, the first that matches: (structure, bidirectional, the RNN's name when it has no scope).
STRUCTURES = (
    (_structure(TF1_UNIDIRECTIONAL, TF1_CUDNN_CELLS), False, TF1_UNIDIRECTIONAL.split("/")[0]),
    (_structure(TF1_BIDIRECTIONAL, TF1_CUDNN_CELLS), True, TF1_BIDIRECTIONAL.split("/")[0]),
    (_structure(TF1_BIDIRECTIONAL, TF1_OWN_CELLS), True, TF1_BIDIRECTIONAL.split("/")[0]),
    (_structure(TF1_MULTI, TF1_OWN_CELLS), False, TF1_MULTI.split("/")[0]),
    (_structure("{direction}", TF1_OWN_CELLS), True, ""),
    (_structure("", TF1_OWN_CELLS), False, ""),
)
OPAQUE = re.compile(rf"^(?:(?P<scope>.+)/)?{re.escape(TF1_OPAQUE)}$")
ROW_OF_CLASS: dict[str, Row] = {row.source_class: row for row in rows_for("tf1")}
KNOWN_VARIABLES = {cell: {v for parts in roles.values() for v, _ in parts} for cell, roles in TF1_VARIABLES.items()}
FORGET_GATE = "f"
OPAQUE_REASON = (
    "it holds only the opaque cuDNN buffer {name}, without the canonical tensors TF saves beside it: TF records no "
    "spec for that buffer and its layout depends on the cuDNN version and GPU that wrote it (restore it into its "
    "CudnnLSTM/CudnnGRU/CudnnRNN layer in TensorFlow 1 and save again: the layer's saveable writes the canonical "
    "tensors)"
)


@dataclass
class TF1RNN:
    """One RNN's tensors: its scope, its layer class (the table row's), and per (layer, direction) variable -> name."""

    name: str
    scope: str
    cell: str  # the layer class: CudnnLSTM, ..., BasicLSTMCell, LSTMCell, GRUCell
    bidirectional: bool
    tensors: dict[tuple[int, int], dict[str, str]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # tensors in a cell scope that no cuDNN layer saves
    opaque: str | None = None  # the opaque buffer beside them

    @property
    def row(self) -> Row:
        return ROW_OF_CLASS[self.cell]

    @property
    def own(self) -> bool:
        """One of tf.compat.v1's own cells, not a cuDNN layer's canonical tensors."""
        return self.cell in TF1_OWN_CELLS


def _structure_of(name: str) -> tuple[re.Match[str], int, bool, str] | None:
    """How a tensor's name reads: the first structure's match, its index, direction count and RNN name."""
    for kind, (pattern, bidirectional, root) in enumerate(STRUCTURES):
        found = pattern.match(name)
        if found:
            return found, kind, bidirectional, root
    return None


def find_rnns(checkpoint: Checkpoint) -> tuple[list[TF1RNN], list[str]]:
    """The RNNs of the checkpoint, and the opaque buffers that have no canonical tensors beside them."""
    groups: dict[tuple[str, int], TF1RNN] = {}
    for name in sorted(checkpoint.shapes):
        match = _structure_of(name)
        if match is None:
            continue
        found, kind, bidirectional, root = match
        scope, cell = found.group("scope") or "", CLASS_OF_SCOPE[found.group("cell")]
        group = groups.setdefault((scope, kind), TF1RNN(scope or root or TF1_CELLS[cell], scope, cell, bidirectional))
        if group.cell != cell:
            raise BadInput(
                f"{checkpoint.index}: scope {group.name!r} holds both {TF1_CELLS[group.cell]} and "
                f"{TF1_CELLS[cell]} tensors, so it is no one RNN"
            )
        direction = TF1_DIRECTIONS.index(found.group("direction")) if bidirectional else 0
        layer = int(found.group("layer")) if "layer" in found.re.groupindex else 0
        variable, known = found.group("variable"), KNOWN_VARIABLES[cell]
        if variable in known:
            group.tensors.setdefault((layer, direction), {})[variable] = name
        elif not any(variable.startswith(v + "/") for v in known):  # below a known one: an optimizer's slot
            group.unknown.append(name)
    rnns = list(groups.values())
    opaque_only = []
    for name in checkpoint.shapes:
        opaque = OPAQUE.match(name)
        if not opaque:
            continue
        beside = [r for r in rnns if r.scope == (opaque.group("scope") or "")]
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
        raise BadInput(f"{path} has no RNN {layer!r}; it holds {names or 'none'}")
    if len(rnns) == 1:
        return rnns
    if not rnns:
        if opaque_only:
            raise Unsupported(f"{path} cannot be converted: " + OPAQUE_REASON.format(name=opaque_only[0]))
        lstm = TF1_UNIDIRECTIONAL.format(layer=0) + "/" + TF1_CELLS["CudnnLSTM"] + "/" + TF1_KERNEL
        cell = TF1_CELLS["BasicLSTMCell"] + "/" + TF1_KERNEL
        raise BadInput(
            f"{path} holds no tf.contrib.cudnn_rnn weights and no tf.compat.v1 cell's (no tensor like <scope>/{lstm} "
            f"or <scope>/{cell})"
        )
    raise several_rnns(path, f"holds {len(rnns)} RNNs ({names})")


def _rows(part: str, n_in: int, n_rec: int) -> slice:
    """The rows of a stored tensor that a role takes (docs/LAYOUTS.md section 9): a kernel [in + n_rec, n] splits."""
    if part == TF1_INPUT_ROWS:
        return slice(0, n_in)
    if part == TF1_RECURRENT_ROWS:
        return slice(n_in, n_in + n_rec)
    return slice(None)


def _sizes(checkpoint: Checkpoint, rnn: TF1RNN, what: str) -> tuple[int, int, int]:
    """(input size, hidden size, projection size or 0) from the first layer: the input matrix's columns are G*H, an
    LSTMCell's projection [H, P]."""
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
    proj = 0
    projection = TF1_VARIABLES[rnn.cell].get(PROJECTION)
    if projection and projection[0][0] in names:
        shape = checkpoint.shapes[names[projection[0][0]]]
        if len(shape) != 2 or shape[0] != hidden or not 1 <= shape[1] < hidden:
            raise BadInput(
                f"{what}: {names[projection[0][0]]} has shape {list(shape)}, not [{hidden}, P] with P < {hidden}"
            )
        proj = shape[1]
    first_variable, first_part = parts[0]
    rows = shapes[0][0]
    n_in = rows - (proj or hidden) if first_part == TF1_INPUT_ROWS else rows
    if n_in < 1:
        raise BadInput(f"{what}: {first_variable} has {rows} rows for hidden size {hidden}")
    return n_in, hidden, proj


def refused_sizes(checkpoint: Checkpoint, rnn: TF1RNN) -> RNNSizes | None:
    """The sizes of a layer that does not convert, as far as its first layer's tensors tell them."""
    if (0, 0) not in rnn.tensors:
        return None
    try:
        n_in, hidden, proj = _sizes(checkpoint, rnn, rnn.name)
    except RnnconvError:
        return None
    dtype = checkpoint.dtypes.get(rnn.tensors[(0, 0)].get(TF1_VARIABLES[rnn.cell]["input_matrix"][0][0], ""))
    return RNNSizes(
        input_size=min(n_in, MAX_SIZE),
        hidden_size=min(hidden, MAX_SIZE),
        num_layers=min(1 + max(layer for layer, _ in rnn.tensors), MAX_LAYERS),
        bidirectional=rnn.bidirectional,
        proj_size=proj,
        dtype=str(dtype) if dtype in ELEMENT_TYPE_CODES else None,
    )


def forget_biases(
    checkpoint: Checkpoint, rnn: TF1RNN, options: ReadOptions
) -> tuple[dict[tuple[int, int], float], str]:
    """Each cell's forget_bias, of an LSTM of tf.compat.v1's own cells (none for the others), and where it came from:
    stated, else the .meta graph's; else refused naming --forget-bias (TensorFlow's default is never assumed)."""
    if not rnn.own or rnn.row.cell != LSTM:
        return {}, ""
    if options.forget_bias is not None:
        if not math.isfinite(options.forget_bias):
            raise BadInput(f"--forget-bias {options.forget_bias} is not a finite number")
        return dict.fromkeys(rnn.tensors, options.forget_bias), "stated with --forget-bias"
    from rnnconv.formats.tf1.meta_graph import forget_biases as in_graph

    meta = meta_graph_of(checkpoint.index)
    unsaid = ""
    if not os.path.lexists(meta):
        unsaid = f"no .meta graph ({meta.name}) is beside it"
    else:
        found = in_graph(meta, set(checkpoint.shapes))
        kernels = {cell: names.get(TF1_KERNEL, "") for cell, names in rnn.tensors.items()}
        missing = sorted(kernel for kernel in kernels.values() if kernel not in found)
        odd = sorted(kernel for kernel in kernels.values() if kernel in found and not math.isfinite(found[kernel]))
        if odd:
            raise BadInput(f"{meta} adds a forget bias of {found[odd[0]]} to {odd[0]}'s f gate: a damaged graph")
        if not missing:
            return {cell: found[kernel] for cell, kernel in kernels.items()}, f"from {meta.name}"
        unsaid = f"its .meta graph {meta.name} does not say the one of {listing(missing, show=repr)}"
    raise Unsupported(
        f"it is a {rnn.cell}, which adds its forget_bias to the f gate when it runs: the checkpoint does not store it "
        f"and {unsaid}; state it with --forget-bias (TensorFlow's default is 1.0, never assumed)"
    )


def to_canonical(
    checkpoint: Checkpoint, rnn: TF1RNN, source: Provenance, options: ReadOptions | None = None
) -> CanonicalRNN:
    """The canonical RNN of one RNN's tensors, every shape checked against the spec they imply."""
    options = options or ReadOptions()
    what = f"RNN {rnn.name!r} in {checkpoint.index}"
    peepholes = [n for n in rnn.unknown if n.rsplit("/", 1)[-1] in TF1_PEEPHOLES]
    if rnn.own and peepholes:
        raise Unsupported(
            f"it is an LSTMCell with use_peepholes=True ({peepholes[0]}): cuDNN's LSTM, rnnconv's one form, has no "
            f"peephole weights, so no format it writes can hold it"
        )
    if rnn.unknown:
        saves = "tf.compat.v1 cell" if rnn.own else "tf.contrib.cudnn_rnn layer"
        raise Unsupported(f"it holds {rnn.unknown[0]}, which no {saves} saves (a projection, or another cell)")
    row = rnn.row
    num_layers, _ = held_grid(what, rnn.tensors, 2 if rnn.bidirectional else 1)
    settled = settle_nonlinearity(
        row,
        options.nonlinearity,
        rnn.name,
        f"{what} is a {row.source_class}: --nonlinearity applies to CudnnRNNTanh/CudnnRNNRelu only",
    )
    n_in, hidden, proj = _sizes(checkpoint, rnn, what)
    dtypes = {checkpoint.dtypes.get(name) for names in rnn.tensors.values() for name in names.values()}
    if len(dtypes) != 1 or not dtypes <= set(ELEMENT_TYPE_CODES):
        raise BadInput(
            f"{what}: its tensors are of types {', '.join(sorted(map(str, dtypes)))}; rnnconv reads RNNs whose "
            f"tensors are all of one of {', '.join(ELEMENT_TYPE_CODES)}"
        )
    (dtype,) = dtypes
    biases, told = forget_biases(checkpoint, rnn, options)
    if any(biases.values()) and MANTISSA_BITS[str(dtype)] < MANTISSA_BITS["float32"]:
        raise Unsupported(
            f"{what} holds {dtype} tensors: its forget bias added to the f gate's {dtype} bias would be rounded"
        )

    def cell(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        names = rnn.tensors[(layer, direction)]
        layer_in, n_rec = spec.layer_input_size(layer), spec.output_size
        where = what + _place(rnn, layer, direction)
        forget = (row.gate_order.index(FORGET_GATE), biases[(layer, direction)]) if biases else (0, 0.0)
        return StoredCell(
            fetch=_fetcher(checkpoint, rnn, names, layer_in, n_rec, forget),
            shapes=_composed_shapes(checkpoint, rnn, names, layer_in, n_rec, where),
            names=row.tensors,
            where=where,
        )

    if rnn.own:
        notes = [
            f"{rnn.name}: read from the {rnn.cell} variables; its bias split --bias-split {options.bias_split}; its "
            "activation taken as tanh, the cell's default (neither the checkpoint nor rnnconv's reading of the .meta "
            "says it: a cell made with another activation converts wrong)"
        ]
    else:
        notes = [
            f"{rnn.name}: read from TF's canonical tensors ({TF1_CELLS[rnn.cell]}); summed biases split "
            f"--bias-split {options.bias_split} (TF's own restore splits them half and half)"
        ]
    if biases:
        values = [
            f"{biases[cell]:g}{_place(rnn, *cell) if len(set(biases.values())) > 1 else ''}" for cell in sorted(biases)
        ]
        notes.append(f"{rnn.name}: forget_bias {listing(dict.fromkeys(values))} ({told}) added to the f gate's bias")
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
        proj=proj,
        bias_split=options.bias_split,
        notes=notes + nonlinearity_note(rnn.name, settled, row, "the checkpoint"),
        provenance={"dtype": str(dtype)},
        handover={"keepalive": checkpoint},
    )
    return read(found, source)


def _place(rnn: TF1RNN, layer: int, direction: int) -> str:
    return f" (layer {layer}" + (f" {TF1_DIRECTIONS[direction]})" if rnn.bidirectional else ")")


def _composed_shapes(
    checkpoint: Checkpoint, rnn: TF1RNN, names: dict[str, str], n_in: int, n_rec: int, what: str
) -> dict[str, tuple[int, ...]]:
    """The shape of each role's tensor as the table composes it from its parts, each part's own shape checked."""
    shapes: dict[str, tuple[int, ...]] = {}
    for role, parts in TF1_VARIABLES[rnn.cell].items():
        if role == PROJECTION and parts[0][0] not in names:  # an LSTMCell without num_proj
            continue
        part_shapes: list[tuple[int, ...]] = []
        for variable, part in parts:
            if variable not in names:
                raise BadInput(f"{what}: {variable} is missing beside {next(iter(names.values()))}")
            shape = checkpoint.shapes[names[variable]]
            if part in (TF1_INPUT_ROWS, TF1_RECURRENT_ROWS):  # a kernel [in + n_rec, n], split at row `in`
                if len(shape) != 2 or shape[0] != n_in + n_rec:
                    raise BadInput(
                        f"{what}: {names[variable]} has shape {list(shape)}, but an input of {n_in} and a recurrent "
                        f"input of {n_rec} need [{n_in + n_rec}, n]"
                    )
                shape = (len(range(n_in + n_rec)[_rows(part, n_in, n_rec)]), shape[1])
            elif part == TF1_TRANSPOSED:
                shape = shape[::-1]
            if not shape or (part_shapes and shape[:-1] != part_shapes[0][:-1]):
                raise BadInput(f"{what}: {names[variable]} has shape {list(shape)}, which does not fit its layer")
            part_shapes.append(shape)
        shapes[role] = (*part_shapes[0][:-1], sum(shape[-1] for shape in part_shapes))
    return shapes


def _fetcher(
    checkpoint: Checkpoint, rnn: TF1RNN, names: dict[str, str], n_in: int, n_rec: int, forget: tuple[int, float]
) -> Callable[[str], np.ndarray]:
    """Each role's tensor: its parts read (the last few kept, as writers ask for one cell's gates in turn); the
    forget bias (gate k, value) added to gate k of the bias, where the cell adds it when it runs."""

    @functools.lru_cache(maxsize=4)
    def fetch(role: str) -> np.ndarray:
        blocks = []
        for variable, part in TF1_VARIABLES[rnn.cell][role]:
            values = checkpoint.tensor(names[variable])
            blocks.append(values.T if part == TF1_TRANSPOSED else values[_rows(part, n_in, n_rec)])
        joined = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=-1)
        gate, value = forget
        if role == BIAS and value:
            hidden = joined.shape[-1] // rnn.row.gates
            joined = joined.copy()
            joined[gate * hidden : (gate + 1) * hidden] += joined.dtype.type(value)
        return joined

    return fetch
