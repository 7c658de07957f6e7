"""Applying the table: pick a row for a layer, and move tensors between a row's storage and cuDNN's blocks.

`gate_loaders` turns a format's stored tensors into cuDNN's per-gate blocks
(lazily: nothing is read until a loader is called), `assemble_stored` is its
inverse, `recipe` prints the same mapping for people. Model-specific maths
stays in the format modules; these functions know only the row's columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, Unsupported
from rnnconv.table.constants import CUDNN_GATES, NONLINEARITIES
from rnnconv.table.rows import (
    BIAS_CONCATENATED,
    BIAS_SEPARATE,
    BIAS_SINGLE,
    BIAS_SINGLE_BUT_LAST,
    BIAS_SPLITS,
    BIAS_STACKED,
    DEFAULT_BIAS_SPLIT,
    KERAS_ERAS,
    MATRIX_COLUMNS,
    MATRIX_ROWS,
    TABLE,
    KerasEra,
    Row,
)
from rnnconv.transpose import transposed

Loader = Callable[[], np.ndarray]


def rows_for(fmt: str, source_class: str | None = None) -> list[Row]:
    return [r for r in TABLE if r.format == fmt and (source_class is None or r.source_class == source_class)]


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


def keras_era(version: str | None) -> KerasEra | None:
    """The era of a Keras version string ("2.0.8", "2.1.6-tf", "3.6.0"), or None when it names none."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    if not found:
        return None
    number = (int(found[1]), int(found[2]), int(found[3]))
    tf_suffix = (version or "").endswith("-tf")
    return next((era for era in KERAS_ERAS if era.holds(number, tf_suffix)), None)


def row_for_mode(fmt: str, mode: str, cell_class: bool = False) -> tuple[Row, str]:
    """The first adapter row of a format that runs a cuDNN mode, and the activation it needs for it."""
    for row in TABLE:
        if row.format == fmt and row.adapter and not row.refusal and row.source_class.endswith("Cell") == cell_class:
            for activation, runs in row.modes.items():
                if runs == mode:
                    return row, activation
    raise Unsupported(f"{fmt} has no layer that computes cuDNN's {mode}")


def settings_for_mode(fmt: str, mode: str) -> tuple[str, dict[str, Any]]:
    """The layer class of a format that computes a cuDNN mode, and the config it needs for it."""
    row, activation = row_for_mode(fmt, mode)
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
        return repr(name if isinstance(name, str) else "custom")
    return repr(value) if _hashable(value) else f"a {type(value).__name__}"


# --- stored tensors <-> cuDNN per-gate blocks -------------------------------------------------


def stored_shapes(
    row: Row, hidden: int, n_in: int, n_rec: int, proj: int = 0, has_bias: bool = True
) -> dict[str, tuple[int, ...]]:
    """Shape of each stored tensor (by role) for the given sizes."""
    gh = row.gates * hidden
    if row.matrix == MATRIX_ROWS:
        shapes: dict[str, tuple[int, ...]] = {"input_matrix": (gh, n_in), "recurrent_matrix": (gh, n_rec)}
    else:
        shapes = {"input_matrix": (n_in, gh), "recurrent_matrix": (n_rec, gh)}
    if has_bias:
        biases: dict[str, dict[str, tuple[int, ...]]] = {
            BIAS_SEPARATE: {"input_bias": (gh,), "recurrent_bias": (gh,)},
            BIAS_STACKED: {"bias": (2, gh)},
            BIAS_CONCATENATED: {"bias": (2 * gh,)},
            BIAS_SINGLE: {"bias": (gh,)},
            BIAS_SINGLE_BUT_LAST: {"bias": (gh - hidden,), "input_bias": (hidden,), "recurrent_bias": (hidden,)},
        }
        shapes.update(biases[row.bias])
    if proj:
        shapes["projection"] = (proj, hidden)
    return shapes


def _matrix_block(stored: Any, kind: str, k: int, hidden: int) -> np.ndarray:
    """cuDNN's (H, n) block of gate k from a stored matrix (numpy or h5py-like)."""
    cols = slice(k * hidden, (k + 1) * hidden)
    if kind == MATRIX_ROWS:
        return np.asarray(stored[cols, :])
    if kind == MATRIX_COLUMNS:
        return transposed(np.asarray(stored[:, cols]))
    block: np.ndarray = np.ascontiguousarray(stored[:, cols])
    return block.reshape(hidden, block.shape[0])  # MATRIX_COLUMNS_RAW


def _place_matrix_block(out: np.ndarray, kind: str, k: int, hidden: int, block: np.ndarray) -> None:
    cols = slice(k * hidden, (k + 1) * hidden)
    if kind == MATRIX_ROWS:
        out[cols, :] = block
    elif kind == MATRIX_COLUMNS:
        out[:, cols] = block.T
    else:
        out[:, cols] = np.ascontiguousarray(block).reshape(out.shape[0], hidden)


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
    gh = row.gates * hidden

    def matrix(role: str, k: int) -> Loader:
        return lambda: _matrix_block(fetch(role), row.matrix, k, hidden)

    def part(role: str, index: Any) -> Loader:
        return lambda: np.asarray(fetch(role)[index])

    loaders: dict[tuple[str, str], Loader] = {}
    for gate in CUDNN_GATES[row.cell]:
        k = row.stored_index(gate)
        own = slice(k * hidden, (k + 1) * hidden)
        loaders[("W", gate)] = matrix("input_matrix", k)
        loaders[("R", gate)] = matrix("recurrent_matrix", k)
        if not has_bias:
            loaders[("bW", gate)] = loaders[("bR", gate)] = lambda: np.zeros(hidden, dtype=np.float32)
        elif row.bias == BIAS_SEPARATE:
            loaders[("bW", gate)], loaders[("bR", gate)] = part("input_bias", own), part("recurrent_bias", own)
        elif row.bias == BIAS_STACKED:
            loaders[("bW", gate)], loaders[("bR", gate)] = part("bias", (0, own)), part("bias", (1, own))
        elif row.bias == BIAS_CONCATENATED:
            recurrent = slice(gh + k * hidden, gh + (k + 1) * hidden)
            loaders[("bW", gate)], loaders[("bR", gate)] = part("bias", own), part("bias", recurrent)
        elif row.bias == BIAS_SINGLE_BUT_LAST and k == row.gates - 1:
            loaders[("bW", gate)], loaders[("bR", gate)] = (
                part("input_bias", slice(None)),
                part("recurrent_bias", slice(None)),
            )
        else:  # BIAS_SINGLE, or a summed gate of BIAS_SINGLE_BUT_LAST
            loaders[("bW", gate)], loaders[("bR", gate)] = _split_single(part("bias", own), bias_split)
    if proj:
        loaders[("P", "")] = part("projection", (slice(None), slice(None)))
    return loaders


def _split_single(load: Loader, split: str) -> tuple[Loader, Loader]:
    if split not in BIAS_SPLITS:
        raise BadInput(f"unknown bias split {split!r} (choose {', '.join(BIAS_SPLITS)})")
    if split == "recurrent":
        return (lambda: np.zeros_like(load())), load
    if split == "input":
        return load, (lambda: np.zeros_like(load()))

    def half() -> np.ndarray:
        bias = load()
        halved: np.ndarray = bias * bias.dtype.type(0.5)  # exact in every float type
        return halved

    return half, half


def assemble_stored(
    row: Row,
    hidden: int,
    n_in: int,
    n_rec: int,
    param: Callable[[str, str], np.ndarray],
    has_bias: bool = True,
    proj: int = 0,
    dtype: Any = np.float32,
) -> dict[str, np.ndarray]:
    """The stored tensors of one cell (by role) from cuDNN's per-gate blocks.

    The inverse of `gate_loaders`. A single-bias format gets bW + bR; that sum is
    exact for LSTM and simple RNNs, and a GRU with a single bias has no cuDNN form.
    """
    shapes = stored_shapes(row, hidden, n_in, n_rec, proj, has_bias)
    out = {role: np.zeros(shape, dtype=dtype) for role, shape in shapes.items()}
    gh = row.gates * hidden
    for gate in CUDNN_GATES[row.cell]:
        k = row.stored_index(gate)
        sl = slice(k * hidden, (k + 1) * hidden)
        _place_matrix_block(out["input_matrix"], row.matrix, k, hidden, param("W", gate))
        _place_matrix_block(out["recurrent_matrix"], row.matrix, k, hidden, param("R", gate))
        if not has_bias:
            continue
        if row.bias == BIAS_SEPARATE:
            out["input_bias"][sl] = param("bW", gate)
            out["recurrent_bias"][sl] = param("bR", gate)
        elif row.bias == BIAS_STACKED:
            out["bias"][0, sl] = param("bW", gate)
            out["bias"][1, sl] = param("bR", gate)
        elif row.bias == BIAS_CONCATENATED:
            out["bias"][sl] = param("bW", gate)
            out["bias"][gh + k * hidden : gh + (k + 1) * hidden] = param("bR", gate)
        elif row.bias == BIAS_SINGLE_BUT_LAST and k == row.gates - 1:
            out["input_bias"][...] = param("bW", gate)
            out["recurrent_bias"][...] = param("bR", gate)
        else:
            out["bias"][sl] = param("bW", gate) + param("bR", gate)
    if proj:
        out["projection"][...] = param("P", "")
    return out


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
    names = row.tensors

    def cols(k: int) -> str:
        lo = "" if k == 0 else (f"{k}H" if k > 1 else "H")
        hi = f"{k + 1}H" if k + 1 > 1 else "H"
        return f"{lo}:{hi}"

    def block(role: str, k: int) -> str:
        name = names.get(role, role)
        if row.matrix == MATRIX_ROWS:
            return f"{name}[{cols(k)}, :]"
        if row.matrix == MATRIX_COLUMNS:
            return f"{name}[:, {cols(k)}].T"
        return f"{name}[:, {cols(k)}].reshape(H, -1)"  # the rows' count: in for W, H for R

    out: list[tuple[str, str]] = []
    for side, role in (("W", "input_matrix"), ("R", "recurrent_matrix")):
        for gate in CUDNN_GATES[row.cell]:
            out.append((f"{side}_{gate}", block(role, row.stored_index(gate))))
    for side in ("bW", "bR"):
        for gate in CUDNN_GATES[row.cell]:
            k = row.stored_index(gate)
            if row.bias == BIAS_SEPARATE:
                name = names["input_bias" if side == "bW" else "recurrent_bias"]
                expr = f"{name}[{cols(k)}]"
            elif row.bias == BIAS_STACKED:
                expr = f"{names['bias']}[{0 if side == 'bW' else 1}, {cols(k)}]"
            elif row.bias == BIAS_CONCATENATED:
                expr = f"{names['bias']}[{cols(k)}]" if side == "bW" else f"{names['bias']}[{cols(row.gates + k)}]"
            elif row.bias == BIAS_SINGLE_BUT_LAST and k == row.gates - 1:
                expr = names["input_bias" if side == "bW" else "recurrent_bias"]
            else:
                whole = f"{names['bias']}[{cols(k)}]"
                expr = {
                    "recurrent": "0" if side == "bW" else whole,
                    "input": whole if side == "bW" else "0",
                    "half": f"0.5 * {whole}",
                }[single_bias_split]
            out.append((f"{side}_{gate}", expr))
    if "projection" in names:
        out.append(("Wproj", names["projection"]))
    return out


def nonlinearity_mode(row: Row, nonlinearity: str | None, name: str, refusal: str) -> tuple[str, str, list[str]]:
    """The activation and cuDNN mode of a row whose file may not store its nonlinearity: the stated one, or the
    row's default recorded as an assumption. `refusal` is the sentence for a nonlinearity stated where the row
    has none."""
    if nonlinearity is not None and nonlinearity not in NONLINEARITIES:
        raise BadInput(f"unknown nonlinearity {nonlinearity!r} (choose {' or '.join(NONLINEARITIES)})")
    if nonlinearity is not None and nonlinearity not in row.modes:
        raise BadInput(refusal)
    unstated = "activation" in row.unstored and nonlinearity is None
    assumptions = [f"{name}: nonlinearity={row.defaults['activation']}"] if unstated else []
    activation = nonlinearity or row.defaults["activation"]
    return activation, row.modes[activation], assumptions
