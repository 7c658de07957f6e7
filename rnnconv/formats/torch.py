"""PyTorch state_dicts: find the RNNs in a checkpoint, read them, write them back.

`.pt`/`.pth`/`.bin` checkpoints are loaded with `torch.load(weights_only=True,
mmap=True)` and nothing else: a file that needs more than tensors and plain
containers is refused, never unpickled. `.safetensors` state_dicts are read and
written without torch at all. RNNs are found by their parameter names
(`weight_ih_l0`, `weight_hh_l0_reverse`, `weight_hr_l1`, the cells' `weight_ih`);
their mode, sizes, layers, directions and projection come from names and shapes,
through the torch rows of the layout table.
"""

from __future__ import annotations

import pickle
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.dtypes import ELEMENT_TYPES, decode, element_type, encode
from rnnconv.errors import BackendMissing, BadInput, RnnconvError
from rnnconv.formats import safetensors_io
from rnnconv.fsutil import atomic_outputs, write_array
from rnnconv.layouts import (Row, assemble_stored, check_shapes, find_row, gate_loaders, row_for_mode, rows_for,
                             stored_shapes)

PARAM = re.compile(r"^(?P<prefix>(?:.*\.)?)(?P<role>weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)"
                   r"(?:_l(?P<layer>\d+)(?P<reverse>_reverse)?)?$")
ROLE_OF = {"weight_ih": "input_matrix", "weight_hh": "recurrent_matrix", "bias_ih": "input_bias",
           "bias_hh": "recurrent_bias", "weight_hr": "projection"}
CLASS_BY_GATES = {4: "LSTM", 3: "GRU", 1: "RNN"}
NONLINEARITIES = ("tanh", "relu")


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise BackendMissing("reading or writing a PyTorch .pt checkpoint needs torch, which is not installed "
                             "(pip install 'rnnconv[torch]'); .safetensors state_dicts need no torch") from None
    return torch


# --- tensors, whatever file they come from ---------------------------------------------------

class Tensor:
    """A lazily read tensor: shape, dtype name, and numpy slices (bfloat16 widened to float32)."""

    def __init__(self, shape: tuple[int, ...], dtype: str, source: Any, widen: bool):
        self.shape, self.dtype, self._source, self._widen = shape, dtype, source, widen

    def __getitem__(self, index: Any) -> np.ndarray:
        part = self._source[index]
        if hasattr(part, "numpy"):  # a torch tensor (bfloat16 has no numpy type)
            return (part.float() if self._widen else part).numpy()
        return decode(np.asarray(part), ELEMENT_TYPES["bfloat16"]) if self._widen else np.asarray(part)


TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
                "torch.float64": "float64"}


def _torch_tensor(value: Any) -> Tensor | None:
    dtype = TORCH_DTYPES.get(str(value.dtype))
    return Tensor(tuple(value.shape), dtype, value, dtype == "bfloat16") if dtype else None


def load_state_dict(path: Path) -> "StateDict":
    """Every floating point tensor of a checkpoint, keyed by its dotted path through wrappers."""
    if path.suffix == ".safetensors" or _is_safetensors(path):
        header, start = safetensors_io.read_header(path)
        out = StateDict()
        for key in header:
            if key == "__metadata__" or header[key]["dtype"] not in ("F32", "F16", "BF16", "F64"):
                continue
            words, etype = safetensors_io.tensor_words(path, header, start, key)
            out[key] = Tensor(words.shape, etype.name, words, etype.name == "bfloat16")
        return out
    torch = require_torch()
    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap can only be used" not in str(exc):
                raise
            loaded = torch.load(path, map_location="cpu", weights_only=True)  # legacy (pre-zip) format
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        if not found:
            raise BadInput(f"{path} is not a readable PyTorch checkpoint (not a pickle torch.save wrote)") from None
        raise BadInput(f"{path} was refused: it needs more than weights to load (it holds a {found.group(1)}), and "
                       f"rnnconv never unpickles code; save model.state_dict() instead of the model object") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"{path} is not a readable PyTorch checkpoint (truncated or corrupt: {first[:160]})") from None
    tensors = StateDict()
    for key, value in flatten_checkpoint(loaded, ""):
        tensor = _torch_tensor(value) if hasattr(value, "dtype") and hasattr(value, "shape") else None
        if tensor:
            tensors[key] = tensor
    tensors.wrapped = isinstance(loaded, Mapping) and not all(hasattr(v, "dtype") for v in loaded.values())
    return tensors


class StateDict(dict):
    """Tensors by dotted key; `wrapped` when the checkpoint held them inside a dict of other things."""

    wrapped = False


def _is_safetensors(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def flatten_checkpoint(obj: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf) of a checkpoint: wrappers and containers become key prefixes."""
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from flatten_checkpoint(value, f"{prefix}{key}.")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from flatten_checkpoint(value, f"{prefix}{i}.")
    else:
        yield prefix[:-1], obj


# --- finding RNNs ---------------------------------------------------------------------------

@dataclass
class TorchRNN:
    """One nn.LSTM/GRU/RNN (or cell) found in a state_dict."""

    prefix: str  # "encoder.rnn." ("" for a bare module's state_dict), wrapper keys included
    tensors: dict[tuple[str, int | None, int], Tensor]  # (role, layer or None for cells, direction)
    keys: dict[tuple[str, int | None, int], str]
    wrapper: str = ""  # "state_dict." when the checkpoint wraps its state_dict in a dict

    @property
    def name(self) -> str:
        return self.prefix[len(self.wrapper):].rstrip(".") or "rnn"

    @property
    def is_cell(self) -> bool:
        return all(layer is None for _, layer, _ in self.tensors)


def find_rnns(tensors: Mapping[str, Tensor]) -> list[TorchRNN]:
    """RNNs by their parameter names; a wrapper key shared by all (`state_dict.`) is left out of their names."""
    found: dict[str, TorchRNN] = {}
    for key, tensor in tensors.items():
        match = PARAM.match(key)
        if not match:
            continue
        layer = int(match["layer"]) if match["layer"] is not None else None
        slot = (ROLE_OF[match["role"]], layer, 1 if match["reverse"] else 0)
        rnn = found.setdefault(match["prefix"], TorchRNN(match["prefix"], {}, {}))
        rnn.tensors[slot] = tensor
        rnn.keys[slot] = key
    rnns = [r for r in found.values() if ("input_matrix", first_layer(r), 0) in r.tensors]
    wrappers = {r.prefix.split(".")[0] for r in rnns}
    if len(wrappers) == 1 and getattr(tensors, "wrapped", False) and all("." in r.prefix for r in rnns):
        for rnn in rnns:
            rnn.wrapper = rnn.prefix.split(".")[0] + "."
    return rnns


def first_layer(rnn: TorchRNN) -> int | None:
    """Layer index of the first layer's tensors: 0, or None for a cell's unsuffixed names."""
    return None if rnn.is_cell else 0


def pick(rnns: list[TorchRNN], prefix: str | None, path: Path) -> TorchRNN:
    if not rnns:
        raise BadInput(f"{path} holds no PyTorch RNN weights (no weight_ih_l0 / weight_hh_l0 or cell weight_ih)")
    names = ", ".join(repr(r.name) for r in rnns)
    if prefix is None:
        if len(rnns) == 1:
            return rnns[0]
        raise BadInput(f"{path} holds {len(rnns)} RNNs ({names}); pick one with --prefix, or write them all to a "
                       f".safetensors")
    wanted = prefix.rstrip(".")
    matches = [r for r in rnns if r.name == wanted or r.prefix.rstrip(".") == wanted
               or r.prefix.endswith("." + wanted + ".")]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise BadInput(f"{path} has no RNN with prefix {prefix!r}; its RNNs: {names}")
    raise BadInput(f"prefix {prefix!r} matches several RNNs in {path} "
                   f"({', '.join(repr(r.name) for r in matches)}); give more of it")


# --- to the canonical form -----------------------------------------------------------------

def to_canonical(rnn: TorchRNN, source: dict[str, Any], nonlinearity: str = "tanh") -> CanonicalRNN:
    what = f"RNN {rnn.name!r}"
    t = rnn.tensors
    first = first_layer(rnn)
    hh = t.get(("recurrent_matrix", first, 0))
    if hh is None:
        raise BadInput(f"{what}: {rnn.keys[('input_matrix', first, 0)]} has no matching weight_hh")
    hr = t.get(("projection", first, 0))
    hidden = hr.shape[1] if hr is not None else hh.shape[1]
    if len(hh.shape) != 2 or hidden == 0 or hh.shape[0] % hidden or hh.shape[0] // hidden not in CLASS_BY_GATES:
        raise BadInput(f"{what}: {rnn.keys[('recurrent_matrix', first, 0)]} has shape {tuple(hh.shape)}, which is "
                       f"no LSTM, GRU or RNN weight_hh (G*H, H) for G = 4, 3 or 1")
    cls = CLASS_BY_GATES[hh.shape[0] // hidden] + ("Cell" if rnn.is_cell else "")
    row = find_row("torch", cls)
    if nonlinearity not in NONLINEARITIES:
        raise BadInput(f"unknown nonlinearity {nonlinearity!r} (choose tanh or relu)")
    if row.cell != "rnn" and nonlinearity != "tanh":
        raise BadInput(f"{what} is an {cls}: --nonlinearity applies to nn.RNN only")
    mode = row.modes[nonlinearity]
    layers = sorted({layer for (_, layer, _) in t}, key=lambda l: -1 if l is None else l)
    num_layers = len(layers)
    if not rnn.is_cell and layers != list(range(num_layers)):
        raise BadInput(f"{what}: its layers are {layers}, not 0..{num_layers - 1} (a layer's weights are missing)")
    bidirectional = any(d for (_, _, d) in t)
    proj = hr.shape[0] if hr is not None else 0
    has_bias = ("input_bias", first, 0) in t
    dtype = t[("input_matrix", first, 0)].dtype
    spec = RNNSpec(mode, t[("input_matrix", first, 0)].shape[1], hidden, num_layers, bidirectional, proj, dtype,
                   has_bias)
    cells = {}
    for index, layer in enumerate(layers):
        for direction in range(spec.num_directions):
            expected = stored_shapes(row, hidden, spec.layer_input_size(index), spec.output_size, proj, has_bias)
            names = {role: _name(rnn, row, role, layer, direction) for role in expected}
            actual = {role: tuple(t[(role, layer, direction)].shape) for role in expected
                      if (role, layer, direction) in t}
            check_shapes(row, actual, expected, names, f"{what} ({spec.describe()})")
            extra = {rnn.keys[s] for s in t if s[1] == layer and s[2] == direction and s[0] not in expected}
            if extra:
                raise BadInput(f"{what}: {', '.join(sorted(extra))} does not fit a {cls} "
                               f"{'with' if has_bias else 'without'} biases{' and projection' if proj else ''}")
            fetch = (lambda role, layer=layer, direction=direction: t[(role, layer, direction)])
            cells[(index, direction)] = gate_loaders(row, hidden, fetch, has_bias, proj=proj)
    notes = []
    if row.cell == "rnn":
        notes.append(f"{rnn.name}: nonlinearity {nonlinearity}, from --nonlinearity (default tanh): a state_dict "
                     f"does not store it")
    if not has_bias:
        notes.append(f"{rnn.name}: bias=False, so every bias slot is zero (as PyTorch gives cuDNN)")
    if rnn.is_cell:
        notes.append(f"{rnn.name}: an {cls} is a one-layer RNN run one step at a time")
    info = {**source, "layer": rnn.name, "class": f"nn.{cls}", "prefix": rnn.prefix}
    return CanonicalRNN.from_cell_loaders(rnn.name, spec, cells, source=info, notes=notes)


def _name(rnn: TorchRNN, row: Row, role: str, layer: int | None, direction: int) -> str:
    return rnn.prefix + row.tensors[role].format(layer=layer, suffix="_reverse" if direction else "")


# --- from the canonical form -----------------------------------------------------------------

def torch_class(spec: RNNSpec) -> str:
    return row_for_mode("torch", spec.mode)[0].source_class


KIND_OF_ROLE = {"input_matrix": "W", "recurrent_matrix": "R", "input_bias": "bW", "recurrent_bias": "bR",
                "projection": "P"}


def state_dict_arrays(rnn: CanonicalRNN, prefix: str = "") -> dict[str, np.ndarray]:
    """The nn.LSTM/GRU/RNN state_dict of a canonical RNN, as numpy arrays in its dtype (bf16 as float32).

    PyTorch stacks gates in cuDNN's order, so when the source holds them stacked (a weight
    space does) each tensor is a view of it; otherwise the table's assembly builds it.
    """
    spec = rnn.spec
    (row,) = rows_for("torch", torch_class(spec))
    roles = ["input_matrix", "recurrent_matrix"] + (["input_bias", "recurrent_bias"] if spec.bias else []) + \
        (["projection"] if spec.proj_size else [])
    out: dict[str, np.ndarray] = {}
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            found = {role: rnn.stacked(layer, direction, KIND_OF_ROLE[role]) for role in roles}
            if any(v is None for v in found.values()) or row.gate_order != spec.gates:
                found = assemble_stored(row, spec.hidden_size, spec.layer_input_size(layer), spec.output_size,
                                        lambda kind, gate: rnn.param(ParamKey(layer, direction, kind, gate)),
                                        has_bias=spec.bias, proj=spec.proj_size, dtype=_working_dtype(spec))
            for role in roles:
                key = prefix + row.tensors[role].format(layer=layer, suffix="_reverse" if direction else "")
                out[key] = found[role]
    return out


def _working_dtype(spec: RNNSpec) -> type:
    """float32 holds float16 and bfloat16 values exactly; only float64 needs more."""
    return np.float64 if spec.dtype == "float64" else np.float32


def constructor(spec: RNNSpec) -> str:
    """The nn module call whose load_state_dict accepts what `write_state_dict` writes."""
    args = [f"input_size={spec.input_size}", f"hidden_size={spec.hidden_size}"]
    if spec.num_layers > 1:
        args.append(f"num_layers={spec.num_layers}")
    if spec.mode == "rnn_relu":
        args.append("nonlinearity='relu'")
    if not spec.bias:
        args.append("bias=False")
    if spec.bidirectional:
        args.append("bidirectional=True")
    if spec.proj_size:
        args.append(f"proj_size={spec.proj_size}")
    if spec.dtype != "float32":
        args.append(f"dtype=torch.{spec.dtype}")
    return f"torch.nn.{torch_class(spec)}({', '.join(args)})"


def write_state_dict(rnns: list[CanonicalRNN], path: Path, dtype: str | None, force: bool = False) -> None:
    """One RNN's state_dict (keys as nn.Module gives them), or several under their names as prefixes."""
    prefixed = len(rnns) > 1
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    for rnn in rnns:
        want = dtype or rnn.spec.dtype
        for key, value in state_dict_arrays(rnn, f"{rnn.name}." if prefixed else "").items():
            arrays[key] = (value, want)
    if path.suffix == ".safetensors":
        entries = [safetensors_io.Entry(key, element_type(d), value.shape,
                                        lambda f, v=value, d=d: write_array(f, encode(v, element_type(d))))
                   for key, (value, d) in arrays.items()]
        safetensors_io.write(path, entries, lambda _: {"format": "pt"}, force)
        return
    if path.suffix not in (".pt", ".pth", ".bin"):
        raise BadInput(f"output {path} must end in .pt, .pth, .bin or .safetensors for a PyTorch state_dict")
    torch = require_torch()
    state = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # views of a read-only blob: torch.save only reads them
        for key, (value, d) in arrays.items():
            state[key] = torch.from_numpy(np.ascontiguousarray(value)).to(getattr(torch, element_type(d).torch))
    with atomic_outputs([path], force) as (tmp,):
        torch.save(state, tmp)


def inspect_torch(path: Path, fmt: str) -> dict[str, Any]:
    entries = []
    for rnn in find_rnns(load_state_dict(path)):
        entry: dict[str, Any] = {"name": rnn.name, "class": "nn.?"}
        try:
            canonical = to_canonical(rnn, {"path": str(path)})
            entry.update({"class": canonical.source["class"], "spec": canonical.spec.to_dict(), "converts": True,
                          "reason": None, "notes": canonical.notes})
        except RnnconvError as exc:
            entry.update({"spec": None, "converts": False, "reason": str(exc), "notes": []})
        entries.append(entry)
    return {"path": str(path), "format": fmt, "versions": {}, "rnns": entries, "notes": []}

