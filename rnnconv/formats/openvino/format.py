"""The OpenVINO IR format's verbs (`registry.Format`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import InspectReport, Provenance
from rnnconv.formats import registry
from rnnconv.formats.openvino import PLUGIN
from rnnconv.formats.openvino.reader import NET, SNIFF_BYTES, IRFile, chain_sizes, recorded_source, to_canonical
from rnnconv.formats.openvino.runner import (
    run_ops,
)
from rnnconv.formats.openvino.wire import (
    OPENVINO_C_N,
    OPENVINO_H_N,
    OPENVINO_INITIAL_C,
    OPENVINO_INITIAL_H,
    OPENVINO_LENGTHS,
    OPENVINO_X,
    OPENVINO_Y,
)
from rnnconv.formats.openvino.writer import WRITES, openvino_losses, write_ir
from rnnconv.formats.registry import Format, Probe, ReadOptions, Source, WriteOptions, Written, register
from rnnconv.safeio.digests import digest_in_background
from rnnconv.safeio.inputs import reading
from rnnconv.table.constants import LSTM


@register
class OpenvinoFormat(Format):
    plugin = PLUGIN
    sniff_order = 40

    def sniff(self, probe: Probe) -> bool:
        if probe.path.suffix.lower() != ".xml" or not probe.head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
            return False
        with open(probe.path, "rb") as f:
            head = f.read(SNIFF_BYTES)
        return NET.search(head) is not None

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        file = IRFile(path)
        info = Provenance(path=str(path.resolve()), format="openvino")
        origin = recorded_source(file)
        digest = digest_in_background(path) if options.hash_source else None
        chains = file.choose(options.layer, options.take_all)
        found = registry.read_each(
            chains,
            lambda chain: to_canonical(chain, info, options.bias_split),
            lambda chain: ",".join(op.name for op in chain),
            digest,
            origin,
        )
        # the weights are a source too: never written over (model.bin is also a cuDNN blob's default name), and
        # watched like the .xml while they are read
        with reading(file.weights_path):
            yield found

    def losses(self, rnn: CanonicalRNN) -> list[registry.Loss]:
        return openvino_losses(rnn)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        spec = rnns[0].spec
        # OpenVINO computes in float32: narrower weights are stored as they are and decompressed by a Convert
        dtype = options.dtype or (spec.dtype if spec.dtype in WRITES else "float32")
        warnings = []
        if options.dtype is None and dtype != spec.dtype:
            warnings.append(
                f"{rnns[0].name}: {spec.dtype} weights written as {dtype}, in which OpenVINO computes (say --dtype)"
            )
        weights = write_ir(rnns, path, dtype, options.force, options.progress)
        lstm = spec.mode == LSTM
        feeds = f'"{OPENVINO_X}": x, "{OPENVINO_INITIAL_H}": h0, ' + (f'"{OPENVINO_INITIAL_C}": c0, ' if lstm else "")
        states = "h0 and c0" if lstm else "h0"
        return Written(
            [path, weights],
            warnings=warnings,
            # as `run_ir` runs it: static shapes (with dynamic ones the CPU plugin ignores sequence_lens) and f32
            # (its default is bf16 on CPUs with bfloat16 units: 1e-3 off)
            usage=f"import openvino\ncore = openvino.Core(); model = core.read_model({registry.literal(path)})\n"
            f'feeds = {{{feeds}"{OPENVINO_LENGTHS}": lengths}}   # x (batch, seq, {spec.input_size}), {states} '
            f"({spec.num_layers * spec.num_directions}, batch, {spec.hidden_size}), lengths (batch,) int32\n"
            "model.reshape({name: list(value.shape) for name, value in feeds.items()})   # static shapes: "
            "with dynamic ones the CPU plugin ignores sequence_lens\n"
            'compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})   # its default is '
            "bf16 on CPUs with bfloat16 units\n"
            f'y = compiled(feeds)["{OPENVINO_Y}"]   # (batch, seq, {spec.num_directions * spec.hidden_size}); '
            f'also "{OPENVINO_H_N}"' + (f', "{OPENVINO_C_N}"' if lstm else ""),
        )

    def inspect(self, path: Path) -> InspectReport:
        file = IRFile(path)
        provenance = Provenance(path=str(path))
        entries = [
            registry.inspect_entry(
                ",".join(op.name for op in group),
                group[0].op,
                functools.partial(to_canonical, group, provenance, "recurrent"),
                functools.partial(chain_sizes, group),
            )
            for group in registry.inspected_groups(file.ops, file.chains)
        ]
        notes = [
            f"ops {', '.join(op.name for op in chain)} are the layers of one RNN"
            for chain in file.chains
            if len(chain) > 1
        ]
        notes.append(file.listing(most=32))
        origin = recorded_source(file)
        if origin is not None and origin.path:
            notes.append(f"written by rnnconv from {origin.path}" + (f" ({origin.layer})" if origin.layer else ""))
        return InspectReport(path=str(path), format="openvino", rnns=entries, notes=notes)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer and recorded.format == "openvino":
            return recorded
        file = IRFile(path)
        (chain,) = file.choose(layer, take_all=False)
        return recorded.model_copy(update={"layer": ",".join(op.name for op in chain), "format": "openvino"})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The file's own graph (one rnnconv wrote), or its sequence ops with their own weights and attributes,
        run in OpenVINO's CPU plugin."""
        file = IRFile(path)
        (chain,) = file.choose(source.layer, take_all=False)
        return run_ops(file, chain, spec, inputs, source.layer)
