"""OpenVINO IR: the LSTMSequence, GRUSequence and RNNSequence ops of a `.xml` + `.bin` model, read into the canonical
form and written from it, both without OpenVINO; `run` and verify use its CPU plugin.

Written models are one runnable graph of every layer and direction: inputs x (batch, seq, input), initial_h and
initial_c (layers*directions, batch, hidden), sequence_lens (batch,); outputs y (batch, seq, directions*hidden),
h_n and c_n (layers*directions, batch, hidden). Layer l+1 reads layer l's y. The weights are Consts in model.bin,
float32, or float16 / bfloat16 decompressed to float32 by a Convert (as `ov.save_model(compress_to_fp16=True)`
writes them); with --quantize int8, W and R int8 Consts decompressed by a Convert and a Multiply by their scales (one
per direction and output row), which the CPU plugin computes with in f32. Where the RNN came from is recorded in
the model's rt_info.

Reading is for untrusted files: the XML may hold no DOCTYPE or entity, its size is bounded, the weights must be
in the `.bin` of the same stem beside it, and every Const's offset and size is checked against that file before
anything is read. Sequence ops joined by Transpose/Reshape/Squeeze that move the directions as cuDNN does (what
rnnconv writes) are one multi-layer RNN. What cuDNN cannot compute is refused: a GRUSequence with
linear_before_reset=false, clip, activation alpha/beta, activations other than cuDNN's.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "openvino",
        "OpenVINO IR",
        {"openvino": "OpenVINO IR (.xml with its .bin)"},
        read_help="an OpenVINO IR model.xml (with model.bin beside it) holding LSTMSequence, GRUSequence or "
        "RNNSequence ops whose weights are Consts (or f16 Consts decompressed by Convert)",
        write_help="model.xml + model.bin: the stack of sequence ops; inputs x (batch, seq, input), initial_h, "
        "initial_c (layers*directions, batch, hidden), sequence_lens (batch); outputs y (batch, seq, "
        "directions*hidden), h_n, c_n",
        read_note="Read without OpenVINO: the XML is parsed with no DOCTYPE or entities allowed, every Const's "
        "offset and size checked against model.bin. Sequence ops joined by Transpose/Reshape/Squeeze (as rnnconv "
        "writes them) are one multi-layer RNN. What cuDNN cannot run is refused: a GRUSequence with "
        "linear_before_reset=false, clip, activation alpha/beta, other activations.",
        write_note="Written without OpenVINO; openvino.Core().read_model reads it and the CPU plugin runs it "
        "(give static shapes with model.reshape for ragged sequence_lens).",
        read_suffixes=(".xml",),
        write_suffixes=(".xml",),
        default_for=(".xml",),
        source_options=("bias_split",),
        layer="an op's name (a,b for a chain of ops)",
        example="model.xml",
        examples=("model.xml --layer /encoder/LSTMSequence",),
        extra="openvino",
        # float16 and bfloat16 weights are stored as they are and decompressed to float32, in which OpenVINO computes;
        # int8 W and R (a scale per direction and output row) are decompressed by a Convert and a Multiply
        holds=Holds(dtypes=("float32", "float16", "bfloat16"), quantizes=("int8",), per_channel=True),
    ),
    listed=60,
    sniff_order=40,
    runtimes=(Runtime("openvino", (("openvino", "openvino"),), "OpenVINO IRs' own graphs"),),
    engine=EngineInfo(
        "openvino", ".xml", "OpenVINO's CPU plugin running the blob as an IR, float32", (("openvino", "openvino"),), 20
    ),
    frameworks=("openvino",),
)
