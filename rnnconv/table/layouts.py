"""Storage layouts: how a format stores one cell's matrices and biases, one class each.

A row of the table (`rows.py`) points at one matrix layout and one bias layout. A layout
knows four things about what it stores:

- `shapes`: the stored tensors (by role) and their shapes, for given sizes;
- `load`: loaders of cuDNN's per-gate blocks out of them (nothing is read until one is called);
- `store`: the way back, writing cuDNN's blocks into the stored tensors;
- `describe`: the numpy expression that takes a cuDNN block from the stored tensors, for
  people (`explain`), written next to `load` so the two cannot drift apart.

Gates are named by their letter and found in `order`, the row's stored gate order. A layout
is also its name (it is a `str`): what `explain` prints, and what a row compares equal to.
A new storage layout is one subclass here and the rows that point at it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

from rnnconv.errors import BadInput, Unsupported
from rnnconv.table.constants import BIAS, INPUT_BIAS, RECURRENT_BIAS

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where a layout moves numbers, not here: the command line's help reads the table without it.
Loader = Callable[[], "np.ndarray"]
Fetch = Callable[[str], Any]  # role -> the stored tensor (numpy, an h5py dataset, anything sliceable)
Stored = MutableMapping[str, "np.ndarray"]  # role -> a stored tensor being written

# Splits of a single bias into cuDNN's two (docs/LAYOUTS.md section 5).
BIAS_SPLITS: Final[dict[str, str]] = {
    "recurrent": "input biases zero, recurrent biases = the bias (what Keras' TF backend hands cuDNN)",
    "input": "input biases = the bias, recurrent biases zero (Keras' torch backend)",
    "half": "half of the bias on each side (tf-keras' old CuDNNLSTM loader)",
}
DEFAULT_BIAS_SPLIT: Final = "recurrent"


def span(k: int) -> str:
    """Gate k's slice of a stacked axis, for people: `:H`, `H:2H`, `2H:3H`."""
    lo = "" if k == 0 else (f"{k}H" if k > 1 else "H")
    hi = f"{k + 1}H" if k + 1 > 1 else "H"
    return f"{lo}:{hi}"


def _rows(k: int, hidden: int) -> slice:
    return slice(k * hidden, (k + 1) * hidden)


L = TypeVar("L", bound="_Named")


class _Named(str, ABC):
    """A layout instance is the string of its class's `name`."""

    name: ClassVar[str]

    def __new__(cls: type[L]) -> L:
        return str.__new__(cls, cls.name)

    def __reduce__(self) -> tuple[type, tuple[()]]:  # copies and pickles make the same layout again
        return type(self), ()


# --- matrices ------------------------------------------------------------------------------------------


class MatrixLayout(_Named):
    """How a role's matrix (input_matrix: cuDNN's W, recurrent_matrix: R) is stored."""

    description: ClassVar[str]  # for people (`explain`)

    # Each gate's block is a column block of the stored matrix, transposed: a reader may transpose the
    # stored matrix once, whole, and then read every block as contiguous rows.
    transposed: ClassVar[bool] = False
    # The stored matrix is cuDNN's own buffer reshaped: only cuDNN's kernels run the layer as stored.
    cudnn_buffer: ClassVar[bool] = False

    @abstractmethod
    def shapes(self, role: str, order: Sequence[str], hidden: int, width: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    @abstractmethod
    def load(self, fetch: Fetch, role: str, order: Sequence[str], gate: str, hidden: int) -> Loader:
        """A loader of cuDNN's (H, width) block of `gate`."""
        raise NotImplementedError

    @abstractmethod
    def store(self, out: Stored, role: str, order: Sequence[str], gate: str, hidden: int, block: np.ndarray) -> None:
        raise NotImplementedError

    @abstractmethod
    def describe(self, names: Mapping[str, str], role: str, order: Sequence[str], gate: str) -> str:
        raise NotImplementedError


class _StackedMatrix(MatrixLayout):
    """All gates in one tensor of the role, stacked along one axis in the row's gate order."""

    def shapes(self, role: str, order: Sequence[str], hidden: int, width: int) -> dict[str, tuple[int, ...]]:
        return {role: self.shape(len(order) * hidden, width)}

    def load(self, fetch: Fetch, role: str, order: Sequence[str], gate: str, hidden: int) -> Loader:
        k = order.index(gate)
        return lambda: self.block(fetch(role), k, hidden)

    def store(self, out: Stored, role: str, order: Sequence[str], gate: str, hidden: int, block: np.ndarray) -> None:
        self.place(out[role], order.index(gate), hidden, block)

    def describe(self, names: Mapping[str, str], role: str, order: Sequence[str], gate: str) -> str:
        return self.expression(names.get(role, role), order.index(gate))

    # What a stacking says about one tensor: its shape, gate k's block read and written, and in words.
    @abstractmethod
    def shape(self, stacked: int, width: int) -> tuple[int, int]:
        raise NotImplementedError

    @abstractmethod
    def block(self, stored: Any, k: int, hidden: int) -> np.ndarray:
        raise NotImplementedError

    @abstractmethod
    def place(self, tensor: np.ndarray, k: int, hidden: int, block: np.ndarray) -> None:
        raise NotImplementedError

    @abstractmethod
    def expression(self, name: str, k: int) -> str:
        raise NotImplementedError


class MatrixRows(_StackedMatrix):
    name = "rows"
    description = "(G*H, in): gate k is rows k*H:(k+1)*H, as cuDNN"

    def shape(self, stacked: int, width: int) -> tuple[int, int]:
        return (stacked, width)

    def block(self, stored: Any, k: int, hidden: int) -> np.ndarray:
        import numpy as np

        return np.asarray(stored[_rows(k, hidden), :])

    def place(self, tensor: np.ndarray, k: int, hidden: int, block: np.ndarray) -> None:
        tensor[_rows(k, hidden), :] = block

    def expression(self, name: str, k: int) -> str:
        return f"{name}[{span(k)}, :]"


class MatrixColumns(_StackedMatrix):
    name = "columns"
    description = "(in, G*H): gate k is columns k*H:(k+1)*H, transposed"
    transposed = True

    def shape(self, stacked: int, width: int) -> tuple[int, int]:
        return (width, stacked)

    def block(self, stored: Any, k: int, hidden: int) -> np.ndarray:
        import numpy as np

        from rnnconv.transpose import transposed

        return transposed(np.asarray(stored[:, _rows(k, hidden)]))

    def place(self, tensor: np.ndarray, k: int, hidden: int, block: np.ndarray) -> None:
        tensor[:, _rows(k, hidden)] = block.T

    def expression(self, name: str, k: int) -> str:
        return f"{name}[:, {span(k)}].T"


class MatrixColumnsRaw(_StackedMatrix):
    """tf-keras CuDNNLSTM/CuDNNGRU: gate k's column block, taken C-contiguous as (in, H), is cuDNN's buffer read
    back without a transpose."""

    name = "columns-raw"
    description = "(in, G*H): gate k's columns, taken C-contiguous, are cuDNN's block without a transpose"
    cudnn_buffer = True

    def shape(self, stacked: int, width: int) -> tuple[int, int]:
        return (width, stacked)

    def block(self, stored: Any, k: int, hidden: int) -> np.ndarray:
        import numpy as np

        block: np.ndarray = np.ascontiguousarray(stored[:, _rows(k, hidden)])
        return block.reshape(hidden, block.shape[0])

    def place(self, tensor: np.ndarray, k: int, hidden: int, block: np.ndarray) -> None:
        import numpy as np

        tensor[:, _rows(k, hidden)] = np.ascontiguousarray(block).reshape(tensor.shape[0], hidden)

    def expression(self, name: str, k: int) -> str:
        return f"{name}[:, {span(k)}].reshape(H, -1)"  # the rows' count: in for W, H for R


# --- biases --------------------------------------------------------------------------------------------


class BiasLayout(_Named):
    """How a cell's biases (cuDNN's bW and bR, H per gate) are stored."""

    summed: ClassVar[bool] = False  # stores bW + bR of some gate: --bias-split says how cuDNN's two are made

    @abstractmethod
    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    @abstractmethod
    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        """Loaders of cuDNN's input and recurrent bias of `gate`."""
        raise NotImplementedError

    @abstractmethod
    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        raise NotImplementedError

    @abstractmethod
    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        """The expressions of cuDNN's input and recurrent bias of `gate`."""
        raise NotImplementedError


def _part(fetch: Fetch, role: str, index: Any) -> Loader:
    import numpy as np

    return lambda: np.asarray(fetch(role)[index])


class BiasSeparate(BiasLayout):
    """input_bias (G*H) and recurrent_bias (G*H), as cuDNN."""

    name = "separate"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {INPUT_BIAS: (len(order) * hidden,), RECURRENT_BIAS: (len(order) * hidden,)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        own = _rows(order.index(gate), hidden)
        return _part(fetch, INPUT_BIAS, own), _part(fetch, RECURRENT_BIAS, own)

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        own = _rows(order.index(gate), hidden)
        out[INPUT_BIAS][own], out[RECURRENT_BIAS][own] = input_bias, recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        cols = span(order.index(gate))
        return f"{names[INPUT_BIAS]}[{cols}]", f"{names[RECURRENT_BIAS]}[{cols}]"


class BiasStacked(BiasLayout):
    """bias (2, G*H): row 0 the input side, row 1 the recurrent side."""

    name = "stacked"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {BIAS: (2, len(order) * hidden)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        own = _rows(order.index(gate), hidden)
        return _part(fetch, BIAS, (0, own)), _part(fetch, BIAS, (1, own))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        own = _rows(order.index(gate), hidden)
        out[BIAS][0, own], out[BIAS][1, own] = input_bias, recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        cols = span(order.index(gate))
        return f"{names[BIAS]}[0, {cols}]", f"{names[BIAS]}[1, {cols}]"


class BiasConcatenated(BiasLayout):
    """bias (2*G*H): the input side, then the recurrent side."""

    name = "concatenated"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {BIAS: (2 * len(order) * hidden,)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        k = order.index(gate)
        return _part(fetch, BIAS, _rows(k, hidden)), _part(fetch, BIAS, _rows(len(order) + k, hidden))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        k = order.index(gate)
        out[BIAS][_rows(k, hidden)], out[BIAS][_rows(len(order) + k, hidden)] = input_bias, recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        k = order.index(gate)
        return f"{names[BIAS]}[{span(k)}]", f"{names[BIAS]}[{span(len(order) + k)}]"


class BiasSingle(BiasLayout):
    """bias (G*H) = input + recurrent, which cuDNN needs split (BIAS_SPLITS). Written back, the sum is exact
    for an LSTM and a simple RNN, where only the sum acts."""

    name = "single"
    summed = True

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {BIAS: (len(order) * hidden,)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        import numpy as np

        if split not in BIAS_SPLITS:
            raise BadInput(f"unknown bias split {split!r} (choose {', '.join(BIAS_SPLITS)})")
        load = _part(fetch, BIAS, _rows(order.index(gate), hidden))
        if split == "recurrent":
            return (lambda: np.zeros_like(load())), load
        if split == "input":
            return load, (lambda: np.zeros_like(load()))

        def half() -> np.ndarray:
            bias = load()
            halved: np.ndarray = bias * bias.dtype.type(0.5)  # exact in every float type
            return halved

        return half, half

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        out[BIAS][_rows(order.index(gate), hidden)] = input_bias + recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        whole = f"{names[BIAS]}[{span(order.index(gate))}]"
        return {"recurrent": ("0", whole), "input": (whole, "0"), "half": (f"0.5 * {whole}",) * 2}[split]


class BiasSingleButLast(BiasSingle):
    """bias ((G-1)*H) = input + recurrent for every gate but the last stored one, whose input_bias and
    recurrent_bias (H) are stored apart: the GRU's new gate, where the reset gate multiplies the recurrent side."""

    name = "single-but-last"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {BIAS: ((len(order) - 1) * hidden,), INPUT_BIAS: (hidden,), RECURRENT_BIAS: (hidden,)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        if gate != order[-1]:
            return super().load(fetch, order, gate, hidden, split)
        return _part(fetch, INPUT_BIAS, slice(None)), _part(fetch, RECURRENT_BIAS, slice(None))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        if gate != order[-1]:
            super().store(out, order, gate, hidden, input_bias, recurrent)
        else:
            out[INPUT_BIAS][...], out[RECURRENT_BIAS][...] = input_bias, recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        if gate != order[-1]:
            return super().describe(names, order, gate, split)
        return names[INPUT_BIAS], names[RECURRENT_BIAS]


class BiasSingleButLastJoined(BiasSingle):
    """bias ((G+1)*H), one tensor: bW + bR of every gate but the last stored one, then that gate's input_bias and
    recurrent_bias apart (H each): OpenVINO's GRUSequence with linear_before_reset, whose reset gate multiplies the
    new gate's recurrent side."""

    name = "single-but-last-joined"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {BIAS: ((len(order) + 1) * hidden,)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        if gate != order[-1]:
            return super().load(fetch, order, gate, hidden, split)
        k = len(order) - 1
        return _part(fetch, BIAS, _rows(k, hidden)), _part(fetch, BIAS, _rows(k + 1, hidden))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        if gate != order[-1]:
            super().store(out, order, gate, hidden, input_bias, recurrent)
        else:
            k = len(order) - 1
            out[BIAS][_rows(k, hidden)], out[BIAS][_rows(k + 1, hidden)] = input_bias, recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        if gate != order[-1]:
            return super().describe(names, order, gate, split)
        k = len(order) - 1
        return f"{names[BIAS]}[{span(k)}]", f"{names[BIAS]}[{span(k + 1)}]"


class BiasSingleLastInput(BiasSingle):
    """bias (G*H) = input + recurrent for every gate but the last stored one, whose part of it is its input bias
    alone; that gate's recurrent bias (the GRU's b_hn, inside the reset product) is `recurrent_bias` (H), as
    Equinox's GRUCell stores it (`bias_n`)."""

    name = "single-last-input"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {BIAS: (len(order) * hidden,), RECURRENT_BIAS: (hidden,)}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        if gate != order[-1]:
            return super().load(fetch, order, gate, hidden, split)
        return _part(fetch, BIAS, _rows(len(order) - 1, hidden)), _part(fetch, RECURRENT_BIAS, slice(None))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        if gate != order[-1]:
            super().store(out, order, gate, hidden, input_bias, recurrent)
        else:
            out[BIAS][_rows(len(order) - 1, hidden)], out[RECURRENT_BIAS][...] = input_bias, recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        if gate != order[-1]:
            return super().describe(names, order, gate, split)
        return f"{names[BIAS]}[{span(len(order) - 1)}]", names[RECURRENT_BIAS]


class BiasSingleNoLastRecurrent(BiasSingle):
    """bias (G*H) = input + recurrent for every gate but the last stored one, whose part of it is its input bias
    alone; that gate's recurrent bias is not stored, so it is zero (flax.nnx's GRUCell has no b_hn: its recurrent
    Dense has no bias). A non-zero one cannot be written: `store` refuses it."""

    name = "single-no-last-recurrent"

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        import numpy as np

        if gate != order[-1]:
            return super().load(fetch, order, gate, hidden, split)
        own = _part(fetch, BIAS, _rows(len(order) - 1, hidden))
        return own, (lambda: np.zeros_like(own()))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        import numpy as np

        if gate != order[-1]:
            super().store(out, order, gate, hidden, input_bias, recurrent)
            return
        if np.any(np.asarray(recurrent) != 0):
            raise Unsupported(
                f"this layout has no recurrent bias of gate {gate} (the bias inside the reset product), and the "
                f"source's is non-zero"
            )
        out[BIAS][_rows(len(order) - 1, hidden)] = input_bias

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        if gate != order[-1]:
            return super().describe(names, order, gate, split)
        return f"{names[BIAS]}[{span(len(order) - 1)}]", "0"


def per_gate(role: str, gate: str) -> str:
    """The key of one gate's own tensor of a role, in a layout that stores each gate apart ("input_matrix/i")."""
    return f"{role}/{gate}"


class MatrixPerGate(MatrixLayout):
    """Each gate's matrix its own (H, in) tensor: cuDNN's block as it is (TFLite's LSTM and RNN ops)."""

    name = "per-gate"
    description = "one (H, in) tensor per gate, cuDNN's block itself"

    def shapes(self, role: str, order: Sequence[str], hidden: int, width: int) -> dict[str, tuple[int, ...]]:
        return {per_gate(role, gate): (hidden, width) for gate in order}

    def load(self, fetch: Fetch, role: str, order: Sequence[str], gate: str, hidden: int) -> Loader:
        import numpy as np

        return lambda: np.asarray(fetch(per_gate(role, gate))[:, :])

    def store(self, out: Stored, role: str, order: Sequence[str], gate: str, hidden: int, block: np.ndarray) -> None:
        out[per_gate(role, gate)][...] = block

    def describe(self, names: Mapping[str, str], role: str, order: Sequence[str], gate: str) -> str:
        return names[per_gate(role, gate)]


class BiasPerGate(BiasSingle):
    """One bias (H) per gate = input + recurrent (TFLite's LSTM and RNN ops), split like a single bias."""

    name = "per-gate-single"

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {per_gate(BIAS, gate): (hidden,) for gate in order}

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        return super().load(lambda role: fetch(per_gate(role, gate)), [gate], gate, hidden, split)

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        out[per_gate(BIAS, gate)][...] = input_bias + recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        whole = names[per_gate(BIAS, gate)]
        return {"recurrent": ("0", whole), "input": (whole, "0"), "half": (f"0.5 * {whole}",) * 2}[split]


MATRIX_ROWS: Final = MatrixRows()
MATRIX_COLUMNS: Final = MatrixColumns()
MATRIX_COLUMNS_RAW: Final = MatrixColumnsRaw()
BIAS_SEPARATE: Final = BiasSeparate()
BIAS_STACKED: Final = BiasStacked()
BIAS_CONCATENATED: Final = BiasConcatenated()
BIAS_SINGLE: Final = BiasSingle()
BIAS_SINGLE_BUT_LAST: Final = BiasSingleButLast()
BIAS_SINGLE_BUT_LAST_JOINED: Final = BiasSingleButLastJoined()
BIAS_SINGLE_LAST_INPUT: Final = BiasSingleLastInput()
BIAS_SINGLE_NO_LAST_RECURRENT: Final = BiasSingleNoLastRecurrent()
MATRIX_PER_GATE: Final = MatrixPerGate()
BIAS_PER_GATE: Final = BiasPerGate()
