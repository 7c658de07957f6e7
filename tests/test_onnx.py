"""ONNX: files the real exporters wrote become the blobs their checkpoints give; the ONNX rnnconv writes
runs in onnxruntime as the frameworks run theirs; what cuDNN cannot compute is refused in a sentence."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from conftest import (
    FIXTURES,
    LARGEST_ERRORS,
    assert_clean_failure,
    assert_no_framework_imported,
    largest_difference,
    run_cli,
)
from facts.onnx import ort_run, ort_session
from facts.torch import torch_outputs
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import rnnconv
import rnnconv.core.report_contracts
from rnnconv.core import reference
from rnnconv.core.canonical import ParamKey
from rnnconv.core.weightspace import regions
from rnnconv.formats.cudnn.reader import open_bin

ONNX = FIXTURES / "onnx"
# exported file -> the module prefix of the RNN in the checkpoint saved beside it
EXPORTS = {
    "tagger_lstm_torchscript": "rnn",
    "gru3_dynamo": None,
    "gru3_bi_torchscript": None,
    "lstm_bi_dynamo": None,
    "rnn_relu_torchscript": None,
    "lstm_external": None,
    "rnn_unrolled_dynamo": None,
    "rnn_stack_dynamo": None,
    "rnn_stack_torchscript": None,
}
REFUSED = {
    "gru_linear_before_reset_0": "linear_before_reset=0",
    "lstm_peepholes": "peephole weights (P)",
    "lstm_clip": "clips its cell state (clip=3.0)",
    "lstm_input_forget": "couples its input and forget gates",
    "lstm_relu": "cuDNN's LSTM can only compute tanh",
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_exported_onnx_gives_the_blob_its_checkpoint_gives(name, tmp_path):
    from_onnx, from_checkpoint = tmp_path / "onnx.bin", tmp_path / "pt.bin"
    rnnconv.convert(ONNX / f"{name}.onnx", from_onnx)
    rnnconv.convert(ONNX / f"{name}.pt", from_checkpoint, layer=EXPORTS[name])
    assert from_onnx.read_bytes() == from_checkpoint.read_bytes()


@pytest.mark.parametrize(
    "name, batch_first",
    [("gru3_dynamo", False), ("gru3_bi_torchscript", False), ("lstm_bi_dynamo", True)]
    + [("rnn_relu_torchscript", False), ("lstm_external", False)]
    + [("rnn_unrolled_dynamo", False), ("rnn_stack_dynamo", False), ("rnn_stack_torchscript", False)],
)
def test_blob_computes_what_the_exported_file_computes_in_onnxruntime(name, batch_first, tmp_path):
    """The whole exported graph, untouched, in onnxruntime (its states are the exporter's zeros)."""
    blob_path = tmp_path / "blob.bin"
    rnnconv.convert(ONNX / f"{name}.onnx", blob_path)
    blob = open_bin(blob_path)
    x = np.random.default_rng(3).normal(0, 0.8, (5, 2, blob.spec.input_size)).astype(np.float32)  # fixed shape
    feed = x.transpose(1, 0, 2) if batch_first else x
    expected = ort_session(ONNX / f"{name}.onnx").run(None, {"x": np.ascontiguousarray(feed)})
    if batch_first:
        expected[0] = expected[0].transpose(1, 0, 2)
    got = reference.forward(blob.spec, blob.param, x)
    worst = largest_difference(got, expected[: len(got)])
    LARGEST_ERRORS[f"onnxruntime exported {name}"] = worst
    assert worst < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, layer",
    [(name, None) for name in sorted(EXPORTS)] + [("hand_made", "gru_reverse"), ("hand_made", "lstm_batch_major")],
)
def test_verify_runs_the_onnx_nodes_with_states_and_ragged_lengths(name, layer, tmp_path):
    blob = tmp_path / "blob.bin"
    rnnconv.convert(ONNX / f"{name}.onnx", blob, layer=layer)
    for extra in ([], ["--ragged", "--batch", "4", "--seq-len", "9"]):
        result = run_cli("verify", blob, "--backend", "numpy", "--report", tmp_path / "r.json", "--force", *extra)
        assert result.returncode == 0, result.stderr
        assert "MATCH" in result.stdout
        report = rnnconv.core.report_contracts.Report.model_validate_json((tmp_path / "r.json").read_text())
        assert report.source.run.startswith("onnxruntime")


@pytest.mark.slow
def test_verify_catches_a_blob_that_is_wrong(tmp_path):
    blob = tmp_path / "blob.bin"
    rnnconv.convert(ONNX / "gru3_dynamo.onnx", blob)
    data = bytearray(blob.read_bytes())
    data[400:404] = np.float32(2.5).tobytes()  # one weight of the first layer, changed
    blob.write_bytes(bytes(data))
    result = run_cli("verify", blob, "--backend", "numpy")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("layer", sorted(REFUSED))
def test_what_cudnn_cannot_compute_is_refused(layer, tmp_path):
    result = run_cli("onnx-to-cudnn", ONNX / "hand_made.onnx", "--layer", layer, "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, REFUSED[layer])
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_inspect_lists_nodes_chains_and_reasons():
    result = run_cli("inspect", ONNX / "hand_made.onnx", "--json")
    assert result.returncode == 0, result.stderr
    report = rnnconv.core.contracts.InspectReport.model_validate_json(result.stdout)
    converts = {entry.name: entry.converts for entry in report.rnns}
    held_elsewhere = {"gru_linear_before_reset_0"}  # a reset-before GRU: refused for cuDNN, converts to ONNX and others
    assert converts == {"gru_reverse": True, "lstm_batch_major": True} | {
        name: name in held_elsewhere for name in REFUSED
    }
    chained = rnnconv.inspect(ONNX / "tagger_lstm_torchscript.onnx")
    assert [e.name for e in chained.rnns if e.converts and e.spec and e.spec.num_layers == 2] == [
        "/rnn/LSTM,/rnn/LSTM_1"
    ]


def _torch_cases():
    return [("seq2seq.pt", "encoder.rnn"), ("seq2seq.pt", "decoder.rnn"), ("rnn_relu.safetensors", None)] + [
        ("dataparallel_gru.pth", None),
        ("rnn_tanh.pt", None),
        ("gru_bf16.pt", None),
    ]


@pytest.mark.parametrize("checkpoint, layer", _torch_cases())
def test_cudnn_onnx_cudnn_is_identical(checkpoint, layer, tmp_path):
    first, onnx_file, back = tmp_path / "a.bin", tmp_path / "m.onnx", tmp_path / "b.bin"
    rnnconv.convert(FIXTURES / "torch" / checkpoint, first, layer=layer, dtype="float32")
    rnnconv.convert(first, onnx_file)
    rnnconv.convert(onnx_file, back)
    assert first.read_bytes() == back.read_bytes()


@pytest.mark.slow
def test_projection_has_no_onnx_form(tmp_path):
    result = run_cli("torch-to-onnx", FIXTURES / "torch" / "lstm_proj.pt", "-o", tmp_path / "m.onnx")
    assert_clean_failure(result, 2, "ONNX cannot hold", "ONNX's LSTM has no projection (h = W_hr h', proj_size=")
    assert "--allow-lossy" not in result.stderr  # nothing it could drop and still compute an LSTM
    result = run_cli("convert", FIXTURES / "torch" / "lstm_proj.pt", tmp_path / "m.onnx", "--allow-lossy")
    assert_clean_failure(result, 2, "even with --allow-lossy")
    assert not list(tmp_path.iterdir())


def _gru_model(tmp_path, weights_name: str = "W", **external):
    """A one-GRU model whose W is external data at `location` (the rest inline)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(1, 12, 3)).astype(np.float32), weights_name)
    r = numpy_helper.from_array(rng.normal(size=(1, 12, 4)).astype(np.float32), "R")
    if external:
        w.ClearField("raw_data")
        w.data_location = onnx.TensorProto.EXTERNAL
        for key, value in external.items():
            w.external_data.add(key=key, value=str(value))
    node = helper.make_node("GRU", ["X", weights_name, "R"], ["Y"], name="g", hidden_size=4, linear_before_reset=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["s", "b", 3])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["s", 1, "b", 4])],
        [w, r],
    )
    path = tmp_path / "model" / "g.onnx"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "external, phrase",
    [
        ({"location": "../secret.bin"}, "outside"),
        ({"location": "/etc/passwd"}, "outside"),
        ({"location": "missing.bin"}, "missing.bin"),
        ({"location": "w.bin", "length": 10**12}, "w.bin"),
        ({"location": "w.bin", "offset": -4}, "w.bin"),
    ],
)
def test_external_data_stays_in_the_model_folder_and_in_bounds(external, phrase, tmp_path):
    path = _gru_model(tmp_path, **external)
    (tmp_path / "secret.bin").write_bytes(np.zeros(36, np.float32).tobytes())
    (path.parent / "w.bin").write_bytes(np.zeros(36, np.float32).tobytes())
    result = run_cli("onnx-to-cudnn", path, "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, phrase)
    assert not (tmp_path / "out.bin").exists()


def test_external_data_in_the_folder_is_read(tmp_path):
    values = np.random.default_rng(0).normal(size=(1, 12, 3)).astype(np.float32)
    path = _gru_model(tmp_path, location="w.bin")
    (path.parent / "w.bin").write_bytes(values.tobytes())
    with rnnconv.load(path) as (rnn,):
        assert rnn.spec.hidden_size == 4
    rnnconv.convert(path, tmp_path / "out.bin")


@pytest.mark.slow
def test_several_rnns_need_a_choice_for_one_blob(tmp_path):
    result = run_cli("onnx-to-cudnn", ONNX / "hand_made.onnx", "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "--layer", "gru_reverse", "lstm_batch_major")


def test_the_two_exporters_give_one_rnn_the_same_blob(tmp_path):
    """torch.onnx.export(dynamo=True) writes nn.RNN as per-step MatMul/Add/Relu ops, the TorchScript exporter as
    RNN nodes: both files, and the checkpoint, give the same blob; inspect lists the unrolled layers and steps."""
    for name in ("rnn_stack_dynamo", "rnn_stack_torchscript"):
        rnnconv.convert(ONNX / f"{name}.onnx", tmp_path / f"{name}.bin")
    rnnconv.convert(ONNX / "rnn_stack_dynamo.pt", tmp_path / "pt.bin", nonlinearity="relu")
    blobs = {p.name: p.read_bytes() for p in tmp_path.glob("*.bin")}
    assert len(blobs) == 3 and len(set(blobs.values())) == 1
    report = rnnconv.inspect(ONNX / "rnn_stack_dynamo.onnx")
    (stack,) = [e for e in report.rnns if e.sizes.num_layers == 2]
    assert stack.converts and stack.layer_class == "RNN (unrolled, 5 steps)"
    assert (stack.spec.mode, stack.spec.bidirectional, stack.spec.input_size) == ("rnn_relu", True, 3)


def test_an_unrolled_rnn_whose_steps_differ_is_refused_naming_the_step(tmp_path):
    result = run_cli("onnx-to-cudnn", ONNX / "rnn_unrolled_step_apart.onnx", "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "look like an unrolled RNN", "step 3", "recurrent_of_step_3", "not one recurrent")
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.slow
def test_a_graph_with_no_recurrence_is_refused_pointing_at_the_checkpoint(tmp_path):
    """Per-step-looking ops that are no recurrence (a MatMul and a Tanh): nothing RNN-like, and said so."""
    rng = np.random.default_rng(8)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
        "mlp",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(rng.normal(size=(3, 4)).astype(np.float32), "w")],
    )
    path = tmp_path / "mlp.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    result = run_cli("onnx-to-cudnn", path, "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "holds no LSTM, GRU or RNN node", "MatMul", "convert the checkpoint")
    inspected = run_cli("inspect", path)
    assert inspected.returncode == 0 and "no recurrent layers found" in inspected.stdout


@pytest.mark.slow
def test_a_file_that_is_not_onnx_is_refused(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08" + bytes(range(256)) * 4)
    result = run_cli("onnx-to-cudnn", path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_reading_onnx_imports_no_framework(tmp_path):
    assert_no_framework_imported(ONNX / "gru3_dynamo.onnx", tmp_path / "out.bin", allowed=("onnx",))


@pytest.mark.parametrize(
    "source,layer", [(FIXTURES / "torch" / "seq2seq.pt", "encoder.rnn"), (FIXTURES / "torch" / "rnn_tanh.pt", None)]
)
def test_the_written_model_s_usage_names_its_real_inputs(source, layer, tmp_path):
    """The usage line feeds exactly the graph's inputs: X and every initial state (none has a default)."""
    result = rnnconv.convert(source, tmp_path / "m.onnx", layer=layer)
    fed = re.findall(r'"(\w+)": ', result.usage.split("session.run(None, ")[1])
    inputs = [i.name for i in onnx.load(tmp_path / "m.onnx").graph.input]
    assert fed == inputs and inputs[:2] == ["X", "initial_h"] and inputs[2:] in ([], ["initial_c"])


# --- RNN nodes inside subgraphs, their weights computed in the graph ----------------------------------------

BRANCHED = ONNX / "lstm_cell_in_if_torchscript.onnx"
# branch -> the LSTM node in it (named by its path), and the sample rate that takes it
BRANCHES = {
    "then_branch": ("/If::then_branch::/rnn/LSTM", 16000),
    "else_branch": ("/If::else_branch::/rnn_1/LSTM", 8000),
}


def weights_onnx_computes(path, branch: str) -> dict[str, np.ndarray]:
    """W, R and B of the LSTM in one branch of the file's `If`, as onnx.reference.ReferenceEvaluator computes
    them running the graph: each branch passes the values its LSTM reads out as extra outputs of the If."""
    model = onnx.load(str(path))
    (if_node,) = [n for n in model.graph.node if n.op_type == "If"]
    for attribute in if_node.attribute:
        (lstm,) = [n for n in attribute.g.node if n.op_type == "LSTM"]
        for value in lstm.input[1:4]:
            attribute.g.output.append(helper.make_empty_tensor_value_info(value))
    for role in "WRB":
        if_node.output.append(f"folded_{role}")
        model.graph.output.append(helper.make_empty_tensor_value_info(f"folded_{role}"))
    rng = np.random.default_rng(4)
    feeds = {
        "x": rng.normal(size=(2, 6)).astype(np.float32),
        "h": rng.normal(size=(2, 5)).astype(np.float32),
        "c": rng.normal(size=(2, 5)).astype(np.float32),
        "sr": np.array(BRANCHES[branch][1], np.int64),
    }
    results = ReferenceEvaluator(model).run(None, feeds)
    return dict(zip("WRB", results[-3:]))


def plain_lstm(path, weights: dict[str, np.ndarray]) -> None:
    """A model of one LSTM node whose W, R and B are initializers holding `weights`."""
    hidden = weights["R"].shape[-1]
    initializers = [numpy_helper.from_array(values, role) for role, values in weights.items()]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], name="lstm", hidden_size=hidden)
    graph = helper.make_graph(
        [node],
        "plain",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["s", "b", weights["W"].shape[-1]])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["s", 1, "b", hidden])],
        initializers,
    )
    path.write_bytes(helper.make_model(graph).SerializeToString())


@pytest.mark.parametrize("branch", sorted(BRANCHES))
def test_lstm_in_an_if_branch_converts_byte_exact_to_what_onnx_computes_for_its_weights(branch, tmp_path):
    expected = weights_onnx_computes(BRANCHED, branch)
    assert {role: values.shape for role, values in expected.items()} == {"W": (1, 20, 6), "R": (1, 20, 5), "B": (1, 40)}
    plain_lstm(tmp_path / "plain.onnx", expected)
    rnnconv.convert(tmp_path / "plain.onnx", tmp_path / "plain.bin")
    rnnconv.convert(BRANCHED, tmp_path / "folded.bin", layer=BRANCHES[branch][0])
    assert (tmp_path / "folded.bin").read_bytes() == (tmp_path / "plain.bin").read_bytes()
    # and both are the cell's own parameters, read from the checkpoint saved beside the export
    rnnconv.convert(ONNX / "lstm_cell_in_if_torchscript.pt", tmp_path / "cell.bin", layer="rnn")
    assert (tmp_path / "folded.bin").read_bytes() == (tmp_path / "cell.bin").read_bytes()


@pytest.mark.parametrize("branch", sorted(BRANCHES))
def test_lstm_in_an_if_branch_computes_what_onnxruntime_computes_running_the_file(branch, tmp_path):
    name, rate = BRANCHES[branch]
    blob_path = tmp_path / "blob.bin"
    rnnconv.convert(BRANCHED, blob_path, layer=name)
    blob = open_bin(blob_path)
    rng = np.random.default_rng(5)
    x, h, c = (rng.normal(0, 0.8, shape).astype(np.float32) for shape in ((2, 6), (2, 5), (2, 5)))
    h1, c1 = ort_session(BRANCHED).run(None, {"x": x, "h": h, "c": c, "sr": np.array(rate, np.int64)})
    scale = 1.0 if rate == 16000 else 0.5  # the else branch scales its input
    _, h_n, c_n = reference.forward(blob.spec, blob.param, (x * scale)[None], h[None], c[None])
    worst = largest_difference([h_n[0], c_n[0]], [h1, c1])
    LARGEST_ERRORS[f"onnxruntime {branch} of {BRANCHED.name}"] = worst
    assert worst < 1e-5


def test_lstms_in_branches_are_listed_by_path_and_said_to_share_their_weights(tmp_path):
    result = run_cli("inspect", BRANCHED, "--json")
    assert result.returncode == 0, result.stderr
    report = rnnconv.core.contracts.InspectReport.model_validate_json(result.stdout)
    assert [(e.name, e.converts, e.spec.hidden_size) for e in report.rnns] == [
        (name, True, 5) for name, _ in BRANCHES.values()
    ]
    (shared,) = report.notes
    assert "compute with the same weights" in shared and "rnn.weight_ih" in shared
    refused = run_cli("onnx-to-cudnn", BRANCHED, "-o", tmp_path / "out.bin")
    assert_clean_failure(refused, 2, "holds 2 RNNs", "same weights", "pick one with --layer")
    # a node's own name picks it when no other node has it
    result = run_cli("onnx-to-cudnn", BRANCHED, "--layer", "/rnn_1/LSTM", "-o", tmp_path / "out.bin")
    assert result.returncode == 0, result.stderr
    assert "/If::else_branch::/rnn_1/LSTM" in result.stdout


def test_verify_runs_an_lstm_from_an_if_branch(tmp_path):
    blob = tmp_path / "blob.bin"
    rnnconv.convert(BRANCHED, blob, layer=BRANCHES["else_branch"][0])
    result = run_cli("verify", blob, "--backend", "numpy", "--ragged", "--batch", "4")
    assert result.returncode == 0, result.stderr
    assert "MATCH" in result.stdout


def lstm_with_computed_weights(path, nodes, initializers, w="W_computed", inputs=()) -> None:
    """One LSTM (hidden 2, input 3) inside an If's then branch, its W computed by `nodes`; R and B stored."""
    rng = np.random.default_rng(6)
    stored = [
        numpy_helper.from_array(rng.normal(size=(1, 8, 2)).astype(np.float32), "R"),
        numpy_helper.from_array(rng.normal(size=(1, 16)).astype(np.float32), "B"),
        *initializers,
    ]
    lstm = helper.make_node("LSTM", ["X", w, "R", "B"], ["Y"], name="lstm", hidden_size=2)
    then = helper.make_graph(
        [*nodes, lstm], "then", [], [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Z"])], "else", [], [helper.make_tensor_value_info("Z", 1, None)]
    )
    branch = helper.make_node("If", ["cond"], ["out"], name="choose", then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [branch],
        "computed",
        [
            helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["s", "b", 3]),
            helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
            *inputs,
        ],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)],
        stored,
    )
    path.write_bytes(helper.make_model(graph).SerializeToString())


def _int64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


UNFOLDABLE = {
    "a graph input": (
        [helper.make_node("Identity", ["given_W"], ["W_computed"])],
        [],
        [helper.make_tensor_value_info("given_W", onnx.TensorProto.FLOAT, [1, 8, 3])],
        "'given_W' is an input of the graph, given at run time",
    ),
    "an op off the list": (
        [helper.make_node("Shape", ["X"], ["shape"]), helper.make_node("Cast", ["shape"], ["W_computed"], to=1)],
        [],
        [],
        "computed by a Shape node",
    ),
    "a cycle": (
        [
            helper.make_node("Add", ["W_computed", "one"], ["loop"], name="add"),
            helper.make_node("Identity", ["loop"], ["W_computed"], name="back"),
        ],
        [numpy_helper.from_array(np.ones((1, 8, 3), np.float32), "one")],
        [],
        "depends on itself",
    ),
    "growth beyond what weights need": (
        [helper.make_node("Concat", ["big"] * 100, ["W_computed"], axis=0, name="grow")],
        [numpy_helper.from_array(np.zeros((1 << 19,), np.float32), "big")],  # 2 MiB, 100 times
        [],
        "more than folding the weights it reads can need",
    ),
    "shapes that do not fit": (
        [helper.make_node("Reshape", ["small", "shape"], ["W_computed"], name="reshape")],
        [numpy_helper.from_array(np.ones(5, np.float32), "small"), _int64("shape", [1, 8, 3])],
        [],
        "node 'choose::then_branch::reshape' (Reshape) cannot be computed",
    ),
}


@pytest.mark.parametrize("case", sorted(UNFOLDABLE))
def test_weights_that_cannot_be_folded_are_listed_and_refused_in_a_sentence(case, tmp_path):
    nodes, initializers, inputs, phrase = UNFOLDABLE[case]
    path = tmp_path / "model.onnx"
    lstm_with_computed_weights(path, nodes, initializers, inputs=inputs)
    result = run_cli("inspect", path, "--json")
    assert result.returncode == 0, result.stderr
    (entry,) = rnnconv.core.contracts.InspectReport.model_validate_json(result.stdout).rnns
    assert (entry.name, entry.layer_class, entry.converts) == ("choose::then_branch::lstm", "LSTM", False)
    assert phrase in entry.reason and "its W is computed in the graph" in entry.reason
    refused = run_cli("onnx-to-cudnn", path, "-o", tmp_path / "out.bin")
    assert_clean_failure(refused, 2, "choose::then_branch::lstm", phrase)
    assert not (tmp_path / "out.bin").exists()


def test_weights_computed_by_every_foldable_op_are_folded_as_onnx_computes_them(tmp_path):
    """Slice, Concat, Split, Gather, Transpose, Reshape, Squeeze/Unsqueeze, Cast and arithmetic, in one chain."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=(3, 16)).astype(np.float64)
    nodes = [
        helper.make_node("Cast", ["base"], ["f32"], to=1),
        helper.make_node("Transpose", ["f32"], ["t"], perm=[1, 0]),  # (16, 3)
        helper.make_node("Split", ["t", "halves"], ["top", "bottom"], axis=0),  # (8, 3) each
        helper.make_node("Mul", ["top", "two"], ["scaled"]),
        helper.make_node("Sub", ["scaled", "bottom"], ["diff"]),
        helper.make_node("Div", ["diff", "two"], ["half"]),
        helper.make_node("Add", ["half", "bottom"], ["sum"]),
        helper.make_node("Gather", ["sum", "order"], ["gathered"], axis=0),
        helper.make_node("Slice", ["gathered", "starts", "ends", "axes", "steps"], ["sliced"]),
        helper.make_node("Concat", ["sliced", "sliced"], ["twice"], axis=0),
        helper.make_node("Reshape", ["twice", "shape"], ["flat"]),
        helper.make_node("Unsqueeze", ["flat", "axis0"], ["one"]),
        helper.make_node("Squeeze", ["one", "axis0"], ["again"]),
        helper.make_node("Unsqueeze", ["again", "axis0"], ["W_computed"]),
    ]
    initializers = [
        numpy_helper.from_array(base, "base"),
        _int64("halves", [8, 8]),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        _int64("order", [7, -1, 0, 3, 2, 5, 4, 1]),
        _int64("starts", [-1]),
        _int64("ends", [-(2**63)]),
        _int64("axes", [0]),
        _int64("steps", [-2]),
        _int64("shape", [8, -1]),
        _int64("axis0", [0]),
    ]
    path = tmp_path / "model.onnx"
    lstm_with_computed_weights(path, nodes, initializers)
    model = onnx.load(str(path))
    branches = {a.name: a.g for a in model.graph.node[0].attribute}
    branches["then_branch"].output.append(helper.make_empty_tensor_value_info("W_computed"))
    branches["else_branch"].output.append(helper.make_empty_tensor_value_info("X"))
    model.graph.node[0].output.append("W_out")
    model.graph.output.append(helper.make_empty_tensor_value_info("W_out"))
    x = rng.normal(size=(2, 1, 3)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"X": x, "cond": np.array(True)})[-1]
    with rnnconv.load(path) as (rnn,):
        assert rnn.spec.input_size == 3 and rnn.spec.hidden_size == 2
    plain_lstm(
        tmp_path / "plain.onnx",
        {
            "W": expected,
            "R": numpy_helper.to_array(model.graph.initializer[0]),
            "B": numpy_helper.to_array(model.graph.initializer[1]),
        },
    )
    rnnconv.convert(tmp_path / "plain.onnx", tmp_path / "plain.bin")
    rnnconv.convert(path, tmp_path / "folded.bin")
    assert (tmp_path / "folded.bin").read_bytes() == (tmp_path / "plain.bin").read_bytes()


def test_subgraphs_nested_too_deep_are_refused(tmp_path):
    leaf = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y0"])], "g0", [], [helper.make_tensor_value_info("Y0", 1, None)]
    )
    body = leaf
    for depth in range(1, 20):
        # only then_branch nests: the same body in both branches would double the file at each depth (2^19 nodes)
        node = helper.make_node("If", ["cond"], [f"Y{depth}"], then_branch=body, else_branch=leaf, name=f"if{depth}")
        body = helper.make_graph([node], f"g{depth}", [], [helper.make_tensor_value_info(f"Y{depth}", 1, None)])
    graph = helper.make_graph(
        list(body.node),
        "deep",
        [helper.make_tensor_value_info("X", 1, [1]), helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, [])],
        list(body.output),
    )
    path = tmp_path / "deep.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    assert_clean_failure(run_cli("inspect", path), 2, "nested more than 16 deep")


# --- quantized LSTMs (onnxruntime's com.microsoft DynamicQuantizeLSTM) ----------------------------------------

QUANTIZED = ["lstm_quantized", "lstm_quantized_per_channel"]
QUANTIZED_CHAIN = "/LSTM_quant,/LSTM_1_quant"


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_lstms_are_listed_with_sizes_and_refused_without_dequantize(name, tmp_path):
    result = run_cli("inspect", ONNX / f"{name}.onnx", "--json")
    assert result.returncode == 0, result.stderr
    report = rnnconv.core.contracts.InspectReport.model_validate_json(result.stdout)
    listed = {e.name: (e.layer_class, e.converts, e.sizes.input_size, e.sizes.num_layers) for e in report.rnns}
    assert listed == {
        "/LSTM_quant": ("DynamicQuantizeLSTM", False, 4, 1),
        "/LSTM_1_quant": ("DynamicQuantizeLSTM", False, 12, 1),
        QUANTIZED_CHAIN: ("DynamicQuantizeLSTM", False, 4, 2),
    }
    assert all("int8 dynamically quantized weights" in e.reason and "--dequantize" in e.reason for e in report.rnns)
    for args in ([], ["--layer", "/LSTM_quant"]):
        refused = run_cli("onnx-to-cudnn", ONNX / f"{name}.onnx", "-o", tmp_path / "out.bin", *args)
        assert_clean_failure(refused, 2, "quantized LSTM", "--dequantize")
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("name", QUANTIZED)
def test_dequantize_gives_the_float_model_within_a_quantization_step_of_the_checkpoint(name, tmp_path):
    result = run_cli("onnx-to-cudnn", ONNX / f"{name}.onnx", "-o", tmp_path / "deq.bin", "--dequantize")
    assert result.returncode == 0, result.stderr
    assert "dequantized" in result.stderr and "not the quantized one" in result.stderr
    rnnconv.convert(ONNX / f"{name}.pt", tmp_path / "pt.bin")
    dequantized, original = open_bin(tmp_path / "deq.bin"), open_bin(tmp_path / "pt.bin")
    assert dequantized.spec == original.spec
    scales = [numpy_helper.to_array(t) for t in onnx.load(str(ONNX / f"{name}.onnx")).graph.initializer]
    step = max(float(s.max()) for s in scales if s.dtype == np.float32 and s.ndim <= 2 and s.size <= 48)
    for key in dequantized.spec.param_keys():
        difference = np.abs(dequantized.param(key) - original.param(key)).max()
        assert difference <= step / 2 + 1e-7, key.label  # round to nearest: at most half a step
        if key.kind in ("bW", "bR"):  # biases are not quantized
            assert difference == 0, key.label


@pytest.mark.parametrize("name", QUANTIZED)
def test_verify_compares_the_dequantized_blob_with_onnxruntime_running_the_quantized_nodes(name, tmp_path):
    blob = tmp_path / "deq.bin"
    rnnconv.convert(ONNX / f"{name}.onnx", blob, dequantize=True)
    result = run_cli("verify", blob, "--backend", "numpy", "--report", tmp_path / "r.json", "--ragged", "--batch", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    report = rnnconv.core.report_contracts.Report.model_validate_json((tmp_path / "r.json").read_text())
    assert report.verdict == "match" and "DynamicQuantizeLSTM" in report.source.run
    assert "dequantized float model" in report.source.run
    assert 1e-4 < report.comparison.y.max_abs < 1e-2  # the quantized node's own rounding, and no more
    # a blob with the input and forget gates swapped (a gate-order mistake) is caught at this tolerance
    spec = open_bin(blob).spec
    wrong = tmp_path / "wrong.bin"
    with rnnconv.load(blob) as (rnn,):
        swapped = {
            ParamKey(0, 0, kind, gate): ParamKey(0, 0, kind, other)
            for kind in ("W", "R", "bW", "bR")
            for gate, other in (("i", "f"), ("f", "i"))
        }
        values = {key: rnn.param(swapped.get(key, key)) for key in spec.param_keys()}
    data = bytearray(blob.read_bytes())
    for region in regions(spec):
        block = np.ascontiguousarray(values[region.key], np.float32).tobytes()
        data[region.offset * 4 : region.offset * 4 + len(block)] = block
    wrong.write_bytes(bytes(data))
    (tmp_path / "wrong.bin.json").write_bytes((tmp_path / "deq.bin.json").read_bytes())
    result = run_cli("verify", wrong, "--backend", "numpy")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


# --- QDQ: weights computed by DequantizeLinear of int8 initializers (onnxruntime quantize_static, QDQ) -----------


def _qdq_inputs():
    rng = np.random.default_rng(48)
    return (rng.standard_normal(s).astype(np.float32) for s in ((5, 2, 4), (4, 2, 6), (4, 2, 6)))


@pytest.mark.parametrize(
    ("name", "scheme"),
    [("lstm_qdq_weights", "per-tensor"), ("lstm_qdq_per_channel", "per-channel (axis 1), per-tensor")],
)
def test_qdq_weights_are_read_exactly_and_compute_what_onnxruntime_computes(name, scheme, tmp_path):
    """Weights-only QDQ (int8 per tensor; uint8 per row): W, R, B dequantized exactly (scale * (q - zero_point)),
    recorded, and the converted RNN within 1e-5 of onnxruntime running the file; lstm_qdq.onnx, the same weights
    with X, the states and the outputs rounded by QuantizeLinear/DequantizeLinear pairs, within the difference that
    rounding makes."""
    path, blob = ONNX / f"{name}.onnx", tmp_path / "qdq.bin"
    rnnconv.convert(path, blob, dequantize=True)
    graph = onnx.load(str(path)).graph
    stored = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    lstms = [n for n in graph.node if n.op_type == "LSTM"]
    dequantizing = {n.output[0]: n.input for n in graph.node if n.op_type == "DequantizeLinear"}

    def exact(value):  # the test's own scale * (q - zero_point), in float64
        q, scale, zero = (stored[name] for name in dequantizing[value])
        rows = (None, slice(None), None) if scale.ndim else ()  # per channel: along axis 1
        return (q.astype(np.int64) - zero.astype(np.int64)[rows]) * scale.astype(np.float64)[rows]

    with rnnconv.load(blob) as (rnn,):
        assert rnn.spec.num_layers == 2 and rnn.spec.bidirectional and rnn.spec.input_size == 4
        for layer, node in enumerate(lstms):
            w, r, b = (exact(value) for value in node.input[1:4])
            for d in range(2):
                for g, gate in enumerate("iofc"):  # ONNX's gate order
                    rows = slice(6 * g, 6 * g + 6)
                    assert np.array_equal(rnn.param(ParamKey(layer, d, "W", gate)), w[d, rows])
                    assert np.array_equal(rnn.param(ParamKey(layer, d, "R", gate)), r[d, rows])
                    assert np.array_equal(rnn.param(ParamKey(layer, d, "bW", gate)), b[d, rows])
                    assert np.array_equal(rnn.param(ParamKey(layer, d, "bR", gate)), b[d, 24:][rows])
        x, h0, c0 = _qdq_inputs()
        ours = reference.forward(rnn.spec, rnn.param, x, h0, c0)
    sidecar = json.loads((tmp_path / "qdq.bin.json").read_text())
    record = rnnconv.core.contracts.Provenance.model_validate(sidecar["source"]).dequantized
    assert record.scheme == scheme and record.bits == 8 and len(record.tensors) == 6
    assert set(record.tensors) == {dequantizing[v][0] for n in lstms for v in n.input[1:4]}
    feeds = {"x": x, "h0": h0, "c0": c0}
    theirs = ort_session(path).run(None, feeds)
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs)) <= 1e-5
    if name != "lstm_qdq_weights":
        return
    rounded = ort_session(ONNX / "lstm_qdq.onnx").run(None, feeds)
    # int8 activations, their ranges calibrated on one batch: each value rounded to its step (1.5e-3 to 2e-2) and
    # clipped to that range, which the cell states outgrow here: the outputs move by up to 0.2 (measured 0.158 y,
    # 0.181 h_n, 0.202 c_n), what no float RNN computes
    assert 1e-3 < max(float(np.abs(a - b).max()) for a, b in zip(ours, rounded)) < 0.25


def test_qdq_is_refused_without_dequantize_and_with_quantized_activations(tmp_path):
    out = tmp_path / "out.bin"
    with pytest.raises(rnnconv.errors.RnnconvError, match=r"DequantizeLinear of stored integers.*--dequantize"):
        rnnconv.convert(ONNX / "lstm_qdq_weights.onnx", out)
    for layer in ("/LSTM", "/LSTM_1"):
        with pytest.raises(rnnconv.errors.RnnconvError, match=r"quantized with its activations.*--allow-lossy"):
            rnnconv.convert(ONNX / "lstm_qdq.onnx", out, dequantize=True, layer=layer)
    assert not out.exists()


def test_qdq_activation_scale_that_cannot_be_computed_is_said(tmp_path):
    """An activation QuantizeLinear whose scale names a value nothing makes: the node listed with that reason, the
    conversion refused in one sentence (it was an internal error; found by the onnx_quantized fuzz family)."""
    model = onnx.load(ONNX / "lstm_qdq.onnx")
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear")
    quantize.input[1] = "nowhere_scale"
    path = tmp_path / "scale_nowhere.onnx"
    onnx.save(model, path)
    out = tmp_path / "out.bin"
    result = run_cli("convert", path, out, "--dequantize", "--allow-lossy", "--layer", "/LSTM")
    assert_clean_failure(result, 2, "has a scale or zero point rnnconv cannot compute")
    assert "'nowhere_scale' is produced by no node" in result.stderr and not out.exists()


def test_qdq_with_quantized_activations_converts_with_allow_lossy_the_rounding_recorded(tmp_path):
    """quantize_static's activation pairs on X, initial_h and initial_c: with --allow-lossy the node converts
    without that rounding, the warning and the record naming each pair; the converted RNN computes what onnxruntime
    computes of the weights-only file (the same weights), and the rounded file differs from it by about what the
    conversion measured."""
    out = tmp_path / "lossy.bin"
    result = run_cli("convert", ONNX / "lstm_qdq.onnx", out, "--layer", "/LSTM", "--dequantize", "--allow-lossy")
    assert result.returncode == 0, result.stderr
    assert "read without what cuDNN does not compute" in result.stderr
    assert result.stderr.count("rounded by QuantizeLinear/DequantizeLinear") == 3
    sidecar = json.loads((tmp_path / "lossy.bin.json").read_text())
    source = rnnconv.core.contracts.Provenance.model_validate(sidecar["source"])
    assert source.loss is not None and len(source.loss.dropped) == 3
    assert source.dequantized is not None and [r.value for r in source.dequantized.rounded] == ["x", "h0", "c0"]
    weights_only = tmp_path / "weights.bin"
    rnnconv.convert(ONNX / "lstm_qdq_weights.onnx", weights_only, dequantize=True, layer="/LSTM")
    with rnnconv.load(out) as (lossy,), rnnconv.load(weights_only) as (exact,):
        for key in lossy.spec.param_keys():
            assert np.array_equal(lossy.param(key), exact.param(key))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("axis", r"axis 7 is no axis of a 3-dimensional tensor"),
        ("scale", r"has a scale of 0: a quantization step is a positive finite number"),
        ("zero", r"zero point \(float32, shape \[24\]\)"),
    ],
)
def test_damaged_qdq_weights_are_refused_in_one_sentence(damage, said, tmp_path):
    model = onnx.load(str(ONNX / "lstm_qdq_per_channel.onnx"))
    stored = {t.name: t for t in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.attribute)
    scale, zero = numpy_helper.to_array(stored[node.input[1]]), numpy_helper.to_array(stored[node.input[2]])
    if damage == "axis":
        node.attribute[0].i = 7
    elif damage == "scale":
        stored[node.input[1]].CopyFrom(numpy_helper.from_array(np.where(np.arange(24) == 3, 0, scale), node.input[1]))
    else:
        stored[node.input[2]].CopyFrom(numpy_helper.from_array(zero.astype(np.float32), node.input[2]))
    path = tmp_path / "damaged.onnx"
    onnx.save(model, str(path))
    with pytest.raises(rnnconv.errors.BadInput, match=said):
        rnnconv.convert(path, tmp_path / "out.bin", dequantize=True)
    assert not (tmp_path / "out.bin").exists()


CELL_LAYERS = {"node_Split_6": ("LSTM", 3, 4), "node_Split_12": ("GRU", 3, 5)}  # in cells_dynamo.onnx


def _cell_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = {"x": 3, "h": 4, "c": 4, "g": 5}  # the LSTMCell's x, h, c and the GRUCell's h (g)
    return {name: rng.standard_normal((2, size)).astype(np.float32) for name, size in sizes.items()}


@pytest.mark.parametrize("name", ["cells_dynamo", "cells_gates_swapped"])
def test_unrolled_lstm_and_gru_cells_convert_to_what_onnxruntime_computes(name, tmp_path):
    """The dynamo exporter writes nn.LSTMCell and nn.GRUCell as Gemm/Split/Sigmoid/Tanh ops; each is read by what its
    graph computes, so a cell whose gates read other blocks (the graph's LSTM i and o, GRU r and z exchanged) is
    read right too: the converted nn.LSTM / nn.GRU, run one step, computes what onnxruntime computes of the file."""
    report = rnnconv.inspect(ONNX / f"{name}.onnx")
    listed = {e.name: (e.layer_class, e.converts, e.sizes.input_size, e.sizes.hidden_size) for e in report.rnns}
    assert listed == {
        layer: (f"{kind} cell (unrolled)", True, inputs, hidden)
        for layer, (kind, inputs, hidden) in CELL_LAYERS.items()
    }
    feeds = _cell_feeds(7)
    h_lstm, c_lstm, h_gru = ort_session(ONNX / f"{name}.onnx").run(None, feeds)
    for layer, (kind, inputs, hidden) in CELL_LAYERS.items():
        out = tmp_path / f"{layer}.pt"
        result = run_cli("convert", ONNX / f"{name}.onnx", out, "--layer", layer)
        assert result.returncode == 0, result.stderr
        assert "read by what it computes" in result.stderr
        module = getattr(torch.nn, kind)(inputs, hidden)
        module.load_state_dict(torch.load(out, weights_only=True))
        x = torch.from_numpy(feeds["x"])[None]
        with torch.no_grad():
            if kind == "LSTM":
                _, (h, c) = module(x, (torch.from_numpy(feeds["h"])[None], torch.from_numpy(feeds["c"])[None]))
                assert np.max(np.abs(c[0].numpy() - c_lstm)) <= 1e-5
                assert np.max(np.abs(h[0].numpy() - h_lstm)) <= 1e-5
            else:
                _, h = module(x, torch.from_numpy(feeds["g"])[None])
                assert np.max(np.abs(h[0].numpy() - h_gru)) <= 1e-5


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("layers", [1, 2])
def test_cells_stepped_over_time_convert_as_one_rnn_computing_what_onnxruntime_computes(kind, layers, tmp_path):
    """nn.LSTMCell / nn.GRUCell layers stepped 4 times in Python (I=5, H=7, 1 and 2 layers), exported by the dynamo
    exporter as one cell's operations per step and layer: one RNN, its layers stacked, that converts; the nn.LSTM /
    nn.GRU written computes, from the same initial states, what onnxruntime computes of the file."""
    path = ONNX / f"{kind.lower()}_cell_loop{layers}_dynamo.onnx"
    report = rnnconv.inspect(path)
    whole = [e for e in report.rnns if e.sizes.num_layers == layers]
    assert [(e.layer_class, e.converts, e.sizes.input_size, e.sizes.hidden_size) for e in whole] == [
        (f"{kind} cell (unrolled, 4 steps)", True, 5, 7)
    ]
    rng = np.random.default_rng(layers)
    x = rng.standard_normal((4, 2, 5)).astype(np.float32)
    states = [rng.standard_normal((layers, 2, 7)).astype(np.float32) for _ in range(2 if kind == "LSTM" else 1)]
    session = ort_session(path)
    expected = session.run(None, dict(zip([i.name for i in session.get_inputs()], [x, *states])))
    out = tmp_path / "out.pt"
    result = run_cli("convert", path, out, "--layer", whole[0].name)
    assert result.returncode == 0, result.stderr
    module = getattr(torch.nn, kind)(5, 7, num_layers=layers)
    module.load_state_dict(torch.load(out, weights_only=True))
    initial = tuple(torch.from_numpy(s) for s in states)
    with torch.no_grad():
        y, final = module(torch.from_numpy(x), initial if kind == "LSTM" else initial[0])
    got = [y, *(final if kind == "LSTM" else (final,))]
    for mine, theirs in zip(got, expected, strict=True):
        assert np.max(np.abs(mine.numpy() - theirs)) <= 1e-5


def test_a_cell_that_is_a_scan_body_converts_as_the_rnn_the_scan_computes(tmp_path):
    """The LSTMCell's operations as a Scan's body (h and c carried, x scanned): the nn.LSTM written computes over the
    whole sequence what onnxruntime computes of the Scan (Y, h_n, c_n); with the body giving back its new states in
    each other's places, the Scan is no RNN and the cell is listed as one step only."""
    path = ONNX / "lstm_cell_in_scan.onnx"
    (entry,) = rnnconv.inspect(path).rnns
    assert (entry.layer_class, entry.converts, entry.sizes.input_size, entry.sizes.hidden_size) == (
        "LSTM cell (Scan body)",
        True,
        3,
        4,
    )
    rng = np.random.default_rng(11)
    feeds = {
        "h0": rng.standard_normal((2, 4)).astype(np.float32),
        "c0": rng.standard_normal((2, 4)).astype(np.float32),
        "X": rng.standard_normal((5, 2, 3)).astype(np.float32),
    }
    h_n, c_n, y = ort_session(path).run(None, feeds)
    out = tmp_path / "out.pt"
    result = run_cli("convert", path, out)
    assert result.returncode == 0, result.stderr
    module = torch.nn.LSTM(3, 4)
    module.load_state_dict(torch.load(out, weights_only=True))
    with torch.no_grad():
        mine_y, (mine_h, mine_c) = module(
            torch.from_numpy(feeds["X"]), (torch.from_numpy(feeds["h0"])[None], torch.from_numpy(feeds["c0"])[None])
        )
    for mine, theirs in ((mine_y, y), (mine_h[0], h_n), (mine_c[0], c_n)):
        assert np.max(np.abs(mine.numpy() - theirs)) <= 1e-5
    model = onnx.load(str(path))
    body = model.graph.node[0].attribute[0].g
    body.output[0].name, body.output[1].name = body.output[1].name, body.output[0].name
    swapped = tmp_path / "swapped.onnx"
    onnx.save(model, str(swapped))
    assert [e.layer_class for e in rnnconv.inspect(swapped).rnns] == ["LSTM cell (unrolled)"]


def test_a_lone_cell_whose_input_and_state_cannot_be_told_apart_is_refused(tmp_path):
    """An LSTM step with as many inputs as hidden units computes the same with its input and state exchanged (and
    its matrices with them): one step alone does not tell which is the state, so it is refused, not read one way."""
    model = onnx.load(str(ONNX / "cells_dynamo.onnx"))
    (weight,) = [t for t in model.graph.initializer if t.name == "lstm.weight_ih"]
    weight.CopyFrom(
        numpy_helper.from_array(np.random.default_rng(5).standard_normal((16, 4)).astype(np.float32), weight.name)
    )
    path = tmp_path / "square.onnx"
    onnx.save(model, str(path))
    entry = next(e for e in rnnconv.inspect(path).rnns if e.name == "node_Split_6")
    assert not entry.converts and "which of them is the state it carries" in entry.reason
    refused = run_cli("convert", path, tmp_path / "out.pt", "--layer", "node_Split_6")
    assert_clean_failure(refused, 2, "reads 'h' and 'x' alike", "its graph does not tell")
    assert not (tmp_path / "out.pt").exists()


def test_the_unchanged_cells_read_as_their_checkpoint(tmp_path):
    """The LSTMCell and GRUCell read from the graph hold their checkpoint's very weights."""
    for layer, module in (("node_Split_6", "lstm"), ("node_Split_12", "gru")):
        rnnconv.convert(ONNX / "cells_dynamo.onnx", tmp_path / f"{layer}.bin", layer=layer)
        rnnconv.convert(ONNX / "cells_dynamo.pt", tmp_path / f"{module}.bin", layer=module)
        assert (tmp_path / f"{layer}.bin").read_bytes() == (tmp_path / f"{module}.bin").read_bytes()


def test_a_cell_graph_that_computes_no_cell_is_listed_with_the_reason_and_refused(tmp_path):
    """The cells with the LSTM's output Tanh made a Relu and the GRU's 1 - z made 1 + z: shaped like cells, but no
    reading of their weights computes what they compute: listed with the reason, refused in one sentence."""
    report = rnnconv.inspect(ONNX / "cells_no_cell.onnx")
    assert sorted((e.name, e.converts, e.sizes.hidden_size) for e in report.rnns) == [
        ("node_Split_12", False, 5),
        ("node_Split_6", False, 4),
    ]
    for entry in report.rnns:
        assert "computes none of the" in entry.reason and "the nearest is off by" in entry.reason
        assert "convert the checkpoint" in entry.reason
    out = tmp_path / "out.pt"
    refused = run_cli("convert", ONNX / "cells_no_cell.onnx", out, "--layer", "node_Split_6")
    assert_clean_failure(refused, 2, "looks like an LSTM cell", "computes none of the", "convert the checkpoint")
    assert not out.exists()


def test_a_cell_refused_names_its_weights_cut_to_a_readable_length(tmp_path):
    """Found by the fuzz family onnx_cells: a weight with a 20,000-character name made the refusal 20,000 characters."""
    model = onnx.load(str(ONNX / "cells_no_cell.onnx"))
    long = "w" * 20_000
    for tensor in model.graph.initializer:
        if tensor.name == "lstm.weight_ih":
            tensor.name = long
    for node in model.graph.node:
        node.input[:] = [long if name == "lstm.weight_ih" else name for name in node.input]
    path = tmp_path / "long.onnx"
    onnx.save(model, str(path))
    refused = run_cli("convert", path, tmp_path / "out.pt", "--layer", "node_Split_6")
    assert_clean_failure(refused, 2, "computes none of the", "(20,000 characters)")
    assert len(refused.stderr) < 1000


# --- verify a written .onnx: the file itself, run in onnxruntime, against its recorded source ---------------


def _swap_first_two_gates(path, layer: int, gates: int) -> None:
    """Rewrite the .onnx with the first two gates of one layer's forward direction swapped in W, R and B."""
    model = onnx.load(str(path))
    for tensor in model.graph.initializer:
        if tensor.name in (f"W_{layer}", f"R_{layer}", f"B_{layer}"):
            values = numpy_helper.to_array(tensor).copy()
            hidden = values.shape[1] // (gates * (2 if tensor.name.startswith("B") else 1))
            for half in range(0, values.shape[1], gates * hidden):  # B: the input biases, then the recurrent ones
                first, second = slice(half, half + hidden), slice(half + hidden, half + 2 * hidden)
                values[0, first], values[0, second] = values[0, second].copy(), values[0, first].copy()
            tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    path.write_bytes(model.SerializeToString())


@pytest.mark.parametrize("checkpoint, layer", _torch_cases()[:2])
def test_verify_runs_a_written_onnx_file_against_the_source_it_records(checkpoint, layer, tmp_path):
    out = tmp_path / "model.onnx"
    run_cli("convert", FIXTURES / "torch" / checkpoint, out, *(["--layer", layer] if layer else []))
    result = run_cli("verify", out, "--ragged", "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: model.onnx computes what" in " ".join(result.stdout.split())
    report = rnnconv.core.report_contracts.Report.model_validate_json((tmp_path / "r.json").read_text())
    assert report.backend.name == "onnxruntime" and "model.onnx run as written" in report.backend.detail
    assert report.source.path == str((FIXTURES / "torch" / checkpoint).resolve())
    assert [c.check for c in report.checks] == ["finite values"]


def test_verify_catches_a_written_onnx_with_two_gates_swapped(tmp_path):
    out = tmp_path / "model.onnx"
    rnnconv.convert(FIXTURES / "torch" / "seq2seq.pt", out, layer="encoder.rnn")
    _swap_first_two_gates(out, 0, 4)  # ONNX's first two gates, i and o
    result = run_cli("verify", out, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = rnnconv.core.report_contracts.Report.model_validate_json(result.stdout)
    assert report.verdict == "mismatch" and report.diagnosis is not None and report.diagnosis.found
    assert "i (input gate) and o (output gate) of layer 0 forward look swapped" in report.diagnosis.message


def test_verify_of_an_onnx_that_records_no_source_needs_against(tmp_path):
    out = tmp_path / "model.onnx"
    rnnconv.convert(FIXTURES / "torch" / "rnn_tanh.pt", out)
    model = onnx.load(str(out))
    del model.metadata_props[:]
    out.write_bytes(model.SerializeToString())
    result = run_cli("verify", out)
    assert result.returncode == 2 and "no numerical comparison was possible" in result.stdout
    result = run_cli("verify", out, "--against", FIXTURES / "torch" / "rnn_tanh.pt")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("record", ["{", '{"path": 5}', "[1, 2]", "x" * 2_000_000])
def test_a_garbled_source_record_is_refused_in_a_sentence(record, tmp_path):
    out = tmp_path / "model.onnx"
    rnnconv.convert(FIXTURES / "torch" / "rnn_tanh.pt", out)
    model = onnx.load(str(out))
    model.metadata_props[0].value = record
    out.write_bytes(model.SerializeToString())
    assert_clean_failure(run_cli("verify", out), 2, "rnnconv.source record")


def test_allow_lossy_writes_the_nearest_rnn_and_measures_what_it_changes(tmp_path, monkeypatch):
    """The lossless-or-refused mechanism, with a target made to drop a GRU's b_hn (as flax.nnx's GRUCell must): the
    warning's number is what onnxruntime, running the written file, differs from torch by on the probe inputs."""
    from rnnconv.conversion import PROBE_BATCH, PROBE_SEED, PROBE_STEPS
    from rnnconv.core.canonical import CanonicalRNN
    from rnnconv.core.compare import make_inputs
    from rnnconv.formats.holding import Loss
    from rnnconv.formats.onnx.format import OnnxFormat

    torch.manual_seed(3)
    module = torch.nn.GRU(5, 7, num_layers=2)
    source = tmp_path / "gru.pt"
    torch.save(module.state_dict(), source)

    def without_b_hn(rnn):
        hn = rnn.spec.gates[2]
        drop = {k for k in rnn.spec.param_keys() if k.kind == "bR" and k.gate == hn}
        loaders = {k: (lambda k=k: np.zeros(rnn.spec.param_shape(k))) if k in drop else rnn.loaders[k] for k in drop}
        return CanonicalRNN(rnn.name, rnn.spec, {**rnn.loaders, **loaders}, rnn.source)

    monkeypatch.setattr(OnnxFormat, "losses", lambda self, rnn: [Loss("no b_hn here", nearest=without_b_hn)])
    with pytest.raises(rnnconv.errors.Unsupported, match=r"no b_hn here \(--allow-lossy writes it without that"):
        rnnconv.convert(source, tmp_path / "refused.onnx")
    result = rnnconv.convert(source, tmp_path / "lossy.onnx", allow_lossy=True)
    (warning,) = [w for w in result.warnings if w.startswith("--allow-lossy")]
    stated = float(warning.rsplit(" ", 1)[1])
    with rnnconv.load(source) as (rnn,):
        inputs = make_inputs(rnn.spec, PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    expected = torch_outputs(module, rnn.spec, inputs["x"], inputs["h0"], None)
    got = ort_run(tmp_path / "lossy.onnx", inputs["x"].astype(np.float32), inputs["h0"].astype(np.float32), None)
    assert stated > 0.01 and stated == pytest.approx(largest_difference(got, expected), rel=1e-3, abs=1e-6)


# --- the cell recogniser shared by the graph formats, against onnxruntime's own cells ----------------------------


def _node_cell(op: str, hidden: int, inputs: int, rng: np.random.Generator, peepholes: bool = False, **attributes):
    """One step of an ONNX LSTM/GRU/RNN node run in onnxruntime, as a graph format would give the recogniser a cell:
    its two products (W as stored, R transposed) and its graph run on values fed by name."""
    from rnnconv.formats._cells import CellGraph, Product

    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    w = rng.standard_normal((1, gates * hidden, inputs)).astype(np.float32)
    r = rng.standard_normal((1, gates * hidden, hidden)).astype(np.float32)
    b = rng.standard_normal((1, 2 * gates * hidden)).astype(np.float32)
    names = (
        ["X", "W", "R", "B", "", "initial_h"] + (["initial_c"] if op == "LSTM" else []) + (["P"] if peepholes else [])
    )
    stored = [("W", w), ("R", r), ("B", b)] + (
        [("P", rng.standard_normal((1, 3 * hidden)).astype(np.float32))] if peepholes else []
    )
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=hidden, **attributes)
    floats = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "cell",
        [helper.make_tensor_value_info(n, floats, None) for n in names if n and n not in "WRBP"],
        [helper.make_tensor_value_info(n, floats, None) for n in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in stored],
    )
    session = ort_session_of(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        given = {"X": feeds["x"][None], "initial_h": feeds["h"][None]}
        if op == "LSTM":
            given["initial_c"] = feeds["c"][None]
        return {n: v[0] for n, v in zip(outputs[1:], session.run(outputs[1:], given))}

    rows = gates * hidden
    products = (Product("x", w[0], b[0, :rows], "W"), Product("h", r[0].T, b[0, rows:], "R"))
    return CellGraph(op, products, ("c",) if op == "LSTM" else (), run), (w[0], r[0], b[0, :rows], b[0, rows:])


def ort_session_of(model):
    import onnxruntime

    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("op", "attributes", "mode", "reset_after", "order"),
    [
        ("LSTM", {}, "lstm", True, ("i", "o", "f", "c")),
        ("GRU", {"linear_before_reset": 1}, "gru", True, ("z", "r", "h")),
        ("GRU", {"linear_before_reset": 0}, "gru", False, ("z", "r", "h")),
        ("RNN", {"activations": ["Relu"]}, "rnn_relu", True, ("h",)),
        ("RNN", {}, "rnn_tanh", True, ("h",)),
    ],
)
def test_the_cell_recogniser_settles_gates_layout_and_reset_by_what_the_cell_computes(
    op, attributes, mode, reset_after, order
):
    """onnxruntime's own LSTM, GRU (both reset placements) and RNN (tanh, relu) one step, given to the recogniser as
    a graph format gives a cell, its recurrent matrix stored transposed: the reading found is the node's, each gate
    its block of the ONNX order, and the GRU's reset where the node puts it."""
    from rnnconv.formats._cells import Reading, recognise

    cell, (w, r, bw, br) = _node_cell(op, 5, 3, np.random.default_rng(len(op) + len(attributes)), **attributes)
    reading = recognise(cell)
    assert isinstance(reading, Reading), reading
    assert (reading.mode, reading.reset_after, reading.input_size, reading.hidden) == (mode, reset_after, 3, 5)
    assert reading.error <= 1e-5
    for block, gate in enumerate(order):
        rows = slice(block * 5, (block + 1) * 5)
        for mine, theirs in zip(reading.gates[gate], (w[rows], r[rows], bw[rows], br[rows])):
            np.testing.assert_array_equal(mine, theirs)


def test_the_cell_recogniser_says_why_a_cell_it_cannot_read_does_not_convert():
    """onnxruntime's LSTM with peepholes computes no cuDNN LSTM: no reading matches, and the reason says so."""
    from rnnconv.formats._cells import recognise

    cell, _ = _node_cell("LSTM", 5, 3, np.random.default_rng(3), peepholes=True)
    reason = recognise(cell)
    assert isinstance(reason, str) and reason.startswith("computes none of the 24 LSTM readings"), reason
    assert "the nearest is off by" in reason


def test_bfloat16_weights_which_the_onnx_rnn_ops_of_its_opset_do_not_take_are_refused(tmp_path):
    """ONNX's LSTM/GRU/RNN take bfloat16 from opset 22 on; rnnconv writes opset 20, where onnxruntime refused the
    written file as an invalid model ("Type 'tensor(bfloat16)' of input parameter (X) of operator (GRU) is invalid")."""
    out = tmp_path / "gru.onnx"
    result = run_cli("convert", FIXTURES / "torch" / "gru_bf16.pt", out, "--dtype", "bfloat16")
    assert_clean_failure(result, 2, "ONNX stores float32, float16 or float64 weights, not bfloat16")
    assert not out.exists()
    assert run_cli("convert", FIXTURES / "torch" / "gru_bf16.pt", out, "--dtype", "float16").returncode == 0
    ort_session(out)  # a model onnxruntime takes
