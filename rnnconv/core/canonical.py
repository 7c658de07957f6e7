"""The one in-memory form every format is read into and written from.

An RNN is a spec (mode, sizes, layers, directions, projection, dtype) plus, per
layer and direction, cuDNN's per-gate tensors: W (H, in) and R (H, H or P)
matrices, bW and bR biases (H), and the LSTM projection P (P, H). Tensors are
held as loaders, so a writer pulls one block at a time from a file that may be
far larger than memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rnnconv.core.contracts import Provenance, SpecModel
from rnnconv.core.dtypes import DTYPES
from rnnconv.errors import BadInput, Unsupported
from rnnconv.safeio.digests import SourcePass, digest_placeholder
from rnnconv.safeio.inputs import FileArray
from rnnconv.table.apply import assemble_stored
from rnnconv.table.constants import (
    CUDNN_GATES,
    CUDNN_MODES,
    DIRECTIONS,
    GRU,
    KINDS,
    LSTM,
    MAX_LAYERS,
    MAX_SIZE,
    NONLINEARITIES,
    Kind,
)
from rnnconv.table.rows import Row

RESET_BEFORE_WORDS = "reset gate before the recurrent product"  # what describe() says of a reset-before GRU


@dataclass(frozen=True)
class RNNSpec:
    mode: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    proj_size: int = 0  # 0: no projection (PyTorch's convention; cuDNN wants projSize = hiddenSize then)
    dtype: str = "float32"
    # False when the source has no biases (Keras use_bias=False, PyTorch bias=False): cuDNN still gets
    # (zero) bias slots, and the way back leaves the biases out again.
    bias: bool = True
    # False for a GRU whose reset gate multiplies the state before the recurrent product (TF1's GRUCell, Keras
    # reset_after=False, ONNX linear_before_reset=0): h' = tanh(Wh x + bWh + Rh (r*h) + bRh), not cuDNN's
    # tanh(Wh x + bWh + r*(Rh h + bRh)). Its tensors are cuDNN's all the same; only the formats whose table rows say
    # reset_after=False hold it.
    reset_after: bool = True

    def __post_init__(self) -> None:
        if self.mode not in CUDNN_MODES:
            raise BadInput(f"unknown RNN mode {self.mode!r} (choose {', '.join(CUDNN_MODES)})")
        if self.dtype not in DTYPES:
            raise BadInput(f"unknown dtype {self.dtype!r} (choose {', '.join(DTYPES)})")
        for name, most in (("input_size", MAX_SIZE), ("hidden_size", MAX_SIZE), ("num_layers", MAX_LAYERS)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadInput(f"{name} must be a positive integer, not {value!r}")
            if value > most:
                raise BadInput(f"{name} is {value}, more than any RNN rnnconv handles (at most {most})")
        if not isinstance(self.proj_size, int) or isinstance(self.proj_size, bool) or self.proj_size < 0:
            raise BadInput(f"proj_size must be 0 or a positive integer, not {self.proj_size!r}")
        if self.proj_size and self.mode != LSTM:
            raise BadInput(f"a projection (proj_size={self.proj_size}) exists only for LSTMs, not {self.mode}")
        if self.proj_size >= self.hidden_size:
            raise BadInput(f"proj_size ({self.proj_size}) must be smaller than hidden_size ({self.hidden_size})")
        if not self.reset_after and self.mode != GRU:
            raise BadInput(f"only a GRU has a reset gate to apply before its recurrent product, not {self.mode}")

    @property
    def cell(self) -> str:
        return CUDNN_MODES[self.mode][0]

    @property
    def gates(self) -> tuple[str, ...]:
        return CUDNN_GATES[self.cell]

    @property
    def nonlinearity(self) -> str:
        """nn.RNN's nonlinearity, tanh or relu, by the mode (tanh for an LSTM or GRU, which have no choice)."""
        return {mode: name for name, mode in NONLINEARITIES.items()}.get(self.mode, "tanh")

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def output_size(self) -> int:
        """Size of h (and of each direction's output): P with a projection, else H."""
        return self.proj_size or self.hidden_size

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_directions * self.output_size

    def param_shape(self, key: ParamKey) -> tuple[int, ...]:
        if key.kind == Kind.W:
            return (self.hidden_size, self.layer_input_size(key.layer))
        if key.kind == Kind.R:
            return (self.hidden_size, self.output_size)
        if key.kind == Kind.P:
            return (self.proj_size, self.hidden_size)
        return (self.hidden_size,)

    def param_keys(self) -> Iterator[ParamKey]:
        """Every tensor of the RNN, layer by layer, direction by direction."""
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                for kind in KINDS:
                    if kind == Kind.P:
                        if self.proj_size:
                            yield ParamKey(layer, direction, Kind.P, "")
                        continue
                    for gate in self.gates:
                        yield ParamKey(layer, direction, kind, gate)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_model(self, **extra: Any) -> SpecModel:
        """The spec as documents carry it: reset_after only where it is False (a document of any other RNN reads as
        it did before the field existed)."""
        return SpecModel(**{**self.to_dict(), "reset_after": None if self.reset_after else False, **extra})

    @classmethod
    def from_model(cls, model: SpecModel) -> RNNSpec:
        """The spec a document states (its types already checked); BadInput when the sizes contradict."""
        return cls(
            model.mode,
            model.input_size,
            model.hidden_size,
            model.num_layers,
            model.bidirectional,
            model.proj_size,
            model.dtype,
            model.bias,
            model.reset_after is not False,
        )

    def describe(self) -> str:
        parts = [f"{self.mode}", f"input {self.input_size}", f"hidden {self.hidden_size}"]
        if self.proj_size:
            parts.append(f"projection {self.proj_size}")
        parts.append(f"{self.num_layers} layer{'s' if self.num_layers > 1 else ''}")
        parts.append("bidirectional" if self.bidirectional else "unidirectional")
        parts.append(self.dtype)
        if not self.bias:
            parts.append("no bias")
        if not self.reset_after:
            parts.append(RESET_BEFORE_WORDS)
        return ", ".join(parts)


@dataclass(frozen=True, order=True)
class ParamKey:
    layer: int
    direction: int
    kind: str  # W, R, bW, bR or P
    gate: str  # cuDNN gate letter; "" for the projection

    @property
    def label(self) -> str:
        tensor = self.kind if self.kind == Kind.P else f"{self.kind}_{self.gate}"
        return f"layer{self.layer}.{DIRECTIONS[self.direction]}.{tensor}"


Loader = Callable[[], np.ndarray]


@dataclass(frozen=True)
class StoredAs:
    """How a file stores an RNN: its row of the layout table, and each cell's (layer, direction) stored tensors'
    names by role and the cell in words, as its reader found them: what a mistake in one stored tensor is named by."""

    row: Row
    cells: Mapping[tuple[int, int], tuple[Mapping[str, str], str]]


def _nothing_stacked(layer: int, direction: int, kind: str) -> np.ndarray | FileArray | None:
    return None


# A stored matrix whose column blocks are one kind's gates (a Keras kernel, (in, G*H)), and their order there.
Columns = tuple[np.ndarray | FileArray, tuple[str, ...]]


def _no_columns(layer: int, direction: int, kind: str) -> Columns | None:
    return None


@dataclass
class CanonicalRNN:
    """One RNN in cuDNN's convention: its spec, and a loader for each per-gate tensor.

    `param(key)` reads one tensor (as numpy, float32 for bfloat16 and half sources, float64
    for float64) when it is asked for; `arrays()` reads them all. `source` says where the RNN
    came from; `digest` is the source file's digest, still being computed on another core.
    """

    name: str
    spec: RNNSpec
    loaders: dict[ParamKey, Loader]
    source: Provenance = field(default_factory=Provenance)
    notes: list[str] = field(default_factory=list)
    # All gates of one kind of one layer and direction, stacked in cuDNN order, when the source
    # holds them that way (a weight space, a state_dict): writers then copy their bytes file to file
    # (a FileArray, still in the source) or at least assemble nothing.
    stacked: Callable[[int, int, str], np.ndarray | FileArray | None] = _nothing_stacked
    # All gates of one kind of one layer and direction as the column blocks of one stored matrix, when the source
    # holds them so (a Keras kernel): a writer then transposes the matrix straight into its output, whole, in tiles,
    # where each gate's block read alone would transpose the whole matrix into memory first.
    columns: Callable[[int, int, str], Columns | None] = _no_columns
    digest: Future[str] | None = None
    # The read of the source that computes `digest` and whether the values of its arrays still in the file (those
    # `stacked` gives) are finite: a writer that copies them file to file asks it rather than reading them again.
    source_pass: SourcePass | None = None
    # Whatever must stay open while the loaders may still read (the source file).
    keepalive: Any = None
    # A blob's own source, as its sidecar records it: where `--into` puts the RNN back.
    origin: Provenance | None = None
    # How the file it was read from stores it (None: a cuDNN weight space, or a reading of no row's).
    stored_as: StoredAs | None = None

    def param(self, key: ParamKey) -> np.ndarray:
        """One tensor, checked against the spec's shape for it."""
        array = np.asarray(self.loaders[key]())
        expected = self.spec.param_shape(key)
        if array.shape != expected:
            raise BadInput(f"{self.name}: {key.label} has shape {array.shape}, the spec needs {expected}")
        return array

    def arrays(self) -> dict[ParamKey, np.ndarray]:
        """Every tensor, layer by layer and direction by direction (read now)."""
        return {key: self.param(key) for key in self.spec.param_keys()}

    def provenance(self, wait: bool = True) -> Provenance:
        """`source` with the digest filled in (or, not waiting for it, a same-length placeholder)."""
        if self.digest is None:
            return self.source
        digest = self.digest.result() if wait or self.digest.done() else digest_placeholder()
        return self.source.model_copy(update={"digest": digest})

    @classmethod
    def from_cell_loaders(
        cls, name: str, spec: RNNSpec, cells: Mapping[tuple[int, int], Mapping[tuple[str, str], Loader]], **kwargs: Any
    ) -> CanonicalRNN:
        """Build from per-(layer, direction) loaders keyed (kind, gate), as table.apply.gate_loaders gives."""
        loaders: dict[ParamKey, Loader] = {}
        for key in spec.param_keys():
            cell = cells[(key.layer, key.direction)]
            loaders[key] = cell[(key.kind, key.gate)]
        return cls(name, spec, loaders, **kwargs)

    @classmethod
    def from_arrays(
        cls, name: str, spec: RNNSpec, arrays: Mapping[ParamKey, np.ndarray], **kwargs: Any
    ) -> CanonicalRNN:
        return cls(name, spec, {key: _constant(array) for key, array in arrays.items()}, **kwargs)

    @property
    def work_type(self) -> type[np.floating[Any]]:
        """The float type its stored tensors are assembled in: float32, or float64 for float64 (exact for every
        narrower type)."""
        return np.float64 if self.spec.dtype == "float64" else np.float32

    def stored(
        self,
        row: Row,
        layer: int,
        direction: int,
        keys: Collection[str] | None = None,
        work: Any = None,
        bias: bool | None = None,
    ) -> dict[str, np.ndarray]:
        """One layer and direction as `row`'s format stores it (by role): every stored tensor, or those of `keys`,
        assembled in `work` (default: `work_type`); with `bias`, its biases whether it has any or not (zeros). A GRU
        is never stored by a row of the other reset placement: those tensors would compute another function."""
        spec = self.spec
        if spec.mode == GRU and row.reset_after != spec.reset_after:
            said = {True: "after", False: "before"}
            raise Unsupported(
                f"{row.format}'s {row.source_class} applies its reset gate {said[row.reset_after]} the recurrent "
                f"product, and {self.name}'s GRU {said[spec.reset_after]} it: no weights of it compute this GRU"
            )
        return assemble_stored(
            row,
            spec.hidden_size,
            spec.layer_input_size(layer),
            spec.output_size,
            lambda kind, gate: self.param(ParamKey(layer, direction, kind, gate)),
            has_bias=spec.bias if bias is None else bias,
            proj=spec.proj_size,
            dtype=work or self.work_type,
            keys=keys,
        )


def _constant(array: np.ndarray) -> Loader:
    return lambda: array


def stack(name: str, rnns: list[CanonicalRNN]) -> CanonicalRNN:
    """Consecutive one-layer RNNs (Keras layers stacked with return_sequences) as one multi-layer RNN."""
    first = rnns[0].spec
    for below, above in itertools.pairwise(rnns):
        same = ("mode", "hidden_size", "bidirectional", "proj_size", "dtype", "bias", "reset_after")
        differs = [f for f in same if getattr(below.spec, f) != getattr(above.spec, f)]
        if differs:
            raise BadInput(
                f"{below.name} and {above.name} differ in {', '.join(differs)}, so they are not the "
                f"layers of one cuDNN RNN"
            )
        if above.spec.input_size != below.spec.num_directions * below.spec.output_size:
            raise BadInput(
                f"{above.name} takes {above.spec.input_size} inputs but {below.name} gives "
                f"{below.spec.num_directions * below.spec.output_size}, so they do not stack"
            )
    for rnn in rnns:
        if rnn.spec.num_layers != 1:
            raise BadInput(f"{rnn.name} has {rnn.spec.num_layers} layers already; stack one-layer RNNs")
    spec = RNNSpec(**{**first.to_dict(), "num_layers": len(rnns)})
    loaders: dict[ParamKey, Loader] = {}
    for layer, rnn in enumerate(rnns):
        for key, load in rnn.loaders.items():
            loaders[ParamKey(layer, key.direction, key.kind, key.gate)] = load
    source = rnns[0].source.model_copy(update={"layer": name, "stacked": [r.name for r in rnns]})
    stored = [r.stored_as for r in rnns]
    first_stored = stored[0]
    stored_as = None
    if first_stored is not None and all(s is not None and s.row == first_stored.row for s in stored):
        cells = {(layer, d): cell for layer, s in enumerate(stored) if s for (_, d), cell in s.cells.items()}
        stored_as = StoredAs(first_stored.row, cells)  # each one-layer RNN's cells, as the stack's layers
    notes = [n for r in rnns for n in r.notes]
    notes.append(
        f"{name}: layers {', '.join(r.name for r in rnns)} stacked into one {len(rnns)}-layer RNN "
        f"(nothing may sit between them in the model)"
    )
    return CanonicalRNN(
        name,
        spec,
        loaders,
        source,
        notes,
        columns=lambda layer, direction, kind: rnns[layer].columns(0, direction, kind),
        digest=rnns[0].digest,
        keepalive=rnns[0].keepalive,
        stored_as=stored_as,
    )
