"""Storage layouts: how a format stores one cell's matrices and biases, each declared once, as data.

A row of the table (`rows.py`) points at one matrix layout and one bias layout. A layout
knows five things about what it stores, all read from its declaration:

- `shapes`: the stored tensors (by role) and their shapes, for given sizes;
- `load`: loaders of cuDNN's per-gate blocks out of them (nothing is read until one is called);
- `store`: the way back, writing cuDNN's blocks into the stored tensors;
- `blocks`: which of cuDNN's blocks a stored tensor holds one after the other, as they are, where it is nothing
  else (a writer then copies them, from the source file where they lie there);
- `describe`: the numpy expression that takes a cuDNN block from the stored tensors, for
  people (`explain`).

A matrix layout is declared by where it stacks the gates' blocks (along the rows, as cuDNN, or the columns), how a
block sits there (as it is, transposed, or cuDNN's buffer reshaped) and whether each gate has a tensor of its own. A
bias layout is declared by what each stored tensor holds, in order: runs of cuDNN's input biases (bW), recurrent
biases (bR) or their sums, for each gate of the row's order, all but the last, or the last alone; a tensor of two
rows stacks them; what no tensor holds is zero. Gates are named by their letter and found in `order`, the row's
stored gate order. A layout is also its name (it is a `str`): what `explain` prints, and what a row compares equal
to. A new storage layout is one declaration here and the rows that point at it (a class of its own where a storage
fits no declaration).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

from rnnconv.errors import BadInput, Unsupported
from rnnconv.table.constants import BIAS, INPUT_BIAS, KIND_OF_ROLE, RECURRENT_BIAS, Kind

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where a layout moves numbers, not here: the command line's help reads the table without it.
Loader = Callable[[], "np.ndarray"]
Fetch = Callable[[str], Any]  # role -> the stored tensor (numpy, an h5py dataset, anything sliceable)
Stored = MutableMapping[str, "np.ndarray"]  # role -> a stored tensor being written
Block = tuple[str, str]  # one of cuDNN's per-gate tensors: (kind, gate)

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


def per_gate(role: str, gate: str) -> str:
    """The key of one gate's own tensor of a role, in a layout that stores each gate apart ("input_matrix/i")."""
    return f"{role}/{gate}"


L = TypeVar("L", bound="_Named")


class _Named(str, ABC):
    """A layout instance is the string of its `name`: its class's (a layout with a class of its own), or the one
    its declaration gives."""

    name: ClassVar[str]

    def __new__(cls: type[L]) -> L:
        return str.__new__(cls, cls.name)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:  # copies and pickles make the same layout again
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

    def blocks(self, key: str, role: str, order: Sequence[str]) -> list[Block] | None:
        """cuDNN's blocks the stored tensor `key` holds one after the other as they are, or None: it must be made."""
        return None


ROWS, COLUMNS = "rows", "columns"  # where the gates' blocks are stacked
AS_IS, TRANSPOSED, RESHAPED = "as-is", "transposed", "reshaped"  # how a block sits there


class DeclaredMatrix(MatrixLayout):
    """A matrix layout as its declaration says: the gates' (H, in) blocks stacked `along` the rows or the columns in
    the row's gate order (or each gate its own tensor), each block as it is, transposed, or cuDNN's buffer reshaped
    (a column block taken C-contiguous as (in, H) is cuDNN's block read back without a transpose)."""

    along: str
    block: str
    own: bool

    def __new__(cls, name: str, description: str, along: str = ROWS, block: str = AS_IS, own: bool = False) -> Any:
        layout = str.__new__(cls, name)
        transposed, cudnn_buffer = along == COLUMNS and block == TRANSPOSED, block == RESHAPED
        layout.__dict__.update(name=name, description=description, along=along, block=block, own=own)
        layout.__dict__.update(transposed=transposed, cudnn_buffer=cudnn_buffer)
        return layout

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return layout_named, (self.name,)

    def _key(self, role: str, gate: str) -> str:
        return per_gate(role, gate) if self.own else role

    def shapes(self, role: str, order: Sequence[str], hidden: int, width: int) -> dict[str, tuple[int, ...]]:
        if self.own:
            return {per_gate(role, gate): (hidden, width) for gate in order}
        stacked = len(order) * hidden
        return {role: (stacked, width) if self.along == ROWS else (width, stacked)}

    def _index(self, order: Sequence[str], gate: str, hidden: int) -> Any:
        if self.own:
            return slice(None), slice(None)
        own = _rows(order.index(gate), hidden)
        return (own, slice(None)) if self.along == ROWS else (slice(None), own)

    def load(self, fetch: Fetch, role: str, order: Sequence[str], gate: str, hidden: int) -> Loader:
        key, index = self._key(role, gate), self._index(order, gate, hidden)

        def loader() -> np.ndarray:
            import numpy as np

            if self.block == TRANSPOSED:
                from rnnconv.table.transpose import transposed

                return transposed(np.asarray(fetch(key)[index]))
            if self.block == RESHAPED:
                block: np.ndarray = np.ascontiguousarray(fetch(key)[index])
                return block.reshape(hidden, block.shape[0])
            return np.asarray(fetch(key)[index])

        return loader

    def store(self, out: Stored, role: str, order: Sequence[str], gate: str, hidden: int, block: np.ndarray) -> None:
        import numpy as np

        tensor, index = out[self._key(role, gate)], self._index(order, gate, hidden)
        if self.block == TRANSPOSED:
            tensor[index] = block.T
        elif self.block == RESHAPED:
            tensor[index] = np.ascontiguousarray(block).reshape(tensor.shape[0], hidden)
        else:
            tensor[index] = block

    def describe(self, names: Mapping[str, str], role: str, order: Sequence[str], gate: str) -> str:
        if self.own:
            return names[per_gate(role, gate)]
        name, k = names.get(role, role), order.index(gate)
        taken = f"{name}[{span(k)}, :]" if self.along == ROWS else f"{name}[:, {span(k)}]"
        # a reshaped block's rows: in for W, H for R
        return taken + {AS_IS: "", TRANSPOSED: ".T", RESHAPED: ".reshape(H, -1)"}[self.block]

    def blocks(self, key: str, role: str, order: Sequence[str]) -> list[Block] | None:
        if self.block != AS_IS or (self.along != ROWS and not self.own):
            return None
        gates = [key.rsplit("/", maxsplit=1)[-1]] if self.own else list(order)
        return [(KIND_OF_ROLE[role], gate) for gate in gates]


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

    def blocks(self, key: str, order: Sequence[str]) -> list[Block] | None:
        """cuDNN's biases the stored tensor `key` holds one after the other as they are, or None: it must be made."""
        return None

    @abstractmethod
    def holds_recurrent(self, order: Sequence[str], gate: str) -> bool:
        """Whether it stores cuDNN's recurrent bias of `gate` (apart, or in a sum): a GRU's new gate's one (b_hn)
        acts inside the reset product, so a layout without it holds only a GRU whose b_hn is zero."""
        raise NotImplementedError


SUMMED = "bW+bR"  # one gate's two biases in one (cuDNN needs them split: BIAS_SPLITS)
EACH, BUT_LAST, LAST = "each", "but-last", "last"  # the gates of the row's order a run holds


@dataclass(frozen=True)
class Run:
    """Biases of one kind (Kind.bW, Kind.bR or SUMMED), H each, for the gates `of` the row's order."""

    what: str
    of: str = EACH

    def gates(self, order: Sequence[str]) -> Sequence[str]:
        return {EACH: order, BUT_LAST: order[:-1], LAST: order[-1:]}[self.of]


@dataclass(frozen=True)
class Place:
    """Where one gate's bias (or sum) is: the stored tensor, its row (of a tensor of two), its H-slot, and whether
    it is the whole tensor (said by name alone)."""

    key: str
    row: int | None
    slot: int
    whole: bool

    def index(self, hidden: int) -> Any:
        return _rows(self.slot, hidden) if self.row is None else (self.row, _rows(self.slot, hidden))

    def expression(self, names: Mapping[str, str]) -> str:
        name = names[self.key]
        if self.whole:
            return name
        return f"{name}[{span(self.slot)}]" if self.row is None else f"{name}[{self.row}, {span(self.slot)}]"


class DeclaredBias(BiasLayout):
    """A bias layout as its declaration says: each stored tensor (by role) a sequence of runs, or two rows of them
    (a tensor (2, n)); with `own`, each gate has its tensors of its own (`per_gate`), holding that gate's runs."""

    tensors: Mapping[str, tuple[tuple[Run, ...], ...]]
    own: bool

    def __new__(cls, name: str, tensors: Mapping[str, tuple[tuple[Run, ...], ...]], own: bool = False) -> Any:
        layout = str.__new__(cls, name)
        summed = any(run.what == SUMMED for rows in tensors.values() for row in rows for run in row)
        layout.__dict__.update(name=name, tensors=tensors, own=own, summed=summed)
        return layout

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return layout_named, (self.name,)

    def _declared(self, order: Sequence[str]) -> dict[str, tuple[list[Block], ...]]:
        """Each stored tensor's rows, as the (kind, gate) each H-slot holds (kind: bW, bR or SUMMED)."""
        groups = [(f"/{gate}", [gate]) for gate in order] if self.own else [("", list(order))]
        return {
            role + suffix: tuple([(run.what, g) for run in row for g in run.gates(gates)] for row in rows)
            for suffix, gates in groups
            for role, rows in self.tensors.items()
        }

    def _place(self, order: Sequence[str], what: str, gate: str) -> Place | None:
        for key, rows in self._declared(order).items():
            for r, row in enumerate(rows):
                if (what, gate) in row:
                    declared = self.tensors[key.split("/")[0]]
                    whole = self.own or (len(declared) == 1 and [run.of for run in declared[0]] == [LAST])
                    return Place(key, r if len(rows) > 1 else None, row.index((what, gate)), whole)
        return None

    def shapes(self, order: Sequence[str], hidden: int) -> dict[str, tuple[int, ...]]:
        return {
            key: (len(rows), len(rows[0]) * hidden) if len(rows) > 1 else (len(rows[0]) * hidden,)
            for key, rows in self._declared(order).items()
        }

    def load(self, fetch: Fetch, order: Sequence[str], gate: str, hidden: int, split: str) -> tuple[Loader, Loader]:
        import numpy as np

        def part(place: Place) -> Loader:
            return lambda: np.asarray(fetch(place.key)[place.index(hidden)])

        summed = self._place(order, SUMMED, gate)
        if summed is not None:
            if split not in BIAS_SPLITS:
                raise BadInput(f"unknown bias split {split!r} (choose {', '.join(BIAS_SPLITS)})")
            load = part(summed)
            if split == "recurrent":
                return (lambda: np.zeros_like(load())), load
            if split == "input":
                return load, (lambda: np.zeros_like(load()))

            def half() -> np.ndarray:
                bias = load()
                halved: np.ndarray = bias * bias.dtype.type(0.5)  # exact in every float type
                return halved

            return half, half
        input_place, recurrent_place = self._place(order, Kind.bW, gate), self._place(order, Kind.bR, gate)
        assert input_place is not None, (self.name, gate)  # every declaration stores each gate's input side
        own = part(input_place)
        return own, part(recurrent_place) if recurrent_place is not None else (lambda: np.zeros_like(own()))

    def store(
        self, out: Stored, order: Sequence[str], gate: str, hidden: int, input_bias: np.ndarray, recurrent: np.ndarray
    ) -> None:
        import numpy as np

        summed = self._place(order, SUMMED, gate)
        if summed is not None:
            out[summed.key][summed.index(hidden)] = input_bias + recurrent
            return
        input_place, recurrent_place = self._place(order, Kind.bW, gate), self._place(order, Kind.bR, gate)
        assert input_place is not None, (self.name, gate)
        if recurrent_place is None and np.any(np.asarray(recurrent) != 0):
            raise Unsupported(
                f"this layout has no recurrent bias of gate {gate} (the bias inside the reset product), and the "
                f"source's is non-zero"
            )
        out[input_place.key][input_place.index(hidden)] = input_bias
        if recurrent_place is not None:
            out[recurrent_place.key][recurrent_place.index(hidden)] = recurrent

    def describe(self, names: Mapping[str, str], order: Sequence[str], gate: str, split: str) -> tuple[str, str]:
        summed = self._place(order, SUMMED, gate)
        if summed is not None:
            whole = summed.expression(names)
            return {"recurrent": ("0", whole), "input": (whole, "0"), "half": (f"0.5 * {whole}",) * 2}[split]
        input_place, recurrent_place = self._place(order, Kind.bW, gate), self._place(order, Kind.bR, gate)
        assert input_place is not None, (self.name, gate)
        return input_place.expression(names), "0" if recurrent_place is None else recurrent_place.expression(names)

    def holds_recurrent(self, order: Sequence[str], gate: str) -> bool:
        return self._place(order, Kind.bR, gate) is not None or self._place(order, SUMMED, gate) is not None

    def blocks(self, key: str, order: Sequence[str]) -> list[Block] | None:
        rows = self._declared(order)[key]
        pieces = [piece for row in rows for piece in row]
        return None if any(what == SUMMED for what, _ in pieces) else pieces


def flat(*runs: Run) -> tuple[tuple[Run, ...], ...]:
    """A stored tensor of one dimension: the runs one after the other."""
    return (runs,)


# --- the declarations ---------------------------------------------------------------------------------

MATRIX_ROWS: Final = DeclaredMatrix("rows", "(G*H, in): gate k is rows k*H:(k+1)*H, as cuDNN")
MATRIX_COLUMNS: Final = DeclaredMatrix(
    "columns", "(in, G*H): gate k is columns k*H:(k+1)*H, transposed", along=COLUMNS, block=TRANSPOSED
)
# tf-keras CuDNNLSTM/CuDNNGRU: gate k's column block, taken C-contiguous as (in, H), is cuDNN's buffer read back
# without a transpose.
MATRIX_COLUMNS_RAW: Final = DeclaredMatrix(
    "columns-raw",
    "(in, G*H): gate k's columns, taken C-contiguous, are cuDNN's block without a transpose",
    along=COLUMNS,
    block=RESHAPED,
)
# TFLite's LSTM and RNN ops: each gate's matrix its own (H, in) tensor, cuDNN's block as it is.
MATRIX_PER_GATE: Final = DeclaredMatrix("per-gate", "one (H, in) tensor per gate, cuDNN's block itself", own=True)

BW, BR = Kind.bW, Kind.bR
# input_bias (G*H) and recurrent_bias (G*H), as cuDNN.
BIAS_SEPARATE: Final = DeclaredBias("separate", {INPUT_BIAS: flat(Run(BW)), RECURRENT_BIAS: flat(Run(BR))})
# bias (2, G*H): row 0 the input side, row 1 the recurrent side.
BIAS_STACKED: Final = DeclaredBias("stacked", {BIAS: ((Run(BW),), (Run(BR),))})
# bias (2*G*H): the input side, then the recurrent side.
BIAS_CONCATENATED: Final = DeclaredBias("concatenated", {BIAS: flat(Run(BW), Run(BR))})
# bias (G*H) = input + recurrent, which cuDNN needs split (BIAS_SPLITS). Written back, the sum acts as cuDNN's two
# in an LSTM and a simple RNN (only the sum acts), where the written type holds it (Format.losses_in).
BIAS_SINGLE: Final = DeclaredBias("single", {BIAS: flat(Run(SUMMED))})
# bias ((G-1)*H) = input + recurrent for every gate but the last stored one, whose input_bias and recurrent_bias (H)
# are stored apart: the GRU's new gate, where the reset gate multiplies the recurrent side.
BIAS_SINGLE_BUT_LAST: Final = DeclaredBias(
    "single-but-last",
    {BIAS: flat(Run(SUMMED, BUT_LAST)), INPUT_BIAS: flat(Run(BW, LAST)), RECURRENT_BIAS: flat(Run(BR, LAST))},
)
# bias ((G+1)*H), one tensor: bW + bR of every gate but the last stored one, then that gate's input_bias and
# recurrent_bias apart (H each): OpenVINO's GRUSequence with linear_before_reset, whose reset gate multiplies the new
# gate's recurrent side.
BIAS_SINGLE_BUT_LAST_JOINED: Final = DeclaredBias(
    "single-but-last-joined", {BIAS: flat(Run(SUMMED, BUT_LAST), Run(BW, LAST), Run(BR, LAST))}
)
# bias (G*H) = input + recurrent for every gate but the last stored one, whose part of it is its input bias alone;
# that gate's recurrent bias (the GRU's b_hn, inside the reset product) is `recurrent_bias` (H), as Equinox's
# GRUCell stores it (`bias_n`).
BIAS_SINGLE_LAST_INPUT: Final = DeclaredBias(
    "single-last-input", {BIAS: flat(Run(SUMMED, BUT_LAST), Run(BW, LAST)), RECURRENT_BIAS: flat(Run(BR, LAST))}
)
# bias (G*H) = input + recurrent for every gate but the last stored one, whose part of it is its input bias alone;
# that gate's recurrent bias is not stored, so it is zero (flax.nnx's GRUCell has no b_hn: its recurrent Dense has no
# bias). A non-zero one cannot be written: `store` refuses it.
BIAS_SINGLE_NO_LAST_RECURRENT: Final = DeclaredBias(
    "single-no-last-recurrent", {BIAS: flat(Run(SUMMED, BUT_LAST), Run(BW, LAST))}
)
# One bias (H) per gate = input + recurrent (TFLite's LSTM and RNN ops), split like a single bias.
BIAS_PER_GATE: Final = DeclaredBias("per-gate-single", {BIAS: flat(Run(SUMMED))}, own=True)

# How an LSTM's projection is stored: cuDNN's (P, H) as it is (PyTorch's weight_hr), or transposed, (H, P), applied
# as h @ W (PaddlePaddle's weight_ho).
PROJECTION_AS_IS: Final = AS_IS
PROJECTION_TRANSPOSED: Final = TRANSPOSED

_DECLARED: Final[dict[str, MatrixLayout | BiasLayout]] = {
    layout.name: layout
    for layout in (
        MATRIX_ROWS, MATRIX_COLUMNS, MATRIX_COLUMNS_RAW, MATRIX_PER_GATE, BIAS_SEPARATE, BIAS_STACKED,
        BIAS_CONCATENATED, BIAS_SINGLE, BIAS_SINGLE_BUT_LAST, BIAS_SINGLE_BUT_LAST_JOINED, BIAS_SINGLE_LAST_INPUT,
        BIAS_SINGLE_NO_LAST_RECURRENT, BIAS_PER_GATE,
    )
}  # fmt: skip


def layout_named(name: str) -> MatrixLayout | BiasLayout:
    """The declared layout of this name (what a pickled one is made again as)."""
    return _DECLARED[name]
