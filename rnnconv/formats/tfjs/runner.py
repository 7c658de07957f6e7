"""A layers model run in TensorFlow.js itself: Node.js runs `run_layers.cjs` (shipped beside this module), which
loads the model with tf.loadLayersModel and runs its named layers from given states; inputs and outputs pass
through a private folder as raw little-endian float32. Nothing of the model file is ever evaluated."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import numpy as np

from rnnconv.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported, cut
from rnnconv.formats import _node, registry
from rnnconv.formats._graph import Chain
from rnnconv.formats.tfjs.reader import TfjsLayer

SCRIPT: Final = Path(__file__).with_name("run_layers.cjs")
PACKAGE: Final = "@tensorflow/tfjs"
RUN_TIMEOUT: Final = 900  # seconds: TensorFlow.js's CPU backend on a large model and a long sequence
REFUSED: Final = 2  # run_layers.cjs's exit status where TensorFlow.js refused the model or the request


def require_tfjs() -> tuple[str, str]:
    """The node executable and the TensorFlow.js version it runs; BackendMissing where either is absent."""
    node = _node.node()
    if node is None:
        raise BackendMissing(
            "running a TensorFlow.js model needs Node.js (18 or later) on PATH, and there is no node command"
        )
    version = _node.package_version(PACKAGE)
    if version is None:
        raise BackendMissing(
            f"running a TensorFlow.js model needs {PACKAGE} in {_node.node_modules()}, which does not hold it "
            f"(npm ci --ignore-scripts in rnnconv's source tree, or set {_node.NODE_MODULES_VARIABLE} to a "
            f"node_modules that holds it)"
        )
    return node, version


def run_layers(path: Path, chain: Chain[TfjsLayer], inputs: Inputs) -> Outputs:
    """The chain's layers of the model, loaded and run by TensorFlow.js (sequence-major in and out, as cuDNN's)."""
    node, _ = require_tfjs()
    if inputs.get("lengths") is not None and len(set(np.asarray(inputs["lengths"]).tolist())) > 1:
        raise Unsupported(
            "TensorFlow.js's recurrent layers take no sequence lengths: verify TensorFlow.js without --ragged"
        )
    first = chain.first
    lstm = first.source_class == "LSTM"
    x = np.ascontiguousarray(np.asarray(inputs["x"], "<f4").transpose(1, 0, 2))  # (B, T, I)
    batch, steps, _ = x.shape
    depth = len(chain.layers) * first.directions
    request = {
        "layers": [layer.name for layer in chain.layers],
        "batch": batch,
        "steps": steps,
        "input": first.input_size,
        "hidden": first.hidden,
        "directions": first.directions,
        "lstm": lstm,
    }
    with tempfile.TemporaryDirectory(prefix="rnnconv-tfjs-") as folder:
        where = Path(folder)
        x.tofile(where / "x.f32")
        np.ascontiguousarray(inputs["h0"], "<f4").tofile(where / "h0.f32")
        if lstm:
            np.ascontiguousarray(inputs["c0"], "<f4").tofile(where / "c0.f32")
        (where / "request.json").write_text(json.dumps(request), encoding="utf-8")
        command = [
            node,
            str(SCRIPT),
            str(_node.node_modules()),
            str(path.resolve()),
            str(where / "request.json"),
            folder,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise BadInput(f"TensorFlow.js did not finish running {path} within {RUN_TIMEOUT} s") from None
        if done.returncode != 0:
            said = cut((done.stderr.strip().splitlines() or ["no message"])[-1]).rstrip(": ") or "no message"
            if done.returncode == REFUSED:
                raise BadInput(f"TensorFlow.js cannot run {path}: {said}")
            raise RuntimeError(f"node exited with status {done.returncode} running {path}: {said}")

        def read(name: str, shape: tuple[int, ...]) -> np.ndarray:
            return np.fromfile(where / name, "<f4").reshape(shape)

        y = read("y.f32", (batch, steps, first.width))
        h_n = read("h_n.f32", (depth, batch, first.hidden))
        c_n = read("c_n.f32", (depth, batch, first.hidden)) if lstm else None
    return {"y": y.transpose(1, 0, 2), "h_n": h_n, "c_n": c_n}


class NodeEngine(registry.RuntimeEngine):
    """The tfjs engine: its runtime is Node.js and an npm package, found as the runner finds them, not imported."""

    def versions(self) -> dict[str, str]:
        node, version = require_tfjs()
        return {"node": _node.node_version() or node, "@tensorflow/tfjs": version}

    def missing(self, what: str) -> str | None:
        try:
            require_tfjs()
        except BackendMissing as exc:
            return f"running {what} {str(exc).removeprefix('running a TensorFlow.js model ')}"
        return None
