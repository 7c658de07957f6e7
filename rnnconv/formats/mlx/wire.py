"""MLX's own words: the mlx.nn class of each cell family, rnnconv's multi-layer convention (a list `layers`), and
the first MLX version that stores matrices as (G*H, in).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from rnnconv.table.constants import GRU, LSTM, RNN

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

MLX_CLASSES: Final[dict[str, str]] = {LSTM: "LSTM", GRU: "GRU", RNN: "RNN"}  # the mlx.nn class of each cell family
MLX_STACK: Final = "layers"  # rnnconv's multi-layer convention: a list `layers` of one-layer modules, layers.{k}.Wx
MLX_ROWS_SINCE: Final = (0, 18, 0)  # before MLX 0.18 (ml-explore/mlx#1419) Wx and Wh were stored transposed
KIND, NPZ_KIND = "mlx-safetensors", "mlx-npz"  # the file kinds a source records
NPY: Final = ".npy"  # an .npz's members
STACKED: Final = re.compile(
    rf"^(.*?){MLX_STACK}\.(\d+)\.(?:(\d+)\.)?$"
)  # layers.{k}. or, two directions, layers.{k}.{d}.
SINCE: Final = ".".join(map(str, MLX_ROWS_SINCE[:2]))


def sniff(probe: Probe) -> bool:
    """A safetensors or an .npz of arrays, which may hold MLX's parameters of an RNN (`Format.claims` reads which)."""
    names = probe.zip_names
    npz = names is not None and bool(names) and all(n.endswith(NPY) for n in names)
    return probe.safetensors_metadata is not None or npz
