"""What an ExecuTorch program holds of RNNs, as far as it tells: in each method, the runs of constants shaped as an
nn.LSTM's, nn.GRU's or nn.RNN's parameters in the order torch.export lifts them (each layer and direction's
weight_ih, weight_hh and, with biases, bias_ih and bias_hh), and the delegates whose payloads hold a lowered
program's weights; each listed with why it does not convert."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rnnconv.errors import listing
from rnnconv.formats.executorch.program import Constant, Method, Program
from rnnconv.table.apply import rows_for

ROWS = {row.gates: row for row in rows_for("executorch")}
HAND_OVER = "convert the checkpoint it was exported from instead (the module's state_dict, saved with torch.save or "
HAND_OVER += "safetensors)"


@dataclass(frozen=True)
class Listed:
    """One thing of a program that is, or may be, an RNN: its name, class and why it does not convert."""

    name: str
    layer_class: str
    reason: str


@dataclass(frozen=True)
class _Cell:
    input_size: int
    hidden: int
    gates: int
    count: int  # constants it takes: its two matrices, and its two biases where it has them


def _cell(constants: list[Constant], at: int, like: _Cell | None) -> _Cell | None:
    """The cell whose parameters begin at `at`: (G*H, in) and (G*H, H) float matrices, then (G*H,) twice where it has
    biases; like `like` (its hidden size, gates and biases) after the first."""
    pair = constants[at : at + 2]
    if len(pair) < 2 or any(c.dtype is None or len(c.shape) != 2 for c in pair) or pair[0].dtype != pair[1].dtype:
        return None
    (rows, input_size), (rows_hh, hidden) = pair[0].shape, pair[1].shape
    if rows != rows_hh or not hidden or rows % hidden or rows // hidden not in ROWS:
        return None
    biases = constants[at + 2 : at + 4]
    with_bias = len(biases) == 2 and all(c.shape == (rows,) and c.dtype == pair[0].dtype for c in biases)
    found = _Cell(input_size, hidden, rows // hidden, 4 if with_bias else 2)
    if like is not None and (found.hidden, found.gates, found.count) != (like.hidden, like.gates, like.count):
        return None
    return found


def shaped_runs(method: Method) -> list[Listed]:
    """The runs of a method's constants whose shapes are one RNN's parameters, each as inspect lists it."""
    constants = [c for c in method.constants if c.dtype is not None]
    listed, at = [], 0
    while at < len(constants):
        first = _cell(constants, at, None)
        if first is None:
            at += 1
            continue
        cells, end = [first], at + first.count
        while (after := _cell(constants, end, first)) is not None:
            cells.append(after)
            end += after.count
        directions = 2 if len(cells) > 1 and cells[1].input_size == first.input_size else 1
        fed = [first.input_size] * directions + [directions * first.hidden] * (len(cells) - directions)
        taken = next((k for k, (cell, size) in enumerate(zip(cells, fed)) if cell.input_size != size), len(cells))
        layers = max(1, taken // directions)
        taken = layers * directions if taken >= directions else 1
        end = at + sum(c.count for c in cells[:taken])
        row = ROWS[first.gates]
        shape = f"{layers}-layer{' bidirectional' if directions == 2 else ''} nn.{row.source_class}'s"
        reason = (
            f"its constants {constants[at].value} to {constants[end - 1].value} are shaped as a {shape} parameters "
            f"(input {first.input_size}, hidden {first.hidden}{'' if first.count == 4 else ', no biases'}), but "
            f"{row.refusal}"
        )
        name = f"{method.name}:{constants[at].value}-{constants[end - 1].value}"
        listed.append(Listed(name, f"nn.{row.source_class}", reason))
        at = end
    return listed


def listed(program: Program) -> list[Listed]:
    """Everything of the program inspect lists: its RNN-shaped constants, and each delegated method."""
    found = []
    for method in program.methods:
        external = [c.name for c in method.constants if c.external]
        if external:
            found.append(
                Listed(
                    method.name,
                    "ExecuTorch method",
                    f"its constants ({listing(external)}) lie in an external .ptd data file, which rnnconv does not "
                    f"read: {HAND_OVER}",
                )
            )
            continue
        found += shaped_runs(method)
        if method.delegates:
            backends = listing(sorted(set(method.delegates)))
            found.append(
                Listed(
                    method.name,
                    "ExecuTorch method",
                    f"its weights lie inside {len(method.delegates)} {backends} delegate payloads, packed for that "
                    f"backend and without names, so nothing in it says which tensor is which: {HAND_OVER}",
                )
            )
    return found


def refusal(path: Path, program: Program) -> str:
    """Why a program does not convert, in one sentence."""
    found = listed(program)
    if not found:
        return (
            f"{path} is an ExecuTorch program with no RNN in it: no method's constants are shaped as an nn.LSTM's, "
            f"nn.GRU's or nn.RNN's parameters, and none is delegated"
        )
    more = f" (and {len(found) - 1} more: rnnconv inspect lists them)" if len(found) > 1 else ""
    return f"{path} is an ExecuTorch program, which rnnconv lists but does not convert: {found[0].reason}{more}"
