"""`rnnconv inspect`: every recurrent network in a file, its spec, and whether it converts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnnconv.detect import CUDNN_BIN, CUDNN_SAFETENSORS, KERAS, detect
from rnnconv.errors import RnnconvError
from rnnconv.weightspace import LAYOUT_DESCRIPTION


def inspect_file(path: Path) -> dict[str, Any]:
    """{"path", "format", "rnns": [{name, class, spec, converts, reason, notes}], "notes"}."""
    fmt = detect(path)
    if fmt == KERAS:
        return _inspect_keras(path)
    if fmt in (CUDNN_BIN, CUDNN_SAFETENSORS):
        return _inspect_blob(path, fmt)
    from rnnconv.formats.torch import inspect_torch

    return inspect_torch(path, fmt)


def _inspect_keras(path: Path) -> dict[str, Any]:
    from rnnconv.formats.keras import KerasFile, to_canonical

    rnns = []
    with KerasFile(path) as keras_file:
        for layer in keras_file.layers:
            entry: dict[str, Any] = {"name": layer.name, "class": layer.display_class}
            try:
                rnn = to_canonical(layer, {"path": str(path)})
                entry.update(spec=rnn.spec.to_dict(), converts=True, reason=None, notes=rnn.notes)
            except RnnconvError as exc:
                entry.update(spec=None, converts=False, reason=str(exc), notes=[])
            rnns.append(entry)
        return {"path": str(path), "format": keras_file.kind, "versions": keras_file.versions, "rnns": rnns,
                "notes": []}


def _inspect_blob(path: Path, fmt: str) -> dict[str, Any]:
    from rnnconv.formats.cudnn import open_bin, open_safetensors

    blobs = [open_bin(path)] if fmt == CUDNN_BIN else open_safetensors(path)
    rnns = [{"name": b.name, "class": "cuDNN weight space", "spec": b.spec.to_dict(), "converts": True,
             "reason": None, "notes": b.doc.get("notes", []), "source": b.doc.get("source"),
             "layout": b.doc.get("layout")} for b in blobs]
    notes = []
    if any(b.spec.proj_size for b in blobs):
        notes.append(f"projection: {LAYOUT_DESCRIPTION['projection']} -- {LAYOUT_DESCRIPTION['unverified']}")
    return {"path": str(path), "format": fmt, "versions": {}, "rnns": rnns, "notes": notes}
