"""The ONNX format's verbs (`registry.Format`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import Provenance, RNNSizes
from rnnconv.formats import registry
from rnnconv.formats._graph import Chain, GraphFormat, sizes_of
from rnnconv.formats.onnx import PLUGIN
from rnnconv.formats.onnx.nodes import RNN_OPS, OnnxNode
from rnnconv.formats.onnx.reader import OnnxFile, to_canonical
from rnnconv.formats.onnx.runner import OnnxStream, run_nodes
from rnnconv.formats.onnx.writer import onnx_losses, write_onnx
from rnnconv.formats.registry import Probe, ReadOptions, WriteOptions, Written, register
from rnnconv.streaming import streaming_usage
from rnnconv.table.constants import LSTM

PROTOBUF_FIRST_FIELD = b"\x08"  # a ModelProto begins with ir_version: field 1, a varint


@register
class OnnxFormat(GraphFormat[OnnxFile, OnnxNode]):
    plugin = PLUGIN
    sniff_order = 60  # a protobuf has no magic number: after every format that has one
    layer_word = "node"

    def sniff(self, probe: Probe) -> bool:
        return probe.head.startswith(PROTOBUF_FIRST_FIELD) and probe.path.suffix.lower() == ".onnx"

    def load(self, path: Path, options: ReadOptions | None = None) -> OnnxFile:
        return OnnxFile.load(path, options is not None and options.dequantize)

    def to_canonical(
        self, graph: OnnxFile, chain: Chain[OnnxNode], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        return to_canonical(chain.layers, source)

    def sizes(self, graph: OnnxFile, chain: Chain[OnnxNode]) -> RNNSizes | None:
        return sizes_of("onnx", RNN_OPS[chain.first.op], chain) if chain.first.sized else None

    def notes(self, graph: OnnxFile) -> list[str]:
        return super().notes(graph) + graph.same_weights_notes()

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return onnx_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        dtype = options.dtype or "float32"  # onnxruntime's CPU RNN kernels compute float32
        write_onnx(rnns, path, dtype, options.force, options.streaming)
        spec = rnns[0].spec
        if options.streaming:
            return Written([path], usage=streaming_usage(spec, "onnxruntime", registry.literal(path)))
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

    def stream(self, path: Path, runtime: str) -> OnnxStream:
        return OnnxStream(path)

    def run_chain(
        self,
        graph: OnnxFile,
        chain: Chain[OnnxNode],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The source's own nodes, weights and attributes as they are in the file, run in onnxruntime."""
        return run_nodes(chain.layers, spec, inputs, source.layer)
