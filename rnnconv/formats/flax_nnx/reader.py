"""An nnx pure dict read without Flax or JAX: its RNNs found at any depth (cells, nnx.RNN, nnx.Bidirectional,
nnx.Sequential of them) and each one's canonical form through the table's flax.nnx rows."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput
from rnnconv.formats import _jax, _msgpack, _orbax
from rnnconv.formats.flax_nnx.wire import FLAX_NNX_CELLS, FLAX_NNX_LAYERS
from rnnconv.formats.settings import ReadOptions
from rnnconv.safeio.inputs import regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import GRU

MAX_BYTES = 1 << 34
RNGS = "rngs"  # nnx.RNN's own random-number state: no weights
VALUE = "value"  # a Variable's value in an nnx.State that Orbax saved (its pure dict drops the key)


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


def pure(node: Any) -> Any:
    """An nnx.State's tree as its pure dict: each Variable ({"value": array}) its value."""
    if not isinstance(node, Mapping):
        return node
    if set(node) == {VALUE}:
        return node[VALUE]
    return {k: pure(v) for k, v in node.items()}


def load_tree(path: Path) -> dict[Any, Any]:
    if _orbax.is_checkpoint(path):
        return pure(without_rngs(_orbax.load_tree(path)))
    if regular_file(path) > MAX_BYTES:
        raise BadInput(f"{path} is larger than rnnconv reads whole ({MAX_BYTES} bytes)")
    tree = _msgpack.loads(path.read_bytes(), str(path))
    if not isinstance(tree, dict):
        raise BadInput(f"{path} is msgpack but not a tree of params (its top is no map)")
    cleaned: dict[Any, Any] = without_rngs(tree)
    return cleaned


def restored(path: Path) -> dict[Any, Any]:
    """An Orbax checkpoint's state as Orbax restores it, as its pure dict."""
    tree = _orbax.restored(path)
    if not isinstance(tree, dict):
        raise BadInput(f"{path.parent} is an Orbax checkpoint but not of an nnx state (its top is no map)")
    cleaned: dict[Any, Any] = pure(without_rngs(tree))
    return cleaned


def find(tree: Mapping[Any, Any]) -> list[_jax.TreeRNN]:
    return _jax.find_rnns(tree, recognise, layers)


def to_canonical(rnn: _jax.TreeRNN, path: Path, source: Provenance, options: ReadOptions | None = None) -> CanonicalRNN:
    notes = [f"{rnn.name}: nnx's GRUCell has no b_hn: it is zero"] if rnn.cell == GRU else []
    return _jax.tree_to_canonical(
        rnn, path, source, options, ("flax-nnx", FLAX_NNX_CELLS[rnn.layer_class], "an nnx file"), notes
    )
