"""The ONNX format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.formats import base, writing
from rnnconv.formats._graph import GraphFormat, sizes_of
from rnnconv.formats.base import Written
from rnnconv.formats.onnx import PLUGIN
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.table.constants import LSTM

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.core.contracts import Provenance, RNNSizes
    from rnnconv.formats._graph import Chain
    from rnnconv.formats.onnx.nodes import OnnxNode
    from rnnconv.formats.onnx.reader import OnnxFile
    from rnnconv.formats.onnx.runner import OnnxStream

PROTOBUF_FIRST_FIELD = b"\x08"  # a ModelProto begins with ir_version: field 1, a varint


@register
class OnnxFormat(GraphFormat["OnnxFile", "OnnxNode"]):
    plugin = PLUGIN
    layer_word = "node"

    def make_engine(self, name: str | None = None) -> base.RuntimeEngine | None:
        if name != "mnn":
            return super().make_engine(name)
        from rnnconv.formats.onnx.mnn import MnnEngine  # MNN's converter and runtime: a blob run its own way

        info = self.engine_info(name)
        return None if info is None else MnnEngine(self, info)

    def load(self, path: Path, options: ReadOptions | None = None) -> OnnxFile:
        from rnnconv.formats.onnx.reader import OnnxFile

        return OnnxFile.load(path, options is not None and options.dequantize)

    def to_canonical(
        self, graph: OnnxFile, chain: Chain[OnnxNode], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        from rnnconv.formats.onnx.reader import to_canonical

        return to_canonical(chain.layers, source, options.drop_clip)

    def sizes(self, graph: OnnxFile, chain: Chain[OnnxNode]) -> RNNSizes | None:
        from rnnconv.formats.onnx.nodes import RNN_OPS

        first = chain.first
        return sizes_of("onnx", RNN_OPS[first.op], chain, first.quantized_type) if first.sized else None

    def notes(self, graph: OnnxFile) -> list[str]:
        looped = graph.loop_note()
        return super().notes(graph) + graph.same_weights_notes() + ([f"{graph.path.name}: {looped}"] if looped else [])

    def broken_limits(self, path: Path, consumer: str) -> list[str]:
        from rnnconv.formats.onnx.profile import broken_in_file

        return broken_in_file(path, consumer)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.onnx.writer import write_onnx

        dtype = self.written_dtype(rnns[0].spec, options.dtype)
        warnings = write_onnx(rnns, path, dtype, options.force, options.profile, options.streaming, options.quantize)
        spec = rnns[0].spec
        # the CPU provider, as `run_model` runs it: another (CUDA's, where installed) computes other numbers
        session = (
            f"import numpy as np\nimport onnxruntime\nsession = onnxruntime.InferenceSession("
            f'{writing.literal(path)}, providers=["CPUExecutionProvider"])'
        )
        if options.streaming:
            from rnnconv.formats.streaming import stream_contract

            return Written(
                [path],
                usage=f"{session}   # {stream_contract(spec)}\n"
                f"states = {{given.name: np.zeros((len(x), given.shape[-1]), np.{dtype}) for given in "
                "session.get_inputs()[1:]}   # zeros to start\n"
                'y, *next_states = session.run(None, {"x": x, **states})   # the next call: states = '
                "dict(zip(states, next_states))",
            )
        lstm = spec.mode == LSTM
        states = '"initial_h": h0' + (', "initial_c": h0' if lstm else "")
        outputs = "y, h_n" + (", c_n" if lstm else "")
        depth, dirs = spec.num_layers * spec.num_directions, spec.num_directions
        return Written(
            [path],
            usage=f"{session}\nh0 = np.zeros(({depth}, x.shape[1], {spec.hidden_size}), np.{dtype})   # initial "
            f"states: every layer's, in cuDNN's order\n{outputs} = session.run(None, {{\"X\": x, {states}}})   # x "
            f"(seq, batch, {spec.input_size}) {dtype}, y (seq, batch, {dirs * spec.output_size})",
            warnings=warnings,
        )

    def stream(self, path: Path, runtime: str) -> OnnxStream:
        from rnnconv.formats.onnx.runner import OnnxStream

        return OnnxStream(path)

    def run_chain(
        self,
        graph: OnnxFile,
        chain: Chain[OnnxNode],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The source's own nodes, weights and attributes as they are in the file, run in onnxruntime; Loops stepping
        a cell run step by step, each step their bodies' own cell nodes run in onnxruntime."""
        if chain.first.loops:
            from rnnconv.formats._cells import run_loops
            from rnnconv.formats.onnx.reader import to_canonical
            from rnnconv.formats.onnx.runner import compiled_cells

            to_canonical(chain.layers, source)  # refuses what it cannot compare
            cells, how = compiled_cells(graph.path, chain.layers)
            return run_loops(cells, spec, inputs, "an ONNX Loop"), how
        from rnnconv.formats.onnx.runner import run_nodes

        return run_nodes(chain.layers, spec, inputs, source.layer)
