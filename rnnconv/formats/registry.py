"""The registry of file formats: one package per format, the same verbs for each.

A format package under `rnnconv/formats/` says what it is in its `__init__.py` (its `plugin.Plugin`) and defines
a `Format` subclass in its `format.py`, decorated with `@register`; the registry finds every such package by
itself (`catalog.plugins()`), so adding a format touches no other file of rnnconv. Detection, conversion,
inspection, verify and the CLI only ask the registry; none of them branches on
a format. Asking for something no format offers fails with the exact key
("no writer for format 'onnx'"), never by falling through to another format.

Whether a file is of a format (`sniff`) is the format's `wire.sniff`, which the registry asks in each plugin's
`sniff_order` without importing the format's `format` module: a conversion imports the modules of its two formats
only. The verbs (see `Format`): `read` (the RNNs in it, canonical and lazy), `write`, `inspect`, `resolve` + `run`
(run the source in its own framework, for verify; only formats with a framework have them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import json
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import pydantic

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.compare import Inputs, Outputs
from rnnconv.contracts import BackendInfo, InspectEntry, InspectReport, Provenance, RNNSizes, dump
from rnnconv.dtypes import element_type
from rnnconv.errors import (
    MESSAGE_LIMIT,
    BackendMissing,
    BadInput,
    RnnconvError,
    Unsupported,
    cut,
    either,
    first_line,
    listing,
)
from rnnconv.formats import catalog
from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime
from rnnconv.formats.plugin import version as installed_version
from rnnconv.formats.probe import Probe
from rnnconv.formats.probe import Unrecognized as Unrecognized  # noqa: PLC0414
from rnnconv.safeio.digests import SourcePass
from rnnconv.safeio.inputs import resolved, unguarded

# What a format's read and write are given, exported here, where the formats take their verbs from.
from rnnconv.settings import Progress as Progress  # noqa: PLC0414
from rnnconv.settings import ReadOptions as ReadOptions  # noqa: PLC0414
from rnnconv.settings import WriteOptions as WriteOptions  # noqa: PLC0414
from rnnconv.table.apply import row_for_mode
from rnnconv.table.rows import ADAPTER_FORMATS, Row
from rnnconv.table.writing import arrays_in_source, rounded_sums


@dataclass
class Source:
    """What `read` yields: the chosen RNNs, and those skipped because they cannot convert (name, why)."""

    rnns: list[CanonicalRNN]
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Written:
    outputs: list[Path]
    warnings: list[str] = field(default_factory=list)
    usage: str = ""  # how to load and run what was written: Python a user can paste, as verify runs it


def literal(path: Path) -> str:
    """A path as a Python string literal, for a usage line (which a user pastes as code)."""
    return json.dumps(str(path), ensure_ascii=False)


PROBE_STEPS, PROBE_BATCH, PROBE_SEED = 8, 3, 0  # the inputs on which --allow-lossy measures what it changes
CLIP_PROBE_STEPS, CLIP_PROBE_SCALE = 64, 10.0  # inputs large enough to reach a clip: longer, x and c0 scaled up


def clip_dropped(rnn: CanonicalRNN, clip: tuple[float, float]) -> CanonicalRNN:
    """An LSTM its file clips (cell state and projected output, within `clip`; 0: not), read without the clip, as
    --allow-lossy asks: the loss recorded in its source's provenance as a target's is (verify holds the written file
    to it), measured on probe inputs in the numpy reference: the ordinary ones, whose difference is recorded, and
    ones large enough to reach the clip, whose difference the dropped term names."""
    from rnnconv.compare import STATE_SCALE, make_inputs
    from rnnconv.contracts import RecordedLoss
    from rnnconv.reference import forward

    def moved(x: np.ndarray, h0: np.ndarray | None, c0: np.ndarray | None) -> float:
        exact, unclipped = (forward(rnn.spec, rnn.param, x, h0, c0, clip=bounds) for bounds in (clip, (0.0, 0.0)))
        return max(float(np.max(np.abs(a - b))) for a, b in zip(exact, unclipped, strict=True) if a is not None)

    ordinary = make_inputs(rnn.spec, PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    large = make_inputs(rnn.spec, CLIP_PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    c0 = large["c0"]
    if c0 is not None and clip[0]:  # initial cells of about twice the clip: it is reached from the first step
        c0 = c0 * (2 * clip[0] / STATE_SCALE)
    reaching = moved(large["x"] * CLIP_PROBE_SCALE, large["h0"], c0)
    named = zip(("cell_clip", "proj_clip"), clip, strict=True)
    terms = ", ".join(f"{name}={value:g}" for name, value in named if value)
    loss = RecordedLoss(
        dropped=[
            f"{terms}: on inputs large enough to reach it ({CLIP_PROBE_STEPS} steps, x scaled by {CLIP_PROBE_SCALE:g}, "
            f"initial cells of about twice the clip) the outputs move by up to {reaching:.3g}"
        ],
        difference=moved(ordinary["x"], ordinary["h0"], ordinary["c0"]),
        seed=PROBE_SEED,
        steps=PROBE_STEPS,
        batch=PROBE_BATCH,
    )
    return dataclasses.replace(rnn, source=rnn.source.model_copy(update={"loss": loss}))


@dataclass
class Loss:
    """A term of an RNN that a target cannot hold: `term` is the sentence that names it (in the refusal);
    `nearest` gives the RNN the target can hold without it (what --allow-lossy writes), None where there is none."""

    term: str
    nearest: Callable[[CanonicalRNN], CanonicalRNN] | None = None


class Engine(Protocol):
    """Where `verify` runs a blob (a cuDNN weight space, `formats.cudnn.Blob`): a name, notes about how it was
    chosen, what it is (`describe`), the versions it ran with, and `run`. cuDNN and the numpy reference of its
    equations are rnnconv's own (`engines.py`); a format whose runtime can run the blob offers one (`Format.engine`)."""

    name: str
    notes: list[str]

    def describe(self) -> BackendInfo: ...

    def versions(self) -> dict[str, str]: ...

    def run(self, blob: Any, inputs: Inputs) -> Outputs: ...


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


NOT_INSTALLED = "not installed"


def absent(modules: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Which of a runtime's packages cannot be imported here, by their names in the report: why (`not installed`,
    or the error its import raised)."""
    found = {}
    for name, module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            found[name] = NOT_INSTALLED
        except Exception as exc:  # installed but broken (a missing library, a mismatched build): it cannot run
            found[name] = f"installed but its import fails ({type(exc).__name__}: {first_line(exc)})"
    return found


def versions_of(modules: tuple[tuple[str, str], ...], extra: str | None, what: str) -> dict[str, str]:
    """The versions of a runtime's packages, by their names in the report (each one imported); BackendMissing (exit 3)
    naming them and the extra that installs them, where one cannot be imported (`what` needs them)."""
    missing = absent(modules)
    if missing:
        needs = f"{what} needs {' and '.join(missing)}"
        if set(missing.values()) == {NOT_INSTALLED}:
            needs += f", which {'is' if len(missing) == 1 else 'are'} {NOT_INSTALLED}"
        else:
            needs += ": " + "; ".join(f"{name} is {why}" for name, why in missing.items())
        raise BackendMissing(f"{needs} (pip install 'rnnconv[{extra}]')")
    versions = {}
    for name, module in modules:
        told = getattr(importlib.import_module(module), "__version__", None)  # else its package's metadata
        versions[name] = str(told or installed_version(name, module) or "(version unknown)")
    return versions


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


# Where a file that a runtime runs records the source of its RNN (as a cuDNN sidecar's `source` does), for verify.
SOURCE_KEY = "rnnconv.source"
SOURCE_RECORD_LIMIT = 1 << 20


def recorded_source(rnn: CanonicalRNN, output: Path, wait: bool = True) -> Provenance:
    """What a written file records of its RNN's source: where it was (also seen from the output's folder, to find it
    again when both move), its digest and element type."""
    source = rnn.provenance(wait)
    relative = os.path.relpath(source.path, resolved(output).parent) if source.path else None
    return source.model_copy(update={"dtype": source.dtype or rnn.spec.dtype, "relative_path": relative})


def source_record(rnn: CanonicalRNN, output: Path) -> str:
    """`recorded_source` as the JSON text a format stores under `SOURCE_KEY` in its file's metadata."""
    return recorded_source(rnn, output).model_dump_json(by_alias=True, exclude_none=True)


def source_records(sources: dict[str, Provenance]) -> str:
    """The sources of a file's RNNs (a state_dict's, a Keras model's: each one's `recorded_source`), as the JSON text
    the file stores under `SOURCE_KEY`, by the name the file gives the RNN (a key prefix; its layers, a,b)."""
    return json.dumps({where: dump(source) for where, source in sources.items()})


def read_source_records(text: str | bytes, path: Path) -> dict[str, Provenance]:
    """What `source_records` stored; anything else is refused in one sentence."""
    if len(text) > SOURCE_RECORD_LIMIT:
        raise BadInput(f"{path}: its {SOURCE_KEY} record is {len(text)} bytes, more than a source record can be")
    try:
        records = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        records = None
    if not isinstance(records, dict) or not all(isinstance(r, dict) for r in records.values()):
        raise BadInput(f"{path}: its {SOURCE_KEY} record is not the record of the sources rnnconv writes")
    return {where: read_source_record(json.dumps(record), path) for where, record in records.items()}


def read_source_record(text: str | bytes, path: Path) -> Provenance:
    """The source a file records under `SOURCE_KEY`; text that is no such record is refused in one sentence."""
    if len(text) > SOURCE_RECORD_LIMIT:
        raise BadInput(f"{path}: its {SOURCE_KEY} record is {len(text)} bytes, more than a source record can be")
    try:
        return Provenance.model_validate_json(text)
    except (pydantic.ValidationError, ValueError, RecursionError):
        raise BadInput(f"{path}: its {SOURCE_KEY} record is not the record of a source rnnconv writes") from None


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
        """The file of this format that a name which is no file stands for (a TF checkpoint's prefix), or None."""
        return None

    def claims(self, probe: Probe) -> bool:
        """Whether a file its `wire.sniff` says may be of it is of it: where the first bytes leave that open (MLX's
        safetensors, told from PyTorch's by their parameter names), its reader looks."""
        return True

    @abstractmethod
    def read(self, path: Path, options: ReadOptions) -> contextlib.AbstractContextManager[Source]:
        """The RNNs of the file in canonical form, read lazily while the context lasts."""

    def losses(self, rnn: CanonicalRNN) -> list[Loss]:
        """What of `rnn` this format cannot hold exactly, found before anything is written (lossless or refused)."""
        return []

    def streaming_losses(self, rnn: CanonicalRNN) -> list[Loss]:
        """What of `rnn` this format's streaming model (`info.streams`) cannot hold exactly: its ops may differ."""
        return self.losses(rnn)

    def losses_in(self, rnn: CanonicalRNN, requested: str | None, streaming: bool = False) -> list[Loss]:
        """`losses` (`streaming_losses` for a streaming model), and where it writes the source's own half-precision
        type: the summed biases that type has no exact value for (a narrower --dtype asks for rounding; the source's
        own type promises none)."""
        losses = self.streaming_losses(rnn) if streaming else self.losses(rnn)
        spec, row = rnn.spec, self.written_row(rnn.spec)
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
        """The element type its writer stores `spec`'s RNN in: --dtype, else the source's."""
        return requested or spec.dtype

    def written_row(self, spec: RNNSpec) -> Row | None:
        """The layout-table row its writer stores `spec`'s RNN as (a layer's, else a cell's), None where it has
        none."""
        for cell_class in (False, True):
            with contextlib.suppress(Unsupported):
                return row_for_mode(self.name, spec.mode, cell_class)[0]
        return None

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        raise Unsupported(f"no writer for format {self.name!r}")

    def stream(self, path: Path, runtime: str) -> Stream:
        """A streaming model this format wrote, loaded in `runtime` (one of `info.streams`)."""
        raise Unsupported(f"no streaming runner for format {self.name!r}")

    def write_into(
        self, rnns: list[CanonicalRNN], model: Path, path: Path, layer: str | None, options: WriteOptions
    ) -> Written:
        """A copy of the user's `model` file at `path`, with the RNNs' tensors in place of those it holds.

        Each RNN replaces the one `places` gives; everything else in the file stays as it was.
        """
        writers = ", ".join(f.title for f in formats() if f.info.writes_into)
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
        raise Unsupported(
            f"no runner for format {self.name!r}: verify runs Keras and PyTorch sources; give the "
            f"model the blob came from with --against"
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


# Whose a model's weights beside it (X.bin) may be, told by the file beside them: an IR, an ncnn model, a sidecar.
WEIGHTS_OWNERS = (
    (".xml", "the weights of {}"),
    (".param", "the weights of {}"),
    (".bin.json", "a cuDNN blob with its sidecar {}"),
)


def weights_free(model: Path, weights: Path, force: bool) -> None:
    """Refuse, before anything is written, the weights file a model keeps beside it under its own name (an IR's or
    an ncnn model's X.bin) where that file exists: which file wants it, whose it is, and how to choose another."""
    if force or not os.path.lexists(weights):
        return
    owners = [
        what.format(owner) for suffix, what in WEIGHTS_OWNERS
        if (owner := weights.with_name(weights.stem + suffix)) != model and os.path.lexists(owner)
    ]  # fmt: skip
    whose = f" ({owners[0]})" if owners else ""
    other = model.with_name(f"{model.stem}_{model.suffix[1:]}{model.suffix}")
    raise BadInput(
        f"{model} keeps its weights in {weights}, which already exists{whose}: pass --force to replace it, or give "
        f"the {model.suffix} another name (-o {other} writes {other.with_suffix(weights.suffix)})"
    )


def only_rnn(rnns: list[CanonicalRNN], what: str) -> CanonicalRNN:
    """The RNN to write to a file that holds one (`what`: "an .onnx"), or why there is none."""
    if len(rnns) != 1:
        raise BadInput(
            f"{what} written by rnnconv holds one RNN, but {len(rnns)} were selected "
            f"({listing(r.name for r in rnns)}); pick one with --layer"
        )
    return rnns[0]


def inspect_entry(
    name: str, layer_class: str, read: Callable[[], CanonicalRNN], sizes: Callable[[], RNNSizes | None] = lambda: None
) -> InspectEntry:
    """What `inspect` lists for one RNN of a file: its spec and notes where it converts (and the source that a file
    rnnconv wrote records); else the sizes the file tells, as far as it tells them, and the sentence saying why not."""
    try:
        rnn = read()
    except RnnconvError as exc:
        return InspectEntry(name=name, layer_class=layer_class, sizes=sizes(), converts=False, reason=str(exc))
    spec, notes = rnn.spec.to_model(), rnn.notes
    return InspectEntry(name=name, layer_class=layer_class, spec=spec, converts=True, notes=notes, source=rnn.origin)


def each_why(skipped: list[tuple[str, str]]) -> str:
    """The RNNs skipped and why, as a message lists them: the first few, then how many more."""
    return listing((f"{cut(name)}: {why}" for name, why in skipped), separator="; ", longest=MESSAGE_LIMIT)


def check_stated(rnns: list[CanonicalRNN], options: ReadOptions) -> None:
    """With `require_stated`, refuse RNNs whose conversion assumed a setting the file does not store."""
    assumed = [a for rnn in rnns for a in rnn.source.assumptions or []]
    if options.require_stated and assumed:
        raise BadInput(f"--require-stated: the file does not say {assumed[0]}")


_REGISTRY: dict[str, Format] = {}
_KINDS: dict[str, Format] = {}


def register(cls: type[Format]) -> type[Format]:
    """Class decorator: add a format. A name or file kind registered twice is a bug, and says so."""
    fmt = cls()
    if fmt.name in _REGISTRY:
        raise RuntimeError(f"format {fmt.name!r} is registered twice")
    if fmt.name not in ADAPTER_FORMATS:
        raise RuntimeError(f"format {fmt.name!r} has no adapter rows in the layout table")
    for kind in fmt.info.kinds:
        if kind in _KINDS:
            raise RuntimeError(f"file kind {kind!r} is claimed by {_KINDS[kind].name!r} and {fmt.name!r}")
        _KINDS[kind] = fmt
    _REGISTRY[fmt.name] = fmt
    return cls


def _loaded(plugin: Plugin) -> Format:
    """The format of a plugin, its package's `format` module imported (once: it registers the format)."""
    importlib.import_module(f"{plugin.package}.format")
    return _REGISTRY[plugin.info.name]


@functools.cache
def _load() -> dict[str, Format]:
    """Every format package's `format` module, imported once (each registers its format)."""
    for plugin in catalog.plugins():
        _loaded(plugin)
    return _REGISTRY


def sniffed(probe: Probe, but: str | None = None) -> Format | None:
    """The first format, in sniffing order, whose `wire.sniff` says the file may be of it and which `claims` it (`but`
    that one: None where none): only that format's `format` module is imported."""
    for plugin in sorted(catalog.plugins(), key=lambda p: (p.sniff_order, p.info.name)):
        if plugin.info.name == but or not importlib.import_module(f"{plugin.package}.wire").sniff(probe):
            continue
        fmt = _loaded(plugin)
        if fmt.claims(probe):
            return fmt
    return None


def engine(name: str) -> Engine | None:
    """The engine a format offers under this name, or None."""
    return next((made for f in formats() if (made := f.make_engine(name)) is not None), None)


def formats() -> list[Format]:
    """Every registered format, in sniffing order."""
    return sorted(_load().values(), key=lambda f: (f.plugin.sniff_order, f.name))


def get(name: str) -> Format:
    plugin = next((p for p in catalog.plugins() if p.info.name == name), None)
    if plugin is None:
        raise Unsupported(
            f"no reader or writer for format {name!r} (rnnconv converts {', '.join(catalog.FORMAT_INFO)}"
            f"; `rnnconv explain {name}` shows the table's rows for it, if any)"
        )
    return _loaded(plugin)


def for_kind(kind: str) -> Format:
    """The format a file kind (as recorded in provenance) belongs to."""
    plugin = next((p for p in catalog.plugins() if kind in p.info.kinds), None)
    if plugin is None:
        raise Unsupported(f"no format reads files of kind {kind!r}")
    return _loaded(plugin)


def source_file(path: Path) -> Path:
    """The file a source argument names: itself, or the file a format finds for a name that is no file."""
    if os.path.lexists(path):
        return path
    for fmt in formats():
        found = fmt.locate(path)
        if found is not None:
            return found
    return path


NAMED_IN_FULL = 4  # formats a file of no known name is compared with, by name; the rest are counted


def detect(path: Path) -> Format:
    """The format of a file, from its content; one that none recognises is explained by the readers of the formats
    its name says (a damaged file of a known kind), else compared with a few formats."""
    probe = Probe(path)
    found = sniffed(probe)
    if found is not None:
        return found
    named = named_by(path)
    if named:
        return _read_as_named(path, named)
    known = formats()
    few = ", ".join(f"{f.title} ({'/'.join(f.info.read_suffixes)})" for f in known[:NAMED_IN_FULL])
    raise Unrecognized(
        f"cannot tell what {path} is: neither its name nor its content is that of a format rnnconv reads ({few} "
        f"and {len(known) - NAMED_IN_FULL} more; rnnconv --help names them all)"
    )


def named_by(path: Path) -> list[Format]:
    """The formats whose files are named like `path`, by the longest ending (`Format.named`)."""
    told = [(fmt.named(path), fmt) for fmt in formats()]
    longest = max(length for length, _ in told)
    return [fmt for length, fmt in told if length == longest > 0]


def _read_as_named(path: Path, named: list[Format]) -> Format:
    """The format its name says, where its reader reads a file that none recognised; else what those readers find
    wrong with it, in one sentence (a reader's sentence names the file first; the same reason is said once)."""
    by_reason: dict[str, list[str]] = {}
    for fmt in named:
        try:
            with fmt.read(path, ReadOptions(hash_source=False, take_all=True)):
                return fmt
        except BackendMissing:
            raise
        except RnnconvError as exc:
            reason = str(exc)
            reason = reason[len(str(path)) :] if reason.startswith(str(path)) else f": {reason}"
            by_reason.setdefault(reason, []).append(fmt.title)
    titles = either([f.title for f in named])
    if len(by_reason) == 1:
        raise Unrecognized(f"{path} ({titles} by its name){next(iter(by_reason))}")
    each = "; ".join(f"as {either(told)}, it{reason}" for reason, told in by_reason.items())
    raise Unrecognized(f"{path} is none of the formats its name says ({titles}): {each}")


def for_output(path: Path, to: str | None = None) -> Format:
    """The format to write, from --to or else from the output's name."""
    if to is not None:
        fmt = get(to)
        if not fmt.info.write_suffixes:
            raise Unsupported(f"no writer for format {to!r}")
        if not path.name.endswith(fmt.info.write_suffixes):
            raise BadInput(f"output {path} must end in {either(fmt.info.write_suffixes)} for {fmt.title}")
        return fmt
    infos = [p.info for p in sorted(catalog.plugins(), key=lambda p: (p.sniff_order, p.info.name))]
    matches = [(len(suffix), info) for info in infos for suffix in info.default_for if path.name.endswith(suffix)]
    if not matches:
        names = "; ".join(f"{either(info.default_for)} ({info.title})" for info in infos if info.default_for)
        raise BadInput(f"cannot tell what to write from the name {path}: use {names}, or say --to")
    return get(max(matches, key=lambda m: m[0])[1].name)


class Named(Protocol):
    @property
    def name(self) -> str: ...


Item = TypeVar("Item", bound=Named)


T = TypeVar("T")


def convert_each(
    chosen: list[T],
    convert: Callable[[T], CanonicalRNN],
    name: Callable[[T], str],
    *,
    digest: Future[str] | None = None,
    origin: Provenance | None = None,
    describe: Callable[[T], str] | None = None,
    strict: bool = False,
    things: str = "RNNs",
) -> Source:
    """The RNNs chosen from a file, converted, each given the source's digest (and `origin`, the source a file
    rnnconv wrote records). One that cannot be converted is refused (in the words of `describe`, where given: the
    layer and file), or, of several and unless `strict`, skipped and said; refused all, the sentence names the
    `things` a file of the format holds."""
    rnns, skipped = [], []
    for item in chosen:
        try:
            rnn = convert(item)
        except Unsupported as exc:
            if len(chosen) > 1 and not strict:
                skipped.append((name(item), str(exc)))
                continue
            if describe is None:
                raise
            raise Unsupported(f"{describe(item)} cannot be converted: {exc}") from None
        rnn.digest = digest or rnn.digest
        rnn.origin = origin or rnn.origin
        rnns.append(rnn)
    if not rnns:
        raise Unsupported(f"none of the {things} can be converted: {each_why(skipped)}")
    return Source(rnns, skipped)


def read_chosen(
    path: Path,
    kind: str,
    chosen: list[T],
    convert: Callable[[T, Provenance], CanonicalRNN],
    name: Callable[[T], str],
    options: ReadOptions,
    *,
    origin: Provenance | None = None,
    describe: Callable[[T], str] | None = None,
    things: str = "RNNs",
) -> Source:
    """What every format's read does with the RNNs chosen from its file (of file kind `kind`): each converted with
    the provenance that names the file, given the file's digest (computed meanwhile, on the other core), as
    `convert_each` converts them."""
    info = Provenance(path=str(resolved(path)), format=kind)
    reading = SourcePass(path) if options.hash_source else None
    digest = None if reading is None else reading.digest
    source = convert_each(
        chosen, lambda item: convert(item, info), name, digest=digest, origin=origin, describe=describe, things=things
    )
    if reading is not None:
        for rnn in source.rnns:
            rnn.source_pass = reading
            for array in arrays_in_source(rnn) if options.check_finite else []:
                reading.watch(array)
        reading.start()  # after the watching: one read of the file for all of it (none for a file refused)
    return source
