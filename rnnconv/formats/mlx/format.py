"""The MLX format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.errors import BadInput, RnnconvError, Unsupported, first_line
from rnnconv.formats import writing
from rnnconv.formats._graph import GraphFormat
from rnnconv.formats.base import Written
from rnnconv.formats.mlx import PLUGIN
from rnnconv.formats.mlx.wire import MLX_CLASSES
from rnnconv.formats.probe import Damaged
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.table.constants import LSTM

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.core.contracts import Provenance
    from rnnconv.formats._graph import Chain
    from rnnconv.formats.mlx.reader import MlxFile, Module
    from rnnconv.formats.probe import Probe


@register
class MlxFormat(GraphFormat["MlxFile", "Module"]):
    plugin = PLUGIN

    def claims(self, probe: Probe) -> bool:
        """A safetensors or .npz whose parameter names are those of MLX's RNN modules (any others: PyTorch's, ...)."""
        try:
            file = self.load(probe.path)
        except Damaged:  # told as every reader of a safetensors tells it, not as some other format's file
            raise
        except RnnconvError:
            return False
        return bool(file.layers)

    def load(self, path: Path, options: ReadOptions | None = None) -> MlxFile:
        from rnnconv.formats.mlx.reader import MlxFile

        return MlxFile.load(path)

    def to_canonical(
        self, graph: MlxFile, chain: Chain[Module], source: Provenance, options: ReadOptions
    ) -> CanonicalRNN:
        from rnnconv.formats.mlx.reader import MlxChain, to_canonical

        assert isinstance(chain, MlxChain)
        return to_canonical(chain, source, options.nonlinearity, graph)

    def chain_note(self, chain: Chain[Module]) -> str | None:
        if len(chain.layers) == 1:
            return None
        return f"modules {', '.join(m.name for m in chain.layers)} are the layers and directions of one RNN"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.mlx.writer import constructor, write_mlx

        rnn = writing.only_rnn(rnns, "an MLX file")
        spec = rnn.spec
        write_mlx(rnn, path, self.written_dtype(spec, options.dtype), options.force)
        usage = "import mlx.core as mx, mlx.nn as nn\nmx.set_default_device(mx.cpu)   # as verify runs it\n"
        usage += f"model = {constructor(spec)}; model.load_weights({writing.literal(path)})"
        if spec.num_layers == 1 and not spec.bidirectional:
            outputs = "y, c" if spec.cell == LSTM else "y"
            usage += f"\n{outputs} = model(x)   # x (batch, time, {spec.input_size}), y (batch, time, "
            usage += f"{spec.hidden_size})"
        elif spec.num_layers > 1 and not spec.bidirectional:
            usage += "   # Stack: the README's module, a list `layers` each feeding the next"
        elif spec.bidirectional:
            usage += "   # Stack: the README's module, [forward, backward] modules"
        return Written([path], usage=usage)

    def run_chain(
        self,
        graph: MlxFile,
        chain: Chain[Module],
        source: Provenance,
        spec: RNNSpec,
        inputs: dict[str, np.ndarray | None],
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own modules in MLX (CPU)."""
        from rnnconv.formats._zip import ZIP_ERRORS
        from rnnconv.formats.mlx.reader import MlxChain
        from rnnconv.formats.mlx.runner import require_mlx, run_modules

        assert isinstance(chain, MlxChain)
        for module in chain.layers:
            if module.refusal:
                raise Unsupported(module.refusal)
        if (chain.first.input_size, len(chain.pairs), chain.directions) != (
            spec.input_size,
            spec.num_layers,
            spec.num_directions,
        ):
            raise BadInput(f"the MLX modules {source.layer} are not the RNN the blob describes ({spec.describe()})")
        mx, _ = require_mlx()
        try:
            out = run_modules(graph.path, chain, spec.mode, inputs)
        except (RuntimeError, *ZIP_ERRORS) as exc:  # MLX reads an .npz with zipfile, which checks each CRC-32
            raise BadInput(f"MLX cannot run {graph.path}: {first_line(exc)}") from None
        return out, f"mlx {mx.__version__} (CPU): the file's mlx.nn.{MLX_CLASSES[chain.first.cell]} module(s)"
