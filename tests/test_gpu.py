"""On a GPU: rnnconv's layout against cuDNN's own answers, cudnnRNNForward against the numpy reference and
torch._cudnn_rnn, and `verify --backend cudnn` end to end.

Every test here is marked `gpu`: without a GPU it is skipped with the reason (what probe found
missing); with RNNCONV_REQUIRE_GPU=1 (bench/gpu_day.sh sets it) it fails instead, so a GPU day
cannot pass by skipping.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import FIXTURES, run_cli

import rnnconv
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.formats.cudnn.writer import write_bin
from rnnconv.gpu.backend import CudnnBackend, gpu_session, probe
from rnnconv.gpu.battery import Configuration, check_forward, configurations, random_rnn, reported_layout
from rnnconv.gpu.cuda import SESSION_ENV

pytestmark = pytest.mark.gpu
QUICK = configurations(quick=True)


@pytest.fixture(scope="module")
def backend() -> Iterator[CudnnBackend]:
    status = probe()
    if not status.ok:  # the gate in conftest skips (or fails) first; this keeps the fixture honest alone
        pytest.skip(f"needs a GPU with cuDNN: {status.reason}")
    backend = CudnnBackend(status)
    with gpu_session(backend.cudnn) as session:
        backend.session = session
        yield backend


def ids(configuration: Configuration) -> str:
    return configuration.spec.describe()


@pytest.mark.parametrize("configuration", QUICK, ids=ids)
def test_layout_is_cudnns(configuration, backend):
    """Every offset, dims and strides cudnnGetRNNWeightParams reports equals rnnconv's layout."""
    found = reported_layout(backend, configuration.spec)
    assert found["layout_differences"] == []
    assert found["cudnn_weight_space_bytes"] == found["rnnconv_weight_space_bytes"]


@pytest.mark.parametrize("configuration", QUICK, ids=ids)
@pytest.mark.parametrize("ragged", [True, False], ids=["ragged", "full-length"])
def test_forward_matches_the_reference_and_torch(configuration, ragged, backend, tmp_path):
    spec = configuration.spec
    rnn = random_rnn(spec, seed=7)  # not the battery's seed: other weights than the battery's run
    write_bin(rnn, tmp_path / "x.bin", spec.dtype)
    result = check_forward(backend, open_bin(tmp_path / "x.bin"), seed=3, ragged=ragged)
    assert result["matches"], {k: result[k] for k in ("max_abs_vs_numpy", "atol", "rtol", "math_type")}
    second = result["torch_cudnn_rnn"]
    if ragged or not _torch_cuda():
        assert second is None  # torch's cross-check runs on full-length batches where torch has CUDA
        return
    assert second["ran"], second
    worst = max(v for k, v in second.items() if k.startswith("max_abs_"))
    assert worst <= result["atol"], second


@pytest.mark.parametrize("name,layer", [("lstm_proj.pt", None), ("gru_bf16.pt", None), ("seq2seq.pt", "decoder.rnn")])
def test_verify_backend_cudnn_end_to_end(name, layer, tmp_path):
    blob = tmp_path / "x.bin"
    rnnconv.convert(FIXTURES / "torch" / name, blob, to="cudnn", layer=layer)
    report_path = tmp_path / "report.json"
    result = run_cli("verify", blob, "--backend", "cudnn", "--ragged", "--report", report_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    assert report["verdict"] == "match"
    assert report["backend"]["name"] == "cudnn" and report["backend"]["gpu"]
    assert report["backend"]["cuda_session"]


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is None, reason="PyCUDA is not installed here")
def test_pycuda_and_ctypes_sessions_give_the_same_outputs(tmp_path, monkeypatch):
    rnnconv.convert(FIXTURES / "torch" / "lstm_proj.pt", tmp_path / "x.bin", to="cudnn")
    blob = open_bin(tmp_path / "x.bin")
    outputs = {}
    for kind in ("pycuda", "ctypes"):
        monkeypatch.setenv(SESSION_ENV, kind)
        backend = CudnnBackend(probe())
        rng = np.random.default_rng(0)
        spec = blob.spec
        pseudo = spec.num_layers * spec.num_directions
        inputs = {
            "x": rng.normal(size=(5, 2, spec.input_size)),
            "h0": rng.normal(size=(pseudo, 2, spec.output_size)),
            "c0": rng.normal(size=(pseudo, 2, spec.hidden_size)),
            "lengths": np.array([5, 3]),
        }
        outputs[kind] = backend.run(blob, inputs)
        assert backend.details["cuda_session"].startswith(kind)
    for name in ("y", "h_n", "c_n"):
        np.testing.assert_array_equal(outputs["pycuda"][name], outputs["ctypes"][name])


def _torch_cuda() -> bool:
    if importlib.util.find_spec("torch") is None or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    import torch

    return bool(torch.cuda.is_available())
