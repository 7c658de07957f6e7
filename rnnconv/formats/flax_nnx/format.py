"""The flax.nnx format's verbs (`registry.Format`), as every JAX tree of params has them (`_jax.TreeFormat`)."""

from __future__ import annotations

from pathlib import Path

from rnnconv.canonical import CanonicalRNN
from rnnconv.formats import _jax, registry
from rnnconv.formats.flax_nnx import PLUGIN
from rnnconv.formats.flax_nnx.reader import find, load_tree, to_canonical
from rnnconv.formats.flax_nnx.runner import run_tree
from rnnconv.formats.flax_nnx.wire import KIND
from rnnconv.formats.flax_nnx.writer import losses, write
from rnnconv.formats.registry import Probe, WriteOptions, Written, register


@register
class FlaxNnxFormat(_jax.TreeFormat):
    plugin = PLUGIN
    sniff_order = 46  # any other msgpack map named .msgpack: after Flax linen's variables
    kind = KIND
    cells = "flax.nnx RNN cell"
    module = "nnx.RNN(nnx.{cell})"
    load_tree = staticmethod(load_tree)
    find = staticmethod(find)
    to_canonical = staticmethod(to_canonical)
    run_rnn = staticmethod(run_tree)  # the RNN's own cells, loaded into nnx's

    def sniff(self, probe: Probe) -> bool:
        return _jax.is_map(probe.head) and probe.path.name.endswith(self.info.read_suffixes)

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        return write(rnns, path, options)
