"""A canonical RNN as a TensorFlow.js layers model: model.json (a Sequential of one LSTM or SimpleRNN layer per cuDNN
layer, Bidirectional for two directions, every layer returning sequences, its activations written out) and its
float32 weights in one shard beside it, named as TensorFlow.js's own model.save names them.

A streaming model (`--streaming`) is a functional model of the same layers: inputs `x` and each layer's states, every
layer called on the one before and its states (`initial_state`, extra inbound tensors, as TensorFlow.js's own
model.save writes such a call) and returning its states; outputs `y` and the next states, each through a linear
Activation layer that gives it its documented name."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.errors import BadInput
from rnnconv.formats import sources, writing
from rnnconv.formats.streaming import STREAM_INPUT, STREAM_OUTPUT, states_of
from rnnconv.formats.tfjs.wire import (
    DIRECTION_PREFIXES,
    LAYERS_MODEL,
    MANIFEST,
    METADATA,
    MODEL,
    SHARD,
    TFJS_VERSION,
    TOPOLOGY,
)
from rnnconv.safeio.outputs import atomic_outputs, write_array
from rnnconv.table.apply import row_for_mode, settings_for_mode
from rnnconv.table.constants import KERAS_VARIABLES, STATES
from rnnconv.version import __version__

ZEROS = {"class_name": "Zeros", "config": {}}  # initializers: the weights are loaded over them (no orthogonal QR)


def shard_of(path: Path) -> Path:
    """model.json's shard is the converter's group1-shard1of1.bin; NAME.json's is NAME.bin (two models share a
    folder)."""
    return path.parent / (SHARD if path.name == MODEL else f"{path.stem}.bin")


def layer_name(rnn: CanonicalRNN, layer: int) -> str:
    return "rnn" if rnn.spec.num_layers == 1 else f"rnn_layer{layer}"


def _config(spec: RNNSpec, name: str, settings: dict[str, Any], streaming: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "trainable": True,
        "units": spec.hidden_size,
        **{k: v for k, v in settings.items() if k in ("activation", "recurrent_activation")},
        "use_bias": spec.bias,
        "kernel_initializer": ZEROS,
        "recurrent_initializer": ZEROS,
        "bias_initializer": ZEROS,
        "return_sequences": True,
        "return_state": streaming,
        "go_backwards": False,
        "stateful": False,
        "unroll": False,
    }


def model_json(
    rnn: CanonicalRNN, weights: list[dict[str, Any]], shard: str, source: str, streaming: bool = False
) -> dict[str, Any]:
    """model.json as TensorFlow.js's model.save writes it, the source recorded in its userDefinedMetadata."""
    topology = _streaming_model(rnn) if streaming else _sequential(rnn)
    return {
        "format": LAYERS_MODEL,
        "generatedBy": f"rnnconv {__version__}",
        "convertedBy": f"rnnconv {__version__}",
        TOPOLOGY: {**topology, "keras_version": f"tfjs-layers {TFJS_VERSION}", "backend": "tensor_flow.js"},
        MANIFEST: [{"paths": [shard], "weights": weights}],
        METADATA: {sources.SOURCE_KEY: source},
    }


def _sequential(rnn: CanonicalRNN) -> dict[str, Any]:
    spec = rnn.spec
    cls, settings = settings_for_mode("tfjs", spec.mode, spec.reset_after)
    layers = []
    for layer in range(spec.num_layers):
        name = layer_name(rnn, layer)
        config = _config(spec, name, settings)
        outer = config
        if spec.bidirectional:
            inner = {"class_name": cls, "config": {**config, "name": f"{cls.lower()}_{name}"}}
            outer = {"name": name, "merge_mode": "concat", "layer": inner}
        if layer == 0:
            outer |= {"batch_input_shape": [None, None, spec.input_size], "dtype": "float32"}
        layers.append({"class_name": "Bidirectional" if spec.bidirectional else cls, "config": outer})
    return {"class_name": "Sequential", "config": {"name": "rnnconv", "layers": layers}}


def _streaming_model(rnn: CanonicalRNN) -> dict[str, Any]:
    """The functional model of a streaming RNN (unidirectional: `check_streamable` refuses the others)."""
    spec = rnn.spec
    cls, settings = settings_for_mode("tfjs", spec.mode, spec.reset_after)
    states = states_of(spec)
    sizes = {"h": spec.output_size, "c": spec.hidden_size}

    def called_on(*tensors: tuple[str, int]) -> list[list[list[Any]]]:
        return [[[name, 0, index, {}] for name, index in tensors]]

    def layer(class_name: str, config: dict[str, Any], *inbound: tuple[str, int]) -> dict[str, Any]:
        return {
            "class_name": class_name,
            "name": config["name"],
            "config": config,
            "inbound_nodes": called_on(*inbound) if inbound else [],
        }

    inputs = [(STREAM_INPUT, [None, None, spec.input_size]), *((s.input, [None, sizes[s.state]]) for s in states)]
    layers = [
        layer("InputLayer", {"batch_input_shape": shape, "dtype": "float32", "sparse": False, "name": name})
        for name, shape in inputs
    ]
    below = STREAM_INPUT
    for index in range(spec.num_layers):
        name = layer_name(rnn, index)
        own = [(s.input, 0) for s in states if s.layer == index]
        layers.append(layer(cls, _config(spec, name, settings, streaming=True), (below, 0), *own))
        below = name
    # each layer returns [y, h, c]: an output named as the documented contract names it, through a linear Activation
    outputs = [(STREAM_OUTPUT, (below, 0))]
    for state in states:
        outputs.append((state.output, (layer_name(rnn, state.layer), 1 + STATES.index(state.state))))
    for name, tensor in outputs:
        layers.append(layer("Activation", {"name": name, "trainable": True, "activation": "linear"}, tensor))
    return {
        "class_name": "Model",
        "config": {
            "name": "rnnconv_streaming",
            "layers": layers,
            "input_layers": [[name, 0, 0] for name, _ in inputs],
            "output_layers": [[name, 0, 0] for name, _ in outputs],
        },
    }


def tensors_of(rnn: CanonicalRNN) -> dict[str, np.ndarray]:
    """Each weight by its name in the manifest, in the order the shard holds them, as little-endian float32."""
    spec = rnn.spec
    row, _ = row_for_mode("tfjs", spec.mode, reset_after=spec.reset_after)
    out: dict[str, np.ndarray] = {}
    for layer, direction in itertools.product(range(spec.num_layers), range(spec.num_directions)):
        scope = layer_name(rnn, layer)
        if spec.bidirectional:
            scope += f"/{DIRECTION_PREFIXES[direction]}{row.source_class.lower()}_{scope}"
        stored = rnn.stored(row, layer, direction)
        for role, variable in KERAS_VARIABLES.items():
            if role in stored:
                out[f"{scope}/{variable}"] = np.ascontiguousarray(stored[role], dtype="<f4")
    return out


def write_tfjs(rnn: CanonicalRNN, path: Path, force: bool, streaming: bool = False) -> Path:
    """model.json and its shard (group1-shard1of1.bin beside it), a streaming model's where asked; the shard's
    path."""
    if path.suffix.lower() != ".json":
        raise BadInput(f"output {path} must end in .json for TensorFlow.js")
    shard = shard_of(path)
    tensors = tensors_of(rnn)
    weights = [{"name": name, "shape": list(value.shape), "dtype": "float32"} for name, value in tensors.items()]
    document = model_json(rnn, weights, shard.name, sources.source_record(rnn, path), streaming)
    with atomic_outputs([path, shard], force) as (json_tmp, shard_tmp):
        with open(shard_tmp, "wb") as f:
            for value in tensors.values():
                write_array(f, value)
        json_tmp.write_text(json.dumps(document), encoding="utf-8")
    return shard


def loading_snippet(rnn: CanonicalRNN, path: Path, streaming: bool = False) -> str:
    """How to load what `write_tfjs` wrote and call it: in a browser from its URL; in Node.js (no tfjs-node) from
    memory; a streaming model one chunk at a time, its states carried."""
    spec = rnn.spec
    loading = (
        "// browser: const model = await tf.loadLayersModel('https://.../model.json');\n"
        "const tf = require('@tensorflow/tfjs'), fs = require('fs');   // Node.js, the CPU backend\n"
        f"const doc = JSON.parse(fs.readFileSync({writing.literal(path)}));\n"
        f"const bin = fs.readFileSync({writing.literal(shard_of(path))});\n"
        "const model = await tf.loadLayersModel(tf.io.fromMemory({modelTopology: doc.modelTopology,\n"
        "  weightSpecs: doc.weightsManifest[0].weights, weightData: new Uint8Array(bin).buffer}));\n"
    )
    if streaming:
        from rnnconv.formats.streaming import stream_contract

        return (
            f"{loading}let states = model.inputs.slice(1).map((i) => tf.zeros([x.shape[0], i.shape[1]]));   // "
            f"{stream_contract(spec)}; zeros to start\n"
            "const [y, ...next] = model.predict([x, ...states]);   // the next call: states = next"
        )
    return (
        f"{loading}const y = model.predict(x);   // x [batch, time, {spec.input_size}], y [batch, time, "
        f"{spec.num_directions * spec.hidden_size}]: cuDNN's y, batch first, from zero states"
    )
