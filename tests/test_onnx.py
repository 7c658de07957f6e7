"""ONNX: files the real exporters wrote become the blobs their checkpoints give; the ONNX rnnconv writes
runs in onnxruntime as the frameworks run theirs; what cuDNN cannot compute is refused in a sentence."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, assert_no_framework_imported, run_cli
from keras_oracle import oracle
from onnx import helper, numpy_helper
from test_round_trips import KERAS_LAYERS
from test_torch import module_for, states, torch_run

import rnnconv
from rnnconv import reference
from rnnconv.formats.cudnn import open_bin

ONNX = FIXTURES / "onnx"
# exported file -> the module prefix of the RNN in the checkpoint saved beside it
EXPORTS = {
    "tagger_lstm_torchscript": "rnn",
    "gru3_dynamo": None,
    "gru3_bi_torchscript": None,
    "lstm_bi_dynamo": None,
    "rnn_relu_torchscript": None,
    "lstm_external": None,
}
REFUSED = {
    "gru_linear_before_reset_0": "linear_before_reset=0",
    "lstm_peepholes": "peephole weights (P)",
    "lstm_clip": "clips its cell state (clip=3.0)",
    "lstm_input_forget": "couples its input and forget gates",
    "lstm_relu": "cuDNN's LSTM can only compute tanh",
}


def session(path) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_run(path, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None) -> list[np.ndarray]:
    feeds = {"X": x, "initial_h": h0} | ({"initial_c": c0} if c0 is not None else {})
    return session(path).run(None, feeds)


def worst_difference(got, expected) -> float:
    return max(float(np.abs(np.asarray(g) - np.asarray(e)).max()) for g, e in zip(got, expected) if e is not None)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_exported_onnx_gives_the_blob_its_checkpoint_gives(name, tmp_path):
    from_onnx, from_checkpoint = tmp_path / "onnx.bin", tmp_path / "pt.bin"
    rnnconv.convert(ONNX / f"{name}.onnx", from_onnx)
    rnnconv.convert(ONNX / f"{name}.pt", from_checkpoint, layer=EXPORTS[name])
    assert from_onnx.read_bytes() == from_checkpoint.read_bytes()


@pytest.mark.parametrize(
    "name, batch_first",
    [("gru3_dynamo", False), ("gru3_bi_torchscript", False), ("lstm_bi_dynamo", True)]
    + [("rnn_relu_torchscript", False), ("lstm_external", False)],
)
def test_blob_computes_what_the_exported_file_computes_in_onnxruntime(name, batch_first, tmp_path):
    """The whole exported graph, untouched, in onnxruntime (its states are the exporter's zeros)."""
    blob_path = tmp_path / "blob.bin"
    rnnconv.convert(ONNX / f"{name}.onnx", blob_path)
    blob = open_bin(blob_path)
    x = np.random.default_rng(3).normal(0, 0.8, (5, 2, blob.spec.input_size)).astype(np.float32)  # fixed shape
    feed = x.transpose(1, 0, 2) if batch_first else x
    expected = session(ONNX / f"{name}.onnx").run(None, {"x": np.ascontiguousarray(feed)})
    if batch_first:
        expected[0] = expected[0].transpose(1, 0, 2)
    got = reference.forward(blob.spec, blob.param, x)
    worst = worst_difference(got, expected[: len(got)])
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
        report = rnnconv.contracts.Report.model_validate_json((tmp_path / "r.json").read_text())
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
    report = rnnconv.contracts.InspectReport.model_validate_json(result.stdout)
    converts = {entry.name: entry.converts for entry in report.rnns}
    assert converts == {"gru_reverse": True, "lstm_batch_major": True} | dict.fromkeys(REFUSED, False)
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


def checkpoint_module(checkpoint: str, layer: str | None, spec) -> torch.nn.Module:
    """The module the fixture checkpoint holds, loaded by PyTorch itself (float32)."""
    path = FIXTURES / "torch" / checkpoint
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(path)
    else:
        state = torch.load(path, weights_only=True)
    state = state.get("state_dict", state)
    prefix = f"{layer}." if layer else ("module." if checkpoint.startswith("dataparallel") else "")
    module = module_for(spec)
    module.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    return module.float()


@pytest.mark.parametrize("checkpoint, layer", _torch_cases())
def test_onnx_written_from_torch_computes_what_torch_computes(checkpoint, layer, tmp_path):
    out = tmp_path / "model.onnx"
    rnnconv.convert(FIXTURES / "torch" / checkpoint, out, layer=layer)
    with rnnconv.load(FIXTURES / "torch" / checkpoint, layer=layer) as (rnn,):
        spec = rnn.spec
    x, h0, c0 = states(spec, 11)
    expected = torch_run(checkpoint_module(checkpoint, layer, spec), spec, x, h0, c0)
    got = ort_run(out, x.numpy(), h0.numpy(), c0.numpy() if spec.mode == "lstm" else None)
    worst = worst_difference(got, expected)
    LARGEST_ERRORS[f"onnxruntime from torch {checkpoint} {layer}"] = worst
    assert worst < 1e-5


@pytest.mark.parametrize("layer", KERAS_LAYERS)
def test_onnx_written_from_keras_computes_what_keras_computes(layer, tmp_path):
    out = tmp_path / "model.onnx"
    rnnconv.convert(FIXTURES / "keras3" / "mixed.keras", out, layer=layer)
    ran = oracle("keras3").run("mixed", layer)
    got = ort_run(out, ran["x"].transpose(1, 0, 2), ran["h0"], ran.get("c0"))
    expected = [ran["y"].transpose(1, 0, 2).reshape(got[0].shape), ran["h_n"], ran.get("c_n")]
    worst = worst_difference(got, expected)
    LARGEST_ERRORS[f"onnxruntime from keras {layer}"] = worst
    assert worst < 1e-5


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
    assert_clean_failure(result, 2, "ONNX has no LSTM projection")
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


@pytest.mark.slow
def test_an_unrolled_rnn_is_refused_pointing_at_the_checkpoint(tmp_path):
    """torch.onnx.export(dynamo=True) writes nn.RNN as per-step MatMul/Tanh ops, not an RNN node."""
    result = run_cli("onnx-to-cudnn", ONNX / "rnn_unrolled_dynamo.onnx", "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "holds no LSTM, GRU or RNN node", "MatMul", "convert the checkpoint")


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
