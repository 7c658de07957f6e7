"""The flax.nnx format's verbs (`base.Format`), as every JAX tree of params has them (`_jax.TreeFormat`); its
reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.formats import _jax, writing
from rnnconv.formats.base import Written
from rnnconv.formats.flax_nnx import PLUGIN
from rnnconv.formats.flax_nnx.wire import KIND, ORBAX_KIND
from rnnconv.formats.registry import register
from rnnconv.formats.settings import WriteOptions

if TYPE_CHECKING:
    from rnnconv.core.canonical import CanonicalRNN


@register
class FlaxNnxFormat(_jax.TreeFormat):
    plugin = PLUGIN
    kind = KIND
    orbax_kind = ORBAX_KIND
    cells = "flax.nnx RNN cell"
    module = "nnx.RNN(nnx.{cell})"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.flax_nnx.writer import write

        rnn = writing.only_rnn(rnns, "a flax.nnx file")
        return write(rnn, path, self.written_dtype(rnn.spec, options.dtype), options.force)
