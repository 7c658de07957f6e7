"""The OpenVINO IR format's verbs (`base.Format`); its reader, writer and runner are imported when used."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnconv.formats import writing
from rnnconv.formats._graph import GraphFormat, sizes_of
from rnnconv.formats.base import Written
from rnnconv.formats.openvino import PLUGIN
from rnnconv.formats.openvino.wire import (
    OPENVINO_C_N,
    OPENVINO_H_N,
    OPENVINO_INITIAL_C,
    OPENVINO_INITIAL_H,
    OPENVINO_LENGTHS,
    OPENVINO_QUANTIZED,
    OPENVINO_X,
    OPENVINO_Y,
    SEQUENCE_OPS,
)
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.safeio.inputs import reading
from rnnconv.table.constants import INPUT_MATRIX, LSTM

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.core.contracts import Provenance, RNNSizes
    from rnnconv.core.report_contracts import Check
    from rnnconv.formats._graph import Chain
    from rnnconv.formats.openvino.reader import IRFile, SequenceOp


@register
class OpenvinoFormat(GraphFormat["IRFile", "SequenceOp"]):
    plugin = PLUGIN
    layer_word = "op"

    def load(self, path: Path, options: ReadOptions | None = None) -> IRFile:
        from rnnconv.formats.openvino.reader import IRFile

        return IRFile(path)

    def to_canonical(
        self, graph: IRFile, chain: Chain[SequenceOp], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        if chain.first.loops:
            from rnnconv.formats.openvino.loops import loop_canonical

            return loop_canonical(chain.name, [op.loops for op in chain.layers], source, options.dequantize)
        from rnnconv.formats.openvino.reader import to_canonical

        return to_canonical(chain.layers, source, options.bias_split, options.dequantize, options.drop_clip)

    def sizes(self, graph: IRFile, chain: Chain[SequenceOp]) -> RNNSizes | None:
        if chain.first.loops:
            reading = chain.first.loops[0].reading
            if reading is None or any(op.refusal is not None for op in chain.layers):
                return None
            from rnnconv.core.canonical import RNNSpec
            from rnnconv.core.contracts import RNNSizes

            spec = RNNSpec(
                reading.mode, reading.input_size, reading.hidden, len(chain.layers), chain.first.directions == 2
            )
            etypes = {weight.etype for op in chain.layers for loop in op.loops for _, _, weight in loop.quantized}
            return RNNSizes.of(spec.to_model()).model_copy(update={"dtype": _stored(etypes) or spec.dtype})
        etypes = {weight.etype for op in chain.layers for weight in op.stored.values()}
        first = chain.first
        return (
            sizes_of("openvino", SEQUENCE_OPS[first.op], chain, _stored(etypes))
            if INPUT_MATRIX in first.weights
            else None
        )

    def notes(self, graph: IRFile) -> list[str]:
        notes = [*super().notes(graph), graph.listing(most=32)]
        origin = graph.recorded
        if origin is not None and origin.path:
            notes.append(f"written by rnnconv from {origin.path}" + (f" ({origin.layer})" if origin.layer else ""))
        return notes

    def guarded(self, graph: IRFile) -> contextlib.AbstractContextManager[Any]:
        """The weights are a source too: never written over (model.bin is also a cuDNN blob's default name), and
        watched like the .xml while they are read."""
        return reading(graph.weights_path)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.openvino.writer import write_ir

        spec = rnns[0].spec
        # OpenVINO computes in float32: narrower weights are stored as they are and decompressed by a Convert
        weights, warnings = write_ir(rnns, path, self.written_dtype(spec, options.dtype), options)
        lstm = spec.mode == LSTM
        feeds = f'"{OPENVINO_X}": x, "{OPENVINO_INITIAL_H}": h0, ' + (f'"{OPENVINO_INITIAL_C}": c0, ' if lstm else "")
        states = "h0 and c0" if lstm else "h0"
        return Written(
            [path, weights],
            warnings,
            # as `run_ir` runs it: static shapes (with dynamic ones the CPU plugin ignores sequence_lens) and f32
            # (its default is bf16 on CPUs with bfloat16 units: 1e-3 off)
            usage=f"import openvino\ncore = openvino.Core(); model = core.read_model({writing.literal(path)})\n"
            f'feeds = {{{feeds}"{OPENVINO_LENGTHS}": lengths}}   # x (batch, seq, {spec.input_size}), {states} '
            f"({spec.num_layers * spec.num_directions}, batch, {spec.hidden_size}), lengths (batch,) int32\n"
            "model.reshape({name: list(value.shape) for name, value in feeds.items()})   # static shapes: "
            "with dynamic ones the CPU plugin ignores sequence_lens\n"
            'compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})   # its default is '
            "bf16 on CPUs with bfloat16 units\n"
            f'y = compiled(feeds)["{OPENVINO_Y}"]   # (batch, seq, {spec.num_directions * spec.hidden_size}); '
            f'also "{OPENVINO_H_N}"' + (f', "{OPENVINO_C_N}"' if lstm else ""),
        )

    def deployed_check(
        self, path: Path, source: Provenance, spec: RNNSpec, bound: float, config: Mapping[str, Any]
    ) -> Check | None:
        """An nncf IR's own graph as the CPU plugin compiles it where it is deployed (`config`; empty: its defaults),
        against its f32 run (`runner.as_deployed`): only a quantized file's sequence ops take the plugin's
        low-precision path, and only they are checked unless `config` is given."""
        if source.dequantized is None and not config:
            return None
        from rnnconv.formats.openvino.runner import as_deployed

        return as_deployed(path, spec.input_size, bound, config)

    def run_chain(
        self,
        graph: IRFile,
        chain: Chain[SequenceOp],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own graph (one rnnconv wrote), or its sequence ops with their own weights and attributes,
        run in OpenVINO's CPU plugin; a Loop's body's cell, compiled by OpenVINO from the file, a step at a time."""
        if chain.first.loops:
            from rnnconv.formats._cells import run_loops
            from rnnconv.formats.openvino.runner import compiled_cells

            cells, how = compiled_cells(graph, chain)
            return run_loops(cells, spec, inputs, f"an OpenVINO {chain.first.op}"), how
        from rnnconv.formats.openvino.runner import run_ops

        return run_ops(graph, chain, spec, inputs, source.layer)


def _stored(etypes: set[str]) -> str | None:
    """The integer types a chain's weights are quantized to, as numpy names them (None: none quantized)."""
    return "/".join(sorted({OPENVINO_QUANTIZED[etype] for etype in etypes})) or None
