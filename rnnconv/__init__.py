"""rnnconv: convert recurrent-network weights between the files of the frameworks and runtimes that run them and
NVIDIA cuDNN's weight space, and prove them right (`rnnconv.formats()` lists the formats).

The library mirrors the command line:

    import rnnconv

    result = rnnconv.convert("model.h5", "model.bin", layer="encoder")   # ConversionResult
    results = rnnconv.convert_many(["a.h5", "b.h5"], "out/", jobs=2)      # BatchResults: one entry each
    report = rnnconv.verify("model.bin")                                  # Report: report.verdict
    reports = rnnconv.verify_all("models.safetensors")                    # Reports: one per RNN
    rows = rnnconv.audit("model.onnx", against="train.pt")                # Reports: one per RNN of either
    changed = rnnconv.verify_changed(["train.pt"])                        # Reports: what was made from it
    for entry in rnnconv.inspect("model.h5").rnns: ...                    # InspectReport
    found = rnnconv.identify("w.raw", mode="lstm", input_size=8, hidden_size=16, probe="probe.npz")  # Identification
    with rnnconv.load("model.h5", layer="encoder") as (rnn,): ...        # CanonicalRNN, tensors on demand

Errors are `rnnconv.errors.RnnconvError` subclasses. The functions are imported on
first use, so `import rnnconv` costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rnnconv.version import __version__

if TYPE_CHECKING:
    from rnnconv.api import (
        audit,
        convert,
        convert_many,
        formats,
        identify,
        inspect,
        load,
        schema,
        verify,
        verify_all,
        verify_changed,
    )
    from rnnconv.errors import BackendMissing, BadInput, Mismatch, RnnconvError, Unsupported

__all__ = [
    "BackendMissing",
    "BadInput",
    "Mismatch",
    "RnnconvError",
    "Unsupported",
    "__version__",
    "audit",
    "convert",
    "convert_many",
    "formats",
    "identify",
    "inspect",
    "load",
    "schema",
    "verify",
    "verify_all",
    "verify_changed",
]
ERRORS = ("BackendMissing", "BadInput", "Mismatch", "RnnconvError", "Unsupported")


def __getattr__(name: str) -> Any:
    if name in ERRORS:
        from rnnconv import errors

        return getattr(errors, name)
    if name in __all__:
        from rnnconv import api

        return getattr(api, name)
    raise AttributeError(f"module 'rnnconv' has no attribute {name!r}")
