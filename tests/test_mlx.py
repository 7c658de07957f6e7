"""MLX: what rnnconv writes loads into mlx.nn's own modules and computes what the source framework computes;
MLX's own files read back; what MLX cannot hold is refused in a sentence; round trips are exact."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
from conftest import (
    FIXTURES,
    LARGEST_ERRORS,
    assert_clean_failure,
    assert_no_framework_imported,
    doc_code,
    largest_difference,
    run_cli,
)
from keras_oracle import oracle
from test_torch import module_for, states, torch_run

import rnnconv
from rnnconv.canonical import RNNSpec
from rnnconv.errors import BadInput, Unsupported

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")


def documented_stack():
    """The Stack module docs/formats/mlx.md shows, as printed."""
    scope: dict = {}
    exec(doc_code("docs/formats/mlx.md"), scope)
    return scope["Stack"]


def mlx_model(spec: RNNSpec, path):
    """The module the file is for, built as docs/formats/mlx.md says, loaded by MLX's own load_weights."""
    kwargs = {"bias": spec.bias}
    if spec.mode == "rnn_relu":
        kwargs["nonlinearity"] = nn.relu
    cls = {"lstm": nn.LSTM, "gru": nn.GRU}.get(spec.mode, nn.RNN)
    layers = []
    for k in range(spec.num_layers):
        width = spec.input_size if k == 0 else spec.num_directions * spec.hidden_size
        pair = [cls(width, spec.hidden_size, **kwargs) for _ in range(spec.num_directions)]
        layers.append(pair if spec.bidirectional else pair[0])
    model = layers[0] if len(layers) == 1 and not spec.bidirectional else documented_stack()(layers)
    model.load_weights(str(path))  # strict: every parameter, its shape, nothing more
    return model


def mlx_run(model, spec: RNNSpec, x, h0, c0):
    """Run in MLX (batch-major), sequence-major outputs as cuDNN's."""
    xb = mx.array(np.ascontiguousarray(np.asarray(x).transpose(1, 0, 2)))
    lstm = spec.mode == "lstm"
    if isinstance(model, (nn.LSTM, nn.GRU, nn.RNN)):
        out = model(xb, hidden=mx.array(h0[0]), cell=mx.array(c0[0])) if lstm else model(xb, hidden=mx.array(h0[0]))
        y, c = out if lstm else (out, None)
        hs, cs = [y[:, -1]], [c[:, -1]] if lstm else []
    else:
        y, hs, cs = model(xb, hidden=[mx.array(h) for h in h0], cell=[mx.array(c) for c in c0] if lstm else None)
    c_n = np.stack([np.array(c) for c in cs]) if lstm else None
    return np.array(y).transpose(1, 0, 2), np.stack([np.array(h) for h in hs]), c_n


TORCH_SPECS = {
    "lstm2": RNNSpec("lstm", 5, 7, num_layers=2),
    "lstm_bi": RNNSpec("lstm", 4, 6, bidirectional=True),
    "gru2_bi": RNNSpec("gru", 5, 4, num_layers=2, bidirectional=True),
    "gru2": RNNSpec("gru", 5, 7, num_layers=2),
    "gru_nobias": RNNSpec("gru", 4, 6, bias=False),
    "rnn_relu": RNNSpec("rnn_relu", 5, 3),
    "rnn_tanh3": RNNSpec("rnn_tanh", 3, 6, num_layers=3),
}


@pytest.mark.parametrize("name", sorted(TORCH_SPECS))
def test_mlx_written_from_torch_computes_what_torch_computes(name, tmp_path):
    spec = TORCH_SPECS[name]
    torch.manual_seed(len(name))
    module = module_for(spec)
    torch.save(module.state_dict(), tmp_path / "ckpt.pt")
    out = tmp_path / "rnn.mlx.safetensors"
    nonlinearity = "relu" if spec.mode == "rnn_relu" else None
    rnnconv.convert(tmp_path / "ckpt.pt", out, nonlinearity=nonlinearity)
    x, h0, c0 = states(spec, 5)
    expected = torch_run(module, spec, x, h0, c0)
    got = mlx_run(mlx_model(spec, out), spec, x.numpy(), h0.numpy(), c0.numpy())
    error = largest_difference(got, expected)
    LARGEST_ERRORS[f"mlx from torch {name}"] = error
    assert error < 1e-5


KERAS = ["gru_a", "bidi_lstm", "bidi_gru", "srnn_relu", "srnn_tanh", "gru_nobias", "lstm_nobias", "rnn_lstmcell"]


@pytest.mark.parametrize("layer", KERAS)
def test_mlx_written_from_keras_computes_what_keras_computes(layer, tmp_path):
    out = tmp_path / "rnn.safetensors"
    result = run_cli("convert", FIXTURES / "keras3" / "mixed.keras", out, "--to", "mlx", "--layer", layer, "--json")
    assert result.returncode == 0, result.stderr
    with rnnconv.load(out) as (rnn,):
        spec = rnn.spec
        assert rnn.origin is not None and rnn.origin.layer == layer  # the source, recorded in the metadata
    ran = oracle("keras3").run("mixed", layer)
    x = ran["x"].transpose(1, 0, 2)
    c0 = ran.get("c0", np.zeros_like(ran["h0"]))
    got = mlx_run(mlx_model(spec, out), spec, x, ran["h0"], c0)
    expected = [ran["y"].transpose(1, 0, 2), ran["h_n"], ran.get("c_n")]
    error = largest_difference(got, expected)
    LARGEST_ERRORS[f"mlx from keras {layer}"] = error
    assert error < 1e-5


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 5)
        self.lstm = nn.LSTM(5, 4)
        self.layers = [nn.GRU(4, 6), nn.GRU(6, 6)]


@pytest.fixture(scope="module", params=[".safetensors", ".npz"])
def mlx_saved(tmp_path_factory, request):
    """A model MLX itself saved (both of save_weights' formats): an LSTM under a prefix and a two-layer GRU stack,
    beside a Linear."""
    mx.random.seed(3)
    model = Encoder()
    path = tmp_path_factory.mktemp("mlx") / f"encoder{request.param}"
    model.save_weights(str(path))
    return path, model


def test_mlx_saved_files_read_and_verify_in_mlx(mlx_saved, tmp_path):
    path, _ = mlx_saved
    report = rnnconv.inspect(path)
    assert {e.name: e.spec.num_layers for e in report.rnns if e.converts} == {
        "layers": 2,
        "layers.0": 1,
        "layers.1": 1,
        "lstm": 1,
    }
    for layer in ("lstm", "layers"):
        blob = tmp_path / f"{layer}.bin"
        rnnconv.convert(path, blob, layer=layer)
        result = run_cli("verify", blob, "--backend", "numpy", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        verdict = json.loads(result.stdout)
        assert verdict["source"]["run"].startswith("mlx")
        LARGEST_ERRORS[f"mlx saved {layer}"] = verdict["comparison"]["y"]["max_abs"]


def test_round_trips_are_exact(mlx_saved, tmp_path):
    """MLX -> cuDNN -> MLX gives back every tensor bit for bit, and so does MLX -> PyTorch -> MLX."""
    from safetensors.numpy import load_file

    path, _ = mlx_saved
    original = load_file(path) if path.suffix == ".safetensors" else dict(np.load(path))
    for middle in ("x.bin", "x.pt"):
        for layer in ("lstm", "layers"):
            back = tmp_path / f"{layer}.mlx.safetensors"
            rnnconv.convert(path, tmp_path / middle, layer=layer, force=True)
            rnnconv.convert(tmp_path / middle, back, force=True)
            written = load_file(back)
            prefix = "lstm." if layer == "lstm" else ""
            assert written, back
            for key, value in written.items():
                assert np.array_equal(value, original[prefix + key]), (middle, key)


def test_verify_backend_mlx_runs_the_blob_in_mlx(tmp_path):
    torch.manual_seed(1)
    torch.save(torch.nn.LSTM(4, 5, num_layers=2).state_dict(), tmp_path / "c.pt")
    rnnconv.convert(tmp_path / "c.pt", tmp_path / "c.bin")
    result = run_cli("verify", tmp_path / "c.bin", "--backend", "mlx")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout and "MLX (CPU)" in result.stdout


def test_verify_runs_the_written_file_and_catches_two_gates_swapped(tmp_path):
    """`rnnconv verify model.mlx.safetensors` runs the file in MLX against the source it records: MATCH; with two
    gates of Wx swapped (the metadata kept), MISMATCH and exit 1."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    torch.manual_seed(2)
    torch.save(torch.nn.GRU(4, 5, num_layers=2).state_dict(), tmp_path / "g.pt")
    written = tmp_path / "g.mlx.safetensors"
    rnnconv.convert(tmp_path / "g.pt", written)
    result = run_cli("verify", written, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "match" and report["source"]["run"].startswith("torch")
    LARGEST_ERRORS["mlx verify written file"] = report["comparison"]["y"]["max_abs"]
    with safe_open(written, "np") as f:
        metadata = f.metadata()
    tensors = load_file(written)
    wx = tensors["layers.0.Wx"]
    tensors["layers.0.Wx"] = np.concatenate([wx[5:10], wx[:5], wx[10:]])
    save_file(tensors, written, metadata=metadata)
    result = run_cli("verify", written)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, phrase",
    [
        (lambda: torch.nn.LSTM(4, 5, proj_size=3), "mlx.nn.LSTM has no projection"),
    ],
)
def test_what_mlx_cannot_hold_is_refused(module, phrase, tmp_path):
    torch.save(module().state_dict(), tmp_path / "c.pt")
    result = run_cli("convert", tmp_path / "c.pt", tmp_path / "out.mlx.safetensors")
    assert_clean_failure(result, 2, phrase)
    assert not (tmp_path / "out.mlx.safetensors").exists()


@pytest.mark.slow
def test_reset_before_gru_and_float64_are_refused(tmp_path):
    result = run_cli("convert", FIXTURES / "keras3" / "gru_reset_before.keras", tmp_path / "o.mlx.safetensors")
    assert_clean_failure(result, 2, "reset_after=False")
    torch.save(torch.nn.GRU(3, 4).state_dict(), tmp_path / "c.pt")
    result = run_cli("convert", tmp_path / "c.pt", tmp_path / "o.mlx.safetensors", "--dtype", "float64")
    assert_clean_failure(result, 2, "MLX loads float64 weights as float32")


def test_files_of_mlx_before_0_18_are_refused(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({"Wx": rng.normal(size=(3, 20)).astype(np.float32), "Wh": rng.normal(size=(5, 20)).astype(np.float32),
               "bias": np.zeros(20, np.float32)}, tmp_path / "old.safetensors")  # fmt: skip
    with pytest.raises(Unsupported, match=r"MLX before 0\.18 wrote its matrices transposed"):
        rnnconv.convert(tmp_path / "old.safetensors", tmp_path / "x.bin")


def hostile(tmp_path, data: bytes):
    path = tmp_path / "h.safetensors"
    path.write_bytes(data)
    return path


@pytest.mark.slow
@pytest.mark.slow
def test_a_damaged_npz_gets_one_sentence(tmp_path):
    mx.random.seed(0)
    nn.LSTM(3, 4).save_weights(str(tmp_path / "good.npz"))
    data = (tmp_path / "good.npz").read_bytes()
    for name, damaged in {"cut.npz": data[: len(data) // 2], "bad.npz": data.replace(b"NUMPY", b"NUMPX")}.items():
        (tmp_path / name).write_bytes(damaged)
        result = run_cli("mlx-to-cudnn", tmp_path / name, "-o", tmp_path / "x.bin")
        assert_clean_failure(result, 2)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    "make",
    [
        lambda good: good[: len(good) - 7],  # truncated data
        lambda good: struct.pack("<Q", 1 << 40) + good[8:],  # an absurd header length
        lambda good: good[:8] + b"{" + good[9:20] + b"\xff" * 8 + good[28:],  # a broken header
        lambda good: good.replace(b"[20,3]", b"[20,9]"),  # a shape the bytes do not hold
    ],
)
def test_hostile_files_get_one_sentence(make, tmp_path):
    torch.save(torch.nn.LSTM(3, 5).state_dict(), tmp_path / "c.pt")
    rnnconv.convert(tmp_path / "c.pt", tmp_path / "good.mlx.safetensors")
    path = hostile(tmp_path, make((tmp_path / "good.mlx.safetensors").read_bytes()))
    result = run_cli("mlx-to-cudnn", path, "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2)
    assert len(result.stderr.strip().splitlines()) == 1
    with pytest.raises(BadInput):
        rnnconv.convert(path, tmp_path / "y.bin", source_format="mlx")


def test_writing_and_reading_need_no_framework(tmp_path):
    torch.save(torch.nn.GRU(3, 4).state_dict(), tmp_path / "c.pt")
    assert_no_framework_imported(tmp_path / "c.pt", tmp_path / "g.mlx.safetensors", tmp_path / "back.bin")


def test_doctor_lists_mlx():
    report = json.loads(run_cli("doctor", "--json").stdout)
    assert report["backends"]["mlx"]["available"] and report["sources"]["mlx"]["available"]
