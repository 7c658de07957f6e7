"""Where a blob runs for `verify`: NVIDIA cuDNN on a GPU, or the numpy reference of its equations.

Every engine has the same face (`Engine`): a name, notes about how it was
chosen, what it is (`describe`), the versions it ran with, and `run`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from rnnconv.compare import Inputs, Outputs
from rnnconv.contracts import BackendInfo
from rnnconv.errors import BackendMissing, BadInput
from rnnconv.formats.cudnn import Blob
from rnnconv.reference import forward
from rnnconv.table.constants import ENGINES, LSTM


class Engine(Protocol):
    name: str
    notes: list[str]

    def describe(self) -> BackendInfo: ...

    def versions(self) -> dict[str, str]: ...

    def run(self, blob: Blob, inputs: Inputs) -> Outputs: ...


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


class OnnxruntimeEngine:
    """The blob as an ONNX graph (the one rnnconv writes) in onnxruntime: equations nobody here wrote."""

    name = "onnxruntime"

    def __init__(self) -> None:
        self.notes: list[str] = []

    def run(self, blob: Blob, inputs: Inputs) -> Outputs:
        from rnnconv.formats.onnx import build_model, layers_of, run_model

        rnn = blob.to_canonical()
        model = build_model(
            layers_of(rnn, "float32"), blob.spec.input_size, "float32", sequence_lens=inputs["lengths"] is not None
        )
        return run_model(model, inputs, blob.spec.mode == LSTM)

    def describe(self) -> BackendInfo:
        return BackendInfo(name=self.name, detail="onnxruntime (CPU) running the blob as ONNX nodes, float32")

    def versions(self) -> dict[str, str]:
        import onnxruntime

        return {"onnxruntime": onnxruntime.__version__}


def select_engine(name: str) -> Engine:
    """The engine asked for: cuDNN (exit 3 when it cannot run), numpy, or auto (cuDNN when it can run)."""
    if name not in ENGINES:
        raise BadInput(f"unknown backend {name!r} (choose {', '.join(ENGINES)})")
    if name == "numpy":
        return NumpyEngine()
    if name == "onnxruntime":
        return OnnxruntimeEngine()
    from rnnconv.cudnn.backend import CudnnBackend, probe

    status = probe()
    if status.ok:
        return CudnnBackend(status)
    if name == "cudnn":
        raise BackendMissing(f"the cuDNN backend cannot run here: {status.reason}")
    return NumpyEngine(cudnn_unavailable=status.reason)
