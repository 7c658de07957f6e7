"""The cuDNN format's verbs (`base.Format`); its reader and writer are imported when a verb is used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import InspectEntry, InspectReport
from rnnconv.core.dtypes import element_type
from rnnconv.core.weightspace import weight_space_elements
from rnnconv.errors import BadInput, listing
from rnnconv.formats.base import WeightSpaceFormat, Written
from rnnconv.formats.cudnn import PLUGIN
from rnnconv.formats.cudnn.wire import sidecar_path
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source, pick_named

if TYPE_CHECKING:
    from rnnconv.core.blob import Blob
    from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec


@register
class CudnnFormat(WeightSpaceFormat):
    plugin = PLUGIN

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

    def holds_several(self, path: Path) -> bool:
        return path.suffix == ".safetensors"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.cudnn.writer import write_bin, write_safetensors

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
            return Written([path, sidecar_path(path)], write_bin(rnns[0], path, dtype, options.force, advance))
        if path.suffix == ".safetensors":
            return Written([path], write_safetensors(rnns, path, dtype, options.force, advance))
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
