"""A .npy header read by numpy's own reader (`numpy.lib.format`), bounded and never unpickled: what an .npz member
(MLX) and an .eqx leaf (Equinox) begin with."""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from rnnconv.errors import BadInput

NPY_MAGIC = b"\x93NUMPY"
MAX_HEADER = 10_000  # bytes of a header, at most: numpy's own bound for a header it trusts


def npy_header(f: BinaryIO, what: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """The dtype, shape and Fortran order of the .npy that starts at the file's position, and where its data starts;
    a header numpy cannot read (or a negative dimension) is refused in one sentence naming `what`."""
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f, max_header_size=MAX_HEADER)
    except (ValueError, SyntaxError, TypeError, OSError, RecursionError, MemoryError, OverflowError):
        raise BadInput(f"{what} is not a .npy numpy reads (its header is damaged)") from None
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise BadInput(f"{what} has a malformed shape")
    return dtype, tuple(shape), bool(fortran), f.tell()
