"""Writing PyTorch state_dicts, without torch: `torch.save`'s zip checkpoints, or `.safetensors`.

Keys are those `nn.LSTM`/`nn.GRU`/`nn.RNN` give (the torch rows' tensor names); the
printed constructor is the module whose `load_state_dict` takes the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.dtypes import element_type, encode
from rnnconv.errors import BadInput
from rnnconv.formats import _safetensors
from rnnconv.formats.torch.checkpoint import TensorToSave, storage_class, write_zip
from rnnconv.safeio import atomic_outputs, write_array
from rnnconv.table.apply import row_for_mode, rows_for, stored_shapes
from rnnconv.table.constants import KIND_OF_ROLE, NONLINEARITIES, TORCH_REVERSE_SUFFIX


def torch_class(spec: RNNSpec) -> str:
    return row_for_mode("torch", spec.mode)[0].source_class


def state_dict_arrays(rnn: CanonicalRNN, prefix: str = "") -> dict[str, np.ndarray]:
    """The nn.LSTM/GRU/RNN state_dict of a canonical RNN, as numpy arrays in its dtype (bf16 as float32).

    PyTorch stacks gates in cuDNN's order, so when the source holds them stacked (a weight
    space does) each tensor is a view of it; otherwise the table's assembly builds it.
    """
    spec = rnn.spec
    (row,) = rows_for("torch", torch_class(spec))
    roles = list(stored_shapes(row, spec.hidden_size, 1, 1, spec.proj_size, spec.bias))
    out: dict[str, np.ndarray] = {}
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            views = {role: rnn.stacked(layer, direction, KIND_OF_ROLE[role]) for role in roles}
            found = {role: view for role, view in views.items() if view is not None}
            if len(found) < len(roles) or row.gate_order != spec.gates:
                found = rnn.stored(row, layer, direction)
            for role in roles:
                key = prefix + row.tensors[role].format(layer=layer, suffix=TORCH_REVERSE_SUFFIX if direction else "")
                out[key] = found[role]
    return out


def constructor(spec: RNNSpec) -> str:
    """The nn module call whose load_state_dict accepts what `write_state_dict` writes."""
    args = [f"input_size={spec.input_size}", f"hidden_size={spec.hidden_size}"]
    if spec.num_layers > 1:
        args.append(f"num_layers={spec.num_layers}")
    nonlinearity = {mode: name for name, mode in NONLINEARITIES.items()}.get(spec.mode, "tanh")
    if nonlinearity != "tanh":
        args.append(f"nonlinearity='{nonlinearity}'")
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
        entries = [
            _safetensors.Entry(key, element_type(d), value.shape, _array_writer(encode(value, element_type(d))))
            for key, (value, d) in arrays.items()
        ]
        _safetensors.write(path, entries, lambda _: {"format": "pt"}, force)
        return
    if path.suffix not in (".pt", ".pth", ".bin"):
        raise BadInput(f"output {path} must end in .pt, .pth, .bin or .safetensors for a PyTorch state_dict")
    tensors = {
        key: TensorToSave(np.asarray(encode(value, element_type(d)), order="C"), storage_class(d))
        for key, (value, d) in arrays.items()
    }
    with atomic_outputs([path], force) as (tmp,):
        write_zip(tmp, tensors)


def _array_writer(words: np.ndarray) -> Callable[[BinaryIO], list[str]]:
    return lambda f: write_array(f, words)
