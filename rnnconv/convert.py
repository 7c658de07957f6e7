"""Conversions as library calls: any source into canonical RNNs, canonical RNNs into any target.

Sources (found from the file's content): Keras files, PyTorch checkpoints and
safetensors state_dicts, cuDNN blobs (sidecar, rnnconv safetensors, or a raw blob
described by a spec). Targets (from the output's name, or `to`): cuDNN weight
spaces, PyTorch state_dicts, Keras models. Every pair goes through the canonical
form, so keras -> torch and torch -> keras need nothing of their own. The CLI is a
thin layer over these functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from rnnconv.canonical import CanonicalRNN, RNNSpec, stack
from rnnconv.detect import CUDNN_BIN, CUDNN_SAFETENSORS, KERAS, TORCH, TORCH_SAFETENSORS, detect
from rnnconv.errors import BadInput, Unsupported
from rnnconv.fsutil import sha256_in_background
from rnnconv.layouts import DEFAULT_BIAS_SPLIT

SOURCE_KINDS = {KERAS: "keras", TORCH: "torch", TORCH_SAFETENSORS: "torch", CUDNN_BIN: "cudnn",
                CUDNN_SAFETENSORS: "cudnn"}
TARGETS = ("cudnn", "torch", "keras")
COMMAND_FOR = {"keras": "keras-to-cudnn", "torch": "torch-to-cudnn", "cudnn": "cudnn-to-torch or cudnn-to-keras"}


@dataclass
class SourceOptions:
    select: str | None = None  # --layer (Keras layer, safetensors key) or --prefix (PyTorch)
    bias_split: str = DEFAULT_BIAS_SPLIT
    nonlinearity: str = "tanh"
    raw_spec: RNNSpec | None = None  # a blob without a sidecar
    take_all: bool = False  # every RNN in the file (multi-RNN outputs)


@dataclass
class Conversion:
    outputs: list[Path]
    rnns: list[CanonicalRNN]
    dtype: str
    target: str = "cudnn"
    warnings: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    usage: str = ""  # how to load what was written

    def to_dict(self) -> dict[str, Any]:
        return {
            "outputs": [str(p) for p in self.outputs],
            "target": self.target,
            "dtype": self.dtype,
            "rnns": [{"name": r.name, "spec": r.spec.to_dict(), "notes": r.notes} for r in self.rnns],
            "warnings": self.warnings,
            "skipped": [{"name": n, "reason": why} for n, why in self.skipped],
            "usage": self.usage,
        }


def source_info(path: Path, fmt: str, **extra: Any) -> dict[str, Any]:
    """Where the RNNs came from; the sha256 is computed on another core while they convert."""
    return {"path": str(path.resolve()), "format": fmt, "sha256": sha256_in_background(path), **extra}


def default_output(source: Path, suffix: str = ".bin") -> Path:
    """model.h5, model.weights.h5 and model.keras all become model.bin beside the source."""
    name = source.name
    for ending in (".weights.h5", ".h5", ".hdf5", ".keras", ".safetensors", ".pth", ".pt", ".bin"):
        if name.endswith(ending) and len(name) > len(ending):
            name = name[: -len(ending)]
            break
    out = source.with_name(name + suffix)
    if out == source:
        raise BadInput(f"the default output would overwrite {source}; name one with -o")
    return out


def source_kind(path: Path, options: SourceOptions, expect: str | None = None) -> str:
    """The kind of a source file; when unrecognisable and a kind is expected, that kind's reader explains."""
    if options.raw_spec is not None:
        return "cudnn"
    try:
        return SOURCE_KINDS[detect(path)]
    except BadInput:
        if expect is None:
            raise
        return expect


@contextlib.contextmanager
def open_source(path: Path, options: SourceOptions, expect: str | None = None
                ) -> Iterator[tuple[list[CanonicalRNN], list[tuple[str, str]]]]:
    """The selected RNNs of a file in canonical form, and the ones skipped (name, why).

    The file stays open while the context lasts: tensors are read when a writer pulls them.
    """
    kind = source_kind(path, options, expect)
    if expect and kind != expect:
        raise BadInput(f"{path} is a {kind} file, not a {expect} one; use `rnnconv {COMMAND_FOR[kind]}` "
                       f"or `rnnconv convert`")
    if kind == "keras":
        from rnnconv.formats.keras import FORMAT_NAMES, KerasFile, to_canonical

        with KerasFile(path) as keras_file:
            info = source_info(path, keras_file.kind, **keras_file.versions)
            describe = (lambda layer: f"layer {layer.name!r} ({layer.display_class}) in "
                                      f"{FORMAT_NAMES[keras_file.kind]} {path}")
            canonical = (lambda layer: to_canonical(layer, info, options.bias_split, keras_file.reader))
            if options.select and "," in options.select:  # consecutive layers -> one multi-layer RNN
                names = [n.strip() for n in options.select.split(",")]
                parts, _ = _convert_each([keras_file.layer(n) for n in names], canonical, describe, strict=True)
                yield [stack(options.select, parts)], []
                return
            layers = keras_file.layers if options.take_all and options.select is None and \
                len(keras_file.layers) > 1 else [keras_file.layer(options.select)]
            yield _convert_each(layers, canonical, describe)
        return
    if kind == "torch":
        from rnnconv.formats import torch as torch_format

        found = torch_format.find_rnns(torch_format.load_state_dict(path))
        info = source_info(path, "torch-safetensors" if path.suffix == ".safetensors" else "torch")
        chosen = found if options.take_all and options.select is None and len(found) > 1 \
            else [torch_format.pick(found, options.select, path)]
        yield _convert_each(chosen, lambda rnn: torch_format.to_canonical(rnn, info, options.nonlinearity),
                            lambda rnn: f"RNN {rnn.name!r} in {path}")
        return
    from rnnconv.formats.cudnn import open_bin, open_safetensors

    if options.raw_spec is not None or detect(path) == CUDNN_BIN:
        blobs = [open_bin(path, options.raw_spec)]
    else:
        blobs = open_safetensors(path)
        if options.select is not None:
            blobs = [b for b in blobs if b.name == options.select] or _no_such(path, options.select, blobs)
        elif len(blobs) > 1 and not options.take_all:
            raise BadInput(f"{path} holds {len(blobs)} RNNs ({', '.join(b.name for b in blobs)}); pick one with "
                           f"--layer")
    yield [b.to_canonical() for b in blobs], []


def _no_such(path: Path, name: str, blobs: list) -> list:
    raise BadInput(f"{path} has no RNN named {name!r}; it holds {', '.join(b.name for b in blobs)}")


def _convert_each(items: list, convert: Callable[[Any], CanonicalRNN], describe: Callable[[Any], str],
                  strict: bool = False) -> tuple[list[CanonicalRNN], list[tuple[str, str]]]:
    """Convert the chosen items; when all were asked for, skip (and report) those that cannot be."""
    rnns, skipped = [], []
    for item in items:
        try:
            rnns.append(convert(item))
        except Unsupported as exc:
            if len(items) == 1 or strict:
                raise Unsupported(f"{describe(item)} cannot be converted: {exc}") from None
            skipped.append((getattr(item, "name", str(item)), str(exc)))
    if not rnns:
        raise Unsupported("none of the recurrent layers can be converted: "
                          + "; ".join(f"{n}: {why}" for n, why in skipped))
    return rnns, skipped


def target_of(output: Path, to: str | None) -> str:
    if to:
        if to not in TARGETS:
            raise BadInput(f"unknown target {to!r} (choose {', '.join(TARGETS)})")
        return to
    name = output.name
    if name.endswith((".keras", ".weights.h5")):
        return "keras"
    if output.suffix in (".pt", ".pth"):
        return "torch"
    if output.suffix in (".bin", ".safetensors"):
        return "cudnn"
    raise BadInput(f"cannot tell what to write from the name {output}: use .bin or .safetensors (cuDNN), "
                   f".pt or .pth (PyTorch), .keras or .weights.h5 (Keras), or say --to")


def takes_several(output: Path) -> bool:
    """Whether one output file holds every RNN of the source when none is picked."""
    return output.suffix == ".safetensors"


def write_target(rnns: list[CanonicalRNN], output: Path, target: str, dtype: str | None, force: bool,
                 progress: Callable[[int, int], None] | None = None) -> Conversion:
    """Write to the target; `progress(bytes_just_written, total_bytes)` follows a weight space being written."""
    dtype = dtype or rnns[0].spec.dtype
    if target == "cudnn":
        from rnnconv.dtypes import element_type
        from rnnconv.formats.cudnn import sidecar_path, write_bin, write_safetensors
        from rnnconv.weightspace import weight_space_elements

        total = sum(weight_space_elements(r.spec) for r in rnns) * element_type(dtype).itemsize
        advance = (lambda n: progress(n, total)) if progress else None

        if output.suffix == ".bin":
            if len(rnns) > 1:
                raise BadInput(f"a .bin holds one RNN but {len(rnns)} were selected "
                               f"({', '.join(r.name for r in rnns)}); pick one, or write a .safetensors")
            warnings = write_bin(rnns[0], output, dtype, force, advance)
            return Conversion([output, sidecar_path(output)], rnns, dtype, target, warnings)
        if output.suffix == ".safetensors":
            return Conversion([output], rnns, dtype, target, write_safetensors(rnns, output, dtype, force, advance))
        raise BadInput(f"output {output} must end in .bin (raw weight space + JSON sidecar) or .safetensors")
    if target == "torch":
        from rnnconv.formats.torch import constructor, write_state_dict

        write_state_dict(rnns, output, dtype, force)
        usage = "\n".join(f"{constructor(r.spec)}" + (f"  # keys prefixed '{r.name}.'" if len(rnns) > 1 else "")
                          for r in rnns)
        return Conversion([output], rnns, dtype, target, usage=f"load_state_dict into:\n{usage}")
    from rnnconv.formats.keras_write import loading_snippet, write_keras

    write_keras(rnns, output, dtype, force)
    return Conversion([output], rnns, dtype, target, usage=loading_snippet(rnns, output))


def convert(source: Path, output: Path | None = None, to: str | None = None,
            options: SourceOptions | None = None, dtype: str | None = None, force: bool = False,
            expect: str | None = None, progress: Callable[[int, int], None] | None = None) -> Conversion:
    """Convert `source` (of kind `expect`, when given) to `output`; the target comes from `to` or the name."""
    options = options or SourceOptions()
    output = output or default_output(source, {"torch": ".pt", "keras": ".keras"}.get(to or "", ".bin"))
    target = target_of(output, to)
    if output.resolve() == source.resolve():
        raise BadInput(f"the output {output} is the source itself")
    options.take_all = options.take_all or takes_several(output)
    with open_source(source, options, expect) as (rnns, skipped):
        result = write_target(rnns, output, target, dtype, force, progress)
    result.skipped = skipped
    return result


def keras_to_cudnn(source: Path, output: Path | None = None, layer: str | None = None, dtype: str | None = None,
                   bias_split: str = DEFAULT_BIAS_SPLIT, force: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> Conversion:
    return convert(source, output, "cudnn", SourceOptions(layer, bias_split), dtype, force, "keras", progress)
