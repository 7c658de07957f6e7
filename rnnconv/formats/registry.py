"""The registry of file formats: one package per format, the same verbs for each.

A format package under `rnnconv/formats/` says what it is in its `__init__.py` (its `plugin.Plugin`) and defines
a `Format` subclass in its `format.py`, decorated with `@register`; the registry finds every such package by
itself (`catalog.plugins()`), so adding a format touches no other file of rnnconv. Detection, conversion,
inspection, verify and the CLI only ask the registry; none of them branches on
a format. Asking for something no format offers fails with the exact key
("no writer for format 'onnx'"), never by falling through to another format.

Whether a file is of a format (`sniff`) is the format's `wire.sniff`, which the registry asks in each plugin's
`sniff_order` without importing the format's `format` module: a conversion imports the modules of its two formats
only. The verbs are `base.Format`'s.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path

from rnnconv.errors import BackendMissing, BadInput, RnnconvError, Unsupported, either
from rnnconv.formats import catalog
from rnnconv.formats.base import Format, WeightSpaceFormat
from rnnconv.formats.plugin import Plugin
from rnnconv.formats.probe import Probe
from rnnconv.formats.probe import Unrecognized as Unrecognized  # noqa: PLC0414
from rnnconv.formats.runtimes import Engine
from rnnconv.formats.settings import ReadOptions
from rnnconv.table.rows import ADAPTER_FORMATS

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
    for plugin in catalog.in_sniffing_order():
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
    return [_load()[plugin.info.name] for plugin in catalog.in_sniffing_order()]


def weight_spaces() -> WeightSpaceFormat:
    """The format whose files are cuDNN's weight space, as its plugin says (`Plugin.weight_space`)."""
    fmt = get(catalog.WEIGHT_SPACE)
    assert isinstance(fmt, WeightSpaceFormat), fmt
    return fmt


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
    """The file a source argument names: itself, or the file a format finds for a name that is no file (a folder)."""
    if os.path.lexists(path) and not os.path.isdir(path):
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
    infos = [p.info for p in catalog.in_sniffing_order()]
    matches = [(len(suffix), info) for info in infos for suffix in info.default_for if path.name.endswith(suffix)]
    if not matches:
        names = "; ".join(f"{either(info.default_for)} ({info.title})" for info in infos if info.default_for)
        raise BadInput(f"cannot tell what to write from the name {path}: use {names}, or say --to")
    return get(max(matches, key=lambda m: m[0])[1].name)
