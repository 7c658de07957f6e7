"""The TensorFlow.js format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import Provenance
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats import _node, registry
from rnnconv.formats._graph import Chain, GraphFormat
from rnnconv.formats.registry import Probe, ReadOptions, WriteOptions, Written, register
from rnnconv.formats.tfjs import PLUGIN
from rnnconv.formats.tfjs.reader import TfjsFile, TfjsLayer, sniff, to_canonical
from rnnconv.formats.tfjs.runner import require_tfjs, run_layers
from rnnconv.formats.tfjs.writer import loading_snippet, tfjs_losses, write_tfjs
from rnnconv.safeio.inputs import reading


class NodeEngine(registry.RuntimeEngine):
    """The tfjs engine: its runtime is Node.js and an npm package, found as the runner finds them, not imported."""

    def versions(self) -> dict[str, str]:
        node, version = require_tfjs()
        return {"node": _node.node_version() or node, "@tensorflow/tfjs": version}

    def missing(self, what: str) -> str | None:
        try:
            require_tfjs()
        except BackendMissing as exc:
            return f"running {what} {str(exc).removeprefix('running a TensorFlow.js model ')}"
        return None


@register
class TfjsFormat(GraphFormat[TfjsFile, TfjsLayer]):
    plugin = PLUGIN
    layer_word = "layer"
    engine_class = NodeEngine

    def sniff(self, probe: Probe) -> bool:
        return sniff(probe.path, probe.head)

    def load(self, path: Path, options: ReadOptions | None = None) -> TfjsFile:
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
        return to_canonical(chain, source, graph)

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return tfjs_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = registry.only_rnn(rnns, "a TensorFlow.js model")
        if options.dtype not in (None, "float32"):
            raise Unsupported(f"TensorFlow.js layers models hold float32 weights, not {options.dtype}")
        warnings = []
        if rnn.spec.dtype == "float64":
            warnings.append(f"{rnn.name}: written as float32, what TensorFlow.js computes with, from float64")
        shard = write_tfjs(rnn, path, options.force)
        return Written([path, shard], warnings, loading_snippet(rnn, path))

    def run_chain(
        self,
        graph: TfjsFile,
        chain: Chain[TfjsLayer],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own layers, loaded and run by TensorFlow.js under Node.js (its CPU backend)."""
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
