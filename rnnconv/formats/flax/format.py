"""The Flax linen format's verbs (`base.Format`), as every JAX tree of params has them (`_jax.TreeFormat`); its
reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.formats import _jax, writing
from rnnconv.formats.base import Written
from rnnconv.formats.flax import PLUGIN
from rnnconv.formats.flax.wire import FLAX_PARAMS, KIND, ORBAX_KIND, orbax_checkpoint
from rnnconv.formats.probe import Probe
from rnnconv.formats.registry import register
from rnnconv.formats.settings import WriteOptions

if TYPE_CHECKING:
    from rnnconv.core.canonical import CanonicalRNN


@register
class FlaxFormat(_jax.TreeFormat):
    plugin = PLUGIN
    kind = KIND
    orbax_kind = ORBAX_KIND
    cells = "Flax RNN cell"
    module = "nn.RNN(nn.{cell})"

    def claims(self, probe: Probe) -> bool:
        """An Orbax checkpoint is a linen model's variables where its tree has a params collection (else nnx's)."""
        if not orbax_checkpoint(probe):
            return True
        from rnnconv.formats._orbax import top_keys

        return FLAX_PARAMS in top_keys(probe.path)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.flax.writer import write

        rnn = writing.only_rnn(rnns, "a Flax file")
        return write(rnn, path, self.written_dtype(rnn.spec, options.dtype), options.force)
