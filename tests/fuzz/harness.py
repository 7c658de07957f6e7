"""Run hostile inputs through every command that reads them, and count what went wrong.

A failure is any of: an internal error (exit 4) or a traceback; an exit code outside 0-3; a command over
the time limit (a hang: over TIME_LIMIT, then again over CONFIRM_LIMIT when run once more from the same files, so a
loaded machine does not pass for a hang) or the memory limit; an output left behind by a failed command, a
temporary file left anywhere, an existing file changed without --force; the marker file a payload creates if its code
ran; an error sentence or a result that did not reach the user (`odd_environment`), or a sentence that stops before
its cause; a line of stderr over MESSAGE_LIMIT characters (a message no person reads). Each failing case is saved
(its files, its command, what happened) for `--replay`. The `changing_source` and `odd_environment` families
run their commands their own way (changing.py, odd_env.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rnnconv.errors import MESSAGE_LIMIT
from rnnconv.formats.onnx.wire import ONNX_PROFILES
from tests.fuzz import changing, mutators, odd_env
from tests.fuzz.seeds import (
    OPENVINO_LOOP_SEEDS,
    OPENVINO_QUANTIZED_SEEDS,
    QUANTIZED_WRITTEN,
    QUANTIZED_WRITTEN_STEM,
    Seeds,
    files_beside,
    prepare,
)

TIME_LIMIT = 20.0  # seconds for one command on a small input
# A command over TIME_LIMIT runs again from the same files with this limit: only one over both is a hang; one that
# finishes was slow (a loaded machine: counted apart, and judged by what the second run did).
CONFIRM_LIMIT = 300.0
MEMORY_LIMIT = 4 << 30  # bytes of resident memory
SENTINEL = b"an existing file that must survive"
CATEGORIES = (
    "internal_error",
    "traceback",
    "bad_exit_code",
    "hang",
    "memory",
    "partial_output",
    "temp_left",
    "clobbered",
    "code_executed",
    "malformed_accepted",  # exit 0 on an input its mutator damaged where every reader must refuse it
    "message_lost",  # an error's sentence that did not reach stderr or stops before its cause, or a lost result
    "message_long",  # a line of stderr over MESSAGE_LIMIT characters (after its label): no sentence a person reads
    "harness_error",  # the harness itself failed on a case (a mutator's bug): counted, and the run goes on
    "wrong_conversion",  # a conversion that computes otherwise than the file's own runtime running the file
)
FAMILIES = (
    "keras_h5",
    "keras_archive",
    "keras_weights",
    "torch_zip",
    "torchscript",
    "torch_module",
    "torch_other",
    "payload",
    "odd_torch",
    "onnx",
    "tf1",
    "tf1_meta",
    "blob_sidecar",
    "rnnconv_safetensors",
    "raw_blob",
    "keras_config",
    "changing_source",
    "odd_environment",
    "onnx_subgraph",
    "onnx_quantized",
    "onnx_unrolled",
    "onnx_cells",
    "onnx_loops",
    "onnx_loop_forms",
    "tflite",
    "tflite_loops",
    "tflite_loop_forms",
    "tflite_quantized",
    "torch_quantized",
    "openvino",
    "openvino_loops",
    "openvino_quantized",
    "flax_msgpack",
    "equinox",
    "mlx",
    "ncnn",
    "tfjs",
    "hf_sharded",
    "executorch",
    "torch_export",
    "savedmodel",
    "savedmodel_serving",
    "paddle",
    "orbax",
    "identify",
    "streaming",
    "keras_rescue",
)
# The families of the readers added since the first round (what `--families new` runs).
NEW_FAMILIES = (
    "tf1_meta",
    "openvino",
    "tflite",
    "flax_msgpack",
    "equinox",
    "mlx",
    "ncnn",
    "tfjs",
    "hf_sharded",
    "executorch",
    "torchscript",
    "torch_module",
    "torch_export",
    "savedmodel",
    "savedmodel_serving",
    "paddle",
    "orbax",
    "onnx_subgraph",
    "onnx_unrolled",
    "onnx_cells",
    "onnx_loops",
    "onnx_loop_forms",
    "tflite_loops",
    "tflite_loop_forms",
    "tflite_quantized",
    "torch_quantized",
    "openvino_loops",
    "openvino_quantized",
    "identify",
    "streaming",
    "keras_rescue",
)
# The families whose seeds are models of several files (seeds.sets): the mutator of each, files -> must refuse.
SET_FAMILIES = {
    "openvino": mutators.mutate_openvino,
    "flax_msgpack": mutators.mutate_flax,
    "equinox": mutators.mutate_equinox,
    "mlx": mutators.mutate_mlx,
    "ncnn": mutators.mutate_ncnn,
    "tfjs": mutators.mutate_tfjs,
    "hf_sharded": mutators.mutate_hf_index,
    "paddle": mutators.mutate_paddle,
}
# What a damaged model is converted to besides a blob: every format rnnconv writes.
TARGETS = (
    ".onnx",
    ".pt",
    ".keras",
    ".xml",
    ".tflite",
    ".msgpack",
    ".nnx.msgpack",
    ".eqx",
    ".mlx.safetensors",
    ".param",
    ".pdparams",
)
# The ONNX families: the seeds each mutates (by their names' ends), and how.
ONNX_FAMILIES = {
    "onnx_subgraph": (("lstm_cell_in_if_torchscript.onnx", "tagger_lstm_torchscript.onnx"), "mutate_onnx_folding"),
    "onnx_quantized": (
        (
            "lstm_quantized.onnx",
            "lstm_quantized_per_channel.onnx",
            "lstm_qdq.onnx",
            "lstm_qdq_per_channel.onnx",
            *(f"{QUANTIZED_WRITTEN_STEM}{layer}{suffix}" for layer, suffix in QUANTIZED_WRITTEN if suffix == ".onnx"),
        ),
        "mutate_onnx_quantized",
    ),
    "onnx_unrolled": (
        ("rnn_unrolled_dynamo.onnx", "rnn_stack_dynamo.onnx", "cells_dynamo.onnx"),
        "mutate_onnx_unrolled",
    ),
    "onnx_cells": (
        ("cells_dynamo.onnx", "cells_gates_swapped.onnx", "lstm_cell_loop2_dynamo.onnx", "gru_cell_loop1_dynamo.onnx"),
        "mutate_onnx_cells",
    ),
    "onnx_loops": (
        ("simple_rnn.onnx", "simple_rnn2.onnx", "simple_rnn_bi.onnx", "simple_rnn_last.onnx", "gru_reset_before.onnx"),
        "mutate_onnx_loops",
    ),
    "onnx_loop_forms": (
        ("simple_rnn_states.onnx", "basic_lstm.onnx", "lstm_cell_loop_zeros_dynamo.onnx"),
        "mutate_onnx_loops",  # a file of no Loop (the dynamo exporter's steps) damaged as the onnx family does
    ),
}
RESCUE_ORACLE_SHARE = 0.02  # the keras_rescue cases whose rescued file Keras runs against the old one (10 s apiece)
# A Python whose tf.keras is 2.15 (TensorFlow 2.15), to run a tf.keras archive as its own Keras did: a rescued file
# of one is judged only with it (Keras 3.15 runs a Keras 3.0 archive itself).
OLD_KERAS_PYTHON = os.environ.get("RNNCONV_FUZZ_TF_KERAS_PYTHON", "")
ORACLE_SHARE = 0.04  # the savedmodel cases whose conversions TensorFlow judges (its imports: 10 s apiece)
SERVING_ORACLE_SHARE = 0.05  # those of them whose serving graph was damaged
SERVING_SEEDS = ["k3_export", "k3_export_activations"]  # the savedmodel seeds whose activations their graph says
SAID_ACTIVATIONS = ["--activation", "tanh", "--recurrent-activation", "sigmoid"]  # the savedmodel seeds' own
ORACLE_FAMILIES = ("onnx_loops", "onnx_loop_forms")  # the ONNX families whose conversions are run against the file
LOOP_ORACLES = ("litert", "openvino", "onnxruntime")  # the runtimes of loop files: each run against its conversion
VERIFY_SHARE = 0.1  # the openvino_quantized and _loops cases whose conversions verify runs in OpenVINO (seconds apiece)
# the seeds of the tflite_quantized family: TensorFlow's converter's (a fused LSTM, a GRU's WHILE loop), and what
# --quantize int8 writes
TFLITE_QUANTIZED = (
    "tflite__keras_lstm_dynamic_range",
    "tflite__loop_k3_gru_dynamic_range.tflite",
    f"tflite__{QUANTIZED_WRITTEN_STEM}",
)
# The seeds of the torch_quantized family, each with the float checkpoint it was quantized from (seeds too).
TORCH_QUANTIZED = {
    f"torch_quantized__{name}": f"torch_quantized__{checkpoint}"
    for name, checkpoint in (
        ("lstm_qint8.pt", "lstm_float.pt"),
        ("gru_qint8_per_channel.pt", "gru_float.pt"),
        ("lstm_fp16.pt", "lstm_float.pt"),
    )
}
TFLITE_LOOP_FORMS = (
    "tflite__loop_k3_lstm_batch1.tflite",
    "tflite__loop_k3_lstm_per_gate.tflite",
    "tf2onnx__basic_lstm.tflite",
)


class Worker:
    """rnnconv in a separate process, watched for time and memory."""

    def __init__(self, marker: Path):
        env = {**os.environ, mutators.MARKER_ENV: str(marker), "TF_CPP_MIN_LOG_LEVEL": "3", "COLUMNS": "100"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        self._read(120.0)

    def _rss(self) -> int:
        try:
            with open(f"/proc/{self.process.pid}/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def _read(self, limit: float) -> dict | str:
        deadline = time.monotonic() + limit
        assert self.process.stdout is not None
        while True:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline()
                return json.loads(line) if line else "died"
            if self._rss() > MEMORY_LIMIT:
                return "memory"
            if time.monotonic() > deadline:
                return "hang"

    def run(self, args: list[str], limit: float = TIME_LIMIT) -> dict | str:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"args": args}) + "\n")
        self.process.stdin.flush()
        return self._read(limit)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@dataclass
class Case:
    family: str
    name: str
    files: dict[str, bytes]
    commands: list[list[str]] = field(default_factory=list)  # {dir} is the case's folder
    must_refuse: bool = False  # every command must fail: the input is damaged where rnnconv reads it
    oracle: str = (
        ""  # the runtime ("litert", "openvino", "onnxruntime") a conversion to out.pt is run against (`disagrees`)
    )


def _loop_case(family: str, index: int, name: str, files: dict[str, bytes], oracle: str) -> Case:
    """A mutated loop model (`mut_NAME` among `files`) read, converted, and its conversions run against `oracle`."""
    case = Case(family, f"{index:06d}_{family}_{name}", files, oracle=oracle)
    source = "{dir}/mut_" + name
    case.commands = [
        ["inspect", source],
        ["convert", source, "{dir}/out.safetensors"],
        ["convert", source, "{dir}/out.pt"],
        ["convert", source, "{dir}/out.onnx"],  # judged where out.pt is refused (a reset-before GRU)
        ["convert", source, "{dir}/existing.bin"],
    ]
    return case


def make_case(family: str, seeds: Seeds, rng: random.Random, index: int) -> Case:
    """One hostile input of a family, and the commands that read it."""
    by_kind = {
        "keras_h5": [n for n in seeds.sources if n.endswith(".h5") and "weights" not in n and "payload" not in n],
        "keras_archive": [n for n in seeds.sources if n.endswith(".keras") and "payload" not in n],
        "keras_weights": [n for n in seeds.sources if "weights" in n],
        "torch_zip": [
            n
            for n in seeds.sources
            if n.endswith((".pt", ".pth")) and "legacy" not in n and "odd" not in n and "torch_kept" not in n
        ],
        "torchscript": [n for n in seeds.sources if n.startswith("torch_kept__seq2seq_")],
        "torch_module": [n for n in seeds.sources if n.startswith("torch_kept__kept_module")],
        "torch_other": [n for n in seeds.sources if n.endswith(".safetensors") or "legacy" in n],
        "payload": [n for n in seeds.sources if n.startswith("payload")],
        "odd_torch": [n for n in seeds.sources if n.startswith("odd")],
        "onnx": [n for n in seeds.sources if n.endswith(".onnx")],
        "tflite": [n for n in seeds.sources if n.endswith(".tflite")],
        "executorch": [n for n in seeds.sources if n.endswith(".pte")],
        "torch_export": [n for n in seeds.sources if n.endswith(".pt2")],
        "keras_config": [
            n for n in seeds.sources if n.endswith((".h5", ".keras")) and "weights" not in n and "payload" not in n
        ],
    }
    if family in by_kind:
        name = rng.choice(by_kind[family] or [next(iter(seeds.sources))])
        data = seeds.sources[name].read_bytes()
        must_refuse = False
        if family == "payload" and rng.random() < 0.5:
            source_name = name  # unmutated: the payload itself must not run
        elif family == "keras_config":
            data, must_refuse = mutators.mutate_keras_config_file(name, data, rng)
            source_name = f"mut_{name}"
        else:
            source_name, data = f"mut_{name}", mutators.mutate_file(name, data, rng)
        if family == "payload" and rng.random() < 0.3:
            source_name, data = "code.pt", mutators.code_pickle(rng)
        case = Case(family, f"{index:06d}_{family}_{name}", {source_name: data}, must_refuse=must_refuse)
        source = "{dir}/" + source_name
        targets = [".safetensors", ".pt" if "keras" in family or "payload" in family else ".keras"]
        if family == "onnx":
            targets = [".safetensors", ".onnx"]
            profile = rng.choice(ONNX_PROFILES)  # each consumer's limits read off a damaged file, and kept in writing
            case.commands += [
                ["inspect", source, "--profile", profile],
                ["convert", source, "{dir}/p.onnx", "--profile", profile],
            ]
        if family == "tflite":
            targets = [".safetensors", ".tflite"]
        case.commands = [["inspect", source], *case.commands] + [
            ["convert", source, f"{{dir}}/out{t}"] for t in targets
        ]
        case.commands.append(["convert", source, "{dir}/existing.bin"])  # must not replace it without --force
        if name in seeds.good_blob:
            case.commands.append(["verify", str(seeds.good_blob[name]), "--against", source, "--backend", "numpy"])
            if family.startswith("keras_") or family == "torch_zip":  # the user's model patched
                patched = "{dir}/patched" + "".join(Path(source_name).suffixes)
                case.commands.append(["convert", str(seeds.good_blob[name]), patched, "--into", source])
        return case
    if family in ONNX_FAMILIES:
        ends, mutator = ONNX_FAMILIES[family]
        name = rng.choice([n for n in seeds.sources if n.endswith(ends)] or sorted(seeds.sources))
        data = getattr(mutators, mutator)(seeds.sources[name].read_bytes(), rng)
        oracle = "onnxruntime" if family in ORACLE_FAMILIES else ""  # a conversion run against the file's own run
        case = Case(family, f"{index:06d}_{family}_{name}", {f"mut_{name}": data}, oracle=oracle)
        source = "{dir}/mut_" + name
        case.commands = [
            ["inspect", source],
            ["convert", source, "{dir}/out.safetensors"],
            ["convert", source, "{dir}/out.pt"],
            [
                "convert",
                source,
                "{dir}/out.onnx",
                "--layer",
                rng.choice(["/rnn/LSTM", "node_MatMul_12", "/LSTM_quant", "node_Split_6", "node_Split_21"]),
            ],
            ["convert", source, "{dir}/existing.bin"],
        ]
        if oracle:  # judged where out.pt is refused (a reset-before GRU)
            case.commands.insert(3, ["convert", source, "{dir}/out.onnx"])
        if family == "onnx_quantized":  # with --allow-lossy too: quantize_static's activation pairs left out, recorded
            layer = ["--layer", rng.choice(["/LSTM", "/LSTM_1"])] if rng.random() < 0.7 else []
            case.commands += [
                ["convert", source, "{dir}/deq.bin", "--dequantize"],
                ["convert", source, "{dir}/lossy.bin", "--dequantize", "--allow-lossy", *layer],
            ]
        if QUANTIZED_WRITTEN_STEM in name:  # proved in three terms against the float source its record names
            case.commands.append(["verify", source, "--seq-len", "3"])
        if name in seeds.good_blob:
            case.commands.append(["verify", str(seeds.good_blob[name]), "--against", source, "--backend", "numpy"])
        return case
    if family == "streaming":  # a streaming model damaged, run a chunk at a time in each of its runtimes
        name = rng.choice(sorted(seeds.streaming))
        if name.endswith(".json"):  # a TensorFlow.js model.json and its shard, damaged as the tfjs family does
            files = files_beside(seeds.streaming[name], "mut_")
            case = Case(family, f"{index:06d}_{family}_{name}", files)
            case.must_refuse = mutators.mutate_tfjs(files, f"mut_{name}", rng)
        else:
            data = mutators.mutate_file(name, seeds.streaming[name].read_bytes(), rng)
            case = Case(family, f"{index:06d}_{family}_{name}", {f"mut_{name}": data})
        source = "{dir}/mut_" + name
        runtimes = {".tflite": ["tflite-micro", "litert"], ".json": ["tfjs"]}.get(Path(name).suffix, ["onnxruntime"])
        case.commands = [
            ["verify", source, "--streaming", "--stream-runtime", runtime, "--seq-len", "6"] for runtime in runtimes
        ]
        case.commands += [["inspect", source], ["convert", source, "{dir}/out.safetensors"]]
        return case
    if family == "keras_rescue":  # an old archive damaged, rescued whole, the rescued file run against the old one
        name = rng.choice(sorted(seeds.rescue))
        data = mutators.mutate_keras_rescue(seeds.rescue[name].read_bytes(), rng)
        case = Case(family, f"{index:06d}_{family}_{name}", {f"mut_{name}": data})
        case.oracle = "keras-rescue" if rng.random() < RESCUE_ORACLE_SHARE else ""
        source = "{dir}/mut_" + name
        outputs = ("fixed.keras", "fixed.weights.h5", "out.safetensors", "existing.bin")  # whole, whole, RNNs, kept
        case.commands = [["inspect", source]] + [["convert", source, "{dir}/" + output] for output in outputs]
        return case
    if family == "tflite_quantized":  # quantization parameters damaged, read with and without --dequantize
        held = [n for n in seeds.sources if n.startswith(TFLITE_QUANTIZED)] or sorted(seeds.sources)
        name = rng.choice(held)
        data = mutators.mutate_tflite_quantized(seeds.sources[name].read_bytes(), rng)
        case = Case(family, f"{index:06d}_{family}_{name}", {f"mut_{name}": data})
        source = "{dir}/mut_" + name
        case.commands = [
            ["inspect", source],
            ["convert", source, "{dir}/out.pt", "--allow-lossy"],
            ["convert", source, "{dir}/deq.pt", "--dequantize", "--allow-lossy"],
            ["convert", source, "{dir}/deq.tflite", "--dequantize", "--allow-lossy", "--dtype", "float32"],
            ["verify", source, "--against", str(seeds.sources[name]), "--seq-len", "3"],
            ["convert", source, "{dir}/existing.bin", "--dequantize", "--allow-lossy"],
        ]
        if QUANTIZED_WRITTEN_STEM in name:  # proved in three terms against the float source its record names
            case.commands.append(["verify", source, "--seq-len", "3"])
        return case
    if family == "torch_quantized":  # quantize_dynamic's state_dicts damaged, read with and without --dequantize
        held = [n for n in seeds.sources if n in TORCH_QUANTIZED] or sorted(seeds.sources)
        name = rng.choice(held)
        data = mutators.mutate_torch_quantized(seeds.sources[name].read_bytes(), rng)
        case = Case(family, f"{index:06d}_{family}_{name}", {f"mut_{name}": data})
        source = "{dir}/mut_" + name
        checkpoint = seeds.sources.get(TORCH_QUANTIZED.get(name, ""))
        case.commands = [
            ["inspect", source],
            ["convert", source, "{dir}/out.onnx"],
            ["convert", source, "{dir}/deq.pt", "--dequantize"],
            ["convert", source, "{dir}/deq.onnx", "--dequantize", "--dtype", "float32"],
            ["convert", source, "{dir}/existing.bin", "--dequantize", "--dtype", "float32"],
        ]
        if checkpoint is not None:  # the damaged file run as torch's quantized module, against its float model
            case.commands.append(["verify", source, "--against", str(checkpoint), "--seq-len", "3"])
        return case
    if family in ("tflite_loops", "tflite_loop_forms"):
        forms = family == "tflite_loop_forms"
        held = [n for n in seeds.sources if (n in TFLITE_LOOP_FORMS) == forms and n.startswith("tflite__loop_")]
        held += [n for n in TFLITE_LOOP_FORMS if forms and n in seeds.sources and n not in held]
        name = rng.choice(held or sorted(seeds.sources))
        data = mutators.mutate_tflite_loops(seeds.sources[name].read_bytes(), rng)
        case = _loop_case(family, index, name, {f"mut_{name}": data}, "litert")
        if name in seeds.good_blob:
            source = "{dir}/mut_" + name
            case.commands.append(["verify", str(seeds.good_blob[name]), "--against", source, "--backend", "numpy"])
        return case
    if family == "openvino_loops":
        loops = [n.replace("/", "__") for n in OPENVINO_LOOP_SEEDS]
        name = rng.choice([n for n in loops if n in seeds.sources] or sorted(seeds.sources))
        data = mutators.mutate_openvino_loops(seeds.sources[name].read_bytes(), rng)
        weights = seeds.sources[name].with_suffix(".bin").read_bytes()
        files = {f"mut_{name}": data, f"mut_{name[: -len('.xml')]}.bin": weights}
        case = _loop_case(family, index, name, files, "openvino")
        if rng.random() < VERIFY_SHARE:  # its cells cut from the damaged body and compiled by OpenVINO
            case.commands.append(["verify", "{dir}/out.onnx", "--against", "{dir}/mut_" + name])
        return case
    if family == "openvino_quantized":  # nncf's IRs and --quantize's damaged in their quantization, with and without
        held = [n.replace("/", "__") for n in OPENVINO_QUANTIZED_SEEDS]  # the flags
        held += [f"xml__{QUANTIZED_WRITTEN_STEM}{layer}.xml" for layer, suffix in QUANTIZED_WRITTEN if suffix == ".xml"]
        name = rng.choice([n for n in held if n in seeds.sources] or sorted(seeds.sources))
        stem = name[: -len(".xml")]
        weights = seeds.sources[name].with_suffix(".bin").read_bytes()
        data, weights = mutators.mutate_openvino_quantized(seeds.sources[name].read_bytes(), weights, rng)
        case = Case(family, f"{index:06d}_{family}_{name}", {f"mut_{name}": data, f"mut_{stem}.bin": weights})
        source = "{dir}/mut_" + name
        case.commands = [
            ["inspect", source],
            ["convert", source, "{dir}/out.pt"],
            ["convert", source, "{dir}/deq.pt", "--dequantize"],
            ["convert", source, "{dir}/lossy.pt", "--dequantize", "--allow-lossy"],
            ["convert", source, "{dir}/lossy.onnx", "--dequantize", "--allow-lossy", "--dtype", "float32"],
            ["convert", source, "{dir}/existing.bin", "--dequantize", "--allow-lossy"],
        ]
        if QUANTIZED_WRITTEN_STEM in name:  # proved in three terms against the float source its record names
            case.commands.append(["verify", source, "--seq-len", "3"])
        elif rng.random() < VERIFY_SHARE:  # the damaged IR run in OpenVINO: against its conversion, its checkpoint
            float_source = next(f for q, f in OPENVINO_QUANTIZED_SEEDS.items() if q.replace("/", "__") == name)
            checkpoint = str(seeds.sources[name].parent / float_source.replace("/", "__"))
            case.commands += [["verify", "{dir}/lossy.pt"], ["verify", source, "--against", checkpoint]]
        return case
    if family in SET_FAMILIES:
        models = seeds.sets[family]
        main = rng.choice(sorted(models))
        files = dict(models[main])
        must_refuse = SET_FAMILIES[family](files, main, rng)
        if rng.random() < 0.15:
            mutators.mutate_record(files, rng, seeds.places)
        case = Case(family, f"{index:06d}_{family}_{main}", files, must_refuse=must_refuse)
        source = "{dir}/" + main
        case.commands = [
            ["inspect", source, *(["--json"] if rng.random() < 0.3 else [])],
            ["convert", source, "{dir}/out.safetensors"],
            ["convert", source, "{dir}/out" + rng.choice(TARGETS)],
            ["convert", source, "{dir}/existing.bin"],
        ]
        if rng.random() < 0.4:  # run in its own runtime against the source its record names
            case.commands.append(["verify", source])
        if main in seeds.good_blob:
            case.commands.append(["verify", str(seeds.good_blob[main]), "--against", source, "--backend", "numpy"])
        return case
    if family in ("savedmodel", "savedmodel_serving"):  # a SavedModel or a TF2 checkpoint, its files damaged
        models = seeds.sets["savedmodel"]
        main = rng.choice(sorted(models) if family == "savedmodel" else SERVING_SEEDS)
        files = dict(models[main])
        serving = f"{main}/saved_model.pb"
        case = Case(family, f"{index:06d}_{family}_{main.replace('/', '_')}", files)
        if family == "savedmodel":
            case.must_refuse = mutators.mutate_saved(files, main, rng)
        else:  # a Keras 3 export's serving graph, where its activations are read, damaged
            files[serving] = mutators.mutate_serving(files[serving], rng)
        served = serving in files and files[serving] != models[main][serving]  # its graph's loop bodies damaged
        # a conversion read from a damaged serving graph is judged more often: it is what those cases test
        case.oracle = "tensorflow" if rng.random() < (SERVING_ORACLE_SHARE if served else ORACLE_SHARE) else ""
        source = "{dir}/" + main
        # what is stated is what the model computes (where its graph is damaged, the graph alone is to say it)
        said = ["--activation", "relu"] if main == "k3_export_activations" else SAID_ACTIVATIONS
        stated = said if rng.random() < 0.6 and not served else []
        layer = ["--layer", rng.choice(["encoder", "bidi", "gru", "bidi_lstm", "relu_rnn", "bidi_relu", "x"])]
        case.commands = [
            ["inspect", source + rng.choice(["", ".index"] if "/" in main else ["", "/"]), "--json"],
            ["convert", source, "{dir}/out.safetensors", *stated],
            ["convert", source, "{dir}/out" + rng.choice(TARGETS), *stated, *layer],
            ["convert", source, "{dir}/existing.bin", *stated],
        ]
        if main in seeds.good_blob:
            case.commands.append(["verify", str(seeds.good_blob[main]), "--against", source, "--backend", "numpy"])
        return case
    if family == "orbax":  # an Orbax checkpoint's folder, its files damaged
        models = seeds.sets[family]
        main = rng.choice(sorted(models))
        files = dict(models[main])
        case = Case(family, f"{index:06d}_{family}_{main}", files, must_refuse=mutators.mutate_orbax(files, main, rng))
        source = "{dir}/" + main
        case.commands = [
            ["inspect", source + rng.choice(["", "/"]), *(["--json"] if rng.random() < 0.3 else [])],
            ["convert", source, "{dir}/out.safetensors"],
            [
                "convert",
                source,
                "{dir}/out" + rng.choice(TARGETS),
                *(["--layer", "params"] if rng.random() < 0.3 else []),
            ],
            ["convert", source, "{dir}/existing.bin"],
        ]
        if rng.random() < 0.1:  # run in Flax, on what Orbax restores, against the source its record names
            case.commands.append(["verify", source])
        if main in seeds.good_blob and rng.random() < 0.4:  # Flax compiles each run: seconds, so not every case
            case.commands.append(["verify", str(seeds.good_blob[main]), "--against", source, "--backend", "numpy"])
        return case
    if family == "identify":
        name = rng.choice(sorted(seeds.identify))
        blob, probe, flags = seeds.identify[name]
        flags = list(flags)
        choice = rng.random()
        if choice < 0.5:
            probe = mutators.mutate_probe(probe, rng)
        elif choice < 0.8:
            blob = mutators.mutate_blob_size(blob, rng)
        else:  # flags that describe another model
            flag = rng.choice(["--mode", "--input-size", "--hidden-size", "--num-layers", "--proj-size", "--dtype"])
            value = {
                "--mode": rng.choice(["gru", "rnn_tanh", "rnn_relu"]),
                "--proj-size": rng.choice(["2", "3", "7", str(2**31)]),
                "--dtype": rng.choice(["float16", "float64", "bfloat16"]),
            }.get(flag, rng.choice(["1", "3", "6", "8", "1024", str(2**31 - 1)]))
            flags = [*flags, flag, value]
        case = Case(family, f"{index:06d}_{family}_{name}", {"weights.raw": blob, "probe.npz": probe})
        candidate = ["--candidate", rng.choice(["x", mutators.long_name(rng)[:5000], "cudnn"])]
        case.commands = [
            ["identify", "{dir}/weights.raw", *flags, "--probe", "{dir}/probe.npz", "-o", "{dir}/out.pt"],
            ["identify", "{dir}/weights.raw", *flags, *(candidate if rng.random() < 0.3 else [])],
            ["identify", "{dir}/weights.raw", *flags, "--probe", "{dir}/probe.npz", "-o", "{dir}/existing.bin"],
            ["verify", "{dir}/weights.raw", *flags, "--backend", "numpy"],
        ]
        return case
    if family == "tf1":
        name = rng.choice(sorted(seeds.tf1))
        case = Case(family, f"{index:06d}_{family}_{name}", mutators.mutate_tensor_bundle(seeds.tf1[name], rng))
        source = f"{{dir}}/{name}"
        case.commands = [
            ["inspect", source],
            ["convert", source, "{dir}/out.safetensors"],
            ["convert", f"{source}.index", "{dir}/out.pt"],
            ["convert", source, "{dir}/existing.bin"],
            ["convert", source, "{dir}/out.onnx"],  # a GRUCell's reset-before GRU: ONNX holds it
        ]
        # a TensorFlow process each, on a sample of a GRUCell's: its ONNX against GRUCell's equations
        case.oracle = "tf1-gru" if name.startswith(TF1_GRU_CELLS) and rng.random() < 0.05 else ""
        if name in seeds.good_blob:
            case.commands.append(["verify", str(seeds.good_blob[name]), "--against", source, "--backend", "numpy"])
        return case
    if family == "tf1_meta":  # a cell checkpoint's .meta graph damaged, its conversions held against TF's reading
        name = rng.choice(sorted(n for n, files in seeds.tf1.items() if any(f.endswith(".meta") for f in files)))
        case = Case(family, f"{index:06d}_{family}_{name}", mutators.mutate_meta_graph(seeds.tf1[name], rng))
        case.oracle = "tf1-meta" if rng.random() < 0.03 else ""  # a TensorFlow process each: a sample of the cases
        source = f"{{dir}}/{name}"
        case.commands = [
            ["inspect", source],
            ["convert", source, "{dir}/out.pt"],
            ["convert", source, "{dir}/existing.bin"],
        ]
        if name in seeds.good_blob:
            case.commands.append(["verify", str(seeds.good_blob[name]), "--against", source, "--backend", "numpy"])
        return case
    if family == "blob_sidecar":
        name = rng.choice(["blob.bin", "gru.bin"])
        blob = seeds.blobs[name]
        files = mutators.mutate_sidecar(
            blob.read_bytes(), (blob.parent / (blob.name + ".json")).read_text(), rng, seeds.places
        )
        case = Case(family, f"{index:06d}_{family}_{name}", files)
        case.commands = [
            ["inspect", "{dir}/blob.bin"],
            ["verify", "{dir}/blob.bin", "--backend", "numpy"],
            ["convert", "{dir}/blob.bin", "{dir}/out.pt"],
            ["convert", "{dir}/blob.bin", "{dir}/out.keras"],
            ["convert", "{dir}/blob.bin", "{dir}/existing.bin"],
        ]
        return case
    if family == "rnnconv_safetensors":
        data = mutators.mutate_safetensors(seeds.blobs["all.safetensors"].read_bytes(), rng)
        case = Case(family, f"{index:06d}_{family}", {"all.safetensors": data})
        layer = rng.choice(["gru_a", "bidi_lstm", "nope"])
        case.commands = [
            ["inspect", "{dir}/all.safetensors"],
            ["verify", "{dir}/all.safetensors", "--layer", layer, "--backend", "numpy"],
            ["convert", "{dir}/all.safetensors", "{dir}/out.pt", "--to", "torch"],
            ["convert", "{dir}/all.safetensors", "{dir}/existing.bin", "--layer", layer],
        ]
        return case
    # raw blobs described by flags, of sizes and specs that do not fit
    blob = seeds.blobs["blob.bin"].read_bytes()
    data = blob[: rng.randrange(len(blob))] if rng.random() < 0.5 else mutators.mutate_bytes(blob, rng)
    flags = [
        "--mode",
        rng.choice(["lstm", "gru", "rnn_tanh"]),
        "--input-size",
        str(rng.choice([1, 5, 2**20, 2**31 - 1])),
        "--hidden-size",
        str(rng.choice([1, 8, 2**24, 2**31 - 1])),
        "--num-layers",
        str(rng.choice([1, 2, 50, 65536])),
    ]
    if rng.random() < 0.3:
        flags += ["--bidirectional"]
    identify = Path(__file__).resolve().parents[2] / "fixtures" / "identify"
    probe = (identify / "jax_lstm_probe.npz").read_bytes()
    if rng.random() < 0.4:  # jax's blob and probe, one of them damaged: identify reads and runs its candidates
        jax_blob = (identify / "jax_lstm.bin").read_bytes()
        data = mutators.mutate_bytes(jax_blob, rng) if rng.random() < 0.5 else jax_blob
        flags = [*["--mode", "lstm", "--input-size", "5", "--hidden-size", "7", "--num-layers", "2", "--bidirectional"]]
    files = {"weights.raw": data, "probe.npz": mutators.mutate_bytes(probe, rng) if rng.random() < 0.6 else probe}
    case = Case(family, f"{index:06d}_{family}", files)
    case.commands = [
        ["verify", "{dir}/weights.raw", *flags],
        ["convert", "{dir}/weights.raw", "{dir}/out.pt", *flags],
        ["identify", "{dir}/weights.raw", *flags, "--probe", "{dir}/probe.npz", "-o", "{dir}/out.pt"],
    ]
    return case


def snapshot(folder: Path) -> dict[str, bytes | None]:
    out = {}
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = path.read_bytes() if path.stat().st_size < 1 << 20 else None
    return out


def restore(folder: Path, before: dict[str, bytes | None]) -> None:
    """The folder's files as `snapshot` saw them (what a killed command wrote, gone), to run a command again."""
    for path in sorted(folder.rglob("*"), reverse=True):
        name = str(path.relative_to(folder))
        if path.is_symlink() or (path.is_file() and name not in before):
            path.unlink()
        elif path.is_dir() and not any(n.startswith(name + os.sep) for n in before):
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file() and before[name] is not None and path.read_bytes() != before[name]:
            path.write_bytes(before[name])


@dataclass
class Tally:
    cases: Counter = field(default_factory=Counter)
    commands: Counter = field(default_factory=Counter)
    exits: Counter = field(default_factory=Counter)
    slow: Counter = field(default_factory=Counter)  # commands over TIME_LIMIT that finished when run again
    seconds: Counter = field(default_factory=Counter)  # time spent on each family's cases (where a long run goes)
    failures: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def fail(self, family: str, category: str, example: str) -> None:
        self.failures[family][category] += 1
        if len(self.examples[category]) < 5:
            self.examples[category].append(example)

    def total_failures(self) -> int:
        return sum(sum(c.values()) for c in self.failures.values())

    def report(self) -> dict:
        return {
            "cases": dict(self.cases),
            "commands": dict(self.commands),
            "exit_codes": dict(self.exits),
            "slow_then_finished": dict(self.slow),
            "seconds_by_family": {family: round(seconds, 1) for family, seconds in self.seconds.items()},
            "failures": {f: dict(c) for f, c in self.failures.items()},
            "failures_by_category": {cat: sum(c[cat] for c in self.failures.values()) for cat in CATEGORIES},
            "examples": dict(self.examples),
        }


def run_case(case: Case, worker_box: list[Worker], marker: Path, folder: Path, tally: Tally, keep: Path | None) -> None:
    folder.mkdir(parents=True)
    for name, data in case.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # a SavedModel's variables/
        (folder / name).write_bytes(data)
    tally.cases[case.family] += 1
    failed = []
    judged_pt = False  # a conversion to out.pt was made (and judged): out.onnx is then not judged too
    for command in case.commands:
        args = [a.replace("{dir}", str(folder)) for a in command]
        (folder / "existing.bin").write_bytes(SENTINEL)
        before = snapshot(folder)
        marker.unlink(missing_ok=True)
        result = worker_box[0].run(args)
        if result == "hang":
            worker_box[0].kill()
            worker_box[0] = Worker(marker)
            restore(folder, before)
            marker.unlink(missing_ok=True)
            tally.slow[case.family] += 1
            result = worker_box[0].run(args, CONFIRM_LIMIT)
        tally.commands[case.family] += 1
        label = f"{case.name}: {' '.join(command)}"
        if isinstance(result, str):  # hang, memory or the worker died
            worker_box[0].kill()
            worker_box[0] = Worker(marker)
            category = {"hang": "hang", "memory": "memory"}.get(result, "internal_error")
            tally.fail(case.family, category, label)
            failed.append((command, result))
            tally.exits[result] += 1
            continue
        code = result["code"]
        tally.exits[str(code)] += 1
        problems = []
        if code == 4:
            problems.append("internal_error")
        elif code not in (0, 1, 2, 3):
            problems.append("bad_exit_code")
        if "Traceback" in result["stderr"]:
            problems.append("traceback")
        if result.get("longest_message", 0) > MESSAGE_LIMIT:
            problems.append("message_long")
        if any(line.startswith("error: ") and line.rstrip().endswith(":") for line in result["stderr"].splitlines()):
            problems.append("message_lost")  # a sentence cut before it says what is wrong
        if marker.exists():
            problems.append("code_executed")
        after = snapshot(folder)
        if after.get("existing.bin", SENTINEL) != SENTINEL:
            problems.append("clobbered")
        created = set(after) - set(before)
        if any(".part" in name or name.startswith(".") for name in created):
            problems.append("temp_left")
        if code not in (0, 1) and created:
            problems.append("partial_output")
        if case.must_refuse and code == 0:
            problems.append("malformed_accepted")
        saved = case.oracle == "tensorflow" and args[2].endswith("out.safetensors")  # every RNN, as stated
        saved = saved or (case.oracle == "keras-rescue" and command[-1].endswith("fixed.keras"))  # the whole model
        saved = saved or (case.oracle == "tf1-gru" and command[-1].endswith("out.onnx"))
        saved = saved or (command[-1].endswith("out.onnx") and case.oracle in LOOP_ORACLES and not judged_pt)
        judged_pt = judged_pt or (command[-1].endswith("out.pt") and code == 0)
        if case.oracle and code == 0 and command[0] == "convert" and (command[-1].endswith("out.pt") or saved):
            stated = ["stated"] if "--activation" in args else []
            judged = disagrees(case.oracle, Path(args[1]), Path(args[2]), *stated)
            tally.exits[f"oracle: {judged or 'agrees'}"[:40]] += 1
            if judged and judged.startswith("off by"):
                problems.append("wrong_conversion")
        for name in created:  # the next command starts from the case's own files
            (folder / name).unlink(missing_ok=True)
        for problem in problems:
            tally.fail(case.family, problem, f"{label} -> exit {code}: {result['stderr'][-300:]}")
        if problems:
            failed.append((command, result))
    if failed and keep is not None:
        target = keep / case.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(folder, target, symlinks=True)
        (target / "failures.json").write_text(json.dumps([{"command": c, "result": r} for c, r in failed], indent=1))
        (target / "commands.json").write_text(json.dumps(case.commands))
    shutil.rmtree(folder, ignore_errors=True)


TF1_GRU_CELLS = ("gru.", "gru_cell")  # the tf1 seeds of GRUCell checkpoints (gru_bi is a CudnnGRU's)
ORACLE = r"""
import sys
import numpy as np, torch, rnnconv
runtime, source, converted = sys.argv[1:4]
if runtime == "tf1-meta":  # the f gate's bias shift against the forget biases TensorFlow's own parse of the graph adds
    import tensorflow as tf
    from tensorflow.core.protobuf import meta_graph_pb2
    graph = meta_graph_pb2.MetaGraphDef()
    try:
        graph.ParseFromString(open(source + ".meta", "rb").read())
    except Exception:
        sys.exit(3)  # a graph TensorFlow itself cannot read: nothing to judge the conversion by
    added = set()
    for nodes in [graph.graph_def.node] + [f.node_def for f in graph.graph_def.library.function]:
        by_name = {n.name: n for n in nodes}  # names are the graph's or one function's own
        for n in nodes:
            if n.op not in ("Add", "AddV2") or len(n.input) != 2:
                continue
            for gate, const in (n.input, n.input[::-1]):
                split, c = by_name.get(gate.split(":")[0]), by_name.get(const.split(":")[0])
                if split is not None and split.op == "Split" and gate.split(":")[-1] == "2" and c is not None \
                        and c.op == "Const" and not c.attr["value"].tensor.tensor_shape.dim:
                    added.add(float(tf.make_ndarray(c.attr["value"].tensor)))
    state = torch.load(converted, weights_only=True)
    reader = tf.train.load_checkpoint(source)
    biases = sorted(k for k in reader.get_variable_to_shape_map() if k.endswith("cell/bias"))
    bias = reader.get_tensor(next((k for k in biases if "/fw/" in k), biases[0]))  # layer 0, forward
    hidden = bias.shape[0] // 4
    shift = (state["bias_ih_l0"] + state["bias_hh_l0"]).numpy()[hidden : 2 * hidden] - bias[2 * hidden : 3 * hidden]
    ok = any(np.allclose(shift, value, atol=1e-5) for value in added)
    print("" if ok else f"off by a forget bias the graph does not add ({shift[0]:.3g}; the graph adds {sorted(added)})")
    sys.exit(0)
if runtime == "tf1-gru":  # a GRUCell checkpoint's ONNX against GRUCell's equations on TensorFlow's own reading of it
    import re
    import onnxruntime
    import tensorflow as tf
    try:
        reader = tf.train.load_checkpoint(source)
        names = reader.get_variable_to_shape_map()
        where = {}  # (layer, direction) -> the cell's scope, as MultiRNNCell and bidirectional_dynamic_rnn name it
        for name in names:
            if name.endswith("gru_cell/gates/kernel"):
                layer = re.search(r"cell_(\d+)/", name)
                where[(int(layer[1]) if layer else 0, 1 if "/bw/" in name else 0)] = name[: -len("gates/kernel")]
        w = {cell: {v: reader.get_tensor(scope + v) for v in ("gates/kernel", "gates/bias", "candidate/kernel",
             "candidate/bias")} for cell, scope in where.items()}
    except Exception:
        sys.exit(3)  # a checkpoint TensorFlow itself cannot read, or not a GRUCell's: nothing to judge it by
    layers, dirs = 1 + max(k for k, _ in where), 1 + max(d for _, d in where)
    hidden = w[(0, 0)]["candidate/bias"].shape[0]
    session = onnxruntime.InferenceSession(converted, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    size = inputs["X"].shape[-1]
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (4, 2, size)).astype(np.float32)
    h0 = rng.normal(0, 0.5, (layers * dirs, 2, hidden)).astype(np.float32)
    y = session.run(None, {"X": x, "initial_h": h0})[0]
    layer_input = x
    try:
        for k in range(layers):
            outs = []
            for d in range(dirs):
                c = w[(k, d)]
                h, steps = tf.constant(h0[k * dirs + d]), np.zeros((4, 2, hidden), np.float32)
                for t in range(4) if d == 0 else range(3, -1, -1):
                    xt = tf.constant(layer_input[t])
                    value = tf.sigmoid(tf.matmul(tf.concat([xt, h], 1), c["gates/kernel"]) + c["gates/bias"])
                    r, u = tf.split(value, 2, axis=1)
                    cand = tf.tanh(tf.matmul(tf.concat([xt, r * h], 1), c["candidate/kernel"]) + c["candidate/bias"])
                    h = u * h + (1 - u) * cand
                    steps[t] = h.numpy()
                outs.append(steps)
            layer_input = np.concatenate(outs, -1)
    except Exception:
        sys.exit(3)  # variables whose shapes GRUCell could not run: the conversion refuses those
    worst = float(np.abs(y.reshape(layer_input.shape) - layer_input).max()) if y.size == layer_input.size else np.inf
    print("" if worst <= 1e-4 or np.isnan(worst) and np.isnan(layer_input).any() else f"off by {worst:.3g}")
    sys.exit(0)
initial = []  # the initial states the model takes as inputs, fed to both
(entry,) = rnnconv.inspect(converted).rnns
spec = entry.spec
# a .pt's state_dict does not say an RNN's activation: the source's reading does
mode = next(e.spec.mode for e in rnnconv.inspect(source).rnns if e.converts)
if converted.endswith(".onnx"):  # a reset-before GRU, which no .pt holds: its ONNX run in onnxruntime
    import onnxruntime
    written = onnxruntime.InferenceSession(converted, providers=["CPUExecutionProvider"])
else:
    kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(spec.mode, torch.nn.RNN)
    extra = {"nonlinearity": "relu"} if mode == "rnn_relu" else {}
    module = kind(spec.input_size, spec.hidden_size, num_layers=spec.num_layers, bidirectional=spec.bidirectional,
                  **extra)
    module.load_state_dict(torch.load(converted, weights_only=True))
if runtime == "litert":
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=source)
    interpreter.allocate_tensors()
    given = interpreter.get_input_details()[0]
    shape = list(given["shape"])
elif runtime == "onnxruntime":
    import onnxruntime
    session = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
    given, *states = session.get_inputs()  # the states a model takes as its further inputs (h0, c0): batch-major x
    shape = [d if isinstance(d, int) and d > 0 else 4 if i else 2 for i, d in enumerate(given.shape)]
    initial = [
        np.random.default_rng(1).normal(0, 0.5, [d if isinstance(d, int) and d > 0 else 2 for d in s.shape])
        .astype(np.float32)
        for s in states
    ]
else:
    import openvino as ov
    compiled = ov.Core().compile_model(source, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    shape = list(compiled.inputs[0].get_shape())
if shape[-1] != spec.input_size:
    sys.exit(3)
x = np.random.default_rng(0).normal(0, 1.5, shape).astype(np.float32)
if runtime == "litert":
    interpreter.set_tensor(given["index"], x)
    interpreter.invoke()
    expected = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
elif runtime == "onnxruntime":
    expected = session.run(None, {given.name: x, **{s.name: v for s, v in zip(states, initial)}})[0]
else:
    expected = compiled(x)[0]
errors = []
starts = tuple(torch.from_numpy(v)[None] for v in initial)
if starts and len(starts) != (2 if spec.mode == "lstm" else 1):
    sys.exit(3)
for batch_first in (True, False) if not starts else (True,):  # Keras's batch-major, ONNX Scans' time-major
    if not converted.endswith(".onnx"):
        module.batch_first = batch_first
        with torch.no_grad():
            y, state = module(torch.from_numpy(x), (starts if spec.mode == "lstm" else starts[0]) if starts else None)
        h = (state[0] if spec.mode == "lstm" else state).numpy()
    else:  # Y (seq, batch, D*H) and Y_h from X (seq, batch, input), as a time-major torch RNN's
        feeds = {"X": np.ascontiguousarray(x.swapaxes(0, 1) if batch_first else x)}
        depth = spec.num_layers * (2 if spec.bidirectional else 1)
        zeros = [np.zeros((depth, x.shape[0 if batch_first else 1], spec.hidden_size), np.float32)] * 2
        states = [v[None] for v in initial] or zeros[: 2 if spec.mode == "lstm" else 1]
        feeds |= dict(zip(("initial_h", "initial_c"), states))
        y, h = (torch.from_numpy(v) for v in written.run(["Y", "Y_h"], feeds))
        y, h = (y.transpose(0, 1) if batch_first else y), h.numpy()
    last = np.concatenate(list(h[-2:] if spec.bidirectional else h[-1:]), axis=-1)
    errors += [float(np.abs(got - expected).max()) for got in (y.numpy(), last) if got.shape == expected.shape]
if not errors:
    sys.exit(3)
print(f"off by {min(errors):.2g}" if not min(errors) <= 1e-5 else "")
"""


SAVED_ORACLE = r"""
import sys
from pathlib import Path
import numpy as np
sys.path[:0] = ["fixtures", "tests"]
import tensorflow as tf, tf_keras, rnnconv
import make_savedmodel_fixtures as made
from facts.keras import SAVED_ACTIVATIONS, SAVED_RUNS, saved_run
_, source, converted, *stated = sys.argv[1:]
source = Path(source)
seed = next(part for part in source.parts if part in SAVED_RUNS)
oracle = np.load("fixtures/savedmodel/oracle.npz")
values = {key.split("/", 1)[1]: oracle[key] for key in oracle if key.startswith(seed + "/in/")}
feeds = [values[key] for key in ("in/x", "in/h0", "in/c0") if key in values]
try:  # TensorFlow itself on the damaged file: tf-keras' loader (the config its metadata keeps), the export's serve,
    # a checkpoint restored into the model it was saved from
    if seed.startswith("tfk_") and "ckpt" not in seed:
        outputs = tf_keras.models.load_model(str(source), compile=False)(
            feeds if len(feeds) > 1 else feeds[0])
    elif seed.startswith("k3_export"):
        loaded = tf.saved_model.load(str(source))
        outputs = loaded.serve(tf.constant(feeds[0]))
    else:
        fresh = made.lstm_state_model(tf_keras) if seed == "tfk_ckpt" else made.k3_bidi_model()
        tf.train.Checkpoint(model=fresh).read(str(source)).assert_existing_objects_matched()
        outputs = fresh(feeds if len(feeds) > 1 else feeds[0])
except Exception:
    sys.exit(3)
outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
values.update({f"out/{k}": np.asarray(t) for k, t in enumerate(outputs)})
errors = []
with rnnconv.load(converted, all_rnns=True) as rnns:
    for rnn in rnns:
        # a layer without a config is judged where the activations it was converted with are the model's own
        if rnn.name not in SAVED_RUNS[seed] or (stated and rnn.name in SAVED_ACTIVATIONS):
            continue
        try:
            pairs = saved_run(rnn.name, rnn.spec, rnn.param, values, seed)
            errors.append(max(float(np.abs(g - e).max()) for g, e in pairs))
        except (ValueError, KeyError, IndexError):
            continue  # a conversion of other sizes than TensorFlow's model: not judged here
if not errors:
    sys.exit(3)
print(f"off by {max(errors):.2g}" if not max(errors) <= 1e-5 else "")
"""


RESCUE_ORACLE = r"""
import json, os, subprocess, sys, zipfile
from pathlib import Path
import numpy as np
_, source, converted, old_python = sys.argv[1:]
seed = next(name for name in ("tfkeras215_bidi", "keras30_bidi", "tfkeras215_functional") if name in source)
x = np.load(f"fixtures/keras_rescue/{seed}.npz")["x"]
version = json.loads(zipfile.ZipFile(source).read("metadata.json")).get("keras_version", "")
RUN = "import sys, numpy as np\nfrom {module} import saving\n" \
    "model = saving.load_model(sys.argv[1], compile=False)\n" \
    "np.save(sys.argv[2], np.asarray(model(np.load(sys.argv[3]))))"
np.save(Path(converted).with_suffix(".x.npy"), x)
def run(python, module, path, out):  # each Keras in a process of its own: one may crash on a damaged file
    done = subprocess.run([python, "-c", RUN.format(module=module), str(path), str(out),
                           str(Path(converted).with_suffix(".x.npy"))], capture_output=True, timeout=300)
    return np.load(out) if done.returncode == 0 else None
got = run(sys.executable, "keras", converted, Path(converted).with_suffix(".got.npy"))
if got is None:
    print("off by inf (Keras 3 does not run the rescued file)")
    sys.exit(0)
if version.startswith("3."):
    want = run(sys.executable, "keras", source, Path(converted).with_suffix(".want.npy"))
elif old_python:
    want = run(old_python, "tensorflow.keras", source, Path(converted).with_suffix(".want.npy"))
else:
    sys.exit(3)
if want is None or want.shape != got.shape:
    sys.exit(3)  # the old Keras does not run the damaged file: nothing to judge the rescue by
if not (np.isnan(want) == np.isnan(got)).all():
    sys.exit(print("off by nan (NaN where the old Keras gives none, or the other way)"))
# NaN weights give NaN outputs in both Kerases: the rescue copies variables as stored
error = float(np.abs(np.nan_to_num(want) - np.nan_to_num(got)).max())
print(f"off by {error:.2g}" if not error <= 1e-5 else "")
"""


def disagrees(runtime: str, source: Path, converted: Path, *more: str) -> str | None:
    """Whether a converted loop computes otherwise than its runtime (LiteRT, OpenVINO's CPU plugin, onnxruntime)
    running the mutated file (the model's output: every step's, or each direction's last): "off by E"; None where it
    agrees; "unjudged" where the runtime cannot run the file or its output is not the RNN's (run in a process of its
    own: a runtime may crash on a damaged file)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", RESCUE_ORACLE, runtime, str(source), str(converted), OLD_KERAS_PYTHON]
            if runtime == "keras-rescue"
            else [sys.executable, "-c", SAVED_ORACLE if runtime == "tensorflow" else ORACLE, runtime, str(source)]
            + [str(converted), *more],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "unjudged"
    if done.returncode != 0:
        return "unjudged"
    return done.stdout.strip() or None


def merge(tallies: list[Tally]) -> Tally:
    total = Tally()
    for tally in tallies:
        total.cases.update(tally.cases)
        total.commands.update(tally.commands)
        total.exits.update(tally.exits)
        total.slow.update(tally.slow)
        total.seconds.update(tally.seconds)
        for family, counts in tally.failures.items():
            total.failures[family].update(counts)
        for category, examples in tally.examples.items():
            total.examples[category] = (total.examples[category] + examples)[:5]
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--budget", type=float, default=None, help="seconds to run (after the seeds are made)")
    parser.add_argument("--cases", type=int, default=None, help="number of cases (default: until the budget)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="workers running cases side by side")
    parser.add_argument(
        "--families", default=",".join(FAMILIES), help="a comma-separated list, or 'new' (NEW_FAMILIES)"
    )
    parser.add_argument("--keep", default="fuzz-failures", help="where failing cases are saved ('' for nowhere)")
    parser.add_argument("--report", type=Path, default=None, help="write the counts as JSON here")
    parser.add_argument("--replay", type=Path, default=None, help="a saved case's folder: run its commands again")
    args = parser.parse_args(argv)
    if args.budget is None and args.cases is None:
        args.budget = 60.0
    keep = Path(args.keep) if args.keep else None
    families = list(NEW_FAMILIES) if args.families == "new" else args.families.split(",")
    with tempfile.TemporaryDirectory(prefix="rnnconv-fuzz-") as tmp:
        work = Path(tmp)
        if args.replay:
            marker = work / "MARKER-code-ran"
            worker_box = [Worker(marker)]
            tally = Tally()
            files = {
                p.name: p.read_bytes()
                for p in args.replay.iterdir()
                if (p.is_file() and not p.name.endswith(".json")) or p.name.endswith(".bin.json")
            }
            case = Case("replay", args.replay.name, files, json.loads((args.replay / "commands.json").read_text()))
            run_case(case, worker_box, marker, work / "replay", tally, None)
            worker_box[0].kill()
        else:
            seeds = prepare(work / "seeds")
            start, counter, lock = time.monotonic(), iter(range(10**12)), threading.Lock()
            made: list[list[changing.Seed]] = []

            def changing_seeds() -> list[changing.Seed]:  # made when the family first runs (a minute)
                with lock:
                    if not made:
                        helper = Worker(work / "MARKER-code-ran-seeds")
                        try:
                            made.append(changing.prepare(work / "changing_seeds", helper))
                        finally:
                            helper.kill()
                return made[0]

            def job(number: int) -> Tally:
                marker = work / f"MARKER-code-ran-{number}"
                worker_box, tally = [Worker(marker)], Tally()
                try:
                    while True:
                        with lock:
                            index = next(counter)
                        if (args.cases is not None and index >= args.cases) or (
                            args.budget is not None and time.monotonic() - start > args.budget
                        ):
                            return tally
                        family = families[index % len(families)]
                        rng = random.Random(f"{args.seed}-{index}")  # the same case whatever the scheduling
                        case_start = time.monotonic()
                        try:
                            if family == "changing_source":  # families that run their commands their own way
                                changing.run_case(changing_seeds(), work, rng, index, worker_box, marker, tally, keep)
                            elif family == "odd_environment":
                                odd_env.run_case(index, rng, work, tally, keep)
                            else:
                                case = make_case(family, seeds, rng, index)
                                run_case(case, worker_box, marker, work / "cases" / case.name, tally, keep)
                        except Exception as exc:  # a job that stopped here would lose the whole run's report
                            tally.fail(family, "harness_error", f"case {index} (seed {args.seed}): {exc!r}")
                        tally.seconds[family] += time.monotonic() - case_start
                finally:
                    worker_box[0].kill()

            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                tally = merge(list(pool.map(job, range(args.jobs))))
    report = tally.report()
    report["seconds"] = round(time.monotonic() - start, 1) if not args.replay else None
    text = json.dumps(report, indent=1)
    if args.report:
        args.report.write_text(text + "\n")
    print(text)
    return 1 if tally.total_failures() else 0
