"""The .param and .bin of a canonical RNN: in0 through one recurrent layer per layer to out0, zero initial states a
feed replaces, each blob tagged; where it came from in a JSON beside them."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.formats import sources, writing
from rnnconv.formats.ncnn.wire import (
    IN,
    NCNN_FLAGS,
    NCNN_INPUT,
    NCNN_MAGIC,
    NCNN_MEMORY,
    NCNN_PARAMS,
    OUT,
    align,
    bin_of,
    sidecar_of,
)
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import row_for_mode
from rnnconv.table.constants import (
    BIAS,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    LSTM,
    PROJECTION,
    RECURRENT_BIAS,
    RECURRENT_MATRIX,
)


@dataclass
class LayerBlobs:
    """A recurrent layer to write: its type, params, and its weight blobs as bytes (tags included)."""

    type: str
    params: dict[int, int]
    blobs: list[bytes]
    cell: str
    output: int
    hidden: int
    directions: int


def _tagged(values: np.ndarray, dtype: str) -> bytes:
    data = np.ascontiguousarray(values, dtype="<f2" if dtype == "float16" else "<f4").tobytes()
    return struct.pack("<I", NCNN_FLAGS[dtype]) + data + b"\0" * (align(len(data)) - len(data))


def layers_of(rnn: CanonicalRNN, dtype: str) -> list[LayerBlobs]:
    spec = rnn.spec
    row, _ = row_for_mode("ncnn", spec.mode, reset_after=spec.reset_after)
    out = []
    for layer in range(spec.num_layers):
        cells = [rnn.stored(row, layer, d) for d in range(spec.num_directions)]
        if spec.cell == GRU and spec.bias:
            biases = [np.concatenate([c[BIAS], c[INPUT_BIAS], c[RECURRENT_BIAS]]) for c in cells]
        elif spec.bias:
            biases = [c[BIAS] for c in cells]
        else:
            biases = [np.zeros((4 if spec.cell == GRU else len(spec.gates)) * spec.hidden_size)] * len(cells)
        blobs = [
            _tagged(np.stack([c[INPUT_MATRIX] for c in cells]), dtype),
            _tagged(np.stack(biases), dtype),
            _tagged(np.stack([c[RECURRENT_MATRIX] for c in cells]), dtype),
        ]
        if spec.proj_size:
            blobs.append(_tagged(np.stack([c[PROJECTION] for c in cells]), dtype))
        params = {
            NCNN_PARAMS["num_output"]: spec.output_size,
            NCNN_PARAMS["weight_data_size"]: spec.num_directions
            * spec.hidden_size
            * len(spec.gates)
            * spec.layer_input_size(layer),
            NCNN_PARAMS["direction"]: 2 if spec.bidirectional else 0,
        }
        if spec.cell == LSTM:
            params[NCNN_PARAMS["hidden_size"]] = spec.hidden_size
        out.append(
            LayerBlobs(
                row.source_class, params, blobs, spec.cell, spec.output_size, spec.hidden_size, spec.num_directions
            )
        )
    return out


def compose(layers: list[LayerBlobs]) -> tuple[str, bytes]:
    """The .param text and .bin bytes of a model: in0 through the layers to out0, zero initial states that a feed
    replaces (MemoryData h0_k, c0_k: raw floats), final states hn_k, cn_k."""
    lines = [f"{NCNN_INPUT} {IN} 0 1 {IN}"]
    data = []
    x, blobs = IN, 1
    for k, layer in enumerate(layers):
        states = [(f"h0_{k}", layer.output)] + ([(f"c0_{k}", layer.hidden)] if layer.cell == LSTM else [])
        for name, width in states:
            lines.append(f"{NCNN_MEMORY} {name} 0 1 {name} 0={width} 1={layer.directions}")
            data.append(np.zeros(width * layer.directions, "<f4").tobytes())
        y = OUT if k == len(layers) - 1 else f"y_{k}"
        finals = [f"hn_{k}"] + ([f"cn_{k}"] if layer.cell == LSTM else [])
        bottoms = [x] + [name for name, _ in states]
        tops = [y, *finals]
        params = " ".join(f"{key}={value}" for key, value in sorted(layer.params.items()))
        lines.append(
            f"{layer.type} {layer.cell}_{k} {len(bottoms)} {len(tops)} {' '.join(bottoms)} {' '.join(tops)} {params}"
        )
        data += layer.blobs
        blobs += len(states) + len(tops)
        x = y
    text = f"{NCNN_MAGIC}\n{len(lines)} {blobs}\n" + "\n".join(lines) + "\n"
    return text, b"".join(data)


def write_ncnn(rnn: CanonicalRNN, path: Path, dtype: str, force: bool) -> list[Path]:
    """model.param, model.bin and, beside them, the source they came from (for `verify model.param`)."""
    writing.weights_free(path, bin_of(path), force)
    text, data = compose(layers_of(rnn, dtype))
    outputs = [path, bin_of(path), sidecar_of(path)]
    with atomic_outputs(outputs, force) as tmps:
        tmps[0].write_text(text)
        tmps[1].write_bytes(data)
        tmps[2].write_text(sources.source_record(rnn, path) + "\n")
    return outputs
