"""TensorFlow.js layers models: a `model.json` (a Keras topology and a `weightsManifest`) and its weight shards.

The manifest's groups each list their shards (`paths`, concatenated in order) and their weights (name, shape,
dtype, optional quantization), little-endian, one after the other. Weight names are `layer/kernel` (TensorFlow.js
itself) or, since the converter of TensorFlow 2.2, `layer/lstm_cell/kernel`; a Bidirectional's are under
`layer/forward_<inner>/` and `layer/backward_<inner>/`. TensorFlow.js's layers are Keras 2's with two traps: its
GRUCell has no reset_after=True (so cuDNN's GRU, and Keras' default, has no TensorFlow.js form), and its LSTM and
GRU default recurrentActivation to hardSigmoid, clip(0.2x + 0.5).

A streaming model (`--streaming`) is a functional model: inputs x (batch, chunk, input) with any chunk length and
each layer's states h_l0, c_l0, ..., every layer called on the one below and its states and returning its own, outputs
y and h_l0_next, c_l0_next, ... (named by linear Activation layers); it reads back as its RNN too.

Reading and writing need neither Node.js nor TensorFlow.js; `run` (verify) runs the file's own layers in
TensorFlow.js (`@tensorflow/tfjs`, its pure-JavaScript CPU backend) under Node.js, and `stream` (verify --streaming)
the whole streaming model, every call in one Node.js process.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime

NODE_MODULES = (("node", "npm:node"), ("@tensorflow/tfjs", "npm:@tensorflow/tfjs"))  # run by Node.js, not imported
TFJS_VERSION = "4.22.0"  # what the repository's package.json pins (the tests hold them alike)
# How TensorFlow.js is installed for rnnconv, in a checkout or not: a pip install has no package.json to `npm ci`.
INSTALL_TFJS = (
    f"npm install --ignore-scripts --prefix DIR @tensorflow/tfjs@{TFJS_VERSION}, then set RNNCONV_NODE_MODULES to "
    "DIR/node_modules (in a checkout of rnnconv, npm ci --ignore-scripts there instead)"
)

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "tfjs",
        "TensorFlow.js",
        {"tfjs-layers": "TensorFlow.js layers model (model.json + weight shards)"},
        read_help="a TensorFlow.js layers model's model.json (its weight shards beside it), as tfjs model.save or "
        "the tensorflowjs converter writes it",
        write_help="model.json (or any .json with --to tfjs) and group1-shard1of1.bin beside it: what "
        "tf.loadLayersModel opens",
        read_note="Read without Node.js or TensorFlow.js, from the topology and the manifest; shards must lie in the "
        "model's folder. A GRU is refused: TensorFlow.js's has no reset_after=True.",
        write_note="A Sequential of one LSTM / SimpleRNN layer per cuDNN layer (Bidirectional for two directions), "
        "all returning sequences, activations written out (TensorFlow.js defaults recurrentActivation to "
        "hardSigmoid), float32 weights in one shard. A GRU is refused (no reset_after=True in TensorFlow.js), as "
        "is an LSTM projection. The source is recorded in userDefinedMetadata.",
        read_suffixes=(".json",),
        write_suffixes=(".json",),
        default_for=("model.json",),
        source_options=(),
        layer="a layer's name",
        example="model.json",
        examples=("model.json --layer lstm_1",),
        streams=("tfjs",),
        holds=Holds(dtypes=("float32",)),  # what TensorFlow.js layers models hold and compute with
    ),
    listed=115,
    runtimes=(
        Runtime(
            "tfjs",
            NODE_MODULES,
            "TensorFlow.js layers models in TensorFlow.js under Node.js",
            f"Node.js 18 or later, and {INSTALL_TFJS}",
        ),
    ),
    engine=EngineInfo(
        "tfjs",
        ".json",
        "TensorFlow.js (Node.js, CPU backend) running the blob as a layers model, float32",
        NODE_MODULES,
        105,
    ),
)
