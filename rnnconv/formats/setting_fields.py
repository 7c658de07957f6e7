"""The settings the command line offers as options, in plain data: each one's type, default, flags and help.

`rnnconv.formats.settings` makes its typed fields of them and `rnnconv.cli.options` the command line's options, so a
setting is declared once, and `rnnconv --help` builds every option without importing pydantic or numpy. Every
format's settings are here; a format's own (ONNX's --profile, TFLite's --chunk) are declared in its plugin, and where
a setting's help names formats, the plugins name them (what --layer names in each, which formats a simple RNN's
nonlinearity or a single bias concern).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from rnnconv.formats.catalog import FORMAT_INFO, plugins
from rnnconv.formats.plugin import SettingField
from rnnconv.table.layouts import BIAS_SPLITS, DEFAULT_BIAS_SPLIT


def _those_with(option: str) -> str:
    """The formats whose files the read option `option` concerns, as a sentence names them."""
    titles = [info.title for info in FORMAT_INFO.values() if option in info.source_options]
    return ", ".join(titles[:-1]) + f" or {titles[-1]}" if len(titles) > 1 else "".join(titles)


def _quantizing() -> str:
    """The formats whose files --quantize can write, each with its scheme (its Holds say whether its kernels take a
    scale per channel), as a sentence names them."""
    return "; ".join(
        f"{info.title}: a scale per {'channel' if info.holds.per_channel else 'tensor'}"
        for info in FORMAT_INFO.values()
        if info.holds.quantizes
    )


def _layer_help() -> str:
    named = [f"{info.title}: {info.layer}" for info in FORMAT_INFO.values() if info.layer]
    return (
        "The RNN to use when the file holds several, as inspect lists it: " + "; ".join(named) + ". The error lists "
        "them."
    )


def _streaming_help() -> str:
    streaming = [info.title for info in FORMAT_INFO.values() if info.streams]
    return (
        f"Write a streaming model ({', '.join(streaming)}), called a chunk of steps at a time: it takes x (batch, "
        "chunk, input) and every layer's states (h_l0, c_l0, h_l1, ...) and gives y and the new states (h_l0_next, "
        "...). verify --streaming feeds a written one the sequence in chunks of 1, 3 and 7 steps (or of its --chunk), "
        "carrying the states."
    )


def _own(side: str) -> dict[str, SettingField]:
    """Every format's settings of its own, on one side (read, write)."""
    found: dict[str, SettingField] = {}
    for plugin in plugins():
        for name, setting in getattr(plugin, f"{side}_settings").items():
            if name in found:
                raise RuntimeError(f"setting {name!r} is declared by two formats")
            found[name] = setting
    return found


READ_FIELDS: Final[dict[str, SettingField]] = {
    "layer": SettingField(str | None, None, ("--layer",), _layer_help()),
    "bias_split": SettingField(
        str,
        DEFAULT_BIAS_SPLIT,
        ("--bias-split",),
        f"How a single bias ({_those_with('bias_split')}) becomes cuDNN's two: "
        + "; ".join(f"{k} = {v}" for k, v in BIAS_SPLITS.items())
        + ".",
        tuple(BIAS_SPLITS),
    ),
    # What a file may not store, stated by the user (None: not stated, so assumed and said so).
    "nonlinearity": SettingField(
        str | None,
        None,
        ("--nonlinearity",),
        f"A simple RNN's nonlinearity, which a file of {_those_with('nonlinearity')} does not store [default: tanh, "
        "recorded as an assumption].",
    ),
    "require_stated": SettingField(
        bool,
        False,
        ("--require-stated",),
        "Fail (exit 2) rather than assume a setting the file does not store (a simple RNN's nonlinearity, a bare "
        "Keras file's activations).",
    ),
    # One setting for every format that stores quantized RNNs (which the formats' source_options name).
    "dequantize": SettingField(
        bool,
        False,
        ("--dequantize",),
        f"Convert a quantized RNN ({_those_with('dequantize')}: int8 weights with their scales and zero points) "
        "with its weights dequantized, (q - zero_point) * scale: the result is the float model the quantized one "
        "approximates, and the written file's record says what was dequantized.",
    ),
    **_own("read"),
}
WRITE_FIELDS: Final[dict[str, SettingField]] = {
    "dtype": SettingField(
        str | None,
        None,
        ("--dtype",),
        "Element type of the output [default: the source's where the target stores it, else the one it computes "
        "with; for a raw blob, the blob's (and the output's)].",
    ),
    "force": SettingField(bool, False, ("--force",), "Replace existing output files."),
    "allow_lossy": SettingField(
        bool,
        False,
        ("--allow-lossy",),
        "Write a target that cannot hold a term of the source (refused otherwise, naming the term) "
        "without it, and say how much that changes the outputs on probe inputs.",
    ),
    "streaming": SettingField(bool, False, ("--streaming",), _streaming_help()),
    "quantize": SettingField(
        str | None,
        None,
        ("--quantize",),
        f"Write the weight matrices quantized, symmetric, scale = max|W| / 127 ({_quantizing()}, as its kernels "
        "take them); biases and states stay float. Quantization "
        "rounds each weight by up to half a step: asked for, it is allowed, and the written record says the scheme "
        "and the bound its scales give, which verify holds the file to.",
        ("int8",),
    ),
    **_own("write"),
}
TARGET_FIELDS: Final[dict[str, SettingField]] = {
    "to": SettingField(
        str | None,
        None,
        ("--to",),
        "What to write, when the output's name does not say (a .safetensors is cuDNN's unless --to torch).",
    ),
    "into": SettingField(
        Path | None,
        None,
        ("--into",),
        "Write a copy of this model file (-o names it) with the RNN's tensors in place of its own, "
        "everything else untouched; the RNN goes where its blob came from (the sidecar says), or where --layer names "
        "in it.",
    ),
}


def not_its_own(name: str, title: str, what: str, side: str = "write") -> str | None:
    """Why a format's own setting `name` (of `side`: read, write) does not apply to `what`, a file of format `title`
    (None: it does)."""
    owning = next((p for p in plugins() if name in getattr(p, f"{side}_settings")), None)
    if owning is None or owning.info.title == title:
        return None
    flag = getattr(owning, f"{side}_settings")[name].flags[0]
    return f"{flag} is for {owning.info.title} files, and {what} is {title}"


def foreign_read_setting(options: object, title: str, what: str) -> str | None:
    """Why a read setting another format owns (TF1's --forget-bias), given in `options`, does not apply to `what`,
    a file of format `title`; None where every one given applies (a setting given is never silently left unused)."""
    for plugin in plugins():
        for name, setting in plugin.read_settings.items():
            given = getattr(options, name, setting.default) != setting.default
            if given and (why := not_its_own(name, title, what, "read")):
                return why
    return None
