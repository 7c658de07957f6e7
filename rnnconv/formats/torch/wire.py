"""torch.save's own words: the storage classes its pickles name, the numpy type of their elements, and how its
files begin and are named (what the registry sniffs, without importing the reader)."""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Final

from rnnconv.formats.torch import PLUGIN

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

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

# torch.save files (a patched copy too): every PyTorch ending but a safetensors state_dict's
CHECKPOINT_SUFFIXES = tuple(suffix for suffix in PLUGIN.info.write_suffixes if suffix != ".safetensors")
# torch.save's legacy (pre-1.6, non-zip) format begins with this number, pickled on its own with the protocol
# the caller chose (2 by default); any other file, a pickle among them, is no legacy checkpoint.
LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
LEGACY_HEADS = tuple(pickle.dumps(LEGACY_MAGIC_NUMBER, protocol=p) for p in range(2, pickle.HIGHEST_PROTOCOL + 1))


def is_legacy_checkpoint(head: bytes) -> bool:
    """Whether a file's first bytes (32 are enough) are those torch.save's legacy format starts with."""
    return head.startswith(LEGACY_HEADS)


TORCH_ZIP_RECORD: Final = "data.pkl"  # the pickle inside torch.save's zip format


def sniff(probe: Probe) -> bool:
    """A torch.save zip (its data.pkl), a legacy checkpoint, or any safetensors (after rnnconv's and MLX's)."""
    names = probe.zip_names
    if names is not None:
        return any(n.endswith(TORCH_ZIP_RECORD) for n in names)
    return is_legacy_checkpoint(probe.head) or probe.safetensors_metadata is not None
