"""The ONNX format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.formats import registry
from rnnconv.formats.onnx import PLUGIN
from rnnconv.formats.onnx.reader import OnnxFile, chain_sizes, to_canonical
from rnnconv.formats.onnx.runner import run_nodes
from rnnconv.formats.onnx.writer import onnx_losses, write_onnx
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio.digests import digest_in_background
from rnnconv.table.constants import LSTM

PROTOBUF_FIRST_FIELD = b"\x08"  # a ModelProto begins with ir_version: field 1, a varint


@register
class OnnxFormat(Format):
    plugin = PLUGIN
    sniff_order = 60  # a protobuf has no magic number: after every format that has one

    def sniff(self, probe: Probe) -> bool:
        return probe.head.startswith(PROTOBUF_FIRST_FIELD) and probe.path.suffix.lower() == ".onnx"

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = OnnxFile.load(path, options.dequantize)
        info = Provenance(path=str(path.resolve()), format="onnx")
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains,
            lambda chain: to_canonical(chain, info),
            lambda chain: ",".join(n.name for n in chain),
            digest,
            file.recorded,
        )
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return onnx_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        dtype = options.dtype or "float32"  # onnxruntime's CPU RNN kernels compute float32
        write_onnx(rnns, path, dtype, options.force)
        spec = rnns[0].spec
        lstm = spec.mode == LSTM
        states = "initial_h" + (", initial_c" if lstm else "")
        outputs = "y, h_n" + (", c_n" if lstm else "")
        # the CPU provider, as `run_model` runs it: another (CUDA's, where installed) computes other numbers
        return Written(
            [path],
            usage=f"import onnxruntime\nsession = onnxruntime.InferenceSession({registry.literal(path)}, "
            'providers=["CPUExecutionProvider"])\n'
            f'{outputs} = session.run(None, {{"X": x}})   # x (seq, batch, {spec.input_size}) {dtype}, y (seq, '
            f"batch, {spec.num_directions * spec.output_size}); states ({spec.num_layers * spec.num_directions}, "
            f"batch, ...); optional inputs: {states}",
        )

    def inspect(self, path: Path) -> InspectReport:
        file = OnnxFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                ",".join(n.name for n in group),
                group[0].shown_class,
                functools.partial(to_canonical, group, provenance),
                functools.partial(chain_sizes, group),
            )
            for group in registry.inspected_groups(file.nodes, file.chains)
        ]
        notes = [
            f"nodes {', '.join(n.name for n in chain)} are the layers of one RNN"
            for chain in file.chains
            if len(chain) > 1
        ]
        return InspectReport(path=str(path), format="onnx", rnns=entries, notes=notes + file.same_weights_notes())

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == "onnx":
            return recorded
        file = OnnxFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": ",".join(n.name for n in chain), "format": "onnx"})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The source's own nodes, weights and attributes as they are in the file, run in onnxruntime."""
        (chain,) = OnnxFile.load(path).choose(source.layer, take_all=False)
        return run_nodes(chain, spec, inputs, source.layer)
