"""ncnn: what rnnconv writes loads in ncnn's own Net and computes what the source framework computes, one
sequence at a time with fed initial states; ncnn files as pnnx writes them read back; what ncnn cannot hold is
refused in a sentence; round trips are exact; hostile files get one sentence."""

from __future__ import annotations

import json

import numpy as np
import pytest

ncnn = pytest.importorskip("ncnn")
torch = pytest.importorskip("torch")

from conftest import (
    FIXTURES,
    LARGEST_ERRORS,
    assert_clean_failure,
    assert_no_framework_imported,
    largest_difference,
    run_cli,
)
from facts.ncnn import ncnn_run
from test_torch import module_for, states, torch_run

import rnnconv
from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import BadInput

NCNN = FIXTURES / "ncnn"


def test_initial_states_default_to_zeros(tmp_path):
    spec = RNNSpec("lstm", 3, 4, num_layers=2)
    module = module_for(spec)
    torch.save(module.state_dict(), tmp_path / "ckpt.pt")
    rnnconv.convert(tmp_path / "ckpt.pt", tmp_path / "m.param")
    x, h0, c0 = states(spec, 2)
    expected = torch_run(module, spec, x, h0 * 0, c0 * 0)
    assert (
        largest_difference(ncnn_run(tmp_path / "m.param", spec, x.numpy(), None, None, feed_states=False), expected)
        < 1e-5
    )


FIXTURE_FILES = {"lstm": None, "tagger": "encoder_0,encoder_1", "gru_fp16": None, "lstm_proj": None, "rnn_bi": None}


@pytest.mark.parametrize(
    "name", [n if n == "tagger" else pytest.param(n, marks=pytest.mark.slow) for n in sorted(FIXTURE_FILES)]
)
def test_ncnn_files_read_as_their_pytorch_modules(name, tmp_path):
    """Files as pnnx writes them (states not inputs, layers around the RNN, float16 blobs): the blob made from the
    ncnn file computes what the module the file was made from computes (verify --against its state_dict), and what
    ncnn computes running the file's own layers, with ragged lengths."""
    blob = tmp_path / "x.bin"
    rnnconv.convert(NCNN / f"{name}.param", blob, layer=FIXTURE_FILES[name])
    against = run_cli("verify", blob, "--against", NCNN / f"{name}.pt", "--backend", "numpy", "--json")
    assert against.returncode == 0, against.stdout + against.stderr
    own = run_cli("verify", blob, "--backend", "numpy", "--ragged", "--batch", "3", "--json")
    assert own.returncode == 0, own.stdout + own.stderr
    report = json.loads(own.stdout)
    assert report["source"]["run"].startswith("ncnn")
    LARGEST_ERRORS[f"ncnn fixture {name}"] = report["comparison"]["y"]["max_abs"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "source, phrase",
    [
        ("lstm_reverse", "reverse only (direction=1); cuDNN has no reverse-only RNN"),
        ("conv_first", "a Convolution, whose weights rnnconv cannot size"),
    ],
)
def test_ncnn_files_rnnconv_cannot_read_are_refused(source, phrase, tmp_path):
    result = run_cli("convert", NCNN / f"{source}.param", tmp_path / "x.bin")
    assert_clean_failure(result, 2, phrase)


@pytest.mark.slow
def test_what_ncnn_cannot_hold_is_refused(tmp_path):
    torch.save(torch.nn.RNN(3, 4, nonlinearity="relu").state_dict(), tmp_path / "relu.pt")
    result = run_cli("convert", tmp_path / "relu.pt", tmp_path / "o.param", "--nonlinearity", "relu")
    assert_clean_failure(result, 2, "ncnn's RNN computes tanh only, not the source's relu")
    result = run_cli("convert", FIXTURES / "keras3" / "gru_reset_before.keras", tmp_path / "o.param")
    assert_clean_failure(result, 2, "reset_after=False")
    torch.save(torch.nn.GRU(3, 4).state_dict(), tmp_path / "g.pt")
    result = run_cli("convert", tmp_path / "g.pt", tmp_path / "o.param", "--dtype", "bfloat16")
    assert_clean_failure(result, 2, "ncnn stores float32 or float16 weights, not bfloat16")
    assert not list(tmp_path.glob("o.*"))


@pytest.mark.parametrize("name", ["tagger", "gru_fp16", "lstm_proj", "rnn_bi"])
def test_round_trips_are_exact(name, tmp_path):
    """ncnn -> cuDNN -> ncnn gives the layers' blobs back byte for byte (float16 ones too)."""
    layer = FIXTURE_FILES[name]
    rnnconv.convert(NCNN / f"{name}.param", tmp_path / "x.bin", layer=layer)
    rnnconv.convert(tmp_path / "x.bin", tmp_path / "back.param")
    rnnconv.convert(tmp_path / "back.param", tmp_path / "again.bin")
    assert (tmp_path / "x.bin").read_bytes() == (tmp_path / "again.bin").read_bytes()
    from rnnconv.formats.ncnn.reader import NcnnFile

    original, back = NcnnFile.load(NCNN / f"{name}.param"), NcnnFile.load(tmp_path / "back.param")
    (chain,) = original.choose(layer, take_all=False)
    blobs = [(original.weights, b) for x in chain for b in x.blobs]
    again = [(back.weights, b) for x in back.layers for b in x.blobs]
    assert [_bytes(*a) for a in blobs] == [_bytes(*a) for a in again]


def _bytes(path, blob) -> bytes:
    with open(path, "rb") as f:
        f.seek(blob.offset)
        return f.read(blob.size)


def test_verify_backend_ncnn_runs_the_blob_in_ncnn(tmp_path):
    torch.manual_seed(1)
    torch.save(torch.nn.LSTM(4, 5, num_layers=2, bidirectional=True, proj_size=3).state_dict(), tmp_path / "c.pt")
    rnnconv.convert(tmp_path / "c.pt", tmp_path / "c.bin")
    result = run_cli("verify", tmp_path / "c.bin", "--backend", "ncnn", "--ragged", "--batch", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout and "ncnn (CPU)" in result.stdout


def test_verify_runs_the_written_file_and_catches_two_gates_swapped(tmp_path):
    """`rnnconv verify model.param` runs the model in ncnn against the source recorded beside it: MATCH; with two
    gates of weight_xc swapped in the .bin, MISMATCH and exit 1."""
    torch.manual_seed(2)
    torch.save(torch.nn.GRU(4, 5, bidirectional=True).state_dict(), tmp_path / "g.pt")
    rnnconv.convert(tmp_path / "g.pt", tmp_path / "g.param")
    result = run_cli("verify", tmp_path / "g.param", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "match" and report["source"]["run"].startswith("torch")
    LARGEST_ERRORS["ncnn verify written file"] = report["comparison"]["y"]["max_abs"]
    data = bytearray((tmp_path / "g.bin").read_bytes())
    rows, start = 5 * 4 * 4, 2 * 5 * 4 + 4  # one gate's rows of weight_xc, after h0_0's zeros and the blob's tag
    data[start : start + 2 * rows] = data[start + rows : start + 2 * rows] + data[start : start + rows]
    (tmp_path / "g.bin").write_bytes(bytes(data))
    result = run_cli("verify", tmp_path / "g.param")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


HOSTILE = {
    "truncated bin": ("lstm", lambda p, b: (p, b[:-9]), "truncated"),
    "absurd num_output": ("lstm", lambda p, b: (p.replace("0=4 ", "0=999999999 "), b), "num_output 999999999"),
    "absurd weight size": ("lstm", lambda p, b: (p.replace("1=48", "1=4800000000000"), b), "more than the file"),
    "wrong layer count": ("lstm", lambda p, b: (p.replace("\n2 2\n", "\n9 2\n"), b), "says it holds 9 layers"),
    "not a number": ("lstm", lambda p, b: (p.replace("2=0", "2=x"), b), "'x' is not a number"),
    "bad direction": ("lstm", lambda p, b: (p.replace("2=0", "2=7"), b), "direction 7"),
    "short line": (
        "lstm",
        lambda p, b: (p.replace("LSTM lstm 1 1 in0 out0", "LSTM lstm 3 3 in0"), b),
        "not all listed",
    ),
    "not utf-8": ("lstm", lambda p, b: (p + "\udcff", b), "not a text ncnn .param"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_get_one_sentence(case, tmp_path):
    name, damage, phrase = HOSTILE[case]
    param, data = damage((NCNN / f"{name}.param").read_text(), (NCNN / f"{name}.bin").read_bytes())
    (tmp_path / "h.param").write_bytes(param.encode("utf-8", "surrogateescape"))
    (tmp_path / "h.bin").write_bytes(data)
    result = run_cli("ncnn-to-cudnn", tmp_path / "h.param", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, phrase)
    assert len(result.stderr.strip().splitlines()) == 1
    with pytest.raises(BadInput):
        rnnconv.convert(tmp_path / "h.param", tmp_path / "y.bin", source_format="ncnn")


@pytest.mark.slow
def test_missing_bin_gets_one_sentence(tmp_path):
    (tmp_path / "m.param").write_text((NCNN / "lstm.param").read_text())
    assert_clean_failure(run_cli("convert", tmp_path / "m.param", tmp_path / "x.bin"), 2, "m.bin does not exist")


def test_writing_and_reading_need_no_framework(tmp_path):
    torch.save(torch.nn.GRU(3, 4).state_dict(), tmp_path / "c.pt")
    assert_no_framework_imported(tmp_path / "c.pt", tmp_path / "g.param", tmp_path / "back.bin")


def test_doctor_lists_ncnn():
    report = json.loads(run_cli("doctor", "--json").stdout)
    assert report["backends"]["ncnn"]["available"] and report["sources"]["ncnn"]["available"]


def test_a_gru_after_pnnxs_gemm_is_sized_and_computes_what_ncnn_computes(tmp_path):
    """pnnx writes nn.Linear before a GRU as a Gemm whose constant B and C lie in the .bin, sized by its own params
    (M, N, K, C's broadcast type): the GRU after it is read, and computes what ncnn's own Net computes for it."""
    param = NCNN / "pnnx_linear_gru.param"
    assert "Gemm gemm_0 1 1 in0 1 10=4 2=0 3=1 4=0 5=1 6=1 7=7 8=6 9=4" in " ".join(param.read_text().split())
    result = run_cli("convert", param, tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr
    gru = torch.nn.GRU(6, 5)
    gru.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))  # float16 values, computed in float32
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    for narrow in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
        setattr(net.opt, narrow, False)
    assert net.load_param(str(param)) == 0 and net.load_model(str(param.with_suffix(".bin"))) == 0
    x = np.random.default_rng(36).standard_normal((7, 4)).astype(np.float32)
    extractor = net.create_extractor()
    extractor.input("in0", ncnn.Mat(x))
    gemm, own = (np.array(extractor.extract(blob)[1]) for blob in ("1", "out0"))  # the GRU's input and output
    assert gemm.shape == (7, 6) and own.shape == (7, 5)
    with torch.no_grad():
        y = gru(torch.from_numpy(gemm)[:, None, :])[0][:, 0].numpy()
    error = float(np.abs(y - own).max())
    LARGEST_ERRORS["ncnn's GRU after pnnx's Gemm vs its conversion"] = error
    assert error < 1e-5
    assert rnnconv.verify(tmp_path / "m.pt").verdict == "match"
