"""Which format a file is, from its content (and the sidecar next to it), not its name."""

from __future__ import annotations

import zipfile
from pathlib import Path

from rnnconv.errors import BadInput

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"

KERAS = "keras"
TORCH = "torch"
TORCH_SAFETENSORS = "torch-safetensors"
CUDNN_BIN = "cudnn-bin"
CUDNN_SAFETENSORS = "cudnn-safetensors"


def detect(path: Path) -> str:
    from rnnconv.formats.cudnn import is_rnnconv_safetensors, sidecar_path
    from rnnconv.formats.safetensors_io import read_header

    if not path.exists():
        raise BadInput(f"{path} does not exist")
    if path.is_dir():
        raise BadInput(f"{path} is a directory, not a model file")
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    if sidecar_path(path).exists():
        return CUDNN_BIN
    if head.startswith(HDF5_MAGIC):
        return KERAS
    if head.startswith(ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError):
            raise BadInput(f"{path} looks like a zip archive but cannot be read (truncated or corrupt)") from None
        if "config.json" in names:
            return KERAS
        if any(n.endswith("data.pkl") for n in names):
            return TORCH
        raise BadInput(f"{path} is a zip archive but neither a .keras model nor a PyTorch checkpoint")
    if len(head) >= 9 and head[8:9] == b"{":
        header, _ = read_header(path)
        return CUDNN_SAFETENSORS if is_rnnconv_safetensors(header) else TORCH_SAFETENSORS
    if head[:1] == b"\x80":  # a pickle protocol marker: torch.save's legacy (non-zip) format
        return TORCH
    raise BadInput(f"cannot tell what {path} is: not HDF5, a .keras or PyTorch zip, safetensors, "
                   f"nor a blob with its sidecar {sidecar_path(path).name}")
