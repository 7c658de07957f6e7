"""torch.save's own words: the storage classes its pickles name, and the numpy type of their elements."""

from __future__ import annotations

from typing import Final

# torch.save's storage classes (named in its pickles) -> numpy dtype of the storage's elements, little-endian
# ("bfloat16": 2-byte words). Non-float storages are parsed for their sizes and never converted.
TORCH_STORAGES: Final[dict[str, str]] = {
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "HalfStorage": "<f2",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
    "ComplexFloatStorage": "<c8",
    "ComplexDoubleStorage": "<c16",
}
