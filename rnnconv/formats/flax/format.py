"""The Flax linen format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.formats import _jax, registry
from rnnconv.formats.flax import PLUGIN
from rnnconv.formats.flax.reader import find, is_variables, load_tree, to_canonical
from rnnconv.formats.flax.runner import laid_out, run_variables
from rnnconv.formats.flax.wire import KIND
from rnnconv.formats.flax.writer import write
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, convert_each, register
from rnnconv.safeio.digests import digest_in_background


@register
class FlaxFormat(Format):
    plugin = PLUGIN
    sniff_order = 45  # a msgpack map with a params collection; before flax-nnx, whose trees have none

    def sniff(self, probe: Probe) -> bool:
        return is_variables(probe.head)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        tree = load_tree(path)
        chosen = _jax.choose(find(tree), options.layer, options.take_all, path, "Flax RNN cell")
        info = Provenance(path=str(path.resolve()), format=KIND)
        digest = digest_in_background(path) if options.hash_source else None

        def canonical(rnn: _jax.TreeRNN) -> CanonicalRNN:
            converted = to_canonical(rnn, path, info, options)
            converted.digest = digest
            return converted

        yield convert_each(chosen, canonical, lambda rnn: f"RNN {rnn.name!r} in {path}")

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return _jax.projection_losses(rnn, self.title)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        return write(rnns, path, options)

    def inspect(self, path: Path) -> InspectReport:
        return _jax.inspect_tree(path, find(load_tree(path)), KIND, to_canonical)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        (rnn,) = _jax.choose(find(load_tree(path)), layer, False, path, "Flax RNN cell")
        return recorded.model_copy(update={"layer": rnn.name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own params, run by Flax's cells in JAX on the CPU."""
        tree = load_tree(path)
        (rnn,) = _jax.choose(find(tree), source.layer, False, path, "Flax RNN cell")
        found = to_canonical(rnn, path, source).spec
        _jax.check_same(found, spec, rnn.name, path)
        ran = registry.versions_of(self.runtimes[0].modules, self.info.extra, f"running {self.title} files")
        how = f"jax {ran['jax']}, flax {ran['flax']}: nn.RNN(nn.{rnn.layer_class}) on the file's params"
        return run_variables(laid_out(rnn), spec, inputs), how
