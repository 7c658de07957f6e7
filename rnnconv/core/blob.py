"""A cuDNN weight space with its description: the blob `verify` runs and diagnoses, the GPU layer feeds cuDNN, and the
cuDNN format's files hold (read where it lies, or in memory for a file of another format that verify runs itself)."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec, StoredAs
from rnnconv.core.contracts import LayoutInfo, Provenance, Sidecar
from rnnconv.core.dtypes import ElementType, decode
from rnnconv.core.weightspace import Region, region_map
from rnnconv.errors import BadInput
from rnnconv.safeio.inputs import FileArray
from rnnconv.table.constants import Kind

# The file kinds a weight space comes in (as provenance records them): a .bin with its sidecar, an rnnconv .safetensors.
KIND_BIN = "cudnn-bin"
KIND_SAFETENSORS = "cudnn-safetensors"


@dataclass
class Blob:
    """A weight space on disk, read where it lies, with its description."""

    name: str
    spec: RNNSpec
    etype: ElementType
    words: FileArray | np.ndarray  # storage words, 1-D, still in the file (in memory: a file verify runs itself)
    sidecar: Sidecar | None = None  # None: a raw blob described by flags
    path: Path | None = None
    places: dict[ParamKey, Region] = field(default_factory=dict)  # where each tensor is; the layout's by default
    kind: str = KIND_BIN
    stored_as: StoredAs | None = None  # a file of another format read as a weight space: how that file stores it

    def __post_init__(self) -> None:
        self.places = self.places or region_map(self.spec)

    @property
    def layout(self) -> LayoutInfo | None:
        return self.sidecar.layout if self.sidecar else None

    @property
    def source(self) -> Provenance:
        return self.sidecar.source if self.sidecar else Provenance()

    @property
    def notes(self) -> list[str]:
        return list(self.sidecar.notes) if self.sidecar else []

    def decoded(self, start: int, stop: int) -> np.ndarray:
        """A run of the weight space's elements as numbers (for scans that must not load it whole)."""
        return decode(np.asarray(self.words[start:stop]), self.etype)

    def param(self, key: ParamKey) -> np.ndarray:
        region = self.places[key]
        words = self.words[region.offset : region.offset + region.size]
        return decode(np.asarray(words), self.etype).reshape(region.shape)

    def to_canonical(self) -> CanonicalRNN:
        if not self.spec.bias:
            nonzero = [r.key.label for r in self.places.values() if r.is_bias and self.param(r.key).any()]
            if nonzero:
                raise BadInput(
                    f"{self.path}: its spec says the RNN has no biases, but {nonzero[0]} holds non-zero values"
                )
        source = Provenance(path=str(self.path), format=self.kind, name=self.name)
        return CanonicalRNN(
            self.name,
            self.spec,
            {key: functools.partial(self.param, key) for key in self.spec.param_keys()},
            source=source,
            notes=self.notes,
            stacked=self.stacked,
            keepalive=self,
            origin=self.sidecar.source if self.sidecar else None,
        )

    def stacked(self, layer: int, direction: int, kind: str) -> np.ndarray | FileArray | None:
        """The gates of one kind, in cuDNN order, when they lie back to back: still in the file (bfloat16 words
        read and widened)."""
        gates = [""] if kind == Kind.P else list(self.spec.gates)
        parts = [self.places[ParamKey(layer, direction, kind, g)] for g in gates]
        if any(b.offset != a.offset + a.size for a, b in itertools.pairwise(parts)):
            return None
        words = self.words[parts[0].offset : parts[-1].offset + parts[-1].size]
        shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
        if self.etype.name == "bfloat16":
            return decode(np.asarray(words), self.etype).reshape(shape)
        stacked: FileArray | np.ndarray = words.reshape(shape)
        return stacked
