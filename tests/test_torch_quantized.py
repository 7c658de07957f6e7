"""PyTorch's dynamically quantized RNNs (fixtures by torch 2.13.0: fixtures/make_torch_quantized_fixtures.py): the
state_dicts quantize_dynamic makes of a bidirectional 2-layer LSTM (int8 per tensor), a GRU (int8 per channel) and
the LSTM again in float16, read without torch. int8 weights are refused without --dequantize, naming their scheme;
with it, each is torch's own scale * (q - zero_point) exactly, and the conversion computes what a float torch module
of those weights computes. verify runs the quantized module itself, a step at a time from the float model's states
(the reverse direction's from the steps after), within the bound of fbgemm's run-time input rounding; against the
float checkpoint, every weight within half a step; a copy with a gate block swapped or a scale changed is a mismatch
naming the weight. Damaged quantizers are refused in one sentence."""

from __future__ import annotations

import struct
import warnings
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv

pytestmark = pytest.mark.needs("torch")

FOLDER = FIXTURES / "torch_quantized"
LSTM, GRU, FP16 = FOLDER / "lstm_qint8.pt", FOLDER / "gru_qint8_per_channel.pt", FOLDER / "lstm_fp16.pt"
FLOAT = {LSTM: FOLDER / "lstm_float.pt", GRU: FOLDER / "gru_float.pt", FP16: FOLDER / "lstm_float.pt"}
OUTPUTS = np.load(FOLDER / "outputs.npz")


def _quantized_state(path):
    """The fixture as torch loads it (a trusted file of our own: weights_only=False for its ScriptObjects)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, weights_only=False)


def _unpacked(path):
    """Each cell's (W_ih, b_ih), (W_hh, b_hh) as torch unpacks them, by the state_dict's key."""
    cells = {}
    for key, params in _quantized_state(path).items():
        _, _, _, _, packed = params.__getstate__()[0]
        cells[key] = [torch.ops.quantized.linear_unpack(p) for p in packed]
    return cells


def _dequantized(qweight) -> np.ndarray:
    """torch's integers and scales, each product exact in float64 (torch's own dequantize() rounds it to float32)."""
    ints = qweight.int_repr().numpy().astype(np.int64)
    if qweight.qscheme() == torch.per_tensor_affine:
        scale, zero = np.float64(np.float32(qweight.q_scale())), qweight.q_zero_point()
        return scale * (ints - zero)
    scales = qweight.q_per_channel_scales().numpy().astype(np.float32).astype(np.float64)
    zeros = qweight.q_per_channel_zero_points().numpy()
    return scales[:, None] * (ints - zeros[:, None])


def test_refused_without_dequantize_naming_the_scheme(tmp_path):
    (entry,) = rnnconv.inspect(LSTM).rnns
    assert not entry.converts
    assert "8 int8 weight tensors (per-tensor, zero points 0" in entry.reason and "--dequantize" in entry.reason
    (entry,) = rnnconv.inspect(GRU).rnns
    assert "2 int8 weight tensors (per-channel (axis 0)" in entry.reason
    result = run_cli("convert", LSTM, tmp_path / "m.onnx")
    assert_clean_failure(result, 2, "dynamically quantized (quantize_dynamic)", "--dequantize")
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("source", [LSTM, GRU], ids=["lstm_per_tensor", "gru_per_channel"])
def test_dequantized_weights_are_torch_s_own_and_compute_what_a_float_module_of_them_computes(tmp_path, source):
    out = tmp_path / "float.pt"
    result = run_cli("convert", source, out, "--dequantize")
    assert result.returncode == 0, result.stderr
    assert "read as scale * (q - zero_point) in float64" in result.stderr
    state = torch.load(out, weights_only=True)
    dirs = 2 if source == LSTM else 1
    for k, ((w_ih, b_ih), (w_hh, b_hh)) in enumerate(_unpacked(source).values()):
        suffix = f"_l{k // dirs}" + ("_reverse" if k % dirs else "")
        assert np.array_equal(state[f"weight_ih{suffix}"].numpy(), _dequantized(w_ih))
        assert np.array_equal(state[f"weight_hh{suffix}"].numpy(), _dequantized(w_hh))
        assert np.array_equal(state[f"bias_ih{suffix}"].numpy(), b_ih.detach().numpy())
        assert np.array_equal(state[f"bias_hh{suffix}"].numpy(), b_hh.detach().numpy())
    with rnnconv.load(out) as (rnn,):
        record = rnn.origin.dequantized if rnn.origin is not None else None
        assert record is not None and record.bits == 8 and record.symmetric
        assert record.inputs == "uint8 per tensor, 7 bits" and len(record.tensors) == 2 * rnn.spec.num_layers * dirs
        assert record.scheme == ("per-tensor" if source == LSTM else "per-channel (axis 0)")
        spec = rnn.spec
    # a float torch module of torch's own dequantize() (float32) computes what the conversion computes
    module = (torch.nn.LSTM if source == LSTM else torch.nn.GRU)(
        5, 7, num_layers=spec.num_layers, bidirectional=dirs == 2
    )
    module.load_state_dict({k: v.float() for k, v in state.items()})
    x = torch.from_numpy(OUTPUTS["x"])
    given = (
        (torch.from_numpy(OUTPUTS["lstm_h0"]), torch.from_numpy(OUTPUTS["lstm_c0"]))
        if source == LSTM
        else torch.from_numpy(OUTPUTS["gru_h0"])
    )
    converted = type(module)(5, 7, num_layers=spec.num_layers, bidirectional=dirs == 2, dtype=torch.float64)
    converted.load_state_dict(state)
    with torch.no_grad():
        want, _ = module(x, given)
        got, _ = converted(x.double(), tuple(g.double() for g in given) if source == LSTM else given.double())
    worst = float((want.double() - got).abs().max())
    assert worst <= 1e-5
    LARGEST_ERRORS[f"quantize_dynamic {source.stem}, dequantized, vs a float nn module of torch's dequantize()"] = worst


@pytest.mark.parametrize("source", [LSTM, GRU, FP16], ids=["lstm_bidirectional", "gru_per_channel", "lstm_fp16"])
def test_verify_runs_the_quantized_module_within_the_bound(tmp_path, source):
    """The runner's rebuilt module computes what the fixture script's quantized module computed (the same kernels
    on the same integers); verify holds each step within the bound (float16: within float32's tolerance)."""
    from rnnconv.core.contracts import Provenance
    from rnnconv.formats import registry

    out = tmp_path / "float.pt"
    assert run_cli("convert", source, out, "--dequantize").returncode == 0
    lstm = source != GRU
    inputs = {
        "x": OUTPUTS["x"],
        "h0": OUTPUTS["lstm_h0" if lstm else "gru_h0"],
        "c0": OUTPUTS["lstm_c0"] if lstm else None,
        "lengths": None,
    }
    with rnnconv.load(out) as (rnn,):
        spec = rnn.spec
    ran, how = registry.get("torch").run(source, Provenance(prefix="rnn."), spec, inputs)
    assert "torch.ao.nn.quantized.dynamic" in how
    assert np.abs(ran["y"] - OUTPUTS[f"{source.stem}_y"]).max() <= 1e-6
    assert np.abs(ran["h_n"] - OUTPUTS[f"{source.stem}_h_n"]).max() <= 1e-6
    report = rnnconv.verify(out)
    assert report.verdict == "match", report.summary
    if source == FP16:
        assert report.tolerance.bound is None and report.comparison.worst <= 1e-5
    else:
        assert report.tolerance.bound is not None and report.comparison.worst < report.tolerance.bound
        assert any("held to the bound its scales give" in w for w in report.warnings)
    LARGEST_ERRORS[f"torch's quantized {source.stem}, a step, vs its dequantized float model"] = report.comparison.worst


def _patched(tmp_path, name, change):
    """A copy of the LSTM fixture with one cell's W_ih changed by `change(qweight) -> qweight`, packed again."""
    state = _quantized_state(LSTM)
    key = "rnn._all_weight_values.1.param"  # layer 0, reverse
    _, _, _, longs, packed = state[key].__getstate__()[0]
    (w_ih, b_ih), (w_hh, b_hh) = (torch.ops.quantized.linear_unpack(p) for p in packed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        changed = torch.ops.quantized.linear_prepack(change(w_ih), b_ih)
        again = torch.ops.quantized.linear_prepack(w_hh, b_hh)
        state[key] = torch.ops.quantized.make_quantized_cell_params_dynamic(changed, again, b_ih, b_hh, bool(longs[0]))
    path = tmp_path / f"{name}.pt"
    torch.save(state, path)
    return path


def test_the_bound_takes_fbgemm_s_own_input_step():
    """The step torch's dynamic kernels quantize a product's input with (its own choice of parameters, per tensor,
    reduce_range) is the one the bound takes; the int8-per-row step of LiteRT's kernels would understate it."""
    from rnnconv.core.bound import INPUT_ROUNDINGS, SYMMETRIC_ROWS

    rounding = INPUT_ROUNDINGS["uint8 per tensor, 7 bits"]
    rng = np.random.default_rng(7)
    for shift in (0.0, 0.7, -2.0):
        x = (rng.standard_normal((3, 7)) + shift).astype(np.float32)
        scale, _ = torch._choose_qparams_per_tensor(torch.from_numpy(x), True)
        step = float(rounding.step(x.astype(np.float64), np.zeros_like(x, np.float64)).max())
        assert scale == pytest.approx(step, rel=1e-6)
        assert float(SYMMETRIC_ROWS.step(x, np.zeros_like(x)).min()) < scale


def test_against_the_float_checkpoint_and_a_swapped_gate_or_a_changed_scale(tmp_path):
    for source in (LSTM, GRU):  # the GRU's per-channel weights lie within half a step but for the scales' rounding
        result = run_cli("verify", source, "--against", FLOAT[source])
        assert result.returncode == 0, result.stdout + result.stderr
        assert "WITHIN-BOUND" in result.stdout and "within its quantization's bound" in result.stdout

    def swapped(qweight):  # gates i and f of W_ih traded, the integers and scale kept
        ints = qweight.int_repr().clone()
        ints[:7], ints[7:14] = qweight.int_repr()[7:14], qweight.int_repr()[:7]
        return torch._make_per_tensor_quantized_tensor(ints, qweight.q_scale(), qweight.q_zero_point())

    def rescaled(qweight):
        return torch._make_per_tensor_quantized_tensor(qweight.int_repr(), qweight.q_scale() * 1.5, 0)

    for name, change in (("swapped", swapped), ("rescaled", rescaled)):
        damaged = _patched(tmp_path, name, change)
        result = run_cli("verify", damaged, "--against", FLOAT[LSTM])
        assert result.returncode == 1, (name, result.stdout, result.stderr)
        text = " ".join(result.stdout.split())
        assert "MISMATCH" in text and "its W of gate" in text and "(layer 0 reverse)" in text, text
        assert "more than half its largest quantization step" in text


def _pickle_edit(tmp_path, name, edit):
    """A copy of the LSTM fixture whose data.pkl is `edit(bytes)`; every other member as it was."""
    path = tmp_path / f"{name}.pt"
    with zipfile.ZipFile(LSTM) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for info in source.infolist():
            data = source.read(info)
            out.writestr(info.filename, edit(data) if info.filename.endswith("/data.pkl") else data)
    return path


def _first_scale(data: bytes, value: float) -> bytes:
    at = data.index(b"per_tensor_affine")
    at = data.index(b"G", at)
    return data[: at + 1] + struct.pack(">d", value) + data[at + 9 :]


def _first_zero_point(data: bytes, value: int) -> bytes:
    at = data.index(b"G", data.index(b"per_tensor_affine")) + 9  # BININT1 0 after the scale
    assert data[at : at + 2] == b"K\x00"
    return data[:at] + b"J" + struct.pack("<i", value) + data[at + 2 :]


@pytest.mark.parametrize(
    ("name", "edit", "phrase"),
    [
        ("zero_scale", lambda d: _first_scale(d, 0.0), "has a scale of 0:"),
        ("negative_scale", lambda d: _first_scale(d, -0.01), "has a scale of -0.01"),
        ("nan_scale", lambda d: _first_scale(d, float("nan")), "has a scale of nan"),
        ("infinite_scale", lambda d: _first_scale(d, float("inf")), "has a scale of inf"),
        ("huge_scale", lambda d: _first_scale(d, 1e300), "has a scale of inf"),
        ("zero_point", lambda d: _first_zero_point(d, 300), "zero point of 300, outside int8's range"),
        ("shape_lies", lambda d: d.replace(b"K\x1cK\x05\x86", b"K\xc8K\x05\x86", 1), "reaches past its storage"),
        ("stride_lies", lambda d: d.replace(b"K\x05K\x01\x86", b"K\x50K\x01\x86", 1), "reaches past its storage"),
        ("symmetric", lambda d: d.replace(b"per_tensor_affine", b"per_tensor_symmetric", 1), "per_tensor_symmetric"),
        (
            "kind",
            lambda d: d.replace(b"\x11\x00\x00\x00quantized_dynamic", b"\x09\x00\x00\x00quantized", 1),
            "'quantized' cell params",
        ),
    ],
)
def test_damaged_quantizers_are_refused_in_one_sentence(tmp_path, name, edit, phrase):
    damaged = _pickle_edit(tmp_path, name, edit)
    result = run_cli("convert", damaged, tmp_path / "m.pt", "--dequantize")
    assert_clean_failure(result, 2, phrase)
    assert not (tmp_path / "m.pt").exists()


def test_a_storage_cut_short_is_refused(tmp_path):
    path = tmp_path / "short.pt"
    with zipfile.ZipFile(LSTM) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for info in source.infolist():
            data = source.read(info)
            out.writestr(info.filename, data[:50] if info.filename.endswith("/data/2") else data)
    result = run_cli("convert", path, tmp_path / "m.pt", "--dequantize")
    assert_clean_failure(result, 2, "more than its member holds")


def test_float16_weights_read_as_stored():
    with rnnconv.load(FP16) as (rnn,), rnnconv.load(FLOAT[FP16]) as (float_model,):
        assert rnn.spec.dtype == "float32" and rnn.source.dequantized is None
        for key in rnn.spec.param_keys():
            want = np.asarray(float_model.param(key), np.float32).astype(np.float16).astype(np.float32)
            if key.kind in ("W", "R"):
                assert np.array_equal(rnn.param(key), want)
            else:
                assert np.array_equal(rnn.param(key), float_model.param(key))
