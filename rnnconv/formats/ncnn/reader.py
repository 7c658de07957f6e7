"""An ncnn model read without ncnn: the .param parsed within bounds, every blob's place in the .bin computed and
checked before anything is read, the chains of recurrent layers that are one RNN, and each chain's canonical form
through the table's ncnn rows."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import sources
from rnnconv.formats._graph import Graph, consecutive, named, refuse, same_rnn
from rnnconv.formats.ncnn.wire import (
    ARRAY_KEY,
    INT8_TAG,
    KIND,
    NCNN_DIRECTIONS,
    NCNN_FLAGS,
    NCNN_GEMM,
    NCNN_GEMM_C,
    NCNN_GEMM_CONSTANTS,
    NCNN_GEMM_KEYS,
    NCNN_LAYERS,
    NCNN_MAGIC,
    NCNN_MEMORY,
    NCNN_MEMORY_KEYS,
    NCNN_PARAMS,
    NCNN_SIZED,
    NCNN_WEIGHTLESS,
    QUANTIZED_TABLE,
    RECURRENT,
    SCALED_TAG,
    align,
    bin_of,
    sidecar_of,
)
from rnnconv.formats.reading import Found, StoredCell, read, settle
from rnnconv.safeio.inputs import FileArray, add_guard, regular_file, unchanged
from rnnconv.table.apply import find_row
from rnnconv.table.constants import (
    BIAS,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    LSTM,
    NCNN_BLOBS,
    PROJECTION,
    RECURRENT_BIAS,
    RECURRENT_MATRIX,
)

MAX_PARAM = 16 << 20  # bytes of a .param: far beyond any real model's
MAX_COUNT = 1 << 20  # layers or blobs
MAX_HIDDEN = 1 << 20
ROLES = (INPUT_MATRIX, BIAS, RECURRENT_MATRIX, PROJECTION)  # the blobs of a recurrent layer, in .bin order


def _gates(cell: str) -> int:
    return len(find_row("ncnn", NCNN_LAYERS[cell]).gate_order)


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

    @property
    def width(self) -> int:
        return self.directions * self.output

    @property
    def shown_class(self) -> str:
        return self.type

    @property
    def kind(self) -> object:
        """What the layers of one RNN have alike; None for a layer whose weights are not read."""
        if self.refusal is not None:
            return None
        return self.type, self.output, self.hidden, self.param("direction")


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
            return self._take(Blob(self.pos, 4 + align(2 * values), values, "<f2"), what)
        if tag == INT8_TAG:
            return self._take(Blob(self.pos, 4 + align(values), values, None), what)
        if tag == SCALED_TAG or tag == NCNN_FLAGS["float32"]:
            return self._take(Blob(self.pos, 4 + 4 * values, values, "<f4"), what)
        return self._take(Blob(self.pos, 4 + QUANTIZED_TABLE + align(values), values, None), what)

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
        elif layer.type == NCNN_GEMM:
            unsized = _size_gemm(layer, weights, where)
        elif layer.type not in NCNN_WEIGHTLESS:
            unsized = (
                f"its weights come after {where}, a {layer.type}, whose weights rnnconv cannot size: rnnconv reads "
                f"recurrent layers after {', '.join((*NCNN_SIZED, NCNN_GEMM))}, MemoryData and weightless layers only"
            )


def _size_gemm(layer: Layer, weights: BinReader, where: str) -> str | None:
    """A Gemm's constant A, B and C, sized by its own params as ncnn loads them (each a flagged blob: A of M x K
    values, B of K x N, C of as many as its broadcast type says); the reason a layer after it cannot be read, where
    its weights are quantized."""
    given = {key: layer.param(number) for key, number in NCNN_GEMM_KEYS.items()}
    if given["quantize_term"]:
        return f"its weights come after {where} (Gemm), whose quantized weights rnnconv does not size"
    broadcast = given["constant_broadcast_type_C"]
    if given["constantC"] and broadcast not in (-1, *NCNN_GEMM_C):
        raise BadInput(f"{where}: constant_broadcast_type_C is {broadcast}, not -1 to 4")
    for name, (flag, sized_by) in NCNN_GEMM_CONSTANTS.items():
        if not given[flag] or (flag == "constantC" and broadcast == -1):
            continue
        keys = NCNN_GEMM_C[broadcast] if flag == "constantC" else sized_by
        dims = [given[key] for key in keys]
        if any(size < 1 for size in dims):
            sizes = ", ".join(f"{key}={size}" for key, size in zip(keys, dims, strict=True))
            raise BadInput(f"{where}: its constant {name} has no size ({sizes})")
        weights.load(math.prod(dims), True, f"the constant {name} of {where}")
    return None


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


class NcnnFile(Graph[Layer]):
    """An ncnn model: its recurrent layers, and the chains of them that are one RNN."""

    what = "recurrent layer"

    def __init__(self, path: Path, weights: Path, layers: list[Layer]):
        super().__init__(path, KIND, layers, named(consecutive(layers, _feeds)), _recorded(path))
        self.weights = weights

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
        return cls(path, weights, [layer for layer in layers if layer.type in RECURRENT])

    def nothing_held(self) -> str:
        return f"{self.path} holds no {', '.join(NCNN_LAYERS.values())} layer"


def _recorded(path: Path) -> Provenance | None:
    """The source recorded beside the .param (a .param has no metadata), or None."""
    sidecar = sidecar_of(path)
    if not sidecar.is_file():
        return None
    if regular_file(sidecar) > sources.SOURCE_RECORD_LIMIT:
        raise BadInput(f"{sidecar} is too large to be the source rnnconv recorded")
    return sources.read_source_record(sidecar.read_bytes(), sidecar)


def _feeds(below: Layer, above: Layer) -> bool:
    """Whether `above` is the layer after `below` in one RNN: alike, and reading what `below` gives."""
    return same_rnn(below, above) and above.bottoms[0] == below.tops[0]


def why_refused(layer: Layer) -> str | None:
    if layer.refusal:
        return f"layer {layer.name!r}: {layer.refusal}" if not layer.refusal.startswith("layer") else layer.refusal
    if layer.param("direction") == 1:
        return f"layer {layer.name!r} runs in reverse only (direction=1); cuDNN has no reverse-only RNN"
    if any(b.dtype is None for b in layer.blobs):
        return f"layer {layer.name!r} holds int8 or quantized weights, which cuDNN does not compute with"
    return None


def to_canonical(chain: list[Layer], file: NcnnFile, source: Provenance) -> CanonicalRNN:
    first = chain[0]
    name = ",".join(layer.name for layer in chain)
    refuse(chain, why_refused)
    row = find_row("ncnn", first.type)
    settled = settle(row, {}, name)
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
        name,
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
    rnn.origin = file.recorded
    return rnn
