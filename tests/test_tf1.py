"""TF1 tf.contrib.cudnn_rnn checkpoints: the blob computes what TensorFlow computes on the checkpoint's
canonical tensors; it holds what TF's own restore hands cuDNN; damaged files give one sentence."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, assert_no_framework_imported, run_cli

import rnnconv
from rnnconv.core import reference
from rnnconv.core.canonical import ParamKey
from rnnconv.errors import BadInput
from rnnconv.formats import registry
from rnnconv.formats.cudnn.reader import open_bin

TF1 = FIXTURES / "tf1"
LSTM, GRU, RNN = "cudnn_compatible_lstm_cell", "cudnn_compatible_gru_cell", "basic_rnn_cell"
# fixture, --layer, --nonlinearity -> (cell, scope, layers, bidirectional)
CASES = {
    ("lstm2", None, None): (LSTM, "cudnn_lstm", 2, False),
    ("gru_bi", None, None): (GRU, "encoder/cudnn_gru", 1, True),
    ("rnn_tanh", None, None): (RNN, "cudnn_rnn_tanh", 2, False),
    ("rnn_tanh", None, "relu"): (RNN, "cudnn_rnn_tanh", 2, False),
    ("seq2seq", "encoder/cudnn_lstm", None): (LSTM, "encoder/cudnn_lstm", 1, True),
    ("seq2seq", "decoder/cudnn_gru", None): (GRU, "decoder/cudnn_gru", 1, False),
}


def cell_scope(scope: str, layer: int, direction: int, bidirectional: bool, cell: str) -> str:
    """Where TF's CudnnOpaqueParamsSaveable names a layer's tensors (written out here, not taken from rnnconv)."""
    if bidirectional:
        return f"{scope}/stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{('fw', 'bw')[direction]}/{cell}"
    return f"{scope}/rnn/multi_rnn_cell/cell_{layer}/{cell}"


def tensorflow_run(prefix: Path, case: tuple, x, h0, c0, relu: bool = False):
    """The checkpoint's canonical tensors run by TensorFlow as the TF1 cells run them (CPU, float32)."""
    cell, scope, layers, bidirectional = case
    reader = tf.train.load_checkpoint(str(prefix))
    dirs = 2 if bidirectional else 1
    hidden = h0.shape[-1]
    h_n, c_n = [], []
    layer_input = tf.constant(x)
    for layer in range(layers):
        outputs = []
        for direction in range(dirs):
            where = cell_scope(scope, layer, direction, bidirectional, cell)
            w = {name: tf.constant(reader.get_tensor(f"{where}/{name}")) for name in names_of(cell)}
            h, c = tf.constant(h0[layer * dirs + direction]), tf.constant(c0[layer * dirs + direction])
            steps = range(x.shape[0]) if direction == 0 else range(x.shape[0] - 1, -1, -1)
            ys = {}
            for t in steps:
                xt = layer_input[t]
                if cell == LSTM:  # CudnnCompatibleLSTMCell is LSTMBlockCell(forget_bias=0, no clip, no peepholes)
                    zeros = tf.zeros([hidden])
                    got = tf.raw_ops.LSTMBlockCell(
                        x=xt, cs_prev=c, h_prev=h, w=w["kernel"], wci=zeros, wcf=zeros, wco=zeros, b=w["bias"],
                        forget_bias=0.0, cell_clip=-1.0, use_peephole=False,
                    )  # fmt: skip
                    h, c = got.h, got.cs
                elif cell == GRU:  # CudnnCompatibleGRUCell.call
                    gates = tf.sigmoid(tf.matmul(tf.concat([xt, h], 1), w["gates/kernel"]) + w["gates/bias"])
                    r, u = tf.split(gates, 2, axis=1)
                    candidate = tf.matmul(xt, w["candidate/input_projection/kernel"])
                    candidate += w["candidate/input_projection/bias"]
                    hh = tf.matmul(h, w["candidate/hidden_projection/kernel"]) + w["candidate/hidden_projection/bias"]
                    h = (1 - u) * tf.tanh(candidate + r * hh) + u * h
                else:  # BasicRNNCell
                    pre = tf.matmul(tf.concat([xt, h], 1), w["kernel"]) + w["bias"]
                    h = tf.nn.relu(pre) if relu else tf.tanh(pre)
                ys[t] = h
            outputs.append(tf.stack([ys[t] for t in range(x.shape[0])]))
            h_n.append(h)
            c_n.append(c)
        layer_input = tf.concat(outputs, axis=-1)
    return layer_input.numpy(), np.stack(h_n), (np.stack(c_n) if cell == LSTM else None)


def names_of(cell: str) -> list[str]:
    if cell == GRU:
        return [f"{part}/{kind}" for part in ("gates", "candidate/input_projection", "candidate/hidden_projection")
                for kind in ("kernel", "bias")]  # fmt: skip
    return ["kernel", "bias"]


@pytest.mark.parametrize("case", sorted(CASES, key=str), ids=lambda c: "-".join(filter(None, c)))
def test_blob_computes_what_tensorflow_computes_on_the_checkpoint(case, tmp_path):
    name, layer, nonlinearity = case
    out = tmp_path / "blob.bin"
    rnnconv.convert(TF1 / f"{name}.ckpt.index", out, layer=layer, nonlinearity=nonlinearity)
    blob = open_bin(out)
    spec = blob.spec
    rng = np.random.default_rng(7)
    steps, batch, pseudo = 6, 3, spec.num_layers * spec.num_directions
    x = rng.normal(0, 0.8, (steps, batch, spec.input_size)).astype(np.float32)
    h0 = rng.normal(0, 0.5, (pseudo, batch, spec.hidden_size)).astype(np.float32)
    c0 = rng.normal(0, 0.5, (pseudo, batch, spec.hidden_size)).astype(np.float32)
    expected = tensorflow_run(TF1 / f"{name}.ckpt", CASES[case], x, h0, c0, relu=nonlinearity == "relu")
    got = reference.forward(spec, blob.param, x, h0, c0 if spec.mode == "lstm" else None)
    worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected) if e is not None)
    LARGEST_ERRORS[f"tensorflow tf1 {'-'.join(filter(None, case))}"] = worst
    assert worst < 1e-5
    assert spec.mode == {LSTM: "lstm", GRU: "gru", RNN: f"rnn_{nonlinearity or 'tanh'}"}[CASES[case][0]]


def test_blob_holds_what_tensorflows_own_restore_hands_cudnn(tmp_path):
    """TF's _tf_to_cudnn_weights/_tf_to_cudnn_biases in numpy: kernel.T split into gates i, c, f, o, each [W | R];
    the bias halved onto both sides (what --bias-split half gives)."""
    reader = tf.train.load_checkpoint(str(TF1 / "lstm2.ckpt"))
    out = tmp_path / "blob.bin"
    rnnconv.convert(TF1 / "lstm2.ckpt.index", out, bias_split="half")
    blob = open_bin(out)
    for layer in range(2):
        where = cell_scope("cudnn_lstm", layer, 0, False, LSTM)
        kernel, bias = reader.get_tensor(f"{where}/kernel"), reader.get_tensor(f"{where}/bias")
        n_in = kernel.shape[0] - 4
        for gate, block in zip("icfo", np.split(kernel.T, 4)):  # TF's gate order
            np.testing.assert_array_equal(blob.param(ParamKey(layer, 0, "W", gate)), block[:, :n_in])
            np.testing.assert_array_equal(blob.param(ParamKey(layer, 0, "R", gate)), block[:, n_in:])
        for gate, part in zip("icfo", np.split(bias, 4)):
            for kind in ("bW", "bR"):
                np.testing.assert_array_equal(blob.param(ParamKey(layer, 0, kind, gate)), part * np.float32(0.5))
    gru = tf.train.load_checkpoint(str(TF1 / "gru_bi.ckpt"))
    rnnconv.convert(TF1 / "gru_bi.ckpt.index", out, bias_split="half", force=True)
    blob = open_bin(out)
    where = cell_scope("encoder/cudnn_gru", 0, 1, True, GRU)
    gates_kernel = gru.get_tensor(f"{where}/gates/kernel").T
    for gate, block in zip("rz", np.split(gates_kernel, 2)):  # TF: W_ir split in 2, reset first
        np.testing.assert_array_equal(blob.param(ParamKey(0, 1, "W", gate)), block[:, :6])
        np.testing.assert_array_equal(blob.param(ParamKey(0, 1, "R", gate)), block[:, 6:])
    new_gate = {
        "W": "candidate/input_projection/kernel",
        "R": "candidate/hidden_projection/kernel",
        "bW": "candidate/input_projection/bias",
        "bR": "candidate/hidden_projection/bias",
    }
    for kind, name in new_gate.items():
        np.testing.assert_array_equal(blob.param(ParamKey(0, 1, kind, "h")), gru.get_tensor(f"{where}/{name}").T)
    for gate, part in zip("rz", np.split(gru.get_tensor(f"{where}/gates/bias"), 2)):
        np.testing.assert_array_equal(blob.param(ParamKey(0, 1, "bW", gate)), part * np.float32(0.5))


@pytest.mark.parametrize("name, layer", [("lstm2", None), ("gru_bi", None), ("seq2seq", "encoder/cudnn_lstm")])
def test_verify_runs_tensorflow_with_states_and_ragged_lengths(name, layer, tmp_path):
    blob = tmp_path / "blob.bin"
    rnnconv.convert(TF1 / f"{name}.ckpt", blob, layer=layer)  # the prefix names the checkpoint
    for extra in ([], ["--ragged", "--batch", "4", "--seq-len", "9"]):
        report = rnnconv.verify(blob, backend="numpy", **({"ragged": True, "batch": 4, "seq_len": 9} if extra else {}))
        assert report.verdict == "match", report.summary
        assert report.source is not None and report.source.run.startswith("tensorflow")
        assert report.comparison is not None and report.comparison.worst < 1e-5


@pytest.mark.slow
def test_verify_from_the_command_line_and_a_wrong_blob(tmp_path):
    blob = tmp_path / "blob.bin"
    assert run_cli("tf1-to-cudnn", TF1 / "rnn_tanh.ckpt.index", "-o", blob, "-q").returncode == 0
    result = run_cli("verify", blob, "--backend", "numpy")
    assert result.returncode == 0, result.stderr
    assert "MATCH" in result.stdout and "under the assumption that cudnn_rnn_tanh: nonlinearity=tanh" in result.stdout
    data = bytearray(blob.read_bytes())
    data[40:44] = np.float32(2.5).tobytes()  # one weight of the first layer, changed
    blob.write_bytes(bytes(data))
    result = run_cli("verify", blob, "--backend", "numpy")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


def test_every_name_of_a_checkpoint_gives_the_same_blob(tmp_path):
    names = ["lstm2.ckpt", "lstm2.ckpt.index", "lstm2.ckpt.data-00000-of-00001"]
    blobs = []
    for index, name in enumerate(names):
        rnnconv.convert(TF1 / name, tmp_path / f"{index}.bin")
        blobs.append((tmp_path / f"{index}.bin").read_bytes())
    assert blobs[0] == blobs[1] == blobs[2]
    assert json.loads((tmp_path / "0.bin.json").read_text())["source"]["path"].endswith("lstm2.ckpt.index")


@pytest.mark.slow
def test_inspect_lists_the_rnns_and_why_an_opaque_buffer_does_not_convert():
    report = json.loads(run_cli("inspect", TF1 / "seq2seq.ckpt", "--json").stdout)
    assert report["format"] == "tf1-checkpoint"
    rows = [(r["name"], r["class"], r["converts"], r["spec"]["bidirectional"]) for r in report["rnns"]]
    assert rows == [("decoder/cudnn_gru", "CudnnGRU", True, False), ("encoder/cudnn_lstm", "CudnnLSTM", True, True)]
    opaque = rnnconv.inspect(TF1 / "opaque_only.ckpt.index")
    assert [(r.name, r.converts) for r in opaque.rnns] == [("cudnn_lstm/opaque_kernel", False)]
    assert "TF records no spec" in (opaque.rnns[0].reason or "")


@pytest.mark.slow
def test_several_rnns_need_a_layer_and_all_go_to_a_safetensors(tmp_path):
    result = run_cli("tf1-to-cudnn", TF1 / "seq2seq.ckpt.index", "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "holds 2 RNNs", "'decoder/cudnn_gru'", "'encoder/cudnn_lstm'", "--layer")
    assert not (tmp_path / "out.bin").exists()
    with pytest.raises(BadInput, match="has no RNN 'decoder'"):
        rnnconv.load(TF1 / "seq2seq.ckpt", layer="decoder")
    rnnconv.convert(TF1 / "seq2seq.ckpt", tmp_path / "all.safetensors")
    assert sorted(r.name for r in rnnconv.inspect(tmp_path / "all.safetensors").rnns) == [
        "decoder/cudnn_gru",
        "encoder/cudnn_lstm",
    ]


@pytest.mark.slow
def test_an_opaque_buffer_alone_is_refused(tmp_path):
    result = run_cli("convert", TF1 / "opaque_only.ckpt.index", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "only the opaque cuDNN buffer cudnn_lstm/opaque_kernel", "TF records no spec")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_no_writer_and_no_commands_to_tf1(tmp_path):
    from typer.main import get_command

    from rnnconv.cli.commands import app

    commands = set(get_command(app).commands)  # type: ignore[attr-defined]  # those --help lists, and the hidden
    assert "tf1-to-cudnn" in commands and "tf1-to-torch" in commands
    assert not [name for name in commands if name.endswith("-to-tf1")] and "-to-tf1" not in run_cli("--help").stdout
    result = run_cli("convert", FIXTURES / "torch" / "seq2seq.pt", tmp_path / "x.index", "--to", "tf1")
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.slow
def test_nonlinearity_must_be_stated_when_asked():
    result = run_cli("tf1-to-cudnn", TF1 / "rnn_tanh.ckpt", "--require-stated", "-o", "/nonexistent/x.bin")
    assert_clean_failure(result, 2, "--require-stated", "nonlinearity=tanh")


# --- damaged and hostile checkpoints ---------------------------------------------------------------------


def write_checkpoint(prefix: Path, variables: dict[str, np.ndarray]) -> Path:
    graph = tf.Graph()
    with graph.as_default():
        for name, value in variables.items():
            tf.compat.v1.get_variable(name, initializer=value)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix), write_meta_graph=False, write_state=False)
    return prefix.with_name(prefix.name + ".index")


def lstm_variables(hidden: int = 4, n_in: int = 5, layers: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    variables = {}
    for layer in range(layers):
        where = cell_scope("lstm", layer, 0, False, LSTM)
        rows = (n_in if layer == 0 else hidden) + hidden
        variables[f"{where}/kernel"] = rng.normal(size=(rows, 4 * hidden)).astype(np.float32)
        variables[f"{where}/bias"] = rng.normal(size=4 * hidden).astype(np.float32)
    return variables


def _damaged(kind: str, folder: Path) -> Path:
    index = write_checkpoint(folder / "model.ckpt", lstm_variables())
    data = folder / "model.ckpt.data-00000-of-00001"
    if kind == "index truncated":
        index.write_bytes(index.read_bytes()[:-20] + index.read_bytes()[-8:])
    elif kind == "index scrambled":
        raw = bytearray(index.read_bytes())
        for i in range(len(raw) - 48):
            raw[i] ^= 0x5A
        index.write_bytes(bytes(raw))
    elif kind == "data missing":
        data.unlink()
    elif kind == "data truncated":
        data.write_bytes(data.read_bytes()[:40])
    elif kind == "data corrupted":
        raw = bytearray(data.read_bytes())
        raw[30] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif kind == "integer kernel":
        variables = lstm_variables()
        name = next(n for n in variables if n.endswith("kernel"))
        variables[name] = variables[name].astype(np.int32)
        index = write_checkpoint(folder / "model.ckpt", variables)
    elif kind == "wrong shape":
        variables = lstm_variables(layers=2)
        name = next(n for n in variables if "cell_1" in n and n.endswith("kernel"))
        variables[name] = np.zeros((7, 16), np.float32)  # layer 1 takes 4 inputs: [4 + 4, 16]
        index = write_checkpoint(folder / "model.ckpt", variables)
    elif kind == "bias missing":
        index = write_checkpoint(folder / "model.ckpt", {k: v for k, v in lstm_variables().items() if "kernel" in k})
    elif kind == "layer missing":
        variables = lstm_variables(layers=3)
        index = write_checkpoint(folder / "model.ckpt", {k: v for k, v in variables.items() if "cell_1" not in k})
    elif kind == "layer numbered absurdly":
        variables = {k.replace("cell_0", "cell_999999999"): v for k, v in lstm_variables().items()}
        index = write_checkpoint(folder / "model.ckpt", lstm_variables() | variables)
    elif kind == "unknown tensor":
        variables = lstm_variables()
        variables[cell_scope("lstm", 0, 0, False, LSTM) + "/projection/kernel"] = np.ones((4, 2), np.float32)
        index = write_checkpoint(folder / "model.ckpt", variables)
    return index


DAMAGED = {
    "index truncated": "is not a readable TensorFlow checkpoint",
    "index scrambled": "is not a readable TensorFlow checkpoint",
    "data missing": "has no data file (model.ckpt.data-00000-of-00001 is missing",
    "data truncated": "more than its data files hold",
    "data corrupted": "does not match its crc32c (damaged); nothing was written",
    "integer kernel": "its tensors are of types float32, int32",
    "wrong shape": "has shape [7, 16], but an input of 4 and a recurrent input of 4 need [8, n]",
    "bias missing": "bias is missing",
    "layer missing": "less layer 1 (its parameters stop short",
    "layer numbered absurdly": "more than the 1024 layers an RNN may have",
    "unknown tensor": "which no tf.contrib.cudnn_rnn layer saves",
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_damaged_checkpoints_give_one_sentence(kind, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    index = _damaged(kind, inputs)
    result = run_cli("tf1-to-cudnn", index, "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, DAMAGED[kind])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


@pytest.mark.slow
def test_a_missing_checkpoint_and_a_foreign_index_are_refused(tmp_path):
    assert_clean_failure(run_cli("tf1-to-cudnn", tmp_path / "nothing.ckpt"), 2, "does not exist")
    foreign = tmp_path / "table.index"
    foreign.write_bytes(bytes(range(256)))
    assert_clean_failure(run_cli("inspect", foreign), 2, "(TF1 checkpoint by its name) is not a readable")


@pytest.mark.slow
def test_reading_imports_no_framework(tmp_path):
    assert registry.detect(TF1 / "gru_bi.ckpt.index").name == "tf1"
    assert_no_framework_imported(TF1 / "gru_bi.ckpt.index", tmp_path / "out.bin")


@pytest.mark.slow
def test_checkpoints_need_no_tensorflow_and_verify_exits_3(tmp_path):
    """Without TensorFlow: a checkpoint inspects and converts to the same blob; verify against it exits 3."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "tensorflow.py").write_text("raise ImportError('no tensorflow here')\n")
    no_tf = {"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    result = run_cli("tf1-to-cudnn", TF1 / "lstm2.ckpt", "-o", tmp_path / "a.bin", env=no_tf)
    assert result.returncode == 0, result.stderr
    assert run_cli("tf1-to-cudnn", TF1 / "lstm2.ckpt", "-o", tmp_path / "b.bin").returncode == 0
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    listed = run_cli("inspect", TF1 / "seq2seq.ckpt", "--json", env=no_tf)
    assert [r["name"] for r in json.loads(listed.stdout)["rnns"]] == ["decoder/cudnn_gru", "encoder/cudnn_lstm"]
    result = run_cli("verify", tmp_path / "a.bin", "--backend", "numpy", env=no_tf)
    assert_clean_failure(result, 3, "needs TensorFlow", "pip install 'rnnconv[keras]'")


@pytest.mark.parametrize("kind,dtype", [("unknown tensor", "float32"), ("integer kernel", None)])
def test_inspect_shows_the_sizes_of_a_layer_that_does_not_convert(kind, dtype, tmp_path):
    index = _damaged(kind, tmp_path)
    report = json.loads(run_cli("inspect", index, "--json").stdout)
    (rnn,) = report["rnns"]
    assert rnn["class"] == "CudnnLSTM" and not rnn["converts"] and DAMAGED[kind] in rnn["reason"]
    sizes = rnn["sizes"]
    assert (sizes["input_size"], sizes["hidden_size"], sizes["num_layers"], sizes.get("dtype")) == (5, 4, 1, dtype)
