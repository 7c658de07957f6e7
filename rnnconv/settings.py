"""How to read a source and how to write a target, declared once: the library takes these fields, the
command line makes its options of them (a field's `flags` and description are the option's name and help).

`ReadOptions` is what every format's `read` is given, `WriteOptions` what its `write` is given; `api.load`,
`api.convert` and `api.convert_many` take their fields as keyword arguments, by the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ConfigDict, Field

from rnnconv.canonical import RNNSpec
from rnnconv.contracts import Contract, parse
from rnnconv.table.layouts import BIAS_SPLITS, DEFAULT_BIAS_SPLIT

Progress = Callable[[int, int], None]  # (bytes just written, total bytes of the weight spaces)


def _flags(*flags: str) -> dict[str, Any]:
    """A field that the command line offers as an option with these flags."""
    return {"flags": list(flags)}


class Settings(Contract):
    # Not strict: a library user's str is a Path; a setting may be changed as a conversion goes.
    model_config = ConfigDict(strict=False, arbitrary_types_allowed=True)

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
    return {key for name, field in model.model_fields.items() for key in (name, field.alias) if key}


class ReadOptions(Settings):
    """How to read a source: which RNN, and what a file cannot say."""

    layer: str | None = Field(
        None,
        description="The RNN to use when the file holds several: a Keras layer name "
        "(a,b,c stacks consecutive layers into one multi-layer RNN), a PyTorch module prefix (encoder.rnn), "
        "an ONNX node name (a,b for a chain of nodes), a TF1 layer's variable scope (encoder/cudnn_lstm), a path in a "
        "Flax tree (encoder/layers_1) or a key of an rnnconv .safetensors. The error lists them.",
        json_schema_extra=_flags("--layer"),
    )
    bias_split: str = Field(
        DEFAULT_BIAS_SPLIT,
        description="How a single bias (a Keras LSTM's or SimpleRNN's, a TF1 checkpoint's) "
        "becomes cuDNN's two: " + "; ".join(f"{k} = {v}" for k, v in BIAS_SPLITS.items()) + ".",
        json_schema_extra=_flags("--bias-split"),
    )
    # What a file may not store, stated by the user (None: not stated, so assumed and said so).
    nonlinearity: str | None = Field(
        None,
        description="nn.RNN's nonlinearity, which a state_dict does not store, a TF1 CudnnRNNTanh/CudnnRNNRelu's, "
        "which its checkpoint does not store, or a Flax SimpleCell's activation_fn [default: tanh, recorded as an "
        "assumption].",
        json_schema_extra=_flags("--nonlinearity"),
    )
    activation: str | None = Field(
        None,
        description="A Keras layer's activation, for a weights file without a model config [default: tanh, recorded "
        "as an assumption].",
        json_schema_extra=_flags("--activation"),
    )
    recurrent_activation: str | None = Field(
        None,
        description="A Keras LSTM/GRU's recurrent_activation, for a weights file without a model config [default: "
        "sigmoid, recorded as an assumption; refused for Keras versions whose default was hard_sigmoid].",
        json_schema_extra=_flags("--recurrent-activation"),
    )
    require_stated: bool = Field(
        False,
        description="Fail (exit 2) rather than assume a setting the file does not store (an nn.RNN's nonlinearity, a "
        "bare Keras file's activations).",
        json_schema_extra=_flags("--require-stated"),
    )
    dequantize: bool = Field(
        False,
        description="Convert an ONNX quantized LSTM (com.microsoft DynamicQuantizeLSTM) with its int8 weights "
        "dequantized, (q - zero_point) * scale: the result is the float model the quantized one approximates.",
        json_schema_extra=_flags("--dequantize"),
    )
    raw_spec: RNNSpec | None = Field(
        None, alias="spec", description="The spec of a raw cuDNN weight space without a sidecar."
    )
    take_all: bool = Field(False, alias="all_rnns", description="Every RNN in the file, for outputs that hold several.")
    hash_source: bool = Field(
        True, description="Record the source's digest in the provenance (the command line's --no-hash: don't)."
    )


class WriteOptions(Settings):
    """How to write a target."""

    dtype: str | None = Field(
        None,
        description="Element type of the output [default: the source's]; for a raw blob, the blob's (and the "
        "output's).",
        json_schema_extra=_flags("--dtype"),
    )
    force: bool = Field(False, description="Replace existing output files.", json_schema_extra=_flags("--force"))
    allow_lossy: bool = Field(
        False,
        description="Write a target that cannot hold a term of the source (refused otherwise, naming the term) "
        "without it, and say how much that changes the outputs on probe inputs.",
        json_schema_extra=_flags("--allow-lossy"),
    )
    progress: Progress | None = Field(None, description="Told (bytes just written, total bytes) as a blob is written.")


class TargetOptions(Settings):
    """What to write, besides how: what a conversion takes beyond the read and write options."""

    to: str | None = Field(
        None,
        description="What to write, when the output's name does not say (a .safetensors is cuDNN's unless --to torch).",
        json_schema_extra=_flags("--to"),
    )
    into: Path | None = Field(
        None,
        description="Write a copy of this model file (-o names it) with the RNN's tensors in place of its own, "
        "everything else untouched; the RNN goes where its blob came from (the sidecar says), or where --layer names "
        "in it.",
        json_schema_extra=_flags("--into"),
    )
    source_format: str | None = Field(None, description="The source's format, insisted on (its content decides).")


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


def declared(model: type[Settings]) -> dict[str, tuple[Any, tuple[str, ...], str]]:
    """The command-line options a model's fields declare: field name -> (default, flags, help)."""
    options = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        flags = extra.get("flags") if isinstance(extra, dict) else None
        if isinstance(flags, list):
            options[name] = (field.default, tuple(str(flag) for flag in flags), field.description or "")
    return options
