"""Where a blob runs for `verify`: NVIDIA cuDNN on a GPU, or the numpy reference of its equations."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnconv import reference
from rnnconv.errors import BackendMissing, BadInput

BACKENDS = ("auto", "cudnn", "numpy")


class NumpyBackend:
    """cuDNN's equations in float64, reading every weight from the blob through the layout table."""

    name = "numpy"

    def __init__(self, notes: list[str] | None = None):
        self.notes = notes or []

    def run(self, blob: Any, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
            lengths: np.ndarray | None) -> dict[str, np.ndarray | None]:
        y, h_n, c_n = reference.forward(blob.spec, blob.param, x, h0, c0, lengths)
        return {"y": y, "h_n": h_n, "c_n": c_n}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "detail": "numpy reference of cuDNN's equations, float64"}

    def versions(self) -> dict[str, str]:
        return {}


def select_backend(name: str) -> Any:
    """The backend asked for: cuDNN (exit 3 when it cannot run), numpy, or auto (cuDNN when it can run)."""
    if name not in BACKENDS:
        raise BadInput(f"unknown backend {name!r} (choose {', '.join(BACKENDS)})")
    if name == "numpy":
        return NumpyBackend()
    from rnnconv.cudnn.backend import CudnnBackend, probe

    status = probe()
    if status.ok:
        return CudnnBackend(status)
    if name == "cudnn":
        raise BackendMissing(f"the cuDNN backend cannot run here: {status.reason}")
    return NumpyBackend([f"cuDNN cannot run here ({status.reason}); ran the numpy reference instead"])
