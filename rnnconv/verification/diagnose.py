"""Name the mistake behind a mismatch: try the usual ones on the blob, see which one explains it.

Users lose days finding which gate or direction was mislaid. Each candidate reads
the blob as if one usual mistake had been made in writing it (two gates swapped,
a wrong gate order, the directions swapped, matrices stored transposed, the input
and recurrent biases swapped or merged), runs it through the numpy reference and
compares with the source's outputs. The first candidate that agrees is reported.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.compare import Inputs, Outputs, compare
from rnnconv.core.contracts import Diagnosis, Tolerance
from rnnconv.core.reference import forward
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


def _permuted(base: Param, mapping: dict[str, str], cells: set[tuple[int, int]]) -> Param:
    """Read gate g from the blob's slot of mapping[g] in the given (layer, direction) cells."""

    def param(key: ParamKey) -> np.ndarray:
        if (key.layer, key.direction) in cells and key.gate in mapping:
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


def candidates(spec: RNNSpec, base: Param) -> Iterator[Candidate]:
    """The usual mistakes, simplest and most common first."""
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


def diagnose(blob: Blob, inputs: Inputs, want: Outputs, tol: Tolerance, budget_seconds: float = 120.0) -> Diagnosis:
    """The first usual mistake that makes the blob compute what the source computes, or why none was found."""
    spec = blob.spec
    cache: dict[ParamKey, np.ndarray] = {}

    def base(key: ParamKey) -> np.ndarray:
        if key not in cache:
            cache[key] = np.asarray(blob.param(key), dtype=np.float64)
        return cache[key]

    start = time.monotonic()
    tried = 0
    for candidate in candidates(spec, base):
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
                message=f"{text[0].upper()}{text[1:]}: the blob matches the source when read that way",
            )
    return Diagnosis(
        found=False,
        tried=tried,
        message=f"none of the {tried} likely mistakes tried (swapped gates, gate orders, swapped "
        f"directions, transposed matrices, swapped or merged biases) explains the difference",
    )
