"""MLX weights read without MLX: a .safetensors or an .npz (each member checked), its mlx.nn modules found by their
parameter names and shapes, the stacks of them that are one RNN, and each one's canonical form through the table's
MLX rows."""

from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.core.dtypes import BY_SAFETENSORS, ElementType, decode, element_type, source_dtype_name
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats import _safetensors, sources
from rnnconv.formats._graph import Chain, Graph, stacked
from rnnconv.formats._npy import npy_header
from rnnconv.formats._zip import check_member, crc_guard, open_archive, read_member, stored_start
from rnnconv.formats.mlx.wire import KIND, MLX_CLASSES, MLX_STACK, NPY, NPZ_KIND, SINCE, STACKED
from rnnconv.formats.probe import ZIP_MAGIC
from rnnconv.formats.reading import (
    Found,
    Settled,
    StoredCell,
    held_grid,
    nonlinearity_note,
    read,
    settle,
    settle_nonlinearity,
)
from rnnconv.safeio.inputs import FileArray, add_guard, regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import (
    BIAS,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    LSTM,
    MLX_PARAMETERS,
    NONLINEARITY_KEY,
    RECURRENT_MATRIX,
    RNN,
)


def _gates(cell: str) -> int:
    return len(find_row("mlx", MLX_CLASSES[cell]).gate_order)


@dataclass
class Tensor:
    words: FileArray | np.ndarray
    etype: ElementType

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.words.shape)

    def values(self) -> np.ndarray:
        return decode(np.asarray(self.words), self.etype)


@dataclass
class Module:
    """One mlx.nn recurrent module of the file: its prefix, cell, sizes and tensors (by MLX's name)."""

    prefix: str  # "" or "encoder.lstm."
    cell: str
    tensors: dict[str, Tensor]
    refusal: str | None = None

    @property
    def name(self) -> str:
        return self.prefix.rstrip(".") or MLX_CLASSES[self.cell]

    @property
    def names(self) -> dict[str, str]:
        return MLX_PARAMETERS[self.cell]

    @property
    def hidden(self) -> int:
        return self.tensors[self.names[RECURRENT_MATRIX]].shape[-1]

    @property
    def input_size(self) -> int:
        return self.tensors[self.names[INPUT_MATRIX]].shape[-1]

    @property
    def has_bias(self) -> bool:
        return self.names[BIAS] in self.tensors

    @property
    def dtype(self) -> str:
        return self.tensors[self.names[INPUT_MATRIX]].etype.name

    @property
    def width(self) -> int:
        return self.hidden

    @property
    def kind(self) -> object:
        """What the modules of one RNN have alike; None for a module that is refused."""
        return None if self.refusal is not None else (self.cell, self.hidden, self.has_bias, self.dtype)

    @property
    def shown_class(self) -> str:
        return MLX_CLASSES[self.cell]


@dataclass
class MlxChain(Chain[Module]):
    """One RNN of the file: its modules, layer after layer, each layer one module or (two directions) a forward and
    a backward one."""

    directions: int = 1

    @property
    def pairs(self) -> list[list[Module]]:
        """Its layers, each its modules by direction."""
        return [self.layers[k : k + self.directions] for k in range(0, len(self.layers), self.directions)]


class MlxFile(Graph[Module]):
    """An MLX weights file: its mlx.nn modules, and the stacks of them that are one RNN."""

    what = "MLX recurrent module"

    def __init__(self, path: Path, modules: list[Module], metadata: dict[str, str], kind: str):
        super().__init__(path, kind, modules, _chains(modules), None)  # the source it records is read with an RNN
        self.metadata = metadata

    def alone(self, layer: Module) -> MlxChain:
        return MlxChain(layer.name, [layer])

    def nothing_held(self) -> str:
        names = ", ".join(sorted({n for p in MLX_PARAMETERS.values() for n in p.values()}))
        return f"{self.path} holds no mlx.nn LSTM, GRU or RNN weights (parameters named {names})"

    @classmethod
    def load(cls, path: Path) -> MlxFile:
        """A .safetensors (Module.save_weights, what rnnconv writes) or a .npz (mx.savez, save_weights to .npz)."""
        with open(path, "rb") as f:
            zipped = f.read(4) == ZIP_MAGIC
        if not zipped and path.suffix.lower() == ".npz":
            raise BadInput(f"{path} is not an .npz (a zip archive of .npy arrays, as mx.savez writes one)")
        tensors, metadata = _npz_tensors(path) if zipped else _safetensors_tensors(path)
        groups: dict[str, dict[str, Tensor]] = {}
        for key, tensor in tensors.items():
            prefix, _, name = key.rpartition(".")
            groups.setdefault(f"{prefix}." if prefix else "", {})[name] = tensor
        modules = [m for prefix, found in sorted(groups.items()) if (m := _module(prefix, found)) is not None]
        return cls(path, modules, metadata, NPZ_KIND if zipped else KIND)


def _safetensors_tensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    header, start = _safetensors.read_header(path)
    tensors = {}
    for key, info in header.items():
        if key != "__metadata__" and info["dtype"] in BY_SAFETENSORS:  # integer tensors: no RNN's
            words, etype = _safetensors.tensor_words(path, header, start, key)
            tensors[key] = Tensor(words, etype)
    return tensors, dict(header.get("__metadata__") or {})


def _npz_tensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The float arrays of an .npz (names without .npy), each member checked before it is read; stored C-order
    members stay in the file. An .npz has no metadata."""
    size = regular_file(path)
    tensors = {}
    with open_archive(path) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(NPY):
                continue
            check_member(path, info, size, "numpy.savez")
            key = info.filename[: -len(NPY)]
            if info.compress_type == zipfile.ZIP_STORED:
                start = stored_start(path, info, size)
                with open(path, "rb") as f:
                    f.seek(start)
                    dtype, shape, fortran, end = _npy_header(f, path, key)
                header = end - start
                if dtype is None:
                    continue
                if header + math.prod(shape) * dtype.itemsize > info.file_size:
                    raise BadInput(f"{path}: array {key!r} claims more bytes than its member holds")
                if not fortran:
                    add_guard(crc_guard(path, info, start))
                    tensors[key] = Tensor(FileArray(path, start + header, dtype, shape), _etype(dtype))
                    continue
            data = read_member(archive, info.filename, path)
            dtype, shape, fortran, header = _npy_header(io.BytesIO(data), path, key)
            if dtype is None:
                continue
            if header + math.prod(shape) * dtype.itemsize > len(data):
                raise BadInput(f"{path}: array {key!r} claims more bytes than its member holds")
            values = np.frombuffer(data, dtype, math.prod(shape), header).reshape(shape, order="F" if fortran else "C")
            tensors[key] = Tensor(np.ascontiguousarray(values), _etype(dtype))
    return tensors, {}


def _npy_header(f: Any, path: Path, key: str) -> tuple[np.dtype | None, tuple[int, ...], bool, int]:
    """A .npy's dtype (None: not a float type), shape, Fortran order and where its header ends, parsed without
    pickle."""
    dtype, shape, fortran, end = npy_header(f, f"{path}: array {cut(key)!r}")
    floats = not dtype.hasobject and dtype.kind == "f" and dtype.byteorder != ">"
    return (dtype if floats else None), shape, fortran, end


def _etype(dtype: np.dtype) -> ElementType:
    return element_type(source_dtype_name(dtype))


def _module(prefix: str, tensors: dict[str, Tensor]) -> Module | None:
    """The recurrent module whose parameters these are, or None when they are no mlx.nn LSTM, GRU or RNN."""
    for cell in (LSTM, GRU, RNN):
        names = MLX_PARAMETERS[cell]
        if not {names[INPUT_MATRIX], names[RECURRENT_MATRIX]} <= set(tensors):
            continue
        w, r = tensors[names[INPUT_MATRIX]].shape, tensors[names[RECURRENT_MATRIX]].shape
        gates = _gates(cell)
        if len(w) != 2 or len(r) != 2:
            continue
        where = prefix.rstrip(".") or "the file"
        if cell != RNN and r[0] != gates * r[1]:
            if r[1] == 4 * r[0] or r[1] == 3 * r[0]:  # (H, G*H): MLX before 0.18
                module = Module(prefix, LSTM if r[1] == 4 * r[0] else GRU, dict(tensors))
                module.refusal = (
                    f"{where}: {names[RECURRENT_MATRIX]} has shape {r}, (H, G*H): MLX before {SINCE} wrote its "
                    f"matrices transposed; transpose {names[INPUT_MATRIX]} and {names[RECURRENT_MATRIX]} to "
                    f"(G*H, in) and (G*H, H), as MLX {SINCE} and later store them"
                )
                return module
            if cell == LSTM:
                continue  # perhaps a GRU
        if cell != RNN and r[0] != gates * r[1]:
            continue
        extra = set(tensors) - set(names.values())
        module = Module(prefix, cell, dict(tensors))
        if extra:
            module.refusal = (
                f"{cut(where)} holds {listing(sorted(extra))} beside mlx.nn.{MLX_CLASSES[cell]}'s parameters"
            )
        biases = [n for role, n in names.items() if role not in (INPUT_MATRIX, RECURRENT_MATRIX)]
        present = [n for n in biases if n in tensors]
        if present and len(present) != len(biases):
            raise BadInput(f"{where}: mlx.nn.{MLX_CLASSES[cell]} with bias has {' and '.join(biases)}; only {present}")
        return module
    return None


def _same_stack(below: list[Module], above: list[Module]) -> bool:
    """Whether `above` is the layer after `below` in one RNN: same class, sizes, biases and type, fed its outputs."""
    first = below[0]
    alike = all(
        m.refusal is None
        and m.cell == first.cell
        and m.hidden == first.hidden
        and m.has_bias == first.has_bias
        and m.dtype == first.dtype
        for m in below + above
    )
    fed = len(below) * first.hidden
    return alike and len(above) == len(below) and (above is below or all(m.input_size == fed for m in above))


def _chains(modules: list[Module]) -> list[Chain[Module]]:
    """Each module alone, except rnnconv's stacks: `layers.{k}.` modules (or `layers.{k}.0.` and `layers.{k}.1.`,
    two directions) of one class, from layers.0 on, each fed the previous one's outputs."""

    def placed(module: Module) -> tuple[str, int, int | None] | None:
        found = STACKED.match(module.prefix)
        if found is None:
            return None
        return found.group(1), int(found.group(2)), None if found.group(3) is None else int(found.group(3))

    def first(layer: list[Module]) -> bool:
        return _same_stack(layer, layer) and layer[-1].input_size == layer[0].input_size

    chains: list[Chain[Module]] = []
    refused = set()
    sides: dict[str, dict[tuple[int, int], Module]] = {}
    for module in modules:
        place = placed(module)
        if place is not None and place[2] is not None:
            sides.setdefault(place[0], {})[place[1], place[2]] = module
    for base, by_place in sides.items():
        if not any(
            d for _, d in by_place
        ):  # layers.{k}.1. somewhere: a bidirectional stack, whose every layer has both
            continue
        try:
            held_grid(f"the MLX stack {base}{MLX_STACK}", set(by_place), 2)
        except BadInput as exc:  # one RNN, refused whole: never its layers or directions read apart
            stack = [by_place[p] for p in sorted(by_place)]
            for module in stack:
                module.refusal = module.refusal or str(exc)
            chains.append(MlxChain(f"{base}{MLX_STACK}", stack, 2))
            refused |= {m.prefix for m in stack}
    for base, layers in stacked([m for m in modules if m.prefix not in refused], placed, first, _same_stack):
        chains.append(MlxChain(f"{base}{MLX_STACK}", [m for layer in layers for m in layer], len(layers[0])))
    taken = {m.prefix for chain in chains for m in chain.layers}
    return chains + [MlxChain(m.name, [m]) for m in modules if m.prefix not in taken]


def recorded_source(metadata: dict[str, str], path: Path) -> Provenance | None:
    """The source a file rnnconv wrote records, or None."""
    text = metadata.get(sources.SOURCE_KEY)
    return None if text is None else sources.read_source_record(text, path)


def to_canonical(chain: MlxChain, source: Provenance, nonlinearity: str | None, file: MlxFile) -> CanonicalRNN:
    first = chain.first
    for module in chain.layers:
        if module.refusal:
            raise Unsupported(module.refusal)
    name = chain.name
    row = find_row("mlx", MLX_CLASSES[first.cell])
    settled: Settled
    if first.cell == RNN:
        stated = nonlinearity or file.metadata.get(NONLINEARITY_KEY)
        settled = settle_nonlinearity(row, stated, name, f"unknown nonlinearity {stated!r}")
    else:
        settled = settle(row, {}, name)
    hidden = first.hidden

    def cell_of(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        module = chain.pairs[layer][direction]
        names = module.names
        stored: dict[str, Tensor] = {role: module.tensors[n] for role, n in names.items() if n in module.tensors}
        fetch: dict[str, Any] = {role: t.values for role, t in stored.items()}
        shapes = {role: t.shape for role, t in stored.items()}
        if first.cell == GRU and module.has_bias:
            b = stored[BIAS]
            if b.shape != (3 * hidden,):
                raise BadInput(
                    f"{module.name}: {names[BIAS]} has shape {b.shape}; a GRU of {hidden} needs {3 * hidden}"
                )
            fetch[BIAS] = lambda: b.values()[: 2 * hidden]
            fetch[INPUT_BIAS] = lambda: b.values()[2 * hidden :]
            shapes[BIAS], shapes[INPUT_BIAS] = (2 * hidden,), (hidden,)
        return StoredCell(lambda role: fetch[role](), shapes, row.tensors, f"module {module.name!r}")

    found = Found(
        name,
        row,
        settled,
        input_size=first.input_size,
        hidden=hidden,
        dtype=first.dtype,
        cell=cell_of,
        layer_class=MLX_CLASSES[first.cell],
        num_layers=len(chain.pairs),
        bidirectional=chain.directions == 2,
        has_bias=first.has_bias,
        without_bias=f"mlx.nn.{MLX_CLASSES[first.cell]}(bias=False)",
        provenance={"stacked": [m.name for m in chain.layers] if len(chain.layers) > 1 else None},
        notes=nonlinearity_note(name, settled, row, "the file") if first.cell == RNN else [],
    )
    rnn = read(found, source)
    rnn.origin = recorded_source(file.metadata, file.path)
    return rnn
