"""A layers model run in TensorFlow.js itself: Node.js runs `run_layers.cjs` (shipped beside this module), which
loads the model with tf.loadLayersModel and runs its named layers from given states, or (a streaming model) the
whole model call after call in one process; inputs and outputs pass through a private folder as raw little-endian
float32. Nothing of the model file is ever evaluated."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path
from typing import IO, Any, Final

import numpy as np

from rnnconv.core.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported, cut, listing
from rnnconv.formats import _node, base
from rnnconv.formats._graph import Chain
from rnnconv.formats.streaming import check_stream_names
from rnnconv.formats.tfjs import INSTALL_TFJS
from rnnconv.formats.tfjs.reader import TfjsFile, TfjsLayer
from rnnconv.safeio.inputs import resolved

SCRIPT: Final = Path(__file__).with_name("run_layers.cjs")
PACKAGE: Final = "@tensorflow/tfjs"
RUN_TIMEOUT: Final = 900  # seconds: TensorFlow.js's CPU backend on a large model and a long sequence
REFUSED: Final = 2  # run_layers.cjs's exit status where TensorFlow.js refused the model or the request
ANSWER: Final = "rnnconv "  # how run_layers.cjs begins each line it answers a streaming call with


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
            f"({INSTALL_TFJS})"
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
            str(resolved(path)),
            str(where / "request.json"),
            folder,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise BadInput(f"TensorFlow.js did not finish running {path} within {RUN_TIMEOUT} s") from None
        if done.returncode != 0:
            raise _failure(path, done.returncode, done.stderr)

        def read(name: str, shape: tuple[int, ...]) -> np.ndarray:
            return np.fromfile(where / name, "<f4").reshape(shape)

        y = read("y.f32", (batch, steps, first.width))
        h_n = read("h_n.f32", (depth, batch, first.hidden))
        c_n = read("c_n.f32", (depth, batch, first.hidden)) if lstm else None
    return {"y": y.transpose(1, 0, 2), "h_n": h_n, "c_n": c_n}


def refuse_never_loading(model: TfjsFile) -> None:
    """BadInput where TensorFlow.js's loader would hang on the model (node would never answer or end)."""
    if model.never_loads:
        raise BadInput(f"TensorFlow.js cannot load {model.path}: {model.never_loads}")


def _failure(path: Path, status: int, stderr: str) -> Exception:
    """Why node exited with `status`: TensorFlow.js refused the model (BadInput, in its words) or node failed."""
    said = cut((stderr.strip().splitlines() or ["no message"])[-1]).rstrip(": ") or "no message"
    if status == REFUSED:
        return BadInput(f"TensorFlow.js cannot run {path}: {said}")
    return RuntimeError(f"node exited with status {status} running {path}: {said}")


class TfjsStream:
    """A streaming model.json loaded by TensorFlow.js in one Node.js process for all its calls (`streaming.Stream`):
    each call's inputs and outputs pass through a private folder, a line on node's stdin and one on its stdout say
    when (starting node and TensorFlow.js takes seconds; a call, milliseconds)."""

    chunk = None  # its x takes any number of steps

    def __init__(self, path: Path):
        model = TfjsFile.load(path)  # a hostile model.json is refused here, before node reads it
        check_stream_names(path, model.input_names, model.output_names)
        refuse_never_loading(model)
        node, version = require_tfjs()
        self.path, self.source = path, model.recorded
        self.how = f"@tensorflow/tfjs {version} (Node.js, CPU backend): the model's own layers"
        self.versions = {"node": _node.node_version() or node, PACKAGE: version}
        self.folder = Path(tempfile.mkdtemp(prefix="rnnconv-tfjs-"))
        request = self.folder / "request.json"
        request.write_text(json.dumps({"stream": True}), encoding="utf-8")
        # node's stderr to a file: a pipe left unread would fill up and stop it
        self.log = open(self.folder / "stderr.txt", "w+", encoding="utf-8")  # noqa: SIM115 (closed by _stop)
        command = [node, str(SCRIPT), str(_node.node_modules()), str(resolved(path)), str(request), str(self.folder)]
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
            )
        except OSError as exc:
            self.log.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise BackendMissing(f"node cannot be started ({exc.strerror or exc})") from None
        weakref.finalize(self, _stop, self.process, self.log, self.folder)
        said = self._answer()  # the model's inputs and outputs as TensorFlow.js loaded it
        self.inputs, self.outputs = list(said.get("inputs", [])), list(said.get("outputs", []))
        check_stream_names(path, self.inputs, self.outputs)

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.inputs if name not in feeds]
        if missing:
            raise BadInput(f"the streaming model takes inputs rnnconv does not write: {listing(missing)}")
        values = [np.ascontiguousarray(feeds[name], "<f4") for name in self.inputs]
        for index, value in enumerate(values):
            value.tofile(self.folder / f"in{index}.f32")
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"shapes": [list(v.shape) for v in values]}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # node has ended: _answer says why
        shapes = self._answer().get("shapes", [])
        return {
            name: np.fromfile(self.folder / f"out{index}.f32", "<f4").reshape(shape)
            for index, (name, shape) in enumerate(zip(self.outputs, shapes))
        }

    def _answer(self) -> dict[str, Any]:
        """node's next answer; its failure as run_layers's, where it ended instead (or ran past RUN_TIMEOUT)."""
        assert self.process.stdout is not None
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.process.kill()

        watchdog = threading.Timer(RUN_TIMEOUT, expire)
        watchdog.daemon = True  # an interpreter ending (a signal) does not wait for it
        watchdog.start()
        try:
            for line in self.process.stdout:
                if line.startswith(ANSWER):
                    said = json.loads(line[len(ANSWER) :])
                    return said if isinstance(said, dict) else {}
        finally:
            watchdog.cancel()
        status = self.process.wait()
        if expired.is_set():
            raise BadInput(f"TensorFlow.js did not finish running {self.path} within {RUN_TIMEOUT} s")
        self.log.seek(0)
        raise _failure(self.path, status, self.log.read())


def _stop(process: subprocess.Popen[str], log: IO[str], folder: Path) -> None:
    """End a streaming model's node (at the end of its stdin it ends by itself) and remove its folder."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):  # node gone already
            process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()
    log.close()
    shutil.rmtree(folder, ignore_errors=True)


class NodeEngine(base.RuntimeEngine):
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
