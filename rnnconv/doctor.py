"""`rnnconv doctor`: what this machine has for each backend and each source framework."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from typing import Any

from rnnconv.version import __version__

PACKAGES = (
    "numpy",
    "h5py",
    "safetensors",
    "tensorflow-cpu",
    "tensorflow",
    "keras",
    "tf-keras",
    "torch",
    "onnx",
    "onnxruntime",
    "ai-edge-litert",
    "flatbuffers",
    "openvino",
    "mlx",
    "ncnn",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "pycuda",
    "matplotlib",
)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _installed(packages: dict[str, str | None], name: str, runs: str, extra: str) -> dict[str, Any]:
    """A part verify can use when `name` is installed: what it runs, or what to install."""
    version = packages[name]
    detail = f"{name} {version}: runs {runs}" if version else f"{name} not installed (pip install '{extra}')"
    return {"available": bool(version), "detail": detail}


def examine() -> dict[str, Any]:
    from rnnconv.cudnn.backend import probe

    packages = {name: _version(name) for name in PACKAGES}
    status = probe()
    torch_cuda: dict[str, Any] = {}
    if packages["torch"]:
        import torch

        torch_cuda = {"cuda_build": torch.version.cuda or "no (CPU build)", "gpu_visible": torch.cuda.is_available()}
    keras3 = bool(packages["keras"] and packages["keras"].startswith("3"))
    return {
        "rnnconv": __version__,
        "python": platform.python_version(),
        "packages": packages,
        "backends": {
            "numpy": {"available": True, "detail": "cuDNN's equations in numpy (float64); always available"},
            "cudnn": {
                "available": status.ok,
                "detail": f"runs here, through {status.found['cuda_session']}" if status.ok else status.reason,
                "found": status.found,
            },
            "onnxruntime": _installed(packages, "onnxruntime", "the blob as ONNX nodes", "rnnconv[onnx]"),
            "tflite": _installed(packages, "ai-edge-litert", "the blob as TFLite ops", "rnnconv[tflite]"),
            "openvino": _installed(packages, "openvino", "the blob as an OpenVINO IR (CPU)", "rnnconv[openvino]"),
            "mlx": _installed(packages, "mlx", "the blob as mlx.nn modules", "rnnconv[mlx]"),
            "ncnn": _installed(packages, "ncnn", "the blob as ncnn layers", "rnnconv[ncnn]"),
        },
        "sources": {
            "keras3": {
                "available": keras3,
                "detail": f"keras {packages['keras']}"
                if keras3
                else "keras 3 not installed (pip install 'rnnconv[keras]')",
            },
            "tf_keras": {
                "available": bool(packages["tf-keras"]),
                "detail": f"tf-keras {packages['tf-keras']}"
                if packages["tf-keras"]
                else "tf-keras not installed (pip install --no-deps tf-keras)",
            },
            "torch": _installed(packages, "torch", "PyTorch checkpoints", "rnnconv[torch]"),
            "onnx": _installed(packages, "onnxruntime", "ONNX models' own nodes", "rnnconv[onnx]"),
            "tflite": _installed(packages, "ai-edge-litert", "TFLite models' own ops", "rnnconv[tflite]"),
            "openvino": _installed(packages, "openvino", "OpenVINO IRs' own graphs", "rnnconv[openvino]"),
            "mlx": _installed(packages, "mlx", "MLX files' own modules", "rnnconv[mlx]"),
            "ncnn": _installed(packages, "ncnn", "ncnn models' own layers", "rnnconv[ncnn]"),
        },
        "torch_cuda": torch_cuda,
    }
