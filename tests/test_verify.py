"""verify: correct conversions pass with small errors, broken blobs fail with the right diagnosis."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core.canonical import ParamKey
from rnnconv.core.contracts import dump
from rnnconv.formats import _safetensors
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.formats.cudnn.wire import sidecar_path
from rnnconv.verification.run import verify
from rnnconv.verification.subject import VerifyOptions

# verify runs each source in its own framework
pytestmark = pytest.mark.needs("torch", "keras", "tf_keras")
K3, TFK, K2, TORCH = (FIXTURES / d for d in ("keras3", "tf_keras", "keras2", "torch"))

SOURCES = [
    *[
        (K3 / "mixed.keras", layer)
        for layer in (
            "gru_a",
            "bidi_lstm",
            "srnn_relu",
            "srnn_tanh",
            "gru_nobias",
            "bidi_gru",
            "lstm_nobias",
            "rnn_lstmcell",
        )
    ],
    (K3 / "mixed.h5", "bidi_gru"),
    (K3 / "mixed.weights.h5", "bidi_lstm"),
    (K3 / "bf16_gru.keras", None),
    (TFK / "cudnn.h5", "cudnn_lstm"),
    (TFK / "cudnn.h5", "cudnn_gru"),
    (TFK / "cudnn.h5", "bidi_cudnn_lstm"),
    (TFK / "mixed.h5", "bidi_lstm"),
    (TFK / "mixed_weights.h5", "gru_a"),
    (K2 / "mixed.h5", "bidi_gru"),
    (K2 / "cudnn.h5", "bidi_cudnn_lstm"),
    (TORCH / "lstm_proj.pt", None),
    (TORCH / "seq2seq.pt", "encoder.rnn"),
    (TORCH / "seq2seq.pt", "decoder.rnn"),
    (TORCH / "dataparallel_gru.pth", None),
    (TORCH / "rnn_relu.safetensors", None),
    (TORCH / "rnn_tanh.pt", None),
    (TORCH / "cells.pt", "lstm"),
    (TORCH / "cells.pt", "gru"),
    (TORCH / "gru_bf16.pt", None),
    (TORCH / "lstm_legacy.pt", None),
]


def to_blob(source: Path, layer: str | None, out: Path, dtype: str | None = None) -> Path:
    nonlinearity = "relu" if "relu" in source.name else "tanh"
    rnnconv.convert(source, out, to="cudnn", layer=layer, nonlinearity=nonlinearity, dtype=dtype)
    return out


def assert_match(report, label: str) -> None:
    data = dump(report)
    assert data["verdict"] == "match", data["summary"]
    errors = [data["comparison"][k]["max_abs"] for k in ("y", "h_n", "c_n") if k in data["comparison"]]
    assert 0 < max(errors) <= data["tolerance"]["atol"], errors  # numbers were compared, and they agree
    LARGEST_ERRORS[f"verify {label} [{data['spec']['dtype']}]"] = max(errors)


@pytest.mark.parametrize("source,layer", SOURCES, ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_correct_conversions_verify(source, layer, tmp_path):
    blob = to_blob(source, layer, tmp_path / "x.bin")
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert_match(report, f"{source.parent.name}/{source.name}/{layer}")
    assert report.exit_code == 0
    assert dump(report)["backend"]["name"] == "numpy"
    assert dump(report)["inputs"]["seq_len"] >= 2 and dump(report)["inputs"]["batch"] > 1


@pytest.mark.parametrize(
    "source,layer",
    [
        (TORCH / "seq2seq.pt", "encoder.rnn"),
        (K3 / "mixed.keras", "bidi_gru"),
        (TORCH / "cells.pt", "gru"),
        (K3 / "mixed.keras", "bidi_lstm"),
    ],
)
def test_ragged_batches_verify(source, layer, tmp_path):
    blob = to_blob(source, layer, tmp_path / "x.bin")
    report = verify(blob, VerifyOptions(backend="numpy", ragged=True, batch=4, seq_len=7))
    assert len(set(dump(report)["inputs"]["lengths"])) > 1
    assert_match(report, f"ragged {source.name}/{layer}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes_verify(dtype, tmp_path):
    blob = to_blob(TORCH / "seq2seq.pt", "encoder.rnn", tmp_path / "x.bin", dtype)
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "match", dump(report)["summary"]


# --- deliberately broken blobs --------------------------------------------------------------


def corrupted(blob_path: Path, out: Path, change) -> Path:
    """A copy of the blob (and sidecar) whose tensors `change(read, write)` rewrites through the layout."""
    blob = open_bin(blob_path)
    words = np.array(blob.words)

    def read(key: ParamKey) -> np.ndarray:
        return blob.param(key).copy()

    def write(key: ParamKey, value: np.ndarray) -> None:
        region = blob.places[key]
        words[region.offset : region.offset + region.size] = value.astype(words.dtype).reshape(-1)

    change(read, write, blob.spec)
    out.write_bytes(words.tobytes())
    shutil.copy(sidecar_path(blob_path), sidecar_path(out))
    return out


def swap_gates(a: str, b: str, cells):
    def change(read, write, spec):
        for layer, direction in cells(spec):
            for kind in ("W", "R", "bW", "bR"):
                ka, kb = ParamKey(layer, direction, kind, a), ParamKey(layer, direction, kind, b)
                va, vb = read(ka), read(kb)
                write(ka, vb)
                write(kb, va)

    return change


def swap_gates_in(kind: str, a: str, b: str, cells):
    """Gates a and b exchanged in one kind of tensor (W, R, bW or bR) only, of the cells `cells(spec)` gives."""

    def change(read, write, spec):
        for cell in cells(spec):
            ka, kb = ParamKey(*cell, kind, a), ParamKey(*cell, kind, b)
            va, vb = read(ka), read(kb)
            write(ka, vb)
            write(kb, va)

    return change


def swap_directions(read, write, spec):
    for key in spec.param_keys():
        if key.direction == 0:
            other = ParamKey(key.layer, 1, key.kind, key.gate)
            va, vb = read(key), read(other)
            write(key, vb)
            write(other, va)


def transpose_input_matrices(read, write, spec):
    for key in spec.param_keys():
        if key.kind == "W":
            write(key, read(key).T.reshape(spec.param_shape(key)))  # W's bytes stored as W.T


def swap_biases(read, write, spec):
    for key in spec.param_keys():
        if key.kind == "bW":
            other = ParamKey(key.layer, key.direction, "bR", key.gate)
            va, vb = read(key), read(other)
            write(key, vb)
            write(other, va)


def every_cell(spec):
    return [(layer, d) for layer in range(spec.num_layers) for d in range(spec.num_directions)]


CORRUPTIONS = {
    "two gates swapped everywhere": (
        TORCH / "seq2seq.pt",
        "encoder.rnn",
        swap_gates("i", "f", every_cell),
        "gates i (input gate) and f (forget gate) look swapped in every layer and direction",
    ),
    "two gates swapped in one cell": (
        TORCH / "seq2seq.pt",
        "encoder.rnn",
        swap_gates("c", "o", lambda s: [(1, 1)]),
        "gates c (cell candidate) and o (output gate) of layer 1 reverse look swapped",
    ),
    "two gates swapped in one tensor of one cell": (
        TORCH / "seq2seq.pt",
        "encoder.rnn",
        swap_gates_in("W", "i", "f", lambda s: [(1, 1)]),
        "gates i (input gate) and f (forget gate) look swapped in W of layer 1 (reverse) alone",
    ),
    "two gates swapped in one tensor of every cell": (
        TORCH / "seq2seq.pt",
        "encoder.rnn",
        swap_gates_in("R", "c", "o", every_cell),
        "gates c (cell candidate) and o (output gate) look swapped in every cell's recurrent matrix alone (R of layer "
        "0 (forward), R of layer 0 (reverse), R of layer 1 (forward), R of layer 1 (reverse))",
    ),
    "GRU reset and update swapped": (
        K3 / "mixed.keras",
        "gru_a",
        swap_gates("r", "z", every_cell),
        "gates r (reset gate) and z (update gate) look swapped",
    ),
    "directions swapped": (
        K3 / "mixed.keras",
        "bidi_gru",
        swap_directions,
        "the forward and reverse directions look swapped",
    ),
    "input matrices transposed": (
        TORCH / "seq2seq.pt",
        "decoder.rnn",
        transpose_input_matrices,
        "the input matrices look stored transposed",
    ),
    "biases moved": (K3 / "mixed.keras", "gru_a", swap_biases, "the input and recurrent biases look swapped"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_broken_blobs_fail_with_the_right_diagnosis(case, tmp_path):
    source, layer, change, expected = CORRUPTIONS[case]
    good = to_blob(source, layer, tmp_path / "good.bin")
    bad = corrupted(good, tmp_path / "bad.bin", change)
    report = verify(bad, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "mismatch" and report.exit_code == 1
    assert dump(report)["comparison"]["match"] is False
    worst = max(dump(report)["comparison"][k]["max_abs"] for k in ("y", "h_n"))
    assert worst > 10 * dump(report)["tolerance"]["atol"]
    diagnosis = dump(report)["diagnosis"]
    assert diagnosis["found"], diagnosis
    assert diagnosis["mistake"] == expected, diagnosis["mistake"]


@pytest.mark.slow
def test_cli_reports_a_mismatch_with_exit_1_and_json(tmp_path):
    good = to_blob(K3 / "mixed.keras", "bidi_gru", tmp_path / "good.bin")
    bad = corrupted(good, tmp_path / "bad.bin", swap_directions)
    report_path = tmp_path / "report.json"
    result = run_cli("verify", bad, "--backend", "numpy", "--report", report_path)
    assert result.returncode == 1, result.stderr
    text = " ".join(result.stdout.split())
    assert "MISMATCH" in text and "The forward and reverse directions look swapped" in text
    report = json.loads(report_path.read_text())
    assert report["verdict"] == "mismatch" and report["diagnosis"]["found"]
    for key in ("spec", "backend", "versions", "inputs", "comparison", "tolerance", "source"):
        assert key in report
    assert report["inputs"]["seed"] == 0 and "y_per_step" in report["comparison"]


@pytest.mark.slow
def test_cli_match_exit_0(tmp_path):
    blob = to_blob(TORCH / "lstm_proj.pt", None, tmp_path / "x.bin")
    result = run_cli("verify", blob, "--report", tmp_path / "r.json", "--seq-len", "5", "--batch", "2", "--seed", "9")
    assert result.returncode == 0, result.stderr
    assert "MATCH" in result.stdout and "warning" not in result.stderr  # the documented fallback is no warning
    assert "auto: no cuDNN here" in " ".join(result.stdout.split())
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backend"]["cudnn_unavailable"]
    assert report["inputs"] == {**report["inputs"], "seed": 9, "seq_len": 5, "batch": 2}
    assert report["backend"]["name"] == "numpy" and report["verdict"] == "match"


@pytest.mark.slow
def test_against_another_copy_of_the_source(tmp_path):
    source = tmp_path / "model.keras"
    shutil.copy(K3 / "mixed.keras", source)
    blob = to_blob(source, "gru_a", tmp_path / "x.bin")
    moved = tmp_path / "elsewhere.keras"
    source.rename(moved)
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "structure-only" and report.exit_code == 2  # no silent green verdict
    assert "no numerical comparison was possible" in dump(report)["summary"]
    allowed = verify(blob, VerifyOptions(backend="numpy", allow_structure_only=True))
    assert allowed.verdict == "structure-only" and allowed.exit_code == 0
    result = run_cli("verify", blob, "--require-source")
    assert_clean_failure(result, 2, "no numerical comparison is possible", "--against")
    assert_match(verify(blob, VerifyOptions(backend="numpy", against=moved)), "against")


@pytest.mark.slow
def test_changed_source_is_warned_about(tmp_path):
    source = tmp_path / "model.h5"
    shutil.copy(K3 / "mixed.h5", source)
    blob = to_blob(source, "bidi_lstm", tmp_path / "x.bin")
    with h5py.File(source, "r+") as f:
        kernel = f["model_weights/bidi_lstm/bidi_lstm/forward_lstm/lstm_cell/kernel"]
        kernel[0, 0] = kernel[0, 0] + 0.5
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert any("changed since the blob was made" in w for w in report.warnings)
    assert dump(report)["verdict"] == "mismatch"  # and the changed weight is caught by the numbers


def _digest_check(report) -> dict:
    (check,) = [c for c in dump(report)["checks"] if c["check"] == "written digest"]
    return check


@pytest.mark.parametrize("name", ["x.bin", "x.safetensors"])
def test_a_blob_changed_since_it_was_written_is_said_whatever_the_verdict(name, tmp_path):
    """A flipped low mantissa bit still verifies MATCH (within the tolerance, rightly), and nothing said the blob had
    changed: the sidecar recorded its source's digest, not the blob's own."""
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / name)
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "match" and _digest_check(report)["ok"], _digest_check(report)
    start = 0  # the weight space's first byte
    if name.endswith(".safetensors"):
        header, data = _safetensors.read_header(blob)
        start = data + next(v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    with open(blob, "r+b") as f:
        f.seek(start)
        first = f.read(1)
        f.seek(start)
        f.write(bytes([first[0] ^ 1]))  # the lowest mantissa bit of a little-endian float32
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "match"  # the numbers still agree within the tolerance
    check = _digest_check(report)
    assert not check["ok"] and "changed since it was written" in check["detail"], check
    assert any("changed since it was written" in w for w in report.warnings), report.warnings


def test_a_sidecar_an_older_rnnconv_wrote_verifies_as_before_saying_it_has_no_digest(tmp_path):
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    side = sidecar_path(blob)
    doc = json.loads(side.read_text())
    del doc["weight_space"]["digest"]
    doc["schema_version"] = 3
    side.write_text(json.dumps(doc))
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "match" and not report.warnings, report.warnings
    check = _digest_check(report)
    assert check["ok"] and "none recorded" in check["detail"], check


def test_structure_problems_fail(tmp_path):
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    words = np.fromfile(blob, "<f4")
    words[3] = np.nan
    words.tofile(blob)
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert dump(report)["verdict"] == "mismatch"
    assert any(c["check"] == "finite values" and not c["ok"] for c in dump(report)["checks"])
    side = sidecar_path(blob)
    doc = json.loads(side.read_text())
    doc["tensors"][0]["offset_bytes"] += 4
    side.write_text(json.dumps(doc))
    report = verify(blob, VerifyOptions(backend="numpy"))
    assert any(c["check"] == "tensor table" and not c["ok"] for c in dump(report)["checks"])


@pytest.mark.slow
def test_raw_blob_against_its_source(tmp_path):
    blob = to_blob(TORCH / "seq2seq.pt", "decoder.rnn", tmp_path / "x.bin")
    raw = tmp_path / "weights.raw"
    raw.write_bytes(blob.read_bytes())
    result = run_cli("verify", raw, "--mode", "gru", "--input-size", "18", "--hidden-size", "7")
    assert result.returncode == 2 and "STRUCTURE-ONLY" in result.stdout  # nothing compared: not a pass
    result = run_cli(
        "verify", raw, "--mode", "gru", "--input-size", "18", "--hidden-size", "7", "--allow-structure-only"
    )
    assert result.returncode == 0 and "STRUCTURE-ONLY" in result.stdout
    result = run_cli(
        "verify", raw, "--mode", "gru", "--input-size", "18", "--hidden-size", "7", "--against", TORCH / "seq2seq.pt"
    )
    assert_clean_failure(result, 2, "holds 2 RNNs")  # a raw blob names no prefix: the source must be unambiguous
    only = tmp_path / "decoder.pt"
    import torch

    state = torch.load(TORCH / "seq2seq.pt", weights_only=True)["state_dict"]
    torch.save({k[len("decoder.rnn.") :]: v for k, v in state.items() if k.startswith("decoder.rnn.")}, only)
    result = run_cli("verify", raw, "--mode", "gru", "--input-size", "18", "--hidden-size", "7", "--against", only)
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
def test_cudnn_backend_without_a_gpu_exits_3(tmp_path):
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    result = run_cli("verify", blob, "--backend", "cudnn")
    from rnnconv.gpu.backend import probe

    if probe().ok:
        pytest.skip("this machine has a GPU")
    assert_clean_failure(result, 3, "the cuDNN backend cannot run here")
    assert "CUDA driver" in result.stderr or "pycuda" in result.stderr


@pytest.mark.slow
def test_bad_verify_inputs(tmp_path):
    assert_clean_failure(run_cli("verify", tmp_path / "none.bin"), 2, "does not exist")
    keras = run_cli("verify", FIXTURES / "keras3" / "lstm.h5")  # a model of the user's: the source of a conversion
    assert keras.returncode == 2 and "lstm.h5 is a Keras file that records no source" in " ".join(keras.stdout.split())
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    assert_clean_failure(run_cli("verify", blob, "--seq-len", "1"), 2, "--seq-len of at least 2")
    assert_clean_failure(run_cli("verify", blob, "--against", tmp_path / "gone.pt"), 2, "does not exist")
    all_rnns = tmp_path / "all.safetensors"
    rnnconv.convert(TORCH / "seq2seq.pt", all_rnns, to="cudnn")
    assert_clean_failure(run_cli("verify", all_rnns), 2, "holds 2 RNNs", "--layer")
    result = run_cli("verify", all_rnns, "--layer", "decoder.rnn", "--backend", "numpy")
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr


@pytest.mark.slow
def test_a_report_asked_for_is_written_when_verify_cannot_run(tmp_path):
    """A CI step always gets its report: verdict error (exit 2) or backend-missing (exit 3), with the reason."""
    from rnnconv.core.report_contracts import Report
    from rnnconv.gpu.backend import probe

    report = tmp_path / "r.json"
    missing = run_cli("verify", tmp_path / "nothing.bin", "--report", report)
    assert_clean_failure(missing, 2)
    written = Report.model_validate_json(report.read_text())
    assert written.verdict == "error" and written.exit_code == 2 and "nothing.bin" in written.summary
    if not probe().ok:
        blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
        no_gpu = run_cli("verify", blob, "--backend", "cudnn", "--report", report, "--force")
        assert_clean_failure(no_gpu, 3)
        written = Report.model_validate_json(report.read_text())
        assert written.verdict == "backend-missing" and written.exit_code == 3
    before = report.read_bytes()  # an existing report is still replaced only with --force
    assert_clean_failure(run_cli("verify", tmp_path / "nothing.bin", "--report", report), 2, "does not exist")
    assert report.read_bytes() == before


@pytest.mark.slow
def test_a_checkpoint_named_like_a_blob_is_named_for_what_it_is(tmp_path):
    """pytorch_model.bin is a PyTorch checkpoint, not a blob: verify says so and how to check a conversion from it."""
    named = tmp_path / "pytorch_model.bin"
    shutil.copy(TORCH / "rnn_tanh.pt", named)
    result = run_cli("verify", named)
    text = " ".join(result.stdout.split())
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    assert "pytorch_model.bin is a PyTorch file that records no source" in text
    assert f"`rnnconv convert {named} OUT`" in text


def test_a_cudnn_blob_is_the_source_of_what_is_converted_from_it(tmp_path):
    """cudnn-to-torch writes back.pt recording the blob as its source: verify runs the blob (its sidecar's, or a raw
    one described by the raw-blob flags) in the numpy reference of cuDNN's equations as the source, recorded or
    --against; a blob that is not what the file was made from is a mismatch, diagnosed."""
    tagger = FIXTURES / "audit" / "tagger.pt"
    blob, back = to_blob(tagger, "gru", tmp_path / "t.bin"), tmp_path / "back.pt"
    assert run_cli("cudnn-to-torch", blob, "-o", back).returncode == 0
    for against in ((), ("--against", blob)):
        result = run_cli("verify", back, *against, "--json")
        report = json.loads(result.stdout)
        assert result.returncode == 0, result.stdout + result.stderr
        assert report["verdict"] == "match" and report["source"]["format"] == "cudnn-bin"
        assert report["source"]["layer"] == "gru" and report["source"]["run"].startswith("numpy")
        assert 0 < report["comparison"]["y"]["max_abs"] < 1e-5

    swapped = corrupted(blob, tmp_path / "swapped.bin", swap_gates("r", "z", every_cell))
    report = json.loads(run_cli("verify", back, "--against", swapped, "--json").stdout)
    assert report["verdict"] == "mismatch" and "r (reset gate) and z (update gate)" in report["diagnosis"]["mistake"]

    raw, flags = tmp_path / "weights.raw", ("--mode", "gru", "--input-size", "5", "--hidden-size", "7")
    raw.write_bytes(blob.read_bytes())
    assert run_cli("cudnn-to-torch", raw, *flags, "-o", tmp_path / "raw_back.pt").returncode == 0
    assert_clean_failure(run_cli("verify", tmp_path / "raw_back.pt"), 2, "a raw blob needs --mode")
    assert run_cli("verify", tmp_path / "raw_back.pt", *flags).returncode == 0
    assert run_cli("verify", back, "--against", raw, *flags).returncode == 0
    assert_clean_failure(run_cli("verify", back, "--against", tagger, *flags), 2, "leave them out")
    assert_clean_failure(
        run_cli("verify", back, "--against", raw, "--mode", "gru", "--input-size", "5", "--hidden-size", "8"),
        2,
        "weights.raw holds 1176 bytes",
    )
