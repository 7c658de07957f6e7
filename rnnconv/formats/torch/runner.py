"""Run a PyTorch source RNN in PyTorch itself (CPU), for `verify` to compare a blob with.

The checkpoint is loaded again with `torch.load(weights_only=True)` (or safetensors),
the RNN's tensors taken by the prefix recorded at conversion, and loaded with
`load_state_dict(strict=True)` into the nn module the spec describes: a wrong
spec cannot load. Cells run step by step, as their users run them. A torch.export program runs
its own call of the RNN op in `torch.export.load(...).module()` (`run_program`).
"""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BadInput, cut
from rnnconv.formats.torch.reader import load_state_dict, require_torch
from rnnconv.formats.torch.writer import torch_class
from rnnconv.table.apply import rows_for
from rnnconv.table.constants import LSTM, NONLINEARITIES

CELL_ROW = rows_for("torch", "LSTMCell")[0]  # every cell's tensors have the same names
CELL_KEYS = tuple(CELL_ROW.tensors.values())


def load_source_module(path: Path, prefix: str, spec: RNNSpec) -> tuple[Any, Any, bool, str]:
    """torch, the module holding the checkpoint's tensors, whether it is a cell, and how it was loaded."""
    torch = require_torch("running the PyTorch source model")
    tensors = {key[len(prefix) :]: tensor for key, tensor in load_state_dict(path).items() if key.startswith(prefix)}
    for key, tensor in tensors.items():
        if tensor.problem:
            raise BadInput(f"{path}: {prefix}{key} {tensor.problem}")
    # read through rnnconv's checked reader; bfloat16 and half widen exactly to the float type the module runs in
    state = {key: torch.from_numpy(np.array(tensor[...])) for key, tensor in tensors.items()}
    if not state:
        raise BadInput(f"{path} holds no tensors under the prefix {prefix!r} the blob was made from")
    is_cell = all(key.split(".")[-1] in CELL_KEYS for key in state) and CELL_ROW.tensors["input_matrix"] in state
    name = torch_class(spec)
    module = getattr(torch.nn, name + ("Cell" if is_cell else ""))
    kwargs: dict[str, Any] = {"bias": spec.bias}
    nonlinearity = {mode: name for name, mode in NONLINEARITIES.items()}.get(spec.mode)
    if nonlinearity:
        kwargs["nonlinearity"] = nonlinearity
    if not is_cell:
        kwargs.update(num_layers=spec.num_layers, bidirectional=spec.bidirectional)
        if spec.proj_size:
            kwargs["proj_size"] = spec.proj_size
    with torch.device("meta"):  # no memory for weights that load_state_dict(assign=True) replaces
        instance = module(spec.input_size, spec.hidden_size, **kwargs)
    dtype = torch.float64 if spec.dtype == "float64" else torch.float32
    try:
        instance.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    except RuntimeError as exc:
        raise BadInput(
            f"the blob's spec does not describe the source RNN in {path}: PyTorch says "
            f"{' '.join(str(exc).split())[:300]}"
        ) from None
    if any(p.is_meta for p in instance.parameters()):
        raise BadInput(f"the source RNN in {path} lacks some of nn.{module.__name__}'s weights")
    return torch, instance, is_cell, f"torch {torch.__version__}: nn.{module.__name__}.load_state_dict"


def run_source(
    path: Path, prefix: str, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
) -> tuple[dict[str, np.ndarray | None], str]:
    """The RNN under `prefix` in the checkpoint: its own y, h_n, c_n (sequence-major), and how it ran."""
    torch, module, is_cell, how = load_source_module(path, prefix, spec)
    x, h0 = np.asarray(inputs["x"]), np.asarray(inputs["h0"])
    return run_module(torch, module, spec, is_cell, x, h0, inputs["c0"], inputs["lengths"]), how


def run_module(
    torch: Any,
    module: Any,
    spec: RNNSpec,
    is_cell: bool,
    x: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray | None,
    lengths: np.ndarray | None,
) -> dict[str, np.ndarray | None]:
    """y (T, B, D*out), h_n (L*D, B, out), c_n (L*D, B, H) or None; sequence-major, as cuDNN."""
    steps, batch, _ = x.shape
    lengths = np.full(batch, steps) if lengths is None else np.asarray(lengths)
    dtype = torch.float64 if spec.dtype == "float64" else torch.float32
    xt, h, c = (torch.as_tensor(a, dtype=dtype) for a in (x, h0, c0 if c0 is not None else h0))
    lstm = spec.mode == LSTM
    with torch.no_grad():
        if is_cell:
            return _run_cell(torch, module, lstm, xt, h[0], c[0], lengths)
        packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.as_tensor(lengths), enforce_sorted=False)
        out, states = module(packed, (h, c) if lstm else h)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=steps)
    if lstm:
        h_n, c_n = states
        return {"y": y.numpy(), "h_n": h_n.numpy(), "c_n": c_n.numpy()}
    return {"y": y.numpy(), "h_n": states.numpy(), "c_n": None}


def _run_cell(torch: Any, cell: Any, lstm: bool, x: Any, h: Any, c: Any, lengths: np.ndarray) -> dict:
    ys = []
    live_all = torch.as_tensor(lengths)
    for t in range(x.shape[0]):
        live = (t < live_all)[:, None]
        if lstm:
            new_h, new_c = cell(x[t], (h, c))
            c = torch.where(live, new_c, c)
        else:
            new_h = cell(x[t], h)
        h = torch.where(live, new_h, h)
        ys.append(torch.where(live, new_h, torch.zeros_like(new_h)))
    return {"y": torch.stack(ys).numpy(), "h_n": h[None].numpy(), "c_n": c[None].numpy() if lstm else None}


def run_program(
    path: Path, prefix: str, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
) -> tuple[dict[str, np.ndarray | None], str]:
    """The RNN under `prefix` in a torch.export program, run by torch as the program runs it: the archive loaded by
    `torch.export.load` (from a copy of what it needs, once rnnconv's reader has checked that nothing in it runs
    code: no pickle, no op but ATen's, no guard), and the graph's own call of the RNN op in `.module()` given
    verify's inputs and states (batch-first where the program is)."""
    from rnnconv.formats.torch.exported import read_program, runnable

    program = read_program(path)
    rnn = program.rnns.get(prefix)
    if rnn is None:
        raise BadInput(f"{path} holds no RNN under the module path {prefix.rstrip('.')!r} the blob was made from")
    runnable(program)
    lengths = inputs.get("lengths")
    x = np.asarray(inputs["x"])
    if lengths is not None and np.any(np.asarray(lengths) != x.shape[0]):
        raise BadInput(
            f"{path}'s {rnn.op.removeprefix('torch.ops.')} takes no sequence lengths (every sequence runs all "
            f"steps): verify it without --lengths"
        )
    torch = require_torch("running the torch.export program")
    with tempfile.TemporaryDirectory(prefix="rnnconv-pt2-") as folder:
        copy = Path(folder) / "program.pt2"
        _loadable_copy(program, copy)
        quiet = logging.getLogger("torch.export")  # its loader logs a traceback before it raises
        level, quiet.level = quiet.level, logging.CRITICAL
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = torch.export.load(copy).module()
        except Exception as exc:  # torch's loader raises what it likes of a program it cannot take
            said = cut(" ".join(str(exc).split()), 200).rstrip(":")
            raise BadInput(f"torch.export.load cannot load {path} (it says: {said})") from None
        finally:
            quiet.level = level
    node = next((n for n in module.graph.nodes if n.name == rnn.node and n.op == "call_function"), None)
    if node is None or len(node.args) < 3:
        raise BadInput(f"{path}: torch.export.load's module has no call {rnn.node!r} of {rnn.op}")
    lstm = spec.mode == LSTM
    states = [inputs["h0"], inputs["c0"]] if lstm else [inputs["h0"]]
    feed = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2) if rnn.batch_first else x, np.float32))
    hx = [torch.from_numpy(np.asarray(s, np.float32)) for s in states]

    def value(arg: Any) -> Any:
        if isinstance(arg, (list, tuple)):
            return type(arg)(value(a) for a in arg)
        if isinstance(arg, torch.fx.Node):
            if arg.op != "get_attr":
                raise BadInput(f"{path}: the program computes a tensor its {rnn.node} takes as a parameter")
            return (
                module.get_parameter(arg.target)
                if arg.target in dict(module.named_parameters())
                else (module.get_buffer(arg.target))
            )
        return arg

    args = [feed, hx if lstm else hx[0], *(value(a) for a in node.args[2:])]
    with torch.no_grad():
        out = node.target(*args, **{k: value(v) for k, v in node.kwargs.items()})
    y = out[0].numpy()
    got: dict[str, np.ndarray | None] = {
        "y": y.transpose(1, 0, 2) if rnn.batch_first else y,
        "h_n": out[1].numpy(),
        "c_n": out[2].numpy() if lstm else None,
    }
    return got, f"torch {torch.__version__}: torch.export.load(...).module()'s {node.target}"


def _loadable_copy(program: Any, copy: Path) -> None:
    """The archive as torch.export.load takes it, holding only what rnnconv's reader checked: the program's graph
    (its guards, Python that .module() would compile, left out), its configs, version files and weights; its
    sample inputs (a pickle) empty."""
    from rnnconv.formats import _zip
    from rnnconv.formats.torch.wire import (
        EXPORT_CONSTANTS_DIR,
        EXPORT_PROGRAM,
        EXPORT_SAMPLE_INPUTS,
        EXPORT_WEIGHTS_DIR,
    )

    kept = ("archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id")
    path, folder = program.found.path, program.folder
    with _zip.open_archive(path) as archive, zipfile.ZipFile(copy, "w", zipfile.ZIP_STORED) as out:
        for name in program.members:
            inner = name[len(folder) :]
            if inner == EXPORT_PROGRAM:
                document = json.loads(_zip.read_member(archive, name, path))
                document["guards_code"] = []
                out.writestr(name, json.dumps(document))
            elif inner in kept or inner.rpartition("/")[0] + "/" in (EXPORT_WEIGHTS_DIR, EXPORT_CONSTANTS_DIR):
                out.writestr(name, _zip.read_member(archive, name, path))
        out.writestr(folder + EXPORT_SAMPLE_INPUTS, b"")
