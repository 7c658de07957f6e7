"""The TFLite format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.errors import BadInput
from rnnconv.formats import registry
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.formats.tflite import PLUGIN
from rnnconv.formats.tflite.model import TfliteFile
from rnnconv.formats.tflite.reader import chain_sizes, to_canonical
from rnnconv.formats.tflite.runner import TfliteEngine, graph_of_file, litert_version, run_graph
from rnnconv.formats.tflite.wire import (
    FORMAT,
    TFLITE_CELL_OPS,
    TFLITE_IDENTIFIER,
    TFLITE_STATE_INPUTS,
    TFLITE_STATE_NAME,
    TFLITE_STATES,
)
from rnnconv.formats.tflite.writer import tflite_losses, write_tflite
from rnnconv.safeio.digests import digest_in_background


@register
class TfliteFormat(Format):
    plugin = PLUGIN
    sniff_order = 20
    engine_class = TfliteEngine

    def sniff(self, probe: Probe) -> bool:
        return probe.head[4:8] == TFLITE_IDENTIFIER

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = TfliteFile.load(path)
        info = Provenance(path=str(path.resolve()), format=FORMAT)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains, lambda chain: to_canonical(file, chain, info), lambda chain: chain.name, digest
        )
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return tflite_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = write_tflite(rnns, path, options)
        spec = rnn.spec
        states = ", ".join(
            TFLITE_STATE_NAME.format(state=state, layer=0, suffix="")
            for state in TFLITE_STATES[: len(TFLITE_STATE_INPUTS[TFLITE_CELL_OPS[spec.cell]])]
        )
        return Written(
            [path],
            usage="from ai_edge_litert.interpreter import Interpreter\n"
            f"interpreter = Interpreter({registry.literal(path)})   # resize x to (batch, steps, {spec.input_size}) "
            f"and the states ({states}, ...) to (batch, size), allocate_tensors, set x, invoke, read y "
            f"(batch, steps, {spec.num_directions * spec.output_size})",
        )

    def inspect(self, path: Path) -> InspectReport:
        file = TfliteFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                chain.name,
                chain.first.title,
                functools.partial(to_canonical, file, chain, provenance),
                functools.partial(chain_sizes, file, chain),
            )
            for chain in file.chains
        ]
        notes = [f"operators: {file.op_listing() or 'none'}"]
        notes += [
            f"{chain.name}: ops {', '.join(str(op.index) for layer in chain.layers for op in layer.ops)} are the "
            f"layers and directions of one RNN"
            for chain in file.chains
            if sum(len(layer.ops) for layer in chain.layers) > 1
        ]
        return InspectReport(path=str(path), format=FORMAT, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == FORMAT:
            return recorded
        file = TfliteFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": chain.name, "format": FORMAT})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own ops, their weights and options as stored, in LiteRT's interpreter."""
        file = TfliteFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        rnn = to_canonical(file, chain, source)  # refuses what it cannot compare
        if (rnn.spec.input_size, rnn.spec.num_layers) != (spec.input_size, spec.num_layers):
            raise BadInput(f"the TFLite ops {chain.name} are not the RNN the blob describes ({spec.describe()})")
        how = f"ai-edge-litert {litert_version()}: the file's own {chain.first.title} op(s)"
        if chain.first.shown:  # a bidirectional op's two directions, run as the unidirectional ops they compute
            how += f", each direction as an {chain.first.name}"
        return run_graph(graph_of_file(file, chain), inputs), how
