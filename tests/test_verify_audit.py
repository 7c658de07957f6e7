"""`verify DEPLOYED --against CHECKPOINT`: a deployed whole model audited against its training checkpoint, one row
per RNN, on the files the real exporters write (fixtures/make_audit_fixtures.py): each deployed RNN runs in its own
runtime, the checkpoint's in its framework."""

from __future__ import annotations

import json
import re

import pytest
from conftest import FIXTURES, assert_clean_failure, run_cli

AUDIT = FIXTURES / "audit"
TAGGER = AUDIT / "tagger.pt"


def rows(*args):
    """The audit's rows as --json gives them (deployed name, checkpoint name, verdict), and its exit code."""
    result = run_cli("verify", *args, "--json")
    reports = json.loads(result.stdout)
    return (
        [(r.get("name", ""), (r.get("source") or {}).get("layer"), r["verdict"]) for r in reports],
        reports,
        result.returncode,
    )


@pytest.mark.needs("torch", "onnxruntime")
@pytest.mark.parametrize(
    ("deployed", "names"),
    [
        ("tagger_torchscript.onnx", ("/gru/GRU", "/lstm/LSTM")),
        ("tagger_dynamo.onnx", ("node_gru__1", "node_lstm__2")),
    ],
)
def test_a_whole_model_exported_to_onnx_matches_its_checkpoint_rnn_by_rnn(deployed, names):
    found, reports, code = rows(AUDIT / deployed, "--against", TAGGER)
    assert code == 0, reports
    assert found == [(names[0], "gru", "match"), (names[1], "lstm", "match")]
    assert all(r["comparison"]["y"]["max_abs"] < 1e-5 for r in reports)
    assert all("onnxruntime" in r["backend"]["detail"] for r in reports)


@pytest.mark.needs("torch", "openvino")
def test_a_whole_model_converted_by_openvino_matches_its_checkpoint():
    found, reports, code = rows(AUDIT / "tagger_openvino.xml", "--against", TAGGER)
    assert code == 0, reports
    assert [(checkpoint, verdict) for _, checkpoint, verdict in found] == [("gru", "match"), ("lstm", "match")]
    assert all(r["comparison"]["y"]["max_abs"] < 1e-5 for r in reports)


@pytest.mark.needs("torch", "onnxruntime")
def test_a_gru_exported_with_linear_before_reset_0_is_a_mismatch_naming_the_reset_placement(tmp_path):
    found, reports, code = rows(AUDIT / "tagger_reset_before.onnx", "--against", TAGGER)
    assert code == 1
    assert found == [("/gru/GRU", "gru", "mismatch"), ("/lstm/LSTM", "lstm", "match")]
    gru = reports[0]
    assert gru["comparison"]["y"]["max_abs"] > 0.01  # what the broken exporters' files compute: visibly off
    assert gru["diagnosis"]["found"] and "linear_before_reset" in gru["diagnosis"]["message"]
    assert "reset gate before the recurrent matrix" in gru["summary"]
    # one 3-layer GRU alone, as the dynamo exporter wrote it (a chain of nodes), each flag set to 0: verify reads it as
    # the reset-before GRU it is, and names the placement that differs from its source's
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(FIXTURES / "onnx" / "gru3_dynamo.onnx"))
    for node in (n for n in model.graph.node if n.op_type == "GRU"):
        (flag,) = [a for a in node.attribute if a.name == "linear_before_reset"]
        flag.i = 0
    onnx.save(model, str(tmp_path / "gru.onnx"))
    result = run_cli("verify", tmp_path / "gru.onnx", "--against", FIXTURES / "onnx" / "gru3_dynamo.pt", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["verdict"] == "mismatch" and report["spec"]["reset_after"] is False
    assert "applies its reset gate before the recurrent product, gru3_dynamo.pt's after" in report["summary"]


@pytest.mark.needs("torch", "onnxruntime")
def test_swapped_gates_in_a_deployed_lstm_are_named():
    found, reports, code = rows(AUDIT / "tagger_gates_swapped.onnx", "--against", TAGGER)
    assert code == 1 and [v for *_, v in found] == ["match", "mismatch"]
    assert reports[1]["diagnosis"]["mistake"].startswith("gates i (input gate) and f (forget gate) look swapped")


@pytest.mark.needs("tensorflow", "ai_edge_litert")
def test_tensorflows_converter_clip_matches_where_inputs_never_reach_it_and_is_named_where_they_do():
    """TF's converter writes cell_clip=10 for every Keras LSTM: on verify's inputs the tagger's cell states stay
    small (a match, with a warning measuring what the clip moves on inputs that reach it); an LSTM whose cell state
    grows passes 10 on longer inputs, and the mismatch is put down to the clip."""
    found, reports, code = rows(AUDIT / "keras_tagger.tflite", "--against", AUDIT / "keras_tagger.h5")
    assert code == 0, reports
    assert [(c, v) for _, c, v in found] == [("lstm_a", "match"), ("lstm_b", "match")]
    assert all("cell_clip=10" in r["warnings"][0] for r in reports)
    clipped = AUDIT / "keras_clipped.tflite", "--against", AUDIT / "keras_clipped.h5"
    found, reports, code = rows(*clipped)
    assert code == 0 and found[0][2] == "match"
    found, reports, code = rows(*clipped, "--seq-len", "32")
    assert code == 1 and found[0][2] == "mismatch"
    assert reports[0]["comparison"]["c_n"]["max_abs"] > 1  # the clip holds the cell state at 10
    assert (
        "cell_clip=10" in reports[0]["diagnosis"]["message"]
        and "without the clip" in reports[0]["diagnosis"]["message"]
    )


@pytest.mark.needs("torch", "onnxruntime")
def test_layer_pairs_override_the_pairing_by_sizes(tmp_path):
    found, _, code = rows(
        AUDIT / "tagger_torchscript.onnx", "--against", TAGGER, "--layer", "/gru/GRU=gru", "--layer", "/lstm/LSTM=lstm"
    )
    assert code == 0 and found == [("/gru/GRU", "gru", "match"), ("/lstm/LSTM", "lstm", "match")]
    found, reports, code = rows(AUDIT / "tagger_torchscript.onnx", "--against", TAGGER, "--layer", "/gru/GRU=lstm")
    assert code == 2  # a pair whose RNNs differ: that row cannot run, and says so
    assert found[0] == ("/gru/GRU", "lstm", "error") and "holds another" in reports[0]["summary"]
    assert found[1] == ("/lstm/LSTM", None, "not-found")  # a deployed RNN must find its partner, --layer or not
    assert found[2] == ("", "gru", "not-deployed")  # the pairs say what is deployed: a checkpoint's RNN left out is not
    text = run_cli("verify", AUDIT / "tagger_torchscript.onnx", "--against", TAGGER, "--layer", "/gru/GRU=gru", "-q")
    assert text.returncode == 0 and "/gru/GRU = gru: MATCH" in text.stdout


@pytest.mark.needs("torch", "onnxruntime", "tf_keras")
def test_rnns_with_no_partner_are_not_found_in_rows_and_the_exit_code(tmp_path):
    found, reports, code = rows(AUDIT / "tagger_torchscript.onnx", "--against", AUDIT / "keras_tagger.h5")
    assert code == 1
    assert [v for *_, v in found] == ["not-found"] * 4
    assert found[2:] == [("", "lstm_a", "not-found"), ("", "lstm_b", "not-found")]
    assert "has no partner in keras_tagger.h5" in reports[0]["summary"]
    # a deployed RNN the checkpoint lacks: a one-RNN checkpoint of the tagger's GRU
    import torch

    state = torch.load(TAGGER)
    torch.save({k: v for k, v in state.items() if k.startswith("gru.")}, tmp_path / "gru_only.pt")
    found, _, code = rows(AUDIT / "tagger_torchscript.onnx", "--against", tmp_path / "gru_only.pt")
    assert code == 1 and found == [("/gru/GRU", "gru", "match"), ("/lstm/LSTM", None, "not-found")]
    junit, report = tmp_path / "j.xml", tmp_path / "r.json"
    deployed = AUDIT / "tagger_torchscript.onnx"
    result = run_cli("verify", deployed, "--against", tmp_path / "gru_only.pt", "--junit", junit, "--report", report)
    assert result.returncode == 1 and 'failures="1"' in junit.read_text()
    assert [r["verdict"] for r in json.loads(report.read_text())] == ["match", "not-found"]
    assert "/lstm/LSTM: NOT-FOUND" in " ".join(
        run_cli("verify", deployed, "--against", tmp_path / "gru_only.pt", "-q").stdout.split()
    )


@pytest.mark.needs("torch", "onnxruntime")
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--against", AUDIT / "missing.pt"), "missing.pt"),
        (("--against", AUDIT), "--against"),
        (("--layer", "/gru/GRU=gru"), "--against"),
        (("--against", TAGGER, "--layer", "/gru/GRU=nothing"), "has no RNN 'nothing'"),
        (("--against", TAGGER, "--layer", "nothing=gru"), "has no RNN 'nothing'"),
        (("--against", TAGGER, "--layer", "/gru/GRU=gru", "--layer", "/lstm/LSTM=gru"), "another --layer pairs"),
        (("--against", TAGGER, "--layer", "/gru/GRU=gru", "--layer", "/lstm/LSTM"), "DEPLOYED=CHECKPOINT"),
        (("--against", TAGGER, "--layer", "/gru/GRU=gru", "--plot", "p.svg"), "--plot is for one RNN"),
        (("--against", AUDIT / "tagger_openvino.bin"), "tagger_openvino.bin"),
        (("--against", TAGGER, "--backend", "numpy"), "own runtime"),
    ],
)
def test_bad_against_or_pairs_get_one_sentence(args, words, tmp_path):
    assert_clean_failure(run_cli("verify", AUDIT / "tagger_torchscript.onnx", *args, cwd=tmp_path), 2, words)


@pytest.mark.needs("torch", "onnxruntime")
def test_an_encoder_deployed_alone_passes_when_layer_pairs_say_what_is_deployed(tmp_path):
    """tagger_encoder.onnx holds the tagger's GRU alone: --layer pairs it, and the checkpoint's LSTM is listed as not
    deployed (exit 0); without --layer the audit of the whole model still wants every RNN of both files."""
    encoder = AUDIT / "tagger_encoder.onnx"
    found, reports, code = rows(encoder, "--against", TAGGER, "--layer", "/gru/GRU=gru")
    assert code == 0, reports
    assert found == [("/gru/GRU", "gru", "match"), ("", "lstm", "not-deployed")]
    assert "is not deployed" in reports[1]["summary"] and "comparison" not in reports[1]
    junit = tmp_path / "j.xml"
    result = run_cli("verify", encoder, "--against", TAGGER, "--layer", "/gru/GRU=gru", "--junit", junit)
    assert result.returncode == 0 and 'failures="0"' in junit.read_text() and "<skipped" in junit.read_text()
    found, reports, code = rows(encoder, "--against", TAGGER)
    assert code == 1 and found == [("/gru/GRU", "gru", "match"), ("", "lstm", "not-found")]
    assert "--layer DEPLOYED=CHECKPOINT" in reports[1]["summary"] and "not deployed" in reports[1]["summary"]


@pytest.mark.needs("torch")
def test_a_checkpoint_rnn_converted_alone_and_back_passes_its_audit_with_its_pair(tmp_path):
    """The tagger's GRU to a cuDNN blob and back to PyTorch: back.pt holds the GRU alone, and the audit against the
    whole checkpoint passes with the pair named (the LSTM was never converted: not deployed)."""
    blob, back = tmp_path / "t.bin", tmp_path / "back.pt"
    assert run_cli("convert", TAGGER, blob, "--layer", "gru").returncode == 0
    assert run_cli("cudnn-to-torch", blob, "-o", back).returncode == 0
    found, reports, code = rows(back, "--against", TAGGER, "--layer", "rnn=gru")
    assert code == 0, reports
    assert found == [("rnn", "gru", "match"), ("", "lstm", "not-deployed")]


@pytest.mark.needs("torch", "onnxruntime")
def test_a_gate_swap_in_one_stored_tensor_is_named(tmp_path):
    """i and f exchanged in one tensor alone (the others right), as a person breaks a file: the diagnosis names the
    tensor, by the file's own name where it has one (a state_dict's lstm.weight_ih_l0) and by the format's and the
    node's in an ONNX file, and names the files, not "the blob"."""
    import torch

    lstm = {k: v.clone() for k, v in torch.load(TAGGER).items() if k.startswith("lstm.")}
    torch.save(lstm, tmp_path / "lstm.pt")
    weights, hidden = lstm["lstm.weight_ih_l0"], 4  # PyTorch's gate blocks i, f, g, o
    weights[:hidden], weights[hidden : 2 * hidden] = weights[hidden : 2 * hidden].clone(), weights[:hidden].clone()
    torch.save(lstm, tmp_path / "broken.pt")
    result = run_cli("verify", tmp_path / "broken.pt", "--against", tmp_path / "lstm.pt", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["diagnosis"]["found"], report
    assert report["diagnosis"]["mistake"] == (
        "gates i (input gate) and f (forget gate) look swapped in lstm.weight_ih_l0 alone"
    )
    assert report["diagnosis"]["message"].endswith("broken.pt matches lstm.pt when read that way")

    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(AUDIT / "tagger_torchscript.onnx"))
    (node,) = [n for n in model.graph.node if n.op_type == "LSTM"]
    initializers = {t.name: t for t in model.graph.initializer}
    w = onnx.numpy_helper.to_array(initializers[node.input[1]]).copy()  # (1, 4H, in): ONNX's gates i, o, f, c
    w[:, :hidden], w[:, 2 * hidden : 3 * hidden] = w[:, 2 * hidden : 3 * hidden].copy(), w[:, :hidden].copy()
    initializers[node.input[1]].CopyFrom(onnx.numpy_helper.from_array(w, node.input[1]))
    onnx.save(model, str(tmp_path / "w_swapped.onnx"))
    found, reports, code = rows(tmp_path / "w_swapped.onnx", "--against", TAGGER)
    assert code == 1 and [v for *_, v in found] == ["match", "mismatch"]
    assert reports[1]["diagnosis"]["mistake"] == (
        "gates i (input gate) and f (forget gate) look swapped in W[0] of node '/lstm/LSTM' alone"
    )
    assert "w_swapped.onnx matches tagger.pt when read that way" in reports[1]["summary"]


@pytest.mark.needs("torch", "onnxruntime")
def test_the_audit_reads_at_80_columns_and_its_last_line_gives_the_verdict():
    """A CI log's 80 columns: each RNN two lines (name, verdict and spec; the summary), not a table wrapping each
    summary to a dozen lines; the last line says the verdict of them all, not "1 of 2 RNNs verified"."""
    result = run_cli(
        "verify", AUDIT / "tagger_gates_swapped.onnx", "--against", TAGGER, env={"COLUMNS": "80", "NO_COLOR": "1"}
    )
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "/gru/GRU = gru: MATCH (exit 0), gru in 5 hidden 7 float32"
    assert lines[2] == "/lstm/LSTM = lstm: MISMATCH (exit 1), lstm in 7 hidden 4 float32"
    assert lines[3].startswith("  /lstm/LSTM differs from lstm of tagger.pt by up to")
    assert lines[4:] == ["MISMATCH: 1 of 2 RNNs match; 1 mismatch"]
    assert "the blob" not in result.stdout


@pytest.mark.needs("torch", "onnxruntime")
def test_the_summary_is_a_markdown_table_of_the_rows(tmp_path):
    """--summary: the markdown a CI job shows (GitHub's step summary), one row per RNN with its verdict, largest
    difference against the tolerance and diagnosis; written also when verify cannot run."""
    summary = tmp_path / "summary.md"
    result = run_cli("verify", AUDIT / "tagger_gates_swapped.onnx", "--against", TAGGER, "--summary", summary)
    assert result.returncode == 1, result.stderr
    heading, _, counted, _, header, rule, *table = summary.read_text().splitlines()
    assert heading == "### ❌ rnnconv verify: MISMATCH \\(exit 1\\)"
    assert counted.endswith("1 of 2 RNNs match\\; 1 mismatch")
    assert header == "| RNN | verdict | largest difference | diagnosis |" and rule.count("---") == 4
    assert [row.split(" | ")[1] for row in table] == ["✅ MATCH", "❌ MISMATCH"]
    assert "0.491 \\(tolerance 0.0001 \\+ 0.001·\\|x\\|\\)" in table[1] and "look swapped" in table[1]
    assert_clean_failure(run_cli("verify", AUDIT / "tagger_gates_swapped.onnx", "--summary", summary), 2, "exists")
    missing = run_cli("verify", tmp_path / "gone.bin", "--summary", summary, "--force")
    assert missing.returncode == 2 and "ERROR \\(exit 2\\)" in summary.read_text()
    assert "gone\\.bin does not exist" in summary.read_text()


def test_the_summary_shows_what_a_file_names_as_text():
    """Names and sentences come from the files verified: none makes a link, an image, HTML or a cell of its own."""
    from rnnconv.core.report_contracts import Report
    from rnnconv.verification.summary import markdown

    hostile = "![x](https://example.invalid/x.png) <img src=x> | `code` **b**\n| row |"
    (row,) = markdown([Report(verdict="error", summary=hostile, blob="m.onnx", name=hostile)]).splitlines()[6:]
    name, verdict, _, why = row.removeprefix("| ").removesuffix(" |").split(" | ")  # four cells, one line
    assert verdict == "❌ ERROR"
    for cell in (name, why):
        assert "example" in cell and not re.search(r"[!-/:-@\[-`{-~]", re.sub(r"\\.", "", cell))  # each one escaped


@pytest.mark.needs("torch", "onnxruntime")
def test_a_cudnn_blob_is_a_checkpoint_to_audit_against(tmp_path):
    """The tagger's RNNs in one rnnconv .safetensors: the deployed ONNX is audited against the blobs, run in the numpy
    reference; the exporter's reset placement is still named."""
    blobs = tmp_path / "tagger.safetensors"
    assert run_cli("convert", TAGGER, blobs).returncode == 0
    found, reports, code = rows(AUDIT / "tagger_torchscript.onnx", "--against", blobs)
    assert code == 0 and found == [("/gru/GRU", "gru", "match"), ("/lstm/LSTM", "lstm", "match")], reports
    assert all(r["source"]["run"].startswith("numpy") for r in reports)
    found, reports, code = rows(AUDIT / "tagger_reset_before.onnx", "--against", blobs)
    assert code == 1 and "linear_before_reset" in reports[0]["diagnosis"]["message"]
