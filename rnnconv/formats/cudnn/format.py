"""The cuDNN format's verbs (`registry.Format`); its reader and writer are imported when a verb is used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.contracts import InspectEntry, InspectReport
from rnnconv.dtypes import element_type
from rnnconv.errors import BadInput, listing
from rnnconv.formats.cudnn import PLUGIN
from rnnconv.formats.cudnn.wire import sidecar_path
from rnnconv.formats.registry import Format, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.weightspace import weight_space_elements

if TYPE_CHECKING:
    from rnnconv.canonical import CanonicalRNN


@register
class CudnnFormat(Format):
    plugin = PLUGIN

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.cudnn.reader import open_blobs, pick_blob

        blobs = pick_blob(open_blobs(path, options.raw_spec), options.layer, path, options.take_all)
        yield Source([b.to_canonical() for b in blobs])

    def holds_several(self, path: Path) -> bool:
        return path.suffix == ".safetensors"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.cudnn.writer import loading_snippet, write_bin, write_safetensors

        dtype = options.dtype or rnns[0].spec.dtype
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
        from rnnconv.formats.cudnn.reader import open_blobs

        blobs = open_blobs(path)
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
