"""TensorFlow 1 checkpoints of `tf.contrib.cudnn_rnn` layers (CudnnLSTM, CudnnGRU, CudnnRNNTanh, CudnnRNNRelu).

A checkpoint is `X.index` (a table of tensor names, dtypes, shapes and offsets) with its data in
`X.data-00000-of-00001`; either file or the prefix `X` names it. Saving such a layer writes, beside its
opaque cuDNN buffer `<scope>/opaque_kernel`, every layer's weights in TF's canonical form, under
`<scope>/rnn/multi_rnn_cell/cell_<k>/<cell>/...` (bidirectional:
`<scope>/stack_bidirectional_rnn/cell_<k>/bidirectional_rnn/{fw,bw}/<cell>/...`); those are what is read,
through the table's tf1 rows (docs/LAYOUTS.md section 9). The opaque buffer is never read: TF records no
spec for it and warns that its layout changes with the cuDNN version and the GPU, so a checkpoint that holds
only that buffer is refused.

Reading needs no TensorFlow: `_tensor_bundle` reads the index (every block's crc32c, every entry's dtype,
shape, data file, offset and size checked) and maps each tensor's values from its data file, its crc32c
checked on the other core. rnnconv writes no TF1 checkpoints. `verify` runs the
canonical weights in TensorFlow on the CPU: the LSTM through `LSTMBlockCell` (the kernel
CudnnCompatibleLSTMCell runs), the GRU and the simple RNN through their cells' equations in TF ops (TF 2 has
no CPU kernel of cuDNN's reset-after GRU).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectEntry, InspectReport, Provenance, RNNSizes
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, several_rnns
from rnnconv.formats._tensor_bundle import (
    DATA_SHARD,
    FOOTER_BYTES,
    INDEX_SUFFIX,
    TABLE_MAGIC,
    Checkpoint,
    index_file,
)
from rnnconv.formats.registry import (
    Format,
    Probe,
    ReadOptions,
    Runtime,
    Source,
    convert_each,
    inspect_entry,
    register,
)
from rnnconv.safeio import digest_in_background
from rnnconv.table.apply import rows_for
from rnnconv.table.constants import (
    ELEMENT_TYPE_CODES,
    GRU,
    LSTM,
    MAX_LAYERS,
    MAX_SIZE,
    NONLINEARITIES,
    RNN,
    TF1_ALL_ROWS,
    TF1_BIAS,
    TF1_BIDIRECTIONAL,
    TF1_CELLS,
    TF1_DIRECTIONS,
    TF1_GRU_CANDIDATE_HIDDEN,
    TF1_GRU_CANDIDATE_INPUT,
    TF1_GRU_GATES,
    TF1_INPUT_ROWS,
    TF1_KERNEL,
    TF1_OPAQUE,
    TF1_UNIDIRECTIONAL,
    TF1_VARIABLES,
)
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.reading import Found, StoredCell, nonlinearity_note, read, settle_nonlinearity
from rnnconv.table.rows import Row

KIND = "tf1-checkpoint"


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


def require_tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        raise BackendMissing(
            "running a TF1 checkpoint's weights needs TensorFlow, which is not installed (pip install 'rnnconv[keras]')"
        ) from None
    return tf


# --- the RNNs in it --------------------------------------------------------------------------------------


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
    names = ", ".join(repr(r.name) for r in rnns)
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
    cells = sorted(rnn.tensors)
    num_layers = 1 + max(layer for layer, _ in cells)
    directions = 2 if rnn.bidirectional else 1
    if len(cells) != num_layers * directions:  # a layer's cell numbers are 0..L-1, each with every direction
        missing = next((k, d) for k in range(num_layers) for d in range(directions) if (k, d) not in rnn.tensors)
        side = f" ({TF1_DIRECTIONS[missing[1]]})" if directions == 2 else ""
        raise BadInput(f"{what} lacks the tensors of layer {missing[0]}{side}")
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


# --- running the checkpoint's weights in TensorFlow, for verify -------------------------------------------------


def run_in_tensorflow(
    checkpoint: Checkpoint, rnn: TF1RNN, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
) -> tuple[dict[str, np.ndarray | None], str]:
    """y, h_n, c_n of the checkpoint's own tensors, stepped in TensorFlow (float32, CPU) as the TF cells do."""
    tf = require_tensorflow()
    x = np.asarray(inputs["x"], np.float32)
    h0, c0 = np.asarray(inputs["h0"], np.float32), inputs["c0"]
    steps, batch, _ = x.shape
    lengths = np.full(batch, steps) if inputs["lengths"] is None else np.asarray(inputs["lengths"])
    dirs = spec.num_directions
    h_n, c_n = np.zeros_like(h0), np.zeros((spec.num_layers * dirs, batch, spec.hidden_size), np.float32)
    layer_input = x
    with tf.device("/CPU:0"):
        for layer in range(spec.num_layers):
            outputs = []
            for direction in range(dirs):
                pseudo = layer * dirs + direction
                stored = rnn.tensors[(layer, direction)]
                weights = {v: tf.constant(checkpoint.tensor(n).astype(np.float32)) for v, n in stored.items()}
                cell = _cell(tf, rnn.cell, spec.mode, weights, spec.hidden_size)
                c_start = np.asarray(c0, np.float32)[pseudo] if c0 is not None else np.zeros_like(h0[pseudo])
                y, h_n[pseudo], c_n[pseudo] = _steps(tf, cell, layer_input, h0[pseudo], c_start, lengths, direction)
                outputs.append(y)
            layer_input = np.concatenate(outputs, axis=-1)
    how = {
        LSTM: "LSTMBlockCell (forget_bias=0, no clipping, no peepholes) on each layer's kernel and bias",
        GRU: "CudnnCompatibleGRUCell's equations in TF ops (TF 2 has no CPU kernel of cuDNN's GRU)",
        RNN: "BasicRNNCell's equation in TF ops",
    }[rnn.cell]
    result: dict[str, np.ndarray | None] = {"y": layer_input, "h_n": h_n, "c_n": c_n if spec.mode == LSTM else None}
    return result, f"tensorflow {tf.__version__}: {how}"


Cell = Callable[[Any, Any, Any], tuple[Any, Any]]  # (x_t, h, c) -> (new h, new c)


def _cell(tf: Any, cell: str, mode: str, w: dict[str, Any], hidden: int) -> Cell:
    """One step of the TF cell that reads these tensors."""
    if cell == LSTM:
        no_peephole = tf.zeros([hidden], tf.float32)

        def lstm(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            got = tf.raw_ops.LSTMBlockCell(
                x=x, cs_prev=c, h_prev=h, w=w[TF1_KERNEL], wci=no_peephole, wcf=no_peephole, wco=no_peephole,
                b=w[TF1_BIAS], forget_bias=0.0, cell_clip=-1.0, use_peephole=False,
            )  # fmt: skip
            return got.h, got.cs

        return lstm
    if cell == GRU:
        gates_kernel, gates_bias = w[f"{TF1_GRU_GATES}/{TF1_KERNEL}"], w[f"{TF1_GRU_GATES}/{TF1_BIAS}"]
        input_kernel = w[f"{TF1_GRU_CANDIDATE_INPUT}/{TF1_KERNEL}"]
        input_bias = w[f"{TF1_GRU_CANDIDATE_INPUT}/{TF1_BIAS}"]
        hidden_kernel = w[f"{TF1_GRU_CANDIDATE_HIDDEN}/{TF1_KERNEL}"]
        hidden_bias = w[f"{TF1_GRU_CANDIDATE_HIDDEN}/{TF1_BIAS}"]

        def gru(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
            value = tf.sigmoid(tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), gates_kernel), gates_bias))
            reset, update = tf.split(value, 2, axis=1)
            candidate = tf.nn.bias_add(tf.matmul(x, input_kernel), input_bias)
            candidate += reset * tf.nn.bias_add(tf.matmul(h, hidden_kernel), hidden_bias)
            return (1 - update) * tf.tanh(candidate) + update * h, c

        return gru
    activation = {NONLINEARITIES["tanh"]: tf.tanh, NONLINEARITIES["relu"]: tf.nn.relu}[mode]

    def simple(x: Any, h: Any, c: Any) -> tuple[Any, Any]:
        return activation(tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), w[TF1_KERNEL]), w[TF1_BIAS])), c

    return simple


def _steps(
    tf: Any, cell: Cell, x: np.ndarray, h0: np.ndarray, c0: np.ndarray, lengths: np.ndarray, direction: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One direction over the sequence: a sequence past its length keeps its state and outputs zeros (cuDNN's
    padding); the backward direction starts at each sequence's last step, as stack_bidirectional_dynamic_rnn."""
    steps, batch, _ = x.shape
    h, c = tf.constant(h0), tf.constant(c0)
    y = np.zeros((steps, batch, h0.shape[-1]), np.float32)
    for t in range(steps) if direction == 0 else range(steps - 1, -1, -1):
        live = tf.constant((t < lengths)[:, None])
        new_h, new_c = cell(tf.constant(x[t]), h, c)
        h, c = tf.where(live, new_h, h), tf.where(live, new_c, c)
        y[t] = np.asarray(tf.where(live, new_h, tf.zeros_like(new_h)))
    return y, np.asarray(h), np.asarray(c)


# --- the format -----------------------------------------------------------------------------------------------


@register
class TF1Format(Format):
    info = FORMAT_INFO["tf1"]
    sniff_order = 55  # a checkpoint's index has no magic number at its start: after the formats that do
    runtimes = (Runtime("tf1", (("tensorflow", "tensorflow"),), "TF1 checkpoints' weights in TensorFlow's cells"),)

    def sniff(self, probe: Probe) -> bool:
        index = index_file(probe.path)
        if not (probe.path.name.endswith(INDEX_SUFFIX) or DATA_SHARD.search(probe.path.name)):
            return False
        try:
            with open(index, "rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() < FOOTER_BYTES:
                    return False
                f.seek(-len(TABLE_MAGIC), os.SEEK_END)
                return f.read(len(TABLE_MAGIC)) == TABLE_MAGIC
        except OSError:
            return False

    def named(self, path: Path) -> int:
        shard = DATA_SHARD.search(path.name)  # X.data-00000-of-00001: a checkpoint's data, named by its index
        return len(shard.group()) if shard else super().named(path)

    def locate(self, path: Path) -> Path | None:
        index = path.with_name(path.name + INDEX_SUFFIX)
        return index if os.path.lexists(index) else None

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        several = options.take_all and options.layer is None and len(rnns) > 1
        chosen = rnns if several else choose(rnns, opaque_only, options.layer, checkpoint.index)
        info = Provenance(path=str(checkpoint.index.resolve()), format=KIND)
        digest = digest_in_background(checkpoint.index) if options.hash_source else None

        def canonical(rnn: TF1RNN) -> CanonicalRNN:
            converted = to_canonical(checkpoint, rnn, info, options)
            converted.digest = digest
            return converted

        source = convert_each(chosen, canonical, lambda rnn: f"RNN {rnn.name!r} in {checkpoint.index}")
        source.skipped += [(name, OPAQUE_REASON.format(name=name)) for name in opaque_only if several]
        yield source

    def inspect(self, path: Path) -> InspectReport:
        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        provenance = Provenance(path=str(checkpoint.index))
        entries = [
            inspect_entry(
                rnn.name,
                rnn.row.source_class,
                functools.partial(to_canonical, checkpoint, rnn, provenance),
                functools.partial(refused_sizes, checkpoint, rnn),
            )
            for rnn in rnns
        ]
        for name in opaque_only:
            reason = OPAQUE_REASON.format(name=name)
            entries.append(InspectEntry(name=name, layer_class="cuDNN opaque buffer", converts=False, reason=reason))
        read = {n for r in rnns for names in r.tensors.values() for n in names.values()}
        read |= {n for r in rnns for n in [r.opaque, *r.unknown] if n} | set(opaque_only)
        others = len(set(checkpoint.shapes) - read)
        notes = [f"{others} other tensors (not cuDNN layers' weights)"] if others else []
        return InspectReport(path=str(checkpoint.index), format=KIND, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        (rnn,) = choose(rnns, opaque_only, layer, checkpoint.index)
        return recorded.model_copy(update={"layer": rnn.name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The checkpoint's canonical tensors, as stored, run by TensorFlow on the CPU."""
        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        (rnn,) = choose(rnns, opaque_only, source.layer, checkpoint.index)
        found = to_canonical(checkpoint, rnn, source).spec
        same = ("input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")
        if any(getattr(found, f) != getattr(spec, f) for f in same) or found.cell != spec.cell:
            raise BadInput(
                f"RNN {rnn.name!r} in {checkpoint.index} is not the RNN the blob describes ({spec.describe()})"
            )
        result = run_in_tensorflow(checkpoint, rnn, spec, inputs)
        checkpoint.check_read()  # nothing is committed here, so the checks of the tensors run are awaited
        return result
