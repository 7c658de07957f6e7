"""Writing one RNN in a format's storage: the walk every writer shares, the inverse of `reading`.

A writer asks for one layer and direction's stored tensors as its row lays them out (`stored`): each a
`StoredTensor`, made only when asked, one of three ways:

- `assembled()`: built from the canonical tensors by the row's layouts, in the RNN's work type (float32, or
  float64 for float64), or in the type a writer's runtime computes in;
- `words(etype)`: as `etype`'s storage words, a run at a time in storage order. A tensor its layout declares to be
  cuDNN's blocks one after the other, as they are (`blocks`: a matrix stacked by rows as cuDNN stacks it, a tensor
  per gate, biases kept apart) is written block by block, each block copied file to file where the source holds it
  as those very words (`in_source`: a state_dict, a weight space), blocks that follow each other there joined into
  one run; any other is assembled, then encoded;
- `values()`: the run of the source file that holds it whole, whatever its element type (the writer encodes it),
  else its values assembled.

And what writers share besides: a path in a usage line (`literal`), the one RNN a file holds (`only_rnn`), a model's
weights file beside it that must not be written over (`weights_free`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.dtypes import ElementType, decode, element_type, encode, stored_words
from rnnconv.errors import BadInput, listing
from rnnconv.safeio.inputs import FileArray
from rnnconv.table.apply import gate_loaders, stored_shapes
from rnnconv.table.constants import BIAS_KINDS, MATRIX_ROLES, PROJECTION, Kind
from rnnconv.table.layouts import PROJECTION_AS_IS, Block
from rnnconv.table.rows import Row
from rnnconv.table.transpose import Pieces


def in_source(rnn: CanonicalRNN, key: ParamKey, etype: ElementType | None = None) -> FileArray | None:
    """One of cuDNN's blocks still in the source file, when the source holds its kind's gates stacked in cuDNN's
    order (a state_dict, a weight space): as `etype`'s words (never bfloat16's: a source's are widened when read),
    or, without `etype`, whatever its element type."""
    stacked = rnn.stacked(key.layer, key.direction, key.kind)
    if not isinstance(stacked, FileArray):
        return None
    if etype is not None and (stacked.dtype != etype.storage or etype.name == "bfloat16"):
        return None
    gates = 1 if key.kind == Kind.P else len(rnn.spec.gates)
    index = 0 if key.kind == Kind.P else rnn.spec.gates.index(key.gate)
    shape = rnn.spec.param_shape(key)
    if stacked.shape != (gates * shape[0], *shape[1:]):
        return None
    block: FileArray = stacked[index * shape[0] : (index + 1) * shape[0]]
    return block


def columns_in_source(
    rnn: CanonicalRNN, layer: int, direction: int, kind: str, etype: ElementType
) -> tuple[np.ndarray | FileArray, Pieces] | None:
    """All gates of one kind of one layer and direction as the column blocks of one stored matrix (a Keras kernel)
    of `etype`'s words (never bfloat16's: a source's are widened when read): the matrix and, for `transpose_into`,
    where each gate's columns start and the rows of cuDNN's stacked blocks (its gate order) they fill."""
    found = rnn.columns(layer, direction, kind)
    if found is None:
        return None
    matrix, order = found
    hidden, width = rnn.spec.param_shape(ParamKey(layer, direction, kind, rnn.spec.gates[0]))
    if etype.name == "bfloat16" or matrix.dtype != etype.storage or sorted(order) != sorted(rnn.spec.gates):
        return None
    if matrix.shape != (width, len(order) * hidden):
        return None
    return matrix, [(order.index(gate) * hidden, hidden, k * hidden) for k, gate in enumerate(rnn.spec.gates)]


def arrays_in_source(rnn: CanonicalRNN) -> list[FileArray]:
    """The stacked tensors of `rnn` still in its source file (those `in_source` takes its blocks from)."""
    stacks = dict.fromkeys((key.layer, key.direction, key.kind) for key in rnn.spec.param_keys())
    return [array for where in stacks if isinstance(array := rnn.stacked(*where), FileArray)]


def joined(runs: list[np.ndarray | FileArray]) -> list[np.ndarray | FileArray]:
    """Runs with those that follow each other in one file made one (one copy where there were several)."""
    out: list[np.ndarray | FileArray] = []
    for run in runs:
        last = out[-1] if out else None
        if (
            isinstance(run, FileArray)
            and isinstance(last, FileArray)
            and (last.path, last.dtype, last.shape[1:]) == (run.path, run.dtype, run.shape[1:])
            and last.offset + last.nbytes == run.offset
        ):
            out[-1] = FileArray(last.path, last.offset, last.dtype, (last.shape[0] + run.shape[0], *run.shape[1:]))
        else:
            out.append(run)
    return out


@dataclass(frozen=True)
class StoredTensor:
    """One stored tensor of one layer and direction, as the row lays it out: its key (a role, or role/gate), its
    shape, and the blocks of cuDNN's it is one after the other, as they are (None: it must be assembled)."""

    rnn: CanonicalRNN
    row: Row
    layer: int
    direction: int
    key: str
    shape: tuple[int, ...]
    blocks: tuple[Block, ...] | None
    work: Any = None  # the type it is assembled in [default: the RNN's work type]

    def assembled(self) -> np.ndarray:
        held = self.rnn.stored(self.row, self.layer, self.direction, {self.key}, self.work, bias=True)
        return held[self.key]

    def _block(self, block: Block) -> ParamKey:
        return ParamKey(self.layer, self.direction, *block)

    def words(self, etype: ElementType) -> list[np.ndarray | FileArray]:
        if self.blocks is None:
            return [stored_words(self.assembled(), etype)]
        runs = []
        for block in self.blocks:
            key = self._block(block)
            found = in_source(self.rnn, key, etype)
            runs.append(found if found is not None else stored_words(self.rnn.param(key), etype))
        return joined(runs)

    def values(self) -> np.ndarray | FileArray:
        if self.blocks is not None:
            runs = joined([in_source(self.rnn, self._block(block)) for block in self.blocks])  # type: ignore[misc]
            if len(runs) == 1 and isinstance(runs[0], FileArray):
                return runs[0].reshape(self.shape)
        return self.assembled()


def stored(
    rnn: CanonicalRNN, row: Row, layer: int, direction: int, work: Any = None, bias: bool | None = None
) -> dict[str, StoredTensor]:
    """One layer and direction's stored tensors, by key, as `row` lays them out, none made yet; with `bias`, its
    biases whether it has any or not (zeros: a format that always has them)."""
    spec = rnn.spec
    has_bias = spec.bias if bias is None else bias
    shapes = stored_shapes(
        row, spec.hidden_size, spec.layer_input_size(layer), spec.output_size, spec.proj_size, has_bias
    )
    roles = {key: role for role in MATRIX_ROLES for key in row.matrix.shapes(role, row.gate_order, 1, 1)}
    out = {}
    for key, shape in shapes.items():
        blocks: Collection[Block] | None
        if key in roles:
            blocks = row.matrix.blocks(key, roles[key], row.gate_order)
        elif key == PROJECTION:
            blocks = [(Kind.P, "")] if row.projection == PROJECTION_AS_IS else None
        else:
            blocks = row.bias.blocks(key, row.gate_order)
        out[key] = StoredTensor(rnn, row, layer, direction, key, shape, None if blocks is None else tuple(blocks), work)
    return out


def rounded_sums(rnn: CanonicalRNN, row: Row, dtype: str) -> tuple[float, CanonicalRNN]:
    """How far `row`'s stored biases move when written in `dtype` (their sums bW + bR have no exact value in a
    type as narrow as a half-precision source's own), and the RNN whose biases are those written values: what a file
    of `row` in `dtype` holds."""
    spec = rnn.spec
    etype = element_type(dtype)
    roles = tuple(row.bias.shapes(row.gate_order, spec.hidden_size))
    loaders = dict(rnn.loaders)
    worst = 0.0
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            exact = rnn.stored(row, layer, direction, keys=roles, bias=True)
            held = {role: decode(encode(exact[role], etype), etype).astype(exact[role].dtype) for role in roles}
            worst = max(worst, *(float(np.max(np.abs(held[role] - exact[role]), initial=0.0)) for role in roles))
            cell = gate_loaders(row, spec.hidden_size, held.__getitem__, has_bias=True)
            for gate in spec.gates:
                for kind in BIAS_KINDS:
                    loaders[ParamKey(layer, direction, kind, gate)] = cell[(kind, gate)]
    return worst, dataclasses.replace(rnn, loaders=loaders)


def literal(path: Path) -> str:
    """A path as a Python string literal, for a usage line (which a user pastes as code)."""
    return json.dumps(str(path), ensure_ascii=False)


def each_rnn_lines(rnns: list[CanonicalRNN], constructor: Callable[[RNNSpec], str], load: str) -> list[str]:
    """Usage lines building each RNN of a state_dict of several (PyTorch's, PaddlePaddle's) from its keys under its
    name: `rnns[NAME] = <constructor>; rnns[NAME].<load>({...})`."""
    lines = ["rnns = {}"]
    for rnn in rnns:
        name, prefix = json.dumps(rnn.name), json.dumps(f"{rnn.name}.")
        lines.append(
            f"rnns[{name}] = {constructor(rnn.spec)}; rnns[{name}].{load}("
            f"{{k.removeprefix({prefix}): v for k, v in state.items() if k.startswith({prefix})}})"
        )
    return lines


def only_rnn(rnns: list[CanonicalRNN], what: str) -> CanonicalRNN:
    """The RNN to write to a file that holds one (`what`: "an .onnx"), or why there is none."""
    if len(rnns) != 1:
        raise BadInput(
            f"{what} written by rnnconv holds one RNN, but {len(rnns)} were selected "
            f"({listing(r.name for r in rnns)}); pick one with --layer"
        )
    return rnns[0]


# Whose a model's weights beside it (X.bin) may be, told by the file beside them: an IR, an ncnn model, a sidecar.
WEIGHTS_OWNERS = (
    (".xml", "the weights of {}"),
    (".param", "the weights of {}"),
    (".bin.json", "a cuDNN blob with its sidecar {}"),
)


def weights_free(model: Path, weights: Path, force: bool) -> None:
    """Refuse, before anything is written, the weights file a model keeps beside it under its own name (an IR's or
    an ncnn model's X.bin) where that file exists: which file wants it, whose it is, and how to choose another."""
    if force or not os.path.lexists(weights):
        return
    owners = [
        what.format(owner) for suffix, what in WEIGHTS_OWNERS
        if (owner := weights.with_name(weights.stem + suffix)) != model and os.path.lexists(owner)
    ]  # fmt: skip
    whose = f" ({owners[0]})" if owners else ""
    other = model.with_name(f"{model.stem}_{model.suffix[1:]}{model.suffix}")
    raise BadInput(
        f"{model} keeps its weights in {weights}, which already exists{whose}: pass --force to replace it, or give "
        f"the {model.suffix} another name (-o {other} writes {other.with_suffix(weights.suffix)})"
    )
