"""The PyTorch format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import InspectEntry, InspectReport, Provenance
from rnnconv.errors import Unsupported
from rnnconv.formats.base import Format, Written
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source, inspect_entry, read_chosen
from rnnconv.formats.torch import PLUGIN
from rnnconv.formats.torch.wire import CHECKPOINT_SUFFIXES, EXPORT_KIND

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.formats.torch.reader import TorchRNN


@register
class TorchFormat(Format):
    plugin = PLUGIN

    def locate(self, path: Path) -> Path | None:
        from rnnconv.formats.torch.sharded import in_folder

        return in_folder(path)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.torch.reader import find_kept, load_state_dict, pick, to_canonical

        state = load_state_dict(path)
        found = find_kept(state, path)
        sources, nonlinearities = state.recorded(path)  # of a file rnnconv wrote
        several = options.take_all and options.layer is None and len(found) > 1
        chosen = found if several else [pick(found, options.layer, path)]

        def canonical(rnn: TorchRNN, info: Provenance) -> CanonicalRNN:
            stated = options.nonlinearity or nonlinearities.get(rnn.prefix)
            converted = to_canonical(rnn, info, stated, state.kept.get(rnn.prefix[:-1]), options.dequantize)
            converted.origin = sources.get(rnn.prefix)
            return converted

        yield read_chosen(
            path,
            state.kind,
            chosen,
            canonical,
            lambda rnn: rnn.name,
            options,
            describe=lambda rnn: f"RNN {rnn.name!r} in {path}",
            things="recurrent layers",
        )

    def holds_several(self, path: Path) -> bool:
        return path.suffix == ".safetensors"

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.torch.writer import bin_warning, loading_code, write_state_dict

        write_state_dict(rnns, path, options.dtype, options.force)
        return Written([path], bin_warning(path), usage=loading_code(rnns, path))

    def into_suffixes(self, model: Path) -> tuple[str, ...]:
        return (model.suffix, *CHECKPOINT_SUFFIXES)

    def write_into(
        self, rnns: list[CanonicalRNN], model: Path, path: Path, layer: str | None, options: WriteOptions
    ) -> Written:
        from rnnconv.formats.torch.reader import load_state_dict
        from rnnconv.formats.torch.sharded import is_index
        from rnnconv.formats.torch.writer import bin_warning, patch_checkpoint

        kind = load_state_dict(model).kind if not is_index(model) else "torch-sharded"
        if kind in ("torch-module", "torch-script"):
            raise Unsupported(
                f"--into writes a copy of a state_dict checkpoint, and {model} is a {PLUGIN.info.kinds[kind]}: write "
                f"the RNN as a state_dict of its own (OUT.pt) and load it into the model with load_state_dict"
            )
        if is_index(model):
            raise Unsupported(
                f"--into writes a copy of one checkpoint file, and {model} is a sharded checkpoint's index: write the "
                f"RNN as a state_dict of its own (OUT.safetensors) and load it into the model beside the shards"
            )
        patch_checkpoint(rnns, self.places(rnns, layer), model, path, options.force)
        return Written([path], bin_warning(path))

    def inspect(self, path: Path) -> InspectReport:
        from rnnconv.formats.torch.reader import find_kept, load_state_dict, rnn_sizes, to_canonical

        provenance = Provenance(path=str(path))
        state = load_state_dict(path)

        def entry(rnn: TorchRNN) -> InspectEntry:
            cls, sizes = rnn_sizes(rnn)  # the class its tensors' shapes give, also when it does not convert
            read = functools.partial(to_canonical, rnn, provenance, None, state.kept.get(rnn.prefix[:-1]))
            return inspect_entry(rnn.name, cls, read, lambda: sizes)

        rnns = [entry(rnn) for rnn in find_kept(state, path)]
        return InspectReport(path=str(path), format=state.kind, rnns=rnns)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.prefix is not None:
            return recorded
        from rnnconv.formats.torch.reader import find_kept, load_state_dict, pick

        state = load_state_dict(path)
        rnn = pick(find_kept(state, path), layer, path)
        return recorded.model_copy(update={"prefix": rnn.prefix, "layer": rnn.name, "format": state.kind})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        from rnnconv.formats.torch.reader import load_state_dict
        from rnnconv.formats.torch.runner import run_program, run_quantized, run_read, run_script, run_source

        state = load_state_dict(path)
        if state.kind == EXPORT_KIND:
            return run_program(path, source.prefix or "", spec, inputs)
        if state.kind == "torch-module":  # never torch.load of a whole pickle: its classes' code would run
            with self.read(path, self.source_options(source)) as found:
                return run_read(found.rnns[0], inputs)
        if state.kind == "torch-script":
            return run_script(path, source.prefix or "", spec, inputs, state.kept.get((source.prefix or "")[:-1]))
        if (source.prefix or "") in state.quantized:  # never a float module of its dequantized weights
            return run_quantized(path, source.prefix or "", spec, inputs)
        return run_source(path, source.prefix or "", spec, inputs)
