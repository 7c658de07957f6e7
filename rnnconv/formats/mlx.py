"""MLX: the weights of `mlx.nn.LSTM`, `mlx.nn.GRU` and `mlx.nn.RNN`, as `Module.save_weights` writes them.

A file is a `.safetensors` of parameters named as MLX's modules name them (`Wx`, `Wh`, `bias`; the GRU's `b` and
`bhn`; the RNN's `Wxh`, `Whh`, `bias`), under any prefix (`encoder.lstm.Wx`). MLX has one class per cell and one
layer and direction per module; rnnconv writes several layers as a list `layers` of them (`layers.0.Wx`, ...,
each feeding the next) and two directions as pairs (`layers.0.0.Wx` forward, `layers.0.1.Wx` backward, run on the
sequence reversed), the `Stack` of docs/formats/mlx.md, and reads such modules back as one RNN. MLX has no LSTM
projection: it is refused. MLX before 0.18 stored `Wx` and `Wh` transposed ((in, G*H)); such a file is refused.

Reading and writing need no MLX; `run` (verify) and the `mlx` engine run the modules in MLX on the CPU.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import math
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.compare import Inputs, Outputs
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.dtypes import BY_SAFETENSORS, ElementType, decode, element_type, encode, source_dtype_name
from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, first_line, no_such_rnn, several_rnns
from rnnconv.formats import _safetensors, registry
from rnnconv.formats._zip import check_member, open_archive, read_member, stored_start
from rnnconv.formats.registry import ZIP_MAGIC, Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import FileArray, digest_in_background, regular_file, write_array
from rnnconv.table.apply import find_row, row_for_mode
from rnnconv.table.constants import (
    BIAS,
    GRU,
    INPUT_BIAS,
    INPUT_MATRIX,
    LSTM,
    MLX_CLASSES,
    MLX_PARAMETERS,
    MLX_ROWS_SINCE,
    MLX_STACK,
    NONLINEARITIES,
    NONLINEARITY_KEY,
    RECURRENT_BIAS,
    RECURRENT_MATRIX,
    RNN,
)
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.reading import Found, Settled, StoredCell, nonlinearity_note, read, settle, settle_nonlinearity

KIND, NPZ_KIND = "mlx-safetensors", "mlx-npz"
NPY = ".npy"
WRITABLE = ("float32", "float16", "bfloat16")  # MLX loads float64 weights as float32
STACKED = re.compile(rf"^(.*?){MLX_STACK}\.(\d+)\.(?:(\d+)\.)?$")  # layers.{k}. or, two directions, layers.{k}.{d}.
SINCE = ".".join(map(str, MLX_ROWS_SINCE[:2]))


def _gates(cell: str) -> int:
    return len(find_row("mlx", MLX_CLASSES[cell]).gate_order)


# --- reading ----------------------------------------------------------------------------------------------


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


@dataclass
class Chain:
    """One RNN of the file: its layers, each one module or (two directions) a forward and a backward one."""

    name: str
    layers: list[list[Module]]

    @property
    def modules(self) -> list[Module]:
        return [m for layer in self.layers for m in layer]

    @property
    def first(self) -> Module:
        return self.layers[0][0]

    @property
    def directions(self) -> int:
        return len(self.layers[0])


@dataclass
class MlxFile:
    path: Path
    modules: list[Module]
    chains: list[Chain]
    metadata: dict[str, str] = field(default_factory=dict)
    kind: str = KIND

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
        return cls(path, modules, _chains(modules), metadata, NPZ_KIND if zipped else KIND)

    def choose(self, layer: str | None, take_all: bool) -> list[Chain]:
        if layer is not None:
            for chain in self.chains:
                if chain.name == layer:
                    return [chain]
            for module in self.modules:
                if module.name == layer:
                    return [Chain(module.name, [[module]])]
            known = [c.name for c in self.chains] + [m.name for m in self.modules]
            raise no_such_rnn(f"{self.path} has no MLX recurrent module", layer, list(dict.fromkeys(known)))
        if not self.modules:
            raise BadInput(
                f"{self.path} holds no mlx.nn LSTM, GRU or RNN weights (parameters named "
                f"{', '.join(sorted({n for p in MLX_PARAMETERS.values() for n in p.values()}))})"
            )
        if len(self.chains) == 1 or take_all:
            return self.chains
        listing = ", ".join(c.name for c in self.chains)
        raise several_rnns(self.path, f"holds {len(self.chains)} RNNs ({listing})")


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
    with open_archive(path, "NumPy .npz archive") as archive:
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
    try:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = (
            np.lib.format.read_array_header_1_0(f) if version == (1, 0) else np.lib.format.read_array_header_2_0(f)
        )
    except (ValueError, SyntaxError, TypeError, OSError):
        raise BadInput(f"{path}: array {key!r} is not a readable .npy") from None
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise BadInput(f"{path}: array {key!r} has a malformed shape")
    floats = not dtype.hasobject and dtype.kind == "f" and dtype.byteorder != ">"
    return (dtype if floats else None), tuple(shape), bool(fortran), f.tell()


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
            module.refusal = f"{where} holds {', '.join(sorted(extra))} beside mlx.nn.{MLX_CLASSES[cell]}'s parameters"
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


def _chains(modules: list[Module]) -> list[Chain]:
    """Each module alone, except rnnconv's stacks: `layers.{k}.` modules (or `layers.{k}.0.` and `layers.{k}.1.`,
    two directions) of one class, from layers.0 on, each fed the previous one's outputs."""
    stacks: dict[str, dict[int, dict[int, Module]]] = {}
    for module in modules:
        found = STACKED.match(module.prefix)
        if found:
            direction = int(found.group(3)) if found.group(3) is not None else -1
            stacks.setdefault(found.group(1), {}).setdefault(int(found.group(2)), {})[direction] = module
    taken: set[str] = set()
    chains: list[Chain] = []
    for base, by_layer in stacks.items():

        def layer(k: int, by_layer: dict[int, dict[int, Module]] = by_layer) -> list[Module] | None:
            found = by_layer.get(k, {})
            if set(found) == {-1}:
                return [found[-1]]
            return [found[0], found[1]] if set(found) == {0, 1} else None

        first = layer(0)
        if first is None or not _same_stack(first, first) or first[-1].input_size != first[0].input_size:
            continue
        layers = [first]
        while (after := layer(len(layers))) is not None and _same_stack(layers[-1], after):
            layers.append(after)
        if len(layers) > 1 or len(first) > 1:
            chains.append(Chain(f"{base}{MLX_STACK}", layers))
            taken |= {m.prefix for pair in layers for m in pair}
    return chains + [Chain(m.name, [[m]]) for m in modules if m.prefix not in taken]


def recorded_source(metadata: dict[str, str], path: Path) -> Provenance | None:
    """The source a file rnnconv wrote records, or None."""
    text = metadata.get(registry.SOURCE_KEY)
    return None if text is None else registry.read_source_record(text, path)


def to_canonical(chain: Chain, source: Provenance, nonlinearity: str | None, file: MlxFile) -> CanonicalRNN:
    first = chain.first
    for module in chain.modules:
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
        module = chain.layers[layer][direction]
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
        num_layers=len(chain.layers),
        bidirectional=chain.directions == 2,
        has_bias=first.has_bias,
        without_bias=f"mlx.nn.{MLX_CLASSES[first.cell]}(bias=False)",
        provenance={"stacked": [m.name for m in chain.modules] if len(chain.modules) > 1 else None},
        notes=nonlinearity_note(name, settled, row, "the file") if first.cell == RNN else [],
    )
    rnn = read(found, source)
    rnn.origin = recorded_source(file.metadata, file.path)
    return rnn


# --- writing ----------------------------------------------------------------------------------------------


def mlx_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What mlx.nn's modules cannot compute of `rnn`: an LSTM's projection."""
    if not rnn.spec.proj_size:
        return []
    return [registry.Loss(f"mlx.nn.LSTM has no projection (h = W_hr h', proj_size={rnn.spec.proj_size})")]


def check_writable(rnn: CanonicalRNN, dtype: str) -> None:
    if losses := mlx_losses(rnn):
        raise Unsupported(f"{rnn.name}: {losses[0].term}")
    if dtype not in WRITABLE:
        raise Unsupported(f"MLX loads {dtype} weights as float32; write {', '.join(WRITABLE)}")


def tensors_of(rnn: CanonicalRNN, dtype: str) -> dict[str, np.ndarray]:
    """The parameters of the modules, by key (bare for one layer, `layers.{k}.` for several), as storage words."""
    spec = rnn.spec
    row, _ = row_for_mode("mlx", spec.mode)
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
    check_writable(rnn, dtype)
    etype = element_type(dtype)
    entries = [
        _safetensors.Entry(key, etype, value.shape, functools.partial(write_array, array=value))
        for key, value in tensors_of(rnn, dtype).items()
    ]
    meta = {registry.SOURCE_KEY: registry.source_record(rnn, path)}  # where the RNN came from, for `verify FILE`
    if rnn.spec.cell == RNN:
        meta[NONLINEARITY_KEY] = nonlinearity_of(rnn.spec)
    _safetensors.write(path, entries, lambda _: meta, force)


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


# --- running ----------------------------------------------------------------------------------------------


def require_mlx() -> Any:
    try:
        import mlx.core as mx
        from mlx import nn
    except ImportError:
        raise BackendMissing(
            "running MLX needs the mlx package, which is not installed (pip install 'rnnconv[mlx]'; on Linux it "
            "comes with mlx-cpu)"
        ) from None
    return mx, nn


def run_modules(path: Path, chain: Chain, mode: str, inputs: Inputs) -> Outputs:
    """The file's modules, loaded by MLX's own load_weights into mlx.nn modules, run on the CPU layer after layer
    (a backward module on the sequence reversed, its outputs reversed back); sequence-major in and out, as cuDNN's."""
    mx, nn = require_mlx()
    if inputs.get("lengths") is not None and len(set(np.asarray(inputs["lengths"]).tolist())) > 1:
        raise Unsupported("mlx.nn's RNNs take no sequence lengths: verify MLX without --ragged")
    mx.set_default_device(mx.cpu)
    weights = mx.load(str(path))
    x = mx.array(np.ascontiguousarray(np.asarray(inputs["x"], np.float32).transpose(1, 0, 2)))  # (B, T, I)
    hs: list[np.ndarray] = []
    cs: list[np.ndarray] = []
    for pair in chain.layers:
        outputs = []
        for direction, module in enumerate(pair):
            index = len(hs)
            kwargs: dict[str, Any] = {"bias": module.has_bias}
            if module.cell == RNN:
                kwargs["nonlinearity"] = nn.relu if mode == NONLINEARITIES["relu"] else nn.tanh
            layer = getattr(nn, MLX_CLASSES[module.cell])(module.input_size, module.hidden, **kwargs)
            own = [
                (k[len(module.prefix) :], v.astype(mx.float32))
                for k, v in weights.items()
                if k.startswith(module.prefix)
            ]
            layer.load_weights([(k, v) for k, v in own if "." not in k])
            seq = x[:, ::-1] if direction else x
            h0 = mx.array(np.asarray(inputs["h0"][index], np.float32))
            if module.cell == LSTM:
                c0 = mx.array(np.asarray(inputs["c0"][index], np.float32))
                y, c = layer(seq, hidden=h0, cell=c0)
                cs.append(np.array(c[:, -1, :]))
            else:
                y = layer(seq, hidden=h0)
            hs.append(np.array(y[:, -1, :]))
            outputs.append(y[:, ::-1] if direction else y)
        x = mx.concatenate(outputs, axis=-1)
    return {"y": np.array(x).transpose(1, 0, 2), "h_n": np.stack(hs), "c_n": np.stack(cs) if cs else None}


class MlxEngine(registry.RuntimeEngine):
    """The blob as the .safetensors rnnconv writes, loaded into mlx.nn's own modules (CPU)."""

    name = "mlx"
    format_name = "mlx"
    suffix = ".mlx.safetensors"

    detail = "MLX (CPU) running the blob as mlx.nn modules, float32"
    modules = (("mlx", "mlx.core"),)


@register
class MlxFormat(Format):
    info = FORMAT_INFO["mlx"]
    sniff_order = 30  # a safetensors of MLX's parameter names: after rnnconv's own, before PyTorch's state_dicts
    engine = MlxEngine  # verify --backend mlx
    runtimes = (registry.Runtime("mlx", MlxEngine.modules, "MLX files' own modules"),)

    def sniff(self, probe: Probe) -> bool:
        names = probe.zip_names
        npz = names is not None and bool(names) and all(n.endswith(NPY) for n in names)
        if probe.safetensors_metadata is None and not npz:
            return False
        try:
            file = MlxFile.load(probe.path)
        except RnnconvError:
            return False
        return bool(file.modules)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = MlxFile.load(path)
        info = Provenance(path=str(path.resolve()), format=file.kind)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains,
            lambda chain: to_canonical(chain, info, options.nonlinearity, file),
            lambda chain: chain.name,
            digest,
        )
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return mlx_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = registry.only_rnn(rnns, "an MLX file")
        spec = rnn.spec
        dtype = options.dtype or (spec.dtype if spec.dtype in WRITABLE else WRITABLE[0])
        warnings = []
        if dtype != spec.dtype and options.dtype is None:
            warnings.append(f"{rnn.name}: written as {dtype}, what MLX computes with, from the source's {spec.dtype}")
        write_mlx(rnn, path, dtype, options.force)
        usage = "import mlx.core as mx, mlx.nn as nn\nmx.set_default_device(mx.cpu)   # as verify runs it\n"
        usage += f"model = {constructor(spec)}; model.load_weights({registry.literal(path)})"
        if spec.num_layers == 1 and not spec.bidirectional:
            outputs = "y, c" if spec.cell == LSTM else "y"
            usage += f"\n{outputs} = model(x)   # x (batch, time, {spec.input_size}), y (batch, time, "
            usage += f"{spec.hidden_size})"
        elif spec.num_layers > 1 and not spec.bidirectional:
            usage += "   # Stack: the README's module, a list `layers` each feeding the next"
        elif spec.bidirectional:
            usage += "   # Stack: the README's module, [forward, backward] modules"
        return Written([path], warnings, usage)

    def inspect(self, path: Path) -> InspectReport:
        file = MlxFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                chain.name,
                MLX_CLASSES[chain.first.cell],
                functools.partial(to_canonical, chain, provenance, None, file),
            )
            for chain in [c for c in file.chains if len(c.modules) > 1] + [Chain(m.name, [[m]]) for m in file.modules]
        ]
        notes = [
            f"modules {', '.join(m.name for m in c.modules)} are the layers and directions of one RNN"
            for c in file.chains
            if len(c.modules) > 1
        ]
        return InspectReport(path=str(path), format=file.kind, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format in self.info.kinds:
            return recorded
        file = MlxFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": chain.name, "format": file.kind})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own modules in MLX (CPU)."""
        file = MlxFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        for module in chain.modules:
            if module.refusal:
                raise Unsupported(module.refusal)
        shape = (chain.first.input_size, len(chain.layers), chain.directions)
        if shape != (spec.input_size, spec.num_layers, spec.num_directions):
            raise BadInput(f"the MLX modules {source.layer} are not the RNN the blob describes ({spec.describe()})")
        mx, _ = require_mlx()
        try:
            out = run_modules(path, chain, spec.mode, inputs)
        except (ValueError, RuntimeError) as exc:
            raise BadInput(f"MLX cannot run {path}: {first_line(exc)}") from None
        return out, f"mlx {mx.__version__} (CPU): the file's mlx.nn.{MLX_CLASSES[chain.first.cell]} module(s)"
