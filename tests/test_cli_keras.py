"""The command line as a user meets it: outputs, refusals, bad input, exit codes."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, assert_clean_failure, run_cli

K3 = FIXTURES / "keras3"


def test_single_layer_file_converts_with_no_flags(tmp_path):
    source = tmp_path / "model.keras"
    shutil.copy(K3 / "lstm.keras", source)
    result = run_cli("keras-to-cudnn", source)
    assert result.returncode == 0, result.stderr
    blob, sidecar = tmp_path / "model.bin", tmp_path / "model.bin.json"
    doc = json.loads(sidecar.read_text())
    spec = doc["spec"]
    assert (
        spec["mode"],
        spec["input_size"],
        spec["hidden_size"],
        spec["num_layers"],
        spec["bidirectional"],
        spec["proj_size"],
        spec["bias_mode"],
        spec["dtype"],
    ) == ("lstm", 5, 7, 1, False, 0, "double", "float32")
    assert doc["layout"]["name"] == "cudnn-flat" and doc["layout"]["version"] == 1
    assert doc["source"]["format"] == "keras-archive" and doc["source"]["layer"] == "lstm"
    assert doc["source"]["digest"].startswith("blake3:") and len(doc["source"]["digest"]) == 7 + 64
    assert doc["rnnconv_version"]
    assert blob.stat().st_size == doc["weight_space"]["bytes"] == 4 * 4 * 7 * (5 + 7 + 2)
    # the tensor table covers the blob exactly, without gaps or overlaps
    ends = sorted((t["offset_bytes"], t["offset_bytes"] + 4 * int(np.prod(t["shape"]))) for t in doc["tensors"])
    assert ends[0][0] == 0 and ends[-1][1] == blob.stat().st_size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ends))


def test_json_report(tmp_path):
    result = run_cli("keras-to-cudnn", K3 / "mixed.h5", "--layer", "bidi_gru", "-o", tmp_path / "g.bin", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rnns"][0]["spec"]["bidirectional"] is True
    assert report["outputs"] == [str(tmp_path / "g.bin"), str(tmp_path / "g.bin.json")]


@pytest.mark.slow
def test_several_layers_need_a_choice_and_unknown_names_list_the_real_ones(tmp_path):
    result = run_cli("keras-to-cudnn", K3 / "mixed.h5", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, "has 10 recurrent layers", "--layer", "gru_a", "bidi_lstm")
    result = run_cli("keras-to-cudnn", K3 / "mixed.h5", "--layer", "encoder", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, "no recurrent layer named 'encoder'", "gru_a, bidi_lstm, srnn_relu")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_safetensors_holds_every_convertible_layer(tmp_path):
    from safetensors.numpy import load_file

    out = tmp_path / "all.safetensors"
    result = run_cli("keras-to-cudnn", K3 / "mixed.keras", "-o", out)
    assert result.returncode == 0, result.stderr
    assert "skipped gru_reset_before" in result.stderr and "skipped lstm_hard_sigmoid" in result.stderr
    tensors = load_file(out)
    assert sorted(tensors) == sorted(
        ["gru_a", "bidi_lstm", "srnn_relu", "srnn_tanh", "gru_nobias", "bidi_gru", "lstm_nobias", "rnn_lstmcell"]
    )
    from safetensors import safe_open

    with safe_open(out, "numpy") as f:
        meta = f.metadata()
    for name, array in tensors.items():
        single = tmp_path / f"{name}.bin"
        assert run_cli("keras-to-cudnn", K3 / "mixed.keras", "--layer", name, "-o", single).returncode == 0
        np.testing.assert_array_equal(array, np.fromfile(single, "<f4"))
        doc = json.loads(meta[name])
        assert doc["spec"] == json.loads((tmp_path / f"{name}.bin.json").read_text())["spec"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype,numpy_type", [("float16", "<f2"), ("float64", "<f8"), ("bfloat16", None)])
def test_dtypes(dtype, numpy_type, tmp_path):
    base, other = tmp_path / "f32.bin", tmp_path / f"{dtype}.bin"
    assert run_cli("keras-to-cudnn", K3 / "lstm.h5", "-o", base).returncode == 0
    assert run_cli("keras-to-cudnn", K3 / "lstm.h5", "-o", other, "--dtype", dtype).returncode == 0
    f32 = np.fromfile(base, "<f4")
    if numpy_type:
        np.testing.assert_array_equal(np.fromfile(other, numpy_type), f32.astype(numpy_type))
    else:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        np.testing.assert_array_equal(np.fromfile(other, "<u2"), f32.astype(ml_dtypes.bfloat16).view("<u2"))
    assert json.loads((tmp_path / f"{dtype}.bin.json").read_text())["spec"]["dtype"] == dtype


@pytest.mark.slow
def test_refusal_explains_and_writes_nothing(tmp_path):
    result = run_cli("keras-to-cudnn", K3 / "gru_reset_before.h5", "-o", tmp_path / "x.bin")
    assert_clean_failure(
        result, 2, "reset gate applied before the recurrent product", "not cuDNN's", "Keras's reset_after=False"
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "x.bin"
    assert run_cli("keras-to-cudnn", K3 / "lstm.h5", "-o", out).returncode == 0
    before = out.read_bytes()
    out.write_bytes(b"precious")
    assert_clean_failure(run_cli("keras-to-cudnn", K3 / "lstm.h5", "-o", out), 2, "already exists", "--force")
    assert out.read_bytes() == b"precious"
    assert run_cli("keras-to-cudnn", K3 / "lstm.h5", "-o", out, "--force").returncode == 0
    assert out.read_bytes() == before


def _truncated(tmp_path: Path) -> Path:
    path = tmp_path / "truncated.h5"
    path.write_bytes((K3 / "mixed.h5").read_bytes()[:30000])
    return path


def _zip_without_config(tmp_path: Path) -> Path:
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model.weights.h5", b"")
    return path


def _plain_hdf5(tmp_path: Path) -> Path:
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    return path


def _contradicting(tmp_path: Path) -> Path:
    path = tmp_path / "contradicting.h5"
    shutil.copy(K3 / "lstm.h5", path)
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        config["config"]["layers"][1]["config"]["units"] = 9
        f.attrs["model_config"] = json.dumps(config)
    return path


def _bad_config_json(tmp_path: Path) -> Path:
    path = tmp_path / "broken.keras"
    with zipfile.ZipFile(K3 / "lstm.keras") as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, b"{not json" if item.filename == "config.json" else src.read(item))
    return path


BAD_INPUTS = {
    "missing file": (lambda t: t / "nope.h5", "does not exist"),
    "directory": (lambda t: t, "is a directory"),
    "empty file": (lambda t: (t / "empty.h5", (t / "empty.h5").write_bytes(b""))[0], "is empty (0 bytes)"),
    "random bytes": (
        lambda t: (t / "r.h5", (t / "r.h5").write_bytes(np.random.default_rng(1).bytes(4096)))[0],
        "is not a Keras file",
    ),
    "truncated HDF5": (_truncated, "truncated or corrupt"),
    "truncated .keras": (
        lambda t: (t / "t.keras", (t / "t.keras").write_bytes((K3 / "lstm.keras").read_bytes()[:5000]))[0],
        "looks like a zip archive but cannot be read (truncated or corrupt)",
    ),
    "zip without config.json": (_zip_without_config, "without config.json"),
    "HDF5 that is not Keras": (_plain_hdf5, "not a Keras model or weights file"),
    "shapes contradicting the config": (_contradicting, "'lstm/lstm_cell/kernel' has shape (5, 28)"),
    "config.json not JSON": (_bad_config_json, "config.json cannot be read"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gets_one_sentence_and_exit_2(case, tmp_path):
    make, phrase = BAD_INPUTS[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    source = make(inputs)
    out = tmp_path / "out.bin"
    assert_clean_failure(run_cli("keras-to-cudnn", source, "-o", out), 2, phrase)
    assert not out.exists() and not (tmp_path / "out.bin.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in"]  # no temporary left either


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,phrase",
    [
        (["-o", "x.txt"], "must end in .bin"),
        (["-o", "missing_dir/x.bin"], "does not exist"),
        (["-o", "x.bin", "--dtype", "float8"], "Invalid value for '--dtype'"),
        (["-o", "x.bin", "--bias-split", "sideways"], "Invalid value for '--bias-split'"),
    ],
)
def test_bad_arguments(args, phrase, tmp_path):
    result = run_cli("keras-to-cudnn", K3 / "lstm.h5", *args, cwd=tmp_path)
    assert_clean_failure(result, 2, phrase)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_nan_weights_warn_but_convert(tmp_path):
    source = tmp_path / "nan.h5"
    shutil.copy(K3 / "lstm.h5", source)
    with h5py.File(source, "r+") as f:
        kernel = f["model_weights/lstm/lstm/lstm_cell/kernel"]
        values = kernel[...]
        values[0, 0] = np.nan
        kernel[...] = values
    result = run_cli("keras-to-cudnn", source, "-o", tmp_path / "x.bin")
    assert result.returncode == 0
    assert "warning: lstm: layer0.fwd.W_i holds 1 NaN or Inf value(s)" in " ".join(result.stderr.split())
    assert json.loads((tmp_path / "x.bin.json").read_text())["warnings"]


@pytest.mark.slow
def test_converter_imports_no_framework(tmp_path):
    """keras-to-cudnn reads every Keras format with h5py alone."""
    sources = [K3 / "mixed.h5", K3 / "mixed.keras", K3 / "mixed.weights.h5", FIXTURES / "tf_keras" / "cudnn.h5"]
    code = f"""
import sys
from rnnconv.cli.commands import app
for i, source in enumerate({[str(s) for s in sources]!r}):
    try:
        app(["keras-to-cudnn", source, "-o", {str(tmp_path)!r} + f"/{{i}}.safetensors", "-q"])
    except SystemExit as exc:
        assert exc.code == 0, exc.code
loaded = sorted(m for m in ("tensorflow", "keras", "tf_keras", "torch", "jax") if m in sys.modules)
assert not loaded, loaded
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr


@pytest.mark.slow
def test_inspect_table_and_json():
    result = run_cli("inspect", K3 / "mixed.h5")
    assert result.returncode == 0, result.stderr
    assert "gru_reset_before" in result.stdout and "gru (reset before)" in result.stdout
    report = json.loads(run_cli("inspect", K3 / "mixed.h5", "--json").stdout)
    by_name = {r["name"]: r for r in report["rnns"]}
    assert by_name["bidi_gru"]["converts"] and by_name["bidi_gru"]["spec"]["bidirectional"]
    assert by_name["srnn_relu"]["spec"]["mode"] == "rnn_relu"
    assert not by_name["lstm_hard_sigmoid"]["converts"] and "hard_sigmoid" in by_name["lstm_hard_sigmoid"]["reason"]
    bare = json.loads(run_cli("inspect", FIXTURES / "tf_keras" / "mixed.weights.h5", "--json").stdout)
    assert all("activations were assumed" in " ".join(r["notes"]) for r in bare["rnns"] if r["converts"])


@pytest.mark.slow
def test_inspect_blob(tmp_path):
    out = tmp_path / "g.bin"
    assert run_cli("keras-to-cudnn", K3 / "mixed.h5", "--layer", "bidi_gru", "-o", out).returncode == 0
    report = json.loads(run_cli("inspect", out, "--json").stdout)
    assert report["format"] == "cudnn-bin" and report["rnns"][0]["source"]["layer"] == "bidi_gru"


@pytest.mark.slow
def test_explain_prints_the_table_rows():
    result = run_cli("explain", "keras", "GRU")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "W_r    = kernel[:, H:2H].T" in text and "W_z    = kernel[:, :H].T" in text
    assert "bR_h   = bias[1, 2H:3H]" in text
    assert "reset gate: before the recurrent product" in text  # the reset_after=False row
    assert_clean_failure(run_cli("explain", "caffe"), 2, "no format or layer class named 'caffe'")


@pytest.mark.slow
def test_help_and_version():
    result = run_cli("keras-to-cudnn", "--help")
    assert result.returncode == 0 and "Examples" in result.stdout
    assert run_cli("--version").stdout.startswith("rnnconv ")
    assert run_cli("-V").stdout == run_cli("--version").stdout


@pytest.mark.slow
def test_shell_completion_completes_commands(tmp_path):
    """The script --show-completion prints, asked as bash asks it, offers rnnconv's commands."""
    # the shell named, not detected from whatever process started the tests (typer's switch for that)
    script = run_cli("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert script.returncode == 0 and "complete" in script.stdout
    env = {**os.environ, "_RNNCONV_COMPLETE": "complete_bash", "COMP_WORDS": "rnnconv onnx-to", "COMP_CWORD": "1"}
    installed = Path(sys.executable).parent / "rnnconv"  # the shell completes the installed command
    offered = subprocess.run([installed], capture_output=True, text=True, env=env, timeout=60)
    assert "onnx-to-cudnn" in offered.stdout.split() and "keras-to-cudnn" not in offered.stdout.split()


@pytest.mark.slow
@pytest.mark.parametrize(
    "source, asked, closest",
    [
        (K3 / "mixed.h5", "gru", "'gru_a'"),
        (FIXTURES / "torch" / "seq2seq.pt", "encoder.rn", "'encoder.rnn'"),
        (FIXTURES / "onnx" / "hand_made.onnx", "gru_revers", "'gru_reverse'"),
    ],
)
@pytest.mark.needs("onnx")
def test_a_name_that_picks_nothing_suggests_the_closest(source, asked, closest, tmp_path):
    result = run_cli("convert", source, tmp_path / "out.bin", "--layer", asked)
    assert_clean_failure(result, 2, f"did you mean {closest}", "it holds:")


@pytest.mark.parametrize(
    "args,code,phrase",
    [
        (["keras-to-cudnn", K3 / "mixed.h5", "-o", "x.bin"], 2, "recurrent layers"),  # several RNNs, none named
        (["inspect", "missing.h5"], 2, "does not exist"),
        (["verify", "missing.bin"], 2, "does not exist"),
        (["convert", K3 / "lstm.h5", "x.txt"], 2, ".txt"),
        (["keras-to-cudnn", K3 / "lstm.h5", "-o", "x.bin", "--dtype", "float8"], 2, "--dtype"),  # a usage error
        (["doctor", "--no-such-option"], 2, "--no-such-option"),
    ],
)
def test_a_failure_with_json_prints_an_error_document(args, code, phrase, tmp_path):
    """A CI step that parses stdout gets a JSON document for a failure too (schema `error`), and the sentence on
    stderr as always."""
    from rnnconv.core.contracts import ErrorDocument

    result = run_cli(*args, "--json", cwd=tmp_path)
    assert result.returncode == code, result.stderr
    document = json.loads(result.stdout)
    ErrorDocument.model_validate(document)
    assert document["exit_code"] == code and phrase in document["error"], document
    assert document["error"] in " ".join(result.stderr.split()) or phrase in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bare_file_says_which_activation_was_stated_and_which_assumed(tmp_path):
    bare = FIXTURES / "keras2"
    one = run_cli("convert", bare / "lstm_weights.h5", tmp_path / "a.bin", "--recurrent-activation", "sigmoid")
    assert one.returncode == 0, one.stderr
    note = " ".join(one.stderr.split())
    assert "activation=tanh was assumed, recurrent_activation=sigmoid was stated" in note
    assert "activations were assumed" not in note
    both = run_cli(
        "convert",
        bare / "lstm_weights.h5",
        tmp_path / "b.bin",
        "--activation",
        "tanh",
        "--recurrent-activation",
        "sigmoid",
    )
    assert "the activations were stated (activation=tanh, recurrent_activation=sigmoid)" in " ".join(
        both.stderr.split()
    )
    fixed = run_cli("convert", bare / "cudnn_weights.h5", tmp_path / "c.bin", "--layer", "cudnn_lstm")
    assert fixed.returncode == 0, fixed.stderr
    assert "were stated ()" not in fixed.stderr and "its activations are fixed" in " ".join(fixed.stderr.split())


@pytest.mark.needs("onnx")
def test_doctor_lists_what_verify_uses_for_onnx():
    """verify --backend onnxruntime and ONNX sources run in onnxruntime: doctor says whether it is here."""
    import importlib.metadata

    report = json.loads(run_cli("doctor", "--json").stdout)
    assert report["packages"]["onnx"] == importlib.metadata.version("onnx")
    assert report["packages"]["onnxruntime"] == importlib.metadata.version("onnxruntime")
    assert report["backends"]["onnxruntime"]["available"] and report["sources"]["onnx"]["available"]
    assert "onnxruntime" in report["backends"]["onnxruntime"]["detail"]


def test_small_wordings(tmp_path):
    """Sentences say what they mean: alternatives with "or", a validator's own words without pydantic's."""
    assert_clean_failure(
        run_cli("convert", K3 / "lstm.h5", tmp_path / "x.txt", "--to", "cudnn"), 2, "end in .bin or .safetensors"
    )
    blob = tmp_path / "x.bin"
    assert run_cli("convert", K3 / "lstm.h5", blob).returncode == 0
    sidecar = tmp_path / "x.bin.json"
    document = json.loads(sidecar.read_text())
    document["spec"]["mode"] = "lsmt"
    sidecar.write_text(json.dumps(document))
    result = run_cli("verify", blob)
    assert_clean_failure(result, 2, "spec.mode: unknown RNN mode 'lsmt'")
    assert "Value error" not in result.stderr


def test_the_package_metadata_builds_without_a_deprecation():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)  # an SPDX expression; a table is deprecated


def test_a_batch_table_never_breaks_a_name(tmp_path):
    names = ["a_rather_long_model_name_for_the_encoder_part_one", "b_another_quite_long_checkpoint_name_v2"]
    for name in names:
        shutil.copy(K3 / "lstm.h5", tmp_path / f"{name}.h5")
    for columns in ("60", "80", "200"):
        result = run_cli(
            "convert", *(tmp_path / f"{n}.h5" for n in names), f"{tmp_path}/out/", "--force", env={"COLUMNS": columns}
        )
        assert result.returncode == 0, result.stderr
        for name in names:
            assert f"{name}.h5" in result.stdout and f"{name}.bin" in result.stdout, (columns, result.stdout)
