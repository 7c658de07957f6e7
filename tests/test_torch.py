"""PyTorch <-> cuDNN against real PyTorch modules on the CPU, and every way back."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnconv
from rnnconv.core import reference
from rnnconv.core.canonical import RNNSpec
from rnnconv.core.weightspace import weight_space_elements
from rnnconv.formats.cudnn.reader import open_bin

TORCH = FIXTURES / "torch"
STEPS, BATCH = 6, 3
MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN, "rnn_relu": torch.nn.RNN}


def module_for(spec: RNNSpec) -> torch.nn.Module:
    kwargs = {"num_layers": spec.num_layers, "bidirectional": spec.bidirectional, "bias": spec.bias}
    if spec.proj_size:
        kwargs["proj_size"] = spec.proj_size
    if spec.mode.startswith("rnn"):
        kwargs["nonlinearity"] = spec.mode[4:]
    return MODULES[spec.mode](spec.input_size, spec.hidden_size, **kwargs)


def states(spec: RNNSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Non-saturating inputs and distinct non-zero initial states (sequence-major, as cuDNN)."""
    g = torch.Generator().manual_seed(seed)
    pseudo = spec.num_layers * spec.num_directions
    x = torch.randn(STEPS, BATCH, spec.input_size, generator=g) * 0.8
    h0 = torch.randn(pseudo, BATCH, spec.output_size, generator=g) * 0.5
    c0 = torch.randn(pseudo, BATCH, spec.hidden_size, generator=g) * 0.5
    return x, h0, c0


def torch_run(module: torch.nn.Module, spec: RNNSpec, x, h0, c0):
    with torch.no_grad():
        if spec.mode == "lstm":
            y, (h_n, c_n) = module(x, (h0, c0))
            return y.numpy(), h_n.numpy(), c_n.numpy()
        y, h_n = module(x, h0)
        return y.numpy(), h_n.numpy(), None


def assert_blob_computes(blob, module, label: str, atol: float = 2e-5) -> float:
    x, h0, c0 = states(blob.spec, 7)
    expected = torch_run(module, blob.spec, x, h0, c0)
    got = reference.forward(
        blob.spec, blob.param, x.numpy(), h0.numpy(), c0.numpy() if blob.spec.mode == "lstm" else None
    )
    worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected) if e is not None)
    LARGEST_ERRORS[f"torch {label}"] = worst
    assert worst < atol, (label, worst)
    return worst


def load_fixture(name: str) -> dict[str, torch.Tensor]:
    if name.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(TORCH / name)
    return torch.load(TORCH / name, weights_only=True)


# (fixture, prefix, spec of the module in it, key prefix inside the checkpoint)
FIXTURE_RNNS = [
    ("lstm_proj.pt", None, RNNSpec("lstm", 5, 8, 2, True, 3), ""),
    ("seq2seq.pt", "encoder.rnn", RNNSpec("lstm", 6, 9, 2, True), "state_dict.encoder.rnn."),
    ("seq2seq.pt", "decoder.rnn", RNNSpec("gru", 18, 7), "state_dict.decoder.rnn."),
    ("dataparallel_gru.pth", None, RNNSpec("gru", 4, 6, 3, bias=False), "module."),
    ("rnn_relu.safetensors", None, RNNSpec("rnn_relu", 3, 5, 2), ""),
    ("rnn_tanh.pt", None, RNNSpec("rnn_tanh", 6, 4, 1, True), ""),
    ("lstm_legacy.pt", None, RNNSpec("lstm", 3, 4), ""),
]


def fixture_module(name: str, spec: RNNSpec, key_prefix: str) -> torch.nn.Module:
    state = load_fixture(name)
    if key_prefix.startswith("state_dict."):
        state = state["state_dict"]
        key_prefix = key_prefix[len("state_dict.") :]
    mine = {k[len(key_prefix) :]: v for k, v in state.items() if k.startswith(key_prefix)}
    module = module_for(spec)
    module.load_state_dict(mine)
    return module


@pytest.mark.parametrize("name,prefix,spec,key_prefix", FIXTURE_RNNS, ids=lambda v: str(v) if v else "-")
def test_fixture_blob_computes_what_the_module_computes(name, prefix, spec, key_prefix, tmp_path):
    out = tmp_path / "x.bin"
    nonlinearity = "relu" if spec.mode == "rnn_relu" else "tanh"
    rnnconv.convert(TORCH / name, out, to="cudnn", layer=prefix, nonlinearity=nonlinearity, source_format="torch")
    blob = open_bin(out)
    assert blob.spec == spec
    assert_blob_computes(blob, fixture_module(name, spec, key_prefix), name + (prefix or ""))


@pytest.mark.parametrize("name,prefix,spec,key_prefix", FIXTURE_RNNS, ids=lambda v: str(v) if v else "-")
def test_fixture_round_trip_is_identical(name, prefix, spec, key_prefix, tmp_path):
    blob, back = tmp_path / "x.bin", tmp_path / "back.pt"
    rnnconv.convert(TORCH / name, blob, to="cudnn", layer=prefix, source_format="torch")
    rnnconv.convert(blob, back, to="torch", source_format="cudnn")
    original = fixture_module(name, spec, key_prefix).state_dict()
    returned = torch.load(back, weights_only=True)
    assert returned.keys() == original.keys()
    for key in original:
        assert returned[key].dtype == original[key].dtype and torch.equal(returned[key], original[key]), key


def test_cells_run_one_step(tmp_path):
    state = load_fixture("cells.pt")
    for prefix, cls, mode in (
        ("lstm", torch.nn.LSTMCell, "lstm"),
        ("gru", torch.nn.GRUCell, "gru"),
        ("rnn", torch.nn.RNNCell, "rnn_tanh"),
    ):
        out = tmp_path / f"{prefix}.bin"
        rnnconv.convert(TORCH / "cells.pt", out, to="cudnn", layer=prefix, source_format="torch")
        blob = open_bin(out)
        mine = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + ".")}
        cell = cls(blob.spec.input_size, blob.spec.hidden_size)
        cell.load_state_dict(mine)
        x, h0, c0 = states(blob.spec, 3)
        with torch.no_grad():
            expected = cell(x[0], (h0[0], c0[0])) if mode == "lstm" else (cell(x[0], h0[0]),)
        y, h_n, c_n = reference.forward(blob.spec, blob.param, x[:1].numpy(), h0.numpy(), c0.numpy())
        np.testing.assert_allclose(h_n[0], expected[0].numpy(), atol=2e-6)
        np.testing.assert_allclose(y[0], expected[0].numpy(), atol=2e-6)
        if mode == "lstm":
            np.testing.assert_allclose(c_n[0], expected[1].numpy(), atol=2e-6)


def test_bfloat16_checkpoint_stays_bfloat16(tmp_path):
    blob_path, back = tmp_path / "x.bin", tmp_path / "back.pt"
    rnnconv.convert(TORCH / "gru_bf16.pt", blob_path, to="cudnn", source_format="torch")
    blob = open_bin(blob_path)
    assert blob.spec.dtype == "bfloat16" and blob_path.stat().st_size == 2 * weight_space_elements(blob.spec)
    state = load_fixture("gru_bf16.pt")
    module = module_for(blob.spec)
    module.load_state_dict({k: v.float() for k, v in state.items()})  # bfloat16 values are exact in float32
    assert_blob_computes(blob, module, "gru_bf16.pt")
    rnnconv.convert(blob_path, back, to="torch", source_format="cudnn")
    returned = torch.load(back, weights_only=True)
    assert all(returned[k].dtype == torch.bfloat16 and torch.equal(returned[k], state[k]) for k in state)


# --- property-based: random modules, both directions of conversion ---------------------------


@st.composite
def specs(draw) -> RNNSpec:
    mode = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    hidden = draw(st.integers(2, 7))
    proj = draw(st.integers(0, hidden - 1)) if mode == "lstm" and draw(st.booleans()) else 0
    return RNNSpec(
        mode,
        draw(st.integers(1, 6)),
        hidden,
        draw(st.integers(1, 3)),
        draw(st.booleans()),
        proj,
        bias=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=specs(), seed=st.integers(0, 2**31 - 1), container=st.sampled_from([".pt", ".safetensors"]))
def test_random_modules_convert_and_round_trip(spec, seed, container, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prop")
    torch.manual_seed(seed)
    module = module_for(spec)
    source = tmp / f"ckpt{container}"
    if container == ".pt":
        torch.save({"model": module.state_dict(), "step": 5}, source)
    else:
        from safetensors.torch import save_file

        save_file(module.state_dict(), source)
    nonlinearity = "relu" if spec.mode == "rnn_relu" else "tanh"
    rnnconv.convert(source, tmp / "x.bin", to="cudnn", nonlinearity=nonlinearity, source_format="torch")
    blob = open_bin(tmp / "x.bin")
    assert blob.spec == spec
    assert_blob_computes(blob, module, f"random {spec.describe()}")
    rnnconv.convert(tmp / "x.bin", tmp / "back.safetensors", to="torch", source_format="cudnn")
    from safetensors.torch import load_file

    returned = load_file(tmp / "back.safetensors")
    original = module.state_dict()
    assert returned.keys() == original.keys()
    for key in original:
        assert torch.equal(returned[key], original[key]), key


def test_printed_code_loads_the_state_dict(tmp_path):
    out = tmp_path / "lstm.pt"
    rnnconv.convert(TORCH / "lstm_proj.pt", tmp_path / "x.bin", to="cudnn", source_format="torch")
    result = run_cli("cudnn-to-torch", tmp_path / "x.bin", "-o", out)
    assert result.returncode == 0, result.stderr
    code = result.stdout[result.stdout.index("import torch") :]
    assert "torch.nn.LSTM(input_size=5, hidden_size=8, num_layers=2, bidirectional=True, proj_size=3)" in code
    ran = {"x": torch.zeros(4, 2, 5)}
    exec(code, ran)  # loads the state_dict strictly, and runs
    assert ran["y"].shape == (4, 2, 6)


# --- raw blobs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_raw_blob_with_flags(tmp_path):
    blob = tmp_path / "x.bin"
    rnnconv.convert(TORCH / "seq2seq.pt", blob, to="cudnn", layer="encoder.rnn", source_format="torch")
    raw = tmp_path / "weights.raw"
    raw.write_bytes(blob.read_bytes())
    result = run_cli(
        "cudnn-to-torch",
        raw,
        "--mode",
        "lstm",
        "--input-size",
        "6",
        "--hidden-size",
        "9",
        "--num-layers",
        "2",
        "--bidirectional",
        "-o",
        tmp_path / "enc.pt",
    )
    assert result.returncode == 0, result.stderr
    module = module_for(RNNSpec("lstm", 6, 9, 2, True))
    module.load_state_dict(torch.load(tmp_path / "enc.pt", weights_only=True))
    assert_blob_computes(open_bin(blob), module, "raw blob")


@pytest.mark.slow
def test_raw_blob_of_the_wrong_size_says_what_was_expected(tmp_path):
    raw = tmp_path / "weights.raw"
    raw.write_bytes(b"\0" * 4000)
    result = run_cli(
        "cudnn-to-torch", raw, "--mode", "gru", "--input-size", "6", "--hidden-size", "9", "-o", tmp_path / "x.pt"
    )
    assert_clean_failure(result, 2, "holds 4000 bytes", "is 1836 bytes", "3*9*(6+9+2)] = 459 elements", "x 4 bytes")
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.slow
def test_a_huge_claimed_spec_is_refused_before_allocating(tmp_path):
    raw = tmp_path / "weights.raw"
    raw.write_bytes(b"\0" * 64)
    result = run_cli(
        "cudnn-to-keras",
        raw,
        "--mode",
        "lstm",
        "--input-size",
        "100000",
        "--hidden-size",
        "1000000",
        "--num-layers",
        "50",
        "-o",
        tmp_path / "x.keras",
    )
    assert_clean_failure(result, 2, "holds 64 bytes")


# --- bad checkpoints ------------------------------------------------------------------------


def _pickle_that_runs_code(tmp: Path) -> Path:
    """A checkpoint whose unpickling would create a file: it is read inertly, holds no tensors, and never runs."""
    marker = tmp / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp / "evil.pt"
    torch.save({"weight_ih_l0": torch.zeros(4, 2)}, path)
    with zipfile.ZipFile(path) as src:
        items = [(i, src.read(i)) for i in src.infolist()]
    with zipfile.ZipFile(path, "w") as dst:
        for info, data in items:
            dst.writestr(
                info, pickle.dumps({"x": Exploit()}, protocol=2) if info.filename.endswith("data.pkl") else data
            )
    return path


def _contradicting(tmp: Path) -> Path:
    state = torch.nn.LSTM(3, 4, num_layers=2).state_dict()
    state["weight_hh_l1"] = torch.zeros(16, 5)
    torch.save(state, tmp / "bad.pt")
    return tmp / "bad.pt"


def _missing_layer(tmp: Path) -> Path:
    state = torch.nn.GRU(3, 4, num_layers=3).state_dict()
    for key in [k for k in state if k.endswith("_l1")]:
        del state[key]
    torch.save(state, tmp / "gap.pt")
    return tmp / "gap.pt"


def _half_biased(tmp: Path) -> Path:
    state = torch.nn.GRU(3, 4).state_dict()
    del state["bias_hh_l0"]
    torch.save(state, tmp / "half.pt")
    return tmp / "half.pt"


def _truncated_safetensors(tmp: Path) -> Path:
    path = tmp / "t.safetensors"
    path.write_bytes((TORCH / "rnn_relu.safetensors").read_bytes()[:700])
    return path


def _no_rnn(tmp: Path) -> Path:
    torch.save(torch.nn.Linear(3, 4).state_dict(), tmp / "linear.pt")
    return tmp / "linear.pt"


BAD = {
    "pickle that runs code": (
        _pickle_that_runs_code,
        [],
        "holds no tensors",
        "io.open",
        "without importing or running",
    ),
    "truncated checkpoint": (
        lambda t: (t / "t.pt", (t / "t.pt").write_bytes((TORCH / "lstm_proj.pt").read_bytes()[:3000]))[0],
        [],
        "looks like a zip archive but cannot be read (truncated or corrupt)",
    ),
    "random bytes": (
        lambda t: (t / "r.pt", (t / "r.pt").write_bytes(b"\x07" * 300))[0],
        [],
        "not a readable PyTorch checkpoint",
    ),
    "contradicting shapes": (_contradicting, [], "'weight_hh_l1' has shape (16, 5)", "needs (16, 4)"),
    "a layer missing": (_missing_layer, [], "a 3-layer RNN less layer 1", "never reads the rest as a smaller RNN"),
    "one bias of two": (_half_biased, [], "'bias_hh_l0' is missing"),
    "truncated safetensors": (_truncated_safetensors, [], "truncated or corrupt"),
    "no RNN in it": (_no_rnn, [], "holds no PyTorch RNN weights"),
    "several RNNs, no prefix": (lambda t: TORCH / "seq2seq.pt", [], "holds 2 RNNs", "'encoder.rnn'", "--layer"),
    "unknown prefix": (
        lambda t: TORCH / "seq2seq.pt",
        ["--prefix", "attention"],
        "no RNN with prefix 'attention'",
        "it holds: encoder.rnn, decoder.rnn",
    ),
    "nonlinearity on an LSTM": (lambda t: TORCH / "lstm_proj.pt", ["--nonlinearity", "relu"], "applies to nn.RNN only"),
    "a Keras file": (lambda t: FIXTURES / "keras3" / "lstm.h5", [], "is a keras file", "keras-to-cudnn"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD))
def test_bad_checkpoints_get_one_sentence_and_exit_2(case, tmp_path):
    make, args, *phrases = BAD[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    source = make(inputs)
    result = run_cli("torch-to-cudnn", source, "-o", tmp_path / "out.bin", *args)
    assert_clean_failure(result, 2, *phrases)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
    assert not (inputs / "pwned").exists()


@pytest.mark.slow
def test_torch_safetensors_needs_no_torch(tmp_path):
    code = f"""
import sys
from rnnconv.cli.commands import app
try:
    app(["torch-to-cudnn", {str(TORCH / "rnn_relu.safetensors")!r}, "-o", {str(tmp_path / "x.bin")!r}, "-q"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
assert "torch" not in sys.modules and "tensorflow" not in sys.modules
print("ok")
"""
    import subprocess
    import sys

    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "ok"


@pytest.mark.slow
def test_zip_checkpoints_need_no_torch_and_the_rest_exits_3(tmp_path):
    """Without torch: a zip checkpoint converts, inspects and is written exactly; a legacy one and verify
    against a PyTorch source exit 3 and say what to install."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('no torch here')\n")
    no_torch = {"PYTHONPATH": str(blocker)}
    result = run_cli(
        "torch-to-cudnn", TORCH / "seq2seq.pt", "--layer", "encoder.rnn", "-o", tmp_path / "a.bin", env=no_torch
    )
    assert result.returncode == 0, result.stderr
    assert (
        run_cli("torch-to-cudnn", TORCH / "seq2seq.pt", "--layer", "encoder.rnn", "-o", tmp_path / "b.bin").returncode
        == 0
    )
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    listed = run_cli("inspect", TORCH / "seq2seq.pt", "--json", env=no_torch)
    assert [r["name"] for r in json.loads(listed.stdout)["rnns"]] == ["encoder.rnn", "decoder.rnn"]
    assert_clean_failure(
        run_cli("torch-to-cudnn", TORCH / "lstm_legacy.pt", "-o", tmp_path / "c.bin", env=no_torch),
        3,
        "legacy (pre-zip)",
        "pip install 'rnnconv[torch]'",
    )
    written = run_cli("cudnn-to-torch", tmp_path / "a.bin", "-o", tmp_path / "a.pt", env=no_torch)
    assert written.returncode == 0, written.stderr
    encoder = torch.load(TORCH / "seq2seq.pt", weights_only=True)["state_dict"]
    back = torch.load(tmp_path / "a.pt", weights_only=True)
    assert back.keys() == {k.removeprefix("encoder.rnn.") for k in encoder if k.startswith("encoder.rnn.")}
    assert all(torch.equal(back[k], encoder[f"encoder.rnn.{k}"]) for k in back)
    assert_clean_failure(
        run_cli("verify", tmp_path / "a.bin", "--backend", "numpy", env=no_torch), 3, "running the PyTorch source"
    )


@pytest.mark.slow
def test_inspect_a_checkpoint():
    report = json.loads(run_cli("inspect", TORCH / "seq2seq.pt", "--json").stdout)
    assert [(r["name"], r["class"]) for r in report["rnns"]] == [("encoder.rnn", "nn.LSTM"), ("decoder.rnn", "nn.GRU")]


@pytest.mark.parametrize("content", [b"", b"hello, world\n", bytes(range(7, 250)) * 2], ids=["empty", "text", "random"])
def test_a_file_that_is_no_checkpoint_gets_one_exit_code_whatever_is_installed(content, tmp_path):
    """Only a file that begins as a pickle can be a legacy checkpoint: anything else is bad input (exit 2), with or
    without torch, through every command, never "needs torch" (exit 3, which a CI job may let pass)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('no torch here')\n")
    source = tmp_path / "model.pt"
    source.write_bytes(content)
    for env in ({}, {"PYTHONPATH": os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")]))}):
        for command in (
            ["torch-to-cudnn", source, "-o", tmp_path / "x.bin"],
            ["torch-to-onnx", source, "-o", tmp_path / "x.onnx"],
            ["convert", source, tmp_path / "x.bin"],
            ["inspect", source],
        ):
            result = run_cli(*command, env=env)
            assert_clean_failure(result, 2)
            assert "pre-zip" not in result.stderr and "needs torch" not in result.stderr, result.stderr


def test_a_legacy_checkpoint_of_another_pickle_protocol_says_so_and_nothing_of_torch_leaks(tmp_path):
    module = torch.nn.LSTM(3, 4)
    torch.save(module.state_dict(), tmp_path / "p4.pt", _use_new_zipfile_serialization=False, pickle_protocol=4)
    result = run_cli("torch-to-cudnn", tmp_path / "p4.pt", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, "legacy torch.save checkpoint written with pickle protocol 4")
    assert result.stderr.startswith("error:") and "Warning" not in result.stderr, result.stderr


def test_inspect_shows_the_class_and_sizes_of_an_rnn_that_does_not_convert(tmp_path):
    state = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True).state_dict()
    state["weight_hh_l1_reverse"] = state["weight_hh_l1_reverse"][:, :3]
    torch.save(state, tmp_path / "damaged.pt")
    report = json.loads(run_cli("inspect", tmp_path / "damaged.pt", "--json").stdout)
    (rnn,) = report["rnns"]
    assert (rnn["class"], rnn["converts"]) == ("nn.LSTM", False) and "weight_hh_l1_reverse" in rnn["reason"]
    sizes = rnn["sizes"]
    assert (sizes["input_size"], sizes["hidden_size"], sizes["num_layers"], sizes["bidirectional"]) == (3, 4, 2, True)
