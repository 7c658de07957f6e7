"""The ncnn format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import registry
from rnnconv.formats.ncnn import PLUGIN
from rnnconv.formats.ncnn.reader import NcnnFile, chain_name, to_canonical, why_refused
from rnnconv.formats.ncnn.runner import require_ncnn, run_model, source_layers
from rnnconv.formats.ncnn.wire import (
    IN,
    KIND,
    NARROW_OPTIONS,
    NCNN_MAGIC,
    OUT,
    bin_of,
)
from rnnconv.formats.ncnn.writer import ncnn_losses, write_ncnn
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio.digests import digest_in_background
from rnnconv.table.constants import LSTM


@register
class NcnnFormat(Format):
    plugin = PLUGIN
    sniff_order = 20  # a text file beginning with ncnn's magic number

    def sniff(self, probe: Probe) -> bool:
        return probe.head.split(b"\n", 1)[0].strip() == str(NCNN_MAGIC).encode()

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = NcnnFile.load(path, source=True)
        info = Provenance(path=str(path.resolve()), format=KIND)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(chains, lambda chain: to_canonical(chain, file, info), chain_name, digest)
        yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return ncnn_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        rnn = registry.only_rnn(rnns, "an ncnn model")
        spec = rnn.spec
        dtype = options.dtype or ("float16" if spec.dtype == "float16" else "float32")
        outputs = write_ncnn(rnn, path, dtype, options.force)
        states = f"h0_0 ({spec.num_directions}, {spec.output_size})" + (
            f", c0_0 ({spec.num_directions}, {spec.hidden_size})" if spec.cell == LSTM else ""
        )
        # float32 throughout, as `run_model` runs it: ncnn stores and computes in fp16 where the CPU can
        usage = (
            "import ncnn\nnet = ncnn.Net()\n"
            + " = ".join(f"net.opt.{option}" for option in NARROW_OPTIONS)
            + " = False\n"
            f"net.load_param({registry.literal(path)}); net.load_model({registry.literal(bin_of(path))})\n"
            f'ex = net.create_extractor(); ex.input("{IN}", ncnn.Mat(x)); code, y = ex.extract("{OUT}")'
            f"   # x (T, {spec.input_size}) float32, one sequence; y (T, {spec.num_directions * spec.output_size}); "
            f"optional inputs {states}, h0_1, ... for each layer"
        )
        return Written(outputs, usage=usage)

    def inspect(self, path: Path) -> InspectReport:
        file = NcnnFile.load(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                chain_name(chain), chain[0].type, functools.partial(to_canonical, chain, file, provenance)
            )
            for chain in registry.inspected_groups(file.layers, file.chains)
        ]
        notes = [f"layers {chain_name(c)} are the layers of one RNN" for c in file.chains if len(c) > 1]
        return InspectReport(path=str(path), format=KIND, rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == KIND:
            return recorded
        file = NcnnFile.load(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": chain_name(chain), "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own layers, their params and weight bytes as stored, in ncnn, one sequence at a time."""
        file = NcnnFile.load(path)
        (chain,) = file.choose(source.layer, take_all=False)
        for layer in chain:
            reason = why_refused(layer)
            if reason:
                raise Unsupported(reason)
        if (chain[0].input_size, len(chain), chain[0].directions) != (
            spec.input_size,
            spec.num_layers,
            spec.num_directions,
        ):
            raise BadInput(f"the ncnn layers {source.layer} are not the RNN the blob describes ({spec.describe()})")
        ncnn = require_ncnn()
        how = f"ncnn {ncnn.__version__} (CPU): the file's own {chain[0].type} layer(s), one sequence at a time"
        return run_model(source_layers(file, chain), inputs), how
