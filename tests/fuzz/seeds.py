"""The files the harness starts from: fixtures, blobs made from them, payloads and odd valid files.

Payload models hold a Lambda layer whose code would create the marker file if any part of rnnconv
deserialised it; they are made by Keras 3 and tf-keras themselves, in a subprocess (so the harness itself
needs neither). Odd PyTorch files (sparse, meta, integer, complex, scalar, offset and non-contiguous
tensors, parameters) are made by torch.save.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.facts import SEEDS, flax, keras, openvino

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"

# Each format's seeds are its facts' (tests/facts).
KERAS_SEEDS, TORCH_SEEDS, ONNX_SEEDS, TFLITE_SEEDS, TF1_SEEDS, EXECUTORCH_SEEDS = (
    SEEDS[name] for name in ("keras", "torch", "onnx", "tflite", "tf1", "executorch")
)
OPENVINO_LOOP_SEEDS = openvino.LOOP_SEEDS
OPENVINO_QUANTIZED_SEEDS = openvino.QUANTIZED_SEEDS


# The formats read since the first round, as rnnconv writes them from PyTorch and Keras sources ((source, layer) ->
# every target that holds it), each with the files beside it (an IR's and an ncnn model's .bin, the source record).
WRITTEN_FROM = [
    ("torch/seq2seq.pt", "encoder.rnn"),
    ("torch/cells.pt", None),
    ("torch/rnn_relu.safetensors", None),
    ("torch/gru_bf16.pt", None),
    ("keras3/mixed.keras", "gru_a"),
    ("keras3/mixed.keras", "bidi_lstm"),
]
WRITTEN_AS = {  # target -> (the family that damages it, the written file's suffix)
    "openvino": ("openvino", ".xml"),
    "tflite": ("tflite", ".tflite"),
    "flax": ("flax_msgpack", ".msgpack"),
    "flax-nnx": ("flax_msgpack", ".nnx.msgpack"),
    "equinox": ("equinox", ".eqx"),
    "mlx": ("mlx", ".mlx.safetensors"),
    "ncnn": ("ncnn", ".param"),
    "tfjs": ("tfjs", ".json"),
    "paddle": ("paddle", ".pdparams"),
}
SHIPPED_SETS = {  # fixtures written by the frameworks themselves, with the files beside them
    "openvino": ["openvino/rnn_tanh.xml", "openvino/lstm_saved_f16.xml"],
    "ncnn": ["ncnn/lstm.param", "ncnn/gru_fp16.param", "ncnn/lstm_proj.param", "ncnn/rnn_bi.param", "ncnn/tagger.param"]
    + ["ncnn/conv_first.param"],
    "mlx": ["mlx/lstm.safetensors", "mlx/encoder.safetensors"],
    "tfjs": ["tfjs/saved/model.json", "tfjs/converted/model.json"],
    "hf_sharded": ["hf_sharded/lstm/model.safetensors.index.json", "hf_sharded/gru/model.safetensors.index.json"],
    "paddle": SEEDS["paddle"],
}
# What --quantize int8 writes of fixtures/streaming/stacks.pt's RNNs (layer, suffix), named its STEM + layer:
# LiteRT's hybrid LSTM and RNN, onnxruntime's DynamicQuantizeLSTM and a GRU and an RNN of DequantizeLinear weights,
# OpenVINO IRs of an LSTM and a GRU (each with its .bin beside it).
QUANTIZED_WRITTEN = (
    ("lstm", ".tflite"),
    ("rnn", ".tflite"),
    ("lstm", ".onnx"),
    ("gru", ".onnx"),
    ("rnn", ".onnx"),
    ("lstm", ".xml"),
    ("gru", ".xml"),
)
QUANTIZED_WRITTEN_STEM = "quantized_written_"
# SavedModel directories and TF2 checkpoints' prefixes (fixtures/savedmodel): each model's files under its own name
SAVED_SEEDS = keras.SAVED_SEEDS
# identify's inputs: a headerless blob, the flags that describe it, and a probe of what its model computes
IDENTIFY_SEEDS = {
    "jax_lstm": ["--mode", "lstm", "--input-size", "5", "--hidden-size", "7", "--num-layers", "2", "--bidirectional"],
    "tf1_lstm2": ["--mode", "lstm", "--input-size", "5", "--hidden-size", "4", "--num-layers", "2"],
}

# Both Kerases' payloads, made in one interpreter (one TensorFlow import): a Keras missing, or failing, makes none.
PAYLOADS = """
import contextlib, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
out = sys.argv[1]
evil = lambda x: (__import__("builtins").open(__import__("os").environ.get("RNNCONV_FUZZ_MARKER",
                  "/tmp/rnnconv-fuzz-marker"), "w"), x)[1]
def keras3():
    import keras
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.Lambda(evil), keras.layers.LSTM(4, name="lstm")])
    model.save(out + "/payload_lambda.keras")
    model.save(out + "/payload_lambda.h5")
def tf_keras():
    import tf_keras as keras
    model = keras.Sequential([keras.layers.InputLayer((5, 3)), keras.layers.Lambda(evil),
                              keras.layers.GRU(4, name="gru")])
    model.save(out + "/payload_lambda_tf_keras.h5")
for make in (keras3, tf_keras):
    with contextlib.suppress(Exception):
        make()
"""

ODD_TORCH = """
import sys, torch
out = sys.argv[1]
torch.manual_seed(0)
lstm = torch.nn.LSTM(3, 4).state_dict()
big = torch.randn(400)
cases = {
    "odd_sparse.pt": {**lstm, "weight_ih_l0": lstm["weight_ih_l0"].to_sparse()},
    "odd_meta.pt": {k: torch.empty_like(v, device="meta") for k, v in lstm.items()},
    "odd_parameter.pt": {k: torch.nn.Parameter(v) for k, v in lstm.items()},
    "odd_scalar.pt": {**lstm, "weight_ih_l0": torch.tensor(1.0)},
    "odd_1d.pt": {**lstm, "weight_hh_l0": lstm["weight_hh_l0"].reshape(-1)},
    "odd_int.pt": {k: (v * 100).long() for k, v in lstm.items()},
    "odd_complex.pt": {k: v.to(torch.complex64) for k, v in lstm.items()},
    "odd_views.pt": {"weight_ih_l0": big[:48].view(16, 3), "weight_hh_l0": big[48:112].view(16, 4),
                     "bias_ih_l0": big[112:128], "bias_hh_l0": big[128:144]},
    "odd_strided.pt": {**lstm, "weight_hh_l0": lstm["weight_hh_l0"].t().contiguous().t()},
    "odd_nested.pt": {"a": [{"b": (lstm,)}], 3: "x", "epoch": 7},
    "odd_empty.pt": {},
    "odd_tensor.pt": torch.zeros(3),
}
for name, value in cases.items():
    torch.save(value, f"{out}/{name}")
torch.save(lstm, f"{out}/odd_legacy.pt", _use_new_zipfile_serialization=False)
"""


@dataclass
class Seeds:
    sources: dict[str, Path] = field(default_factory=dict)  # name -> a Keras or PyTorch file
    blobs: dict[str, Path] = field(default_factory=dict)  # name -> a blob (with its sidecar) or rnnconv safetensors
    good_blob: dict[str, Path] = field(default_factory=dict)  # source name -> a blob converted from it
    places: dict[str, str] = field(default_factory=dict)  # hostile paths a sidecar may name as its source
    tf1: dict[str, dict[str, bytes]] = field(default_factory=dict)  # a TF1 checkpoint's files, by their names
    # family -> the main file's name -> every file of the model (the main one, the files beside it), by name
    sets: dict[str, dict[str, dict[str, bytes]]] = field(default_factory=dict)
    identify: dict[str, tuple[bytes, bytes, list[str]]] = field(default_factory=dict)  # name -> blob, probe, flags
    streaming: dict[str, Path] = field(default_factory=dict)  # name -> a streaming model rnnconv wrote
    rescue: dict[str, Path] = field(default_factory=dict)  # name -> a .keras archive a Keras before 3.3.3 wrote


def files_beside(main: Path, prefix: str = "") -> dict[str, bytes]:
    """A model's file and the files rnnconv reads beside it (X.bin of X.xml or X.param, the source record, the
    shards a model.json names), each name given `prefix` (a model.json's shard paths too)."""
    import json

    if main.name.endswith(".index.json"):  # a sharded checkpoint's index: its weight_map names its shards
        doc = json.loads(main.read_bytes())
        shards = sorted(set(doc["weight_map"].values()))
        doc["weight_map"] = {key: prefix + shard for key, shard in doc["weight_map"].items()}
        beside = {prefix + shard: (main.parent / shard).read_bytes() for shard in shards}
        return {prefix + main.name: json.dumps(doc).encode(), **beside}
    if main.suffix == ".json":
        doc = json.loads(main.read_bytes())
        shards = [main.parent / p for group in doc["weightsManifest"] for p in group["paths"]]
        for group in doc["weightsManifest"]:
            group["paths"] = [prefix + p for p in group["paths"]]
        return {prefix + main.name: json.dumps(doc).encode(), **{prefix + p.name: p.read_bytes() for p in shards}}
    names = [main, main.with_name(main.name + ".rnnconv.json")]
    if main.suffix in (".xml", ".param"):
        names.append(main.with_suffix(".bin"))
    return {prefix + path.name: path.read_bytes() for path in names if path.is_file()}


def _npz_of(safetensors: Path, target: Path) -> bool:
    """The MLX .safetensors saved as MLX saves an .npz (`mx.savez`: one .npy member a tensor), where numpy holds its
    type."""
    import json
    import struct

    import numpy as np

    data = safetensors.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    types = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in types:
            return False
        start, end = entry["data_offsets"]
        raw = data[8 + length + start : 8 + length + end]
        arrays[name] = np.frombuffer(raw, types[entry["dtype"]]).reshape(entry["shape"])
    np.savez(target, **arrays)
    return True


def prepare_sets(work: Path, seeds: Seeds) -> None:
    """The models of the formats read since the first round: written by rnnconv, shipped, and identify's inputs."""
    import rnnconv
    from rnnconv.errors import RnnconvError

    for (source, layer), (target, (family, suffix)) in itertools.product(WRITTEN_FROM, WRITTEN_AS.items()):
        stem = f"{Path(source).stem}_{layer or 'rnn'}_{target}".replace(".", "_").replace("-", "_")
        main = work / "sets" / stem / (stem + suffix)
        main.parent.mkdir(parents=True, exist_ok=True)
        try:
            rnnconv.convert(FIXTURES / source, main, to=target, layer=layer)
        except (RnnconvError, ImportError):
            continue
        seeds.sets.setdefault(family, {})[main.name] = files_beside(main)
        if target == "tflite":  # the tflite family's seeds are files alone
            seeds.sources[main.name] = main
        if target == "mlx" and _npz_of(main, main.with_suffix("").with_suffix(".npz")):
            npz = main.with_suffix("").with_suffix(".npz")
            seeds.sets[family][npz.name] = {npz.name: npz.read_bytes()}
    for family, names in SHIPPED_SETS.items():
        for name in names:
            main = FIXTURES / name
            files = files_beside(main, f"{main.parent.name}__")
            seeds.sets.setdefault(family, {})[f"{main.parent.name}__{main.name}"] = files
    for name in SAVED_SEEDS:
        main = FIXTURES / name
        under = main if main.is_dir() else main.parent
        files = {str(p.relative_to(under.parent)): p.read_bytes() for p in sorted(under.rglob("*")) if p.is_file()}
        seeds.sets.setdefault("savedmodel", {})[name.split("/", 1)[1]] = files
    for name in flax.ORBAX_SEEDS:  # a checkpoint's folder, under its own name
        main = FIXTURES / name
        files = {str(p.relative_to(main.parent)): p.read_bytes() for p in sorted(main.rglob("*")) if p.is_file()}
        seeds.sets.setdefault("orbax", {})[main.name] = files
    for models in seeds.sets.values():
        for name, files in models.items():
            folder = work / "sets" / "good" / name
            folder.mkdir(parents=True, exist_ok=True)
            for file_name, data in files.items():
                (folder / file_name).parent.mkdir(parents=True, exist_ok=True)
                (folder / file_name).write_bytes(data)
            with contextlib.suppress(Exception):  # a seed that converts to no blob is damaged without one
                with rnnconv.load(folder / name, all_rnns=True) as rnns:
                    layer = rnns[0].name if len(rnns) > 1 else None
                blob = work / f"good__{name}.bin"
                rnnconv.convert(folder / name, blob, layer=layer)
                seeds.good_blob[name] = blob
    for name, flags in IDENTIFY_SEEDS.items():
        folder = FIXTURES / "identify"
        seeds.identify[name] = (
            (folder / f"{name}.bin").read_bytes(),
            (folder / f"{name}_probe.npz").read_bytes(),
            flags,
        )


def prepare(work: Path) -> Seeds:
    """Copy and make every seed into `work`."""
    import shutil

    import rnnconv
    from rnnconv.errors import RnnconvError

    seeds = Seeds()
    work.mkdir(parents=True, exist_ok=True)
    irs = OPENVINO_LOOP_SEEDS + list(OPENVINO_QUANTIZED_SEEDS)
    for name in KERAS_SEEDS + TORCH_SEEDS + ONNX_SEEDS + TFLITE_SEEDS + EXECUTORCH_SEEDS + irs:
        target = work / name.replace("/", "__")
        shutil.copy(FIXTURES / name, target)
        seeds.sources[target.name] = target
    for path in sorted((FIXTURES / "keras_rescue").glob("*.keras")):  # the rescue's: whole models, kept apart
        seeds.rescue[path.name] = path
    for name in irs:  # an IR's weights beside it
        shutil.copy((FIXTURES / name).with_suffix(".bin"), (work / name.replace("/", "__")).with_suffix(".bin"))
    for source in OPENVINO_QUANTIZED_SEEDS.values():  # a quantized IR's float source (an IR's weights too)
        for path in [FIXTURES / source] + (
            [(FIXTURES / source).with_suffix(".bin")] if source.endswith(".xml") else []
        ):
            shutil.copy(path, work / str(path.relative_to(FIXTURES)).replace("/", "__"))
    shutil.copy(FIXTURES / "onnx" / "lstm_external.onnx.data", work)  # where the renamed seed's weights are
    for name in TF1_SEEDS:
        prefix = Path(name).name
        files = sorted((FIXTURES / "tf1").glob(f"{prefix}.*"))
        seeds.tf1[prefix] = {f.name: f.read_bytes() for f in files}
        for f in files:
            shutil.copy(f, work)
        seeds.sources[prefix] = work / prefix  # a prefix, as users name a TF1 checkpoint: for its good blob
    written = work / "tflite__lstm_proj_written.tflite"  # a projection, two layers' ops, as rnnconv writes them
    with contextlib.suppress(RnnconvError, ImportError):
        rnnconv.convert(FIXTURES / "torch" / "lstm_proj.pt", written, force=True)
        seeds.sources[written.name] = written
    for layer, suffix in QUANTIZED_WRITTEN:  # what --quantize int8 writes: the quantized families' seeds too
        quantized = work / f"{suffix[1:]}__{QUANTIZED_WRITTEN_STEM}{layer}{suffix}"
        with contextlib.suppress(RnnconvError, ImportError):
            rnnconv.convert(FIXTURES / "streaming" / "stacks.pt", quantized, layer=layer, quantize="int8", force=True)
            seeds.sources[quantized.name] = quantized
    streams = (("gru", ".tflite"), ("lstm", ".tflite"), ("lstm", ".onnx"), ("rnn", ".onnx"), ("lstm", ".json"))
    for layer, suffix in streams:
        stream = work / f"streaming__{layer}{suffix}"  # fed a chunk at a time, its states inputs and outputs
        with contextlib.suppress(RnnconvError, ImportError):
            given = {".tflite": {"chunk": 3}, ".json": {"to": "tfjs"}}.get(suffix, {})
            rnnconv.convert(FIXTURES / "streaming" / "stacks.pt", stream, layer=layer, streaming=True, **given)
            seeds.streaming[stream.name] = stream
            if suffix == ".json":  # a TensorFlow.js one is a layers model too (and its shard beside it)
                seeds.sets.setdefault("tfjs", {})[stream.name] = files_beside(stream)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run([sys.executable, "-c", PAYLOADS, str(work)], check=False, env=env, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-c", ODD_TORCH, str(work)], check=False, capture_output=True, timeout=300)
    for path in sorted(work.glob("payload_*")) + sorted(work.glob("odd_*")):
        seeds.sources[path.name] = path
    prepare_sets(work, seeds)
    for name, path in list(seeds.sources.items()):
        if name in seeds.good_blob:
            continue
        try:
            dequantize = "quantized" in name  # an ONNX quantized LSTM converts dequantized
            with rnnconv.load(path, all_rnns=True, dequantize=dequantize) as rnns:
                layer = rnns[0].name if len(rnns) > 1 else None
            blob = work / f"good__{name}.bin"
            rnnconv.convert(path, blob, layer=layer, dequantize=dequantize)
            seeds.good_blob[name] = blob
        except (RnnconvError, Exception):
            pass
    first_good = next(iter(seeds.good_blob.values()))
    seeds.blobs["blob.bin"] = first_good
    seeds.blobs["gru.bin"] = work / "gru.bin"
    rnnconv.convert(FIXTURES / "keras3" / "mixed.keras", seeds.blobs["gru.bin"], layer="gru_a")
    seeds.blobs["all.safetensors"] = work / "all.safetensors"
    rnnconv.convert(FIXTURES / "keras3" / "mixed.h5", seeds.blobs["all.safetensors"])
    fifo = work / "fifo.h5"
    if not fifo.exists():
        os.mkfifo(fifo)
    (work / "a_directory.h5").mkdir(exist_ok=True)
    seeds.places = {
        "fifo": str(fifo),
        "dev_zero": "/dev/zero",
        "directory": str(work / "a_directory.h5"),
        "blob_itself": str(first_good),
    }
    for name in ("payload_lambda.keras", "payload_lambda.h5", "payload_lambda_tf_keras.h5"):
        if (work / name).exists():
            seeds.places[name] = str(work / name)
    return seeds
