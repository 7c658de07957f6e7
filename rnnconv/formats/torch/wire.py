"""torch.save's own words: the storage classes its pickles name, the numpy type of their elements, and how its
files begin and are named (what the registry sniffs, without importing the reader)."""

from __future__ import annotations

import pickle
import re
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


# Hugging Face's sharded checkpoints (transformers' save_pretrained(max_shard_size=...), huggingface_hub's
# save_torch_state_dict): an index, <checkpoint>.index.json, whose weight_map names each tensor's shard, beside the
# shards, named <stem>-<k>-of-<n><ending> (five digits each) by huggingface_hub's split_torch_state_dict_into_shards.
WEIGHT_MAP: Final = "weight_map"
INDEX_ENDING: Final = ".index.json"
SHARD_NAME: Final = re.compile(r"^(?P<stem>.+)-(?P<number>\d{5})-of-(?P<count>\d{5})(?P<ending>\.\w+)$")
# The checkpoint a save_pretrained folder holds, as the folder names it (sharded first): what the folder stands for.
FOLDER_CHECKPOINTS: Final = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin")
INDEX_SNIFF_BYTES = 1 << 16  # how much of a .json is looked at for an index's weight_map


def is_shard_index(probe: Probe) -> bool:
    """A JSON object whose first bytes name a weight_map (an index, whatever it is named)."""
    if not probe.head.lstrip().startswith(b"{"):
        return False
    with open(probe.path, "rb") as f:
        return f'"{WEIGHT_MAP}"'.encode() in f.read(INDEX_SNIFF_BYTES)


def sniff(probe: Probe) -> bool:
    """A torch.save zip (its data.pkl), a legacy checkpoint, any safetensors (after rnnconv's and MLX's), or the index
    of a sharded checkpoint."""
    names = probe.zip_names
    if names is not None:
        return any(n.endswith(TORCH_ZIP_RECORD) for n in names)
    return is_legacy_checkpoint(probe.head) or probe.safetensors_metadata is not None or is_shard_index(probe)
