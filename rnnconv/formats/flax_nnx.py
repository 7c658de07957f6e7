"""flax.nnx: the parameters of `nnx.RNN(cell)` modules, as the pure dict of `nnx.state(model, nnx.Param)` packed by
`flax.serialization.msgpack_serialize` (what Flax's guide saves without Orbax).

An RNN in the dict is a cell's params (LSTMCell: `ii, if_, ig, io` kernels (in, H), `hi, hf, hg, ho` kernels (H, H)
with biases; OptimizedLSTMCell: `dense_i` (in, 4H), `dense_h` (H, 4H) with the bias; GRUCell: `dense_i` (in, 3H)
with the bias, `dense_h` (H, 3H) without one; SimpleCell: as GRUCell with one gate), under `cell` (`nnx.RNN`), under
`forward_rnn` and `backward_rnn` (`nnx.Bidirectional`), and under `layers` 0, 1, ... (`nnx.Sequential`), at any
depth. nnx's GRUCell has no b_hn (the bias inside the reset product): a GRU whose b_hn is non-zero is refused.

Reading and writing need neither Flax nor JAX (`_msgpack`); `run` loads the file into the same nnx modules with
`nnx.replace_by_pure_dict` and runs them in JAX on the CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats import _jax, _msgpack, registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, convert_each, register
from rnnconv.safeio import atomic_outputs, digest_in_background, regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import (
    CUDNN_GATES,
    DIRECTION_WORDS,
    FLAX_CELL,
    FLAX_DIRECTIONS,
    FLAX_NNX_CELLS,
    FLAX_NNX_CLASSES,
    FLAX_NNX_LAYERS,
    GRU,
    LSTM,
    RNN,
    Kind,
)
from rnnconv.table.formats import FORMAT_INFO

KIND = "flax-nnx-msgpack"
MAX_BYTES = 1 << 34
RNGS = "rngs"  # nnx.RNN's own random-number state: no weights


def recognise(node: Mapping[str, Any]) -> tuple[str, str] | None:
    """(cell family, class) of a cell's params. GRUCell and SimpleCell hold the same params: their recurrent
    kernel (H, G*H) tells them apart."""
    for layer_class, params in FLAX_NNX_CELLS.items():
        if not _jax.holds(node, params):
            continue
        row = find_row("flax-nnx", layer_class)
        shared = sum(other is params for other in FLAX_NNX_CELLS.values()) > 1
        if not shared:
            return row.cell, layer_class
        with contextlib.suppress(BadInput):
            rows, columns = _jax.joined_shapes(node, params, layer_class)["recurrent_matrix"]
            if columns == row.gates * rows:
                return row.cell, layer_class
    return None


def layers(node: Mapping[str, Any]) -> list[Any] | None:
    """nnx.Sequential's layers ({"layers": {0: ..., 1: ...}}), in order, or None."""
    if set(node) != {FLAX_NNX_LAYERS} or not isinstance(node[FLAX_NNX_LAYERS], Mapping):
        return None
    stack = node[FLAX_NNX_LAYERS]
    numbers = {int(k) if isinstance(k, str) and k.isdigit() else k: v for k, v in stack.items()}
    if set(numbers) != set(range(len(stack))) or not stack:
        return None
    return [numbers[k] for k in range(len(stack))]


def without_rngs(node: Any) -> Any:
    """The tree without nnx's rngs entries (random-number state, which a full nnx.state holds beside params)."""
    if not isinstance(node, Mapping):
        return node
    return {k: without_rngs(v) for k, v in node.items() if k != RNGS}


def load_tree(path: Path) -> dict[Any, Any]:
    if regular_file(path) > MAX_BYTES:
        raise BadInput(f"{path} is larger than rnnconv reads whole ({MAX_BYTES} bytes)")
    tree = _msgpack.loads(path.read_bytes(), str(path))
    if not isinstance(tree, dict):
        raise BadInput(f"{path} is msgpack but not a tree of params (its top is no map)")
    cleaned: dict[Any, Any] = without_rngs(tree)
    return cleaned


def find(tree: Mapping[Any, Any]) -> list[_jax.TreeRNN]:
    return _jax.find_rnns(tree, recognise, layers)


def to_canonical(rnn: _jax.TreeRNN, path: Path, source: Provenance, options: ReadOptions | None = None) -> CanonicalRNN:
    notes = [f"{rnn.name}: nnx's GRUCell has no b_hn: it is zero"] if rnn.cell == GRU else []
    return _jax.tree_to_canonical(
        rnn, path, source, options, ("flax-nnx", FLAX_NNX_CELLS[rnn.layer_class], "an nnx file"), notes
    )


# --- writing ----------------------------------------------------------------------------------------------------


def b_hn_keys(spec: RNNSpec) -> list[ParamKey]:
    """Every b_hn of a GRU (the new gate's recurrent bias, inside the reset product), which nnx's GRUCell lacks."""
    if spec.mode != GRU or not spec.bias:
        return []
    new_gate = CUDNN_GATES[GRU][-1]
    return [
        ParamKey(layer, direction, Kind.bR, new_gate)
        for layer in range(spec.num_layers)
        for direction in range(spec.num_directions)
    ]


def losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What nnx cannot hold: a projection; a GRU's non-zero b_hn (nearest: the same GRU with b_hn = 0)."""
    found = _jax.projection_losses(rnn, "flax.nnx")
    nonzero = [key for key in b_hn_keys(rnn.spec) if np.any(rnn.param(key) != 0)]
    if nonzero:
        where = ", ".join(f"layer {k.layer}" + (f" {DIRECTION_WORDS[k.direction]}" if rnn.spec.bidirectional else "")
                          for k in nonzero[:2])  # fmt: skip
        found.append(registry.Loss(
            f"flax.nnx's GRUCell has no b_hn (the hidden bias inside the reset product: its dense_h has no bias); "
            f"the source's b_hn is non-zero ({where})",
            nearest=without_b_hn,
        ))  # fmt: skip
    return found


def without_b_hn(rnn: CanonicalRNN) -> CanonicalRNN:
    """The GRU with every b_hn zero: the nearest RNN an nnx GRUCell holds."""
    loaders = dict(rnn.loaders)
    for key in b_hn_keys(rnn.spec):
        shape, dtype = rnn.spec.param_shape(key), np.float64 if rnn.spec.dtype == "float64" else np.float32
        loaders[key] = functools.partial(np.zeros, shape, dtype)
    return dataclasses.replace(rnn, loaders=loaders)


def check_holds(rnn: CanonicalRNN) -> None:
    """Refuse what nnx cannot hold (the conversion asks `losses` first: this guards the writer called alone)."""
    found = losses(rnn)
    if found:
        raise Unsupported(found[0].term)


def pure_dict(rnn: CanonicalRNN, dtype: str) -> dict[Any, Any]:
    """The pure dict of nnx.state(module, nnx.Param) for the module `module_code` builds, holding the RNN."""
    spec = rnn.spec
    check_holds(rnn)
    layer_class = FLAX_NNX_CLASSES[_jax.family(spec)]
    row = find_row("flax-nnx", layer_class)
    params = FLAX_NNX_CELLS[layer_class]
    stack: list[dict[str, Any]] = []
    for layer in range(spec.num_layers):
        cells = [
            {FLAX_CELL: _jax.split(rnn.stored(row, layer, d), params, dtype, row)} for d in range(spec.num_directions)
        ]
        pair = dict(zip(FLAX_DIRECTIONS, cells))
        stack.append({k: pair[k] for k in sorted(pair)} if spec.bidirectional else cells[0])  # nnx's order: sorted
    return stack[0] if len(stack) == 1 else {FLAX_NNX_LAYERS: dict(enumerate(stack))}


def module_code(spec: RNNSpec) -> str:
    cell = FLAX_NNX_CLASSES[_jax.family(spec)]
    argument = f", activation_fn=nnx.{_jax.activation_of(spec)}" if _jax.family(spec) == RNN else ""
    modules = []
    for layer in range(spec.num_layers):
        one = f"nnx.RNN(nnx.{cell}({spec.layer_input_size(layer)}, {spec.hidden_size}{argument}, rngs=rngs))"
        modules.append(f"nnx.Bidirectional({one}, {one})" if spec.bidirectional else one)
    return modules[0] if len(modules) == 1 else f"nnx.Sequential({', '.join(modules)})"


def write(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
    rnn = _jax.one_rnn(rnns, "flax.nnx")
    dtype = _jax.written_dtype(rnn, options.dtype)
    data = _msgpack.dumps(pure_dict(rnn, dtype))
    beside = _jax.sidecar(path)
    with atomic_outputs([path, beside], options.force) as (tmp, tmp_beside):
        tmp_beside.write_text(_jax.sidecar_text(rnn, path))
        tmp.write_bytes(data)
    return Written(
        [path, beside],
        usage=f"{_jax.ON_THE_CPU}import flax, flax.nnx as nnx\nrngs = nnx.Rngs(0); model = {module_code(rnn.spec)}\n"
        f"params = nnx.state(model, nnx.Param)\n"
        f"nnx.replace_by_pure_dict(params, flax.serialization.msgpack_restore(open({registry.literal(path)}, "
        f'"rb").read()))\n'
        f"nnx.update(model, params)   # {dtype}\n"
        f"y = model(x)   # x (batch, time, {rnn.spec.input_size}), y (batch, time, "
        f"{rnn.spec.num_directions * rnn.spec.hidden_size})",
    )


# --- running in flax.nnx ----------------------------------------------------------------------------------------


def require_nnx() -> tuple[Any, Any]:
    jax = _jax.require_jax("flax")
    try:
        from flax import nnx
    except ImportError:
        raise BackendMissing(
            "running flax.nnx needs flax, which is not installed (pip install 'rnnconv[flax]')"
        ) from None
    return jax, nnx


def run_tree(rnn: _jax.TreeRNN, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
    """y, h_n, c_n of a found RNN's cells, each layer and direction an nnx.RNN of the nnx cell class it is, its
    params replaced by the file's (nnx.replace_by_pure_dict), run in JAX (float32, CPU)."""
    jax, nnx = require_nnx()
    x, h0, c0, lengths = _jax.sequence_inputs(spec, inputs)
    cell_class = getattr(nnx, rnn.layer_class)
    kwargs = {"activation_fn": getattr(nnx, _jax.activation_of(spec))} if rnn.cell == RNN else {}
    h_n, c_n = np.zeros_like(h0), np.zeros_like(c0)
    layer_input = x.transpose(1, 0, 2)
    with jax.default_device(jax.devices("cpu")[0]):
        for layer, cells in enumerate(rnn.cells):
            outputs = []
            for direction, stored in enumerate(cells):
                cell = cell_class(spec.layer_input_size(layer), spec.hidden_size, rngs=nnx.Rngs(0), **kwargs)
                module = nnx.RNN(cell, return_carry=True)
                params = nnx.state(module, nnx.Param)
                replace_by_pure_dict(nnx, params, {FLAX_CELL: _float32(stored)})
                nnx.update(module, params)
                pseudo = layer * spec.num_directions + direction
                carry: Any = (c0[pseudo], h0[pseudo]) if spec.mode == LSTM else h0[pseudo]
                carry, y = module(
                    layer_input, initial_carry=carry, seq_lengths=lengths, reverse=direction == 1, keep_order=True
                )
                if spec.mode == LSTM:
                    c_n[pseudo], h_n[pseudo] = np.asarray(carry[0]), np.asarray(carry[1])
                else:
                    h_n[pseudo] = np.asarray(carry)
                outputs.append(np.asarray(y))
            layer_input = np.concatenate(outputs, axis=-1)
    y = _jax.padded_zero(layer_input.transpose(1, 0, 2), lengths)
    return {"y": y, "h_n": h_n, "c_n": c_n if spec.mode == LSTM else None}


def replace_by_pure_dict(nnx: Any, state: Any, pure: Any) -> None:
    """nnx.replace_by_pure_dict where flax has it (0.12 does), else the State method (flax 0.10 has only that)."""
    replace = getattr(nnx, "replace_by_pure_dict", None)
    if replace is not None:
        replace(state, pure)
    else:
        state.replace_by_pure_dict(pure)


def _float32(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _float32(v) for k, v in node.items()}
    return np.asarray(_jax.as_float(node), np.float32)


class FlaxNnxEngine(registry.RuntimeEngine):
    """The blob as the .nnx.msgpack rnnconv writes, run by flax.nnx's nnx.RNN cells in JAX (CPU)."""

    name = "flax-nnx"
    format_name = "flax-nnx"
    suffix = ".nnx.msgpack"

    detail = "flax.nnx nnx.RNN cells in JAX (CPU) running the blob, float32"
    modules = (("jax", "jax"), ("flax", "flax"))


# --- the format -------------------------------------------------------------------------------------------------


@register
class FlaxNnxFormat(Format):
    info = FORMAT_INFO["flax-nnx"]
    sniff_order = 46  # any other msgpack map named .msgpack: after Flax linen's variables
    engine = FlaxNnxEngine  # verify --backend flax-nnx
    runtimes = (registry.Runtime("flax_nnx", FlaxNnxEngine.modules, "flax.nnx modules on the file's params"),)

    def sniff(self, probe: Probe) -> bool:
        return _jax.is_map(probe.head) and probe.path.name.endswith(self.info.read_suffixes)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        tree = load_tree(path)
        chosen = _jax.choose(find(tree), options.layer, options.take_all, path, "flax.nnx RNN cell")
        info = Provenance(path=str(path.resolve()), format=KIND)
        digest = digest_in_background(path) if options.hash_source else None

        def canonical(rnn: _jax.TreeRNN) -> CanonicalRNN:
            converted = to_canonical(rnn, path, info, options)
            converted.digest = digest
            return converted

        yield convert_each(chosen, canonical, lambda rnn: f"RNN {rnn.name!r} in {path}")

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        return write(rnns, path, options)

    def inspect(self, path: Path) -> InspectReport:
        return _jax.inspect_tree(path, find(load_tree(path)), KIND, to_canonical)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        (rnn,) = _jax.choose(find(load_tree(path)), layer, False, path, "flax.nnx RNN cell")
        return recorded.model_copy(update={"layer": rnn.name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own params, loaded into nnx's cells, run in JAX on the CPU."""
        (rnn,) = _jax.choose(find(load_tree(path)), source.layer, False, path, "flax.nnx RNN cell")
        _jax.check_same(to_canonical(rnn, path, source).spec, spec, rnn.name, path)
        ran = FlaxNnxEngine().versions()
        how = f"jax {ran['jax']}, flax {ran['flax']}: nnx.RNN(nnx.{rnn.layer_class}) on the file's params"
        return run_tree(rnn, spec, inputs), how
