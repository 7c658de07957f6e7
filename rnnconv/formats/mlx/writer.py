"""The .safetensors of a canonical RNN: the parameters of mlx.nn's modules (one layer bare, several as a list
`layers`), with where it came from in the metadata, and the module call that loads it."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.dtypes import element_type, encode
from rnnconv.formats import _safetensors, sources
from rnnconv.formats.mlx.wire import MLX_CLASSES, MLX_STACK
from rnnconv.safeio.outputs import write_array
from rnnconv.table.apply import row_for_mode
from rnnconv.table.constants import (
    BIAS,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    MLX_PARAMETERS,
    NONLINEARITIES,
    NONLINEARITY_KEY,
    RECURRENT_BIAS,
    RECURRENT_MATRIX,
    RNN,
)


def tensors_of(rnn: CanonicalRNN, dtype: str) -> dict[str, np.ndarray]:
    """The parameters of the modules, by key (bare for one layer, `layers.{k}.` for several), as storage words."""
    spec = rnn.spec
    row, _ = row_for_mode("mlx", spec.mode, reset_after=spec.reset_after)
    names = MLX_PARAMETERS[spec.cell]
    etype = element_type(dtype)
    out: dict[str, np.ndarray] = {}
    for layer, direction in itertools.product(range(spec.num_layers), range(spec.num_directions)):
        prefix = ""
        if spec.num_layers > 1 or spec.bidirectional:
            prefix = f"{MLX_STACK}.{layer}." + (f"{direction}." if spec.bidirectional else "")
        stored = rnn.stored(row, layer, direction)
        values = {names[INPUT_MATRIX]: stored[INPUT_MATRIX], names[RECURRENT_MATRIX]: stored[RECURRENT_MATRIX]}
        if spec.bias and spec.cell == GRU:
            values[names[BIAS]] = np.concatenate([stored[BIAS], stored[INPUT_BIAS]])
            values[names[RECURRENT_BIAS]] = stored[RECURRENT_BIAS]
        elif spec.bias:
            values[names[BIAS]] = stored[BIAS]
        for key, value in values.items():
            out[prefix + key] = np.ascontiguousarray(encode(value, etype))
    return out


def nonlinearity_of(spec: RNNSpec) -> str:
    return {mode: name for name, mode in NONLINEARITIES.items()}.get(spec.mode, "tanh")


def write_mlx(rnn: CanonicalRNN, path: Path, dtype: str, force: bool) -> None:
    etype = element_type(dtype)
    entries = [
        _safetensors.Entry(key, etype, value.shape, functools.partial(write_array, array=value))
        for key, value in tensors_of(rnn, dtype).items()
    ]
    meta = {sources.SOURCE_KEY: sources.source_record(rnn, path)}  # where the RNN came from, for `verify FILE`
    if rnn.spec.cell == RNN:
        meta[NONLINEARITY_KEY] = nonlinearity_of(rnn.spec)
    _safetensors.write(path, entries, lambda *_: meta, force)


def constructor(spec: RNNSpec) -> str:
    """The mlx.nn module call (or list of them) whose load_weights takes what `write_mlx` writes."""
    args = [f"{spec.input_size}", f"{spec.hidden_size}"]
    if not spec.bias:
        args.append("bias=False")
    if spec.cell == RNN and nonlinearity_of(spec) != "tanh":
        args.append(f"nonlinearity=nn.{nonlinearity_of(spec)}")
    one = f"nn.{MLX_CLASSES[spec.cell]}({', '.join(args)})"
    if spec.num_layers == 1 and not spec.bidirectional:
        return one
    later = one.replace(f"({spec.input_size}, ", f"({spec.num_directions * spec.hidden_size}, ", 1)
    if spec.bidirectional:
        one, later = f"[{one}, {one}]", f"[{later}, {later}]"
    if spec.num_layers == 1:
        return f"Stack([{one}])"
    return f"Stack([{one}] + [{later} for _ in range({spec.num_layers - 1})])"
