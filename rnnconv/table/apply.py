"""Applying the table: pick a row for a layer, and move tensors between a row's storage and cuDNN's blocks.

`gate_loaders` turns a format's stored tensors into cuDNN's per-gate blocks
(lazily: nothing is read until a loader is called), `assemble_stored` is its
inverse, `recipe` prints the same mapping for people. Model-specific maths
stays in the format modules; these functions know only the row's columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, Unsupported, cut
from rnnconv.table.constants import (
    BIAS_KINDS,
    CUDNN_GATES,
    CUDNN_TENSOR_NAMES,
    INPUT_MATRIX,
    KIND_OF_ROLE,
    MATRIX_ROLES,
    PADDLE_CELLS,
    PROJECTION,
    RECURRENT_MATRIX,
    TORCH_REVERSE_SUFFIX,
    Kind,
)
from rnnconv.table.layouts import DEFAULT_BIAS_SPLIT, PROJECTION_TRANSPOSED, Loader
from rnnconv.table.rows import KERAS_ERAS, TABLE, KerasEra, Row


def rows_for(fmt: str, source_class: str | None = None) -> list[Row]:
    return [r for r in TABLE if r.format == fmt and (source_class is None or r.source_class == source_class)]


def tensor_name(row: Row, role: str, layer: int, direction: int, directions: int) -> str:
    """A role's stored tensor's name in one layer and direction, every placeholder its row's names hold filled:
    {layer}, PyTorch's {suffix} (the reverse direction's) and Paddle's {cell} (its cells' attribute)."""
    suffix = TORCH_REVERSE_SUFFIX if direction else ""
    return row.tensors.get(role, role).format(layer=layer, suffix=suffix, cell=PADDLE_CELLS[directions][direction])


def classes_of(fmt: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.source_class for r in TABLE if r.format == fmt))


def find_row(fmt: str, source_class: str, config: Mapping[str, Any] | None = None) -> Row:
    """The row for a layer class, chosen among its variants by the config (missing keys: the format's default)."""
    config = config or {}
    candidates = rows_for(fmt, source_class)
    if not candidates:
        raise Unsupported(
            f"{fmt} layer class {source_class!r} is not a recurrent layer rnnconv knows "
            f"(known: {', '.join(classes_of(fmt))})"
        )
    for row in candidates:
        if all(row.setting(config, key) == value for key, value in row.when.items()):
            return row
    chosen = {key: row.setting(config, key) for row in candidates for key in row.when}
    raise Unsupported(f"no layout for a {fmt} {source_class} with {chosen}")


def version_number(version: str | None) -> tuple[int, int, int] | None:
    """The number of a version string ("2.0.8", "2.1.6-tf", "3.6.0"), or None when it names none."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def keras_era(version: str | None) -> KerasEra | None:
    """The era of a Keras version string ("2.0.8", "2.1.6-tf", "3.6.0"), or None when it names none."""
    number = version_number(version)
    if number is None:
        return None
    tf_suffix = (version or "").endswith("-tf")
    return next((era for era in KERAS_ERAS if era.holds(number, tf_suffix)), None)


def row_for_mode(fmt: str, mode: str, cell_class: bool = False, reset_after: bool = True) -> tuple[Row, str]:
    """The first adapter row of a format that runs a cuDNN mode (a GRU's with its reset gate applied after the
    recurrent product, or with `reset_after` False before it), and the activation it needs for it."""
    for row in TABLE:
        if (
            row.format == fmt
            and row.adapter
            and not row.refusal
            and row.source_class.endswith("Cell") == cell_class
            and row.reset_after == reset_after
        ):
            for activation, runs in row.modes.items():
                if runs == mode:
                    return row, activation
    before = "" if reset_after else " with its reset gate applied before the recurrent product"
    raise Unsupported(f"{fmt} has no layer that computes cuDNN's {mode}{before}")


def settings_for_mode(fmt: str, mode: str, reset_after: bool = True) -> tuple[str, dict[str, Any]]:
    """The layer class of a format that computes a cuDNN mode (a GRU's reset gate applied after the recurrent
    product, or before it), and the config it needs for it."""
    row, activation = row_for_mode(fmt, mode, reset_after=reset_after)
    settings = {**row.defaults, "activation": activation}
    settings.update({key: allowed[0] for key, allowed in row.requires.items()})
    settings.update(row.when)
    return row.source_class, settings


def refusal_reason(row: Row, config: Mapping[str, Any]) -> str | None:
    """Why a layer with this row and config cannot run in cuDNN, or None."""
    if row.refusal:
        return row.refusal
    activation = row.setting(config, "activation")
    if not _hashable(activation) or activation not in row.modes:
        return (
            f"activation={_show(activation)}: cuDNN's {row.source_class} can only compute {' or '.join(row.modes)} here"
        )
    for key, allowed in row.requires.items():
        value = row.setting(config, key)
        if not _hashable(value) or value not in allowed:
            extra = ""
            if value == "hard_sigmoid":
                extra = " (and hard_sigmoid is not even one function: 0.2x+0.5 in Keras 2, x/6+0.5 in Keras 3)"
            return (
                f"{key}={_show(value)}: cuDNN's {row.source_class} computes "
                f"{' or '.join(map(str, allowed))} only{extra}"
            )
    return None


def mode_for(row: Row, config: Mapping[str, Any]) -> str:
    """The cuDNN mode a layer of this row computes, or Unsupported saying why it has none."""
    reason = refusal_reason(row, config)
    if reason:
        raise Unsupported(reason)
    return row.modes[row.setting(config, "activation")]


def _hashable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def _show(value: Any) -> str:
    if isinstance(value, dict):
        inner = value.get("config")
        name = value.get("class_name") or (inner.get("name") if isinstance(inner, dict) else None)
        return cut(repr(name if isinstance(name, str) else "custom"))
    return cut(repr(value)) if _hashable(value) else f"a {type(value).__name__}"  # a file's value: any length


# --- stored tensors <-> cuDNN per-gate blocks -------------------------------------------------
# The row's matrix and bias layouts (table/layouts.py) do the work; these functions walk one cell.


def stored_shapes(
    row: Row, hidden: int, n_in: int, n_rec: int, proj: int = 0, has_bias: bool = True
) -> dict[str, tuple[int, ...]]:
    """Shape of each stored tensor (by role) for the given sizes."""
    shapes = {
        **row.matrix.shapes(INPUT_MATRIX, row.gate_order, hidden, n_in),
        **row.matrix.shapes(RECURRENT_MATRIX, row.gate_order, hidden, n_rec),
    }
    if has_bias:
        shapes.update(row.bias.shapes(row.gate_order, hidden))
    if proj:
        shapes[PROJECTION] = (hidden, proj) if row.projection == PROJECTION_TRANSPOSED else (proj, hidden)
    return shapes


def gate_loaders(
    row: Row,
    hidden: int,
    fetch: Callable[[str], Any],
    has_bias: bool,
    bias_split: str = DEFAULT_BIAS_SPLIT,
    proj: int = 0,
) -> dict[tuple[str, str], Loader]:
    """Loaders of cuDNN's per-gate tensors, keyed (kind, gate): kind is W, R, bW, bR or P.

    `fetch(role)` returns the stored tensor for a role (numpy, h5py dataset or anything
    sliceable). Nothing is read until a loader is called, so a writer can pull one
    block at a time.
    """
    order = row.gate_order
    loaders: dict[tuple[str, str], Loader] = {}
    for gate in CUDNN_GATES[row.cell]:
        for role in MATRIX_ROLES:
            loaders[(KIND_OF_ROLE[role], gate)] = row.matrix.load(fetch, role, order, gate, hidden)
        biases = (
            row.bias.load(fetch, order, gate, hidden, bias_split) if has_bias else (_zeros(hidden),) * len(BIAS_KINDS)
        )
        loaders.update(((kind, gate), load) for kind, load in zip(BIAS_KINDS, biases))
    if proj and row.projection == PROJECTION_TRANSPOSED:
        loaders[(Kind.P, "")] = lambda: np.ascontiguousarray(np.asarray(fetch(PROJECTION)[:, :]).T)
    elif proj:
        loaders[(Kind.P, "")] = lambda: np.asarray(fetch(PROJECTION)[:, :])
    return loaders


def _zeros(hidden: int) -> Loader:
    return lambda: np.zeros(hidden, dtype=np.float32)


def assemble_stored(
    row: Row,
    hidden: int,
    n_in: int,
    n_rec: int,
    param: Callable[[str, str], np.ndarray],
    has_bias: bool = True,
    proj: int = 0,
    dtype: Any = np.float32,
    keys: Collection[str] | None = None,
) -> dict[str, np.ndarray]:
    """The stored tensors of one cell (by role) from cuDNN's per-gate blocks: every one, or those of `keys` (and
    the others its layout fills with them).

    The inverse of `gate_loaders`. A single-bias format gets bW + bR, which acts as the two in an LSTM and a simple
    RNN (a GRU with a single bias has no cuDNN form); the written type may round it (`Format.losses_in`).
    """
    order = row.gate_order

    def wanted(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        return (
            {}
            if keys is not None and not set(shapes) & set(keys)
            else {k: np.zeros(s, dtype) for k, s in shapes.items()}
        )

    out: dict[str, np.ndarray] = {}
    for role, width in zip(MATRIX_ROLES, (n_in, n_rec)):
        matrices = wanted(row.matrix.shapes(role, order, hidden, width))
        for gate in CUDNN_GATES[row.cell] if matrices else ():
            row.matrix.store(matrices, role, order, gate, hidden, param(KIND_OF_ROLE[role], gate))
        out.update(matrices)
    biases = wanted(row.bias.shapes(order, hidden)) if has_bias else {}
    for gate in CUDNN_GATES[row.cell] if biases else ():
        row.bias.store(biases, order, gate, hidden, *(param(kind, gate) for kind in BIAS_KINDS))
    out.update(biases)
    transposed = row.projection == PROJECTION_TRANSPOSED
    projection = wanted({PROJECTION: (hidden, proj) if transposed else (proj, hidden)}) if proj else {}
    if projection:
        projection[PROJECTION][...] = param(Kind.P, "").T if transposed else param(Kind.P, "")
    out.update(projection)
    return out


def held_blocks(row: Row) -> dict[str, set[tuple[str, str]]]:
    """The cuDNN blocks (kind, gate) each of a row's stored tensors (by role) holds, found by storing each block alone
    through the row's layout: which blocks a mistake made in one stored tensor moves (a summed bias holds both kinds).
    The projection holds no gate's block, and is left out."""
    held: dict[str, set[tuple[str, str]]] = {}
    for kind in (*(KIND_OF_ROLE[role] for role in MATRIX_ROLES), *BIAS_KINDS):
        for gate in CUDNN_GATES[row.cell]:

            def alone(k: str, g: str, block: tuple[str, str] = (kind, gate)) -> np.ndarray:
                return np.full((1, 1) if k in (Kind.W, Kind.R) else (1,), float((k, g) == block))

            try:
                stored = assemble_stored(row, 1, 1, 1, alone)
            except Unsupported:  # a recurrent bias the layout has no place for
                continue
            for role, tensor in stored.items():
                if tensor.any():
                    held.setdefault(role, set()).add((kind, gate))
    return held


def check_shapes(
    row: Row,
    actual: Mapping[str, tuple[int, ...]],
    expected: Mapping[str, tuple[int, ...]],
    names: Mapping[str, str],
    what: str,
) -> None:
    """Raise BadInput naming the first stored tensor whose shape contradicts the spec."""
    for role, shape in expected.items():
        if role not in actual:
            raise BadInput(f"{what}: tensor {names.get(role, role)!r} is missing")
        if tuple(actual[role]) != tuple(shape):
            raise BadInput(
                f"{what}: tensor {names.get(role, role)!r} has shape {tuple(actual[role])}, "
                f"but a {row.source_class} with these sizes needs {tuple(shape)}"
            )


# --- recipes for people -----------------------------------------------------------------------


def recipe(row: Row, single_bias_split: str = DEFAULT_BIAS_SPLIT) -> list[tuple[str, str]]:
    """For each cuDNN tensor of one cell, the numpy expression that takes it from this row's tensors.

    Every expression evaluates, with H and I the sizes and each stored tensor under its name (`2H` meaning
    2*H); tests evaluate them all against `gate_loaders`.
    """
    names, order, gates = row.tensors, row.gate_order, CUDNN_GATES[row.cell]
    out: list[tuple[str, str]] = []
    for role in MATRIX_ROLES:
        out += [(f"{KIND_OF_ROLE[role]}_{gate}", row.matrix.describe(names, role, order, gate)) for gate in gates]
    biases = {gate: row.bias.describe(names, order, gate, single_bias_split) for gate in gates}
    for side, kind in enumerate(BIAS_KINDS):
        out += [(f"{kind}_{gate}", biases[gate][side]) for gate in gates]
    if PROJECTION in names:
        transposed = ".T" if row.projection == PROJECTION_TRANSPOSED else ""
        out.append((CUDNN_TENSOR_NAMES[PROJECTION], names[PROJECTION] + transposed))
    return out
