"""What a format is and the verbs every one offers: the `Format` base class a format package's `format.py` subclasses
(and registers, `registry.register`), and what its verbs exchange (`Written`, `Stream`).

The verbs: `read` (the RNNs in a file, canonical and lazy), `write`, `inspect`, `resolve` + `run` (run the source in
its own framework, for verify; only formats with a framework have them). What a target can hold is not a verb's code
but its declarations' (`holding`): `losses` and `written_dtype` read them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import BackendInfo, InspectEntry, InspectReport, Provenance
from rnnconv.core.dtypes import element_type
from rnnconv.errors import BadInput, Unsupported, listing
from rnnconv.formats import holding
from rnnconv.formats.catalog import FORMAT_INFO, plugins
from rnnconv.formats.holding import Loss
from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime
from rnnconv.formats.probe import Probe
from rnnconv.formats.runtimes import absent, versions_of
from rnnconv.formats.setting_fields import not_its_own
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source
from rnnconv.formats.writing import rounded_sums
from rnnconv.safeio.inputs import unguarded

if TYPE_CHECKING:
    from rnnconv.core.report_contracts import Check, Report

# The formats whose files verify runs as sources, in their own frameworks (those that say what runs them).
RUN_SOURCES = tuple(plugin.info.name for plugin in plugins() if plugin.runtimes)


@dataclass
class Written:
    outputs: list[Path]
    warnings: list[str] = field(default_factory=list)
    usage: str = ""  # how to load and run what was written: Python a user can paste, as verify runs it


class Stream(Protocol):
    """A streaming model loaded in a runtime: fed x and the states by name, it gives y and the new states."""

    @property
    def chunk(self) -> int | None: ...  # the one chunk length it takes, or None: any

    @property
    def source(self) -> Provenance | None: ...  # the source the file records

    @property
    def how(self) -> str: ...  # what runs it, for the report ("onnxruntime 1.20.1")

    @property
    def versions(self) -> dict[str, str]: ...  # the runtime's packages' versions

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class Format(ABC):
    """One file format. A subclass names its package's `plugin` (what the format is, as data) and implements the
    verbs it offers."""

    plugin: ClassVar[Plugin]

    @property
    def info(self) -> FormatInfo:
        return self.plugin.info

    @property
    def runtimes(self) -> tuple[Runtime, ...]:
        """What runs its files as a source (`run`), for `doctor`."""
        return self.plugin.runtimes

    @property
    def engine(self) -> EngineInfo | None:
        """The verify engine it offers (`verify --backend <its name>`), if any: a blob run as its runtime runs its
        files."""
        return self.plugin.engine

    def make_engine(self, name: str | None = None) -> RuntimeEngine | None:
        """Its engine called `name` (its default one where None), ready to run blobs and its files (None where it
        offers no such engine; a format whose runtime runs a blob its own way makes its own, importing it then)."""
        info = self.engine_info(name)
        return None if info is None else RuntimeEngine(self, info)

    def engine_info(self, name: str | None) -> EngineInfo | None:
        """What it says of its engine called `name` (its default one where None), None where it offers none."""
        return next((e for e in (self.engine, *self.plugin.more_engines) if e and name in (None, e.name)), None)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def title(self) -> str:
        return self.info.title

    def named(self, path: Path) -> int:
        """How much of a file's name says it is of this format: the length of the longest ending its files have
        (0: none). Detection goes by content; this tells what a file none recognises was meant to be."""
        name = path.name.lower()
        endings = {*self.info.read_suffixes, *self.info.default_for}
        return max((len(e) for e in endings if name.endswith(e) and len(name) > len(e)), default=0)

    def locate(self, path: Path) -> Path | None:
        """The file of this format that a name which is no file stands for (a TF checkpoint's prefix, a folder), or
        None."""
        return None

    def source_parts(self, path: Path) -> list[Path]:
        """The files besides `path` that reading it reads, in a fixed order (a checkpoint's data files, a
        SavedModel's variables): the source's digest covers them after it, so that a change to any is seen."""
        return []

    def claims(self, probe: Probe) -> bool:
        """Whether a file its `wire.sniff` says may be of it is of it: where the first bytes leave that open (MLX's
        safetensors, told from PyTorch's by their parameter names), its reader looks."""
        return True

    @abstractmethod
    def read(self, path: Path, options: ReadOptions) -> contextlib.AbstractContextManager[Source]:
        """The RNNs of the file in canonical form, read lazily while the context lasts."""

    def broken_limits(self, path: Path, consumer: str) -> list[str]:
        """Each documented limit of a consumer of its files (`--profile`, a setting of its own) that the file breaks,
        a line each; refused in one sentence for a format that has no such setting."""
        raise BadInput(not_its_own("profile", self.title, path.name) or f"--profile is not for {self.title} files")

    def losses(self, rnn: CanonicalRNN) -> list[Loss]:
        """What of `rnn` this format cannot hold exactly, found before anything is written (lossless or refused): what
        its declarations say (`holding.losses`)."""
        return holding.losses(self.info, rnn)

    def streaming_losses(self, rnn: CanonicalRNN) -> list[Loss]:
        """What of `rnn` this format's streaming model (`info.streams`) cannot hold exactly: its ops may differ."""
        return self.losses(rnn)

    def losses_in(self, rnn: CanonicalRNN, requested: str | None, streaming: bool = False) -> list[Loss]:
        """`losses` (`streaming_losses` for a streaming model), and where it writes the source's own half-precision
        type: the summed biases that type has no exact value for (a narrower --dtype asks for rounding; the source's
        own type promises none)."""
        losses = self.streaming_losses(rnn) if streaming else self.losses(rnn)
        spec, row = rnn.spec, holding.written_row(self.name, rnn.spec)
        dtype = self.written_dtype(spec, requested)
        narrow = dtype == spec.dtype and element_type(dtype).itemsize < 4  # float32 sums round as its kernels do
        if not narrow or not spec.bias or row is None or not row.bias.summed or any(not x.nearest for x in losses):
            return losses  # (a term it cannot hold at all: refused for that alone)
        nearest = functools.reduce(lambda held, loss: loss.nearest(held) if loss.nearest else held, losses, rnn)
        worst, rounded = rounded_sums(nearest, row, dtype)  # what it holds of the RNN it can hold
        if not worst:
            return losses
        term = (
            f"{dtype} has no exact value for the biases it stores summed (bW + bR; the nearest is off by up to "
            f"{worst:.2g}, and --dtype float32 holds them exactly)"
        )
        return [*losses, Loss(term, lambda _: rounded)]

    def written_dtype(self, spec: RNNSpec, requested: str | None) -> str:
        """The element type its writer stores `spec`'s RNN in, as its declaration says (`holding.written_dtype`)."""
        return holding.written_dtype(self.info, spec, requested)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        raise Unsupported(f"no writer for format {self.name!r}")

    def write_model(self, source: Path, path: Path, options: ReadOptions, write: WriteOptions) -> Written | None:
        """The whole model a file of this format holds, written as `path` in this format's current form (Keras'
        rescue of archives current Keras refuses); None where this conversion is of its RNNs, as any other."""
        return None

    def copies_model(self, path: Path, against: Path) -> bool:
        """Whether `path` may be the whole model of `against` written by `write_model` (verify then checks it
        whole, `model_report`, beside the audit of its RNNs)."""
        return False

    def model_report(self, path: Path, against: Path, batch: int, steps: int, seed: int, atol: float | None) -> Report:
        """Whether `path` is the whole model of `against` as `write_model` writes it, and computes what it does."""
        raise Unsupported(f"no whole-model check for format {self.name!r}")

    def stream(self, path: Path, runtime: str) -> Stream:
        """A streaming model this format wrote, loaded in `runtime` (one of `info.streams`)."""
        raise Unsupported(f"no streaming runner for format {self.name!r}")

    def write_into(
        self, rnns: list[CanonicalRNN], model: Path, path: Path, layer: str | None, options: WriteOptions
    ) -> Written:
        """A copy of the user's `model` file at `path`, with the RNNs' tensors in place of those it holds.

        Each RNN replaces the one `places` gives; everything else in the file stays as it was.
        """
        writers = ", ".join(info.title for info in FORMAT_INFO.values() if info.writes_into)
        raise Unsupported(f"--into writes into a {writers} model, not a {self.title} one")

    def into_suffixes(self, model: Path) -> tuple[str, ...]:
        """The endings a patched copy of `model` may have: files of its kind (its own ending among them)."""
        return (model.suffix,)

    def places(self, rnns: list[CanonicalRNN], layer: str | None) -> list[Provenance | None]:
        """Where each RNN goes in a model of this format: `layer` (as `Provenance.layer`), else where its blob
        came from when that was a file of this format (its sidecar's source), else None: the model's only RNN."""
        if layer is not None:
            if len(rnns) > 1:
                raise BadInput(
                    f"--layer with --into names the one RNN to replace, but the source holds {len(rnns)} "
                    f"({listing(r.name for r in rnns)}); without --layer each goes back where it came from"
                )
            return [Provenance(layer=layer)]
        return [r.origin if r.origin is not None and r.origin.format in self.info.kinds else None for r in rnns]

    def holds_several(self, path: Path) -> bool:
        """Whether an output of this name takes every RNN of a source when none is picked."""
        return False

    @abstractmethod
    def inspect(self, path: Path) -> InspectReport:
        """Every RNN in the file, its spec, and whether it converts (why not)."""

    def listed(self, path: Path) -> list[InspectEntry]:
        """Every RNN of the file once, in the file's order, as `inspect` lists it (what the audit pairs)."""
        return self.inspect(path).rnns

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        """Which RNN of the file a blob came from: the recorded one, else the one `layer` or the file names."""
        running = listing(info.title for info in FORMAT_INFO.values() if info.name in RUN_SOURCES)
        raise Unsupported(
            f"no runner for format {self.name!r}: verify runs the sources of {running}; give the model the blob came "
            f"from with --against"
        )

    def source_options(self, source: Provenance) -> ReadOptions:
        """How to read the RNN `source` names (as `resolve` gives it) from a file of this format."""
        return ReadOptions(layer=source.layer, hash_source=False, dequantize=True, drop_clip=source.loss is not None)

    def source_spec(self, path: Path, source: Provenance) -> RNNSpec:
        """The spec of the RNN `source` names, as reading the file gives it: what verify holds a file made from it
        against, and runs it by (a target that always has biases holds zeros where the source has none)."""
        with self.read(path, self.source_options(source)) as found:
            return found.rnns[0].spec  # the one named, or the file's only one (a read refuses several unasked)

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """The source RNN's own y, h_n, c_n (sequence-major, cuDNN's shapes) and how it ran: `spec` is the file's,
        with the source's own biases (or none)."""
        raise Unsupported(f"no runner for format {self.name!r}")

    def deployed_check(
        self, path: Path, source: Provenance, spec: RNNSpec, bound: float, config: Mapping[str, Any]
    ) -> Check | None:
        """Where the file's runtime, set up as it is deployed (`config`: verify's --runtime-config; empty: its
        defaults), computes otherwise than what `run` runs of it (OpenVINO's low-precision path for an nncf IR's own
        graph): the check of how far, against `bound` (the bound its scales give a step). None where it computes
        alike (every format but OpenVINO's, which take no such settings)."""
        if config:
            raise BadInput(f"--runtime-config sets up an OpenVINO IR's runtime: {self.title} files take none")
        return None


class WeightSpaceFormat(Format):
    """The format of cuDNN's weight-space files (`Plugin.weight_space`), which verify and the GPU layer reach through
    the registry (`registry.weight_spaces()`) for what only blobs have: their files opened as blobs, an RNN of
    another format's file as one in memory, a blob written again in the layout a GPU reported."""

    @abstractmethod
    def described(self, spec: RNNSpec) -> WeightSpaceFormat:
        """The format reading its files as raw blobs of `spec` (a blob without a sidecar, as verify's source)."""

    @abstractmethod
    def blobs(self, path: Path, raw_spec: RNNSpec | None = None) -> list[Blob]:
        """The weight spaces of a file of this format (a raw one described by `raw_spec`)."""

    @abstractmethod
    def in_memory(self, rnn: CanonicalRNN, path: Path, kind: str) -> Blob:
        """The weight space of an RNN read from a file of another format (`path`, of file kind `kind`), in memory:
        what verify checks and diagnoses when it runs that file itself."""

    @abstractmethod
    def write_relayout(
        self, blob: Blob, placed: dict[ParamKey, int], total_bytes: int, path: Path, version: str, force: bool
    ) -> None:
        """The blob written again with every tensor at the byte offset (`placed`) cuDNN `version` reported."""


class RuntimeEngine:
    """An engine that runs a blob as a format's runtime runs that format's files (`Plugin.engine` says which): the
    blob's RNN written with the format's own writer into a private folder, then run there by the format's `run`, as
    `verify FILE` runs a file of that format."""

    def __init__(self, fmt: Format, facts: EngineInfo) -> None:
        self.fmt, self.facts = fmt, facts
        self.name = facts.name
        self.notes: list[str] = []

    def run(self, blob: Any, inputs: Inputs) -> Outputs:
        rnn = blob.to_canonical()
        holding.check_held(self.fmt.info, rnn, None)
        with tempfile.TemporaryDirectory(prefix="rnnconv-engine-") as folder:
            path = Path(folder) / f"{blob.name or 'rnn'}{self.facts.suffix}".replace(os.sep, "_")
            self.fmt.write([rnn], path, WriteOptions(force=True))
            with unguarded(), self.fmt.read(path, ReadOptions(hash_source=False)) as written:  # a file of its own
                where = written.rnns[0].source  # its only RNN, where the file has it
            got, _ = self.run_file(path, where, blob.spec, inputs)
        return got

    def run_file(
        self, path: Path, where: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        """A file of its format (`where`: its RNN in it) run in this runtime: y, h_n, c_n and how it ran."""
        return self.fmt.run(path, where, spec, inputs)

    def describe(self) -> BackendInfo:
        return BackendInfo(name=self.name, detail=self.facts.detail)

    def versions(self) -> dict[str, str]:
        return versions_of(self.facts.modules, self.fmt.info.extra, f"running {self.fmt.title} files")

    def missing(self, what: str) -> str | None:
        """Why `what` cannot run here, as a clause naming the runtime's packages that are not installed (None: all
        are): said beside another framework that is missing, so that one command names both."""
        names = list(absent(self.facts.modules))
        if not names:
            return None
        extra = self.fmt.info.extra
        return f"running {what} needs {' and '.join(names)}, not installed either (pip install 'rnnconv[{extra}]')"
