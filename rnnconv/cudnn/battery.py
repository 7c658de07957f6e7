"""`rnnconv gpu-battery`: settle the layout questions on a real GPU, in one command.

For every mode, 1 and 2 layers, both directions, with and without an LSTM
projection, in float32 and float16: ask cuDNN where it puts every tensor
(cudnnGetRNNWeightSpaceSize, cudnnGetRNNWeightParams), compare with rnnconv's
layout table, and run a random blob through cudnnRNNForward and the numpy
reference. The offsets cuDNN reported are written to a JSON file that can be
committed as a fixture (it is what docs/LAYOUTS.md marks [GPU]).
"""

from __future__ import annotations

import ctypes
import itertools
import json
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.compare import TOLERANCES
from rnnconv.contracts import dump
from rnnconv.cudnn.backend import CudnnBackend, LayoutMismatch, gpu_session, placements, probe
from rnnconv.cudnn.descriptors import Descriptors, rnn_settings
from rnnconv.errors import BackendMissing, RnnconvError
from rnnconv.formats.cudnn import Blob, open_bin, write_bin
from rnnconv.reference import forward
from rnnconv.safeio import atomic_outputs
from rnnconv.table.constants import LSTM
from rnnconv.weightspace import LAYOUT_NAME, LAYOUT_VERSION, weight_space_elements


def configurations() -> list[RNNSpec]:
    specs = []
    for mode, layers, bidirectional, dtype in itertools.product(
        ("lstm", "gru", "rnn_tanh", "rnn_relu"), (1, 2), (False, True), ("float32", "float16")
    ):
        for proj in (0, 3) if mode == LSTM else (0,):
            specs.append(RNNSpec(mode, 5, 8, layers, bidirectional, proj, dtype))
    return specs


def _random_rnn(spec: RNNSpec, seed: int) -> CanonicalRNN:
    rng = np.random.default_rng(seed)
    arrays = {key: rng.normal(0, 0.4, spec.param_shape(key)).astype(np.float32) for key in spec.param_keys()}
    return CanonicalRNN.from_arrays("battery", spec, arrays)


def run_battery(output: Path, force: bool = False, say: Callable[[str], None] = print) -> dict[str, Any]:
    status = probe()
    if not status.ok:
        raise BackendMissing(f"the GPU battery needs cuDNN on a GPU: {status.reason}")
    backend = CudnnBackend(status)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, spec in enumerate(configurations()):
            entry: dict[str, Any] = {"spec": spec.to_dict(), "settings": asdict(rnn_settings(spec))}
            path = Path(tmp) / f"{index}.bin"
            write_bin(_random_rnn(spec, index), path, spec.dtype)
            blob = open_bin(path)
            try:
                entry.update(_reported_layout(backend, spec, blob.etype.itemsize))
                entry.update(_forward(backend, blob, index))
            except LayoutMismatch as exc:
                entry.update(layout_matches=False, findings=[dump(f) for f in exc.findings])
            except RnnconvError as exc:  # one configuration cuDNN refuses must not end the battery
                entry.update(layout_matches=None, error=str(exc))
            results.append(entry)
            say(f"{spec.describe():60s} " + _verdict(entry))
    report = {
        "cudnn": status.found,
        "gpu": backend.details.get("gpu"),
        "rnnconv_layout": f"{LAYOUT_NAME} v{LAYOUT_VERSION}",
        "configurations": results,
        "all_match": all(r.get("layout_matches") and r.get("forward_matches") for r in results),
    }
    with atomic_outputs([output], force) as (tmp_out,):
        tmp_out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def _reported_layout(backend: CudnnBackend, spec: RNNSpec, itemsize: int) -> dict[str, Any]:
    """The weight-space size and every tensor's place as cuDNN reports them (the JSON fixture's content)."""
    with (
        gpu_session(backend.cudnn) as session,
        Descriptors(backend.cudnn, spec, 1, 1, np.ones(1, np.int32), session.handle) as desc,
    ):
        size = ctypes.c_size_t()
        backend.cudnn.call("cudnnGetRNNWeightSpaceSize", session.handle, desc.rnn, ctypes.byref(size))
        base = session.alloc(size.value)
        found = placements(backend.cudnn, session.handle, desc, spec, int(base), size.value)
    return {
        "cudnn_weight_space_bytes": size.value,
        "rnnconv_weight_space_bytes": weight_space_elements(spec) * itemsize,
        "placements": [
            {
                "tensor": p.key.label,
                "pseudo_layer": p.pseudo_layer,
                "lin_layer_id": p.lin_layer_id,
                "offset_bytes": p.offset_bytes,
                "dims": p.dims,
                "strides": p.strides,
            }
            for p in found
        ],
    }


def _forward(backend: CudnnBackend, blob: Blob, seed: int) -> dict[str, Any]:
    """cudnnRNNForward (after its layout check) against the numpy reference, with ragged lengths."""
    spec = blob.spec
    rng = np.random.default_rng(seed)
    pseudo = spec.num_layers * spec.num_directions
    x = rng.normal(0, 0.8, (6, 3, spec.input_size)).astype(np.float32)
    h0 = rng.normal(0, 0.5, (pseudo, 3, spec.output_size)).astype(np.float32)
    c0 = rng.normal(0, 0.5, (pseudo, 3, spec.hidden_size)).astype(np.float32) if spec.mode == LSTM else None
    lengths = np.array([6, 4, 2])
    got = backend.run(blob, {"x": x, "h0": h0, "c0": c0, "lengths": lengths})
    y, h_n, c_n = forward(spec, blob.param, x, h0, c0, lengths)
    errors = [np.abs(got["y"] - y).max(), np.abs(got["h_n"] - h_n).max()]
    if c_n is not None:
        errors.append(np.abs(got["c_n"] - c_n).max())
    atol = TOLERANCES[("cudnn", spec.dtype)][0]
    return {
        "layout_matches": True,
        "forward_max_abs_vs_numpy": float(max(errors)),
        "forward_matches": bool(max(errors) <= atol),
        "tolerance": atol,
        "torch_cudnn_rnn": backend.details.get("torch_cudnn_rnn"),
    }


def _verdict(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return f"ERROR {entry['error']}"
    if not entry["layout_matches"]:
        return f"layout DIFFERS ({len(entry['findings'])} tensors)"
    return f"layout matches, forward max |cuDNN - numpy| {entry['forward_max_abs_vs_numpy']:.2e} " + (
        "ok" if entry["forward_matches"] else "TOO LARGE"
    )
