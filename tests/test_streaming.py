"""Streaming models (`--streaming`): written from PyTorch and Keras two-layer stacks (I != H, distinct random weights),
run a chunk at a time in each format's own runtimes (onnxruntime; LiteRT and TFLite Micro; TensorFlow.js under
Node.js), the states carried from call to call by verify from non-zero initial states, against the source run on the
whole sequence."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, doc_code, fresh_cli, needs_tfjs, run_cli

import rnnconv
from rnnconv.errors import BackendMissing
from rnnconv.formats import _node
from rnnconv.formats.streaming import STATE_INPUT

pytest.importorskip("onnxruntime")
pytest.importorskip("ai_edge_litert")

STACKS = FIXTURES / "streaming"
SOURCES = {  # (file, --layer): two layers each, input 5 and hidden 7 (PyTorch), 5 -> 6, 6 -> 4, 4 -> 3 (Keras)
    "torch lstm": (STACKS / "stacks.pt", "lstm"),
    "torch gru": (STACKS / "stacks.pt", "gru"),
    "torch rnn": (STACKS / "stacks.pt", "rnn"),
    "keras lstm": (STACKS / "stacks.keras", "lstm_a,lstm_b"),
    "keras gru": (STACKS / "stacks.keras", "gru_a,gru_b"),
    "keras relu rnn": (STACKS / "stacks.keras", "rnn_a,rnn_b"),
}
LIMIT = 1e-5  # float32 runtimes against their sources
# TensorFlow.js has no reset-after GRU (cuDNN's, which every GRU rnnconv reads is): its sources are the others, and one
# layer of a stack alone
TFJS_SOURCES = {name: source for name, source in SOURCES.items() if "gru" not in name}
TFJS_SOURCES["keras lstm, one layer"] = (STACKS / "stacks.keras", "lstm_a")


def _matches(report, chunks: list[int]) -> None:
    assert report.verdict == "match", report.summary
    assert [c.check for c in report.checks] == [f"chunks of {n} step(s)" for n in chunks]
    assert all(c.ok for c in report.checks)
    assert report.comparison.worst <= LIMIT, report.comparison.worst
    assert report.inputs.state_distribution.startswith("normal(0, 0.5)")  # non-zero initial states


@pytest.mark.parametrize("name", SOURCES)
def test_a_streaming_onnx_model_fed_in_chunks_of_1_3_and_7_steps_matches_its_source(name, tmp_path):
    source, layer = SOURCES[name]
    out = tmp_path / "stream.onnx"
    rnnconv.convert(source, out, layer=layer, streaming=True)
    _matches(rnnconv.verify(out, streaming=True), [1, 3, 7])


@pytest.mark.parametrize("name", SOURCES)
def test_a_streaming_tflite_model_matches_its_source_in_litert_and_tflite_micro(name, tmp_path):
    pytest.importorskip("tflite_micro")
    source, layer = SOURCES[name]
    for chunk in (1, 3, 7):
        out = tmp_path / f"stream{chunk}.tflite"
        rnnconv.convert(source, out, layer=layer, streaming=True, chunk=chunk)
        for runtime in ("litert", "tflite-micro"):
            report = rnnconv.verify(out, streaming=True, stream_runtime=runtime)
            _matches(report, [chunk])
            assert report.backend.name == runtime


@needs_tfjs
@pytest.mark.parametrize("name", TFJS_SOURCES)
def test_a_streaming_tensorflow_js_model_fed_in_chunks_of_1_3_and_7_steps_matches_its_source(name, tmp_path):
    """One Node.js process runs every call of the three chunk sizes."""
    source, layer = TFJS_SOURCES[name]
    out = tmp_path / "model.json"
    rnnconv.convert(source, out, layer=layer, streaming=True)
    report = rnnconv.verify(out, streaming=True)
    _matches(report, [1, 3, 7])
    assert report.backend.name == "tfjs" and report.backend.detail.startswith("@tensorflow/tfjs"), report.backend
    LARGEST_ERRORS[f"tfjs streaming {name}"] = report.comparison.worst


def _miswired_onnx(path):
    """The model with layer 1 started from layer 0's h input instead of its own."""
    import onnx

    model = onnx.load(path)
    (node,) = [n for n in model.graph.node if n.op_type == "Unsqueeze" and n.input[0] == "h_l1"]
    node.input[0] = "h_l0"
    onnx.save(model, path)


def _miswired_tflite(path):
    """The model with layer 1's first step fed layer 0's h input instead of its own (through TFLite's schema)."""

    def miswired(model):
        (graph,) = model.subgraphs
        names = [t.name.decode() for t in graph.tensors]
        own, other = names.index(STATE_INPUT.format(state="h", layer=1)), names.index("h_l0")
        for op in graph.operators:
            op.inputs = [other if t == own else t for t in op.inputs]

    _rewritten(path, miswired)


def _miswired_tfjs(path):
    """The model with layer 1 started from layer 0's h input instead of its own (its inbound tensors in model.json)."""
    document = json.loads(path.read_text())
    (layer,) = [e for e in document["modelTopology"]["config"]["layers"] if e["name"] == "rnn_layer1"]
    (call,) = layer["inbound_nodes"]
    assert call[1][0] == STATE_INPUT.format(state="h", layer=1)
    call[1][0] = "h_l0"
    path.write_text(json.dumps(document))


MISWIRED = {  # target -> (output name, layer, its change); a GRU where the target holds one
    "onnx": ("stream.onnx", "gru", _miswired_onnx),
    "tflite": ("stream.tflite", "gru", _miswired_tflite),
    "tfjs": ("model.json", "lstm", _miswired_tfjs),
}


@pytest.mark.parametrize("target", [pytest.param(t, marks=needs_tfjs) if t == "tfjs" else t for t in MISWIRED])
def test_a_streaming_model_with_a_state_input_miswired_is_a_mismatch(target, tmp_path):
    name, layer, miswire = MISWIRED[target]
    out = tmp_path / name
    rnnconv.convert(
        STACKS / "stacks.pt", out, layer=layer, streaming=True, **({"chunk": 3} if target == "tflite" else {})
    )
    miswire(out)
    result = run_cli("verify", out, "--streaming", "--no-diagnose")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


@pytest.mark.parametrize("target", [pytest.param(t, marks=needs_tfjs) if t == "tfjs" else t for t in ("onnx", "tfjs")])
def test_verify_without_streaming_runs_a_streaming_model_as_wired(target, tmp_path):
    """Without --streaming, verify ran a streaming model's layers from the states it gave them, not as the file wires
    them: a state input wired to the wrong layer was a MATCH. It runs the file as written, a sequence a call."""
    name, layer, miswire = MISWIRED[target]
    out = tmp_path / name
    rnnconv.convert(STACKS / "stacks.pt", out, layer=layer, streaming=True)
    result = run_cli("verify", out, "--no-diagnose")
    assert result.returncode == 0 and "the streaming model as written" in result.stdout, result.stdout + result.stderr
    miswire(out)
    result = run_cli("verify", out, "--no-diagnose")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


@pytest.mark.parametrize("output", ["x.onnx", "model.json"])
def test_a_bidirectional_rnn_is_refused_naming_its_reverse_direction(output, tmp_path):
    result = run_cli(
        "convert", FIXTURES / "torch" / "seq2seq.pt", tmp_path / output, "--layer", "encoder.rnn", "--streaming"
    )
    assert_clean_failure(result, 2, "bidirectional and cannot stream", "reverse direction")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("source, layer", [("stacks.pt", "gru"), ("stacks.keras", "gru_a,gru_b")])
def test_a_gru_streams_as_onnx_but_is_refused_as_tensorflow_js(source, layer, tmp_path):
    """cuDNN's GRU (reset after), what every GRU rnnconv reads is: TensorFlow.js's GRUCell has no reset_after."""
    result = run_cli("convert", STACKS / source, tmp_path / "model.json", "--layer", layer, "--streaming")
    assert_clean_failure(result, 2, "reset_after=True")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["x.bin", "--streaming"], "cuDNN has no streaming form"),
        (["x.onnx", "--streaming", "--chunk", "3"], "takes chunks of any length"),
        (["model.json", "--streaming", "--chunk", "3"], "a streaming TensorFlow.js model takes chunks of any length"),
        (["x.tflite", "--chunk", "3"], "give it with --streaming"),
        (["x.tflite", "--streaming", "--chunk", "0"], "--chunk must be between 1 and"),
    ],
)
def test_streaming_options_a_target_cannot_take_are_refused(args, phrase, tmp_path):
    result = run_cli("convert", STACKS / "stacks.pt", "--layer", "gru", "-o", tmp_path / args[0], *args[1:])
    assert_clean_failure(result, 2, phrase)


def test_verify_streaming_says_what_it_cannot_run(tmp_path):
    plain = tmp_path / "plain.tflite"
    rnnconv.convert(STACKS / "stacks.pt", plain, layer="lstm")
    assert_clean_failure(run_cli("verify", plain, "--streaming"), 2, "is no streaming model")
    stream = tmp_path / "stream.tflite"
    rnnconv.convert(STACKS / "stacks.pt", stream, layer="lstm", streaming=True)
    assert_clean_failure(run_cli("verify", stream), 2, "verify it with --streaming")
    assert_clean_failure(run_cli("verify", stream, "--streaming", "--stream-runtime", "onnxruntime"), 2, "litert or")
    assert_clean_failure(run_cli("verify", stream, "--stream-runtime", "litert"), 2, "give it with --streaming")


@needs_tfjs
@pytest.mark.parametrize(
    "output, given, phrase",
    [
        ("y", "c_l0", "gives y of shape (3, 7) for 1 step(s) of a batch of 3, not (3, 1, size)"),
        ("h_l1_next", "rnn_layer1", "gives h_l1_next of shape (3, 1, 7), not (3, 7), the shape of the state it took"),
    ],
)
def test_a_streaming_model_whose_outputs_are_not_its_shapes_is_refused(output, given, phrase, tmp_path):
    """An output wired to the wrong tensor (the fuzzer's): one sentence, not an internal error carrying it."""
    out = tmp_path / "model.json"
    rnnconv.convert(STACKS / "stacks.pt", out, layer="lstm", streaming=True)
    document = json.loads(out.read_text())
    (layer,) = [e for e in document["modelTopology"]["config"]["layers"] if e["name"] == output]
    layer["inbound_nodes"] = [[[given, 0, 0, {}]]]
    out.write_text(json.dumps(document))
    assert_clean_failure(run_cli("verify", out, "--streaming", "--seq-len", "6"), 2, phrase)


def test_verify_streaming_of_a_tensorflow_js_model_says_what_it_cannot_run(tmp_path):
    """A model.json that is no streaming model is refused from its topology (no Node.js started); without
    @tensorflow/tfjs, exit 3 saying how to install it."""
    rnnconv.convert(STACKS / "stacks.pt", tmp_path / "plain.json", layer="lstm", to="tfjs")
    result = run_cli("verify", tmp_path / "plain.json", "--streaming")
    assert_clean_failure(result, 2, "is no streaming model (inputs none named, outputs none named")
    rnnconv.convert(STACKS / "stacks.pt", tmp_path / "model.json", layer="lstm", streaming=True)
    env = {**os.environ, _node.NODE_MODULES_VARIABLE: str(tmp_path / "nowhere")}
    assert_clean_failure(
        run_cli("verify", tmp_path / "model.json", "--streaming", env=env), 3, "@tensorflow/tfjs", "npm ci"
    )
    result = run_cli("verify", tmp_path / "model.json", "--streaming", "--stream-runtime", "litert")
    assert_clean_failure(result, 2, "runs in tfjs, not 'litert'")


def test_a_streaming_tensorflow_js_model_reads_back_as_its_rnn(tmp_path):
    """Its layers take their states from the model's inputs (extra inbound tensors): still one RNN, the source's
    weights exactly."""
    out = tmp_path / "model.json"
    rnnconv.convert(STACKS / "stacks.pt", out, layer="lstm", streaming=True)
    assert rnnconv.inspect(out).rnns[0].name == "rnn_layer0,rnn_layer1"
    rnnconv.convert(out, tmp_path / "back.pt", layer="rnn_layer0,rnn_layer1")
    with rnnconv.load(tmp_path / "back.pt") as (back,), rnnconv.load(STACKS / "stacks.pt", layer="lstm") as (source,):
        assert back.spec.num_layers == 2
        got, expected = back.arrays(), source.arrays()
        assert got.keys() == expected.keys()
        for key in got:  # the matrices exactly; TensorFlow.js's one bias is the sum of the two
            if key.kind in ("W", "R"):
                assert np.array_equal(got[key], expected[key]), key.label
            elif key.kind == "bW":
                bias = key.layer, key.direction, "bR", key.gate
                assert np.array_equal(got[key] + got[type(key)(*bias)], expected[key] + expected[type(key)(*bias)])
    document = json.loads(out.read_text())  # layer 1 started from layer 0's final states: two RNNs, as it was
    (layer,) = [e for e in document["modelTopology"]["config"]["layers"] if e["name"] == "rnn_layer1"]
    layer["inbound_nodes"][0][1:] = [["rnn_layer0", 0, 1, {}], ["rnn_layer0", 0, 2, {}]]
    out.write_text(json.dumps(document))
    assert [e.name for e in rnnconv.inspect(out).rnns] == ["rnn_layer0", "rnn_layer1"]


def test_tflite_micro_missing_is_exit_3_naming_the_extra(tmp_path, monkeypatch):
    stream = tmp_path / "stream.tflite"
    rnnconv.convert(STACKS / "stacks.pt", stream, layer="rnn", streaming=True)
    for module in [m for m in sys.modules if m.startswith("tflite_micro")] + ["tflite_micro"]:
        monkeypatch.setitem(sys.modules, module, None)  # an import of it fails, as where it is not installed
    with pytest.raises(BackendMissing, match=r"rnnconv\[tflite-micro\]"):
        rnnconv.verify(stream, streaming=True, stream_runtime="tflite-micro")


def test_the_written_onnx_streaming_model_takes_the_documented_names(tmp_path):
    import onnxruntime

    out = tmp_path / "stream.onnx"
    rnnconv.convert(STACKS / "stacks.pt", out, layer="lstm", streaming=True)
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x", "h_l0", "c_l0", "h_l1", "c_l1"]
    assert [o.name for o in session.get_outputs()] == ["y", "h_l0_next", "c_l0_next", "h_l1_next", "c_l1_next"]
    states = {i.name: np.zeros((2, 7), np.float32) for i in session.get_inputs()[1:]}
    for steps in (1, 4):  # any chunk length, one session
        (y, *_) = session.run(None, {"x": np.zeros((2, steps, 5), np.float32), **states})
        assert y.shape == (2, steps, 7)


@pytest.mark.parametrize("layer", ["lstm", "gru", "rnn"])
def test_a_streaming_onnx_model_takes_every_consumer_s_form(layer, tmp_path):
    """Every node input named (no '' for sequence_lens, which onnxruntime-web refuses), B given: within each
    consumer's documented limits, as `inspect --profile` checks them and `convert --profile` writes."""
    import onnx

    out = tmp_path / "stream.onnx"
    rnnconv.convert(STACKS / "stacks.pt", out, layer=layer, streaming=True)
    nodes = [n for n in onnx.load(out).graph.node if n.op_type == layer.upper()]
    assert len(nodes) == 2 and all(n.input[:4] and "" not in n.input for n in nodes)
    assert all(n.input[3].startswith("B_") and n.input[4] == "sequence_lens" for n in nodes)
    for profile in ("tensorrt", "mnn", "ort-web"):
        report = rnnconv.inspect(out, profile=profile)
        assert report.broken_limits == [], (profile, report.broken_limits)
    result = run_cli(
        "convert", STACKS / "stacks.pt", tmp_path / "web.onnx", "--layer", layer, "--streaming", "--profile", "ort-web"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert rnnconv.verify(tmp_path / "web.onnx", streaming=True).verdict == "match"


def test_verify_streaming_refuses_a_backend_and_an_audit_it_would_not_run(tmp_path):
    """A streaming model runs in its own runtime (--stream-runtime names another): --backend is refused, not ignored
    (a report that said MATCH for a backend that never ran would be false), and so is the audit's pairing."""
    out = tmp_path / "stream.onnx"
    rnnconv.convert(STACKS / "stacks.pt", out, layer="gru", streaming=True)
    assert_clean_failure(run_cli("verify", out, "--streaming", "--backend", "mnn"), 2, "leave out --backend")
    audit = ["--against", STACKS / "stacks.pt", "--layer", "layer0,layer1=gru"]  # pairs: the audit of a whole model
    assert_clean_failure(run_cli("verify", out, "--streaming", *audit), 2, "--streaming is for one RNN")


def test_the_streaming_page_s_example_runs_and_gives_the_whole_sequence_s_outputs(tmp_path, monkeypatch, capsys):
    import torch

    rnnconv.convert(STACKS / "stacks.pt", tmp_path / "stream.onnx", layer="lstm", streaming=True)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(doc_code("docs/streaming.md"), scope)
    assert capsys.readouterr().out.strip() == "(1, 20, 7)"
    lstm = torch.nn.LSTM(5, 7, num_layers=2, batch_first=True)
    lstm.load_state_dict({k[len("lstm.") :]: v for k, v in torch.load(STACKS / "stacks.pt").items() if "lstm" in k})
    with torch.no_grad():
        whole, _ = lstm(torch.from_numpy(scope["frames"]))
    assert np.abs(np.concatenate(scope["ys"], axis=1) - whole.numpy()).max() <= LIMIT


@needs_tfjs
def test_the_streaming_page_s_tensorflow_js_example_runs_in_node(tmp_path):
    rnnconv.convert(STACKS / "stacks.pt", tmp_path / "model.json", layer="lstm", streaming=True)
    (tmp_path / "example.cjs").write_text(doc_code("docs/streaming.md", "javascript"))
    env = {**os.environ, "NODE_PATH": str(_node.node_modules())}  # where require finds @tensorflow/tfjs
    done = subprocess.run(
        [_node.node(), "example.cjs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[ 1, 20, 7 ]"


def test_an_lstm_with_a_projection_streams_as_tflite_and_is_refused_as_onnx(tmp_path):
    pytest.importorskip("tflite_micro")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(5, 8, num_layers=2, proj_size=3).state_dict(), tmp_path / "proj.pt")
    rnnconv.convert(tmp_path / "proj.pt", tmp_path / "proj.tflite", streaming=True, chunk=3)
    for runtime in ("litert", "tflite-micro"):
        _matches(rnnconv.verify(tmp_path / "proj.tflite", streaming=True, stream_runtime=runtime), [3])
    result = run_cli("convert", tmp_path / "proj.pt", tmp_path / "proj.onnx", "--streaming")
    assert_clean_failure(result, 2, "no projection")


def _rewritten(path, change):
    """The .tflite with `change` made to its model, through TFLite's schema."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    change(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))


def _more_parts(model):
    (graph,) = model.subgraphs
    op = next(op for op in graph.operators if op.builtinOptions is not None and hasattr(op.builtinOptions, "numSplits"))
    op.builtinOptions.numSplits = 13508


def _more_inputs(model):
    (graph,) = model.subgraphs
    add = next(i for i, code in enumerate(model.operatorCodes) if code.builtinCode == 0)  # BuiltinOperator.ADD
    op = next(op for op in graph.operators if op.opcodeIndex == add)
    op.inputs = [1] * 5000


@pytest.mark.parametrize(
    "change, runtime, phrase",
    [
        (_more_parts, "litert", "says 13508 parts along axis 1, but has 3"),
        (_more_inputs, "tflite-micro", "has 5000 inputs and 1 outputs, not what that op takes"),
    ],
    ids=["a SPLIT's count, in LiteRT", "an ADD's inputs, in TFLite Micro"],
)
def test_a_streaming_tflite_whose_ops_a_runtime_would_trust_is_refused_not_run(change, runtime, phrase, tmp_path):
    """The runtimes trust an op's counts: a SPLIT into more parts than it has outputs crashed LiteRT, an ADD of 5000
    inputs TFLite Micro (the fuzzer found them)."""
    if runtime == "tflite-micro":
        pytest.importorskip("tflite_micro")
    out = tmp_path / "stream.tflite"
    rnnconv.convert(STACKS / "stacks.pt", out, layer="gru", streaming=True, chunk=3)
    _rewritten(out, change)
    result = fresh_cli("verify", out, "--streaming", "--stream-runtime", runtime)  # a crash takes its interpreter only
    assert_clean_failure(result, 2, phrase)


@pytest.mark.parametrize(
    "said, reason",
    [
        (
            "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 onnxruntime::Model::"
            "Model(onnx::ModelProto&&, const onnxruntime::PathString&) Unsupported model IR version: 99, max supported",
            "Unsupported model IR version: 99, max supported",
        ),
        (
            "[ONNXRuntimeError] : 1 : FAIL : Node () Op (Squeeze) /onnxruntime_src/onnxruntime/core/graph/"
            "graph.cc:2828 virtual const onnx::TensorProto* "
            "onnxruntime::InferenceContextImpl::getInputData(size_t) const "
            "[ONNXRuntimeError] : 1 : FAIL : tensorprotoutils.cc:1730 ValidateEmbeddedTensorProtoDataSizeAndShape "
            "Initializer 'direction_axis': raw_data size (21 bytes) does not match",
            "Initializer 'direction_axis': raw_data size (21 bytes) does not match",
        ),
        ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions", "Got invalid dimensions"),
    ],
    ids=["a place", "places nested (the fuzzer's)", "no place"],
)
def test_onnxruntime_s_refusal_is_said_without_where_in_its_source(said, reason):
    from rnnconv.formats.onnx.runner import onnxruntime_reason

    assert onnxruntime_reason(RuntimeError(said)) == reason


def test_a_streaming_tflite_on_which_tflite_micro_aborts_is_refused_in_a_sentence():
    """`fixtures/tflite/streaming_gru_micro_aborts.tflite`: a streaming GRU rnnconv wrote, damaged by the streaming
    fuzz family, that passes rnnconv's checks and on which TFLite Micro's kernels abort the process (SIGABRT in
    invoke): one call on zeros runs in a child first, so verify says so instead of dying with the signal."""
    pytest.importorskip("tflite_micro")
    damaged = FIXTURES / "tflite" / "streaming_gru_micro_aborts.tflite"
    result = fresh_cli("verify", damaged, "--streaming", "--stream-runtime", "tflite-micro", "--seq-len", "6")
    assert_clean_failure(result, 2, "TFLite Micro's interpreter stopped its process on this model (signal 6)")
