"""The settings the command line offers as options, in plain data: each one's type, default, flags and help.

`rnnconv.core.settings` makes its typed fields of them and `rnnconv.cli.options` the command line's options, so a
setting is declared once, and `rnnconv --help` builds every option without importing pydantic or numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rnnconv.formats.onnx.wire import ONNX_PROFILES
from rnnconv.table.layouts import BIAS_SPLITS, DEFAULT_BIAS_SPLIT


@dataclass(frozen=True)
class SettingField:
    annotation: Any  # the library's type; the command line offers a choice of the table's values where it has one
    default: Any
    flags: tuple[str, ...]
    help: str


READ_FIELDS: Final[dict[str, SettingField]] = {
    "layer": SettingField(
        str | None,
        None,
        ("--layer",),
        "The RNN to use when the file holds several: a Keras layer name "
        "(a,b,c stacks consecutive layers into one multi-layer RNN), a PyTorch module prefix (encoder.rnn), "
        "an ONNX node name (a,b for a chain of nodes), a TF1 layer's variable scope (encoder/cudnn_lstm), a path in a "
        "Flax tree (encoder/layers_1) or a key of an rnnconv .safetensors. The error lists them.",
    ),
    "bias_split": SettingField(
        str,
        DEFAULT_BIAS_SPLIT,
        ("--bias-split",),
        "How a single bias (a Keras LSTM's or SimpleRNN's, a TF1 checkpoint's) "
        "becomes cuDNN's two: " + "; ".join(f"{k} = {v}" for k, v in BIAS_SPLITS.items()) + ".",
    ),
    # What a file may not store, stated by the user (None: not stated, so assumed and said so).
    "nonlinearity": SettingField(
        str | None,
        None,
        ("--nonlinearity",),
        "nn.RNN's nonlinearity, which a state_dict does not store, a TF1 CudnnRNNTanh/CudnnRNNRelu's, "
        "which its checkpoint does not store, or a Flax SimpleCell's activation_fn [default: tanh, recorded as an "
        "assumption].",
    ),
    "activation": SettingField(
        str | None,
        None,
        ("--activation",),
        "A Keras layer's activation, for a weights file without a model config [default: tanh, recorded "
        "as an assumption].",
    ),
    "recurrent_activation": SettingField(
        str | None,
        None,
        ("--recurrent-activation",),
        "A Keras LSTM/GRU's recurrent_activation, for a weights file without a model config [default: "
        "sigmoid, recorded as an assumption; refused for Keras versions whose default was hard_sigmoid].",
    ),
    "require_stated": SettingField(
        bool,
        False,
        ("--require-stated",),
        "Fail (exit 2) rather than assume a setting the file does not store (an nn.RNN's nonlinearity, a "
        "bare Keras file's activations).",
    ),
    "dequantize": SettingField(
        bool,
        False,
        ("--dequantize",),
        "Convert an ONNX quantized LSTM (com.microsoft DynamicQuantizeLSTM) with its int8 weights "
        "dequantized, (q - zero_point) * scale: the result is the float model the quantized one approximates.",
    ),
}
WRITE_FIELDS: Final[dict[str, SettingField]] = {
    "dtype": SettingField(
        str | None,
        None,
        ("--dtype",),
        "Element type of the output [default: the source's]; for a raw blob, the blob's (and the output's).",
    ),
    "force": SettingField(bool, False, ("--force",), "Replace existing output files."),
    "profile": SettingField(
        str | None,
        None,
        ("--profile",),
        "An ONNX consumer (" + ", ".join(ONNX_PROFILES) + ") whose documented limits the ONNX must keep: inspect "
        "lists each limit a file breaks (exit 1 if any), a conversion to ONNX is refused if its output would break "
        "one.",
    ),
    "allow_lossy": SettingField(
        bool,
        False,
        ("--allow-lossy",),
        "Write a target that cannot hold a term of the source (refused otherwise, naming the term) "
        "without it, and say how much that changes the outputs on probe inputs.",
    ),
    "streaming": SettingField(
        bool,
        False,
        ("--streaming",),
        "Write a streaming model (ONNX, TFLite), called a chunk of steps at a time: it takes x (batch, chunk, input) "
        "and every layer's states (h_l0, c_l0, h_l1, ...) and gives y and the new states (h_l0_next, ...). verify "
        "--streaming feeds a written one the sequence in chunks of 1, 3 and 7 steps (or of its --chunk), carrying "
        "the states.",
    ),
    "chunk": SettingField(
        int | None,
        None,
        ("--chunk",),
        "The chunk length (steps a call) of a streaming TFLite model, which takes one length [default: 1].",
    ),
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
