"""ncnn: the LSTM, GRU and RNN layers of an ncnn model (`model.param`, text, with `model.bin` beside it).

A `.param` lists layers (`type name bottoms tops k=v ...`); the `.bin` holds each layer's weights in that order,
every weight blob after a 4-byte tag (0: float32; float16 and int8 tags too). ncnn's recurrent layers store
`weight_xc [D][G*H][in]`, `bias_c [D][G][H]` (one bias per gate, the GRU's new gate two: b_in and b_hn),
`weight_hc [D][G*H][out]` and, for an LSTM whose `hidden_size` exceeds `num_output`, the projection
`weight_hr [D][P][H]`. Gates: LSTM I, F, O, G; GRU R, U, N (reset after the recurrent matrix); RNN tanh only.

Read without ncnn: the `.param` parsed within bounds, every blob's place computed and checked against the `.bin`
before anything is read; layers before a recurrent one must be of a kind whose weights rnnconv can size. A chain
of recurrent layers, each feeding the next, is one multi-layer RNN. Written models are `in0` (T, I) into one
layer per layer, `out0` out, each layer's initial states a zero `MemoryData` (h0_k, c0_k) that a feed replaces, and
its final states hn_k, cn_k. ncnn runs one sequence at a time: `run` feeds each batch item alone. The source a
written model came from is recorded in `model.param.rnnconv.json`, beside it.
"""

from __future__ import annotations

import contextlib
import functools
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.compare import Inputs, Outputs
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.errors import BackendMissing, BadInput, Unsupported, no_such_rnn, several_rnns
from rnnconv.formats import registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import FileArray, add_guard, atomic_outputs, digest_in_background, regular_file, unchanged
from rnnconv.table.apply import find_row, row_for_mode
from rnnconv.table.constants import (
    BIAS,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    LSTM,
    NCNN_BLOBS,
    NCNN_DIRECTIONS,
    NCNN_FLAGS,
    NCNN_INPUT,
    NCNN_LAYERS,
    NCNN_MAGIC,
    NCNN_MEMORY,
    NCNN_MEMORY_KEYS,
    NCNN_PARAMS,
    NCNN_SIDECAR,
    NCNN_SIZED,
    NCNN_WEIGHTLESS,
    PROJECTION,
    RECURRENT_BIAS,
    RECURRENT_MATRIX,
)
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.reading import Found, StoredCell, read, settle

KIND = "ncnn-param"
MAX_PARAM = 16 << 20  # bytes of a .param: far beyond any real model's
MAX_COUNT = 1 << 20  # layers or blobs
MAX_HIDDEN = 1 << 20
ARRAY_KEY = -23300  # keys at or below it hold arrays (-23300 - id = n,v1,v2,...)
INT8_TAG, SCALED_TAG = 0x000D4B38, 0x0002C056  # int8 data; float32 with extra scaling (read as float32)
QUANTIZED_TABLE = 256 * 4
RECURRENT = {layer: cell for cell, layer in NCNN_LAYERS.items()}
ROLES = (INPUT_MATRIX, BIAS, RECURRENT_MATRIX, PROJECTION)  # the blobs of a recurrent layer, in .bin order
IN, OUT = "in0", "out0"
# ncnn's options that store or compute in 16 bits where the CPU can (fp16 on ARM): off, for float32 throughout
NARROW_OPTIONS = ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage")
WRITABLE = ("float32", "float16")


def _align(n: int) -> int:
    return (n + 3) // 4 * 4


def _gates(cell: str) -> int:
    return len(find_row("ncnn", NCNN_LAYERS[cell]).gate_order)


def sidecar_of(param: Path) -> Path:
    return param.with_name(param.name + NCNN_SIDECAR)


def bin_of(param: Path) -> Path:
    return param.with_suffix(".bin")


# --- reading ----------------------------------------------------------------------------------------------


@dataclass
class Blob:
    """A weight blob in the .bin: where its values start, how many, and their numpy type (raw bytes for copying)."""

    offset: int  # of the tag (or of the data, for a blob without one)
    size: int  # bytes from `offset`, tag and padding included
    values: int
    dtype: str | None  # '<f4', '<f2'; None: int8 or quantized, which rnnconv does not read
    tagged: bool = True

    def array(self, path: Path, shape: tuple[int, ...]) -> FileArray:
        if self.dtype is None:
            raise Unsupported("its weights are int8 or quantized, which cuDNN does not compute with")
        return FileArray(path, self.offset + (4 if self.tagged else 0), np.dtype(self.dtype), shape)


@dataclass
class Layer:
    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, Any]
    blobs: list[Blob] = field(default_factory=list)
    refusal: str | None = None

    def param(self, key: str | int, default: int = 0) -> int:
        value = self.params.get(NCNN_PARAMS[key] if isinstance(key, str) else key, default)
        if not isinstance(value, int):
            raise BadInput(f"layer {self.name!r}: param {key} is {value!r}, not an integer")
        return value

    @property
    def cell(self) -> str:
        return RECURRENT[self.type]

    @property
    def directions(self) -> int:
        return 2 if self.param("direction") == 2 else 1

    @property
    def output(self) -> int:
        return self.param("num_output")

    @property
    def hidden(self) -> int:
        return self.param("hidden_size", self.output) if self.cell == LSTM else self.output

    @property
    def input_size(self) -> int:
        return self.param("weight_data_size") // (self.directions * _gates(self.cell) * self.hidden)


def _value(text: str, where: str) -> Any:
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not a number") from None


def _params(tokens: list[str], where: str) -> dict[int, Any]:
    params: dict[int, Any] = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep:
            raise BadInput(f"{where}: {token!r} is no key=value")
        k = _value(key, where)
        if not isinstance(k, int):
            raise BadInput(f"{where}: key {key!r} is not an integer")
        if k <= ARRAY_KEY:
            values = value.split(",")
            params[ARRAY_KEY - k] = [_value(v, where) for v in values[1:]]
        else:
            params[k] = _value(value, where)
    return params


def parse_param(path: Path) -> list[Layer]:
    """The layers of a text .param, their counts checked against its header."""
    size = regular_file(path)
    if size > MAX_PARAM:
        raise BadInput(f"{path} is {size} bytes, more than any ncnn .param ({MAX_PARAM})")
    try:
        lines = path.read_bytes().decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not a text ncnn .param (a binary .param.bin is not read)") from None
    words = [line.split() for line in lines if line.strip()]
    if not words or words[0] != [str(NCNN_MAGIC)]:
        raise BadInput(f"{path} is not an ncnn .param (its first line is not {NCNN_MAGIC})")
    if len(words) < 2 or len(words[1]) != 2 or not all(w.isdigit() for w in words[1]):
        raise BadInput(f"{path}: the second line must be the layer and blob counts")
    layer_count, blob_count = map(int, words[1])
    if layer_count > MAX_COUNT or blob_count > MAX_COUNT or layer_count != len(words) - 2:
        raise BadInput(f"{path} says it holds {layer_count} layers, but lists {len(words) - 2}")
    layers, blobs = [], set()
    for number, tokens in enumerate(words[2:], start=3):
        where = f"{path}, line {number}"
        if len(tokens) < 4 or not tokens[2].isdigit() or not tokens[3].isdigit():
            raise BadInput(f"{where}: not a layer (type name bottom_count top_count ...)")
        nb, nt = int(tokens[2]), int(tokens[3])
        if 4 + nb + nt > len(tokens):
            raise BadInput(f"{where}: {nb} bottoms and {nt} tops are not all listed")
        tops = tokens[4 + nb : 4 + nb + nt]
        blobs |= set(tops)
        params = _params(tokens[4 + nb + nt :], where)
        layers.append(Layer(tokens[0], tokens[1], tokens[4 : 4 + nb], tops, params))
    if len(blobs) > blob_count:
        raise BadInput(f"{path} says it holds {blob_count} blobs, but its layers make {len(blobs)}")
    return layers


class BinReader:
    """Walks the .bin as ncnn's ModelBin would, sizing each load and checking it lies inside the file."""

    def __init__(self, path: Path):
        self.path = path
        self.size = regular_file(path, "the ncnn weights")
        self.pos = 0

    def load(self, values: int, tagged: bool, what: str) -> Blob:
        if values < 0 or values > self.size:
            raise BadInput(f"{self.path}: {what} would hold {values} values, more than the file")
        if not tagged:
            return self._take(Blob(self.pos, 4 * values, values, "<f4", False), what)
        if self.pos + 4 > self.size:
            raise BadInput(f"{self.path} ends before {what} (truncated)")
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            raw = f.read(4)
        (tag,) = struct.unpack("<I", raw)
        if tag == NCNN_FLAGS["float16"]:
            return self._take(Blob(self.pos, 4 + _align(2 * values), values, "<f2"), what)
        if tag == INT8_TAG:
            return self._take(Blob(self.pos, 4 + _align(values), values, None), what)
        if tag == SCALED_TAG or tag == NCNN_FLAGS["float32"]:
            return self._take(Blob(self.pos, 4 + 4 * values, values, "<f4"), what)
        return self._take(Blob(self.pos, 4 + QUANTIZED_TABLE + _align(values), values, None), what)

    def _take(self, blob: Blob, what: str) -> Blob:
        if blob.offset + blob.size > self.size:
            raise BadInput(f"{self.path} ends inside {what} (truncated, or the .param does not belong to it)")
        self.pos += blob.size
        return blob


def _size_layers(layers: list[Layer], weights: BinReader) -> None:
    """Each layer's blobs in the .bin, up to the last recurrent layer; a recurrent layer after a layer whose
    weights rnnconv cannot size gets the reason."""
    unsized = None
    last = max((i for i, layer in enumerate(layers) if layer.type in RECURRENT), default=-1)
    for layer in layers[: last + 1]:
        if unsized is not None:
            if layer.type in RECURRENT:
                layer.refusal = unsized
            continue
        where = f"layer {layer.name!r}"
        if layer.type in RECURRENT:
            _check_recurrent(layer)
            g, h, dirs = _gates(layer.cell), layer.hidden, layer.directions
            counts = [layer.param("weight_data_size"), dirs * (4 if layer.cell == GRU else g) * h]
            counts.append(dirs * g * h * layer.output)
            if layer.cell == LSTM and layer.output != h:
                counts.append(dirs * layer.output * h)
            layer.blobs = [
                weights.load(n, True, f"the {NCNN_BLOBS[role]} of {where}") for n, role in zip(counts, ROLES)
            ]
            if layer.param("int8_scale_term"):
                layer.refusal = f"{where} holds int8 weights, which cuDNN does not compute with"
                for _ in range(2):
                    weights.load(dirs * g * h, False, f"the int8 scales of {where}")
        elif layer.type == NCNN_MEMORY:
            w, h, d, c, load_type = (layer.param(k, 1 if k == NCNN_MEMORY_KEYS[-1] else 0) for k in NCNN_MEMORY_KEYS)
            count = max(w, 1) * max(h, 1) * max(d, 1) * max(c, 1) if w else 0
            if count:
                weights.load(count, load_type == 0, f"the data of {where}")
        elif layer.type in NCNN_SIZED:
            output, bias, size, int8 = (layer.param(k) for k in NCNN_SIZED[layer.type])
            if int8:
                unsized = f"its weights come after {where} ({layer.type}), whose int8 weights rnnconv does not size"
                continue
            weights.load(size, True, f"the weights of {where}")
            if bias:
                weights.load(output, False, f"the bias of {where}")
        elif layer.type not in NCNN_WEIGHTLESS:
            unsized = (
                f"its weights come after {where}, a {layer.type}, whose weights rnnconv cannot size: rnnconv reads "
                f"recurrent layers after {', '.join(NCNN_SIZED)}, MemoryData and weightless layers only"
            )


def _check_recurrent(layer: Layer) -> None:
    where = f"layer {layer.name!r}"
    out, hidden, direction = layer.output, layer.hidden, layer.param("direction")
    if not 1 <= out <= MAX_HIDDEN or not 1 <= hidden <= MAX_HIDDEN:
        raise BadInput(f"{where}: num_output {out} and hidden size {hidden} must be from 1 to {MAX_HIDDEN}")
    if direction not in NCNN_DIRECTIONS:
        raise BadInput(f"{where}: direction {direction} is not {', '.join(map(str, NCNN_DIRECTIONS))}")
    size = layer.param("weight_data_size")
    rows = layer.directions * _gates(layer.cell) * hidden
    if size < rows or size % rows:
        raise BadInput(f"{where}: weight_data_size {size} is no multiple of {rows} (directions x gates x hidden)")
    if len(layer.bottoms) < 1 or len(layer.tops) < 1:
        raise BadInput(f"{where} has no input or no output")


@dataclass
class NcnnFile:
    path: Path
    weights: Path
    layers: list[Layer]
    chains: list[list[Layer]]
    origin: Provenance | None

    @classmethod
    def load(cls, path: Path, source: bool = False) -> NcnnFile:
        """The file's recurrent layers, their blobs sized and checked; as a conversion's `source`, its .bin is
        guarded: one that changes while it is read commits nothing."""
        layers = parse_param(path)
        weights = bin_of(path)
        reader = BinReader(weights)
        if source:
            add_guard(unchanged(weights))
        _size_layers(layers, reader)
        recurrent = [layer for layer in layers if layer.type in RECURRENT]
        return cls(path, weights, recurrent, _chains(recurrent), _recorded(path))

    def choose(self, layer: str | None, take_all: bool) -> list[list[Layer]]:
        if layer is not None:
            for chain in self.chains:
                if _name(chain) == layer:
                    return [chain]
            for found in self.layers:
                if found.name == layer:
                    return [[found]]
            known = [_name(c) for c in self.chains if len(c) > 1] + [x.name for x in self.layers]
            raise no_such_rnn(f"{self.path} has no recurrent layer or chain", layer, known)
        if not self.layers:
            raise BadInput(f"{self.path} holds no {', '.join(NCNN_LAYERS.values())} layer")
        if len(self.chains) == 1 or take_all:
            return self.chains
        raise several_rnns(self.path, f"holds {len(self.chains)} RNNs ({', '.join(_name(c) for c in self.chains)})")


def _recorded(path: Path) -> Provenance | None:
    """The source recorded beside the .param (a .param has no metadata), or None."""
    sidecar = sidecar_of(path)
    if not sidecar.is_file():
        return None
    if regular_file(sidecar) > registry.SOURCE_RECORD_LIMIT:
        raise BadInput(f"{sidecar} is too large to be the source rnnconv recorded")
    return registry.read_source_record(sidecar.read_bytes(), sidecar)


def _name(chain: list[Layer]) -> str:
    return ",".join(layer.name for layer in chain)


def _same_rnn(below: Layer, above: Layer) -> bool:
    return (
        below.type == above.type
        and below.output == above.output
        and below.hidden == above.hidden
        and below.param("direction") == above.param("direction")
        and above.bottoms[0] == below.tops[0]
        and above.input_size == below.directions * below.output
    )


def _chains(layers: list[Layer]) -> list[list[Layer]]:
    chains: list[list[Layer]] = []
    for layer in layers:
        if chains and _same_rnn(chains[-1][-1], layer) and chains[-1][-1].refusal is None and layer.refusal is None:
            chains[-1].append(layer)
        else:
            chains.append([layer])
    return chains


def _refusal(layer: Layer) -> str | None:
    if layer.refusal:
        return f"layer {layer.name!r}: {layer.refusal}" if not layer.refusal.startswith("layer") else layer.refusal
    if layer.param("direction") == 1:
        return f"layer {layer.name!r} runs in reverse only (direction=1); cuDNN has no reverse-only RNN"
    if any(b.dtype is None for b in layer.blobs):
        return f"layer {layer.name!r} holds int8 or quantized weights, which cuDNN does not compute with"
    return None


def to_canonical(chain: list[Layer], file: NcnnFile, source: Provenance) -> CanonicalRNN:
    first = chain[0]
    for layer in chain:
        reason = _refusal(layer)
        if reason:
            raise Unsupported(reason)
    row = find_row("ncnn", first.type)
    settled = settle(row, {}, _name(chain))
    hidden, out, dirs = first.hidden, first.output, first.directions
    dtypes = {b.dtype for layer in chain for b in layer.blobs}
    dtype = "float16" if dtypes == {"<f2"} else "float32"

    def cell_of(index: int, d: int, spec: RNNSpec) -> StoredCell:
        layer = chain[index]
        width = spec.layer_input_size(index)
        g = _gates(layer.cell)
        bias_rows = 4 if layer.cell == GRU else g
        shapes = {
            INPUT_MATRIX: (dirs, g * hidden, width),
            BIAS: (dirs, bias_rows * hidden),
            RECURRENT_MATRIX: (dirs, g * hidden, out),
            PROJECTION: (dirs, out, hidden),
        }
        arrays = {role: blob.array(file.weights, shapes[role]) for role, blob in zip(ROLES, layer.blobs)}

        def fetch(role: str) -> np.ndarray:
            if role in (INPUT_BIAS, RECURRENT_BIAS) or (role == BIAS and layer.cell == GRU):
                bias = np.asarray(arrays[BIAS][d], np.float32)
                span = {BIAS: slice(0, 2 * hidden), INPUT_BIAS: slice(2 * hidden, 3 * hidden)}
                return bias[span.get(role, slice(3 * hidden, 4 * hidden))]
            return np.asarray(arrays[role][d], np.float32)

        stored = {role: shape[1:] for role, shape in shapes.items() if role in arrays}
        if layer.cell == GRU:
            stored.update({BIAS: (2 * hidden,), INPUT_BIAS: (hidden,), RECURRENT_BIAS: (hidden,)})
        return StoredCell(fetch, stored, row.tensors, f"layer {layer.name!r}")

    found = Found(
        _name(chain),
        row,
        settled,
        input_size=first.input_size,
        hidden=hidden,
        dtype=dtype,
        cell=cell_of,
        layer_class=first.type,
        num_layers=len(chain),
        bidirectional=dirs == 2,
        proj=out if out != hidden else 0,
        provenance={"stacked": [x.name for x in chain] if len(chain) > 1 else None},
    )
    rnn = read(found, source)
    rnn.origin = file.origin
    return rnn


# --- writing ----------------------------------------------------------------------------------------------


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
    return struct.pack("<I", NCNN_FLAGS[dtype]) + data + b"\0" * (_align(len(data)) - len(data))


def ncnn_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What ncnn's layers cannot compute of `rnn`: a simple RNN's relu."""
    try:
        row_for_mode("ncnn", rnn.spec.mode)
    except Unsupported:
        return [registry.Loss(f"ncnn's RNN layer computes tanh only, not the source's {rnn.spec.mode}")]
    return []


def layers_of(rnn: CanonicalRNN, dtype: str) -> list[LayerBlobs]:
    spec = rnn.spec
    if dtype not in WRITABLE:
        raise Unsupported(f"ncnn stores {' or '.join(WRITABLE)} weights, not {dtype}")
    if losses := ncnn_losses(rnn):
        raise Unsupported(f"{rnn.name}: {losses[0].term}")
    row, _ = row_for_mode("ncnn", spec.mode)
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
    registry.weights_free(path, bin_of(path), force)
    text, data = compose(layers_of(rnn, dtype))
    outputs = [path, bin_of(path), sidecar_of(path)]
    with atomic_outputs(outputs, force) as tmps:
        tmps[0].write_text(text)
        tmps[1].write_bytes(data)
        tmps[2].write_text(registry.source_record(rnn, path) + "\n")
    return outputs


# --- running ----------------------------------------------------------------------------------------------


def require_ncnn() -> Any:
    try:
        import ncnn
    except ImportError:
        raise BackendMissing(
            "running ncnn needs its Python wheel, which is not installed (pip install 'rnnconv[ncnn]')"
        ) from None
    return ncnn


def source_layers(file: NcnnFile, chain: list[Layer]) -> list[LayerBlobs]:
    """The chain's layers as the file holds them: their params and their weight blobs' bytes, untouched."""
    out = []
    with open(file.weights, "rb") as f:
        for layer in chain:
            blobs = []
            for blob in layer.blobs:
                f.seek(blob.offset)
                blobs.append(f.read(blob.size))
            params = {k: v for k, v in layer.params.items() if k in NCNN_PARAMS.values() and isinstance(v, int)}
            out.append(LayerBlobs(layer.type, params, blobs, layer.cell, layer.output, layer.hidden, layer.directions))
    return out


def run_model(layers: list[LayerBlobs], inputs: Inputs) -> Outputs:
    """The layers in ncnn (CPU, float32), one batch item at a time (each within its length); sequence-major
    outputs as cuDNN's, zeros past each sequence's length."""
    ncnn = require_ncnn()
    text, data = compose(layers)
    x = np.asarray(inputs["x"], np.float32)
    steps, batch = x.shape[:2]
    lengths = inputs.get("lengths")
    dirs = layers[0].directions
    y = np.zeros((steps, batch, dirs * layers[-1].output), np.float32)
    h_n = np.zeros((len(layers) * dirs, batch, layers[0].output), np.float32)
    lstm = layers[0].cell == LSTM
    c_n = np.zeros((len(layers) * dirs, batch, layers[0].hidden), np.float32) if lstm else None
    with tempfile.TemporaryDirectory(prefix="rnnconv-ncnn-") as folder:
        param, weights = Path(folder) / "model.param", Path(folder) / "model.bin"
        param.write_text(text)
        weights.write_bytes(data)
        net = ncnn.Net()
        net.opt.use_vulkan_compute = False
        for option in NARROW_OPTIONS:
            setattr(net.opt, option, False)
        if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
            raise BadInput("ncnn cannot load these layers")
        for b in range(batch):
            n = steps if lengths is None else int(lengths[b])
            ex = net.create_extractor()
            # ncnn.Mat wraps the array's memory without a copy: the arrays live as long as the extractor
            fed = {IN: np.ascontiguousarray(x[:n, b])}
            for k in range(len(layers)):
                pseudo = slice(k * dirs, (k + 1) * dirs)
                fed[f"h0_{k}"] = np.ascontiguousarray(inputs["h0"][pseudo, b], np.float32)
                if lstm:
                    fed[f"c0_{k}"] = np.ascontiguousarray(inputs["c0"][pseudo, b], np.float32)
            mats = {name: ncnn.Mat(array) for name, array in fed.items()}
            for name, mat in mats.items():
                ex.input(name, mat)
            y[:n, b] = _extract(ex, OUT)
            for k in range(len(layers)):
                h_n[k * dirs : (k + 1) * dirs, b] = _extract(ex, f"hn_{k}")
                if c_n is not None:
                    c_n[k * dirs : (k + 1) * dirs, b] = _extract(ex, f"cn_{k}")
    return {"y": y, "h_n": h_n, "c_n": c_n}


def _extract(ex: Any, name: str) -> np.ndarray:
    code, mat = ex.extract(name)
    if code != 0:
        raise BadInput(f"ncnn could not compute {name} (error {code})")
    return np.array(mat)


class NcnnEngine(registry.RuntimeEngine):
    """The blob as the model.param and model.bin rnnconv writes, run by ncnn's own kernels (CPU)."""

    name = "ncnn"
    format_name = "ncnn"
    suffix = ".param"

    detail = "ncnn (CPU) running the blob as ncnn layers, one sequence at a time"
    modules = (("ncnn", "ncnn"),)


@register
class NcnnFormat(Format):
    info = FORMAT_INFO["ncnn"]
    sniff_order = 20  # a text file beginning with ncnn's magic number

    engine = NcnnEngine  # verify --backend ncnn
    runtimes = (registry.Runtime("ncnn", NcnnEngine.modules, "ncnn models' own layers"),)

    def sniff(self, probe: Probe) -> bool:
        return probe.head.split(b"\n", 1)[0].strip() == str(NCNN_MAGIC).encode()

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = NcnnFile.load(path, source=True)
        info = Provenance(path=str(path.resolve()), format=KIND)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(chains, lambda chain: to_canonical(chain, file, info), _name, digest)
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return ncnn_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = registry.only_rnn(rnns, "an ncnn model")
        spec = rnn.spec
        dtype = options.dtype or ("float16" if spec.dtype == "float16" else "float32")
        outputs = write_ncnn(rnn, path, dtype, options.force)
        states = f"h0_0 ({spec.num_directions}, {spec.output_size})" + (
            f", c0_0 ({spec.num_directions}, {spec.hidden_size})" if spec.cell == LSTM else ""
        )
        # float32 throughout, as `run_model` runs it: ncnn stores and computes in fp16 where the CPU can
        usage = (
            "import ncnn\nnet = ncnn.Net()\n"
            + " = ".join(f"net.opt.{option}" for option in NARROW_OPTIONS)
            + " = False\n"
            f"net.load_param({registry.literal(path)}); net.load_model({registry.literal(bin_of(path))})\n"
            f'ex = net.create_extractor(); ex.input("{IN}", ncnn.Mat(x)); code, y = ex.extract("{OUT}")'
            f"   # x (T, {spec.input_size}) float32, one sequence; y (T, {spec.num_directions * spec.output_size}); "
            f"optional inputs {states}, h0_1, ... for each layer"
        )
        return Written(outputs, usage=usage)

    def inspect(self, path: Path) -> InspectReport:
        file = NcnnFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                _name(chain), chain[0].type, functools.partial(to_canonical, chain, file, provenance)
            )
            for chain in registry.inspected_groups(file.layers, file.chains)
        ]
        notes = [f"layers {_name(c)} are the layers of one RNN" for c in file.chains if len(c) > 1]
        return InspectReport(path=str(path), format=KIND, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        file = NcnnFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": _name(chain), "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own layers, their params and weight bytes as stored, in ncnn, one sequence at a time."""
        file = NcnnFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        for layer in chain:
            reason = _refusal(layer)
            if reason:
                raise Unsupported(reason)
        if (chain[0].input_size, len(chain), chain[0].directions) != (
            spec.input_size,
            spec.num_layers,
            spec.num_directions,
        ):
            raise BadInput(f"the ncnn layers {source.layer} are not the RNN the blob describes ({spec.describe()})")
        ncnn = require_ncnn()
        how = f"ncnn {ncnn.__version__} (CPU): the file's own {chain[0].type} layer(s), one sequence at a time"
        return run_model(source_layers(file, chain), inputs), how
