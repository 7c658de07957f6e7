"""The gate-layout table: how every format stores a recurrent cell, as data.

Each `Row` says, for one format and one layer class, in which order the gates are
stacked, how a gate's matrix is stored relative to cuDNN's row-major `(H, in)`,
how the biases are arranged, what the tensors are called and which activations
cuDNN can run. Readers, writers, `explain`, the reference engine and the error
messages all read these rows; nothing else in rnnconv knows a gate order.

Facts come from LAYOUTS.md (checked against the frameworks' code and by runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from rnnconv.errors import BadInput, Unsupported
from rnnconv.transpose import transposed

# cuDNN's gate order per cell family (linLayerID order of cudnnGetRNNWeightParams).
CUDNN_GATES: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "c", "o"),
    "gru": ("r", "z", "h"),
    "rnn": ("h",),
}

GATE_NAMES: dict[str, dict[str, str]] = {
    "lstm": {"i": "input gate", "f": "forget gate", "c": "cell candidate", "o": "output gate"},
    "gru": {"r": "reset gate", "z": "update gate", "h": "new (candidate) state"},
    "rnn": {"h": "hidden state"},
}

# cuDNN modes: name -> (cell family, cudnnRNNMode_t value).
CUDNN_MODES: dict[str, tuple[str, int]] = {
    "rnn_relu": ("rnn", 0),
    "rnn_tanh": ("rnn", 1),
    "lstm": ("lstm", 2),
    "gru": ("gru", 3),
}

# How a gate's matrix is stored, relative to cuDNN's row-major (H, in) block.
MATRIX_ROWS = "rows"  # (G*H, in): gate k is rows k*H:(k+1)*H, as cuDNN
MATRIX_COLUMNS = "columns"  # (in, G*H): gate k is columns k*H:(k+1)*H, transposed
# (in, G*H): gate k's column block, taken C-contiguous as (in, H), is cuDNN's
# buffer read back without a transpose (tf-keras CuDNNLSTM/CuDNNGRU).
MATRIX_COLUMNS_RAW = "columns-raw"

# How the biases are stored.
BIAS_SEPARATE = "separate"  # input_bias (G*H) and recurrent_bias (G*H)
BIAS_STACKED = "stacked"  # bias (2, G*H): row 0 input side, row 1 recurrent side
BIAS_CONCATENATED = "concatenated"  # bias (2*G*H): input side, then recurrent side
BIAS_SINGLE = "single"  # bias (G*H) = input + recurrent; cuDNN needs a split

# Splits of a single bias into cuDNN's two (LAYOUTS.md section 5).
BIAS_SPLITS = {
    "recurrent": "input biases zero, recurrent biases = the bias (what Keras' TF backend hands cuDNN)",
    "input": "input biases = the bias, recurrent biases zero (Keras' torch backend)",
    "half": "half of the bias on each side (tf-keras' old CuDNNLSTM loader)",
}
DEFAULT_BIAS_SPLIT = "recurrent"

KERAS_ROLES = {"input_matrix": "kernel", "recurrent_matrix": "recurrent_kernel", "bias": "bias"}
TORCH_LAYER_ROLES = {
    "input_matrix": "weight_ih_l{layer}{suffix}",
    "recurrent_matrix": "weight_hh_l{layer}{suffix}",
    "input_bias": "bias_ih_l{layer}{suffix}",
    "recurrent_bias": "bias_hh_l{layer}{suffix}",
    "projection": "weight_hr_l{layer}{suffix}",
}
TORCH_CELL_ROLES = {
    "input_matrix": "weight_ih",
    "recurrent_matrix": "weight_hh",
    "input_bias": "bias_ih",
    "recurrent_bias": "bias_hh",
}
GATED = {"recurrent_activation": ("sigmoid",)}


@dataclass(frozen=True)
class Row:
    format: str
    source_class: str
    cell: str
    gate_order: tuple[str, ...]
    matrix: str
    bias: str
    tensors: Mapping[str, str]
    # activation -> cuDNN mode; the activations cuDNN can run for this class.
    modes: Mapping[str, str]
    # Other config values cuDNN needs, each with its allowed values.
    requires: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    # Config values that select this row among rows of the same class.
    when: Mapping[str, Any] = field(default_factory=dict)
    refusal: str | None = None
    note: str = ""
    # False for rows kept for `explain` only (no reader or writer in rnnconv).
    adapter: bool = True

    @property
    def gates(self) -> int:
        return len(self.gate_order)

    def stored_index(self, gate: str) -> int:
        """Position of a cuDNN gate in this format's stacking."""
        return self.gate_order.index(gate)


TABLE: tuple[Row, ...] = (
    # --- cuDNN: the target. Each gate is its own row-major (H, in) block in the weight space.
    Row("cudnn", "LSTM", "lstm", ("i", "f", "c", "o"), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR",
         "projection": "Wproj"},
        {"tanh": "lstm"}, note="linLayerID 0-3 input side, 4-7 recurrent side, 8 projection (P x H, no bias)"),
    Row("cudnn", "GRU", "gru", ("r", "z", "h"), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR"},
        {"tanh": "gru"}, note="reset applied after the recurrent matrix: h' = tanh(Wh x + r*(Rh h + bRh) + bWh)"),
    Row("cudnn", "RNN", "rnn", ("h",), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR"},
        {"tanh": "rnn_tanh", "relu": "rnn_relu"}),
    # --- Keras (Keras 2, tf-keras, Keras 3): kernels are (in, G*H), x @ kernel.
    Row("keras", "LSTM", "lstm", ("i", "f", "c", "o"), MATRIX_COLUMNS, BIAS_SINGLE, KERAS_ROLES,
        {"tanh": "lstm"}, requires=GATED),
    Row("keras", "GRU", "gru", ("z", "r", "h"), MATRIX_COLUMNS, BIAS_STACKED, KERAS_ROLES,
        {"tanh": "gru"}, requires=GATED, when={"reset_after": True},
        note="bias row 0 is the input side, row 1 the recurrent side"),
    Row("keras", "GRU", "gru", ("z", "r", "h"), MATRIX_COLUMNS, BIAS_SINGLE, KERAS_ROLES,
        {}, when={"reset_after": False},
        refusal="this GRU has reset_after=False: it applies the reset gate before the recurrent matrix, "
                "cuDNN applies it after (h' = tanh(Wh x + r*(Rh h + bRh) + bWh)), so no cuDNN weights "
                "compute the same function; retrain or convert the model with reset_after=True"),
    Row("keras", "SimpleRNN", "rnn", ("h",), MATRIX_COLUMNS, BIAS_SINGLE, KERAS_ROLES,
        {"tanh": "rnn_tanh", "relu": "rnn_relu"}),
    Row("keras", "CuDNNLSTM", "lstm", ("i", "f", "c", "o"), MATRIX_COLUMNS_RAW, BIAS_CONCATENATED,
        KERAS_ROLES, {"tanh": "lstm"}, note="tf-keras layer that holds cuDNN's buffers reshaped"),
    Row("keras", "CuDNNGRU", "gru", ("z", "r", "h"), MATRIX_COLUMNS_RAW, BIAS_CONCATENATED,
        KERAS_ROLES, {"tanh": "gru"}, note="tf-keras layer that holds cuDNN's buffers reshaped, gates z, r, h"),
    # --- PyTorch: weights are (G*H, in), W @ x, gate order already cuDNN's.
    Row("torch", "LSTM", "lstm", ("i", "f", "c", "o"), MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_ROLES,
        {"tanh": "lstm"}, note="PyTorch calls the cell candidate g"),
    Row("torch", "GRU", "gru", ("r", "z", "h"), MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_ROLES,
        {"tanh": "gru"}, note="PyTorch calls the new state n"),
    Row("torch", "RNN", "rnn", ("h",), MATRIX_ROWS, BIAS_SEPARATE, TORCH_LAYER_ROLES,
        {"tanh": "rnn_tanh", "relu": "rnn_relu"}, note="the nonlinearity is not stored in a state_dict"),
    Row("torch", "LSTMCell", "lstm", ("i", "f", "c", "o"), MATRIX_ROWS, BIAS_SEPARATE, TORCH_CELL_ROLES,
        {"tanh": "lstm"}),
    Row("torch", "GRUCell", "gru", ("r", "z", "h"), MATRIX_ROWS, BIAS_SEPARATE, TORCH_CELL_ROLES,
        {"tanh": "gru"}),
    Row("torch", "RNNCell", "rnn", ("h",), MATRIX_ROWS, BIAS_SEPARATE, TORCH_CELL_ROLES,
        {"tanh": "rnn_tanh", "relu": "rnn_relu"}),
    # --- Other layouts, for `explain` (no adapter yet).
    Row("onnx", "LSTM", "lstm", ("i", "o", "f", "c"), MATRIX_ROWS, BIAS_CONCATENATED,
        {"input_matrix": "W[d]", "recurrent_matrix": "R[d]", "bias": "B[d]"}, {"tanh": "lstm"}, adapter=False),
    Row("onnx", "GRU", "gru", ("z", "r", "h"), MATRIX_ROWS, BIAS_CONCATENATED,
        {"input_matrix": "W[d]", "recurrent_matrix": "R[d]", "bias": "B[d]"}, {"tanh": "gru"},
        when={"linear_before_reset": 1}, adapter=False,
        note="only linear_before_reset=1 computes cuDNN's GRU"),
    Row("miopen", "LSTM", "lstm", ("i", "f", "o", "c"), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR"},
        {"tanh": "lstm"}, adapter=False, note="AMD's order; PyTorch applies it only on its MIOpen backend"),
    Row("miopen", "GRU", "gru", ("z", "r", "h"), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR"},
        {"tanh": "gru"}, adapter=False),
    Row("tensorrt", "LSTM", "lstm", ("f", "i", "c", "o"), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR"},
        {"tanh": "lstm"}, adapter=False),
    Row("tensorrt", "GRU", "gru", ("z", "r", "h"), MATRIX_ROWS, BIAS_SEPARATE,
        {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR"},
        {"tanh": "gru"}, adapter=False),
)

FORMATS = tuple(dict.fromkeys(row.format for row in TABLE))


def rows_for(fmt: str, source_class: str | None = None) -> list[Row]:
    return [r for r in TABLE if r.format == fmt and (source_class is None or r.source_class == source_class)]


def classes_of(fmt: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.source_class for r in TABLE if r.format == fmt))


def find_row(fmt: str, source_class: str, config: Mapping[str, Any] | None = None) -> Row:
    """The row for a layer class, chosen among its variants by the layer's config."""
    config = config or {}
    candidates = rows_for(fmt, source_class)
    if not candidates:
        raise Unsupported(
            f"{fmt} layer class {source_class!r} is not a recurrent layer rnnconv knows "
            f"(known: {', '.join(classes_of(fmt))})"
        )
    for row in candidates:
        if all(config.get(k, v) == v for k, v in row.when.items()):
            return row
    raise Unsupported(f"no layout for a {fmt} {source_class} with {dict(config)}")


def row_for_mode(fmt: str, mode: str, cell_class: bool = False) -> tuple[Row, str]:
    """The first adapter row of a format that runs a cuDNN mode, and the activation it needs for it."""
    for row in TABLE:
        if row.format == fmt and row.adapter and not row.refusal and row.source_class.endswith("Cell") == cell_class:
            for activation, runs in row.modes.items():
                if runs == mode:
                    return row, activation
    raise Unsupported(f"{fmt} has no layer that computes cuDNN's {mode}")


def refusal_reason(row: Row, config: Mapping[str, Any]) -> str | None:
    """Why a layer with this row and config cannot run in cuDNN, or None."""
    if row.refusal:
        return row.refusal
    activation = config.get("activation", "tanh")
    if activation not in row.modes:
        allowed = " or ".join(row.modes)
        return (f"activation={_show(activation)}: cuDNN's {row.source_class} can only compute "
                f"{allowed} here")
    for key, allowed in row.requires.items():
        value = config.get(key, allowed[0])
        if value not in allowed:
            extra = ""
            if value == "hard_sigmoid":
                extra = " (and hard_sigmoid is not even one function: 0.2x+0.5 in Keras 2, x/6+0.5 in Keras 3)"
            return (f"{key}={_show(value)}: cuDNN's {row.source_class} computes "
                    f"{' or '.join(map(str, allowed))} only{extra}")
    return None


def mode_for(row: Row, config: Mapping[str, Any]) -> str:
    reason = refusal_reason(row, config)
    if reason:
        raise Unsupported(reason)
    return row.modes[config.get("activation", "tanh")]


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return repr(value.get("class_name") or value.get("config", {}).get("name") or "custom")
    return repr(value)


# ---------------------------------------------------------------------------------------------
# Applying the matrix and bias columns: stored tensors <-> cuDNN per-gate blocks.

def stored_shapes(row: Row, hidden: int, n_in: int, n_rec: int, proj: int = 0,
                  has_bias: bool = True) -> dict[str, tuple[int, ...]]:
    """Shape of each stored tensor (by role) for the given sizes."""
    gh = row.gates * hidden
    if row.matrix == MATRIX_ROWS:
        shapes = {"input_matrix": (gh, n_in), "recurrent_matrix": (gh, n_rec)}
    else:
        shapes = {"input_matrix": (n_in, gh), "recurrent_matrix": (n_rec, gh)}
    if has_bias:
        shapes.update({
            BIAS_SEPARATE: {"input_bias": (gh,), "recurrent_bias": (gh,)},
            BIAS_STACKED: {"bias": (2, gh)},
            BIAS_CONCATENATED: {"bias": (2 * gh,)},
            BIAS_SINGLE: {"bias": (gh,)},
        }[row.bias])
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
    block = np.ascontiguousarray(stored[:, cols])
    return block.reshape(hidden, block.shape[0])  # MATRIX_COLUMNS_RAW


def _place_matrix_block(out: np.ndarray, kind: str, k: int, hidden: int, block: np.ndarray) -> None:
    cols = slice(k * hidden, (k + 1) * hidden)
    if kind == MATRIX_ROWS:
        out[cols, :] = block
    elif kind == MATRIX_COLUMNS:
        out[:, cols] = block.T
    else:
        out[:, cols] = np.ascontiguousarray(block).reshape(out.shape[0], hidden)


Loader = Callable[[], np.ndarray]


def gate_loaders(row: Row, hidden: int, fetch: Callable[[str], Any], has_bias: bool,
                 bias_split: str = DEFAULT_BIAS_SPLIT, proj: int = 0) -> dict[tuple[str, str], Loader]:
    """Loaders of cuDNN's per-gate tensors, keyed (kind, gate): kind is W, R, bW, bR or P.

    `fetch(role)` returns the stored tensor for a role (numpy, h5py dataset or anything
    sliceable). Nothing is read until a loader is called, so a writer can pull one
    block at a time.
    """
    gh = row.gates * hidden
    loaders: dict[tuple[str, str], Loader] = {}
    for gate in CUDNN_GATES[row.cell]:
        k = row.stored_index(gate)
        sl = slice(k * hidden, (k + 1) * hidden)
        loaders[("W", gate)] = lambda k=k: _matrix_block(fetch("input_matrix"), row.matrix, k, hidden)
        loaders[("R", gate)] = lambda k=k: _matrix_block(fetch("recurrent_matrix"), row.matrix, k, hidden)
        if not has_bias:
            zeros = lambda: np.zeros(hidden, dtype=np.float32)  # noqa: E731
            loaders[("bW", gate)] = loaders[("bR", gate)] = zeros
        elif row.bias == BIAS_SEPARATE:
            loaders[("bW", gate)] = lambda sl=sl: np.asarray(fetch("input_bias")[sl])
            loaders[("bR", gate)] = lambda sl=sl: np.asarray(fetch("recurrent_bias")[sl])
        elif row.bias == BIAS_STACKED:
            loaders[("bW", gate)] = lambda sl=sl: np.asarray(fetch("bias")[0, sl])
            loaders[("bR", gate)] = lambda sl=sl: np.asarray(fetch("bias")[1, sl])
        elif row.bias == BIAS_CONCATENATED:
            loaders[("bW", gate)] = lambda sl=sl: np.asarray(fetch("bias")[sl])
            loaders[("bR", gate)] = lambda k=k: np.asarray(fetch("bias")[gh + k * hidden: gh + (k + 1) * hidden])
        else:  # BIAS_SINGLE
            loaders[("bW", gate)], loaders[("bR", gate)] = _split_single(
                lambda sl=sl: np.asarray(fetch("bias")[sl]), bias_split)
    if proj:
        loaders[("P", "")] = lambda: np.asarray(fetch("projection")[:, :])
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
        return bias * bias.dtype.type(0.5)

    return half, half


def assemble_stored(row: Row, hidden: int, n_in: int, n_rec: int,
                    param: Callable[[str, str], np.ndarray], has_bias: bool = True,
                    proj: int = 0, dtype: Any = np.float32) -> dict[str, np.ndarray]:
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
            out["bias"][gh + k * hidden: gh + (k + 1) * hidden] = param("bR", gate)
        else:
            out["bias"][sl] = param("bW", gate) + param("bR", gate)
    if proj:
        out["projection"][...] = param("P", "")
    return out


def check_shapes(row: Row, actual: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]],
                 names: Mapping[str, str], what: str) -> None:
    """Raise BadInput naming the first stored tensor whose shape contradicts the spec."""
    for role, shape in expected.items():
        if role not in actual:
            raise BadInput(f"{what}: tensor {names.get(role, role)!r} is missing")
        if tuple(actual[role]) != tuple(shape):
            raise BadInput(
                f"{what}: tensor {names.get(role, role)!r} has shape {tuple(actual[role])}, "
                f"but a {row.source_class} with these sizes needs {tuple(shape)}"
            )


# ---------------------------------------------------------------------------------------------
# Human-readable recipes, for `explain` and messages.

def recipe(row: Row, single_bias_split: str = DEFAULT_BIAS_SPLIT) -> list[tuple[str, str]]:
    """For each cuDNN tensor of one cell, the expression that takes it from this row's tensors."""
    names = row.tensors
    gh = f"{row.gates}H"

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
        return f"{name}[:, {cols(k)}].reshape(H, in)   (no transpose)"

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
                expr = f"{names['bias']}[{cols(k)}]" if side == "bW" else f"{names['bias']}[{gh}+{cols(k)}]"
            else:
                whole = f"{names['bias']}[{cols(k)}]"
                expr = {
                    "recurrent": "0" if side == "bW" else whole,
                    "input": whole if side == "bW" else "0",
                    "half": f"0.5 * {whole}",
                }[single_bias_split]
            out.append((f"{side}_{gate}", expr))
    if "projection" in names:
        out.append(("Wproj", f"{names['projection']}   (P x H, only with a projection)"))
    return out
