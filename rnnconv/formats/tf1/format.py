"""The TF1 checkpoint format's verbs (`base.Format`): read-only; its reader and runner are imported when a verb is
used."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import InspectEntry, InspectReport, Provenance
from rnnconv.errors import BadInput
from rnnconv.formats.base import Format
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.sources import Source, inspect_entry, read_chosen
from rnnconv.formats.tf1 import PLUGIN
from rnnconv.formats.tf1.wire import KIND

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import RNNSpec


@register
class TF1Format(Format):
    plugin = PLUGIN

    def named(self, path: Path) -> int:
        from rnnconv.formats.tf1.wire import DATA_SHARD

        shard = DATA_SHARD.search(path.name)  # X.data-00000-of-00001: a checkpoint's data, named by its index
        return len(shard.group()) if shard else super().named(path)

    def locate(self, path: Path) -> Path | None:
        from rnnconv.formats.tf1.wire import INDEX_SUFFIX

        index = path.with_name(path.name + INDEX_SUFFIX)
        return index if os.path.lexists(index) else None

    def source_parts(self, path: Path, shards: list[Path] | None = None) -> list[Path]:
        """Its data files (`shards`, where its index was read), and the .meta graph beside it that an LSTM cell's
        forget bias is read from."""
        from rnnconv.formats.tf1.tensor_bundle import data_files
        from rnnconv.formats.tf1.wire import meta_graph_of

        meta = meta_graph_of(path)
        return (data_files(path) if shards is None else shards) + ([meta] if os.path.isfile(meta) else [])

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.tf1.reader import OPAQUE_REASON, choose, find_rnns, to_canonical
        from rnnconv.formats.tf1.tensor_bundle import Checkpoint

        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        several = options.take_all and options.layer is None and len(rnns) > 1
        chosen = rnns if several else choose(rnns, opaque_only, options.layer, checkpoint.index)
        source = read_chosen(
            checkpoint.index,
            KIND,
            chosen,
            lambda rnn, info: to_canonical(checkpoint, rnn, info, options),
            lambda rnn: rnn.name,
            options,
            describe=lambda rnn: f"RNN {rnn.name!r} in {checkpoint.index}",
            things="recurrent layers",
            parts=self.source_parts(checkpoint.index, checkpoint.shards),
        )
        source.skipped += [(name, OPAQUE_REASON.format(name=name)) for name in opaque_only if several]
        yield source

    def inspect(self, path: Path) -> InspectReport:
        from rnnconv.formats.tf1.reader import OPAQUE_REASON, find_rnns, refused_sizes, to_canonical
        from rnnconv.formats.tf1.tensor_bundle import Checkpoint

        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        provenance = Provenance(path=str(checkpoint.index))
        entries = [
            inspect_entry(
                rnn.name,
                rnn.row.source_class,
                functools.partial(to_canonical, checkpoint, rnn, provenance),
                functools.partial(refused_sizes, checkpoint, rnn),
            )
            for rnn in rnns
        ]
        for name in opaque_only:
            reason = OPAQUE_REASON.format(name=name)
            entries.append(InspectEntry(name=name, layer_class="cuDNN opaque buffer", converts=False, reason=reason))
        read = {n for r in rnns for names in r.tensors.values() for n in names.values()}
        read |= {n for r in rnns for n in [r.opaque, *r.unknown] if n} | set(opaque_only)
        others = len(set(checkpoint.shapes) - read)
        notes = [f"{others} other tensors (not cuDNN layers' weights)"] if others else []
        return InspectReport(path=str(checkpoint.index), format=KIND, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        from rnnconv.formats.tf1.reader import choose, find_rnns
        from rnnconv.formats.tf1.tensor_bundle import Checkpoint

        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        (rnn,) = choose(rnns, opaque_only, layer, checkpoint.index)
        return recorded.model_copy(update={"layer": rnn.name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The checkpoint's canonical tensors, as stored, run by TensorFlow on the CPU."""
        from rnnconv.formats.tf1.reader import choose, find_rnns, to_canonical
        from rnnconv.formats.tf1.runner import run_in_tensorflow
        from rnnconv.formats.tf1.tensor_bundle import Checkpoint

        checkpoint = Checkpoint.open(path)
        rnns, opaque_only = find_rnns(checkpoint)
        (rnn,) = choose(rnns, opaque_only, source.layer, checkpoint.index)
        found = to_canonical(checkpoint, rnn, source).spec
        same = ("input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")
        if any(getattr(found, f) != getattr(spec, f) for f in same) or found.cell != spec.cell:
            raise BadInput(
                f"RNN {rnn.name!r} in {checkpoint.index} is not the RNN the blob describes ({spec.describe()})"
            )
        result = run_in_tensorflow(checkpoint, rnn, spec, inputs)
        checkpoint.check_read()  # nothing is committed here, so the checks of the tensors run are awaited
        return result
