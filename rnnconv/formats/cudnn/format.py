"""The cuDNN format's verbs (`base.Format`); its reader and writer are imported when a verb is used."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import InspectEntry, InspectReport, Provenance
from rnnconv.core.dtypes import element_type
from rnnconv.core.weightspace import weight_space_elements
from rnnconv.errors import BadInput, listing
from rnnconv.formats import holding
from rnnconv.formats.base import WeightSpaceFormat, Written
from rnnconv.formats.cudnn import PLUGIN
from rnnconv.formats.cudnn.wire import sidecar_path
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source, pick_named

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.blob import Blob
    from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec


@register
class CudnnFormat(WeightSpaceFormat):
    plugin = PLUGIN
    # A raw blob's spec (the raw-blob flags) where the blob is verify's source: how its verbs read it (`described`).
    raw_spec: RNNSpec | None = None

    def described(self, spec: RNNSpec) -> CudnnFormat:
        """The format reading its source files as raw blobs of `spec` (a blob without a sidecar, as the source)."""
        described = copy.copy(self)
        described.raw_spec = spec
        return described

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        blobs = pick_named(self.blobs(path, options.raw_spec), options.layer, path, options.take_all)
        yield Source([b.to_canonical() for b in blobs])

    def blobs(self, path: Path, raw_spec: RNNSpec | None = None) -> list[Blob]:
        from rnnconv.formats.cudnn.reader import open_blobs

        return open_blobs(path, raw_spec)

    def in_memory(self, rnn: CanonicalRNN, path: Path, kind: str) -> Blob:
        from rnnconv.formats.cudnn.writer import in_memory_blob

        return in_memory_blob(rnn, path, kind)

    def write_relayout(
        self, blob: Blob, placed: dict[ParamKey, int], total_bytes: int, path: Path, version: str, force: bool
    ) -> None:
        from rnnconv.formats.cudnn.writer import write_relayout

        write_relayout(blob, placed, total_bytes, path, version, force)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        """The blob a file was made from: `layer`, else the file's only one, else the one the file records (by its name
        in the blob: a .safetensors holds several)."""
        blobs = self.blobs(path, self.raw_spec)
        named = layer or (recorded.name if recorded.format in self.info.kinds and len(blobs) > 1 else None)
        (blob,) = pick_named(blobs, named, path)
        return recorded.model_copy(
            update={"format": blob.kind, "name": blob.name, "layer": blob.name, "dtype": blob.spec.dtype}
        )

    def source_options(self, source: Provenance) -> ReadOptions:
        return ReadOptions(layer=source.name, hash_source=False, raw_spec=self.raw_spec)

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The blob as a source: its weight space run through the numpy reference of cuDNN's equations (float64),
        every weight read from the file through the layout, as verify runs a blob."""
        import numpy as np

        from rnnconv.core.reference import forward

        (blob,) = pick_named(self.blobs(path, self.raw_spec), source.name, path)
        x = np.asarray(inputs["x"])
        y, h_n, c_n = forward(blob.spec, blob.param, x, inputs["h0"], inputs["c0"], inputs["lengths"])
        return {"y": y, "h_n": h_n, "c_n": c_n}, f"numpy {np.__version__}: cuDNN's equations in float64 on the blob"

    def holds_several(self, path: Path) -> bool:
        return path.suffix == ".safetensors"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.cudnn.writer import loading_snippet, write_bin, write_safetensors

        for rnn in rnns:  # what cuDNN cannot compute (a GRU's reset before its product) never reaches a file
            holding.check_held(self.info, rnn, options.dtype)
        dtype = self.written_dtype(rnns[0].spec, options.dtype)
        total = sum(weight_space_elements(r.spec) for r in rnns) * element_type(dtype).itemsize
        progress = options.progress
        advance = (lambda n: progress(n, total)) if progress else None
        if path.suffix == ".bin":
            if len(rnns) > 1:
                raise BadInput(
                    f"a .bin holds one RNN but {len(rnns)} were selected "
                    f"({listing(r.name for r in rnns)}); pick one, or write a .safetensors"
                )
            warnings = write_bin(rnns[0], path, dtype, options.force, advance)
            return Written([path, sidecar_path(path)], warnings, loading_snippet(rnns, path, dtype))
        if path.suffix == ".safetensors":
            warnings = write_safetensors(rnns, path, dtype, options.force, advance)
            return Written([path], warnings, loading_snippet(rnns, path, dtype))
        raise BadInput(f"output {path} must end in .bin (raw weight space + JSON sidecar) or .safetensors")

    def inspect(self, path: Path) -> InspectReport:
        blobs = self.blobs(path)
        rnns = [
            InspectEntry(
                name=b.name,
                layer_class="cuDNN weight space",
                spec=b.spec.to_model(),
                converts=True,
                notes=b.notes,
                source=b.source,
                layout=b.layout,
            )
            for b in blobs
        ]
        return InspectReport(path=str(path), format=blobs[0].kind, rnns=rnns, notes=[])
