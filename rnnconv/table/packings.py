"""Packings: the order in which a flat vector holds the stored tensors of every layer and direction.

A row of the table (`rows.py`) says how one cell's tensors are stored; a packing says how
the cells of a multi-layer, bidirectional RNN follow each other in one flat vector with no
header (a raw blob). `rnnconv identify` searches every row under every packing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from rnnconv.table.constants import MATRIX_ROLES, PROJECTION

Segment = tuple[int, int, str, tuple[int, ...]]  # layer, direction, role, stored shape
ShapesOf = Callable[[int], Mapping[str, tuple[int, ...]]]  # layer -> its stored tensors (role -> shape), in order


@dataclass(frozen=True)
class Packing:
    name: str
    description: str
    # which of a pseudo-layer's roles go in which pass over the pseudo-layers, in order
    passes: Callable[[list[str]], list[list[str]]]
    by_layer: bool = False  # each role of a layer holds every direction before the next role (an ONNX node)
    projection_only: bool = False  # differs from another packing only where there is a projection

    def segments(self, num_layers: int, num_directions: int, shapes_of: ShapesOf) -> list[Segment]:
        """Every stored tensor of the RNN in the order this packing puts them in the vector."""
        out: list[Segment] = []
        shapes = [shapes_of(layer) for layer in range(num_layers)]
        for roles in self.passes(list(shapes[0])):
            for layer in range(num_layers):
                if self.by_layer:
                    out += [(layer, d, role, shapes[layer][role]) for role in roles for d in range(num_directions)]
                else:
                    out += [(layer, d, role, shapes[layer][role]) for d in range(num_directions) for role in roles]
        return out


def is_matrix(role: str) -> bool:
    return role in MATRIX_ROLES or role == PROJECTION


def _matrices_then_biases(roles: list[str]) -> list[list[str]]:
    return [[r for r in roles if is_matrix(r)], [r for r in roles if not is_matrix(r)]]


def _cell_by_cell(roles: list[str]) -> list[list[str]]:
    return [[r for r in roles if is_matrix(r)] + [r for r in roles if not is_matrix(r)]]


def _projection_last(roles: list[str]) -> list[list[str]]:
    return [[r for r in roles if r != PROJECTION] + [r for r in roles if r == PROJECTION]]


MATRICES_THEN_BIASES: Final = Packing(
    "matrices-then-biases",
    "every pseudo-layer's matrices (input, recurrent, projection), then every pseudo-layer's biases; pseudo-layer = "
    "layer * directions + direction (cuDNN's weight space as rnnconv writes it; jax.experimental.rnn's flat vector)",
    _matrices_then_biases,
)
PER_PSEUDO_LAYER: Final = Packing(
    "per-pseudo-layer",
    "each pseudo-layer whole (matrices, then biases) before the next",
    _cell_by_cell,
)
PROJECTION_LAST: Final = Packing(
    "per-pseudo-layer-projection-last",
    "each pseudo-layer whole, its projection after its biases (a PyTorch state_dict's tensors in order)",
    _projection_last,
    projection_only=True,
)
PER_LAYER: Final = Packing(
    "per-layer",
    "each layer whole, each of its tensors for both directions before the next tensor (an ONNX node's W, R, B)",
    _cell_by_cell,
    by_layer=True,
)
PACKINGS: Final = (MATRICES_THEN_BIASES, PER_PSEUDO_LAYER, PROJECTION_LAST, PER_LAYER)


def packings_for(num_layers: int, num_directions: int, proj: int) -> tuple[Packing, ...]:
    """The packings that differ for these sizes: with one pseudo-layer only the projection's place can differ, and
    with one direction a layer is a pseudo-layer."""
    found = [p for p in PACKINGS if proj or not p.projection_only]
    if num_directions == 1:
        found = [p for p in found if not p.by_layer]
    if num_layers * num_directions == 1:
        found = [p for p in found if p is not PER_PSEUDO_LAYER]
    return tuple(found)
