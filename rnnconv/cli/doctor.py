"""`rnnconv doctor`: what this machine has for each verify backend and each source framework.

The rows come from the formats' plugins (`formats/<name>/__init__.py`): a format's engine (`verify --backend`) is a
backend, each framework that runs its files (its `runtimes`) is a source; a format added is listed without a change
here.
"""

from __future__ import annotations

import platform
from typing import Any

from rnnconv.formats.plugin import version
from rnnconv.version import __version__

# What rnnconv itself uses beside the formats' frameworks: readers, writers, cuDNN, the plot.
OWN_PACKAGES: tuple[str, ...] = ("numpy", "h5py", "msgpack", "flatbuffers", "nvidia-cudnn-cu12")
OWN_PACKAGES += ("nvidia-cudnn-cu13", "pycuda", "matplotlib")


def _row(modules: tuple[tuple[str, str], ...], what: str, install: str, major: str = "") -> dict[str, Any]:
    """A part verify can use when all its packages are installed: what it is and with which versions, or what is
    missing and how to install it."""
    versions = {package: version(package, module) for package, module in modules}
    missing = [p for p, v in versions.items() if v is None]
    first, found = modules[0][0], versions[modules[0][0]]
    if not missing and major and not (found or "").startswith(major):
        missing = [f"{first} {major}"]
    shown = ", ".join(f"{p} {v}" for p, v in versions.items())
    detail = f"{shown}: {what}" if not missing else f"{' and '.join(missing)} not installed ({install})"
    return {"available": not missing, "detail": detail, "versions": versions}


def examine() -> dict[str, Any]:
    from rnnconv.formats import registry
    from rnnconv.gpu.backend import probe

    formats = registry.formats()
    packages = {name: version(name, name) for name in OWN_PACKAGES}
    backends: dict[str, Any] = {
        "numpy": {
            "available": True,
            "detail": "cuDNN's equations in numpy (float64), for blobs verified and blobs as sources; always there",
        },
    }
    status = probe()
    backends["cudnn"] = {
        "available": status.ok,
        "detail": f"runs here, through {status.found['cuda_session']}" if status.ok else status.reason,
        "found": status.found,
    }
    sources: dict[str, Any] = {}
    for fmt in formats:
        # a format with no extra (TensorFlow.js: npm packages) says how its runtime is installed
        told = [runtime.install for runtime in fmt.runtimes if runtime.install]
        install = f"pip install 'rnnconv[{fmt.info.extra}]'" if fmt.info.extra or not told else told[0]
        for engine in (fmt.engine, *fmt.plugin.more_engines):  # MNN beside onnxruntime for ONNX
            if engine is not None:
                row = _row(engine.modules, engine.detail, engine.install or install)
                backends[engine.name] = {"format": fmt.name, **row}
        for runtime in fmt.runtimes:
            row = _row(runtime.modules, f"runs {runtime.runs}", runtime.install or install, runtime.major)
            sources[runtime.key] = {"format": fmt.name, **row}
    for row in [*backends.values(), *sources.values()]:
        packages.update(row.get("versions", {}))
    torch_cuda: dict[str, Any] = {}
    if packages.get("torch"):
        import torch

        torch_cuda = {"cuda_build": torch.version.cuda or "no (CPU build)", "gpu_visible": torch.cuda.is_available()}
    return {
        "rnnconv": __version__,
        "python": platform.python_version(),
        "packages": packages,
        "backends": backends,
        "sources": sources,
        "torch_cuda": torch_cuda,
    }
