"""Conversions as library calls: read a source into canonical RNNs, write them out.

The CLI is a thin layer over these functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rnnconv.canonical import CanonicalRNN
from rnnconv.errors import BadInput, Unsupported
from rnnconv.fsutil import sha256_of
from rnnconv.layouts import DEFAULT_BIAS_SPLIT

BLOB_SUFFIXES = (".bin", ".safetensors")


@dataclass
class Conversion:
    outputs: list[Path]
    rnns: list[CanonicalRNN]
    dtype: str
    warnings: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outputs": [str(p) for p in self.outputs],
            "dtype": self.dtype,
            "rnns": [{"name": r.name, "spec": r.spec.to_dict(), "notes": r.notes} for r in self.rnns],
            "warnings": self.warnings,
            "skipped": [{"name": n, "reason": why} for n, why in self.skipped],
        }


def source_info(path: Path, fmt: str, **extra: Any) -> dict[str, Any]:
    return {"path": str(path.resolve()), "format": fmt, "sha256": sha256_of(path), **extra}


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


def write_blobs(rnns: list[CanonicalRNN], output: Path, dtype: str | None, force: bool,
                progress: Callable[[int], None] | None = None) -> Conversion:
    """Write canonical RNNs as a cuDNN weight space: one to .bin (+ sidecar), any number to .safetensors."""
    from rnnconv.formats.cudnn import sidecar_path, write_bin, write_safetensors

    if not rnns:
        raise BadInput("nothing to write: no recurrent layer could be converted")
    dtype = dtype or rnns[0].spec.dtype
    if output.suffix == ".bin":
        if len(rnns) > 1:
            raise BadInput(f"a .bin holds one RNN but {len(rnns)} were selected "
                           f"({', '.join(r.name for r in rnns)}); pick one, or write a .safetensors")
        warnings = write_bin(rnns[0], output, dtype, force, progress)
        return Conversion([output, sidecar_path(output)], rnns, dtype, warnings)
    if output.suffix == ".safetensors":
        warnings = write_safetensors(rnns, output, dtype, force, progress)
        return Conversion([output], rnns, dtype, warnings)
    raise BadInput(f"output {output} must end in .bin (raw weight space + JSON sidecar) or .safetensors")


def keras_to_cudnn(source: Path, output: Path | None = None, layer: str | None = None, dtype: str | None = None,
                   bias_split: str = DEFAULT_BIAS_SPLIT, force: bool = False,
                   progress: Callable[[int], None] | None = None) -> Conversion:
    from rnnconv.formats.keras import FORMAT_NAMES, KerasFile, to_canonical

    output = output or default_output(source)
    with KerasFile(source) as keras_file:
        info = source_info(source, keras_file.kind, **keras_file.versions)
        if layer is None and output.suffix == ".safetensors" and len(keras_file.layers) > 1:
            picked = keras_file.layers
        else:
            picked = [keras_file.layer(layer)]
        rnns, skipped = [], []
        for keras_layer in picked:
            try:
                rnns.append(to_canonical(keras_layer, info, bias_split))
            except Unsupported as exc:
                if len(picked) == 1:
                    raise Unsupported(f"layer {keras_layer.name!r} ({keras_layer.display_class}) in "
                                      f"{FORMAT_NAMES[keras_file.kind]} {source} cannot become a cuDNN RNN: {exc}") \
                        from None
                skipped.append((keras_layer.name, str(exc)))
        if not rnns:
            raise Unsupported(f"no recurrent layer of {source} can become a cuDNN RNN: "
                              + "; ".join(f"{n}: {why}" for n, why in skipped))
        result = write_blobs(rnns, output, dtype, force, progress)
    result.skipped = skipped
    return result
