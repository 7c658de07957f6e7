"""ONNX: the LSTM, GRU and RNN nodes of a `.onnx` file, read into the canonical form and written from it.

Reading needs the `onnx` package (the `onnx` extra); running needs `onnxruntime`. Weights may be
initializers, `Constant` nodes or external data beside the model (only inside the model's folder, sizes
checked). A chain of compatible nodes joined by the exporters' glue (Transpose/Reshape/Squeeze) is one
multi-layer RNN, as `torch.onnx.export` writes one multi-layer `nn.LSTM`. What cuDNN cannot compute is
refused: a GRU resetting before the recurrent matrix, peepholes, clipping, `input_forget`, activations
other than cuDNN's, or different activations per direction.

Written models are the stack of RNN nodes in the one form MNN, TensorRT and onnxruntime(-web) all take: inputs X
(seq, batch, input) and the initial states `initial_h`, `initial_c` (plain inputs, given), every node input named
(B, sequence_lens), layout 0; outputs Y (seq, batch, directions*hidden), Y_h, Y_c. `profile` checks any file against
each consumer's documented limits.
The same graph builder runs a source's own nodes (its weights and attributes untouched) in onnxruntime
for `verify`, and a blob for `verify --backend onnxruntime`.

A streaming model (`--streaming`) takes x (batch, chunk, input) with any chunk length and each layer's states h_l0,
c_l0, ... (batch, hidden), and gives y and h_l0_next, c_l0_next, ...: its nodes in the same form (every input named,
sequence_lens the chunk's length).
"""

from __future__ import annotations

from rnnconv.formats.onnx.wire import ONNX_PROFILES
from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime, SettingField

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "onnx",
        "ONNX",
        {"onnx": "ONNX model"},
        read_help=".onnx with LSTM, GRU or RNN nodes at any depth (weights stored, or computed from constants), "
        "nn.RNN unrolled by the dynamo exporter, or quantized LSTMs (--dequantize)",
        write_help="model.onnx: the stack of RNN nodes; inputs X (seq, batch, input), initial_h and initial_c; "
        "outputs Y (seq, batch, directions*hidden), Y_h, Y_c",
        read_note="A chain of RNN nodes joined by the exporters' Transpose/Reshape/Squeeze glue (what "
        "torch.onnx.export writes for one multi-layer nn.LSTM) is one multi-layer RNN; --layer "
        "picks a node (or a,b for a chain). What cuDNN cannot run is refused: a GRU with "
        "linear_before_reset=0, peepholes, clip, input_forget, other activations.",
        write_note="The form MNN, TensorRT and onnxruntime-web take: the initial states are inputs (give zeros to "
        "start fresh), every node input is named, layout 0; --profile checks a consumer's limits.",
        read_suffixes=(".onnx",),
        write_suffixes=(".onnx",),
        default_for=(".onnx",),
        source_options=("dequantize",),
        layer="a node name (a,b for a chain of nodes)",
        example="model.onnx",
        examples=("model.onnx --layer /rnn/LSTM_1",),
        extra="onnx",
        streams=("onnxruntime",),
        # The weight types the RNN ops of opset 20 take (their T; bfloat16 came in opset 22); a half-precision
        # source is written as float32 unless asked: onnxruntime's CPU RNN kernels compute float32 alone.
        # int8 weights: an LSTM as onnxruntime's DynamicQuantizeLSTM, a GRU or an RNN with DequantizeLinear before
        # W and R; both take a scale per channel
        holds=Holds(
            dtypes=("float32", "float16", "float64"), keeps=("float32",), quantizes=("int8",), per_channel=True
        ),
    ),
    listed=40,
    sniff_order=60,  # a protobuf has no magic number: after every format that has one
    runtimes=(Runtime("onnx", (("onnx", "onnx"), ("onnxruntime", "onnxruntime")), "ONNX models' own nodes"),),
    engine=EngineInfo(
        "onnxruntime",
        ".onnx",
        "onnxruntime (CPU) running the blob as ONNX nodes, float32",
        (("onnxruntime", "onnxruntime"),),
        10,
    ),
    more_engines=(
        EngineInfo(
            "mnn",
            ".onnx",
            "MNN (CPU) running the blob written as ONNX, converted by MNN's converter, float32",
            (("mnn", "MNN"),),
            11,
            install="pip install 'rnnconv[mnn]'",
        ),
    ),
    frameworks=("onnx", "onnxruntime"),
    write_settings={
        "profile": SettingField(
            str | None,
            None,
            ("--profile",),
            "An ONNX consumer (" + ", ".join(ONNX_PROFILES) + ") whose documented limits the ONNX must keep: "
            "inspect lists each limit a file breaks (exit 1 if any), a conversion to ONNX is refused if its output "
            "would break one.",
            ONNX_PROFILES,
        ),
    },
)
