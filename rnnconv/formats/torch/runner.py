"""Run a PyTorch source RNN in PyTorch itself (CPU), for `verify` to compare a blob with.

A state_dict is read again by rnnconv's checked reader, the RNN's tensors taken by the prefix recorded at
conversion, and loaded with `load_state_dict(strict=True)` into the nn module the spec describes: a wrong
spec cannot load. Cells run step by step, as their users run them. A TorchScript archive runs in
`torch.jit.load` (`run_script`); a whole pickled model never reaches torch, whose unpickling would run its
classes' code: its RNN runs in the numpy reference on the weights rnnconv read (`run_read`). A torch.export program
runs its own call of the RNN op in `torch.export.load(...).module()` (`run_program`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.reference import forward
from rnnconv.errors import BadInput, cut, first_line
from rnnconv.formats.torch.checkpoint import ZipCheckpoint
from rnnconv.formats.torch.modules import KeptRNN
from rnnconv.formats.torch.quantized import DYNAMIC, QuantizedRNN, stored
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


def run_quantized(
    path: Path, prefix: str, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
) -> tuple[dict[str, np.ndarray | None], str]:
    """A dynamically quantized RNN as torch runs it: its quantized module (torch.ao.nn.quantized.dynamic) rebuilt
    from the integers, scales and biases rnnconv's reader checked, packed by torch's own ops as quantize_dynamic
    packs them, run in float32 (the kernels quantize each product's input at run time)."""
    state = load_state_dict(path)
    quantized = state.quantized.get(prefix)
    if quantized is None:
        raise BadInput(f"{path} holds no quantized RNN under the prefix {prefix!r} the blob was made from")
    torch = require_torch("running the quantized PyTorch source model")
    found = state.checkpoint
    assert found is not None
    x, h0 = np.asarray(inputs["x"]), np.asarray(inputs["h0"])
    single = dataclasses.replace(spec, dtype="float32")  # its kernels take float32 inputs
    with warnings.catch_warnings():  # torch's own (its quantized tensors are deprecated): rnnconv speaks for itself
        warnings.simplefilter("ignore")
        try:
            module = _quantized_module(torch, path, found, quantized, spec)
            ran = run_module(torch, module, single, False, x, h0, inputs["c0"], inputs["lengths"])
        except RuntimeError as exc:  # torch's packing and kernels refuse what they cannot take
            raise BadInput(f"torch cannot run the quantized RNN of {path} (it says: {_said(exc)})") from None
    scheme = "int8 weights" if quantized.kind == DYNAMIC else "float16 weights"
    return ran, f"torch {torch.__version__}: torch.ao.nn.quantized.dynamic.{module._get_name()} ({scheme})"


def _quantized_module(torch: Any, path: Path, found: ZipCheckpoint, quantized: QuantizedRNN, spec: RNNSpec) -> Any:
    """The quantized module of `quantized`'s cells, each packed as quantize_dynamic packs it."""
    ops, dynamic = torch.ops.quantized, torch.ao.nn.quantized.dynamic
    packed = []
    for _, cell in sorted(quantized.cells.items()):  # in the order layer * directions + direction
        biases = (
            [None, None] if cell.biases is None else [torch.from_numpy(np.array(found.values(b))) for b in cell.biases]
        )
        linears = []
        for weight, bias in zip(cell.weights, biases):
            if quantized.kind != DYNAMIC:
                linears.append(ops.linear_prepack_fp16(torch.from_numpy(np.array(found.values(weight))), bias))
                continue
            q, quant = stored(found, weight, f"{path}: {cell.key}")
            ints = torch.from_numpy(np.array(q))
            if quant.axis is None:
                qweight = torch._make_per_tensor_quantized_tensor(ints, quant.scales[0], quant.zero_points[0])
            else:
                scales = torch.tensor(quant.scales, dtype=torch.float64)
                zeros = torch.tensor(quant.zero_points, dtype=torch.int64)
                qweight = torch._make_per_channel_quantized_tensor(ints, scales, zeros, quant.axis)
            linears.append(ops.linear_prepack(qweight, bias))
        if quantized.kind == DYNAMIC:
            params = ops.make_quantized_cell_params_dynamic(*linears, *biases, cell.reduce_range)
        else:
            params = ops.make_quantized_cell_params_fp16(*linears)
        packed.append(dynamic.modules.rnn.PackedParameter(params))
    module = getattr(dynamic, torch_class(spec))(
        spec.input_size,
        spec.hidden_size,
        spec.num_layers,
        bidirectional=spec.bidirectional,
        dtype=torch.qint8 if quantized.kind == DYNAMIC else torch.float16,
    )
    module._all_weight_values = torch.nn.ModuleList(packed)
    return module


def run_read(rnn: CanonicalRNN, inputs: dict[str, np.ndarray | None]) -> tuple[dict[str, np.ndarray | None], str]:
    """A whole pickled model's RNN as rnnconv read it, run by the numpy reference of its equations: torch.load would
    run the pickle's classes' code, so the file is never given to torch."""
    y, h_n, c_n = forward(rnn.spec, rnn.param, np.asarray(inputs["x"]), inputs["h0"], inputs["c0"], inputs["lengths"])
    how = (
        f"numpy {np.__version__}: the numpy reference on the weights rnnconv read from the pickled model inertly "
        f"(a whole model's pickle is never given to torch.load, which would run its classes' code)"
    )
    return {"y": y, "h_n": h_n, "c_n": c_n}, how


def run_script(
    path: Path, prefix: str, spec: RNNSpec, inputs: dict[str, np.ndarray | None], kept: KeptRNN | None
) -> tuple[dict[str, np.ndarray | None], str]:
    """The RNN module under `prefix` of a TorchScript archive, loaded by torch.jit.load and run by TorchScript itself
    (a scripted module's forward, or the traced graph) on verify's inputs, one sequence at a time where their lengths
    differ: y, h_n, c_n (sequence-major)."""
    torch = require_torch("running a TorchScript archive")
    name = prefix.rstrip(".") or "the root module"
    try:
        with warnings.catch_warnings():  # torch's own (torch.jit.load is deprecated): rnnconv speaks for itself
            warnings.simplefilter("ignore")
            module = torch.jit.load(str(path), map_location="cpu")
        for part in filter(None, prefix.rstrip(".").split(".")):
            module = getattr(module, part)
    except Exception as exc:  # torch.jit raises its own errors on an archive it cannot load
        raise BadInput(f"torch.jit.load cannot load {path} (it says: {_said(exc)})") from None
    x, h0 = np.asarray(inputs["x"]), np.asarray(inputs["h0"])
    c0 = None if inputs["c0"] is None else np.asarray(inputs["c0"])
    steps, batch, _ = x.shape
    lengths = np.full(batch, steps) if inputs["lengths"] is None else np.asarray(inputs["lengths"])
    dtype = torch.float64 if spec.dtype == "float64" else torch.float32
    lstm = spec.mode == LSTM
    y = np.zeros((steps, batch, spec.num_directions * spec.output_size))
    h_n, c_n = np.zeros_like(h0), None if c0 is None else np.zeros_like(c0)
    groups = [np.arange(batch)] if (lengths == steps).all() else [np.array([b]) for b in range(batch)]
    for group in groups:
        length = int(lengths[group[0]])
        xs, h = torch.as_tensor(x[:length, group], dtype=dtype), torch.as_tensor(h0[:, group], dtype=dtype)
        c = None if c0 is None else torch.as_tensor(c0[:, group], dtype=dtype)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out, h_last, c_last = _script_run(torch, module, spec, kept, xs, h, c)
        except Exception as exc:  # a module TorchScript cannot run as an RNN of this spec
            raise BadInput(
                f"TorchScript cannot run {name} of {path} as an {spec.describe()} (it says: {_said(exc)})"
            ) from None
        y[:length, group], h_n[:, group] = out, h_last
        if c_n is not None and c_last is not None:
            c_n[:, group] = c_last
    scripted = any(n.startswith("forward__") for n in module._c._method_names())
    ran = "its compiled forward" if scripted else f"torch.{spec.mode}, the call of its traced graph, on its parameters"
    how = f"torch {torch.__version__}: torch.jit.load of the archive, {name} run by {ran}"
    return {"y": y, "h_n": h_n, "c_n": c_n if lstm else None}, how


def _script_run(
    torch: Any, module: Any, spec: RNNSpec, kept: KeptRNN | None, x: Any, h: Any, c: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One run of a TorchScript RNN module: y, h_n, c_n (sequence-major). A scripted nn.LSTM/GRU/RNN runs its own
    compiled forward for a tensor input; a traced one keeps only the graph its model used (perhaps y alone), so the
    aten call that graph makes (`torch.lstm`, ...) runs on the module's loaded parameters in their order."""
    lstm = spec.mode == LSTM
    if kept is not None and kept.cls.endswith("Cell"):
        ran = _run_cell(torch, module, lstm, x, h[0], h[0] if c is None else c[0], np.full(x.shape[1], x.shape[0]))
        return ran["y"], ran["h_n"], ran["c_n"]
    batch_first = kept is not None and kept.settings.get("batch_first") is True
    given = x.transpose(0, 1) if batch_first else x
    methods = module._c._method_names()
    overloads = [getattr(module, n) for n in methods if n.startswith("forward__")]
    tensor_forward = [m for m in overloads if str(m.schema.arguments[1].type) == "Tensor"]
    if tensor_forward:  # scripted
        out, states = tensor_forward[0](given, (h, c) if lstm else h)
        h_n, c_n = states if lstm else (states, None)
    else:  # traced
        params = [p for _, p in module.named_parameters()]
        ran = getattr(torch, spec.mode)(
            given,
            [h, c] if lstm else h,
            params,
            spec.bias,
            spec.num_layers,
            0.0,
            False,
            spec.bidirectional,
            batch_first,
        )
        out, h_n, c_n = ran if lstm else (*ran, None)
    y = (out.transpose(0, 1) if batch_first else out).numpy()
    return y, h_n.numpy(), None if c_n is None else c_n.numpy()


def _said(exc: BaseException) -> str:
    """What torch.jit says of an error, as a clause: its first line, without the colon that leads to its detail."""
    return first_line(exc, 200).rstrip(" :") or type(exc).__name__


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
