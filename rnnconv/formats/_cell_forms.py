"""A cell's matrix products in the forms graphs write them, taken as cuDNN's two (the step's input's and the carried
state's), and the constants a graph adds to a gate after its products, for `_cells.recognise`.

A cell's gates are computed from its input and its state by two products (cuDNN's W and R, as most exporters
write them), by one product per gate of each (Keras' `implementation=1`: W's and R's blocks each a product of its
own, its gates summing one of each), or by one product of their concatenation (TF1's `BasicLSTMCell`: [x, h] by
[W R]). Which block of one value's products goes with which of the other's is read by what the graph computes:
the two products of one gate are those whose sum (plus a constant) the graph computes. A constant the graph adds to
a gate's sum after its products (TF1's `forget_bias`) is read from the values the gate's activation gives.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rnnconv.errors import cut, listing

Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
MAX_PAIRINGS = 6  # orders of the products whose gates the sums do not tell, tried (a GRU's candidate: one)
GATE_COUNTS = (1, 3, 4)  # an RNN's, a GRU's and an LSTM's
OFFSET_NOISE = 1e-4  # a gate's offset read from float32 values this near 0 is none


@dataclass(frozen=True)
class Product:
    """A constant matrix the graph multiplies a value by, and the constant it adds to the product (if any)."""

    value: str  # what the matrix multiplies
    matrix: np.ndarray  # (out, in), as the graph multiplies it
    bias: np.ndarray | None
    name: str  # the stored tensor, for messages


def as_two(
    products: Sequence[Product],
    joined: Callable[[str], Sequence[str] | None],
    run: Run,
    rng: np.random.Generator,
    rows: int,
) -> list[tuple[Product, Product]] | str:
    """The cell's products as the two of cuDNN's cell, of two values (which is the input, `recognise` tries both
    ways): as the graph has them, stacked from one product per gate of each, or split from one product of their
    concatenation; else why not (a clause: "it ...")."""
    groups = grouped(products)
    if len(groups) == 2:
        ours, theirs = groups.values()
        if len(ours) == len(theirs) == 1:
            return [(ours[0], theirs[0])]
        if len(ours) == len(theirs) and len(ours) in GATE_COUNTS:
            return _per_gate(ours, theirs, run, rng, rows)
    if len(groups) == 1:
        ((value, held),) = groups.items()
        parts = joined(value)
        whole = stacked(held)
        if parts is not None and len(parts) == 2 and parts[0] != parts[1] and whole is not None:
            return split_columns(whole, parts)
    names = listing(repr(cut(p.name)) for p in products)
    count = f"{len(products)} matrix product{'s' if len(products) != 1 else ''}"
    return (
        f"holds {count} ({names}), not a cell's: two (of its input and its state), one per gate of each, or one of "
        f"their concatenation"
    )


def reset_before_joined(products: Sequence[Product]) -> list[Product]:
    """Three products as a GRU's two where two of them are its recurrent matrix's blocks, (2H, H) of the state and
    (H, H) of the state its reset multiplies (Keras reset_after=False, a loop's body computing it op by op): those
    joined as one matrix of the state, the candidate's block last; the products as they are where no two fit
    (`recognise` runs the graph, which multiplies each block as it does)."""
    if len(products) != 3:
        return list(products)
    for index, single in enumerate(products):
        rest = [p for i, p in enumerate(products) if i != index]
        for pair, block in ((rest[0], rest[1]), (rest[1], rest[0])):
            hidden = block.matrix.shape[0]
            if pair.matrix.shape != (2 * hidden, hidden) or block.matrix.shape != (hidden, hidden):
                continue
            if pair.value in (block.value, single.value):
                continue
            biases = [p.bias for p in (pair, block)]
            bias = None
            if any(b is not None for b in biases):
                sizes = (2 * hidden, hidden)
                if any(b is not None and b.size != n for b, n in zip(biases, sizes)):
                    continue
                bias = np.concatenate(
                    [np.zeros(n, np.float32) if b is None else b.reshape(-1) for b, n in zip(biases, sizes)]
                )
            matrix = np.concatenate([pair.matrix, block.matrix])
            return [single, Product(pair.value, matrix, bias, pair.name)]
    return list(products)


def sizes_of(products: Sequence[Product]) -> tuple[int, int, int]:
    """(gates, input, hidden) as the products' matrices suggest, for a cell not read: the squarest one's H, the
    other's input (the products of one per gate taken as one of each value)."""
    groups = grouped(products)
    shapes = [(sum(p.matrix.shape[0] for p in held), held[0].matrix.shape[-1]) for held in groups.values()]
    shapes.sort(key=lambda s: max(s) // max(min(s), 1))
    hidden, inputs = min(shapes[0]), min(shapes[-1])
    return max(shapes[-1]) // max(hidden, 1), inputs, hidden


def grouped(products: Sequence[Product]) -> dict[str, list[Product]]:
    """The products by the value each multiplies, in the graph's order."""
    groups: dict[str, list[Product]] = {}
    for product in products:
        groups.setdefault(product.value, []).append(product)
    return groups


def stacked(products: Sequence[Product]) -> Product | None:
    """Products of one value (one per gate) as one: their matrices' rows one after the other, their biases alike
    (zeros where one has none); None where their matrices do not fit together."""
    matrices = [p.matrix for p in products]
    if any(m.ndim != 2 or m.shape[1] != matrices[0].shape[1] for m in matrices):
        return None
    if len(products) == 1:
        return products[0]
    biases = [p.bias for p in products]
    bias = None
    if any(b is not None for b in biases):
        if any(b is not None and b.size != m.shape[0] for b, m in zip(biases, matrices)):
            return None
        bias = np.concatenate(
            [np.zeros(m.shape[0], m.dtype) if b is None else b.reshape(-1) for b, m in zip(biases, matrices)]
        )
    return Product(products[0].value, np.concatenate(matrices), bias, products[0].name)


def _per_gate(
    ours: list[Product], theirs: list[Product], run: Run, rng: np.random.Generator, rows: int
) -> list[tuple[Product, Product]] | str:
    """One product per gate of each of two values, stacked in the orders that put each gate's two together."""
    ours_whole = stacked(ours)
    if ours_whole is None or stacked(theirs) is None or len({p.matrix.shape[0] for p in (*ours, *theirs)}) != 1:
        return "multiplies its input and its state by matrices of several sizes, one per gate, which no cell's are"
    feeds = {p.value: rng.standard_normal((rows, p.matrix.shape[1])).astype(np.float32) for p in (ours[0], theirs[0])}
    try:
        values = run(feeds)
    except (ValueError, IndexError, TypeError, ArithmeticError) as exc:
        return f"does not run on probe inputs ({type(exc).__name__})"
    terms = [
        [feeds[p.value].astype(np.float64) @ p.matrix.T.astype(np.float64) for p in side] for side in (ours, theirs)
    ]
    found = []
    for order in pairings(terms[0], terms[1], values):
        theirs_whole = stacked([theirs[i] for i in order])
        if theirs_whole is not None:
            found.append((ours_whole, theirs_whole))
    return found


def pairings(
    ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray], values: dict[str, np.ndarray]
) -> Iterator[tuple[int, ...]]:
    """Orders of `theirs` (each gate's product of one value on a probe) that put each beside `ours`'s of the same
    gate: a pair whose sum the graph computes (a constant apart: a bias) is one gate's; those no sum tells (a GRU's
    candidate, whose recurrent product its reset multiplies) are tried in the orders left."""
    count = len(ours)
    sums = np.stack([np.stack([a + b for b in theirs]) for a in ours])  # (ours, theirs, batch, H)
    scale = np.maximum(1.0, np.abs(sums).max(axis=(2, 3)))
    paired = np.zeros((count, count), bool)
    for value in values.values():
        if value.shape == sums.shape[2:] and value.dtype.kind == "f":
            spread = np.ptp(value.astype(np.float64)[None, None] - sums, axis=2).max(axis=-1)
            paired |= spread <= 1e-4 * scale
    chosen: list[int | None] = [None] * count
    for one in range(count):
        partners = np.flatnonzero(paired[one])
        if len(partners) == 1 and int(partners[0]) not in chosen:
            chosen[one] = int(partners[0])
    free = [one for one in range(count) if chosen[one] is None]
    left = [other for other in range(count) if other not in chosen]
    for order in itertools.islice(itertools.permutations(left), MAX_PAIRINGS):
        filled = list(chosen)
        for one, other in zip(free, order):
            filled[one] = other
        yield tuple(int(o) for o in filled if o is not None)


def split_columns(product: Product, parts: Sequence[str]) -> list[tuple[Product, Product]]:
    """A product of the concatenation of two values (on their features) as the product of each: its matrix's
    columns split where the first value's end, for each H the gate counts allow (the first value the input, of
    columns - H features, or the state, of H)."""
    rows, columns = product.matrix.shape
    widths = {w for g in GATE_COUNTS if rows % g == 0 for w in (columns - rows // g, rows // g) if 0 < w < columns}
    return [
        (
            Product(parts[0], product.matrix[:, :width], product.bias, product.name),
            Product(parts[1], product.matrix[:, width:], None, product.name),
        )
        for width in sorted(widths)
    ]


ACTIVATION_INVERSES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": lambda u: np.log(u) - np.log1p(-u),
    "tanh": np.arctanh,
}


def added_offset(preactivation: np.ndarray, activation: str, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """The constant (per unit) the graph adds to a gate's sum before its activation, where one of its values is the
    activation of that sum plus a constant over the batch (the smallest such); None where it adds none."""
    inverse = ACTIVATION_INVERSES[activation]
    found = []
    with np.errstate(all="ignore"):
        for value in values.values():
            if value.shape != preactivation.shape or value.dtype.kind != "f":
                continue
            u = value.astype(np.float64)
            if not np.all(((u > -1) if activation == "tanh" else (u > 0)) & (u < 1)):
                continue
            offset = inverse(u) - preactivation
            if np.all(np.isfinite(offset)) and float(np.ptp(offset, axis=0).max()) <= 1e-3:
                found.append(offset.mean(axis=0))
    smallest = min(found, key=lambda o: float(np.abs(o).max()), default=None)
    return None if smallest is None or float(np.abs(smallest).max()) <= OFFSET_NOISE else smallest
