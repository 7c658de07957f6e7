"""TensorFlow.js's own words: the model.json keys, the manifest's dtypes and quantizations, the shard rnnconv
writes, and the name prefixes of a Bidirectional's two layers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

KIND: Final = "tfjs-layers"  # the file kind a source records
LAYERS_MODEL: Final = "layers-model"  # model.json's `format` for a layers model ("graph-model": a frozen graph)
TOPOLOGY, MANIFEST, METADATA = "modelTopology", "weightsManifest", "userDefinedMetadata"
SNIFF_BYTES = 1 << 16  # how much of a .json is looked at for a layers model's keys
MODEL: Final = "model.json"  # the name TensorFlow.js's savers and converter give a model
SHARD: Final = "group1-shard1of1.bin"  # the tensorflowjs converter's name for a group's one shard
# Bytes per value of each weight dtype a layers model's manifest holds (tfjs-core io/types.ts DTYPE_VALUE_SIZE_MAP)
DTYPE_BYTES: Final[dict[str, int]] = {"float32": 4, "int32": 4, "bool": 1, "complex64": 8}
# Quantized weights: stored in the quantization's dtype, dequantized to float32 on loading (uint8 and uint16 as
# q * scale + min, float16 as is).
QUANTIZED_BYTES: Final[dict[str, int]] = {"uint8": 1, "uint16": 2, "float16": 2}
DIRECTION_PREFIXES: Final = ("forward_", "backward_")  # Bidirectional's layers: forward_<inner>, backward_<inner>
TFJS_VERSION: Final = "4.22.0"  # the @tensorflow/tfjs whose layers-model files the writer follows


def sniff(probe: Probe) -> bool:
    """A .json whose first bytes name a layers model's keys."""
    if not probe.head.lstrip().startswith(b"{") or probe.path.suffix.lower() != ".json":
        return False
    with open(probe.path, "rb") as f:
        start = f.read(SNIFF_BYTES)
    return f'"{TOPOLOGY}"'.encode() in start or f'"{MANIFEST}"'.encode() in start
