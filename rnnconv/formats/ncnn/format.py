"""The ncnn format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.errors import BadInput
from rnnconv.formats import writing
from rnnconv.formats._graph import GraphFormat, refuse
from rnnconv.formats.base import Written
from rnnconv.formats.ncnn import PLUGIN
from rnnconv.formats.ncnn.wire import IN, NARROW_OPTIONS, OUT, bin_of
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.table.constants import LSTM

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.core.contracts import Provenance
    from rnnconv.formats._graph import Chain
    from rnnconv.formats.ncnn.reader import Layer, NcnnFile


@register
class NcnnFormat(GraphFormat["NcnnFile", "Layer"]):
    plugin = PLUGIN
    layer_word = "layer"

    def load(self, path: Path, options: ReadOptions | None = None) -> NcnnFile:
        from rnnconv.formats.ncnn.reader import NcnnFile

        return NcnnFile.load(path, source=options is not None)

    def to_canonical(
        self, graph: NcnnFile, chain: Chain[Layer], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        from rnnconv.formats.ncnn.reader import to_canonical

        return to_canonical(chain.layers, graph, source)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.ncnn.writer import write_ncnn

        rnn = writing.only_rnn(rnns, "an ncnn model")
        spec = rnn.spec
        dtype = self.written_dtype(spec, options.dtype)
        outputs = write_ncnn(rnn, path, dtype, options.force)
        states = f"h0_0 ({spec.num_directions}, {spec.output_size})" + (
            f", c0_0 ({spec.num_directions}, {spec.hidden_size})" if spec.cell == LSTM else ""
        )
        # float32 throughout, as `run_model` runs it: ncnn stores and computes in fp16 where the CPU can
        usage = (
            "import ncnn\nnet = ncnn.Net()\n"
            + " = ".join(f"net.opt.{option}" for option in NARROW_OPTIONS)
            + " = False\n"
            f"net.load_param({writing.literal(path)}); net.load_model({writing.literal(bin_of(path))})\n"
            f'ex = net.create_extractor(); ex.input("{IN}", ncnn.Mat(x)); code, y = ex.extract("{OUT}")'
            f"   # x (T, {spec.input_size}) float32, one sequence; y (T, {spec.num_directions * spec.output_size}); "
            f"optional inputs {states}, h0_1, ... for each layer"
        )
        return Written(outputs, usage=usage)

    def run_chain(
        self,
        graph: NcnnFile,
        chain: Chain[Layer],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own layers, their params and weight bytes as stored, in ncnn, one sequence at a time."""
        from rnnconv.formats.ncnn.reader import why_refused
        from rnnconv.formats.ncnn.runner import require_ncnn, run_model, source_layers

        refuse(chain.layers, why_refused)
        first = chain.first
        if (first.input_size, len(chain.layers), first.directions) != (
            spec.input_size,
            spec.num_layers,
            spec.num_directions,
        ):
            raise BadInput(f"the ncnn layers {source.layer} are not the RNN the blob describes ({spec.describe()})")
        ncnn = require_ncnn()
        how = f"ncnn {ncnn.__version__} (CPU): the file's own {first.type} layer(s), one sequence at a time"
        return run_model(source_layers(graph, chain.layers), inputs), how
