"""The ExecuTorch format's verbs (`base.Format`): read-only, and what it reads is refused with the reason (a program
keeps its weights without names); `inspect` lists what may be an RNN. Its reader is imported when a verb is used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rnnconv.core.contracts import InspectEntry, InspectReport
from rnnconv.errors import Unsupported
from rnnconv.formats.base import Format
from rnnconv.formats.executorch import PLUGIN
from rnnconv.formats.executorch.wire import KIND
from rnnconv.formats.registry import register
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.sources import Source


@register
class ExecuTorchFormat(Format):
    plugin = PLUGIN

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.executorch.program import load
        from rnnconv.formats.executorch.reader import refusal

        raise Unsupported(refusal(path, load(path)))
        yield  # a context manager's generator, though it never yields

    def inspect(self, path: Path) -> InspectReport:
        from rnnconv.formats.executorch.program import load
        from rnnconv.formats.executorch.reader import listed

        entries = [
            InspectEntry(name=found.name, layer_class=found.layer_class, converts=False, reason=found.reason)
            for found in listed(load(path))
        ]
        return InspectReport(path=str(path), format=KIND, rnns=entries)
