"""Where a blob runs for `verify`: NVIDIA cuDNN on a GPU, the numpy reference of its equations, or the
runtime of a format that offers an engine (its plugin's `engine`: onnxruntime for ONNX).

Every engine has the same face (`runtimes.Engine`): a name, notes about how it was
chosen, what it is (`describe`), the versions it ran with, and `run`.
"""

from __future__ import annotations

import numpy as np

from rnnconv.core.blob import Blob
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import BackendInfo
from rnnconv.core.reference import forward
from rnnconv.errors import BackendMissing, BadInput
from rnnconv.formats import registry
from rnnconv.formats.catalog import ENGINES
from rnnconv.formats.runtimes import Engine


class NumpyEngine:
    """cuDNN's equations in float64, reading every weight from the blob through the layout table."""

    name = "numpy"

    def __init__(self, cudnn_unavailable: str | None = None):
        self.notes: list[str] = []
        self.cudnn_unavailable = cudnn_unavailable  # why `auto` fell back here: documented, so no warning

    def run(self, blob: Blob, inputs: Inputs) -> Outputs:
        y, h_n, c_n = forward(blob.spec, blob.param, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
        return {"y": y, "h_n": h_n, "c_n": c_n}

    def describe(self) -> BackendInfo:
        detail = "numpy reference of cuDNN's equations, float64"
        if self.cudnn_unavailable:
            detail += " (auto: no cuDNN here; rnnconv doctor says why)"
        return BackendInfo(name=self.name, detail=detail, cudnn_unavailable=self.cudnn_unavailable)

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}


def select_engine(name: str) -> Engine:
    """The engine asked for: cuDNN (exit 3 when it cannot run), numpy, or auto (cuDNN when it can run)."""
    if name not in ENGINES:
        raise BadInput(f"unknown backend {name!r} (choose {', '.join(ENGINES)})")
    if name == "numpy":
        return NumpyEngine()
    offered = registry.engine(name)  # a format's runtime (onnxruntime)
    if offered is not None:
        return offered
    from rnnconv.gpu.backend import CudnnBackend, probe

    status = probe()
    if status.ok:
        return CudnnBackend(status)
    if name == "cudnn":
        raise BackendMissing(f"the cuDNN backend cannot run here: {status.reason}")
    return NumpyEngine(cudnn_unavailable=status.reason)
