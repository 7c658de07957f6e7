"""ONNX that every consumer takes: rnnconv's written files run in onnxruntime and in MNN (its own converter and CPU
runtime) as their source computes; `--profile` names what TensorRT, MNN or onnxruntime-web would refuse of a file."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import FIXTURES, assert_clean_failure, run_cli

from rnnconv.formats.onnx.mnn import run_in_mnn

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
INPUT, HIDDEN, STEPS, BATCH = 3, 5, 7, 2
needs_mnn = pytest.mark.skipif(importlib.util.find_spec("_tools") is None, reason="mnn is not installed")


def torch_source(tmp_path, cls, layers, bidirectional):
    torch.manual_seed(layers * 10 + bidirectional)
    module = cls(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional)
    with torch.no_grad():  # distinct values per gate and direction, biases far from zero
        for parameter in module.parameters():
            parameter.uniform_(-0.6, 0.6)
    torch.save(module.state_dict(), tmp_path / "source.pt")
    return module


@needs_mnn
@pytest.mark.parametrize(
    ("cls", "layers", "bidirectional"),
    [("LSTM", 2, True), ("GRU", 2, False), ("RNN", 1, True)],  # one MNN run each: ~0.5 s
)
def test_written_onnx_runs_in_onnxruntime_and_mnn_as_its_source(tmp_path, cls, layers, bidirectional):
    from facts.onnx import ort_run

    module = torch_source(tmp_path, getattr(torch.nn, cls), layers, bidirectional)
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "m.onnx").returncode == 0
    rng = np.random.default_rng(3)
    depth = layers * (1 + bidirectional)
    x = rng.normal(size=(STEPS, BATCH, INPUT)).astype(np.float32)
    h0, c0 = (rng.normal(size=(depth, BATCH, HIDDEN)).astype(np.float32) for _ in range(2))
    lstm = cls == "LSTM"
    with torch.no_grad():
        states = (torch.from_numpy(h0), torch.from_numpy(c0)) if lstm else torch.from_numpy(h0)
        y, last = module(torch.from_numpy(x), states)
    want = [y.numpy(), *(t.numpy() for t in (last if lstm else (last,)))]
    feeds = {"X": x, "initial_h": h0} | ({"initial_c": c0} if lstm else {})
    names = ["Y", "Y_h", "Y_c"][: len(want)]
    by_ort = ort_run(tmp_path / "m.onnx", x, h0, c0 if lstm else None)
    by_mnn = run_in_mnn((tmp_path / "m.onnx").read_bytes(), feeds, names)
    for name, expected, ran in zip(names, want, by_ort):
        assert np.abs(ran - expected).max() <= 1e-5, ("onnxruntime", name)
        assert np.abs(by_mnn[name] - expected).max() <= 1e-5, ("MNN", name)


@needs_mnn
def test_mnn_refusing_a_file_is_one_sentence(tmp_path):
    from rnnconv.errors import BadInput

    feeds = {"X": np.zeros((2, 1, INPUT), np.float32)}
    with pytest.raises(BadInput, match="MNN was not given an ONNX model"):
        run_in_mnn(b"\x08\x07not an onnx model", feeds, ["Y"])
    torch_source(tmp_path, torch.nn.RNN, 1, False)
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "m.onnx").returncode == 0
    model = onnx.load(tmp_path / "m.onnx")
    model.graph.node[-1].op_type = "Frobnicate"  # an op MNN's converter does not know
    with pytest.raises(BadInput, match=r"^MNN's converter refused the model: These Op Not Support: ONNX::Frobnicate$"):
        run_in_mnn(model.SerializeToString(), feeds | {"initial_h": np.zeros((1, 1, HIDDEN), np.float32)}, ["Y"])


@pytest.mark.parametrize(
    ("source", "profile", "code", "phrase"),
    [
        (FIXTURES / "onnx" / "lstm_bi_dynamo.onnx", "tensorrt", 0, "keeps tensorrt's documented limits"),
        (FIXTURES / "onnx" / "gru3_bi_torchscript.onnx", "mnn", 0, "keeps mnn's documented limits"),
        (FIXTURES / "onnx" / "lstm_bi_dynamo.onnx", "ort-web", 1, "node 'node_lstm__2': no input may be named ''"),
        (FIXTURES / "onnx" / "gru3_bi_torchscript.onnx", "ort-web", 1, "node '/GRU_2': no input may be named ''"),
        (FIXTURES / "onnx" / "lstm_quantized.onnx", "mnn", 1, "node '/LSTM_quant': the RNN must be ONNX's own op"),
    ],
)
def test_inspect_profile_names_what_each_exporters_file_breaks(source, profile, code, phrase):
    result = run_cli("inspect", source, "--profile", profile)
    assert result.returncode == code, result.stdout + result.stderr
    assert phrase in " ".join(result.stdout.split())


def test_rnnconv_s_onnx_keeps_every_profile_and_a_hand_made_node_breaks_tensorrt_s(tmp_path):
    torch_source(tmp_path, torch.nn.LSTM, 2, True)
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "m.onnx").returncode == 0
    for profile in ("tensorrt", "mnn", "ort-web"):
        result = run_cli("inspect", tmp_path / "m.onnx", "--profile", profile, "--json")
        assert result.returncode == 0 and '"broken_limits": []' in result.stdout, (profile, result.stdout)
    model = onnx.load(tmp_path / "m.onnx")
    for node in model.graph.node:
        if node.op_type == "LSTM":
            node.attribute.append(onnx.helper.make_attribute("clip", 3.0))
            for attribute in node.attribute:
                if attribute.name == "input_forget":
                    attribute.i = 1
    onnx.save(model, tmp_path / "forgets.onnx")
    result = run_cli("inspect", tmp_path / "forgets.onnx", "--profile", "tensorrt")
    text = " ".join(result.stdout.split())
    assert result.returncode == 1 and "node 'layer0': input_forget must be 0 for tensorrt" in text
    result = run_cli("inspect", tmp_path / "forgets.onnx", "--profile", "mnn")
    assert result.returncode == 1 and "clip must not be set" in " ".join(result.stdout.split())


def test_convert_profile_refuses_what_the_consumer_cannot_take(tmp_path):
    torch_source(tmp_path, torch.nn.GRU, 1, False)
    out = tmp_path / "m.onnx"
    result = run_cli("convert", tmp_path / "source.pt", out, "--dtype", "float64", "--profile", "tensorrt")
    assert_clean_failure(result, 2, "cannot be written within tensorrt's limits", "float32, float16 or bfloat16")
    assert not out.exists()
    result = run_cli("convert", tmp_path / "source.pt", tmp_path / "m.bin", "--profile", "mnn")
    assert_clean_failure(result, 2, "--profile is for ONNX files, and the output is cuDNN")
    assert run_cli("convert", tmp_path / "source.pt", out, "--profile", "mnn").returncode == 0


@needs_mnn
def test_verify_backend_mnn_runs_the_written_file_in_mnn(tmp_path):
    import json

    torch_source(tmp_path, torch.nn.LSTM, 1, False)
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "m.onnx").returncode == 0
    result = run_cli("verify", tmp_path / "m.onnx", "--backend", "mnn", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["verdict"] == "match", result.stdout + result.stderr
    assert report["backend"]["name"] == "mnn" and "MNN's converter" in report["backend"]["detail"]
    assert max(report["comparison"][k]["max_abs"] for k in ("y", "h_n", "c_n")) <= 1e-5 and "mnn" in report["versions"]
    assert_clean_failure(run_cli("verify", tmp_path / "m.onnx", "--backend", "mnn", "--ragged"), 2, "sequence_lens")


def test_verify_backend_mnn_without_mnn_names_the_extra(tmp_path, monkeypatch):
    import rnnconv
    from rnnconv.errors import BackendMissing
    from rnnconv.formats.onnx import mnn

    torch_source(tmp_path, torch.nn.GRU, 1, True)
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "m.onnx").returncode == 0
    monkeypatch.setattr(mnn, "mnn_version", lambda: None)
    with pytest.raises(BackendMissing, match=r"pip install 'rnnconv\[mnn\]'"):
        rnnconv.verify(tmp_path / "m.onnx", backend="mnn")


TF2ONNX = FIXTURES / "tf2onnx"  # made by fixtures/make_tf2onnx_fixtures.py (tf2onnx 1.16.1, TensorFlow 2.15.1)
TF2ONNX_RNNS = ["lstm", "gru_reset_after", "lstm_bi", "lstm2", "lstm_states"]  # an ONNX LSTM or GRU op each


def rnn_nodes(path) -> list[str]:
    return [node.name for node in onnx.load(path).graph.node if node.op_type in ("LSTM", "GRU", "RNN")]


@pytest.mark.parametrize("name", TF2ONNX_RNNS)
def test_inspect_profile_on_tf2onnx_files_names_the_empty_sequence_lens_for_ort_web_only(name):
    import json

    path = TF2ONNX / f"{name}.onnx"
    for profile in ("tensorrt", "mnn"):
        result = run_cli("inspect", path, "--profile", profile, "--json")
        assert result.returncode == 0 and json.loads(result.stdout)["broken_limits"] == [], (profile, result.stdout)
    result = run_cli("inspect", path, "--profile", "ort-web", "--json")
    broken = json.loads(result.stdout)["broken_limits"]
    assert result.returncode == 1 and len(broken) == len(rnn_nodes(path)), broken
    for node, line in zip(rnn_nodes(path), broken):
        assert line.startswith(f"node {node!r}: no input may be named '' (left out) for ort-web"), line


@pytest.mark.parametrize("name", TF2ONNX_RNNS)
def test_tf2onnx_files_convert_to_torch_computing_what_onnxruntime_runs_of_the_whole_file(tmp_path, name):
    import json

    from facts.onnx import ort_session
    from facts.torch import torch_module_for, torch_outputs

    import rnnconv

    path, out = TF2ONNX / f"{name}.onnx", tmp_path / f"{name}.pt"
    assert run_cli("convert", path, out).returncode == 0
    with rnnconv.load(out) as (rnn,):
        spec = rnn.spec
    assert (spec.input_size, spec.hidden_size) == (INPUT, HIDDEN) and spec.num_layers == 1 + (name == "lstm2")
    module = torch_module_for(spec)
    module.load_state_dict(torch.load(out, weights_only=True))
    rng = np.random.default_rng(len(name))
    x = rng.normal(size=(BATCH, STEPS, INPUT)).astype(np.float32)  # as Keras takes it, batch-major
    depth = spec.num_layers * spec.num_directions
    h0, c0 = np.zeros((2, depth, BATCH, HIDDEN), np.float32)
    feeds = {"x": x}
    if name == "lstm_states":  # the model's own initial states, non-zero
        h0, c0 = rng.normal(size=(2, 1, BATCH, HIDDEN)).astype(np.float32)
        feeds |= {"h0": h0[0], "c0": c0[0]}
    by_ort = ort_session(path).run(None, feeds)
    if importlib.util.find_spec("_tools") is not None:  # MNN takes tf2onnx's form, as --profile mnn says
        names = [output.name for output in onnx.load(path).graph.output]
        by_mnn = run_in_mnn(path.read_bytes(), feeds, names)
        assert max(np.abs(by_mnn[n] - ran).max() for n, ran in zip(names, by_ort)) <= 1e-5
    y, h_n, c_n = torch_outputs(module, spec, np.ascontiguousarray(x.transpose(1, 0, 2)), h0, c0)
    assert np.abs(y.transpose(1, 0, 2) - by_ort[0]).max() <= 1e-5
    if name == "lstm_states":
        assert max(np.abs(h_n[0] - by_ort[1]).max(), np.abs(c_n[0] - by_ort[2]).max()) <= 1e-5
    result = run_cli("verify", out, "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["verdict"] == "match", result.stdout + result.stderr


def nested_lstm_model():
    """An LSTM (input_forget=1, sequence_lens the graph's input) in an If's then-branch inside a Loop's body: what a
    top-level check does not see."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weights = [
        numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)
        for name, shape in (("W", (1, 4 * HIDDEN, INPUT)), ("R", (1, 4 * HIDDEN, HIDDEN)), ("B", (1, 8 * HIDDEN)))
    ]
    lstm = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "lens"], ["Y"], name="lstm", hidden_size=HIDDEN, input_forget=1
    )
    y_info = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    then_branch = helper.make_graph([lstm], "then", [], [y_info])
    else_y = helper.make_node("ConstantOfShape", ["shape"], ["Y"], name="zeros")
    else_branch = helper.make_graph([else_y], "else", [], [y_info])
    branch = helper.make_node("If", ["cond"], ["Y_if"], name="branch", then_branch=then_branch, else_branch=else_branch)
    keep = helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")
    body = helper.make_graph(
        [branch, keep],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("Y_if", TensorProto.FLOAT, None),
        ],
    )
    loop = helper.make_node("Loop", ["trips", "cond"], ["Ys"], name="outer", body=body)
    graph = helper.make_graph(
        [loop],
        "nested",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [STEPS, BATCH, INPUT]),
            helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("Ys", TensorProto.FLOAT, None)],
        [*weights, helper.make_tensor("trips", TensorProto.INT64, [], [1])]
        + [helper.make_tensor("shape", TensorProto.INT64, [4], [STEPS, 1, BATCH, HIDDEN])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_profiles_check_rnn_nodes_inside_loop_and_if_bodies_naming_where_they_sit(tmp_path):
    onnx.save(nested_lstm_model(), tmp_path / "nested.onnx")
    where = "outer::body::branch::then_branch::lstm"
    result = run_cli("inspect", tmp_path / "nested.onnx", "--profile", "tensorrt")
    text = " ".join(result.stdout.split())
    assert result.returncode == 1 and f"node {where!r}: input_forget must be 0 for tensorrt" in text, text
    result = run_cli("inspect", tmp_path / "nested.onnx", "--profile", "mnn")
    text = " ".join(result.stdout.split())
    assert result.returncode == 1 and f"node {where!r}: sequence_lens must not be a graph input" in text, text
    assert "input_forget must be 0 for mnn" in text
    assert run_cli("inspect", tmp_path / "nested.onnx", "--profile", "ort-web").returncode == 0


@needs_mnn
def test_mnn_computes_tanh_for_a_relu_rnn_so_its_profile_and_verify_refuse_one(tmp_path):
    module = torch_source(tmp_path, lambda *a, **k: torch.nn.RNN(*a, nonlinearity="relu", **k), 1, True)
    args = ("--nonlinearity", "relu")
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "m.onnx", *args).returncode == 0
    rng = np.random.default_rng(4)
    x, h0 = rng.normal(size=(STEPS, BATCH, INPUT)), rng.normal(size=(2, BATCH, HIDDEN))
    x, h0 = x.astype(np.float32), h0.astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x), torch.from_numpy(h0))[0].numpy()
    by_mnn = run_in_mnn((tmp_path / "m.onnx").read_bytes(), {"X": x, "initial_h": h0}, ["Y"])["Y"]
    assert np.abs(by_mnn - want).max() > 0.1  # MNN 3.6.1 drops the RNN's Relu: what its profile says
    result = run_cli("inspect", tmp_path / "m.onnx", "--profile", "mnn")
    assert result.returncode == 1 and "activations must be ones MNN computes" in " ".join(result.stdout.split())
    result = run_cli("convert", tmp_path / "source.pt", tmp_path / "p.onnx", *args, "--profile", "mnn")
    assert_clean_failure(result, 2, "cannot be written within mnn's limits", "MNN computes tanh for an RNN")
    result = run_cli("verify", tmp_path / "m.onnx", "--backend", "mnn")
    assert_clean_failure(result, 2, "is not in the form MNN takes", "activations must be ones MNN computes")


@needs_mnn
@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_a_streaming_onnx_runs_in_mnn_as_in_onnxruntime(tmp_path, cls):
    from facts.onnx import ort_session

    torch_source(tmp_path, getattr(torch.nn, cls), 2, False)
    assert run_cli("convert", tmp_path / "source.pt", tmp_path / "s.onnx", "--streaming").returncode == 0
    model = onnx.load(tmp_path / "s.onnx")
    rng = np.random.default_rng(6)
    feeds = {"x": rng.normal(size=(BATCH, 3, INPUT)).astype(np.float32)}  # a chunk of 3 steps
    feeds |= {i.name: rng.normal(size=(BATCH, HIDDEN)).astype(np.float32) for i in model.graph.input[1:]}
    names = [output.name for output in model.graph.output]
    by_ort = ort_session(tmp_path / "s.onnx").run(None, feeds)
    by_mnn = run_in_mnn((tmp_path / "s.onnx").read_bytes(), feeds, names)
    assert len(names) == 1 + len(feeds) - 1
    for name, ran in zip(names, by_ort):
        assert np.abs(by_mnn[name] - ran).max() <= 1e-5, name


class _Counted(list):
    """A graph's or model's repeated field whose full reads are counted."""

    reads = 0

    def __iter__(self):
        type(self).reads += 1
        return super().__iter__()


def test_a_profile_reads_the_model_s_inputs_once_not_once_a_node():
    """`inspect --profile mnn` of 100,000 LSTM nodes sharing one set of weights took minutes: each node's checks read
    every graph input and initializer again (and the opsets), quadratic in the nodes."""
    from types import SimpleNamespace

    from onnx import TensorProto, helper, numpy_helper

    from rnnconv.formats.onnx.profile import broken

    weights = [numpy_helper.from_array(np.zeros((1, 16, d), np.float32), name) for name, d in (("W", 3), ("R", 4))]
    nodes = [helper.make_node("LSTM", [f"x{k}", "W", "R", "", f"n{k}"], [f"y{k}"], hidden_size=4) for k in range(300)]
    given = [helper.make_tensor_value_info(f"{v}{k}", TensorProto.FLOAT, [5, 1, 3]) for k in range(300) for v in "xn"]
    _Counted.reads = 0
    graph = SimpleNamespace(node=nodes, initializer=_Counted(weights), input=_Counted(given))
    model = SimpleNamespace(graph=graph, opset_import=_Counted([helper.make_opsetid("", 14)]))
    found = {item.limit.name for profile in ("mnn", "tensorrt") for item in broken(model, profile)}
    assert found == {"bias", "sequence-lens"}  # what this model breaks is still found, node by node
    assert _Counted.reads <= 12, _Counted.reads  # a few reads a profile, whatever the number of nodes
