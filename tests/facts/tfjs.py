"""TensorFlow.js' test facts: a written model.json loaded by tf.loadLayersModel under Node.js."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import Outputs, Runtime, Way


def _tfjs(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """model.json loaded by TensorFlow.js's own tf.loadLayersModel (Node.js, CPU backend), its layers run from the
    given states by the script rnnconv ships for verify."""
    from rnnconv.errors import BackendMissing
    from rnnconv.formats.tfjs.reader import TfjsFile
    from rnnconv.formats.tfjs.runner import require_tfjs, run_layers

    try:
        require_tfjs()
    except BackendMissing as exc:
        pytest.skip(str(exc))
    (chain,) = TfjsFile.load(Path(path)).chains
    out = run_layers(Path(path), chain, {"x": x, "h0": h0, "c0": c0, "lengths": lengths})
    return out["y"], out["h_n"], out["c_n"]


RUNTIME = Runtime((".json",), 1e-5, (Way("TensorFlow.js", _tfjs),), beside=("group1-shard1of1.bin",))
