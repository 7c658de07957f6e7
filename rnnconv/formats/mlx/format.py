"""The MLX format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.errors import BadInput, RnnconvError, Unsupported, first_line, listing
from rnnconv.formats import registry
from rnnconv.formats.mlx import PLUGIN
from rnnconv.formats.mlx.reader import Chain, MlxFile, to_canonical
from rnnconv.formats.mlx.runner import require_mlx, run_modules
from rnnconv.formats.mlx.wire import MLX_CLASSES, NPY
from rnnconv.formats.mlx.writer import WRITABLE, constructor, mlx_losses, write_mlx
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio.digests import digest_in_background
from rnnconv.table.constants import LSTM


@register
class MlxFormat(Format):
    plugin = PLUGIN
    sniff_order = 30  # a safetensors of MLX's parameter names: after rnnconv's own, before PyTorch's state_dicts

    def sniff(self, probe: Probe) -> bool:
        names = probe.zip_names
        npz = names is not None and bool(names) and all(n.endswith(NPY) for n in names)
        if probe.safetensors_metadata is None and not npz:
            return False
        try:
            file = MlxFile.load(probe.path)
        except RnnconvError:
            return False
        return bool(file.modules)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = MlxFile.load(path)
        info = Provenance(path=str(path.resolve()), format=file.kind)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains,
            lambda chain: to_canonical(chain, info, options.nonlinearity, file),
            lambda chain: chain.name,
            digest,
        )
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return mlx_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = registry.only_rnn(rnns, "an MLX file")
        spec = rnn.spec
        dtype = options.dtype or (spec.dtype if spec.dtype in WRITABLE else WRITABLE[0])
        warnings = []
        if dtype != spec.dtype and options.dtype is None:
            warnings.append(f"{rnn.name}: written as {dtype}, what MLX computes with, from the source's {spec.dtype}")
        write_mlx(rnn, path, dtype, options.force)
        usage = "import mlx.core as mx, mlx.nn as nn\nmx.set_default_device(mx.cpu)   # as verify runs it\n"
        usage += f"model = {constructor(spec)}; model.load_weights({registry.literal(path)})"
        if spec.num_layers == 1 and not spec.bidirectional:
            outputs = "y, c" if spec.cell == LSTM else "y"
            usage += f"\n{outputs} = model(x)   # x (batch, time, {spec.input_size}), y (batch, time, "
            usage += f"{spec.hidden_size})"
        elif spec.num_layers > 1 and not spec.bidirectional:
            usage += "   # Stack: the README's module, a list `layers` each feeding the next"
        elif spec.bidirectional:
            usage += "   # Stack: the README's module, [forward, backward] modules"
        return Written([path], warnings, usage)

    def inspect(self, path: Path) -> InspectReport:
        file = MlxFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                chain.name,
                MLX_CLASSES[chain.first.cell],
                functools.partial(to_canonical, chain, provenance, None, file),
            )
            for chain in [c for c in file.chains if len(c.modules) > 1] + [Chain(m.name, [[m]]) for m in file.modules]
        ]
        notes = [
            f"modules {listing(m.name for m in c.modules)} are the layers and directions of one RNN"
            for c in file.chains
            if len(c.modules) > 1
        ]
        return InspectReport(path=str(path), format=file.kind, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format in self.info.kinds:
            return recorded
        file = MlxFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": chain.name, "format": file.kind})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own modules in MLX (CPU)."""
        file = MlxFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        for module in chain.modules:
            if module.refusal:
                raise Unsupported(module.refusal)
        shape = (chain.first.input_size, len(chain.layers), chain.directions)
        if shape != (spec.input_size, spec.num_layers, spec.num_directions):
            raise BadInput(f"the MLX modules {source.layer} are not the RNN the blob describes ({spec.describe()})")
        mx, _ = require_mlx()
        try:
            out = run_modules(path, chain, spec.mode, inputs)
        except (ValueError, RuntimeError) as exc:
            raise BadInput(f"MLX cannot run {path}: {first_line(exc)}") from None
        return out, f"mlx {mx.__version__} (CPU): the file's mlx.nn.{MLX_CLASSES[chain.first.cell]} module(s)"
