"""Element types of a weight space, including bfloat16, which numpy lacks.

bfloat16 is stored as uint16 words (the top half of a float32) and converted with
round-to-nearest-even, as cuDNN, PyTorch and ml_dtypes do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnconv.errors import BadInput


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
    "float32": ElementType("float32", np.dtype("<f4"), "F32", 0, "float32"),
    "float64": ElementType("float64", np.dtype("<f8"), "F64", 1, "float64"),
    "float16": ElementType("float16", np.dtype("<f2"), "F16", 2, "float16"),
    "bfloat16": ElementType("bfloat16", np.dtype("<u2"), "BF16", 9, "bfloat16"),
}
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
    rounded = ((words + np.uint32(0x7FFF) + ((words >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    rounded = rounded.astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():  # keep NaN a NaN (the rounding could carry it into Inf)
        rounded[nan] = ((words[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return rounded


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
