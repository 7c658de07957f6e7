"""A Flax linen variables tree read without Flax or JAX: its RNNs found at any depth (cells, nn.RNN, nn.Bidirectional,
nn.Sequential of them) and each one's canonical form through the table's Flax rows."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput
from rnnconv.formats import _jax, _msgpack, _orbax
from rnnconv.formats.flax.wire import FLAX_LINEN_CLASSES, FLAX_LINEN_LAYERS, FLAX_PARAMS
from rnnconv.formats.settings import ReadOptions
from rnnconv.safeio.inputs import regular_file
from rnnconv.table.constants import FLAX_LINEN_CELLS, LSTM

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
    """The variables tree of a file (or of an Orbax checkpoint), checked to be one."""
    if _orbax.is_checkpoint(path):
        return variables(_orbax.load_tree(path), f"{path.parent} is an Orbax checkpoint")
    if regular_file(path) > MAX_BYTES:
        raise BadInput(f"{path} is larger than rnnconv reads whole ({MAX_BYTES} bytes)")
    return variables(_msgpack.loads(path.read_bytes(), str(path)), f"{path} is msgpack")


def restored(path: Path) -> dict[str, Any]:
    """An Orbax checkpoint's variables as Orbax restores them."""
    return variables(_orbax.restored(path), f"{path.parent} is an Orbax checkpoint")


def variables(tree: Any, what: str) -> dict[str, Any]:
    if not isinstance(tree, dict) or not isinstance(tree.get(FLAX_PARAMS), dict):
        raise BadInput(f"{what} but not a Flax variables tree (no {FLAX_PARAMS!r} collection)")
    return tree


def find(tree: Mapping[str, Any]) -> list[_jax.TreeRNN]:
    return _jax.find_rnns(tree[FLAX_PARAMS], recognise, layers, root=FLAX_PARAMS)


def to_canonical(rnn: _jax.TreeRNN, path: Path, source: Provenance, options: ReadOptions | None = None) -> CanonicalRNN:
    notes = [f"{rnn.name}: a Flax {rnn.layer_class} ({OPTIMIZED} stores the same params)"] if rnn.cell == LSTM else []
    return _jax.tree_to_canonical(
        rnn, path, source, options, ("flax", FLAX_LINEN_CELLS[rnn.cell], "a Flax file"), notes
    )
