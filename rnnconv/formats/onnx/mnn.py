"""An ONNX model run in MNN (pip `mnn`): MNN's own converter turns it into a .mnn in a temporary folder, and MNN's CPU
runtime runs that, both in a child process (a converter that crashes on a hostile file ends the child, not rnnconv).

The child imports MNN's C extensions only (`_tools` for the converter, `MNN` for the runtime), never `MNN.tools`:
importing that package starts MNN's usage logging, which runs `pip install` and sends the machine's id away.
MNN 3.6's converter builds a single-direction LSTM or GRU as a loop that fails on symbolic dimensions, so the copy
it converts has X's and the states' dimensions fixed to the input's, as a deployment with fixed shapes has them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats import base
from rnnconv.formats.onnx.runner import MODEL_OUTPUTS, cudnn_outputs, model_feeds
from rnnconv.table.constants import LSTM

LOG_PREFIX = re.compile(r"^\[[\d:]+\]\s*:\d+:\s*")  # "[08:56:01] :220: " before what MNN's converter logs
MNN_TIMEOUT_S = 120  # converting and running a small RNN takes well under a second
# The child: convert argv[1] (ONNX) to argv[2] (.mnn), run it on the arrays of argv[3] (.npz), save to argv[4].
CONVERTER_REFUSED = 3  # the child's exit code where MNN's converter wrote no .mnn
_CHILD = f"""
import os
import sys
CONVERTER_REFUSED = {CONVERTER_REFUSED}
import numpy as np
import _tools
onnx_path, mnn_path, given, got = sys.argv[1:5]
argv = ["mnnconvert", "-f", "ONNX", "--modelFile", onnx_path, "--MNNModel", mnn_path, "--bizCode", "rnnconv"]
_tools.mnnconvert(argv)
if not os.path.isfile(mnn_path):
    sys.exit(CONVERTER_REFUSED)
import MNN
import MNN.expr as F
feeds = dict(np.load(given))
outputs = sys.argv[5].split(",")
module = MNN.nn.load_module_from_file(mnn_path, list(feeds), outputs)
placeholders = []
for value in feeds.values():
    var = F.placeholder(list(value.shape), F.NCHW, F.float)
    var.write(value.ravel().tolist())
    placeholders.append(var)
results = module.onForward(placeholders)
if len(results) != len(outputs):
    sys.exit("MNN gave " + str(len(results)) + " outputs, not " + str(len(outputs)))
np.savez(got, **{{name: np.array(var.read(), np.float32).reshape(var.shape) for name, var in zip(outputs, results)}})
"""


def mnn_version() -> str | None:
    """MNN's version, or None where it is not installed (read without importing it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mnn")
    except PackageNotFoundError:
        return None


def require_mnn() -> str:
    found = mnn_version()
    if found is None:
        raise BackendMissing("running ONNX in MNN needs mnn, which is not installed (pip install 'rnnconv[mnn]')")
    return found


def fixed_dims(model: bytes, feeds: Mapping[str, np.ndarray]) -> bytes:
    """The model with its graph inputs' dimensions fixed to those of the arrays fed to them."""
    from rnnconv.formats.onnx.reader import require_onnx

    onnx = require_onnx()
    try:
        proto = onnx.ModelProto.FromString(model)
    except Exception as exc:  # protobuf's DecodeError, and what a hostile message raises
        raise BadInput(f"MNN was not given an ONNX model: {str(exc)[:160]}") from None
    for graph_input in proto.graph.input:
        if graph_input.name in feeds:
            dims = graph_input.type.tensor_type.shape.dim
            for dim, size in zip(dims, feeds[graph_input.name].shape):
                dim.Clear()
                dim.dim_value = int(size)
    return bytes(proto.SerializeToString())


def run_in_mnn(model: bytes, feeds: Mapping[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    """The model's named outputs, run in MNN (its converter, then its CPU runtime) on float32 feeds."""
    require_mnn()
    arrays = {name: np.ascontiguousarray(value, np.float32) for name, value in feeds.items()}
    with tempfile.TemporaryDirectory(prefix="rnnconv-mnn-") as folder:
        where = Path(folder)
        (where / "model.onnx").write_bytes(fixed_dims(model, arrays))
        np.savez(where / "given.npz", **arrays)  # type: ignore[arg-type]
        paths = [str(where / name) for name in ("model.onnx", "model.mnn", "given.npz", "got.npz")]
        try:
            child = subprocess.run(
                [sys.executable, "-c", _CHILD, *paths, ",".join(outputs)],
                capture_output=True,
                text=True,
                timeout=MNN_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BadInput(f"MNN did not convert and run the model within {MNN_TIMEOUT_S} s") from None
        if child.returncode != 0 or not (where / "got.npz").is_file():
            said = [
                LOG_PREFIX.sub("", line.replace(folder, "")).strip()
                for line in (child.stdout + child.stderr).splitlines()
            ]
            said = [line for line in said if line and "device supports" not in line and line != "Converted Failed!"]
            why = next((line for line in said if "Not Support" in line), said[-1] if said else "it said nothing")
            if child.returncode < 0:
                raise BadInput(f"MNN was ended by signal {-child.returncode} converting or running the model: {why}")
            step = "MNN's converter refused" if child.returncode == CONVERTER_REFUSED else "MNN's runtime failed on"
            raise BadInput(f"{step} the model: {why[:300]}")
        with np.load(where / "got.npz") as got:
            return {name: np.array(got[name]) for name in outputs}


class MnnEngine(base.RuntimeEngine):
    """`verify --backend mnn`: an .onnx rnnconv wrote (or a blob written as one) converted by MNN's converter and run
    by its CPU runtime, fed X and every layer's initial states as the file's inputs."""

    def run_file(
        self, path: Path, where: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        from rnnconv.formats.onnx.profile import broken
        from rnnconv.formats.onnx.reader import require_onnx

        version = require_mnn()
        if inputs.get("lengths") is not None:
            raise Unsupported(
                "MNN runs every sequence its full length (it ignores sequence_lens): verify without --ragged"
            )
        model = path.read_bytes()
        try:
            proto = require_onnx().ModelProto.FromString(model)
        except Exception as exc:  # protobuf's DecodeError: the file changed since it was read
            raise BadInput(f"{path.name} cannot be read as an ONNX model: {str(exc)[:160]}") from None
        if refused := broken(proto, "mnn"):
            raise Unsupported(f"{path.name} is not in the form MNN takes: {refused[0].line('mnn')}")
        lstm = spec.mode == LSTM
        names = list(MODEL_OUTPUTS[: 2 + lstm])
        if [output.name for output in proto.graph.output] != names:
            raise Unsupported(f"{path.name} does not have the outputs rnnconv writes ({', '.join(names)})")
        got = run_in_mnn(model, model_feeds(inputs, lstm), names)
        how = f"MNN {version}: {path.name} converted by MNN's converter, run by its CPU runtime"
        return cudnn_outputs(got), how

    def versions(self) -> dict[str, str]:
        return {"mnn": require_mnn()}  # read from its metadata: importing MNN prints to stdout

    def missing(self, what: str) -> str | None:
        if mnn_version() is not None:
            return None
        return f"running {what} in MNN needs mnn, not installed either (pip install 'rnnconv[mnn]')"
