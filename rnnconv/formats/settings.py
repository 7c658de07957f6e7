"""How to read a source and how to write a target, declared once: the library takes these fields, the
command line makes its options of the ones `rnnconv.formats.setting_fields` declares (in plain data, so that the command
line's help needs no pydantic).

`ReadOptions` is what every format's `read` is given, `WriteOptions` what its `write` is given; `api.load`,
`api.convert` and `api.convert_many` take their fields as keyword arguments, by the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.contracts import parse
from rnnconv.core.record import Record, Spec, field
from rnnconv.formats.setting_fields import READ_FIELDS, TARGET_FIELDS, WRITE_FIELDS, SettingField

Progress = Callable[[int, int], None]  # (bytes just written, total bytes of the weight spaces)


def _offered(setting: SettingField) -> Any:
    """The field of a setting the command line offers as an option: its default and its help."""
    return field(setting.default, description=setting.help)


class Settings(Record):
    # Not strict: a library user's str is a Path; a setting may be changed as a conversion goes.
    pydantic_config: ClassVar[dict[str, Any]] = {"strict": False, "arbitrary_types_allowed": True}

    @classmethod
    def of(cls: type[S], given: Mapping[str, Any], where: str) -> S:
        """The settings of keyword arguments a function was given (TypeError for a name it does not take, as Python
        says it; BadInput for a value of the wrong kind)."""
        unknown = [name for name in given if name not in names(cls)]
        if unknown:
            raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
        return parse(cls, dict(given), where)


S = TypeVar("S", bound=Settings)


def names(model: type[Settings]) -> set[str]:
    """The keyword names a model takes: its fields' names and aliases."""
    fields: dict[str, Spec] = model.model_fields
    return {key for name, field in fields.items() for key in (name, field.alias) if key}


class ReadOptions(Settings):
    """How to read a source: which RNN, and what a file cannot say."""

    layer: str | None = _offered(READ_FIELDS["layer"])
    bias_split: str = _offered(READ_FIELDS["bias_split"])
    # What a file may not store, stated by the user (None: not stated, so assumed and said so).
    nonlinearity: str | None = _offered(READ_FIELDS["nonlinearity"])
    activation: str | None = _offered(READ_FIELDS["activation"])
    recurrent_activation: str | None = _offered(READ_FIELDS["recurrent_activation"])
    require_stated: bool = _offered(READ_FIELDS["require_stated"])
    dequantize: bool = _offered(READ_FIELDS["dequantize"])
    forget_bias: float | None = _offered(READ_FIELDS["forget_bias"])
    raw_spec: RNNSpec | None = field(
        default=None, json_name="spec", description="The spec of a raw cuDNN weight space without a sidecar."
    )
    drop_clip: bool = field(
        default=False,
        description="Read an LSTM that clips (TFLite's cell_clip, proj_clip) without the clip, the loss recorded with "
        "how far it moves the outputs: what a conversion with --allow-lossy asks of its source.",
    )
    take_all: bool = field(
        default=False, json_name="all_rnns", description="Every RNN in the file, for outputs that hold several."
    )
    hash_source: bool = field(
        default=True, description="Record the source's digest in the provenance (the command line's --no-hash: don't)."
    )
    check_finite: bool = field(
        default=False,
        description="Check, in the read that computes the source's digest, whether the values its RNNs keep in the "
        "file are finite: what a conversion asks of its source when the target's writer counts NaN and Inf values.",
    )


class WriteOptions(Settings):
    """How to write a target."""

    dtype: str | None = _offered(WRITE_FIELDS["dtype"])
    force: bool = _offered(WRITE_FIELDS["force"])
    allow_lossy: bool = _offered(WRITE_FIELDS["allow_lossy"])
    profile: str | None = _offered(WRITE_FIELDS["profile"])
    streaming: bool = _offered(WRITE_FIELDS["streaming"])
    chunk: int | None = _offered(WRITE_FIELDS["chunk"])
    quantize: str | None = _offered(WRITE_FIELDS["quantize"])
    progress: Progress | None = field(
        default=None, description="Told (bytes just written, total bytes) as a blob is written."
    )


class TargetOptions(Settings):
    """What to write, besides how: what a conversion takes beyond the read and write options."""

    to: str | None = _offered(TARGET_FIELDS["to"])
    into: Path | None = _offered(TARGET_FIELDS["into"])
    source_format: str | None = field(
        default=None, description="The source's format, insisted on (its content decides)."
    )


def split(given: Mapping[str, Any], where: str) -> tuple[ReadOptions, WriteOptions, TargetOptions]:
    """A conversion's keyword arguments as its three settings (TypeError for a name none of them takes)."""
    models: tuple[type[Settings], ...] = (ReadOptions, WriteOptions, TargetOptions)
    parts: list[dict[str, Any]] = [{} for _ in models]
    for name, value in given.items():
        index = next((i for i, model in enumerate(models) if name in names(model)), None)
        if index is None:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        parts[index][name] = value
    return ReadOptions.of(parts[0], where), WriteOptions.of(parts[1], where), TargetOptions.of(parts[2], where)


def conversion_names() -> set[str]:
    """Every keyword a conversion takes."""
    return names(ReadOptions) | names(WriteOptions) | names(TargetOptions)
