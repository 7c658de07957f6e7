"""Reading one RNN out of a file: the walk every format's `to_canonical` shares.

A format finds its layer's row, its sizes and, per layer and direction, its stored
tensors; it says what it found in a `Found`, and `read` does the rest, the same way
for every format:

- `settle`: what the file does not store (the row's `unstored` settings) is stated by
  the user, assumed (the row's default, recorded in the provenance) or refused (a
  sentence saying why the default would be wrong for this file); then the cuDNN mode;
- `read`: the spec, each cell's stored shapes checked against it, each cell's gate
  loaders (nothing is read yet), the notes every format writes alike ("every bias
  slot is zero"), the provenance, and the hand-over to `CanonicalRNN`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rnnconv.core.canonical import CanonicalRNN, RNNSpec, StoredAs
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput, Unsupported, listing
from rnnconv.table.apply import check_shapes, gate_loaders, mode_for, stored_shapes
from rnnconv.table.constants import DIRECTION_WORDS, MAX_LAYERS, NONLINEARITIES
from rnnconv.table.layouts import DEFAULT_BIAS_SPLIT, Fetch
from rnnconv.table.rows import Row

STATED, ASSUMED = "stated", "assumed"


@dataclass(frozen=True)
class Settled:
    """A layer's settings with those its file does not store settled, and the cuDNN mode they give."""

    config: dict[str, Any]
    mode: str
    assumptions: list[str]  # "<name>: <setting>=<value>" for each default taken without the file saying so
    how: dict[str, str]  # each unstored setting settled here: STATED or ASSUMED

    def setting(self, row: Row, key: str) -> Any:
        return row.setting(self.config, key)


def settle(
    row: Row,
    config: Mapping[str, Any],
    name: str,
    stated: Mapping[str, Any] | None = None,
    *,
    unstored: Iterable[str] | None = None,
    labels: Mapping[str, str] | None = None,
    refusals: Mapping[str, str] | None = None,
    assumed: Iterable[str] = (),
    context: Iterable[str] = (),
) -> Settled:
    """Settle each setting the file does not store (`unstored`, by default the row's): the value the user
    stated, else a refusal where `refusals` has a sentence for it (the default is known to be wrong for
    this file), else the row's default, recorded as an assumption under its `labels` name. `assumed` are
    assumptions the format made before; `context` is added to a refusal of the settled config."""
    config = dict(config)
    assumptions, how = list(assumed), {}
    for key in row.unstored if unstored is None else unstored:
        value = (stated or {}).get(key)
        if value is not None:
            config[key], how[key] = value, STATED
        elif key in (refusals or {}):
            raise Unsupported((refusals or {})[key])
        else:
            assumptions.append(f"{name}: {(labels or {}).get(key, key)}={row.setting(config, key)}")
            how[key] = ASSUMED
    try:
        mode = mode_for(row, config)
    except Unsupported as exc:
        raise Unsupported("; ".join([str(exc), *context])) from None
    return Settled(config, mode, assumptions, how)


def settle_nonlinearity(row: Row, nonlinearity: str | None, name: str, refusal: str) -> Settled:
    """Settle a row whose file may not store its nonlinearity (PyTorch's nn.RNN, TF1's CudnnRNN*): the one the
    user stated, or the row's default recorded as an assumption. `refusal` is the sentence for a nonlinearity
    stated where the row has none."""
    if nonlinearity is not None and nonlinearity not in NONLINEARITIES:
        raise BadInput(f"unknown nonlinearity {nonlinearity!r} (choose {' or '.join(NONLINEARITIES)})")
    if nonlinearity is not None and nonlinearity not in row.modes:
        raise BadInput(refusal)
    return settle(row, {}, name, {"activation": nonlinearity}, labels={"activation": "nonlinearity"})


def nonlinearity_note(name: str, settled: Settled, row: Row, holder: str) -> list[str]:
    """The note on a nonlinearity `holder` (a state_dict, the checkpoint) does not store, where the row's has none."""
    if "activation" not in row.unstored:
        return []
    stated = settled.how["activation"] == STATED
    how = "stated with --nonlinearity" if stated else "assumed (state it with --nonlinearity)"
    return [f"{name}: nonlinearity {settled.setting(row, 'activation')}, {how}: {holder} does not store it"]


def held_grid(name: str, held: Iterable[tuple[int, int]], directions: int | None = None) -> tuple[int, bool]:
    """The layers and directions of an RNN that its file's keys give (not a config): `held`, the (layer, direction)
    cells it holds tensors of, must be every layer from 0 with the same directions each (`directions` where the file
    states them), else the RNN is refused: parameters that stop short (a shard of a checkpoint, a state_dict cut
    down) are never read as a smaller RNN. Its layer count and whether it is bidirectional."""
    cells = set(held)
    num_layers = 1 + max(layer for layer, _ in cells)
    if num_layers > MAX_LAYERS:
        raise BadInput(f"{name} names layer {num_layers - 1}: more than the {MAX_LAYERS} layers an RNN may have")
    sides = directions or (2 if any(direction for _, direction in cells) else 1)
    missing = [(k, d) for k in range(num_layers) for d in range(sides) if (k, d) not in cells]
    if missing:
        said = []
        for k in sorted({k for k, _ in missing}):
            gone = [d for m, d in missing if m == k]
            said.append(f"layer {k}" if len(gone) == sides else f"layer {k}'s {DIRECTION_WORDS[gone[0]]} direction")
        shape = f"{num_layers}-layer{' bidirectional' if sides == 2 else ''}"
        raise BadInput(
            f"{name} is incomplete: its tensors are those of a {shape} RNN less {listing(said)} (its parameters "
            f"stop short: a shard of a sharded checkpoint, or a state_dict cut down), and rnnconv never reads the "
            f"rest as a smaller RNN; give the whole checkpoint"
        )
    return num_layers, sides == 2


@dataclass(frozen=True)
class StoredCell:
    """One layer and direction's stored tensors, as a format found them."""

    fetch: Fetch  # role -> the stored tensor (anything sliceable); nothing is read before a loader runs
    shapes: Mapping[str, tuple[int, ...]]  # role -> the stored tensor's shape
    names: Mapping[str, str]  # role -> the tensor's name in the file, for messages
    where: str  # the cell in words, for messages
    # A format's own check once the shapes agree, given the roles and shapes the row expects.
    check: Callable[[Mapping[str, tuple[int, ...]]], None] | None = None


@dataclass
class Found:
    """What a format found of one RNN: the rest of the way to the canonical form is `read`'s."""

    name: str
    row: Row
    settled: Settled
    input_size: int
    hidden: int
    dtype: str
    cell: Callable[[int, int, RNNSpec], StoredCell]  # (layer, direction, spec) -> that cell's stored tensors
    layer_class: str  # as provenance records it
    num_layers: int = 1
    bidirectional: bool = False
    proj: int = 0
    has_bias: bool = True
    bias_split: str = DEFAULT_BIAS_SPLIT  # how a single stored bias is split into cuDNN's two
    without_bias: str = ""  # why the file has no bias (its setting), for the note that every bias slot is zero
    without_bias_aside: str = ""  # what follows that note
    notes: list[str] = field(default_factory=list)  # before the bias note
    later_notes: list[str] = field(default_factory=list)  # after it
    provenance: dict[str, Any] = field(default_factory=dict)  # format-specific provenance fields
    handover: dict[str, Any] = field(default_factory=dict)  # CanonicalRNN's format-specific arguments


def read(found: Found, source: Provenance) -> CanonicalRNN:
    """The canonical RNN of what a format found: every cell's shapes checked against the spec, loaders built."""
    row, settled = found.row, found.settled
    spec = RNNSpec(
        settled.mode,
        found.input_size,
        found.hidden,
        found.num_layers,
        found.bidirectional,
        found.proj,
        found.dtype,
        found.has_bias,
        reset_after=row.reset_after,
    )
    loaders = {}
    names = {}
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            cell = found.cell(layer, direction, spec)
            names[(layer, direction)] = (cell.names, cell.where)
            expected = stored_shapes(
                row, spec.hidden_size, spec.layer_input_size(layer), spec.output_size, spec.proj_size, spec.bias
            )
            check_shapes(row, cell.shapes, expected, cell.names, cell.where)
            if cell.check:
                cell.check(expected)
            loaders[(layer, direction)] = gate_loaders(
                row, spec.hidden_size, cell.fetch, spec.bias, found.bias_split, spec.proj_size
            )
    notes = list(found.notes)
    if not spec.bias:
        notes.append(f"{found.name}: {found.without_bias}, so every bias slot is zero{found.without_bias_aside}")
    notes += found.later_notes
    info = source.model_copy(
        update={
            "layer": found.name,
            "layer_class": found.layer_class,
            "bias_split": found.bias_split if spec.bias and row.bias.summed else None,
            "assumptions": settled.assumptions or None,
            **found.provenance,
        }
    )
    return CanonicalRNN.from_cell_loaders(
        found.name, spec, loaders, source=info, notes=notes, stored_as=StoredAs(row, names), **found.handover
    )
