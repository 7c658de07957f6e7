"""The Equinox format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import InspectReport, Provenance
from rnnconv.errors import BadInput
from rnnconv.formats import _jax, runtimes, sources, writing
from rnnconv.formats.base import Format, Written
from rnnconv.formats.equinox import PLUGIN
from rnnconv.formats.equinox.wire import KIND
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec


@register
class EquinoxFormat(Format):
    plugin = PLUGIN

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.equinox.reader import load, to_canonical

        cell = load(path)
        if options.layer is not None and options.layer != cell.name:
            raise BadInput(f"{path} holds one {cell.name}, not {options.layer!r}")
        yield sources.read_chosen(
            path,
            KIND,
            [cell],
            lambda held, info: to_canonical(held, path, info, options),
            lambda held: held.name,
            options,
            describe=lambda held: f"the {held.name} in {path}",
        )

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.equinox.writer import write

        rnn = writing.only_rnn(rnns, "an Equinox file")
        return write(rnn, path, self.written_dtype(rnn.spec, options.dtype), options.force)

    def inspect(self, path: Path) -> InspectReport:
        from rnnconv.formats.equinox.reader import load, to_canonical

        cell = load(path)
        read = functools.partial(to_canonical, cell, path, Provenance(path=str(path)))
        return InspectReport(path=str(path), format=KIND, rnns=[sources.inspect_entry(cell.name, cell.name, read)])

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        from rnnconv.formats.equinox.reader import load

        return recorded.model_copy(update={"layer": load(path).name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file loaded by eqx.tree_deserialise_leaves into its cell, stepped in JAX on the CPU."""
        from rnnconv.formats.equinox.reader import load, to_canonical
        from rnnconv.formats.equinox.runner import run_file

        cell = load(path)
        _jax.check_same(to_canonical(cell, path, source).spec, spec, cell.name, path)
        ran = runtimes.versions_of(self.runtimes[0].modules, self.info.extra, f"running {self.title} files")
        how = f"jax {ran['jax']}, equinox {ran['equinox']}: eqx.nn.{cell.name} loaded from the file"
        return run_file(path, cell, spec, inputs), how
