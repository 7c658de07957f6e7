"""ncnn: the LSTM, GRU and RNN layers of an ncnn model (`model.param`, text, with `model.bin` beside it).

A `.param` lists layers (`type name bottoms tops k=v ...`); the `.bin` holds each layer's weights in that order,
every weight blob after a 4-byte tag (0: float32; float16 and int8 tags too). ncnn's recurrent layers store
`weight_xc [D][G*H][in]`, `bias_c [D][G][H]` (one bias per gate, the GRU's new gate two: b_in and b_hn),
`weight_hc [D][G*H][out]` and, for an LSTM whose `hidden_size` exceeds `num_output`, the projection
`weight_hr [D][P][H]`. Gates: LSTM I, F, O, G; GRU R, U, N (reset after the recurrent matrix); RNN tanh only.

Read without ncnn: the `.param` parsed within bounds, every blob's place computed and checked against the `.bin`
before anything is read; layers before a recurrent one must be of a kind whose weights rnnconv can size. A chain
of recurrent layers, each feeding the next, is one multi-layer RNN. Written models are `in0` (T, I) into one
layer per layer, `out0` out, each layer's initial states a zero `MemoryData` (h0_k, c0_k) that a feed replaces, and
its final states hn_k, cn_k. ncnn runs one sequence at a time: `run` feeds each batch item alone. The source a
written model came from is recorded in `model.param.rnnconv.json`, beside it.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "ncnn",
        "ncnn",
        {"ncnn-param": "ncnn .param with its .bin"},
        read_help="an ncnn model.param (text) with model.bin beside it, holding LSTM, GRU or RNN layers",
        write_help="model.param + model.bin: input in0 (T, I), one ncnn LSTM/GRU/RNN layer per layer, output out0 "
        "(T, D*H); initial states h0_k/c0_k default to zeros (MemoryData) and may be fed; final hn_k, cn_k",
        read_note="Read without ncnn: the .param parsed and every blob's size checked against the .bin before "
        "anything is read; float32 and float16 blobs; a chain of recurrent layers, each feeding the next, "
        "is one multi-layer RNN.",
        write_note="ncnn runs one sequence at a time (batch 1); float32 blobs. The source is recorded in "
        "model.param.rnnconv.json beside the files.",
        read_suffixes=(".param",),
        write_suffixes=(".param",),
        default_for=(".param",),
        source_options=(),
        layer="a layer's name",
        example="model.param",
        examples=("model.param --layer lstm_1",),
        extra="ncnn",
        holds=Holds(dtypes=("float32", "float16")),  # the weight tags of ncnn's .bin
    ),
    listed=120,
    sniff_order=20,  # a text file beginning with ncnn's magic number
    runtimes=(Runtime("ncnn", (("ncnn", "ncnn"),), "ncnn models' own layers"),),
    engine=EngineInfo(
        "ncnn",
        ".param",
        "ncnn (CPU) running the blob as ncnn layers, one sequence at a time",
        (("ncnn", "ncnn"),),
        80,
    ),
    frameworks=("ncnn",),
)
