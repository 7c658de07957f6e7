"""ONNX: the LSTM, GRU and RNN nodes of a `.onnx` file, read into the canonical form and written from it.

Reading needs the `onnx` package (the `onnx` extra); running needs `onnxruntime`. Weights may be
initializers, `Constant` nodes or external data beside the model (only inside the model's folder, sizes
checked). A chain of compatible nodes joined by the exporters' glue (Transpose/Reshape/Squeeze) is one
multi-layer RNN, as `torch.onnx.export` writes one multi-layer `nn.LSTM`. What cuDNN cannot compute is
refused: a GRU resetting before the recurrent matrix, peepholes, clipping, `input_forget`, activations
other than cuDNN's, or different activations per direction.

Written models are the stack of RNN nodes; their input X is (seq, batch, input), the initial states
`initial_h`, `initial_c` may be left out (zeros); outputs Y (seq, batch, directions*hidden), Y_h, Y_c.
The same graph builder runs a source's own nodes (its weights and attributes untouched) in onnxruntime
for `verify`, and a blob for `verify --backend onnxruntime`.

A streaming model (`--streaming`) takes x (batch, chunk, input) with any chunk length and each layer's states h_l0,
c_l0, ... (batch, hidden), and gives y and h_l0_next, c_l0_next, ...: each node given every input but its sequence
lengths (B explicit, zeros where the source has no bias).
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "onnx",
        "ONNX",
        {"onnx": "ONNX model"},
        read_help=".onnx with LSTM, GRU or RNN nodes at any depth (weights stored, or computed from constants), "
        "nn.RNN unrolled by the dynamo exporter, or quantized LSTMs (--dequantize)",
        write_help="model.onnx: the stack of RNN nodes; input X (seq, batch, input), optional initial_h and "
        "initial_c; outputs Y (seq, batch, directions*hidden), Y_h, Y_c",
        read_note="A chain of RNN nodes joined by the exporters' Transpose/Reshape/Squeeze glue (what "
        "torch.onnx.export writes for one multi-layer nn.LSTM) is one multi-layer RNN; --layer "
        "picks a node (or a,b for a chain). What cuDNN cannot run is refused: a GRU with "
        "linear_before_reset=0, peepholes, clip, input_forget, other activations.",
        write_note="onnxruntime runs it with only X given (the initial states default to zeros).",
        read_suffixes=(".onnx",),
        write_suffixes=(".onnx",),
        default_for=(".onnx",),
        source_options=("dequantize",),
        example="model.onnx",
        examples=("model.onnx --layer /rnn/LSTM_1",),
        extra="onnx",
        streams=("onnxruntime",),
    ),
    listed=40,
    runtimes=(Runtime("onnx", (("onnx", "onnx"), ("onnxruntime", "onnxruntime")), "ONNX models' own nodes"),),
    engine=EngineInfo(
        "onnxruntime",
        ".onnx",
        "onnxruntime (CPU) running the blob as ONNX nodes, float32",
        (("onnxruntime", "onnxruntime"),),
        10,
    ),
    frameworks=("onnx", "onnxruntime"),
)
