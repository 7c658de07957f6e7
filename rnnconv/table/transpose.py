"""Transposing large matrices fast with numpy alone.

A Keras kernel gate block (in, H) must become cuDNN's row-major (H, in). numpy's
plain `out[...] = block.T` walks one side with a large stride and runs at about
0.5 GB/s; copying in tiles whose destination rows are one cache line wide runs at
about 3 GB/s (measured on this project's 2-core machine; bench/bench.py prints it).
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rnnconv.safeio.inputs import FileArray

SMALL = 1 << 16  # elements; below this the plain copy is as fast
PARALLEL = 1 << 22  # elements; above this the rows are split between threads (numpy copies without the GIL)
TILE_WIDTH = 1024  # source columns per tile
_POOL = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="rnnconv-transpose")


def transposed(block: np.ndarray | FileArray) -> np.ndarray:
    """block.T as a C-contiguous array: a view when block.T already is one, else a tiled copy. Values still in
    their file are read a band of rows at a time, into the core's cache, as the tiles need them."""
    if isinstance(block, FileArray) and (block.ndim != 2 or block.size < SMALL or 1 in block.shape):
        block = block.read()
    if isinstance(block, np.ndarray) and block.T.flags.c_contiguous:
        view: np.ndarray = block.T
        return view
    rows, cols = block.shape
    out = np.empty((cols, rows), dtype=block.dtype)
    if isinstance(block, np.ndarray) and block.size < SMALL:
        out[...] = block.T
        return out
    transpose_into(block, out)
    return out


Pieces = list[tuple[int, int, int]]  # (first column of the block, columns, first row of the output)


def transpose_into(
    block: np.ndarray | FileArray, out: np.ndarray, pieces: Pieces | None = None, sums: bool = False
) -> list[bool]:
    """block.T written into `out` ((cols, rows), C order: an array, or a writer's output mapped in place) in tiles,
    on both cores for a large block; with `pieces`, each run of the block's columns to rows of its own (a kernel's
    gate blocks in another gate order). Values still in their file are read once, a band of rows at a time. With
    `sums`, each band of a piece is summed while it is in the core's cache: whether each piece's sums were all finite
    (IEEE arithmetic carries any NaN or Inf into a sum, so a NaN and Inf count is needed only where one was not)."""
    rows, cols = block.shape
    pieces = pieces or [(0, cols, 0)]
    step = max(1, 64 // block.itemsize)  # source rows per tile: one 64-byte line of each destination row
    workers = _POOL._max_workers if block.size >= PARALLEL else 1
    bounds = np.linspace(0, rows // step, workers + 1).astype(int) * step
    bounds[-1] = rows
    parts = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(bounds) if hi > lo]
    if len(parts) == 1:
        return _copy_tiles(block, out, *parts[0], step, pieces, sums)
    done = [_POOL.submit(_copy_tiles, block, out, lo, hi, step, pieces, sums) for lo, hi in parts]
    return [all(each) for each in zip(*(part.result() for part in done))]


def _copy_tiles(
    block: np.ndarray | FileArray, out: np.ndarray, first: int, last: int, step: int, pieces: Pieces, sums: bool
) -> list[bool]:
    band = np.empty((step, block.shape[1]), block.dtype) if isinstance(block, FileArray) else None
    finite = [True] * len(pieces)
    accumulate = np.float64 if block.dtype == np.float64 else np.float32
    for r in range(first, last, step):
        source = block[r : r + step]
        if isinstance(source, FileArray) and band is not None:
            source = source.read(out=band[: source.shape[0]])
        for k, (start, width, at) in enumerate(pieces):
            for c in range(0, width, TILE_WIDTH):
                n = min(TILE_WIDTH, width - c)
                out[at + c : at + c + n, r : r + step] = source[:, start + c : start + c + n].T
            if sums and finite[k]:
                with np.errstate(over="ignore", invalid="ignore"):
                    finite[k] = bool(np.isfinite(np.add.reduce(source[:, start : start + width], None, accumulate)))
    return finite
