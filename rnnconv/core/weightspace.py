"""cuDNN's flat weight space: where every matrix and bias of an RNN lives.

Layout `cudnn-flat` version 1 (docs/LAYOUTS.md section 1; jax.experimental.rnn and
MXNet's FusedRNNCell, both tested against cuDNN, agree):

    for each pseudo-layer p = layer * D + direction:
        W_p (G blocks of (H, in_p)), R_p (G blocks of (H, out)), [Wproj_p (P, H)]
    for each pseudo-layer p:
        bW_p (G blocks of H), bR_p (G blocks of H)

All blocks row-major, in cuDNN's gate order, no padding, double bias.
cuDNN never promised this layout: on a GPU the truth is what
cudnnGetRNNWeightParams reports, which `rnnconv verify --backend cudnn` checks.
cuDNN 9.19 on an H100 reported exactly this for the battery's 215 configurations,
the LSTM projection (linLayerID 8) right after its pseudo-layer's recurrent matrices
included (fixtures/cudnn_layout.json, which CI holds this module to).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

import numpy as np

from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.contracts import LayoutInfo, TensorEntry
from rnnconv.table.constants import BIAS_KINDS, MATRIX_KINDS, PROJECTION_LIN_LAYER_ID, Kind

LAYOUT_NAME = "cudnn-flat"
LAYOUT_VERSION = 1
# A blob rewritten at the offsets a GPU's cuDNN reported (verify --relayout): its sidecar lists them.
REPORTED_LAYOUT_NAME = "cudnn-reported"
LAYOUT = LayoutInfo(
    name=LAYOUT_NAME,
    version=LAYOUT_VERSION,
    order="matrices of every pseudo-layer (W gates, R gates, projection), then biases of every "
    "pseudo-layer (bW gates, bR gates); pseudo-layer = layer * directions + direction; "
    "blocks row-major, cuDNN gate order, no padding",
    bias_mode="double",
    projection=f"after the recurrent matrices of its pseudo-layer (linLayerID {PROJECTION_LIN_LAYER_ID})",
    verified_on_gpu=True,  # cuDNN 9.19's own answers on an H100 (fixtures/cudnn_layout.json)
)


@dataclass(frozen=True)
class Region:
    key: ParamKey
    pseudo_layer: int
    lin_layer_id: int
    offset: int  # in elements from the start of the weight space
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def is_bias(self) -> bool:
        return self.key.kind in BIAS_KINDS

    def entry(self, itemsize: int, offset_bytes: int | None = None) -> TensorEntry:
        """The sidecar's line for this tensor (at another byte offset when it was moved)."""
        return TensorEntry(
            name=self.key.label,
            layer=self.key.layer,
            direction=self.key.direction,
            tensor=self.key.kind,
            gate=self.key.gate,
            pseudo_layer=self.pseudo_layer,
            lin_layer_id=self.lin_layer_id,
            offset_bytes=self.offset * itemsize if offset_bytes is None else offset_bytes,
            shape=list(self.shape),
        )

    @classmethod
    def from_entry(cls, entry: TensorEntry, itemsize: int) -> Region:
        offset, rest = divmod(entry.offset_bytes, itemsize)
        if rest:
            raise ValueError(f"{entry.name}: offset {entry.offset_bytes} is not a multiple of {itemsize}")
        key = ParamKey(entry.layer, entry.direction, entry.tensor, entry.gate)
        return cls(key, entry.pseudo_layer, entry.lin_layer_id, offset, tuple(entry.shape))


KindGate = tuple[str, str]  # (kind, gate): one tensor of a cell


@lru_cache(maxsize=8)
def lin_layer_ids(gates: tuple[str, ...]) -> Mapping[KindGate, int]:
    """cudnnGetRNNWeightParams' linLayerID of each tensor of a cell with these gates (in cuDNN's order).

    A gate's matrix and its bias share an id: 0..G-1 the input side (W, bW), G..2G-1 the recurrent side
    (R, bR), each in gate order; the LSTM projection (no bias) is PROJECTION_LIN_LAYER_ID. Both ways
    (a sidecar's ids, and the tensors cuDNN returns for an id) are read from this one mapping.
    """
    ids = {
        (kind, gate): side * len(gates) + k
        for side, kinds in enumerate(zip(MATRIX_KINDS, BIAS_KINDS))
        for kind in kinds
        for k, gate in enumerate(gates)
    }
    ids[(Kind.P, "")] = PROJECTION_LIN_LAYER_ID
    return MappingProxyType(ids)  # cached: nobody may change it


def lin_layer_id(spec: RNNSpec, key: ParamKey) -> int:
    return lin_layer_ids(spec.gates)[(key.kind, key.gate)]


def lin_layer_tensors(gates: tuple[str, ...], lin: int) -> tuple[KindGate, KindGate | None]:
    """The matrix and the bias (None for the projection) that cuDNN returns for one linLayerID."""
    matrix, bias = None, None
    for (kind, gate), found in lin_layer_ids(gates).items():
        if found == lin:
            if kind in BIAS_KINDS:
                bias = (kind, gate)
            else:
                matrix = (kind, gate)
    if matrix is None:
        raise ValueError(f"no tensor of a cell with gates {', '.join(gates)} has linLayerID {lin}")
    return matrix, bias


@lru_cache(maxsize=64)
def regions(spec: RNNSpec) -> tuple[Region, ...]:
    """Every tensor's place in the weight space, in increasing offset."""
    out: list[Region] = []
    offset = 0
    for section in ((*MATRIX_KINDS, Kind.P), BIAS_KINDS):
        for layer in range(spec.num_layers):
            for direction in range(spec.num_directions):
                pseudo = layer * spec.num_directions + direction
                for kind in section:
                    gates = [""] if kind == Kind.P else list(spec.gates)
                    if kind == Kind.P and not spec.proj_size:
                        continue
                    for gate in gates:
                        key = ParamKey(layer, direction, kind, gate)
                        shape = spec.param_shape(key)
                        out.append(Region(key, pseudo, lin_layer_id(spec, key), offset, shape))
                        offset += int(np.prod(shape))
    return tuple(out)


def weight_space_elements(spec: RNNSpec) -> int:
    """The weight space's size in elements, in closed form: known before any region is laid out."""
    g, h, d, out = len(spec.gates), spec.hidden_size, spec.num_directions, spec.output_size
    projection = spec.proj_size * h
    first = g * h * (spec.input_size + out + 2) + projection
    rest = g * h * (d * out + out + 2) + projection
    return d * first + (spec.num_layers - 1) * d * rest


def region_map(spec: RNNSpec) -> dict[ParamKey, Region]:
    return {r.key: r for r in regions(spec)}


def size_formula(spec: RNNSpec) -> str:
    """The element count as a formula, for messages about blobs of the wrong size."""
    g, h, d, layers = len(spec.gates), spec.hidden_size, spec.num_directions, spec.num_layers
    out = spec.output_size
    first = f"{g}*{h}*({spec.input_size}+{out}+2)"
    if spec.proj_size:
        first += f"+{spec.proj_size}*{h}"
    text = f"{d}*[{first}]"
    if layers > 1:
        rest = f"{g}*{h}*({d * out}+{out}+2)" + (f"+{spec.proj_size}*{h}" if spec.proj_size else "")
        text += f" + {layers - 1}*{d}*[{rest}]"
    return f"{text} = {weight_space_elements(spec)} elements (G*H*(in+out+2) [+P*H] per layer and direction)"
