"""What the graph formats share (ONNX, OpenVINO, TFLite, ncnn, and MLX's stacks of modules): a file's layers (each a
sequence op, its directions in it), the glue that moves one layer's output into the next one's input, the chains of
layers that are one multi-layer RNN, one --layer rule, and the verbs on them: read, inspect, resolve, run.

A graph format supplies how to parse its file (a `Graph`: its layers, and which layer feeds each as the one below
in the same RNN) and how a chain's tensors read into the canonical form and run in its runtime (`GraphFormat`).

The --layer rule, for every graph format: a name picks a chain by its own name, or by its layers' names as a,b,c,
or one layer alone by its name (a layer of a chain, taken alone: a one-layer RNN).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import InspectEntry, InspectReport, Provenance, RNNSizes
from rnnconv.errors import BadInput, RnnconvError, Unsupported, listing, no_such_rnn, several_rnns
from rnnconv.formats.base import Format
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.sources import Source, inspect_entry, read_chosen
from rnnconv.table.apply import find_row, mode_for
from rnnconv.table.constants import CUDNN_MODES


class Layer(Protocol):
    """One layer of an RNN in a graph, as the chains see it."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> object:
        """What every layer of one RNN has alike (op, sizes, direction, settings, element type); None: a layer that
        is the layer of no chain."""
        ...

    @property
    def input_size(self) -> int: ...

    @property
    def width(self) -> int:
        """What it gives the layer above: its directions times its output size."""
        ...

    @property
    def shown_class(self) -> str:
        """Its class, as inspect lists it."""
        ...


L = TypeVar("L", bound=Layer)


class SequenceOp(Layer, Protocol):
    """A sequence op as a layer: its Y holds its directions apart, which the glue to the next layer merges."""

    @property
    def directions(self) -> int: ...


S = TypeVar("S", bound=SequenceOp)


def same_rnn(below: Layer, above: Layer) -> bool:
    """Whether `above` can be the layer after `below` in one RNN: alike, and fed all that `below` gives."""
    return below.kind is not None and below.kind == above.kind and above.input_size == below.width


def refuse(layers: Sequence[L], why: Callable[[L], str | None]) -> None:
    """Refuse a chain one of whose layers cuDNN cannot compute (Unsupported: the first one's reason)."""
    for layer in layers:
        reason = why(layer)
        if reason:
            raise Unsupported(reason)


def chained(layers: Sequence[L], below: Callable[[L], L | None]) -> list[list[L]]:
    """The layers as maximal runs, each layer fed by the one before it as the layer below in the same RNN:
    `below(layer)` is that layer, or None where it starts a run. A layer is below one layer at most: the first of
    the file's order that it feeds."""
    following: dict[int, L] = {}
    for above in layers:
        found = below(above)
        if found is not None and id(found) not in following:
            following[id(found)] = above
    preceded = {id(layer) for layer in following.values()}
    chains = []
    for layer in layers:
        if id(layer) in preceded:
            continue
        chain = [layer]
        while id(chain[-1]) in following and len(chain) <= len(layers):
            chain.append(following[id(chain[-1])])
        chains.append(chain)
    return chains


def consecutive(layers: Sequence[L], link: Callable[[L, L], bool] = same_rnn) -> list[list[L]]:
    """The layers as maximal runs of consecutive ones, each one the layer after the one before it in one RNN
    (`link`: whether it is)."""
    below = {id(above): lower for lower, above in itertools.pairwise(layers) if link(lower, above)}
    return chained(layers, lambda layer: below.get(id(layer)))


def stacked(
    layers: Sequence[L],
    placed: Callable[[L], tuple[str, int, int | None] | None],
    first: Callable[[list[L]], bool],
    follows: Callable[[list[L], list[L]], bool],
) -> list[tuple[str, list[list[L]]]]:
    """The runs of layers that a file names by their place in a stack, where it has no graph to join them (rnnconv's
    own stacks: `placed(layer)` is the stack's name, the layer's index and its direction, None for a layer of one
    direction): each stack's layers from its first on (`first` says a layer can start an RNN), each one's directions
    together, while `follows(below, above)`; a stack of one layer of one direction is no run."""
    stacks: dict[str, dict[int, dict[int, L]]] = {}
    for layer in layers:
        place = placed(layer)
        if place is not None:
            stack, index, direction = place
            stacks.setdefault(stack, {}).setdefault(index, {})[-1 if direction is None else direction] = layer

    def at(by_index: dict[int, dict[int, L]], index: int) -> list[L] | None:
        found = by_index.get(index, {})
        if set(found) == {-1}:
            return [found[-1]]
        return [found[0], found[1]] if set(found) == {0, 1} else None

    runs = []
    for stack, by_index in stacks.items():
        start = at(by_index, 0)
        if start is None or not first(start):
            continue
        run = [start]
        while (after := at(by_index, len(run))) is not None and follows(run[-1], after):
            run.append(after)
        if len(run) > 1 or len(start) > 1:
            runs.append((stack, run))
    return runs


# --- the glue between two layers ---------------------------------------------------------------------------------

TRANSPOSE, RESHAPE, SQUEEZE, UNSQUEEZE, CONCAT, IDENTITY = (
    "Transpose",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Concat",
    "Identity",
)


@dataclass(frozen=True)
class Glue:
    """An op between two layers, as far as moving a tensor's axes goes: its op, and the integers that say how (a
    Transpose's permutation, a Reshape's shape, a Squeeze's or an Unsqueeze's axes; None where they are not
    constants); a Reshape's 0 copies the dimension unless it says otherwise; a Concat copies its one input (`inputs`:
    how many tensors it joins). Any other op is named by its own type."""

    op: str
    values: list[int] | None = None
    zero_copies: bool = True
    inputs: int = 1


def through_glue(value: Any, step: Callable[[Any], tuple[Glue, Any] | None], most: int) -> tuple[list[Glue], Any]:
    """Back from a layer's input through the glue before it, at most `most` ops: the glue, in the order the data
    flows, and what feeds it. `step(value)` is the glue op that makes `value` and what feeds that op, or None where
    no glue op makes it."""
    glue: list[Glue] = []
    while len(glue) < most and (found := step(value)) is not None:
        op, value = found
        glue.insert(0, op)
    return glue, value


# A tensor's axes as the glue moves them: each axis the run of a sequence op's Y's axes it holds, in memory order,
# an axis of size 1 holding none (axes of size 1 are dropped from the start: they move nothing). Y's axes (A, D, B,
# H): "outer" and "inner", the batch and the steps in the op's order (their sizes unknown), "directions", "hidden".
Axes = tuple[tuple[str, ...], ...]
UNSIZED = ("outer", "inner")


MAX_GLUE = 6  # ops between two layers of one RNN, at most


def glued(
    start: Callable[[S], Any], step: Callable[[Any], tuple[Glue, Any] | None], giver: Callable[[Any], S | None]
) -> Callable[[S], S | None]:
    """What `chained` asks of a graph whose layers are joined by the exporters' glue: the layer below a layer in one
    RNN, from the layer's input (`start`) back one glue op at a time (`step`: the op that makes a value and what
    feeds it) to the layer whose output that is (`giver`), alike and its directions merged as cuDNN feeds its next
    layer; None where there is none."""

    def below(later: S) -> S | None:
        if later.kind is None:
            return None
        glue, value = through_glue(start(later), step, MAX_GLUE)
        earlier = giver(value)
        if earlier is None or not same_rnn(earlier, later):
            return None
        return earlier if merges_directions(glue, earlier.directions, earlier.width) else None

    return below


def merges_directions(glue: list[Glue], directions: int, width: int) -> bool:
    """Whether the glue turns a sequence op's Y (A, D, B, H) into the next one's input (A, B, D*H), as cuDNN feeds
    its next layer, by moving axes alone: each op followed on the axes it moves, whatever the exporter's order (a
    Squeeze of the directions, a Transpose putting them last then a Reshape merging them with the hidden size, the
    Transposes OpenVINO's ONNX frontend adds around them, Unsqueezes, a Concat of one tensor, Identity). A
    Reshape's sizes may be given (an exporter's static shapes), kept (0) or inferred (-1)."""
    sizes = {"directions": directions, "hidden": width // directions}
    axes: Axes | None = tuple(
        tuple(a for a in (name,) if sizes.get(name) != 1) for name in ("outer", "directions", "inner", "hidden")
    )
    for op in glue:
        if axes is None:
            return False
        axes = _moved(axes, op, sizes)
    return axes == (("outer",), ("inner",), tuple(a for a in ("directions", "hidden") if sizes[a] != 1))


def _moved(axes: Axes, glue: Glue, sizes: dict[str, int]) -> Axes | None:
    """The axes after one glue op, or None where it does more than move them (or says too little to tell)."""
    rank, values = len(axes), glue.values
    if glue.op == IDENTITY or (glue.op == CONCAT and glue.inputs == 1):
        return axes
    if values is None:
        return None
    if glue.op == TRANSPOSE:
        return tuple(axes[i] for i in values) if sorted(values) == list(range(rank)) else None
    if glue.op == SQUEEZE:
        dropped = {v % rank for v in values if -rank <= v < rank}
        if len(dropped) != len(values) or any(axes[i] for i in dropped):
            return None
        return tuple(axis for i, axis in enumerate(axes) if i not in dropped)
    if glue.op == UNSQUEEZE:
        out_rank = rank + len(values)
        added = {v % out_rank for v in values if -out_rank <= v < out_rank}
        if len(added) != len(values):
            return None
        rest = iter(axes)
        return tuple(() if i in added else next(rest) for i in range(out_rank))
    if glue.op == RESHAPE:
        return _reshaped(axes, values, glue.zero_copies, sizes)
    return None


def _reshaped(axes: Axes, shape: list[int], zero_copies: bool, sizes: dict[str, int]) -> Axes | None:
    """The axes after a Reshape to `shape`, where it only merges or splits neighbouring axes: each size taken from
    the axes in memory order (a size given for an axis of unknown size is taken as that axis's own), a 0 copying
    the axis at its index, a -1 taking what is left between the sizes before it and those after it."""
    flat = [name for axis in axes for name in axis]
    bounds = list(itertools.accumulate((len(axis) for axis in axes), initial=0))
    inferred = [i for i, n in enumerate(shape) if n == -1]
    if len(inferred) > 1 or any(n < -1 or (n == 0 and not zero_copies) for n in shape):
        return None
    split = inferred[0] if inferred else len(shape)

    def take(index: int, n: int, at: int, forward: bool) -> tuple[tuple[str, ...], int] | None:
        """The axis dimension `index` of size `n` makes of the labels from flat position `at` on (forward) or
        before it, and the position past them; None where no run of labels has that size."""
        step = 1 if forward else -1
        if n == 0:
            if index >= len(axes) or (bounds[index] if forward else bounds[index + 1]) != at:
                return None
            return axes[index], bounds[index + 1] if forward else bounds[index]
        taken: list[str] = []
        product = 1
        while product < n or not taken:
            here = at if forward else at - 1
            unsized = 0 <= here < len(flat) and flat[here] in UNSIZED
            if unsized and not taken:  # a size given for the batch or the steps: theirs
                return (flat[here],), at + step
            if product >= n:  # a size of 1: an axis holding none
                break
            if unsized or not 0 <= here < len(flat):
                return None
            taken.append(flat[here])
            product *= sizes[flat[here]]
            at += step
        return (tuple(taken if forward else reversed(taken)), at) if product == n else None

    out: list[tuple[str, ...]] = []
    at = 0
    for index, n in enumerate(shape[:split]):
        found = take(index, n, at, forward=True)
        if found is None:
            return None
        axis, at = found
        out.append(axis)
    tail: list[tuple[str, ...]] = []
    end = len(flat)
    for index in range(len(shape) - 1, split, -1):
        found = take(index, shape[index], end, forward=False)
        if found is None:
            return None
        axis, end = found
        tail.insert(0, axis)
    if at > end or (not inferred and at != len(flat)):
        return None
    middle = [tuple(flat[at:end])] if inferred else []
    return (*out, *middle, *tail)


# --- a file's chains, and --layer ---------------------------------------------------------------------------------


@dataclass
class Chain(Generic[L]):
    """One RNN of a graph: its layers, bottom first, and its name (its layers' names joined, unless the file names
    it otherwise)."""

    name: str
    layers: list[L]

    @property
    def first(self) -> L:
        return self.layers[0]

    def __iter__(self) -> Iterator[L]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)


def named(chains: list[list[L]]) -> list[Chain[L]]:
    """Chains named by their layers' names, joined: a,b,c."""
    return [Chain(",".join(layer.name for layer in chain), chain) for chain in chains]


class Graph(Generic[L]):
    """A graph format's file, parsed: its layers and the chains of them that are one RNN each, the file kind it
    records, the source it records (one rnnconv wrote); `what` names its layers in a sentence ("RNN node")."""

    what: ClassVar[str]
    between: ClassVar[str] = ", "  # what separates the RNNs a sentence lists

    def __init__(self, path: Path, kind: str, layers: list[L], chains: list[Chain[L]], recorded: Provenance | None):
        self.path, self.kind, self.layers, self.chains, self.recorded = path, kind, layers, chains, recorded
        self.input_names: list[str] = []  # the model's input and output names, where the format has them
        self.output_names: list[str] = []

    @property
    def streaming(self) -> bool:
        """Whether it is a streaming model (x and every layer's states in, y and the next states out)."""
        from rnnconv.formats.streaming import is_streaming

        return is_streaming(self.input_names, self.output_names)

    def find(self, name: str) -> L | None:
        """The layer a name picks alone."""
        return next((layer for layer in self.layers if layer.name == name), None)

    def alone(self, layer: L) -> Chain[L]:
        """A layer taken alone, as an RNN of its own."""
        return Chain(layer.name, [layer])

    @abstractmethod
    def nothing_held(self) -> str:
        """The sentence for a file that holds no layer rnnconv reads: what it holds instead."""

    def several_notes(self) -> str:
        """What the sentence for a file of several RNNs adds."""
        return ""

    def choose(self, layer: str | None, take_all: bool) -> list[Chain[L]]:
        """The chains to read: what `layer` names (the --layer rule), else the file's one, or every one with
        `take_all`."""
        if layer is not None:
            names = [n.strip() for n in layer.split(",")]
            for chain in self.chains:
                if chain.name == layer or [x.name for x in chain.layers] == names:
                    return [chain]
            alone = self.find(names[0]) if len(names) == 1 else None
            if alone is not None:
                return [self.alone(alone)]
            known = [x.name for x in self.layers] + [c.name for c in self.chains if len(c.layers) > 1]
            raise no_such_rnn(f"{self.path} has no {self.what} or chain", layer, list(dict.fromkeys(known)))
        if not self.layers:
            raise BadInput(self.nothing_held())
        if len(self.chains) == 1 or take_all:
            return self.chains
        held = listing((chain.name for chain in self.chains), separator=self.between)
        raise several_rnns(self.path, f"holds {len(self.chains)} RNNs ({held}){self.several_notes()}")


# --- the verbs -----------------------------------------------------------------------------------------------------

G = TypeVar("G", bound=Graph[Any])


class GraphFormat(Format, Generic[G, L]):
    """A graph format's verbs, on what its `load`, `to_canonical` and `run_chain` give."""

    layer_word: ClassVar[str]  # what a sentence calls its layers: "node", "op"
    layers_alone: ClassVar[bool] = True  # whether inspect lists each layer of a chain alone too

    @abstractmethod
    def load(self, path: Path, options: ReadOptions | None = None) -> G:
        """The file parsed (`options`: those of a conversion's source, which may guard what it reads)."""

    @abstractmethod
    def to_canonical(self, graph: G, chain: Chain[L], source: Provenance, options: ReadOptions) -> CanonicalRNN:
        """The canonical RNN of a chain."""

    @abstractmethod
    def run_chain(
        self, graph: G, chain: Chain[L], source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own layers of a chain, run in the format's runtime; and how they ran."""

    def sizes(self, graph: G, chain: Chain[L]) -> RNNSizes | None:
        """The sizes of a chain that does not convert, as far as the file tells them."""
        return None

    def chain_note(self, chain: Chain[L]) -> str | None:
        """What inspect says of a chain: that its layers are one RNN, where it has several."""
        if len(chain.layers) == 1:
            return None
        return f"{self.layer_word}s {listing(x.name for x in chain.layers)} are the layers of one RNN"

    def notes(self, graph: G) -> list[str]:
        """What inspect says of the file: of its chains, and (a format's own) of what else it holds."""
        return [note for chain in graph.chains if (note := self.chain_note(chain)) is not None]

    def guarded(self, graph: G) -> contextlib.AbstractContextManager[Any]:
        """What guards a read besides the file itself (a weights file beside it) while it lasts."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        graph = self.load(path, options)
        chains = graph.choose(options.layer, options.take_all)
        found = read_chosen(
            path,
            graph.kind,
            chains,
            lambda chain, info: self.to_canonical(graph, chain, info, options),
            lambda chain: chain.name,
            options,
            origin=graph.recorded,
        )
        with self.guarded(graph):
            yield found

    def inspect(self, path: Path) -> InspectReport:
        graph = self.load(path)
        several = [chain for chain in graph.chains if len(chain.layers) > 1]
        rows = several + [graph.alone(x) for x in graph.layers] if self.layers_alone else graph.chains
        entries = self.entries(path, graph, rows)
        return InspectReport(path=str(path), format=graph.kind, rnns=entries, notes=self.notes(graph))

    def listed(self, path: Path) -> list[InspectEntry]:
        """Each chain once, in the file's order (inspect lists a chain's layers alone too)."""
        return self.entries(path, graph := self.load(path), graph.chains)

    def entries(self, path: Path, graph: G, chains: list[Chain[L]]) -> list[InspectEntry]:
        provenance = Provenance(path=str(path))
        return [
            inspect_entry(
                chain.name,
                chain.first.shown_class,
                functools.partial(self.to_canonical, graph, chain, provenance, ReadOptions()),
                functools.partial(self.sizes, graph, chain),
            )
            for chain in chains
        ]

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format in self.info.kinds:
            return recorded
        graph = self.load(path)
        (chain,) = graph.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": chain.name, "format": graph.kind})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        graph = self.load(path)
        (chain,) = graph.choose(source.layer, take_all=False)
        if graph.streaming and self.info.streams:  # its layers alone would not say how the file wires their states
            from rnnconv.formats.streaming import run_whole

            stream = self.stream(path, self.info.streams[0])
            return run_whole(stream, spec, inputs), f"{stream.how}: the streaming model as written, a sequence a call"
        return self.run_chain(graph, chain, source, spec, inputs)


class Sized(SequenceOp, Protocol):
    """A layer whose op, settings, hidden size, directions and element type say its sizes."""

    @property
    def op(self) -> str: ...

    @property
    def hidden(self) -> int: ...

    @property
    def dtype(self) -> str: ...

    def config(self) -> dict[str, Any]: ...


def sizes_of(fmt: str, cell: str, chain: Chain[Any], stored: str | None = None) -> RNNSizes | None:
    """The sizes of a chain that does not convert, as far as its first layer tells them: the mode its row gives it,
    else the cell family's first; `stored`: the integer type its weights are quantized to (what it stores)."""
    first: Sized = chain.first
    try:
        mode = mode_for(find_row(fmt, first.op, first.config()), first.config())
    except RnnconvError:
        mode = next(m for m, (c, _) in CUDNN_MODES.items() if c == cell)
    with contextlib.suppress(RnnconvError, ValueError):
        spec = RNNSpec(mode, first.input_size, first.hidden, len(chain.layers), first.directions == 2, 0, first.dtype)
        return RNNSizes.of(spec.to_model()).model_copy(update={"dtype": stored or spec.dtype})
    return None


def reverse_sequences(x: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """Each sequence of (T, B, ...) reversed within its length (padding stays at the end): cuDNN runs a reverse-only
    op as a forward one on each sequence reversed, so that is how such an op is compared."""
    out = np.array(x)
    for b in range(x.shape[1]):
        n = x.shape[0] if lengths is None else int(lengths[b])
        out[:n, b] = x[:n, b][::-1]
    return out
