"""What a cuDNN blob's files look like from outside: the sidecar beside a `.bin`, the mark of rnnconv's
`.safetensors` (what the registry sniffs, without importing the reader)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import SIDECAR_FORMAT
from rnnconv.safeio.outputs import SIDECAR_SUFFIX

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe


def sidecar_path(blob: Path) -> Path:
    return blob.with_name(blob.name + SIDECAR_SUFFIX)


def is_rnnconv_safetensors(probe: Probe) -> bool:
    meta = probe.safetensors_metadata
    return meta is not None and meta.get("format") == SIDECAR_FORMAT


def sniff(probe: Probe) -> bool:
    """A blob with its sidecar beside it (any bytes), or rnnconv's own `.safetensors`."""
    return sidecar_path(probe.path).exists() or is_rnnconv_safetensors(probe)
