"""Writing PyTorch state_dicts, without torch: `torch.save`'s zip checkpoints, or `.safetensors`.

Keys are those `nn.LSTM`/`nn.GRU`/`nn.RNN` give (the torch rows' tensor names); the
printed constructor is the module whose `load_state_dict` takes the file.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.core.dtypes import element_type, stored_words
from rnnconv.errors import BadInput
from rnnconv.formats import _safetensors
from rnnconv.formats.sources import SOURCE_KEY, recorded_source, source_records
from rnnconv.formats.torch.checkpoint import (
    PickledTensor,
    TensorToSave,
    is_zip_checkpoint,
    patch_zip,
    read_zip,
    storage_class,
    write_zip,
)
from rnnconv.formats.torch.reader import (
    find_rnns,
    flatten_checkpoint,
    is_safetensors,
    load_checkpoint,
    load_state_dict,
    pick,
    require_torch,
)
from rnnconv.formats.torch.wire import CHECKPOINT_SUFFIXES
from rnnconv.formats.writing import each_rnn_lines, literal, stored
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs, write_array
from rnnconv.table.apply import row_for_mode, rows_for
from rnnconv.table.constants import NONLINEARITY_KEY, RNN, TORCH_REVERSE_SUFFIX


def torch_class(spec: RNNSpec) -> str:
    return row_for_mode("torch", spec.mode, reset_after=spec.reset_after)[0].source_class


def state_dict_arrays(rnn: CanonicalRNN, prefix: str = "") -> dict[str, np.ndarray | FileArray]:
    """The nn.LSTM/GRU/RNN state_dict of a canonical RNN, each tensor as the table's writing gives its values
    (bf16 as float32).

    PyTorch stacks gates in cuDNN's order, so a tensor the source holds stacked (a weight space does) is its bytes,
    still in the source file; otherwise the table's assembly builds it.
    """
    spec = rnn.spec
    (row,) = rows_for("torch", torch_class(spec))
    out: dict[str, np.ndarray | FileArray] = {}
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            for role, tensor in stored(rnn, row, layer, direction).items():
                key = prefix + row.tensors[role].format(layer=layer, suffix=TORCH_REVERSE_SUFFIX if direction else "")
                out[key] = tensor.values()
    return out


def constructor(spec: RNNSpec) -> str:
    """The nn module call whose load_state_dict accepts what `write_state_dict` writes."""
    args = [f"input_size={spec.input_size}", f"hidden_size={spec.hidden_size}"]
    if spec.num_layers > 1:
        args.append(f"num_layers={spec.num_layers}")
    if spec.nonlinearity != "tanh":
        args.append(f"nonlinearity='{spec.nonlinearity}'")
    if not spec.bias:
        args.append("bias=False")
    if spec.bidirectional:
        args.append("bidirectional=True")
    if spec.proj_size:
        args.append(f"proj_size={spec.proj_size}")
    if spec.dtype != "float32":
        args.append(f"dtype=torch.{spec.dtype}")
    return f"torch.nn.{torch_class(spec)}({', '.join(args)})"


def loading_code(rnns: list[CanonicalRNN], path: Path) -> str:
    """The Python that loads what `write_state_dict` wrote into its nn modules (and runs the one module)."""
    if path.suffix == ".safetensors":
        lines = [f"from safetensors.torch import load_file\nimport torch\nstate = load_file({literal(path)})"]
    else:
        lines = [f"import torch\nstate = torch.load({literal(path)}, weights_only=True)"]
    if len(rnns) == 1:
        spec = rnns[0].spec
        lines.append(f"rnn = {constructor(spec)}; rnn.load_state_dict(state)")
        lines.append(
            f"y, states = rnn(x)   # x (seq, batch, {spec.input_size}), y (seq, batch, "
            f"{spec.num_directions * spec.output_size})"
        )
        return "\n".join(lines)
    return "\n".join(lines + each_rnn_lines(rnns, constructor, "load_state_dict"))


def write_state_dict(rnns: list[CanonicalRNN], path: Path, dtype: str | None, force: bool = False) -> None:
    """One RNN's state_dict (keys as nn.Module gives them), or several under their names as prefixes, with what
    `records` says of them."""
    if path.suffix != ".safetensors" and path.suffix not in CHECKPOINT_SUFFIXES:
        raise BadInput(f"output {path} must end in .pt, .pth, .bin or .safetensors for a PyTorch state_dict")
    prefixes = {f"{rnn.name}." if len(rnns) > 1 else "": rnn for rnn in rnns}
    arrays: dict[str, tuple[np.ndarray | FileArray, str]] = {}
    for prefix, rnn in prefixes.items():
        want = dtype or rnn.spec.dtype
        for key, value in state_dict_arrays(rnn, prefix).items():
            arrays[key] = (value, want)
    if path.suffix == ".safetensors":
        entries = [
            _safetensors.Entry(key, element_type(d), value.shape, _array_writer(stored_words(value, element_type(d))))
            for key, (value, d) in arrays.items()
        ]
        meta = {"format": "pt", **records({}, {}, prefixes, path)}
        _safetensors.write(path, entries, lambda *_: meta, force)
        return
    tensors = {
        key: TensorToSave(stored_words(value, element_type(d)), storage_class(d)) for key, (value, d) in arrays.items()
    }
    with atomic_outputs([path], force) as (tmp,):
        write_zip(tmp, tensors, records({}, {}, prefixes, path))


def records(
    sources: dict[str, Provenance], nonlinearities: dict[str, str], rnns: dict[str, CanonicalRNN], path: Path
) -> dict[str, str]:
    """What a state_dict rnnconv writes records of its RNNs, by key prefix (safetensors metadata, or members of a zip
    checkpoint): where each came from, for `verify`, and an nn.RNN's nonlinearity, which no tensor stores. `rnns`
    (written to `path`) are recorded over what `sources` and `nonlinearities` record (a patched copy's other RNNs)."""
    sources = {**sources, **{prefix: recorded_source(rnn, path) for prefix, rnn in rnns.items()}}
    nonlinearities = {prefix: name for prefix, name in nonlinearities.items() if prefix not in rnns}
    nonlinearities.update({prefix: rnn.spec.nonlinearity for prefix, rnn in rnns.items() if rnn.spec.cell == RNN})
    recorded = {SOURCE_KEY: source_records(sources)}
    if nonlinearities:
        recorded[NONLINEARITY_KEY] = json.dumps(nonlinearities)
    return recorded


def _tensor(torch: Any, values: np.ndarray | FileArray, dtype: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # views of a read-only blob: torch.save only reads them
        return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)


def _save(torch: Any, checkpoint: Any, path: Path, force: bool) -> None:
    with atomic_outputs([path], force) as (tmp,):
        try:
            torch.save(checkpoint, tmp)
        except RuntimeError as exc:  # torch.save reports a failed write (a full disk) as a RuntimeError
            raise BadInput(f"cannot write {path}: torch.save failed ({str(exc).splitlines()[0][:200]})") from None


def patch_checkpoint(
    rnns: list[CanonicalRNN], places: list[Provenance | None], model: Path, path: Path, force: bool = False
) -> None:
    """A copy of the torch.save checkpoint `model` with each RNN's tensors replaced where `places` says (a prefix,
    or a name `--layer` takes; None: its only RNN). Keys, order, nesting and every other tensor stay as they
    were; a replaced tensor keeps its dtype."""
    if is_safetensors(model):
        raise BadInput(f"--into takes a torch.save checkpoint (.pt, .pth, .bin); {model} is a .safetensors state_dict")
    tensors = load_state_dict(model)
    found = find_rnns(tensors)
    replacements: dict[str, np.ndarray | FileArray] = {}
    replaced: dict[str, CanonicalRNN] = {}  # by key prefix: what the copy records of them replaces the model's record
    for rnn, place in zip(rnns, places):
        where = None if place is None else place.prefix if place.prefix is not None else place.layer
        target = pick(found, where, model)
        replaced[target.prefix] = rnn
        arrays = state_dict_arrays(rnn, target.prefix)
        what = f"{rnn.name} ({rnn.spec.describe()})"
        held = set(target.keys.values())
        extra = sorted(held - set(arrays))
        if extra:
            raise BadInput(f"{model}: {extra[0]} has no counterpart in {what}, so they are not the same RNN")
        for key, value in arrays.items():
            if key not in held:
                raise BadInput(f"{model} has no {key} for {what} to replace")
            if tensors[key].shape != value.shape:
                raise BadInput(f"{model}: {key} has shape {tensors[key].shape}, and {what} gives {value.shape}")
            if key in replacements:
                raise BadInput(f"two RNNs of the source would replace {target.name!r} in {model}")
            replacements[key] = value
    with open(model, "rb") as f:
        if is_zip_checkpoint(model, f.read(4)):  # rnnconv's own reader and writer: no torch
            found_zip = read_zip(model)
            leaves = dict(flatten_checkpoint(found_zip.root, ""))
            every = [leaf for leaf in leaves.values() if isinstance(leaf, PickledTensor)]
            recorded = records(*tensors.recorded(model), replaced, path)
            with atomic_outputs([path], force) as (tmp,):
                patch_zip(
                    found_zip, tmp, [(leaves[key], value) for key, value in replacements.items()], every, recorded
                )
            return
    torch = require_torch(f"{model} is a legacy (pre-zip) torch.save checkpoint: patching it")
    checkpoint = load_checkpoint(torch, model)
    _replace_leaves(checkpoint, replacements, torch)
    if replacements:
        raise BadInput(f"{model}: {next(iter(replacements))} sits in a tuple, where it cannot be replaced")
    _save(torch, checkpoint, path, force)


def _replace_leaves(node: Any, replacements: dict[str, np.ndarray | FileArray], torch: Any, prefix: str = "") -> None:
    """Put each replacement (by the dotted key `flatten_checkpoint` gives) in place of the tensor there, in its
    dtype; each one put is taken out of `replacements`."""
    entries = node.items() if isinstance(node, MutableMapping) else enumerate(node) if isinstance(node, list) else ()
    for key, value in list(entries):
        dotted = f"{prefix}{key}"
        if dotted in replacements:
            node[key] = _tensor(torch, replacements.pop(dotted), value.dtype)
        elif isinstance(value, (MutableMapping, list)):
            _replace_leaves(value, replacements, torch, dotted + ".")


def bin_warning(path: Path) -> list[str]:
    """A PyTorch state_dict named like rnnconv's cuDNN blob: allowed (Hugging Face's pytorch_model.bin), but said."""
    if path.suffix != ".bin":
        return []
    return [
        f"{path} is a PyTorch state_dict with the .bin ending of a cuDNN blob (allowed for pytorch_model.bin "
        f"files); name it .pt if that is not what you meant"
    ]


def _array_writer(words: np.ndarray | FileArray) -> Callable[[BinaryIO], list[str]]:
    return lambda f: write_array(f, words)
