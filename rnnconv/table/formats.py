"""What each file format is, for people and for the command line: one `FormatInfo` row per format.

The format's module (`rnnconv/formats/<name>`) implements the verbs; this row says
what it reads and writes, which file kinds it records, which output names mean
it, which source options apply to it, and how its help reads. The CLI builds its
X-to-Y commands and choices from these rows without importing any format module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class FormatInfo:
    name: str  # as in the layout table's rows and on the command line (--to)
    title: str
    kinds: Mapping[str, str]  # file kind -> description; sources record the kind they came from
    read_help: str
    write_help: str
    read_note: str  # how it is read (what it needs, what it never does)
    write_note: str  # what a written file is and how to use it
    read_suffixes: tuple[str, ...]  # the names its files usually have (detection goes by content, not name)
    write_suffixes: tuple[str, ...]  # output names it can write; none for a format rnnconv only reads
    default_for: tuple[str, ...]  # output names that mean this format when no --to is given
    source_options: tuple[str, ...]  # the read options that apply to its files (beyond --layer)
    example: str  # a file name of this format, for examples
    examples: tuple[str, ...] = ()  # source arguments worth showing when this format is the source
    extra: str | None = None  # the pip extra its framework comes in
    writes_into: bool = False  # whether --into can write a copy of a user's file with an RNN replaced

    @property
    def writes(self) -> bool:
        return bool(self.write_suffixes)


FORMAT_INFO: Final[dict[str, FormatInfo]] = {
    info.name: info
    for info in (
        FormatInfo(
            "keras",
            "Keras",
            {
                "keras-h5": "Keras legacy HDF5",
                "keras-weights-h5": "Keras 3 .weights.h5",
                "keras-archive": "Keras 3 .keras archive",
            },
            read_help="legacy .h5 (Keras 2, tf-keras, Keras 3), .weights.h5 or .keras",
            write_help="model.keras (keras.models.load_model opens it) or model.weights.h5",
            read_note="Read with h5py alone: TensorFlow and Keras need not be installed.",
            write_note="A Keras 3 Sequential, one LSTM / GRU(reset_after=True) / SimpleRNN layer per cuDNN layer "
            "(Bidirectional for two directions), all returning sequences, written without Keras; an "
            "LSTM's two biases are summed into Keras' one.",
            read_suffixes=(".weights.h5", ".h5", ".hdf5", ".keras"),
            write_suffixes=(".keras", ".weights.h5"),
            default_for=(".keras", ".weights.h5"),
            source_options=("bias_split", "activation", "recurrent_activation"),
            example="model.h5",
            examples=("model.keras --layer encoder --dtype float16", "model.h5 --layer lstm_1,lstm_2,lstm_3"),
            extra="keras",
            writes_into=True,
        ),
        FormatInfo(
            "torch",
            "PyTorch",
            {"torch": "torch.save checkpoint", "torch-safetensors": "safetensors state_dict"},
            read_help=".pt/.pth/.bin from torch.save, or a .safetensors state_dict",
            write_help="ckpt.pt or ckpt.pth (torch.save), or a .safetensors state_dict (with --to torch)",
            read_note="Checkpoints load with torch.load(weights_only=True): nothing but tensors is ever unpickled. "
            "RNNs are found by their parameter names; mode, sizes, layers, directions and projection "
            "come from names and shapes.",
            write_note="The state_dict of nn.LSTM / nn.GRU / nn.RNN; the module call whose load_state_dict "
            "takes it is printed.",
            read_suffixes=(".pt", ".pth", ".bin", ".safetensors"),
            write_suffixes=(".pt", ".pth", ".bin", ".safetensors"),
            default_for=(".pt", ".pth"),
            source_options=("nonlinearity",),
            example="ckpt.pt",
            examples=("seq2seq.pt --layer encoder.rnn", "rnn.pt --nonlinearity relu"),
            extra="torch",
            writes_into=True,
        ),
        FormatInfo(
            "cudnn",
            "cuDNN",
            {"cudnn-bin": "cuDNN weight space with its JSON sidecar", "cudnn-safetensors": "rnnconv .safetensors"},
            read_help="X.bin with its X.bin.json sidecar, an rnnconv .safetensors, or a raw blob described by the "
            "raw-blob flags",
            write_help="X.bin (the weight space exactly as cudnnRNNForward takes it, + the X.bin.json sidecar) or "
            "X.safetensors (several RNNs)",
            read_note="A raw blob without a sidecar is described with --mode, --input-size and --hidden-size; its "
            "size is checked against that spec before anything is read.",
            write_note="The sidecar gives the spec, the cuDNN enum values, the layout and every tensor's offset.",
            read_suffixes=(".bin", ".safetensors"),
            write_suffixes=(".bin", ".safetensors"),
            default_for=(".bin", ".safetensors"),
            source_options=("raw_spec",),
            example="model.bin",
            examples=("weights.raw --mode lstm --input-size 80 --hidden-size 512 --num-layers 2 --bidirectional",),
        ),
        FormatInfo(
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
        ),
        FormatInfo(
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
            "to your batch and steps). TFLite has no fused GRU: a GRU is refused.",
            read_suffixes=(".tflite",),
            write_suffixes=(".tflite",),
            default_for=(".tflite",),
            source_options=(),
            example="model.tflite",
            examples=("model.tflite --layer layer0",),
            extra="tflite",
        ),
        FormatInfo(
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
            example="model.xml",
            examples=("model.xml --layer /encoder/LSTMSequence",),
            extra="openvino",
        ),
        FormatInfo(
            "flax",
            "Flax linen",
            {"flax-msgpack": "flax.serialization msgpack of a linen RNN's variables"},
            read_help="X.msgpack from flax.serialization.to_bytes of the variables of nn.RNN(cell), "
            "nn.Bidirectional(nn.RNN(cell), nn.RNN(cell)) or an nn.Sequential of them (LSTMCell, OptimizedLSTMCell, "
            "GRUCell, SimpleCell)",
            write_help="X.msgpack: flax.serialization.from_bytes(variables, data) loads it into the variables of "
            "nn.RNN(nn.LSTMCell(H)) (nn.Bidirectional for two directions, nn.Sequential for several layers), with "
            "X.msgpack.rnnconv.json beside it saying where it came from",
            read_note="Read without Flax or JAX (msgpack decoded by rnnconv, every array's shape and size checked); "
            "SimpleCell's activation_fn is not stored (--nonlinearity).",
            write_note="Written without Flax or JAX; the summed biases are exact (only their sum acts); the printed "
            "line builds the module whose variables it fills.",
            read_suffixes=(".msgpack",),
            write_suffixes=(".msgpack",),
            default_for=(".msgpack",),
            source_options=("bias_split", "nonlinearity"),
            example="params.msgpack",
            examples=("params.msgpack --nonlinearity relu",),
            extra="flax",
        ),
        FormatInfo(
            "flax-nnx",
            "flax.nnx",
            {"flax-nnx-msgpack": "flax.serialization msgpack of an nnx RNN's parameters (a pure dict)"},
            read_help="X.nnx.msgpack: flax.serialization.msgpack_serialize(nnx.state(model, nnx.Param).to_pure_dict()) "
            "of nnx.RNN(cell), nnx.Bidirectional or an nnx.Sequential of them (LSTMCell, OptimizedLSTMCell, GRUCell, "
            "SimpleCell)",
            write_help="X.nnx.msgpack: the pure dict of nnx.state(model, nnx.Param) of nnx.RNN(nnx.LSTMCell(I, H)) "
            "(nnx.Bidirectional, nnx.Sequential), for nnx.replace_by_pure_dict, with X.nnx.msgpack.rnnconv.json "
            "beside it",
            read_note="Read without Flax or JAX; activation_fn is not stored (--nonlinearity for a SimpleCell).",
            write_note="Written without Flax or JAX. nnx's GRUCell has no b_hn: a GRU whose b_hn is non-zero is "
            "refused.",
            read_suffixes=(".msgpack",),
            write_suffixes=(".msgpack",),
            default_for=(".nnx.msgpack",),
            source_options=("bias_split", "nonlinearity"),
            example="params.nnx.msgpack",
            extra="flax",
        ),
        FormatInfo(
            "equinox",
            "Equinox",
            {"equinox": "equinox.tree_serialise_leaves of an eqx.nn.LSTMCell or GRUCell"},
            read_help="X.eqx from eqx.tree_serialise_leaves of one eqx.nn.LSTMCell or eqx.nn.GRUCell",
            write_help="X.eqx: eqx.tree_deserialise_leaves(X.eqx, eqx.nn.LSTMCell(I, H, key=...)) loads it, with "
            "X.eqx.rnnconv.json beside it",
            read_note="Read without Equinox or JAX (each leaf's .npy header parsed, never unpickled). The file holds "
            "leaves without their tree: one cell (Equinox has no multi-layer or bidirectional RNN).",
            write_note="Written without Equinox or JAX; one layer, one direction.",
            read_suffixes=(".eqx",),
            write_suffixes=(".eqx",),
            default_for=(".eqx",),
            source_options=("bias_split",),
            example="cell.eqx",
            extra="equinox",
        ),
        FormatInfo(
            "tf1",
            "TF1 cuDNN checkpoint",
            {"tf1-checkpoint": "TensorFlow 1 checkpoint of tf.contrib.cudnn_rnn layers"},
            read_help="a TensorFlow 1 checkpoint of tf.contrib.cudnn_rnn CudnnLSTM/CudnnGRU/CudnnRNNTanh/CudnnRNNRelu "
            "layers: X.index (with X.data-00000-of-00001 beside it) or the prefix X",
            write_help="",
            read_note="Read without TensorFlow (the index decoded and checked, tensors mapped and their crc32c "
            "checked) from the canonical tensors TF "
            "saves beside each layer's opaque cuDNN buffer; --layer picks a layer by its variable scope. A checkpoint "
            "holding only the opaque buffer is refused: TF records no spec for it and its layout depends on the GPU.",
            write_note="",
            read_suffixes=(".index",),
            write_suffixes=(),
            default_for=(),
            source_options=("bias_split", "nonlinearity"),
            example="model.ckpt.index",
            examples=("model.ckpt --layer encoder/cudnn_gru", "rnn.ckpt.index --nonlinearity relu"),
            extra="keras",
        ),
        FormatInfo(
            "mlx",
            "MLX",
            {
                "mlx-safetensors": "MLX weights (.safetensors) of mlx.nn.LSTM / GRU / RNN",
                "mlx-npz": "MLX weights (.npz) of mlx.nn.LSTM / GRU / RNN",
            },
            read_help="an MLX .safetensors or .npz of mlx.nn.LSTM, GRU or RNN weights (Module.save_weights; any "
            "key prefix)",
            write_help="model.mlx.safetensors (or any .safetensors with --to mlx): what Module.load_weights takes "
            "for mlx.nn.LSTM(I, H) (GRU, RNN); several layers as layers.{k}.<name>",
            read_note="Read without MLX, from the parameter names and shapes (MLX 0.18 or later: earlier versions "
            "stored Wx and Wh transposed and are refused); layers.{k}. (and layers.{k}.{d}.) modules of one "
            "class, each feeding the next, are one RNN.",
            write_note="One layer: exactly the parameters of mlx.nn.LSTM(I, H) (GRU, RNN). Several: a list "
            "`layers` of them, each feeding the next; two directions: [forward, backward] pairs (docs/formats/mlx.md's "
            "Stack). MLX has no LSTM projection: it is refused. The source is recorded in the metadata.",
            read_suffixes=(".safetensors", ".npz"),
            write_suffixes=(".safetensors",),
            default_for=(".mlx.safetensors",),
            source_options=("nonlinearity",),
            example="model.safetensors",
            examples=("mlx.safetensors --layer encoder.layers",),
            extra="mlx",
        ),
        FormatInfo(
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
            example="model.param",
            examples=("model.param --layer lstm_1",),
            extra="ncnn",
        ),
    )
}
