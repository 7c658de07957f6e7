"""The TFLite format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.errors import BadInput
from rnnconv.formats import holding, writing
from rnnconv.formats._graph import GraphFormat
from rnnconv.formats.base import Written
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.tflite import PLUGIN
from rnnconv.formats.tflite.wire import (
    TFLITE_CELL_OPS,
    TFLITE_INPUT,
    TFLITE_OUTPUT,
    TFLITE_STATE_INPUTS,
    TFLITE_STATE_NAME,
    TFLITE_STATES,
)

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.core.contracts import Provenance, RNNSizes
    from rnnconv.formats._graph import Chain
    from rnnconv.formats.holding import Loss
    from rnnconv.formats.tflite.model import Layer, TfliteFile
    from rnnconv.formats.tflite.runner import TfliteEngine, TfliteStream


@register
class TfliteFormat(GraphFormat["TfliteFile", "Layer"]):
    plugin = PLUGIN
    layer_word = "layer"
    layers_alone = False  # a layer is named by the tensor it gives: inspect lists the RNNs

    def make_engine(self, name: str | None = None) -> TfliteEngine | None:
        from rnnconv.formats.tflite.runner import TfliteEngine

        info = self.engine_info(name)
        return None if info is None else TfliteEngine(self, info)

    def load(self, path: Path, options: ReadOptions | None = None) -> TfliteFile:
        from rnnconv.formats.tflite.model import TfliteFile

        return TfliteFile.load(path, options is not None and options.dequantize)

    def to_canonical(
        self, graph: TfliteFile, chain: Chain[Layer], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        from rnnconv.formats.tflite.reader import to_canonical

        return to_canonical(graph, chain, source, options.drop_clip)

    def sizes(self, graph: TfliteFile, chain: Chain[Layer]) -> RNNSizes | None:
        from rnnconv.formats.tflite.reader import chain_sizes

        return chain_sizes(graph, chain)

    def chain_note(self, chain: Chain[Layer]) -> str | None:
        ops = [op for layer in chain.layers for op in layer.ops]
        if len(ops) == 1:
            return None
        return f"{chain.name}: ops {', '.join(str(op.index) for op in ops)} are the layers and directions of one RNN"

    def notes(self, graph: TfliteFile) -> list[str]:
        return [f"operators: {graph.op_listing() or 'none'}", *super().notes(graph)]

    def streaming_losses(self, rnn: CanonicalRNN) -> list[Loss]:
        # a streaming model's plain ops compute every cell cuDNN computes, a GRU and a projection among them
        held = rnn.spec.reset_after
        return [] if held else [holding.Loss(holding.reset_before_term(f"{self.title} streaming model"))]

    def stream(self, path: Path, runtime: str) -> TfliteStream:
        from rnnconv.formats.tflite.runner import TfliteStream

        return TfliteStream(path, runtime)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.tflite.writer import write_tflite

        rnn, warnings = write_tflite(rnns, path, options)
        spec = rnn.spec
        interpreter = (
            f"from ai_edge_litert.interpreter import Interpreter\ninterpreter = Interpreter({writing.literal(path)})"
        )
        if options.streaming:
            from rnnconv.formats.streaming import stream_contract

            usage = (
                f"import numpy as np\n{interpreter}   # {stream_contract(spec, options.chunk or 1)}, for LiteRT or "
                "TFLite Micro\ninputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()\n"
                "for given in inputs:   # the file's batch is 1: resized to x's\n"
                '    interpreter.resize_tensor_input(given["index"], [len(x), *given["shape"][1:]])\n'
                "interpreter.allocate_tensors()\n"
                'states = [np.zeros((len(x), given["shape"][-1]), np.float32) for given in inputs[1:]]   # zeros to '
                "start\nfor given, value in zip(inputs, [x, *states]):\n"
                '    interpreter.set_tensor(given["index"], value)\n'
                "interpreter.invoke()\n"
                'y, *states = [interpreter.get_tensor(given["index"]) for given in outputs]   # and the next call\'s '
                "states"
            )
            return Written([path], usage=usage)
        prefixes = [  # h_l, c_l: every layer's and direction's states begin so
            TFLITE_STATE_NAME.format(state=state, layer="", suffix="")
            for state in TFLITE_STATES[: len(TFLITE_STATE_INPUTS[TFLITE_CELL_OPS[spec.cell]])]
        ]
        states = "(" + ", ".join(json.dumps(prefix) for prefix in prefixes) + ",)"
        usage = (
            f'{interpreter}\ntensors = {{t["name"]: t for t in interpreter.get_tensor_details()}}\n'
            f"states = [t for name, t in tensors.items() if name.startswith({states})]   # the ops' variable "
            "tensors h_l0, ..., not inputs: zeros after allocate_tensors, set_tensor them to start elsewhere\n"
            f'interpreter.resize_tensor_input(tensors["{TFLITE_INPUT}"]["index"], x.shape)   # x (batch, steps, '
            f"{spec.input_size}) float32\nfor state in states:\n"
            '    interpreter.resize_tensor_input(state["index"], [len(x), state["shape"][-1]])\n'
            f'interpreter.allocate_tensors(); interpreter.set_tensor(tensors["{TFLITE_INPUT}"]["index"], x); '
            f'interpreter.invoke()\ny = interpreter.get_tensor(tensors["{TFLITE_OUTPUT}"]["index"])   # (batch, '
            f"steps, {spec.num_directions * spec.output_size}); the final states: get_tensor each of states"
        )
        return Written([path], usage=usage, warnings=warnings)

    def run_chain(
        self,
        graph: TfliteFile,
        chain: Chain[Layer],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own ops, their weights and options as stored, in LiteRT's interpreter; WHILE loops stepping a
        cell run step by step, each step their bodies' own cell ops in LiteRT."""
        from rnnconv.formats.tflite.reader import to_canonical
        from rnnconv.formats.tflite.runner import graph_of_file, litert_version, run_graph

        graph.dequantize = True  # its quantized weights run as stored; the reading below only checks the ops
        if chain.first.loops:
            from rnnconv.formats._cells import run_loops
            from rnnconv.formats.tflite.runner import compiled_cells

            to_canonical(graph, chain, source)  # refuses what it cannot compare
            cells, how = compiled_cells(chain)
            return run_loops(cells, spec, inputs, "a TFLite WHILE loop"), how
        rnn = to_canonical(graph, chain, source, source.loss is not None)  # refuses what it cannot compare
        if (rnn.spec.input_size, rnn.spec.num_layers) != (spec.input_size, spec.num_layers):
            raise BadInput(f"the TFLite ops {chain.name} are not the RNN the blob describes ({spec.describe()})")
        first = chain.first.op
        how = f"ai-edge-litert {litert_version()}: the file's own {first.title} op(s)"
        if first.shown:  # a bidirectional op's two directions, run as the unidirectional ops they compute
            how += f", each direction as an {first.name}"
        if rnn.source.dequantized is not None:
            how += " (int8 weights, inputs quantized at run time: the blob is its dequantized float model)"
        return run_graph(graph_of_file(graph, chain), inputs), how
