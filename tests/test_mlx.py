"""MLX: what rnnconv writes loads into mlx.nn's own modules and computes what the source framework computes;
MLX's own files read back; what MLX cannot hold is refused in a sentence; round trips are exact."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")
torch = pytest.importorskip("torch")

from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, assert_no_framework_imported, run_cli

import rnnconv
from rnnconv.errors import BadInput, Unsupported


def test_to_mlx_writes_a_safetensors_of_any_name_recording_its_source(tmp_path):
    """`--to mlx` with a plain .safetensors name: the file is MLX's, and records the layer it was made from."""
    out = tmp_path / "rnn.safetensors"
    result = run_cli("convert", FIXTURES / "keras3" / "mixed.keras", out, "--to", "mlx", "--layer", "gru_a", "--json")
    assert result.returncode == 0, result.stderr
    with rnnconv.load(out) as (rnn,):
        assert rnn.origin is not None and rnn.origin.layer == "gru_a"
    assert rnnconv.inspect(out).format == "mlx-safetensors"


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
        (lambda: torch.nn.LSTM(4, 5, proj_size=3), "MLX's LSTM has no projection"),
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
    assert_clean_failure(result, 2, "MLX stores float32, float16 or bfloat16 weights, not float64")


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
