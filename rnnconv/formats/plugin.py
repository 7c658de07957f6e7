"""What a format package says of itself, as data: its `Plugin`, in the package's `__init__.py`.

A format is a package under `rnnconv/formats/` whose `__init__.py` holds one `PLUGIN` (plain data, no import of
numpy or of the format's code) and whose `format.py` registers its `Format` (`registry.register`). Everything that
lists formats reads the plugins: the command line (its X-to-Y commands, `--to`, `verify --backend`, without
importing a format), `doctor` (each runtime, each engine), the registry (which package to import), the tests (the
frameworks a conversion must not import) and the packaging check (each extra declared, installed by the tests and
pinned for CI). `catalog.plugins()` finds them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SettingField:
    """A setting the command line offers as an option and the library takes as a keyword, in plain data: its type,
    default, flags and help, and the values it takes where they are a fixed set (the command line's choice)."""

    annotation: Any  # the library's type
    default: Any
    flags: tuple[str, ...]
    help: str
    choices: tuple[str, ...] = ()


# Every element type rnnconv reads and writes (table.constants.ELEMENT_TYPE_CODES), float32 first.
EVERY_DTYPE: tuple[str, ...] = ("float32", "float64", "float16", "bfloat16")


@dataclass(frozen=True)
class Holds:
    """What a format's files can hold beyond what its table rows say, as data. Its rows say which cells it writes
    (a row per layer class), with which activations, whether an LSTM's projection has a tensor and which biases its
    layouts store; this says the rest. `formats/holding.py` derives from the two every refusal of a source the format
    cannot hold exactly, the element type it writes and the warning when that is not the source's."""

    # The element types its writer stores (what --dtype may ask), the one its runtime computes with first.
    dtypes: tuple[str, ...] = EVERY_DTYPE
    # The source types written as they are when --dtype is not given (None: each of `dtypes`); a source of another is
    # written as dtypes[0] where that holds its values exactly (and said), else refused naming --dtype.
    keeps: tuple[str, ...] | None = None
    layers: bool = True  # several layers in one file
    directions: bool = True  # a bidirectional RNN
    # The integer types its weights may be quantized to (--quantize: weights only, symmetric, biases and states
    # float), and whether its runtime's quantized kernels take a scale per channel (else one per tensor).
    quantizes: tuple[str, ...] = ()
    per_channel: bool = False

    @property
    def kept(self) -> tuple[str, ...]:
        return self.dtypes if self.keeps is None else self.keeps


@dataclass(frozen=True)
class FormatInfo:
    """What a format is, for people and for the command line."""

    name: str  # as in the layout table's rows and on the command line (--to)
    title: str
    kinds: Mapping[str, str]  # file kind -> description; sources record the kind they came from
    read_help: str
    write_help: str
    read_note: str  # how it is read (what it needs, what it never does)
    write_note: str  # what a written file is and how to use it
    read_suffixes: tuple[str, ...]  # the names its files usually have (detection goes by content, not name)
    write_suffixes: tuple[str, ...]  # output names it can write; none for a format rnnconv only reads
    default_for: tuple[str, ...]  # output names that mean this format when no --to is given
    source_options: tuple[str, ...]  # the read options that apply to its files (beyond --layer)
    example: str  # a file name of this format, for examples
    layer: str = ""  # what --layer names in its files, as its help says (none: a file holds one RNN)
    examples: tuple[str, ...] = ()  # source arguments worth showing when this format is the source
    extra: str | None = None  # the pip extra its framework comes in
    writes_into: bool = False  # whether --into can write a copy of a user's file with an RNN replaced
    # The runtimes that run its streaming models (`--streaming`), its own first; none: it writes none.
    streams: tuple[str, ...] = ()
    fixed_chunk: bool = False  # whether a streaming model of it takes one chunk length (--chunk), not any
    # Whether its writer counts the NaN and Inf values it writes (and warns): a source's read, for its digest, then
    # checks the values it holds in the file, so the writer need not read them again.
    counts_non_finite: bool = False
    holds: Holds = Holds()  # what its written files can hold (a format that only reads: unused)

    @property
    def writes(self) -> bool:
        return bool(self.write_suffixes)


@dataclass(frozen=True)
class Runtime:
    """A framework that runs a format's files as their source model (verify's other side), as `doctor` lists it:
    its packages (the name pip knows, the module imported), what it runs and how to get it."""

    key: str  # doctor's name for it
    modules: tuple[tuple[str, str], ...]
    runs: str
    install: str = ""  # [default: pip install 'rnnconv[EXTRA]', the format's extra]
    major: str = ""  # the first package's version must begin so (Keras 3: "3")


@dataclass(frozen=True)
class EngineInfo:
    """The verify engine a format offers (`verify --backend NAME`): a blob written by the format's writer and run
    by its runtime."""

    name: str
    suffix: str  # the file name the writer is given (the format's own ending)
    detail: str  # what runs the blob, as the report says
    modules: tuple[tuple[str, str], ...]  # (name in the report, module) of each of the runtime's packages
    listed: int  # where `verify --backend` lists it, after auto, cudnn and numpy
    install: str = ""  # how to install its packages, where the format's extra does not (MNN)


@dataclass(frozen=True)
class Plugin:
    """One format package's facts."""

    package: str  # the package's module name (its `__name__`): the registry imports its `wire` (to sniff) and `format`
    info: FormatInfo
    listed: int  # where `--help` lists the format among the others
    sniff_order: int = 50  # where its `wire.sniff` is asked (lower first): a specific format before a general one
    runtimes: tuple[Runtime, ...] = ()  # what runs its files as a source (`Format.run`), for `doctor`
    engine: EngineInfo | None = None  # what runs its files and blobs by default (verify --backend auto)
    more_engines: tuple[EngineInfo, ...] = ()  # other runtimes that run them when asked (verify --backend NAME)
    # Its test dependencies: the modules of the frameworks its extra installs, which its tests import and which a
    # conversion that does not run the format must never import.
    frameworks: tuple[str, ...] = ()
    # The settings that are its own: a source's (ONNX's --dequantize) and a target's (ONNX's --profile, TFLite's
    # --chunk), offered by the command line and taken by the library beside every format's.
    read_settings: Mapping[str, SettingField] = field(default_factory=dict)
    write_settings: Mapping[str, SettingField] = field(default_factory=dict)
    # Whether its files are cuDNN's weight space itself: the blobs verify runs and the GPU layer feeds cuDNN, the
    # default target (one format says so: `registry.weight_spaces()`).
    weight_space: bool = False


NPM = "npm:"  # a runtime's module run by Node.js, not imported by Python


@functools.cache
def _providers() -> Mapping[str, list[str]]:
    import importlib.metadata  # here, not above: every command reads the plugins, only doctor and verify versions

    return importlib.metadata.packages_distributions()


def version(package: str, module: str) -> str | None:
    """The installed version of a package (or of the distribution that provides its module: tensorflow-cpu for
    tensorflow), None where it is not installed: what `doctor` says of a runtime, and verify's report. A module
    named `npm:<name>` is Node.js (`npm:node`) or an npm package, found as `formats/_node.py` finds them."""
    if module.startswith(NPM):
        from rnnconv.formats._node import version as npm_version

        return npm_version(module[len(NPM) :])
    import importlib.metadata

    for name in [package, *_providers().get(module.partition(".")[0], [])]:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
