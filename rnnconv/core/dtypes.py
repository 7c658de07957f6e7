"""Element types of a weight space, including bfloat16, which numpy lacks.

bfloat16 is stored as uint16 words (the top half of a float32) and converted with
round-to-nearest-even, as cuDNN, PyTorch and ml_dtypes do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import FileArray
from rnnconv.table.constants import ELEMENT_TYPE_CODES


@dataclass(frozen=True)
class ElementType:
    name: str
    storage: np.dtype  # what the bytes are in numpy (uint16 for bfloat16)
    safetensors: str  # dtype code in a safetensors header
    cudnn: int  # cudnnDataType_t
    torch: str  # attribute of the torch module

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize


ELEMENT_TYPES = {
    name: ElementType(name, np.dtype(storage), safetensors, cudnn, torch)
    for name, (storage, safetensors, cudnn, torch) in ELEMENT_TYPE_CODES.items()
}
DTYPES = tuple(ELEMENT_TYPES)
BY_SAFETENSORS = {t.safetensors: t for t in ELEMENT_TYPES.values()}


def element_type(name: str) -> ElementType:
    try:
        return ELEMENT_TYPES[name]
    except KeyError:
        raise BadInput(f"unknown dtype {name!r} (choose {', '.join(ELEMENT_TYPES)})") from None


def encode(values: np.ndarray, etype: ElementType) -> np.ndarray:
    """Values (any float array) as the storage words of `etype`."""
    if etype.name != "bfloat16":
        return np.asarray(values, dtype=etype.storage)
    words = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (words + np.uint32(0x7FFF) + ((words >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    rounded = rounded.astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():  # keep NaN a NaN (the rounding could carry it into Inf)
        rounded[nan] = ((words[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return rounded


def stored_words(values: np.ndarray | FileArray, etype: ElementType) -> np.ndarray | FileArray:
    """`encode`, except that values still in a source file, already `etype`'s words, stay there (to be copied
    file to file)."""
    if isinstance(values, FileArray) and values.dtype == etype.storage and etype.name != "bfloat16":
        return values
    return np.ascontiguousarray(encode(np.asarray(values), etype))


def decode(words: np.ndarray, etype: ElementType) -> np.ndarray:
    """Storage words as numpy floats (bfloat16 widens to float32 exactly)."""
    if etype.name != "bfloat16":
        return np.asarray(words).view(etype.storage) if words.dtype != etype.storage else words
    return (np.asarray(words, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def source_dtype_name(dtype: np.dtype) -> str:
    """The spec dtype name for a source array's numpy dtype."""
    dtype = np.dtype(dtype)
    for etype in ELEMENT_TYPES.values():
        if etype.name != "bfloat16" and dtype == etype.storage.newbyteorder("="):
            return etype.name
    if dtype.name == "bfloat16":  # ml_dtypes, when a framework hands one over
        return "bfloat16"
    raise BadInput(f"weights of type {dtype} are not floating point numbers rnnconv can convert")


def count_non_finite(values: np.ndarray | FileArray) -> int:
    """How many NaN or Inf values an array holds (floats of any width); one still in its file is read a run at
    a time."""
    if isinstance(values, FileArray):
        return sum(count_non_finite(run) for run in values.runs())
    # One sum first: IEEE arithmetic carries any NaN or Inf into it, and summing is several times
    # faster than classifying every value; only a non-finite sum (or an overflow) needs the count.
    accumulate = np.float64 if values.dtype == np.float64 else np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(values, axis=None, dtype=accumulate) if values.size else 0.0
    if np.isfinite(total):
        return 0
    return int(values.size - np.count_nonzero(np.isfinite(values)))
