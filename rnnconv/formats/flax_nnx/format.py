"""The flax.nnx format's verbs (`registry.Format`), as every JAX tree of params has them (`_jax.TreeFormat`); its
reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnconv.formats import _jax, registry
from rnnconv.formats.flax_nnx import PLUGIN
from rnnconv.formats.flax_nnx.wire import KIND
from rnnconv.formats.registry import Probe, ReadOptions, WriteOptions, Written, register

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.canonical import CanonicalRNN, RNNSpec
    from rnnconv.contracts import Provenance


@register
class FlaxNnxFormat(_jax.TreeFormat):
    plugin = PLUGIN
    sniff_order = 46  # any other msgpack map named .msgpack: after Flax linen's variables
    kind = KIND
    cells = "flax.nnx RNN cell"
    module = "nnx.RNN(nnx.{cell})"

    def sniff(self, probe: Probe) -> bool:
        return _jax.is_map(probe.head) and probe.path.name.endswith(self.info.read_suffixes)

    def load_tree(self, path: Path) -> Mapping[Any, Any]:
        from rnnconv.formats.flax_nnx.reader import load_tree

        return load_tree(path)

    def find(self, tree: Mapping[Any, Any]) -> list[_jax.TreeRNN]:
        from rnnconv.formats.flax_nnx.reader import find

        return find(tree)

    def to_canonical(
        self, rnn: _jax.TreeRNN, path: Path, source: Provenance, options: ReadOptions | None = None
    ) -> CanonicalRNN:
        from rnnconv.formats.flax_nnx.reader import to_canonical

        return to_canonical(rnn, path, source, options)

    def run_rnn(
        self, rnn: _jax.TreeRNN, spec: RNNSpec, inputs: Mapping[str, np.ndarray | None]
    ) -> dict[str, np.ndarray | None]:
        from rnnconv.formats.flax_nnx.runner import run_tree  # the RNN's own cells, loaded into nnx's

        return run_tree(rnn, spec, inputs)

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        from rnnconv.formats.flax_nnx.writer import losses

        return losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.flax_nnx.writer import write

        return write(rnns, path, options)
