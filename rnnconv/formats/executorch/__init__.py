"""ExecuTorch programs (`.pte`, from `torch.export` -> `to_edge` -> `to_executorch`): recognised, parsed and listed,
not converted.

A program is a flatbuffer (ExecuTorch's `program.fbs`, file identifier `ET12`) with an extended header saying where
its segments lie; `program.py` reads it with the bounds-checked parser TFLite models are read with, every table,
vector and segment checked to lie inside the file. A portable program keeps an RNN's parameters as constant tensors
in PyTorch's layout (`torch.export` lifts nn.LSTM's parameters as they are), but without names: which is the input
matrix and which the recurrent one, which layer and direction, is told by no field of the program, only by the order
the exporter wrote them in and by what the ops compute with them. A program lowered to XNNPACK keeps them inside its
delegate's payloads, packed for XNNPACK. So `inspect` lists each method with the RNNs its constants' shapes fit, and
a conversion is refused, naming the checkpoint to convert instead.
"""

from __future__ import annotations

from rnnconv.formats.plugin import FormatInfo, Plugin

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "executorch",
        "ExecuTorch program",
        {"executorch": "ExecuTorch program (.pte)"},
        read_help="an ExecuTorch program (.pte, portable or delegated): listed by inspect, not converted, since it "
        "keeps its weights without names",
        write_help="",
        read_note="Parsed without ExecuTorch (the flatbuffer and its segments bounds-checked). A program keeps its "
        "constant tensors without names (a delegated one inside its delegate's payloads), so which tensor is which "
        "is not in the file: inspect lists the RNNs its constants' shapes fit, and a conversion is refused, naming "
        "the checkpoint to convert instead.",
        write_note="",
        read_suffixes=(".pte",),
        write_suffixes=(),
        default_for=(),
        source_options=(),
        example="model.pte",
    ),
    listed=105,
    sniff_order=20,  # a flatbuffer whose file identifier says it is a program
)
