"""`rnnconv explain --from A --to B`: where every stored number of one cell lands, drawn.

The picture is not drawn from the table by hand. Source tensors whose values encode their own
positions go through the mechanics a conversion uses (`table.apply.gate_loaders` into cuDNN's
per-gate tensors, `assemble_stored` or `weightspace.regions` out of them), and what comes out says
where each element went. A cell may hold half an element (a single bias split in two) or the sum of
two (two biases joined into one): three runs, with the codes j, 1 and j*j, tell every such cell apart
exactly, and the decoding checks itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.weightspace import regions
from rnnconv.errors import BadInput
from rnnconv.table.apply import assemble_stored, gate_loaders, stored_shapes, tensor_name
from rnnconv.table.constants import (
    BIAS_KINDS,
    CUDNN_GATES,
    DIRECTION_WORDS,
    DIRECTIONS,
    GATE_NAMES,
    KIND_OF_ROLE,
)
from rnnconv.table.rows import TABLE, Row

WEIGHT_SPACE = "cudnn"  # the format drawn as cuDNN's flat weight space, not as its per-gate tensors
MAX_ROWS, MAX_COLS = 12, 12  # what is drawn of each tensor: all of an LSTM with hidden size 3
MAX_ELEMENTS = 1 << 25  # a cell beyond this is not mapped: the three float64 runs would take gigabytes
INPUT_SIDE = (KIND_OF_ROLE["input_matrix"], KIND_OF_ROLE["input_bias"])
PROJECTION = KIND_OF_ROLE["projection"]
# Light (input side) and dark (recurrent side) background of each gate, by its place in cuDNN's order;
# biases are the same colours, underlined. The last pair is the LSTM projection's.
PALETTE = (
    ("#a8e6a1", "#2e7d32"),
    ("#f4a7a7", "#c62828"),
    ("#fff176", "#9a7b00"),
    ("#a7c7f2", "#1f4fa8"),
)
PROJECTION_COLOURS = ("#d0d0d0", "#6d6d6d")

Canonical = dict[tuple[str, str], np.ndarray]  # cuDNN's per-gate tensors of one cell, keyed (kind, gate)


@dataclass(frozen=True)
class Tensor:
    key: str  # a stored tensor's role, or a weight-space block's kind_gate
    name: str  # as the format calls it (kernel, weight_ih_l0), or the block (W_r)
    shape: tuple[int, ...]
    offset: int | None = None  # a weight-space block's, in elements


@dataclass(frozen=True)
class Layout:
    """One side of the picture: a table row's stored tensors, or (row None) cuDNN's weight space; of layer 0 and
    one direction."""

    fmt: str
    row: Row | None
    spec: RNNSpec
    bias_split: str
    direction: int = 0

    @property
    def name(self) -> str:
        if self.row is None:
            return "cuDNN weight space (flat)"
        when = " ".join(f"{k}={v}" for k, v in self.row.when.items())
        return f"{self.fmt} {self.row.source_class}" + (f" ({when})" if when else "")

    @property
    def title(self) -> str:
        return self.name + (f", {DIRECTION_WORDS[self.direction]} direction" if self.spec.bidirectional else "")

    def tensors(self) -> list[Tensor]:
        spec = self.spec
        if self.row is None:
            first_cell = [r for r in regions(spec) if r.key.layer == 0 and r.key.direction == self.direction]
            return [
                Tensor(_block(r.key.kind, r.key.gate), _block(r.key.kind, r.key.gate), r.shape, r.offset)
                for r in first_cell
            ]
        shapes = stored_shapes(self.row, spec.hidden_size, spec.input_size, spec.output_size, spec.proj_size, spec.bias)
        names = {role: tensor_name(self.row, role, 0, self.direction, spec.num_directions) for role in shapes}
        return [Tensor(role, names[role], shape) for role, shape in shapes.items()]

    def to_canonical(self, arrays: Mapping[str, np.ndarray]) -> Canonical:
        if self.row is None:
            return {_kind_gate(key): array for key, array in arrays.items()}
        spec = self.spec
        loaders = gate_loaders(
            self.row, spec.hidden_size, arrays.__getitem__, spec.bias, self.bias_split, spec.proj_size
        )
        return {key: np.asarray(load(), dtype=np.float64) for key, load in loaders.items()}

    def from_canonical(self, canonical: Canonical) -> dict[str, np.ndarray]:
        if self.row is None:
            return {t.key: canonical[_kind_gate(t.key)] for t in self.tensors()}
        spec = self.spec
        return assemble_stored(
            self.row,
            spec.hidden_size,
            spec.input_size,
            spec.output_size,
            lambda kind, gate: canonical[(kind, gate)],
            has_bias=spec.bias,
            proj=spec.proj_size,
            dtype=np.float64,
        )


def _block(kind: str, gate: str) -> str:
    return f"{kind}_{gate}" if gate else kind


def _kind_gate(block: str) -> tuple[str, str]:
    kind, _, gate = block.partition("_")
    return kind, gate


def layout_for(
    fmt: str, spec: RNNSpec, bias_split: str, layer_class: str | None = None, config: Any = None, direction: int = 0
) -> Layout:
    """A format's side for a cuDNN mode: the weight space, or the row of the class (and config) that runs it."""
    if fmt == WEIGHT_SPACE:
        return Layout(fmt, None, spec, bias_split, direction)
    runs = [r for r in TABLE if r.format == fmt and not r.refusal and spec.mode in r.modes.values()]
    if not runs:
        raise BadInput(f"{fmt} has no layer that computes cuDNN's {spec.mode}")
    # a file's class may be qualified (nn.LSTM) or wrapped (Bidirectional(LSTM), RNN(LSTM)): the row is the layer's
    short = (re.findall(r"\w+", layer_class or "") or [""])[-1].lower()
    named = [r for r in runs if r.source_class.lower() == short]
    if layer_class and not named:
        raise BadInput(f"{fmt} {layer_class} does not compute cuDNN's {spec.mode}")
    chosen = [r for r in named if all(r.setting(config or {}, k) == v for k, v in r.when.items())]
    return Layout(fmt, (chosen or named or runs)[0], spec, bias_split, direction)


# --- the mapping --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mapping_:
    """Where each element went: per drawn tensor of each side, the source elements of each cell."""

    source: Layout
    target: Layout
    source_tensors: list[Tensor]
    target_tensors: list[Tensor]
    bases: list[int]  # the id of each source tensor's first element, minus one
    first: dict[str, np.ndarray]  # target tensor -> first source element id of each cell (0: none)
    second: dict[str, np.ndarray]  # target tensor -> second source element id (0: none)
    factor: dict[str, np.ndarray]  # target tensor -> the factor both are taken with
    colour_of: np.ndarray  # source element id -> index of the cuDNN (kind, gate) it lands in; -1: nowhere
    classes: list[tuple[str, str]]  # those (kind, gate)

    def element(self, element_id: int) -> tuple[Tensor, tuple[int, ...]]:
        """The source tensor and index of an element id."""
        which = int(np.searchsorted(self.bases, element_id, side="left")) - 1
        tensor = self.source_tensors[which]
        return tensor, tuple(int(i) for i in np.unravel_index(element_id - 1 - self.bases[which], tensor.shape))


def map_cell(source: Layout, target: Layout) -> Mapping_:
    """Run position codes through the conversion mechanics, source layout to target layout."""
    tensors = source.tensors()
    sizes = [int(np.prod(t.shape)) for t in tensors]
    if sum(sizes) > MAX_ELEMENTS:
        raise BadInput(f"one cell here has {sum(sizes):,} elements; explain maps cells of up to {MAX_ELEMENTS:,}")
    bases = [int(b) for b in np.cumsum([0, *sizes])[:-1]]

    def run(code: Callable[[np.ndarray], np.ndarray]) -> tuple[Canonical, dict[str, np.ndarray]]:
        ids = {
            t.key: (base + 1 + np.arange(size, dtype=np.float64)).reshape(t.shape)
            for t, base, size in zip(tensors, bases, sizes)
        }
        canonical = source.to_canonical({key: code(values) for key, values in ids.items()})
        return canonical, target.from_canonical(canonical)

    (canon_a, out_a), (canon_b, out_b), (canon_c, out_c) = (
        run(lambda j: j),
        run(np.ones_like),
        run(lambda j: j * j),
    )
    classes = list(canon_a)
    colour_of = np.full(sum(sizes) + 1, -1, dtype=np.int16)
    for index, key in enumerate(classes):
        first, second, _ = _decode(canon_a[key], canon_b[key], canon_c[key])
        colour_of[first[first > 0]] = index
        colour_of[second[second > 0]] = index
    decoded = {key: _decode(out_a[key], out_b[key], out_c[key]) for key in out_a}
    return Mapping_(
        source,
        target,
        tensors,
        target.tensors(),
        bases,
        {k: v[0] for k, v in decoded.items()},
        {k: v[1] for k, v in decoded.items()},
        {k: v[2] for k, v in decoded.items()},
        colour_of,
        classes,
    )


def _decode(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cells that hold f*(x [+ y]) of element ids x, y, from the runs a = f(x+y), b = f*n, c = f(x*x+y*y)."""
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    held = b != 0
    single = held & (a * a == b * c)  # (x+y)^2 = 2(x^2+y^2) only when x = y: one element
    pair = held & ~single
    f = np.where(single, b, b / 2)
    safe_f = np.where(held, f, 1)
    s, q = a / safe_f, c / safe_f
    root = np.sqrt(np.maximum(2 * q - s * s, 0))  # x, y = (s -+ sqrt(2q - s^2)) / 2
    first = np.where(single, np.divide(c, a, out=np.zeros_like(a), where=single), np.where(pair, (s - root) / 2, 0))
    second = np.where(pair, (s + root) / 2, 0)
    first, second = np.rint(first).astype(np.int64), np.rint(second).astype(np.int64)
    n = np.where(pair, 2, 1)
    rebuilt = (f * (first + second), np.where(held, f * n, 0), f * (first * first + second * second))
    if not all(np.array_equal(np.where(held, r, 0), np.where(held, v, 0)) for r, v in zip(rebuilt, (a, b, c))):
        raise RuntimeError("explain: a cell holds more than two elements or unequal parts; the picture cannot say")
    return first, second, np.where(held, f, 0)


# --- drawing -----------------------------------------------------------------------------------------

GAP = 4  # columns between the two sides
MIN_CELLS = 3  # a side goes next to the other only where its lines keep this many cells
Numbers = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # a real file's source and target arrays


@dataclass(frozen=True)
class Cell:
    text: str
    colour: int  # index into the mapping's classes; -1: nothing lands here


def picture(mappings: Sequence[Mapping_], plain: bool, values: Sequence[Numbers] | None = None) -> RenderableType:
    """Each mapping's two sides (one per direction of a file's layer), then the legend; `values` (source, target
    arrays of a real file, one pair per mapping) replace the position codes."""
    parts: list[RenderableType] = []
    cut = False
    for index, mapping in enumerate(mappings):
        sides, was_cut = _sides(mapping, plain, values[index] if values else None)
        if index:
            parts.append(Text(""))
        parts.append(_Pair(sides))
        cut |= was_cut
    return Group(*parts, *_legend(mappings[0], plain, cut, values is not None))


def _sides(mapping: Mapping_, plain: bool, values: Numbers | None) -> tuple[list[RenderableType], bool]:
    tags = _tags(mapping.source_tensors)
    cut = False

    def source_cells(tensor: Tensor, base: int) -> np.ndarray:
        ids = (base + 1 + np.arange(int(np.prod(tensor.shape))).reshape(tensor.shape))[_shown(tensor.shape)]
        return np.vectorize(lambda j: Cell(_label(mapping, tags, int(j)), int(mapping.colour_of[j])), otypes=[object])(
            ids
        )

    def target_cells(tensor: Tensor) -> np.ndarray:
        shown = _shown(tensor.shape)
        first, second, factor = (m[tensor.key][shown] for m in (mapping.first, mapping.second, mapping.factor))

        def cell(x: int, y: int, f: float) -> Cell:
            if not x:
                return Cell("0", -1)
            text = "+".join(_label(mapping, tags, j) for j in (x, y) if j)
            return Cell(text if f == 1 else f"{text}*{f:g}", int(mapping.colour_of[x]))

        return np.vectorize(cell, otypes=[object])(first, second, factor)

    def with_values(cells: np.ndarray, numbers: np.ndarray) -> np.ndarray:
        return np.vectorize(lambda c, v: Cell(f"{v:.3f}", c.colour), otypes=[object])(cells, numbers)

    hidden = mapping.source.spec.hidden_size
    sides: list[RenderableType] = []
    for layout, tensors, numbers in (
        (mapping.source, mapping.source_tensors, values[0] if values else None),
        (mapping.target, mapping.target_tensors, values[1] if values else None),
    ):
        drawn = []
        for tensor in tensors:
            if tensors is mapping.source_tensors:
                cells = source_cells(tensor, mapping.bases[mapping.source_tensors.index(tensor)])
            else:
                cells = target_cells(tensor)
            if numbers is not None:
                cells = with_values(cells, np.asarray(numbers[tensor.key]).reshape(tensor.shape)[_shown(tensor.shape)])
            drawn.append((tensor, np.vectorize(lambda c: _text(c, mapping, plain), otypes=[object])(cells)))
        blocks = tensors[0].offset is not None
        heading = layout.title + (": offset, block, elements" if blocks else ", as stored")
        parts: list[RenderableType] = [_wrapping(heading, "" if plain else "bold")]
        if blocks:  # one grid, so that the offsets line up
            grids = [_Grid(drawn, hidden, plain)]
            parts += grids
        else:
            grids = []
            for tensor, cells in drawn:
                tagged = not values and tensors is mapping.source_tensors
                name = f"{tensor.name} {_shape(tensor.shape)}" + (f"  = {tags[tensor.key]}" if tagged else "")
                grids.append(_Grid([(tensor, cells)], hidden, plain))
                parts += [_wrapping(name, "" if plain else "italic"), grids[-1]]
        cut |= any(grid.cut for grid in grids)
        sides.append(_Side(parts))
    return sides, cut


def _shown(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """What is drawn of a tensor: the first MAX_ROWS x MAX_COLS of a matrix, as many lines of a vector."""
    return (slice(MAX_ROWS), slice(MAX_COLS)) if len(shape) > 1 else (slice(MAX_ROWS * MAX_COLS),)


def _wrapping(text: str, style: str = "") -> Text:
    """A line of words that wraps at spaces to the width it is given (the console itself never wraps)."""
    return Text(text, style=style, no_wrap=False, overflow="fold")


class _Side:
    """One side: headings, names and grids. Headings wrap, so the grids alone say how wide it would like to be."""

    def __init__(self, parts: Sequence[RenderableType]):
        self.parts = parts

    def __rich_console__(self, console: Console, options: Any) -> Iterator[RenderableType]:
        yield from self.parts

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        measures = [Measurement.get(console, options, part) for part in self.parts]
        narrowest = max(m.minimum for m in measures)
        widest = max(m.maximum if isinstance(p, _Grid) else m.minimum for p, m in zip(self.parts, measures))
        return Measurement(narrowest, max(narrowest, widest))


class _Pair:
    """The two sides next to each other on a terminal wide enough for both (the source side's rows continued
    on more lines if need be), else one above the other: in a pipe or a log always, so that each tensor's lines
    stay whole for grep."""

    def __init__(self, sides: Sequence[RenderableType]):
        self.sides = sides

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Any]:
        (source_min, source_max), (_, target_max) = (Measurement.get(console, options, side) for side in self.sides)
        width = options.max_width
        if console.is_terminal and target_max + GAP + source_min <= width:
            target = target_max
            source = min(source_max, width - GAP - target)
            left = console.render_lines(self.sides[0], options.update(width=source), pad=True)
            right = console.render_lines(self.sides[1], options.update(width=target), pad=False)
            for row in range(max(len(left), len(right))):
                yield from left[row] if row < len(left) else [Segment(" " * source)]
                yield Segment(" " * GAP)
                yield from right[row] if row < len(right) else []
                yield Segment.line()
        else:
            for index, side in enumerate(self.sides):
                if index:
                    yield Text("")
                yield side

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        widths = [Measurement.get(console, options, side) for side in self.sides]
        return Measurement(max(w.minimum for w in widths), sum(w.maximum for w in widths) + GAP)


class _Grid:
    """Tensors as lines of cells, the first MAX_ROWS x MAX_COLS of each (weight-space blocks with their offsets),
    laid out by the width the console gives.

    Lines of text rather than a rich Table: a table squeezes or folds its cells in a narrow terminal, these
    never split one. A row too long for the width goes on: a stored matrix in bands of columns (a gate's
    columns together where they fit), a vector or a weight-space row on lines that start with their own
    index or offset."""

    def __init__(self, drawn: list[tuple[Tensor, np.ndarray]], hidden: int, plain: bool):
        self.drawn = drawn  # each tensor with the cells drawn of it (_shown)
        self.hidden = hidden
        self.dim = "" if plain else "dim"
        self.blocks = drawn[0][0].offset is not None
        self.cell_width = max(len(text) for _, cells in drawn for text in cells.reshape(-1))
        shapes = [t.shape for t, _ in drawn]
        self.cut_cols = any(len(shape) > 1 and shape[1] > MAX_COLS for shape in shapes)
        self.cut = self.cut_cols or any(
            shape[0] > MAX_ROWS if len(shape) > 1 else shape[0] > MAX_ROWS * MAX_COLS for shape in shapes
        )
        self.gutter: tuple[int, ...]  # the widths of the offset (or index) and the block name before the cells
        if self.blocks:
            ends = [(t.offset or 0) + int(np.prod(t.shape)) for t, _ in drawn]
            self.gutter = (len(str(max(ends))), max(len(t.name) for t, _ in drawn))
        else:
            self.gutter = (max(len(str(len(cells) - 1)) for _, cells in drawn),)
        self.widest = max(cells.shape[-1] if cells.ndim > 1 else min(cells.size, MAX_COLS) for _, cells in drawn)

    def _width(self, cells: int) -> int:
        return sum(self.gutter) + len(self.gutter) - 1 + cells * (self.cell_width + 1) + (4 if self.cut_cols else 0)

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        return Measurement(self._width(min(self.widest, MIN_CELLS)), self._width(self.widest))

    def __rich_console__(self, console: Console, options: Any) -> Iterator[Text]:
        room = max(1, (options.max_width - self._width(0)) // (self.cell_width + 1))
        for tensor, cells in self.drawn:
            if cells.ndim > 1 and not self.blocks:
                yield from self._bands(tensor, cells, room)
            else:
                yield from self._runs(tensor, cells, room)

    def _line(self, gutter: Sequence[str], cells: Sequence[Text], more: bool = False) -> Text:
        line = Text(" ".join(g.rjust(w) if i == 0 else g.ljust(w) for i, (g, w) in enumerate(zip(gutter, self.gutter))))
        line.stylize(self.dim, 0, self.gutter[0])
        for cell in cells:
            line.append(" " * (1 + self.cell_width - len(cell)))
            line.append(cell)
        if more:
            line.append(" ...")
        return line

    def _bands(self, tensor: Tensor, cells: np.ndarray, room: int) -> Iterator[Text]:
        """A stored matrix: its rows, in bands of as many columns as the width holds."""
        rows, cols = tensor.shape
        shown_rows, shown_cols = cells.shape
        per = _even(shown_cols, room)
        if per < shown_cols and room >= self.hidden and cols % self.hidden == 0:
            per = room - room % self.hidden  # a band holds whole gates
        for start in range(0, shown_cols, per):
            stop = min(start + per, shown_cols)
            if per < shown_cols:
                yield Text(f"{'':>{self.gutter[0]}} columns {start}-{stop - 1}", style=self.dim)
            for r in range(shown_rows):
                yield self._line([str(r)], list(cells[r, start:stop]), more=stop == shown_cols and cols > shown_cols)
            if rows > shown_rows:
                yield self._line([""], [Text("...")])

    def _runs(self, tensor: Tensor, cells: np.ndarray, room: int) -> Iterator[Text]:
        """A vector, or a weight-space block: lines of consecutive elements, each after its index or offset."""
        lines = [(r * tensor.shape[1], row) for r, row in enumerate(cells)] if cells.ndim > 1 else [(0, cells)]
        cols = tensor.shape[-1]
        per = _even(len(lines[0][1]), room)
        first = True
        for at, row in lines:
            for start in range(0, len(row), per):
                stop = min(start + per, len(row))
                gutter = [str((tensor.offset or 0) + at + start)] + (
                    [tensor.name if first else ""] if self.blocks else []
                )
                more = stop == len(row) and cells.ndim > 1 and cols > len(row)
                yield self._line(gutter, list(row[start:stop]), more)
                first = False
        if int(np.prod(tensor.shape)) > (len(lines) * cols if cells.ndim > 1 else cells.size):
            yield self._line([""] * len(self.gutter), [Text("...")])


def _even(count: int, room: int) -> int:
    """How many of `count` cells go on a line that holds `room`: as many on each line as on the others."""
    lines = -(-count // max(room, 1))
    return -(-count // lines)


def _text(cell: Cell, mapping: Mapping_, plain: bool) -> Text:
    if cell.colour < 0:
        return Text(cell.text, style="" if plain else "dim")
    kind, gate = mapping.classes[cell.colour]
    if plain:
        return Text(f"{gate or kind}:{cell.text}")
    return Text(cell.text, style=_style(mapping.source.spec.cell, kind, gate))


def _style(cell: str, kind: str, gate: str) -> Style:
    light, dark = PALETTE[CUDNN_GATES[cell].index(gate)] if gate else PROJECTION_COLOURS
    input_side = kind in INPUT_SIDE
    return Style(
        bgcolor=light if input_side else dark, color="black" if input_side else "white", underline=kind in BIAS_KINDS
    )


def _legend(mapping: Mapping_, plain: bool, cut: bool, values: bool) -> Iterator[RenderableType]:
    cell = mapping.source.spec.cell
    names = GATE_NAMES[cell]
    if plain:
        yield _wrapping(
            "cells: gate:"
            + ("value" if values else "source element")
            + "; gates "
            + ", ".join(f"{g} {names[g]}" for g in CUDNN_GATES[cell])
        )
    else:
        kinds = [k for k in dict.fromkeys(k for k, _ in mapping.classes) if k != PROJECTION]
        legend = Table.grid(padding=(0, 1, 0, 0))
        legend.add_column()
        for _ in kinds:
            legend.add_column()
        for gate in CUDNN_GATES[cell]:
            legend.add_row(
                f"{gate} {names[gate]}", *(Text(f" {_block(k, gate)} ", style=_style(cell, k, gate)) for k in kinds)
            )
        yield Text("")
        yield legend
        yield _wrapping("light: input side (W, bW); dark: recurrent side (R, bR); underlined: biases", "dim")
    if any((first == 0).any() for first in mapping.first.values()):
        yield _wrapping(
            "0: no stored element lands here"
            + (
                f" (a single bias, --bias-split {mapping.source.bias_split})"
                if mapping.source.row and mapping.source.row.bias.summed
                else ""
            )
        )
    if cut:
        yield _wrapping(f"large tensors are cut: the first {MAX_ROWS} rows and {MAX_COLS} columns of each are drawn")


def _label(mapping: Mapping_, tags: Mapping[str, str], element_id: int) -> str:
    tensor, index = mapping.element(element_id)
    return f"{tags[tensor.key]}[{','.join(map(str, index))}]"


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _tags(tensors: list[Tensor]) -> dict[str, str]:
    """Short names for the cells: initials of a name's words, short words whole (kernel k, weight_ih_l0 wih);
    the tensors' kinds (W, R, bW, bR) when those clash."""

    def initials(name: str) -> str:
        words = re.findall(r"[A-Za-z]+\d*", re.split(r"[\[{]", name)[0])
        return "".join(w if len(w) <= 2 else w[0] for w in words if not re.search(r"\d", w))

    tags = {t.key: initials(t.name) for t in tensors}
    if any(t.offset is not None for t in tensors):  # the weight space's blocks are short already
        return {t.key: t.name for t in tensors}
    if len(set(tags.values())) < len(tags) or not all(tags.values()):
        tags = {t.key: KIND_OF_ROLE.get(t.key, t.key[0]) for t in tensors}
    return tags


def mapping_document(mappings: Sequence[Mapping_]) -> dict[str, Any]:
    """The mappings (one per direction) as JSON: each target tensor's cells, row-major, as the source elements
    they hold; every tensor and element says its direction (fwd, rev)."""
    first = mappings[0]
    return {
        "source": first.source.name,
        "target": first.target.name,
        "spec": first.source.spec.to_dict(),
        "source_tensors": [entry for m in mappings for entry in _tensor_entries(m)],
        "target_tensors": [entry for m in mappings for entry in _target_entries(m)],
    }


def _tensor_entries(mapping: Mapping_) -> list[dict[str, Any]]:
    tags, direction = _tags(mapping.source_tensors), DIRECTIONS[mapping.source.direction]
    return [
        {"name": t.name, "tag": tags[t.key], "shape": list(t.shape), "direction": direction}
        for t in mapping.source_tensors
    ]


def _target_entries(mapping: Mapping_) -> list[dict[str, Any]]:
    tags, direction = _tags(mapping.source_tensors), DIRECTIONS[mapping.source.direction]

    def cell(x: int, y: int, f: float) -> dict[str, Any] | None:
        if not x:
            return None
        parts = [mapping.element(j) for j in (x, y) if j]
        return {
            "from": [
                {"tensor": t.name, "tag": tags[t.key], "index": list(i), "direction": direction} for t, i in parts
            ],
            "factor": f,
        }

    return [
        {
            "name": t.name,
            "shape": list(t.shape),
            "offset": t.offset,
            "direction": direction,
            "cells": [
                cell(int(x), int(y), float(f))
                for x, y, f in zip(*(m[t.key].reshape(-1) for m in (mapping.first, mapping.second, mapping.factor)))
            ],
        }
        for t in mapping.target_tensors
    ]
