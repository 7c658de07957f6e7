"""torch.save's own words: the storage classes its pickles name, the numpy type of their elements, and how its
files begin and are named (what the registry sniffs, without importing the reader)."""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rnnconv.formats._zip import ZIP_ERRORS
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
    # a quantized tensor's integers (`torch._utils._rebuild_qtensor`): read only with their quantizer
    "QInt8Storage": "i1",
    "QUInt8Storage": "u1",
    "QInt32Storage": "<i4",
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


# torch.export.save's archives (`.pt2`, torch/export/pt2_archive/constants.py, PyTorch 2.13): one folder holding
# `archive_format` ("pt2"), each program's graph as JSON (`models/<name>.json`: torch._export.serde.schema), its
# weights' and constants' configs (JSON) and their raw bytes, one file each (`data/weights/weight_<k>`), and its
# sample inputs pickled with torch.save (never read).
EXPORT_FORMAT_MEMBER: Final = "archive_format"
EXPORT_FORMAT: Final = b"pt2"
EXPORT_PROGRAM: Final = "models/model.json"  # torch.export.save's one program ("model")
EXPORT_WEIGHTS: Final = "data/weights/model_weights_config.json"
EXPORT_CONSTANTS: Final = "data/constants/model_constants_config.json"
EXPORT_WEIGHTS_DIR: Final = "data/weights/"
EXPORT_CONSTANTS_DIR: Final = "data/constants/"
EXPORT_SAMPLE_INPUTS: Final = "data/sample_inputs/model.pt"
EXPORT_OLD_PROGRAM: Final = "serialized_exported_program.json"  # torch 2.1 to 2.5's layout, its weights pickled
EXPORT_KIND: Final = "torch-export"
# The serialized graph's words: each RNN op's target -> its module class, and an nn.RNN op's nonlinearity.
EXPORT_RNN_OPS: Final[dict[str, tuple[str, str | None]]] = {
    "torch.ops.aten.lstm.input": ("LSTM", None),
    "torch.ops.aten.gru.input": ("GRU", None),
    "torch.ops.aten.rnn_tanh.input": ("RNN", "tanh"),
    "torch.ops.aten.rnn_relu.input": ("RNN", "relu"),
}
EXPORT_ZEROS: Final = "torch.ops.aten.zeros.default"  # initial states the module makes when called without them
# schema.ScalarType of the float types -> torch.save's storage class of the same elements; schema.Layout.Strided
EXPORT_FLOATS: Final[dict[int, str]] = {6: "HalfStorage", 7: "FloatStorage", 8: "DoubleStorage", 13: "BFloat16Storage"}
EXPORT_STRIDED: Final = 7


def is_export_archive(names: list[str]) -> bool:
    """A zip whose one folder holds torch.export.save's archive_format (or the older serialized program)."""
    return any(n.count("/") == 1 and n.endswith(("/" + EXPORT_FORMAT_MEMBER, "/" + EXPORT_OLD_PROGRAM)) for n in names)


def is_program(path: Path) -> bool:
    """Whether a file is a torch.export archive (a zip whose folder holds archive_format): asked of every zip
    checkpoint, so that a state_dict's reading need not import the reader of programs (`exported`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return is_export_archive(archive.namelist())
    except ZIP_ERRORS:
        return False


def sniff(probe: Probe) -> bool:
    """A torch.save zip (its data.pkl), a torch.export archive, a legacy checkpoint, any safetensors (after rnnconv's
    and MLX's), or the index of a sharded checkpoint."""
    names = probe.zip_names
    if names is not None:
        return any(n.endswith(TORCH_ZIP_RECORD) for n in names) or is_export_archive(names)
    return is_legacy_checkpoint(probe.head) or probe.safetensors_metadata is not None or is_shard_index(probe)
