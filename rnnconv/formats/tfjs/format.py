"""The TensorFlow.js format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is
used."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import writing
from rnnconv.formats._graph import GraphFormat
from rnnconv.formats.base import Written
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.tfjs import PLUGIN
from rnnconv.safeio.inputs import reading

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.core.contracts import Provenance
    from rnnconv.formats._graph import Chain
    from rnnconv.formats.tfjs.reader import TfjsFile, TfjsLayer
    from rnnconv.formats.tfjs.runner import NodeEngine, TfjsStream


@register
class TfjsFormat(GraphFormat["TfjsFile", "TfjsLayer"]):
    plugin = PLUGIN
    layer_word = "layer"

    def make_engine(self, name: str | None = None) -> NodeEngine | None:
        from rnnconv.formats.tfjs.runner import NodeEngine

        info = self.engine_info(name)
        return None if info is None else NodeEngine(self, info)

    def load(self, path: Path, options: ReadOptions | None = None) -> TfjsFile:
        from rnnconv.formats.tfjs.reader import TfjsFile

        return TfjsFile.load(path)

    def guarded(self, graph: TfjsFile) -> contextlib.AbstractContextManager[Any]:
        """The shards are sources too: never written over, and watched like model.json while they are read."""
        stack = contextlib.ExitStack()
        for shard in graph.shards:
            stack.enter_context(reading(shard))
        return stack

    def to_canonical(
        self, graph: TfjsFile, chain: Chain[TfjsLayer], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        from rnnconv.formats.tfjs.reader import to_canonical

        return to_canonical(chain, source, graph)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.tfjs.writer import loading_snippet, write_tfjs

        rnn = writing.only_rnn(rnns, "a TensorFlow.js model")
        shard = write_tfjs(rnn, path, options.force, options.streaming)
        return Written([path, shard], usage=loading_snippet(rnn, path, options.streaming))

    def stream(self, path: Path, runtime: str) -> TfjsStream:
        from rnnconv.formats.tfjs.runner import TfjsStream

        return TfjsStream(path)

    def run_chain(
        self,
        graph: TfjsFile,
        chain: Chain[TfjsLayer],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own layers, loaded and run by TensorFlow.js under Node.js (its CPU backend)."""
        from rnnconv.formats.tfjs.runner import refuse_never_loading, require_tfjs, run_layers

        refuse_never_loading(graph)
        for layer in chain.layers:
            if layer.refusal:
                raise Unsupported(layer.refusal)
        if (chain.first.input_size, len(chain.layers), chain.first.directions) != (
            spec.input_size,
            spec.num_layers,
            spec.num_directions,
        ):
            raise BadInput(
                f"the layers {source.layer} of {graph.path} are not the RNN the blob describes ({spec.describe()})"
            )
        _, version = require_tfjs()
        out = run_layers(graph.path, chain, inputs)
        return out, f"@tensorflow/tfjs {version} (Node.js, CPU backend): the model's {chain.first.shown_class} layer(s)"
