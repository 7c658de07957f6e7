"""A .pdparams' RNN run in PaddlePaddle itself (CPU), for `verify` to compare with, in a child process.

The file is never given to `paddle.load`, which unpickles whatever it names: its arrays, read by rnnconv's inert
reader, go to `set_state_dict` of the paddle.nn module the spec describes, every key of the module's own state_dict
given and of its shape (a wrong spec cannot load), and the module runs batch-major from the given states, as its
users run it. Paddle runs in a child interpreter: its native library and TensorFlow's cannot share a process
(paddlepaddle 3.3.1 after tensorflow 2.21 crashes with SIGSEGV as it loads, before it hangs), and verify of a Keras
source beside a Paddle file would need both.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported, cut
from rnnconv.formats import base
from rnnconv.formats.paddle.reader import CELL, load_state_dict
from rnnconv.formats.paddle.wire import BIDIRECTIONAL, PADDLE_CLASSES, flat_names
from rnnconv.formats.paddle.writer import activation_of
from rnnconv.formats.plugin import version
from rnnconv.table.apply import row_for_mode, tensor_name
from rnnconv.table.constants import LSTM, RNN

PADDLE_TIMEOUT_S = 300  # importing Paddle takes a second or two, running a small RNN far less
SPEC_REFUSED = 3  # the child's exit code where the module's state_dict is not the arrays given
# The child: argv[1] the module (JSON: class, sizes, keyword arguments, dtype), argv[2] the .npz of its state (keys
# as the module's state_dict names them) and of the inputs ("input.x", "input.h0", "input.c0"), argv[3] the .npz to
# write y, h_n (and c_n) to; stdout: Paddle's version.
_CHILD = f"""
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")  # Paddle warns on import (no ccache: it compiles extensions) and on keys it skips
import paddle
module, given, got = json.loads(sys.argv[1]), dict(np.load(sys.argv[2])), sys.argv[3]
paddle.set_device("cpu")
paddle.set_default_dtype(module["dtype"])
rnn = getattr(paddle.nn, module["class"])(*module["sizes"], **module["kwargs"])
own = rnn.state_dict()
missing = [key for key in own if key not in given]
wrong = [key for key in own if key in given and list(given[key].shape) != list(own[key].shape)]
stray = [key for key in given if not key.startswith("input.") and key not in own]
if missing or wrong or stray:
    print(missing[0] + ", which it lacks" if missing else wrong[0] + " of shape " + str(tuple(own[wrong[0]].shape))
          if wrong else "no " + stray[0], file=sys.stderr)
    sys.exit({SPEC_REFUSED})
rnn.set_state_dict({{key: given[key] for key in own}})
rnn.eval()
x, h0 = paddle.to_tensor(given["input.x"]), paddle.to_tensor(given["input.h0"])
states = (h0, paddle.to_tensor(given["input.c0"])) if "input.c0" in given else h0
with paddle.no_grad():
    y, final = rnn(x, states)
out = {{"y": y.numpy(), "h_n": (final[0] if "input.c0" in given else final).numpy()}}
if "input.c0" in given:
    out["c_n"] = final[1].numpy()
np.savez(got, **out)
print(paddle.__version__)
"""


def paddle_version() -> str | None:
    """Paddle's version, or None where it is not installed (read without importing it: it runs in a child)."""
    if importlib.util.find_spec("paddle") is None:
        return None
    return version("paddlepaddle", "paddle") or "(version unknown)"


def require_paddle() -> str:
    found = paddle_version()
    if found is None:
        raise BackendMissing(
            "running PaddlePaddle needs the paddlepaddle package, which is not installed (pip install "
            "'rnnconv[paddle]'); .pdparams are read and written without it"
        )
    return found


class PaddleEngine(base.RuntimeEngine):
    """`verify --backend paddle` and a .pdparams' own runs: Paddle in a child process, so its version and whether it
    is there are read without importing it (the base engine imports a runtime's modules to tell)."""

    def versions(self) -> dict[str, str]:
        return {"paddlepaddle": require_paddle()}

    def missing(self, what: str) -> str | None:
        if paddle_version() is not None:
            return None
        return f"running {what} needs paddlepaddle, not installed either (pip install 'rnnconv[paddle]')"


def module_of(spec: RNNSpec) -> dict:
    """The paddle.nn module call of `spec`, as the child makes it (and the usage line names it)."""
    kwargs: dict = {"num_layers": spec.num_layers}
    if spec.bidirectional:
        kwargs["direction"] = BIDIRECTIONAL
    if spec.proj_size:
        kwargs["proj_size"] = spec.proj_size
    if spec.cell == RNN:
        kwargs["activation"] = activation_of(spec)
    dtype = "float64" if spec.dtype == "float64" else "float32"
    return {"class": PADDLE_CLASSES[spec.cell], "sizes": [spec.input_size, spec.hidden_size], "kwargs": kwargs,
            "dtype": dtype}  # fmt: skip


def state_for(spec: RNNSpec, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The cells' own arrays (what Paddle computes with) under their keys, and each alias Paddle's module of `spec`
    has given the cell's array it falls on; any other cell key of the file too, for the child to refuse."""
    row = row_for_mode("paddle", spec.mode, reset_after=spec.reset_after)[0]
    aliases = flat_names(spec.num_layers, spec.num_directions, (True, True), spec.proj_size > 0)
    state = {key: array for key, array in arrays.items() if CELL.match(key)}
    for name, (layer, direction, role) in aliases.items():
        cell = tensor_name(row, role, layer, direction, spec.num_directions)
        if cell in state:
            state[name] = state[cell]
    return state


def run_state(spec: RNNSpec, state: dict[str, np.ndarray], inputs: Inputs, what: str) -> tuple[Outputs, str]:
    """The module of `spec` given `state`, run in Paddle in a child from the inputs (sequence-major in and out, as
    cuDNN's), and Paddle's version."""
    require_paddle()
    if inputs.get("lengths") is not None and len(set(np.asarray(inputs["lengths"]).tolist())) > 1:
        raise Unsupported("rnnconv runs Paddle's RNNs on whole sequences: verify PaddlePaddle without --ragged")
    module = module_of(spec)
    dtype = module["dtype"]
    given = {key: np.asarray(value, dtype) for key, value in state.items()}
    given["input.x"] = np.ascontiguousarray(np.asarray(inputs["x"], dtype).transpose(1, 0, 2))
    given["input.h0"] = np.asarray(inputs["h0"], dtype)
    if spec.cell == LSTM:
        given["input.c0"] = np.asarray(inputs["c0"], dtype)
    with tempfile.TemporaryDirectory(prefix="rnnconv-paddle-") as folder:
        feeds, got = Path(folder) / "given.npz", Path(folder) / "got.npz"
        np.savez(feeds, **given)  # type: ignore[arg-type]
        try:
            child = subprocess.run(
                [sys.executable, "-c", _CHILD, json.dumps(module), str(feeds), str(got)],
                check=False,
                capture_output=True,
                text=True,
                timeout=PADDLE_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise BadInput(f"Paddle did not finish running {what} within {PADDLE_TIMEOUT_S} s") from None
        if child.returncode == SPEC_REFUSED:
            raise BadInput(
                f"the blob's spec does not describe {what}: paddle.nn.{module['class']} has {cut(child.stderr.strip())}"
            )
        if child.returncode != 0 or not got.exists():
            last = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
            raise BadInput(f"Paddle could not run {what}: {cut(last)}")
        with np.load(got) as out:
            outputs: Outputs = {
                "y": out["y"].transpose(1, 0, 2),
                "h_n": out["h_n"],
                "c_n": out.get("c_n"),
            }
    return outputs, child.stdout.strip().splitlines()[-1]


def run_source(path: Path, prefix: str, spec: RNNSpec, inputs: Inputs) -> tuple[Outputs, str]:
    """The RNN under `prefix` in the .pdparams: its own y, h_n, c_n (sequence-major), and how it ran."""
    arrays = {k[len(prefix) :]: v for k, v in load_state_dict(path).arrays.items() if k.startswith(prefix)}
    what = f"the RNN {prefix.rstrip('.') or 'rnn'!r} in {path}"
    outputs, version = run_state(spec, state_for(spec, arrays), inputs, what)
    return outputs, f"paddle {version} (CPU, a child process): paddle.nn.{PADDLE_CLASSES[spec.cell]}.set_state_dict"
