"""Name the mistake behind a mismatch: try the usual ones on the blob, see which one explains it.

Users lose days finding which gate or direction was mislaid. Each candidate reads
the blob as if one usual mistake had been made in writing it (two gates swapped,
a wrong gate order, the directions swapped, matrices stored transposed, the input
and recurrent biases swapped or merged, two gates' blocks swapped in one stored tensor
alone, as the file stores them), runs it through the numpy reference and compares with
the source's outputs. The first candidate that agrees is reported.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import ParamKey, RNNSpec, StoredAs
from rnnconv.core.compare import Inputs, Outputs, compare
from rnnconv.core.reference import forward
from rnnconv.core.report_contracts import Diagnosis, Tolerance
from rnnconv.errors import listing
from rnnconv.table.apply import held_blocks, row_for_mode
from rnnconv.table.constants import BIAS_KINDS, DIRECTION_WORDS, GATE_NAMES, MATRIX_KINDS

Param = Callable[[ParamKey], np.ndarray]


@dataclass
class Candidate:
    description: str  # "gates i and f look swapped": what the blob looks like it went through
    param: Param


def _where(layer: int, direction: int, spec: RNNSpec) -> str:
    text = f"layer {layer}"
    return text + (f" {DIRECTION_WORDS[direction]}" if spec.bidirectional else "")


def _gate(spec: RNNSpec, gate: str) -> str:
    return f"{gate} ({GATE_NAMES[spec.cell][gate]})"


def _cells(spec: RNNSpec) -> list[tuple[int, int]]:
    return [(layer, d) for layer in range(spec.num_layers) for d in range(spec.num_directions)]


def _permuted(
    base: Param, mapping: dict[str, str], cells: set[tuple[int, int]], kinds: set[str] | None = None
) -> Param:
    """Read gate g from the blob's slot of mapping[g] in the given (layer, direction) cells (of `kinds` only)."""

    def param(key: ParamKey) -> np.ndarray:
        if (key.layer, key.direction) in cells and key.gate in mapping and (kinds is None or key.kind in kinds):
            return base(ParamKey(key.layer, key.direction, key.kind, mapping[key.gate]))
        return base(key)

    return param


def _transposed(base: Param, kinds: set[str], cells: set[tuple[int, int]]) -> Param:
    """Read matrices as if their (rows, cols) block held the transposed matrix's bytes."""

    def param(key: ParamKey) -> np.ndarray:
        value = base(key)
        if key.kind in kinds and (key.layer, key.direction) in cells:
            rows, cols = value.shape
            return value.reshape(-1).reshape(cols, rows).T
        return value

    return param


def _directions_swapped(base: Param, layers: set[int]) -> Param:
    def param(key: ParamKey) -> np.ndarray:
        if key.layer in layers:
            return base(ParamKey(key.layer, 1 - key.direction, key.kind, key.gate))
        return base(key)

    return param


def _biases(base: Param, how: str, cells: set[tuple[int, int]]) -> Param:
    def param(key: ParamKey) -> np.ndarray:
        if key.kind not in BIAS_KINDS or (key.layer, key.direction) not in cells:
            return base(key)
        input_side, recurrent_side = BIAS_KINDS
        other = ParamKey(key.layer, key.direction, recurrent_side if key.kind == input_side else input_side, key.gate)
        if how == "swapped":
            return base(other)
        side = input_side if how == "merged into the input side" else recurrent_side
        return base(key) + base(other) if key.kind == side else np.zeros_like(base(key))

    return param


def _stored_as(spec: RNNSpec, stored_as: StoredAs | None) -> StoredAs:
    """How the file stores the RNN; a cuDNN weight space's own tensors (W, R, bW, bR of each cell) where unsaid."""
    if stored_as is not None:
        return stored_as
    row = row_for_mode("cudnn", spec.mode, reset_after=spec.reset_after)[0]
    return StoredAs(row, {(layer, d): (row.tensors, f"layer {layer}") for layer, d in _cells(spec)})


def _tensor(spec: RNNSpec, stored_as: StoredAs, role: str, cell: tuple[int, int]) -> str:
    """A stored tensor of one cell in words: its name in the file where that names the cell (weight_ih_l0), else its
    name in the format, direction d's part of it as the table writes it (W[d]: W[1]), and where the cell is (W[0] of
    node '/lstm/LSTM'; W of layer 1 (reverse))."""
    names, where = stored_as.cells[cell]
    name = names.get(role, role)
    if name != stored_as.row.tensors.get(role, role):
        return name
    direction = f" ({DIRECTION_WORDS[cell[1]]})" if spec.bidirectional and "[d]" not in name else ""
    return f"{name.replace('[d]', f'[{cell[1]}]')} of {where}{direction}"


def swaps_in_one_tensor(spec: RNNSpec, base: Param, stored_as: StoredAs | None) -> Iterator[Candidate]:
    """Two gates' blocks swapped in one stored tensor alone, as the file stores its cells (a person edits one tensor:
    weight_ih_l0's rows of i and f exchanged, the other tensors right): in that tensor of every cell, then of each."""
    stored_as = _stored_as(spec, stored_as)
    cells = _cells(spec)
    for role, blocks in held_blocks(stored_as.row).items():
        for a, b in itertools.combinations(spec.gates, 2):
            kinds = {kind for kind, gate in blocks if gate == a and (kind, b) in blocks}
            if not kinds:
                continue
            swapped = f"gates {_gate(spec, a)} and {_gate(spec, b)} look swapped in"
            if len(cells) > 1:
                each = listing(_tensor(spec, stored_as, role, cell) for cell in cells)
                yield Candidate(
                    f"{swapped} every cell's {role.replace('_', ' ')} alone ({each})",
                    _permuted(base, {a: b, b: a}, set(cells), kinds),
                )
            for cell in cells:
                yield Candidate(
                    f"{swapped} {_tensor(spec, stored_as, role, cell)} alone",
                    _permuted(base, {a: b, b: a}, {cell}, kinds),
                )


def candidates(spec: RNNSpec, base: Param, stored_as: StoredAs | None = None) -> Iterator[Candidate]:
    """The usual mistakes, simplest and most common first; then a swap in one stored tensor, as the file (as
    `stored_as` says; a cuDNN weight space where None) stores them."""
    cells = _cells(spec)
    everywhere = set(cells)
    scope_all = "in every layer" + (" and direction" if spec.bidirectional else "") if len(cells) > 1 else ""
    gates = spec.gates
    for a, b in itertools.combinations(gates, 2):
        yield Candidate(
            f"gates {_gate(spec, a)} and {_gate(spec, b)} look swapped {scope_all}".rstrip(),
            _permuted(base, {a: b, b: a}, everywhere),
        )
    for order in itertools.permutations(gates):
        moved = [g for g, o in zip(gates, order) if g != o]
        if len(moved) > 2:
            mapping = dict(zip(gates, order))
            yield Candidate(
                f"the gates look stored in the order {', '.join(order)} instead of {', '.join(gates)} "
                f"{scope_all}".rstrip(),
                _permuted(base, mapping, everywhere),
            )
    if spec.bidirectional:
        yield Candidate(
            "the forward and reverse directions look swapped" + (" in every layer" if spec.num_layers > 1 else ""),
            _directions_swapped(base, set(range(spec.num_layers))),
        )
        if spec.num_layers > 1:
            for layer in range(spec.num_layers):
                yield Candidate(
                    f"the forward and reverse directions of layer {layer} look swapped",
                    _directions_swapped(base, {layer}),
                )
    w, r = MATRIX_KINDS
    for kinds, text in (({w}, "input matrices"), ({r}, "recurrent matrices"), ({w, r}, "matrices")):
        yield Candidate(f"the {text} look stored transposed {scope_all}".rstrip(), _transposed(base, kinds, everywhere))
    for how in ("swapped", "merged into the input side", "merged into the recurrent side"):
        yield Candidate(
            f"the input and recurrent biases look {how} {scope_all}".rstrip(), _biases(base, how, everywhere)
        )
    if len(cells) > 1:
        for layer, d in cells:
            where = _where(layer, d, spec)
            for a, b in itertools.combinations(gates, 2):
                yield Candidate(
                    f"gates {_gate(spec, a)} and {_gate(spec, b)} of {where} look swapped",
                    _permuted(base, {a: b, b: a}, {(layer, d)}),
                )
            for kinds, text in (({w}, "input matrix"), ({r}, "recurrent matrix")):
                yield Candidate(
                    f"the {text} of {where} looks stored transposed", _transposed(base, kinds, {(layer, d)})
                )
            yield Candidate(
                f"the input and recurrent biases of {where} look swapped", _biases(base, "swapped", {(layer, d)})
            )
    yield from swaps_in_one_tensor(spec, base, stored_as)


def diagnose(
    blob: Blob,
    inputs: Inputs,
    want: Outputs,
    tol: Tolerance,
    budget_seconds: float = 120.0,
    subject: str = "the blob",
    source: str = "the source",
) -> Diagnosis:
    """The first usual mistake that makes the blob compute what the source computes, or why none was found.
    `subject` and `source` name the two files in the message (a model.onnx verified is no blob)."""
    spec = blob.spec
    cache: dict[ParamKey, np.ndarray] = {}

    def base(key: ParamKey) -> np.ndarray:
        if key not in cache:
            cache[key] = np.asarray(blob.param(key), dtype=np.float64)
        return cache[key]

    start = time.monotonic()
    tried = 0
    for candidate in candidates(spec, base, blob.stored_as):
        if time.monotonic() - start > budget_seconds:
            return Diagnosis(
                found=False,
                tried=tried,
                message=f"no explanation found among the {tried} likely mistakes tried in "
                f"{budget_seconds:.0f} s (the search stopped there)",
            )
        tried += 1
        try:
            y, h_n, c_n = forward(spec, candidate.param, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
        except ValueError:  # a reading that does not fit the shapes (e.g. transposing a projected R)
            continue
        result = compare(spec, {"y": y, "h_n": h_n, "c_n": c_n}, want, tol, inputs["lengths"])
        if result.match:
            text = candidate.description
            return Diagnosis(
                found=True,
                tried=tried,
                mistake=text,
                message=f"{text[0].upper()}{text[1:]}: {subject} matches {source} when read that way",
            )
    return Diagnosis(
        found=False,
        tried=tried,
        message=f"none of the {tried} likely mistakes tried (swapped gates, gate orders, swapped "
        f"directions, transposed matrices, swapped or merged biases, gates swapped in one stored tensor) explains the "
        f"difference",
    )
