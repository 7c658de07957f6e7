"""What the JAX formats (Flax linen, flax.nnx, Equinox) share: cells found in a tree of params, a role's tensor
joined from a cell's Dense params and split back, the provenance sidecar, and JAX on the CPU.

A Flax cell stores each gate's matrix as its own Dense (or one Dense per side): the table's rows name each role's
tensor as the columns of those params joined in order (`table.constants.FLAX_LINEN_CELLS`), so reading joins them
and writing splits them; the row's layouts do the rest, as for every format.

A written file has a JSON beside it, `<file>.rnnconv.json`, recording where its RNN came from (the format's own
file must load into its module's tree unchanged, so it cannot hold it): `{"rnnconv.source": <provenance>}`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import InspectReport, Provenance
from rnnconv.core.dtypes import decode, element_type, encode
from rnnconv.errors import BackendMissing, BadInput, no_such_rnn, several_rnns
from rnnconv.formats import base, runtimes, sources
from rnnconv.formats._msgpack import Bfloat16Words
from rnnconv.formats.flax.wire import ORBAX_METADATA
from rnnconv.formats.reading import Found, StoredCell, nonlinearity_note, read, settle_nonlinearity
from rnnconv.formats.settings import ReadOptions
from rnnconv.safeio.inputs import regular_file
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row
from rnnconv.table.constants import (
    CUDNN_MODES,
    ELEMENT_TYPE_CODES,
    FLAX_CELL,
    FLAX_DIRECTIONS,
    FLAX_KERNEL,
    LSTM,
    MAX_LAYERS,
    NONLINEARITIES,
)
from rnnconv.table.rows import Row

SIDECAR_SUFFIX = ".rnnconv.json"
Params = Mapping[str, tuple[str, ...]]  # role -> the cell's params (Dense/param) whose columns it joins


# --- cells in a tree ---------------------------------------------------------------------------------------------


@dataclass
class TreeRNN:
    """One RNN found in a tree: where it is, its cell family and class, and its cells [layer][direction]."""

    name: str
    cell: str
    layer_class: str
    cells: list[list[Mapping[str, Any]]]

    @property
    def bidirectional(self) -> bool:
        return len(self.cells[0]) == 2


def tree_to_canonical(
    rnn: TreeRNN,
    path: Path,
    source: Provenance,
    options: ReadOptions | None,
    found_as: tuple[str, Params, str],
    notes: list[str],
) -> CanonicalRNN:
    """A Flax RNN (linen or nnx) found in a tree, read through its row: `found_as` is (the table's format name, the
    cell's params, how a note names such a file)."""
    fmt, params, a_file = found_as
    options = options or ReadOptions()
    what = f"RNN {rnn.name!r} in {path}"
    row = find_row(fmt, rnn.layer_class)
    settled = settle_nonlinearity(
        row, options.nonlinearity, rnn.name, f"{what} is a {rnn.layer_class}: --nonlinearity applies to SimpleCell"
    )
    n_in, hidden = sizes_of(rnn, params, row, what)
    dtype = dtype_of([c for layer in rnn.cells for c in layer], params, what)

    def cell(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        node = rnn.cells[layer][direction]
        where = f"{what}, layer {layer}" + (f" {FLAX_DIRECTIONS[direction]}" if rnn.bidirectional else "")
        return StoredCell(joined(node, params), joined_shapes(node, params, where), row.tensors, where)

    found = Found(
        rnn.name,
        row,
        settled,
        input_size=n_in,
        hidden=hidden,
        dtype=dtype,
        cell=cell,
        layer_class=rnn.layer_class,
        num_layers=len(rnn.cells),
        bidirectional=rnn.bidirectional,
        bias_split=options.bias_split,
        notes=notes + nonlinearity_note(rnn.name, settled, row, a_file),
        provenance={"dtype": dtype},
        handover={"origin": recorded_source(path)},
    )
    return read(found, source)


Recognise = Callable[[Mapping[str, Any]], "tuple[str, str] | None"]  # a node -> (cell family, class) or None


def find_rnns(
    tree: Mapping[str, Any],
    recognise: Recognise,
    layers: Callable[[Mapping[str, Any]], list[Any] | None],
    root: str = "",
) -> list[TreeRNN]:
    """Every RNN in a tree: a cell, an RNN module (`{cell: ...}`), a bidirectional pair, or a stack of either
    (`layers` gives a node's layers in order, or None when it is no stack); found where they are, at any depth,
    and named by their path. The whole tree is named `root` (where it is in the file: linen's `params`), else by
    its one key (nnx.RNN's `cell`, nnx.Sequential's `layers`), else by its class."""
    found: list[TreeRNN] = []

    def one_layer(node: Any) -> tuple[str, str, list[Mapping[str, Any]]] | None:
        if not isinstance(node, Mapping):
            return None
        if set(node) == {FLAX_CELL} and isinstance(node[FLAX_CELL], Mapping):
            known = recognise(node[FLAX_CELL])
            return (*known, [node[FLAX_CELL]]) if known else None
        if set(node) == set(FLAX_DIRECTIONS):
            sides = [one_layer(node[d]) for d in FLAX_DIRECTIONS]
            if all(s is not None and len(s[2]) == 1 for s in sides) and sides[0][:2] == sides[1][:2]:  # type: ignore[index]
                first, second = sides
                return (first[0], first[1], [first[2][0], second[2][0]])  # type: ignore[index]
        return None

    def walk(node: Mapping[str, Any], path: list[str]) -> None:
        if len(path) > 32:
            return
        name = "/".join(path) or root or (str(next(iter(node))) if len(node) == 1 else "")
        cell = recognise(node)
        if cell is not None:
            found.append(TreeRNN(name or cell[1], cell[0], cell[1], [[node]]))
            return
        layer = one_layer(node)
        if layer is not None:
            found.append(TreeRNN(name or layer[1], layer[0], layer[1], [layer[2]]))
            return
        stack = layers(node)
        if stack:
            parts = [one_layer(item) for item in stack]
            if all(p is not None for p in parts):
                kinds = {(p[0], p[1], len(p[2])) for p in parts}  # type: ignore[index]
                if len(kinds) == 1 and len(parts) <= MAX_LAYERS:
                    first = parts[0]
                    found.append(TreeRNN(name or first[1], first[0], first[1], [p[2] for p in parts]))  # type: ignore[index]
                    return
        for key, child in node.items():
            if isinstance(child, Mapping):
                walk(child, [*path, str(key)])

    walk(tree, [])
    return found


def choose(rnns: list[TreeRNN], layer: str | None, take_all: bool, path: Path, what: str) -> list[TreeRNN]:
    """The RNN `layer` names (its path in the tree), else every one (take_all) or the file's one."""
    if layer is not None:
        chosen = [r for r in rnns if r.name == layer.strip("/")]
        if not chosen:
            raise no_such_rnn(f"{path} has no RNN", layer, [r.name for r in rnns])
        return chosen
    if not rnns:
        raise BadInput(f"{path} holds no {what}")
    if len(rnns) == 1 or take_all:
        return rnns
    raise several_rnns(path, f"holds {len(rnns)} RNNs ({', '.join(r.name for r in rnns)})")


def is_param(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def param_at(cell: Mapping[str, Any], param: str) -> Any:
    """`Dense/param` of a cell (None when it is not there)."""
    node: Any = cell
    for key in param.split("/"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def denses(params: Params) -> dict[str, set[str]]:
    """Each Dense of a cell and the params it holds."""
    out: dict[str, set[str]] = {}
    for parts in params.values():
        for part in parts:
            dense, _, name = part.partition("/")
            out.setdefault(dense, set()).add(name)
    return out


def holds(cell: Mapping[str, Any], params: Params) -> bool:
    """Whether a node is exactly a cell with these params (its Denses and theirs, every one an array)."""
    wanted = denses(params)
    return set(cell) == set(wanted) and all(
        isinstance(cell[d], Mapping) and set(cell[d]) == names and all(is_param(cell[d][n]) for n in names)
        for d, names in wanted.items()
    )


def dtype_of(cells: Sequence[Mapping[str, Any]], params: Params, what: str) -> str:
    """The one element type of every param of these cells."""
    names = {
        "bfloat16" if isinstance(a, Bfloat16Words) else a.dtype.name
        for cell in cells
        for parts in params.values()
        for a in (param_at(cell, p) for p in parts)
    }
    if len(names) != 1 or not names <= set(ELEMENT_TYPE_CODES):
        raise BadInput(
            f"{what}: its params are of types {', '.join(sorted(names))}; rnnconv reads RNNs whose params are all "
            f"of one of {', '.join(ELEMENT_TYPE_CODES)}"
        )
    return names.pop()


def as_float(values: np.ndarray) -> np.ndarray:
    """A stored array's values (bfloat16 words widened to float32)."""
    if isinstance(values, Bfloat16Words):
        return decode(values.view(np.ndarray), element_type("bfloat16"))
    return np.asarray(values)


def joined_shapes(cell: Mapping[str, Any], params: Params, where: str) -> dict[str, tuple[int, ...]]:
    """The shape of each role's tensor, its params' columns joined; each param's own shape checked to fit."""
    shapes: dict[str, tuple[int, ...]] = {}
    for role, parts in params.items():
        found = [tuple(param_at(cell, p).shape) for p in parts]
        kernel = parts[0].endswith("/" + FLAX_KERNEL)
        for part, shape in zip(parts, found):
            if len(shape) != (2 if kernel else 1) or shape[:-1] != found[0][:-1] or shape[-1] != found[0][-1]:
                raise BadInput(f"{where}: {part} has shape {list(shape)}, which does not fit beside {parts[0]}")
        shapes[role] = (*found[0][:-1], sum(s[-1] for s in found))
    return shapes


def joined(cell: Mapping[str, Any], params: Params) -> Callable[[str], np.ndarray]:
    """Each role's tensor: its params' values, columns joined in order."""

    def fetch(role: str) -> np.ndarray:
        parts = [as_float(param_at(cell, p)) for p in params[role]]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)

    return fetch


def split(stored: Mapping[str, np.ndarray], params: Params, dtype: str, row: Row) -> dict[str, dict[str, np.ndarray]]:
    """A cell's params tree from its roles' tensors, each split into its params' columns, stored as `dtype`; a
    source without biases gets zero biases (a Flax cell always has them)."""
    etype = element_type(dtype)
    hidden = stored["recurrent_matrix"].shape[0]
    zeros = {role: np.zeros(shape) for role, shape in row.bias.shapes(row.gate_order, hidden).items()}
    cell: dict[str, dict[str, np.ndarray]] = {}
    for role, parts in params.items():
        tensor = stored[role] if role in stored else zeros[role]
        width = tensor.shape[-1] // len(parts)
        for k, part in enumerate(parts):
            dense, _, name = part.partition("/")
            words = np.ascontiguousarray(encode(tensor[..., k * width : (k + 1) * width], etype))
            cell.setdefault(dense, {})[name] = words.view(Bfloat16Words) if dtype == "bfloat16" else words
    return {dense: dict(sorted(cell[dense].items())) for dense in sorted(cell)}  # the order Flax's init gives


def sizes_of(rnn: TreeRNN, params: Params, row: Row, where: str) -> tuple[int, int]:
    """(input size, hidden size) of an RNN's first cell: the recurrent kernel is (H, G*H)."""
    shapes = joined_shapes(rnn.cells[0][0], params, where)
    rows, columns = shapes["recurrent_matrix"]
    if rows < 1 or columns != row.gates * rows:
        raise BadInput(f"{where}: its recurrent kernel has shape {[rows, columns]}, not (H, {row.gates}H)")
    return shapes["input_matrix"][0], rows


def activation_of(spec: RNNSpec) -> str:
    """The nonlinearity of a simple RNN's mode (tanh, relu)."""
    return next(name for name, mode in NONLINEARITIES.items() if mode == spec.mode)


def family(spec: RNNSpec) -> str:
    return CUDNN_MODES[spec.mode][0]


def check_same(found: RNNSpec, spec: RNNSpec, name: str, path: Path) -> None:
    same = ("input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")
    if any(getattr(found, f) != getattr(spec, f) for f in same) or found.cell != spec.cell:
        raise BadInput(f"RNN {name!r} in {path} is not the RNN the blob describes ({spec.describe()})")


def inspect_tree(path: Path, rnns: list[TreeRNN], kind: str, convert: Callable[..., CanonicalRNN]) -> InspectReport:
    provenance = Provenance(path=str(path))
    entries = [
        sources.inspect_entry(rnn.name, rnn.layer_class, functools.partial(convert, rnn, path, provenance))
        for rnn in rnns
    ]
    return InspectReport(path=str(path), format=kind, rnns=entries)


class TreeFormat(base.Format):
    """The verbs of a JAX library's file that holds a tree of params (Flax linen's variables, nnx's pure dict): its
    RNNs found where they are in the tree and picked by their path, read, inspected, and run in the library on
    JAX. A library's package has a reader (load_tree, find, to_canonical) and a runner (run_rnn), imported when used."""

    kind: ClassVar[str]  # the file kind a source records
    orbax_kind: ClassVar[str]  # the kind of an Orbax checkpoint of its tree (a folder, named by its _METADATA)
    cells: ClassVar[str]  # what a sentence calls the RNNs it holds: "Flax RNN cell"
    module: ClassVar[str]  # the library's module that runs an RNN, for the report: "nn.RNN(nn.{cell})"

    def kind_of(self, path: Path) -> str:
        return self.orbax_kind if path.name == ORBAX_METADATA else self.kind

    def locate(self, path: Path) -> Path | None:
        """An Orbax checkpoint's folder stands for its _METADATA."""
        if not path.is_dir():
            return None
        from rnnconv.formats._orbax import checkpoint_in

        return checkpoint_in(path)

    def source_parts(self, path: Path) -> list[Path]:
        """An Orbax checkpoint's every other file (its arrays' storage, the metadata Orbax's restore reads)."""
        if self.kind_of(path) != self.orbax_kind:
            return []
        from rnnconv.formats._orbax import source_parts

        return source_parts(path)

    def _module(self, verb: str) -> Any:
        """The package's reader or runner, imported when a verb needs it (sniffing imports neither)."""
        return importlib.import_module(f"{self.plugin.package}.{verb}")

    def load_tree(self, path: Path) -> Mapping[Any, Any]:
        """The file's tree, checked to be one of this library's."""
        return self._module("reader").load_tree(path)

    def find(self, tree: Mapping[Any, Any]) -> list[TreeRNN]:
        """Every RNN in the tree."""
        return self._module("reader").find(tree)

    def to_canonical(
        self, rnn: TreeRNN, path: Path, source: Provenance, options: ReadOptions | None = None
    ) -> CanonicalRNN:
        return self._module("reader").to_canonical(rnn, path, source, options)

    def run_rnn(
        self, rnn: TreeRNN, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]
    ) -> dict[str, np.ndarray | None]:
        return self._module("runner").run_rnn(rnn, spec, inputs)

    def chosen(self, path: Path, tree: Mapping[Any, Any], layer: str | None, take_all: bool = False) -> list[TreeRNN]:
        return choose(self.find(tree), layer, take_all, path, self.cells)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[sources.Source]:
        chosen = self.chosen(path, self.load_tree(path), options.layer, options.take_all)
        yield sources.read_chosen(
            path,
            self.kind_of(path),
            chosen,
            lambda rnn, info: self.to_canonical(rnn, path, info, options),
            lambda rnn: rnn.name,
            options,
            describe=lambda rnn: f"RNN {rnn.name!r} in {path}",
            things="recurrent layers",
            parts=self.source_parts(path),
        )

    def inspect(self, path: Path) -> InspectReport:
        return inspect_tree(path, self.find(self.load_tree(path)), self.kind_of(path), self.to_canonical)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == self.kind_of(path):
            return recorded
        (rnn,) = self.chosen(path, self.load_tree(path), layer)
        return recorded.model_copy(update={"layer": rnn.name, "format": self.kind_of(path)})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own params, run by the library's cells in JAX on the CPU: an Orbax checkpoint's as Orbax
        itself restores them, once rnnconv's reading has checked it (so the run does not rest on that reading)."""
        tree = self.load_tree(path)
        if self.kind_of(path) == self.orbax_kind:
            tree = self._module("reader").restored(path)
        (rnn,) = self.chosen(path, tree, source.layer)
        check_same(self.to_canonical(rnn, path, source).spec, spec, rnn.name, path)
        ran = runtimes.versions_of(self.runtimes[0].modules, self.info.extra, f"running {self.title} files")
        how = f"jax {ran['jax']}, flax {ran['flax']}: {self.module.format(cell=rnn.layer_class)} on the file's params"
        return self.run_rnn(rnn, spec, inputs), how


# --- where the RNN came from: a JSON beside the file ------------------------------------------------------------


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def sidecar_text(rnn: CanonicalRNN, output: Path) -> str:
    """The JSON beside a written file: `{"rnnconv.source": <the source record>}` (sources.source_record)."""
    return json.dumps({sources.SOURCE_KEY: json.loads(sources.source_record(rnn, output))}, indent=2) + "\n"


def recorded_source(path: Path) -> Provenance | None:
    """The source recorded beside a file rnnconv wrote (None when there is no such JSON)."""
    beside = sidecar(path)
    if not os.path.lexists(beside):
        return None
    if regular_file(beside) > sources.SOURCE_RECORD_LIMIT:
        raise BadInput(f"{beside} is larger than any source record rnnconv writes")
    try:
        document = json.loads(beside.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise BadInput(f"{beside} is not JSON") from None
    if not isinstance(document, dict) or sources.SOURCE_KEY not in document:
        raise BadInput(f"{beside} has no {sources.SOURCE_KEY!r} entry")
    return sources.read_source_record(json.dumps(document[sources.SOURCE_KEY]), beside)


def write_recorded(rnn: CanonicalRNN, path: Path, data: bytes, force: bool) -> list[Path]:
    """A JAX library's file of `rnn` (its bytes, `data`) and, beside it, where the RNN came from: both or neither."""
    beside = sidecar(path)
    with atomic_outputs([path, beside], force) as (tmp, tmp_beside):
        tmp_beside.write_text(sidecar_text(rnn, path))
        tmp.write_bytes(data)
    return [path, beside]


# --- JAX on the CPU ---------------------------------------------------------------------------------------------


# The first line of a usage line: JAX on the CPU, as `require_jax` runs it (a GPU's default precision differs).
ON_THE_CPU = 'import os; os.environ.setdefault("JAX_PLATFORMS", "cpu")   # as verify runs it; before jax is imported\n'


def require_jax(extra: str) -> Any:
    """jax, on the CPU (a run must not take a GPU, nor depend on which one)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
    except ImportError:
        raise BackendMissing(f"running it needs JAX, which is not installed (pip install 'rnnconv[{extra}]')") from None
    return jax


def sequence_inputs(
    spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x (T, B, I), h0, c0 ((layers*dirs, B, H), zeros where not given) and each sequence's length, float32."""
    x = np.asarray(inputs["x"], np.float32)
    steps, batch, _ = x.shape
    pseudo = spec.num_layers * spec.num_directions
    h0 = inputs.get("h0")
    c0 = inputs.get("c0")
    zeros = np.zeros((pseudo, batch, spec.hidden_size), np.float32)
    lengths = inputs.get("lengths")
    return (
        x,
        zeros if h0 is None else np.asarray(h0, np.float32),
        zeros if c0 is None else np.asarray(c0, np.float32),
        np.full(batch, steps, np.int32) if lengths is None else np.asarray(lengths, np.int32),
    )


Carry = Any  # what a cell carries from step to step: (c, h) for an LSTM, h for the others
RunCell = Callable[[int, int, np.ndarray, Carry, np.ndarray], tuple[Carry, np.ndarray]]


def run_stack(jax: Any, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None], run: RunCell) -> dict[str, Any]:
    """y, h_n, c_n of an RNN run in JAX on the CPU a layer and a direction at a time, batch-major (float32):
    `run(layer, direction, layer input, initial carry, lengths)` gives the final carry and y of one, its backward
    direction run as nn.Bidirectional runs it (reversed, outputs kept in order)."""
    x, h0, c0, lengths = sequence_inputs(spec, inputs)
    lstm = spec.mode == LSTM
    h_n, c_n = np.zeros_like(h0), np.zeros_like(c0)
    layer_input = x.transpose(1, 0, 2)  # batch-major, nn.RNN's default
    with jax.default_device(jax.devices("cpu")[0]):
        for layer in range(spec.num_layers):
            outputs = []
            for direction in range(spec.num_directions):
                pseudo = layer * spec.num_directions + direction
                carry, y = run(layer, direction, layer_input, (c0[pseudo], h0[pseudo]) if lstm else h0[pseudo], lengths)
                if lstm:
                    c_n[pseudo], h_n[pseudo] = np.asarray(carry[0]), np.asarray(carry[1])
                else:
                    h_n[pseudo] = np.asarray(carry)
                outputs.append(np.asarray(y))
            layer_input = np.concatenate(outputs, axis=-1)
    y = padded_zero(layer_input.transpose(1, 0, 2), lengths)
    return {"y": y, "h_n": h_n, "c_n": c_n if lstm else None}


def padded_zero(y: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(T, B, H) outputs with the steps past each sequence's length zeroed (cuDNN's padding)."""
    steps = np.arange(y.shape[0])[:, None]
    return np.where((steps < lengths[None, :])[..., None], y, np.float32(0))
