"""Equinox: one `eqx.nn.LSTMCell` or `eqx.nn.GRUCell`, as `eqx.tree_serialise_leaves` writes it.

The file is the cell's array leaves, in its fields' order, each as `np.save` writes it (a .npy: magic, header,
data), one after another: LSTMCell `weight_ih` (4H, in), `weight_hh` (4H, H), `bias` (4H) = bW + bR, gates i, f,
g, o; GRUCell `weight_ih` (3H, in), `weight_hh` (3H, H), `bias` (3H) = bW + bR of r and z and b_in, `bias_n` (H) =
b_hn; `use_bias=False` leaves the biases out. The file holds no tree: what the leaves are is told by their
count and shapes, so a file holds one cell (Equinox has no multi-layer or bidirectional RNN module).

Reading and writing need neither Equinox nor JAX (headers parsed, never unpickled); `run` loads the file with
`eqx.tree_deserialise_leaves` into the cell it describes and steps it in JAX on the CPU.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.dtypes import element_type, encode
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats import _jax, registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio import atomic_outputs, digest_in_background, regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import EQUINOX_CLASSES, EQUINOX_FIELDS, EQUINOX_NAMES, LSTM
from rnnconv.table.formats import FORMAT_INFO
from rnnconv.table.reading import Found, StoredCell, read, settle

KIND = "equinox"
NPY_MAGIC = b"\x93NUMPY"
MAX_BYTES = 1 << 34
MAX_LEAVES = 64
MAX_HEADER = 10_000
LEAF_TYPES = {"<f2": "float16", "<f4": "float32", "<f8": "float64"}  # what the leaves of a cell may be
ROLE_OF_FIELD = {field: role for role, field in EQUINOX_NAMES.items()}


@dataclass
class Leaf:
    dtype: str
    shape: tuple[int, ...]
    offset: int  # of its data in the file


def leaves(data: bytes, what: str) -> list[Leaf]:
    """The .npy leaves of a file, each header parsed as a literal (never unpickled) and its data's size checked."""
    found: list[Leaf] = []
    pos = 0
    view = memoryview(data)
    while pos < len(data):
        if len(found) >= MAX_LEAVES:
            raise BadInput(f"{what} holds more than {MAX_LEAVES} leaves: no Equinox cell has as many")
        if bytes(view[pos : pos + 6]) != NPY_MAGIC or pos + 10 > len(data):
            raise BadInput(f"{what}: leaf {len(found)} at byte {pos} is not a .npy (as np.save writes one)")
        major = data[pos + 6]
        size_bytes = {1: 2, 2: 4, 3: 4}.get(major)
        if size_bytes is None:
            raise BadInput(f"{what}: leaf {len(found)} is a .npy of version {major}, which numpy never wrote")
        start = pos + 8 + size_bytes
        length = int.from_bytes(view[pos + 8 : start], "little")
        if length > MAX_HEADER or start + length > len(data):
            raise BadInput(f"{what}: leaf {len(found)}'s .npy header runs past the file")
        try:
            header = ast.literal_eval(bytes(view[start : start + length]).decode("latin1"))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise BadInput(f"{what}: leaf {len(found)}'s .npy header is not a literal") from None
        if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
            raise BadInput(f"{what}: leaf {len(found)}'s .npy header is not numpy's")
        descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
        if descr not in LEAF_TYPES:
            raise BadInput(
                f"{what}: leaf {len(found)} is of type {descr!r}; an Equinox cell's leaves are "
                f"{', '.join(LEAF_TYPES.values())}"
            )
        if (
            fortran is not False
            or not isinstance(shape, tuple)
            or len(shape) > 2
            or not all(isinstance(n, int) and n >= 0 for n in shape)
        ):
            raise BadInput(f"{what}: leaf {len(found)} has shape {shape!r} (fortran_order={fortran!r})")
        offset = start + length
        pos = offset + math.prod(shape) * np.dtype(descr).itemsize
        if pos > len(data):
            raise BadInput(f"{what}: leaf {len(found)} ({descr} {shape}) runs past the end of the file")
        found.append(Leaf(LEAF_TYPES[descr], shape, offset))
    return found


@dataclass
class EquinoxCell:
    cell: str
    leaves: dict[str, Leaf]  # field -> its leaf
    data: bytes

    @property
    def name(self) -> str:
        return EQUINOX_CLASSES[self.cell]

    def value(self, field: str) -> np.ndarray:
        leaf = self.leaves[field]
        dtype = np.dtype(next(k for k, v in LEAF_TYPES.items() if v == leaf.dtype))
        return np.frombuffer(self.data, dtype, math.prod(leaf.shape), leaf.offset).reshape(leaf.shape)


def load(path: Path) -> EquinoxCell:
    """The one cell of a file: LSTM or GRU, told by the leaves' count and the recurrent weight's shape."""
    if regular_file(path) > MAX_BYTES:
        raise BadInput(f"{path} is larger than rnnconv reads whole ({MAX_BYTES} bytes)")
    data = path.read_bytes()
    found = leaves(data, str(path))
    described = ", ".join(f"{leaf.dtype}{list(leaf.shape)}" for leaf in found)
    if len(found) < 2 or len(found[1].shape) != 2 or found[1].shape[1] < 1:
        raise BadInput(f"{path} holds leaves {described}: no eqx.nn.LSTMCell or GRUCell")
    rows, hidden = found[1].shape
    for cell, fields in EQUINOX_FIELDS.items():
        gates = len(find_row("equinox", EQUINOX_CLASSES[cell]).gate_order)
        if rows == gates * hidden and len(found) in (2, len(fields)):
            return EquinoxCell(cell, dict(zip(fields, found)), data)
    cells = " or ".join(f"{EQUINOX_CLASSES[c]} ({', '.join(fields)})" for c, fields in EQUINOX_FIELDS.items())
    raise BadInput(
        f"{path} holds {len(found)} leaves ({described}): rnnconv reads one eqx.nn.{cells}, or one with "
        f"use_bias=False; a list of cells does not say which is which"
    )


def to_canonical(cell: EquinoxCell, path: Path, source: Provenance, options: ReadOptions | None = None) -> CanonicalRNN:
    options = options or ReadOptions()
    row = find_row("equinox", cell.name)
    settled = settle(row, {}, cell.name)
    dtypes = {leaf.dtype for leaf in cell.leaves.values()}
    if len(dtypes) != 1:
        raise BadInput(f"{path}: its leaves are of types {', '.join(sorted(dtypes))}, not one type")
    shapes = {ROLE_OF_FIELD[field]: leaf.shape for field, leaf in cell.leaves.items()}
    has_bias = len(cell.leaves) > 2
    hidden = cell.leaves[EQUINOX_FIELDS[cell.cell][1]].shape[1]
    n_in = cell.leaves[EQUINOX_FIELDS[cell.cell][0]].shape[-1]

    def stored(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        values = {ROLE_OF_FIELD[field]: field for field in cell.leaves}
        return StoredCell(lambda role: cell.value(values[role]), shapes, row.tensors, f"{cell.name} in {path}")

    found = Found(
        cell.name,
        row,
        settled,
        input_size=n_in,
        hidden=hidden,
        dtype=dtypes.pop(),
        cell=stored,
        layer_class=cell.name,
        has_bias=has_bias,
        without_bias="use_bias=False",
        bias_split=options.bias_split,
        handover={"origin": _jax.recorded_source(path)},
    )
    return read(found, source)


# --- writing ----------------------------------------------------------------------------------------------------


def losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What one Equinox cell cannot hold: several layers, two directions, a simple RNN, a projection."""
    spec = rnn.spec
    found = _jax.projection_losses(rnn, "Equinox")
    if spec.num_layers > 1 or spec.bidirectional:
        found.append(registry.Loss(
            f"Equinox has no multi-layer or bidirectional RNN (an .eqx holds one cell), and this RNN has "
            f"{spec.num_layers} layer{'s' * (spec.num_layers > 1)} and {spec.num_directions} "
            f"direction{'s' * spec.bidirectional}"
        ))  # fmt: skip
    if _jax.family(spec) not in EQUINOX_CLASSES:
        found.append(registry.Loss("Equinox has no simple RNN cell (eqx.nn has LSTMCell and GRUCell)"))
    return found


def leaves_of(rnn: CanonicalRNN, dtype: str) -> list[np.ndarray]:
    spec = rnn.spec
    if refused := losses(rnn):
        raise Unsupported(f"{rnn.name}: {refused[0].term}")
    family = _jax.family(spec)
    if dtype not in LEAF_TYPES.values():
        raise BadInput(
            f"an .eqx leaf is a .npy, which has no {dtype}: choose --dtype {' or '.join(LEAF_TYPES.values())}"
        )
    row = find_row("equinox", EQUINOX_CLASSES[family])
    stored = rnn.stored(row, 0, 0)
    fields = EQUINOX_FIELDS[family] if spec.bias else EQUINOX_FIELDS[family][:2]
    etype = element_type(dtype)
    return [np.ascontiguousarray(encode(stored[ROLE_OF_FIELD[f]], etype)) for f in fields]


def npy_bytes(values: np.ndarray) -> bytes:
    """What np.save writes for an array."""
    out = io.BytesIO()
    np.lib.format.write_array(out, values, allow_pickle=False)
    return out.getvalue()


def module_code(spec: RNNSpec) -> str:
    cls = EQUINOX_CLASSES[_jax.family(spec)]
    bias = "" if spec.bias else ", use_bias=False"
    return f"eqx.nn.{cls}({spec.input_size}, {spec.hidden_size}{bias}, key=jax.random.key(0))"


def write(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
    rnn = _jax.one_rnn(rnns, "Equinox")
    dtype = _jax.written_dtype(rnn, options.dtype)
    data = b"".join(npy_bytes(leaf) for leaf in leaves_of(rnn, dtype))
    beside = _jax.sidecar(path)
    with atomic_outputs([path, beside], options.force) as (tmp, tmp_beside):
        tmp_beside.write_text(_jax.sidecar_text(rnn, path))
        tmp.write_bytes(data)
    return Written(
        [path, beside],
        usage=f"{_jax.ON_THE_CPU}import equinox as eqx, jax\n"
        f"cell = eqx.tree_deserialise_leaves({registry.literal(path)}, "
        f"{module_code(rnn.spec)})   # {dtype}; one step: "
        + ("h, c = cell(x_t, (h, c))" if rnn.spec.cell == LSTM else "h = cell(x_t, h)")
        + f", x_t ({rnn.spec.input_size},)",
    )


# --- running in Equinox -----------------------------------------------------------------------------------------


def run_file(path: Path, cell: EquinoxCell, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]) -> Any:
    """y, h_n, c_n of the file's cell, loaded by eqx.tree_deserialise_leaves and stepped by jax.lax.scan over the
    sequence, vmapped over the batch (float32, CPU); a sequence past its length keeps its state."""
    jax = _jax.require_jax("equinox")
    try:
        import equinox as eqx
    except ImportError:
        raise BackendMissing(
            "running Equinox needs equinox, which is not installed (pip install 'rnnconv[equinox]')"
        ) from None
    import jax.numpy as jnp

    x, h0, c0, lengths = _jax.sequence_inputs(spec, inputs)
    with jax.default_device(jax.devices("cpu")[0]):
        like = getattr(eqx.nn, cell.name)(spec.input_size, spec.hidden_size, use_bias=spec.bias, key=jax.random.key(0))
        loaded = eqx.tree_deserialise_leaves(path, like)
        loaded = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), loaded)
        lstm = spec.mode == LSTM

        def step(state: Any, inputs_t: Any) -> Any:
            x_t, t = inputs_t
            new = jax.vmap(loaded)(x_t, state)
            live = (t < lengths)[:, None]
            kept = jax.tree_util.tree_map(lambda n, o: jnp.where(live, n, o), new, state)
            out = (kept[0] if lstm else kept) * live
            return kept, out

        state = (h0[0], c0[0]) if lstm else h0[0]
        final, y = jax.lax.scan(step, state, (x, jnp.arange(x.shape[0])))
    h_n = np.asarray(final[0] if lstm else final)[None]
    c_n = np.asarray(final[1])[None] if lstm else None
    return {"y": np.asarray(y), "h_n": h_n, "c_n": c_n}


class EquinoxEngine(registry.RuntimeEngine):
    """The blob as the .eqx rnnconv writes, loaded by eqx.tree_deserialise_leaves and run in JAX (CPU)."""

    name = "equinox"
    format_name = "equinox"
    suffix = ".eqx"

    detail = "an Equinox cell in JAX (CPU) running the blob, float32"
    modules = (("jax", "jax"), ("equinox", "equinox"))


# --- the format -------------------------------------------------------------------------------------------------


@register
class EquinoxFormat(Format):
    info = FORMAT_INFO["equinox"]
    engine = EquinoxEngine  # verify --backend equinox
    runtimes = (registry.Runtime("equinox", EquinoxEngine.modules, "Equinox cells, one step at a time"),)

    def sniff(self, probe: Probe) -> bool:
        return probe.head.startswith(NPY_MAGIC)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        cell = load(path)
        if options.layer is not None and options.layer != cell.name:
            raise BadInput(f"{path} holds one {cell.name}, not {options.layer!r}")
        info = Provenance(path=str(path.resolve()), format=KIND)
        digest = digest_in_background(path) if options.hash_source else None
        try:
            rnn = to_canonical(cell, path, info, options)
        except Unsupported as exc:
            raise Unsupported(f"the {cell.name} in {path} cannot be converted: {exc}") from None
        rnn.digest = digest
        yield Source([rnn])

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        return write(rnns, path, options)

    def inspect(self, path: Path) -> InspectReport:
        cell = load(path)
        read = functools.partial(to_canonical, cell, path, Provenance(path=str(path)))
        return InspectReport(path=str(path), format=KIND, rnns=[registry.inspect_entry(cell.name, cell.name, read)])

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        return recorded.model_copy(update={"layer": load(path).name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file loaded by eqx.tree_deserialise_leaves into its cell, stepped in JAX on the CPU."""
        cell = load(path)
        _jax.check_same(to_canonical(cell, path, source).spec, spec, cell.name, path)
        ran = EquinoxEngine().versions()
        how = f"jax {ran['jax']}, equinox {ran['equinox']}: eqx.nn.{cell.name} loaded from the file"
        return run_file(path, cell, spec, inputs), how
