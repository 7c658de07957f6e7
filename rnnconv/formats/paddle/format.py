"""The PaddlePaddle format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rnnconv.core.contracts import InspectEntry, InspectReport, Provenance
from rnnconv.formats.base import Format, RuntimeEngine, Written
from rnnconv.formats.paddle import PLUGIN
from rnnconv.formats.paddle.wire import KIND
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source, inspect_entry, read_chosen

if TYPE_CHECKING:
    import numpy as np

    from rnnconv.core.canonical import CanonicalRNN, RNNSpec
    from rnnconv.formats.paddle.reader import PaddleRNN


@register
class PaddleFormat(Format):
    plugin = PLUGIN

    def make_engine(self, name: str | None = None) -> RuntimeEngine | None:
        from rnnconv.formats.paddle.runner import PaddleEngine  # Paddle runs in a child: never imported here

        info = self.engine_info(name)
        return None if info is None else PaddleEngine(self, info)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.paddle.reader import find_rnns, load_state_dict, pick, to_canonical

        state = load_state_dict(path)
        found = find_rnns(state)
        sources, activations = state.recorded(path)  # of a file rnnconv wrote
        several = options.take_all and options.layer is None and len(found) > 1
        chosen = found if several else [pick(found, options.layer, path)]

        def canonical(rnn: PaddleRNN, info: Provenance) -> CanonicalRNN:
            converted = to_canonical(rnn, info, options.nonlinearity or activations.get(rnn.prefix))
            converted.origin = sources.get(rnn.prefix)
            return converted

        yield read_chosen(
            path,
            KIND,
            chosen,
            canonical,
            lambda rnn: rnn.name,
            options,
            describe=lambda rnn: f"RNN {rnn.name!r} in {path}",
            things="recurrent layers",
        )

    def holds_several(self, path: Path) -> bool:
        return True

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.paddle.writer import loading_code, write_pdparams

        dtypes = [self.written_dtype(rnn.spec, options.dtype) for rnn in rnns]
        write_pdparams(rnns, path, dtypes, options.force)
        return Written([path], usage=loading_code(rnns, path, dtypes))

    def inspect(self, path: Path) -> InspectReport:
        from rnnconv.formats.paddle.reader import find_rnns, load_state_dict, rnn_sizes, to_canonical

        provenance = Provenance(path=str(path))

        def entry(rnn: PaddleRNN) -> InspectEntry:
            cls, sizes = rnn_sizes(rnn)
            return inspect_entry(rnn.name, cls, functools.partial(to_canonical, rnn, provenance), lambda: sizes)

        return InspectReport(path=str(path), format=KIND, rnns=[entry(rnn) for rnn in find_rnns(load_state_dict(path))])

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.prefix is not None:
            return recorded
        from rnnconv.formats.paddle.reader import find_rnns, load_state_dict, pick

        rnn = pick(find_rnns(load_state_dict(path)), layer, path)
        return recorded.model_copy(update={"prefix": rnn.prefix, "layer": rnn.name, "format": KIND})

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        from rnnconv.formats.paddle.runner import run_source

        return run_source(path, source.prefix or "", spec, inputs)
