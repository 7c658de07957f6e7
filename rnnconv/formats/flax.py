"""Flax linen: the variables of `nn.RNN(cell)` modules, as `flax.serialization.to_bytes` writes them (msgpack).

A file is the msgpack of a variables tree `{"params": ...}`; an RNN in it is a cell's params (LSTMCell and
OptimizedLSTMCell: `ii, if, ig, io` kernels (in, H), `hi, hf, hg, ho` kernels (H, H) with biases; GRUCell: `ir, iz,
in` kernels and biases, `hr, hz` kernels, `hn` kernel and bias; SimpleCell: `i` kernel and bias, `h` kernel), under
`cell` (`nn.RNN(cell)`), under `forward_rnn` and `backward_rnn` (`nn.Bidirectional`), and under `layers_0`,
`layers_1`, ... (`nn.Sequential` of them), at any depth: `--layer` names its path. docs/LAYOUTS.md section 12 has
the facts, checked against Flax and PyTorch.

Reading and writing need neither Flax nor JAX (`_msgpack`); `run` builds the same modules in Flax and runs them in
JAX on the CPU, for `verify` and for the `flax` engine (a blob run as Flax linen cells).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.errors import BackendMissing, BadInput
from rnnconv.formats import _jax, _msgpack, registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, convert_each, register
from rnnconv.safeio import atomic_outputs, digest_in_background, regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import (
    FLAX_CELL,
    FLAX_DIRECTIONS,
    FLAX_LINEN_CELLS,
    FLAX_LINEN_CLASSES,
    FLAX_LINEN_LAYERS,
    FLAX_PARAMS,
    LSTM,
    RNN,
)
from rnnconv.table.formats import FORMAT_INFO

KIND = "flax-msgpack"
MAX_BYTES = 1 << 34  # a file is read whole, as flax.serialization reads it
OPTIMIZED = "OptimizedLSTMCell"  # stores what LSTMCell stores


def recognise(node: Mapping[str, Any]) -> tuple[str, str] | None:
    for cell, params in FLAX_LINEN_CELLS.items():
        if _jax.holds(node, params):
            return cell, FLAX_LINEN_CLASSES[cell]
    return None


def layers(node: Mapping[str, Any]) -> list[Any] | None:
    """nn.Sequential's layers (layers_0, layers_1, ...), in order, or None."""
    names = [FLAX_LINEN_LAYERS.format(layer=k) for k in range(len(node))]
    return [node[n] for n in names] if node and set(node) == set(names) else None


def load_tree(path: Path) -> dict[str, Any]:
    """The variables tree of a file, checked to be one."""
    if regular_file(path) > MAX_BYTES:
        raise BadInput(f"{path} is larger than rnnconv reads whole ({MAX_BYTES} bytes)")
    tree = _msgpack.loads(path.read_bytes(), str(path))
    if not isinstance(tree, dict) or not isinstance(tree.get(FLAX_PARAMS), dict):
        raise BadInput(f"{path} is msgpack but not a Flax variables tree (no {FLAX_PARAMS!r} collection)")
    return tree


def find(tree: Mapping[str, Any]) -> list[_jax.TreeRNN]:
    return _jax.find_rnns(tree[FLAX_PARAMS], recognise, layers, root=FLAX_PARAMS)


def to_canonical(rnn: _jax.TreeRNN, path: Path, source: Provenance, options: ReadOptions | None = None) -> CanonicalRNN:
    notes = [f"{rnn.name}: a Flax {rnn.layer_class} ({OPTIMIZED} stores the same params)"] if rnn.cell == LSTM else []
    return _jax.tree_to_canonical(
        rnn, path, source, options, ("flax", FLAX_LINEN_CELLS[rnn.cell], "a Flax file"), notes
    )


# --- writing ----------------------------------------------------------------------------------------------------


def variables(rnn: CanonicalRNN, dtype: str) -> dict[str, Any]:
    """The variables tree of the module `module_code` builds, holding the RNN."""
    spec = rnn.spec
    row = find_row("flax", FLAX_LINEN_CLASSES[_jax.family(spec)])
    params = FLAX_LINEN_CELLS[row.cell]
    stack = []
    for layer in range(spec.num_layers):
        cells = [
            {FLAX_CELL: _jax.split(rnn.stored(row, layer, d), params, dtype, row)} for d in range(spec.num_directions)
        ]
        stack.append(dict(zip(FLAX_DIRECTIONS, cells)) if spec.bidirectional else cells[0])
    tree = stack[0] if len(stack) == 1 else {FLAX_LINEN_LAYERS.format(layer=k): s for k, s in enumerate(stack)}
    return {FLAX_PARAMS: tree}


def laid_out(rnn: _jax.TreeRNN) -> dict[str, Any]:
    """A found RNN's cells, as they are, in the variables tree of `module_code` (where `run_variables` takes them)."""
    stack = [dict(zip(FLAX_DIRECTIONS, ({FLAX_CELL: c} for c in cells))) if len(cells) == 2 else {FLAX_CELL: cells[0]}
             for cells in rnn.cells]  # fmt: skip
    tree = stack[0] if len(stack) == 1 else {FLAX_LINEN_LAYERS.format(layer=k): s for k, s in enumerate(stack)}
    return {FLAX_PARAMS: tree}


def module_code(spec: RNNSpec) -> str:
    """The Flax module whose variables a written file fills, as Python."""
    cell = FLAX_LINEN_CLASSES[_jax.family(spec)]
    argument = f", activation_fn=nn.{_jax.activation_of(spec)}" if _jax.family(spec) == RNN else ""
    one = f"nn.RNN(nn.{cell}({spec.hidden_size}{argument}))"
    layer = f"nn.Bidirectional({one}, {one})" if spec.bidirectional else one
    return layer if spec.num_layers == 1 else f"nn.Sequential([{', '.join([layer] * spec.num_layers)}])"


def write(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
    rnn = _jax.one_rnn(rnns, "Flax")
    dtype = _jax.written_dtype(rnn, options.dtype)
    data = _msgpack.dumps(variables(rnn, dtype))
    beside = _jax.sidecar(path)
    with atomic_outputs([path, beside], options.force) as (tmp, tmp_beside):
        tmp_beside.write_text(_jax.sidecar_text(rnn, path))
        tmp.write_bytes(data)
    spec = rnn.spec
    return Written(
        [path, beside],
        usage=f"{_jax.ON_THE_CPU}import flax, flax.linen as nn, jax, jax.numpy as jnp\nmodel = {module_code(spec)}\n"
        f"variables = model.init(jax.random.key(0), jnp.zeros((1, 1, {spec.input_size})))\n"
        f'variables = flax.serialization.from_bytes(variables, open({registry.literal(path)}, "rb").read())   '
        f"# {dtype}\n"
        f"y = model.apply(variables, x)   # x (batch, time, {spec.input_size}), y (batch, time, "
        f"{spec.num_directions * spec.hidden_size})",
    )


# --- running in Flax --------------------------------------------------------------------------------------------


def require_flax() -> tuple[Any, Any]:
    jax = _jax.require_jax("flax")
    try:
        import flax.linen as nn
    except ImportError:
        raise BackendMissing("running Flax needs flax, which is not installed (pip install 'rnnconv[flax]')") from None
    return jax, nn


def run_variables(
    tree: Mapping[str, Any], spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]
) -> dict[str, np.ndarray | None]:
    """y, h_n, c_n of a variables tree as `module_code` lays it out, each layer and direction an `nn.RNN` of the
    Flax cell applied to its params (float32, CPU): the backward direction as nn.Bidirectional runs it
    (reverse=True, keep_order=True), ragged sequences through nn.RNN's seq_lengths."""
    jax, nn = require_flax()
    x, h0, c0, lengths = _jax.sequence_inputs(spec, inputs)
    cell_class = getattr(nn, FLAX_LINEN_CLASSES[_jax.family(spec)])
    kwargs = {"activation_fn": getattr(nn, _jax.activation_of(spec))} if _jax.family(spec) == RNN else {}
    module = nn.RNN(cell_class(spec.hidden_size, **kwargs), return_carry=True)
    params = tree[FLAX_PARAMS]
    h_n, c_n = np.zeros_like(h0), np.zeros_like(c0)
    layer_input = x.transpose(1, 0, 2)  # batch-major, nn.RNN's default
    with jax.default_device(jax.devices("cpu")[0]):
        for layer in range(spec.num_layers):
            stack = params if spec.num_layers == 1 else params[FLAX_LINEN_LAYERS.format(layer=layer)]
            outputs = []
            for direction in range(spec.num_directions):
                rnn = stack[FLAX_DIRECTIONS[direction]] if spec.bidirectional else stack
                cell = jax.tree_util.tree_map(lambda a: np.asarray(_jax.as_float(a), np.float32), rnn[FLAX_CELL])
                pseudo = layer * spec.num_directions + direction
                carry: Any = (c0[pseudo], h0[pseudo]) if spec.mode == LSTM else h0[pseudo]
                carry, y = module.apply(
                    {FLAX_PARAMS: {FLAX_CELL: cell}},
                    layer_input,
                    initial_carry=carry,
                    seq_lengths=lengths,
                    reverse=direction == 1,
                    keep_order=True,
                )
                if spec.mode == LSTM:
                    c_n[pseudo], h_n[pseudo] = np.asarray(carry[0]), np.asarray(carry[1])
                else:
                    h_n[pseudo] = np.asarray(carry)
                outputs.append(np.asarray(y))
            layer_input = np.concatenate(outputs, axis=-1)
    y = _jax.padded_zero(layer_input.transpose(1, 0, 2), lengths)
    return {"y": y, "h_n": h_n, "c_n": c_n if spec.mode == LSTM else None}


class FlaxEngine(registry.RuntimeEngine):
    """The blob as the .msgpack rnnconv writes, run by Flax linen's nn.RNN cells in JAX (CPU)."""

    name = "flax"
    format_name = "flax"
    suffix = ".msgpack"

    detail = "Flax linen nn.RNN cells in JAX (CPU) running the blob, float32"
    modules = (("jax", "jax"), ("flax", "flax"))


# --- the format -------------------------------------------------------------------------------------------------


@register
class FlaxFormat(Format):
    info = FORMAT_INFO["flax"]
    sniff_order = 45  # a msgpack map with a params collection; before flax-nnx, whose trees have none
    engine = FlaxEngine  # verify --backend flax
    runtimes = (registry.Runtime("flax", FlaxEngine.modules, "Flax linen modules on the file's variables"),)

    def sniff(self, probe: Probe) -> bool:
        return _is_variables(probe.head)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        tree = load_tree(path)
        chosen = _jax.choose(find(tree), options.layer, options.take_all, path, "Flax RNN cell")
        info = Provenance(path=str(path.resolve()), format=KIND)
        digest = digest_in_background(path) if options.hash_source else None

        def canonical(rnn: _jax.TreeRNN) -> CanonicalRNN:
            converted = to_canonical(rnn, path, info, options)
            converted.digest = digest
            return converted

        yield convert_each(chosen, canonical, lambda rnn: f"RNN {rnn.name!r} in {path}")

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return _jax.projection_losses(rnn, self.title)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        return write(rnns, path, options)

    def inspect(self, path: Path) -> InspectReport:
        return _jax.inspect_tree(path, find(load_tree(path)), KIND, to_canonical)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        (rnn,) = _jax.choose(find(load_tree(path)), layer, False, path, "Flax RNN cell")
        return recorded.model_copy(update={"layer": rnn.name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own params, run by Flax's cells in JAX on the CPU."""
        tree = load_tree(path)
        (rnn,) = _jax.choose(find(tree), source.layer, False, path, "Flax RNN cell")
        found = to_canonical(rnn, path, source).spec
        _jax.check_same(found, spec, rnn.name, path)
        ran = FlaxEngine().versions()
        how = f"jax {ran['jax']}, flax {ran['flax']}: nn.RNN(nn.{rnn.layer_class}) on the file's params"
        return run_variables(laid_out(rnn), spec, inputs), how


def _is_variables(head: bytes) -> bool:
    """A msgpack map whose first key is "params" (what to_bytes writes for a linen module's variables)."""
    key = FLAX_PARAMS.encode()
    return _jax.is_map(head) and head[1:].startswith(bytes([0xA0 | len(key)]) + key)
