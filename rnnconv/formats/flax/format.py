"""The Flax linen format's verbs (`registry.Format`), as every JAX tree of params has them (`_jax.TreeFormat`)."""

from __future__ import annotations

from pathlib import Path

from rnnconv.canonical import CanonicalRNN
from rnnconv.formats import _jax, registry
from rnnconv.formats.flax import PLUGIN
from rnnconv.formats.flax.reader import find, is_variables, load_tree, to_canonical
from rnnconv.formats.flax.runner import run_rnn
from rnnconv.formats.flax.wire import KIND
from rnnconv.formats.flax.writer import write
from rnnconv.formats.registry import Probe, WriteOptions, Written, register


@register
class FlaxFormat(_jax.TreeFormat):
    plugin = PLUGIN
    sniff_order = 45  # a msgpack map with a params collection; before flax-nnx, whose trees have none
    kind = KIND
    cells = "Flax RNN cell"
    module = "nn.RNN(nn.{cell})"
    load_tree = staticmethod(load_tree)
    find = staticmethod(find)
    to_canonical = staticmethod(to_canonical)
    run_rnn = staticmethod(run_rnn)

    def sniff(self, probe: Probe) -> bool:
        return is_variables(probe.head)

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return _jax.projection_losses(rnn, self.title)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        return write(rnns, path, options)
