"""TFLite / LiteRT: the UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN ops of a `.tflite` flatbuffer, read and written.

Neither needs TensorFlow or LiteRT: files are written with the `flatbuffers` package's Builder (the schema's
few tables by their slot numbers) and read by a bounds-checked parser here (every offset, vector and buffer
checked to lie inside the file), so a hostile file gets one sentence. LiteRT's interpreter
(`ai_edge_litert`) is imported only to run a file, for verify.

A written model holds every layer and direction of one RNN in one graph: input `x` (batch, steps, input) with
shape_signature (-1, -1, input), one fused op per layer and direction (the reverse direction between two
REVERSE_V2 ops on the steps' axis, the directions joined by CONCATENATION), output `y` (batch, steps,
directions * output). The states are the ops' variable tensors `h_l0`, `c_l0`, `h_l0_reverse`, ...: set
them before `invoke` for non-zero initial states, read them after it for the final states. The weight
buffers lie after the flatbuffer's tables, so a large RNN is streamed to the file, never built in memory.

What is read back: a chain of these ops (the glue rnnconv writes) is one multi-layer, possibly bidirectional
RNN, and so is a stack of BIDIRECTIONAL_SEQUENCE_LSTM ops; what cuDNN cannot compute is refused, one sentence naming
the term: peepholes, cell or projection clip,
layer normalization, a coupled input gate (CIFG), a non-zero projection bias, activations other than the
op's, weights computed by other ops (quantized models). TFLite has no fused GRU: a GRU is refused.

A streaming model (`--streaming`, `--chunk N`) is written in plain ops that LiteRT and TFLite Micro both run (see
`streaming.py`): x (batch, N, input) and each layer's states h_l0, c_l0, ... (batch, size) as graph inputs, y and
h_l0_next, c_l0_next, ... as outputs, no variable tensor; a GRU streams too.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime, SettingField

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "tflite",
        "TFLite / LiteRT",
        {"tflite": "TFLite flatbuffer"},
        read_help=".tflite with UNIDIRECTIONAL_SEQUENCE_LSTM, UNIDIRECTIONAL_SEQUENCE_RNN or "
        "BIDIRECTIONAL_SEQUENCE_LSTM ops (the layers and directions rnnconv writes are read back as one RNN)",
        write_help="model.tflite: every layer and direction in one graph; input x (batch, steps, input), output "
        "y (batch, steps, directions*hidden), the states variable tensors h_l0, c_l0, h_l0_reverse, ...",
        read_note="Read without TensorFlow or LiteRT: the flatbuffer is parsed and bounds-checked here. What cuDNN "
        "cannot compute is refused: peepholes, cell or projection clip, layer normalization, a projection bias, "
        "activations other than TANH (LSTM) or TANH/RELU (RNN), quantized weights.",
        write_note="Written with flatbuffers alone; LiteRT's Interpreter runs it (resize x and the state tensors "
        "to your batch and steps). TFLite has no fused GRU: a GRU is refused, but as a streaming model (--streaming).",
        read_suffixes=(".tflite",),
        write_suffixes=(".tflite",),
        default_for=(".tflite",),
        source_options=("dequantize",),
        layer="an op's name as inspect gives it (layer0)",
        example="model.tflite",
        examples=("model.tflite --layer layer0",),
        extra="tflite",
        streams=("litert", "tflite-micro"),
        fixed_chunk=True,
        # its LSTM and RNN ops compute with float32 weights, or int8 ones (LiteRT's hybrid kernels: one scale per
        # tensor, each step's inputs quantized at run time)
        holds=Holds(dtypes=("float32",), quantizes=("int8",)),
    ),
    listed=50,
    sniff_order=20,
    runtimes=(
        Runtime("tflite", (("ai-edge-litert", "ai_edge_litert"),), "TFLite models' own ops"),
        Runtime(
            "tflite-micro",
            (("tflite-micro", "tflite_micro"),),
            "streaming TFLite models in TFLite Micro's interpreter (verify --streaming --stream-runtime tflite-micro)",
            install="pip install 'rnnconv[tflite-micro]'",
        ),
    ),
    engine=EngineInfo(
        "tflite",
        ".tflite",
        "LiteRT's interpreter (CPU) running the blob as TFLite ops, float32",
        (("ai-edge-litert", "ai_edge_litert"),),
        60,
    ),
    frameworks=("ai_edge_litert", "tflite_micro"),
    write_settings={
        "chunk": SettingField(
            int | None,
            None,
            ("--chunk",),
            "The chunk length (steps a call) of a streaming TFLite model, which takes one length [default: 1].",
        ),
    },
)
