"""What OpenVINO's CPU plugin computes for an nncf-quantized LSTM IR's own graph (tests/openvino_u8_lstm.py):
fixtures/openvino_quantized/lstm_nncf.xml compiled as it is, and a one-layer graph of its parts fed non-zero initial
states, each within float32's rounding of the numpy emulation; the float LSTM of its dequantized weights, and the
emulation without each of its findings, far from it; lstm_bi_nncf.xml's bidirectional ops, each direction the
emulation's forward path over its own time order."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
opset = pytest.importorskip("openvino.opset13")

from conftest import FIXTURES
from openvino_u8_lstm import U8Grid, plugin_scales, u8_lstm

XML = FIXTURES / "openvino_quantized" / "lstm_nncf.xml"
BIDIRECTIONAL_XML = FIXTURES / "openvino_quantized" / "lstm_bi_nncf.xml"
H0_SCALE = 3.1372548e-07  # the fixture's zero h0: u8 code 0 → Convert → Multiply by this
pytestmark = pytest.mark.needs("openvino")
F32 = {"INFERENCE_PRECISION_HINT": "f32"}  # no bf16 reorders between the layers, on CPUs that have bf16


def _node(model, name):
    return next(op for op in model.get_ordered_ops() if op.get_friendly_name() == name)


def _source(op, port):
    return op.input(port).get_source_output().get_node()


def _layer(model, seq_name, fq_name, direction=0):
    seq, fq = _node(model, seq_name), _node(model, fq_name)
    grid = U8Grid(*(float(_source(fq, port).get_data()) for port in (1, 2)))

    def integers_and_scales(port):  # the scales: the direction's own, or one per row that both share ([1, 4H, 1])
        mul = _source(seq, port)
        scales = _source(mul, 1).get_data()
        return _source(_source(mul, 0), 0).get_data()[direction], scales[min(direction, len(scales) - 1)].reshape(-1)

    (w_int, w_scales), (r_int, _) = integers_and_scales(4), integers_and_scales(5)
    bias = _source(seq, 6).get_data()[direction]
    part = {"w_int": w_int, "r_int": r_int, "w_scales": w_scales, "bias": bias, "grid": grid}
    return part, seq, fq


@pytest.fixture(scope="module")
def model():
    return ov.Core().read_model(XML)


@pytest.fixture(scope="module")
def parts(model):
    return [
        _layer(model, "aten::lstm/LSTMSequence", "input/fq_output_0")[0],
        _layer(model, "aten::lstm/LSTMSequence_1", "aten::lstm/Squeeze/fq_input_0")[0],
    ]


def test_the_runtime_model_runs_the_sequences_in_u8(model):
    compiled = ov.Core().compile_model(model, "CPU", F32)
    rnns = [
        op
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "RNNSeq"
    ]
    assert len(rnns) == 2
    for op in rnns:
        assert op.get_rt_info()["runtimePrecision"].astype(str) == "u8"
        assert op.get_rt_info()["outputPrecisions"].astype(str) == "f32,u8,f32"  # Y, Ho, Co


@pytest.mark.parametrize("seed", [0, 1])
def test_the_fixtures_own_graph_is_the_emulation(model, parts, seed):
    rng = np.random.default_rng(seed)
    n, t = 3, 11
    x = rng.uniform(-3, 3, (n, t, 5)).astype(np.float32)  # partly outside X's range (±2.5): clamped
    compiled = ov.Core().compile_model(model, "CPU", F32)
    y, h_n, c_n = (compiled(x)[out] for out in compiled.outputs)
    zeros = np.zeros((n, 7))
    first = u8_lstm(x, zeros, zeros, **parts[0])  # nncf's zero h is code 0: read as X's lo, not 0
    second = u8_lstm(first.y, zeros, zeros, **parts[1])
    assert np.abs(second.y - y).max() < 1e-6
    assert np.abs(np.stack([first.c, second.c]) - c_n).max() < 2e-6
    assert np.array_equal(np.stack([first.h_codes, second.h_codes]), np.rint(h_n / H0_SCALE))  # h_n: code × 3.1e-7
    assert np.abs(h_n).max() < 1e-4

    # Without each finding, or as the float LSTM of the dequantized weights: far off.
    def float_lstm(xs, part, scales):
        w = part["w_int"] * part["w_scales"][:, None]
        r = part["r_int"] * scales[:, None]
        h = c = np.zeros((n, 7))
        out = []
        for step in range(t):
            xq = part["grid"].value(part["grid"].code(xs[:, step].astype(np.float64)))
            f, i, g, o = np.split(xq @ w.T + h @ r.T + part["bias"], 4, axis=1)
            c = 1 / (1 + np.exp(-f)) * c + 1 / (1 + np.exp(-i)) * np.tanh(g)
            h = 1 / (1 + np.exp(-o)) * np.tanh(c)
            out.append(h)
        return np.stack(out, axis=1)

    r_scales = [
        _source(_source(_node(model, name), 5), 1).get_data()[0].reshape(-1)
        for name in ("aten::lstm/LSTMSequence", "aten::lstm/LSTMSequence_1")
    ]
    floats = float_lstm(float_lstm(x, parts[0], r_scales[0]), parts[1], r_scales[1])
    assert np.abs(floats - y).max() > 0.05


def test_non_zero_initial_states(model, parts):
    """A one-layer graph of layer 0's parts as nncf writes them, h0 a u8 dequantization and c0 a float input: h0's
    codes are read with X's step and zero point, its own scale is only h_n's."""
    n, t = 4, 8
    _, seq, fq = _layer(model, "aten::lstm/LSTMSequence", "input/fq_output_0")
    x_in = opset.parameter([n, t, 5], np.float32, name="x")
    h_in = opset.parameter([n, 1, 7], np.uint8, name="h0")
    c_in = opset.parameter([n, 1, 7], np.float32, name="c0")
    x_fq = opset.fake_quantize(x_in, *(fq.input(port).get_source_output() for port in range(1, 5)), 256)
    h_dq = opset.multiply(opset.convert(h_in, np.float32), opset.constant(np.float32(H0_SCALE)))
    lengths = opset.constant(np.full([n], t, np.int32))
    op = opset.lstm_sequence(
        x_fq, h_dq, c_in, lengths, *(seq.input(port).get_source_output() for port in (4, 5, 6)), 7, "forward"
    )
    compiled = ov.Core().compile_model(ov.Model(list(op.outputs()), [x_in, h_in, c_in]), "CPU", F32)
    rng = np.random.default_rng(3)
    x = rng.uniform(-2.5, 2.5, (n, t, 5)).astype(np.float32)
    h0 = rng.integers(60, 200, (n, 1, 7)).astype(np.uint8)
    c0 = rng.uniform(-1, 1, (n, 1, 7)).astype(np.float32)
    result = compiled({"x": x, "h0": h0, "c0": c0})
    y, h_n, c_n = (result[out][:, 0] for out in compiled.outputs)
    emulated = u8_lstm(x, h0[:, 0], c0[:, 0], **parts[0])
    assert np.abs(emulated.y - y).max() < 1e-6
    assert np.abs(emulated.c - c_n).max() < 1e-6
    assert np.array_equal(emulated.h_codes, np.rint(h_n / H0_SCALE))
    # Reading h0 as its dequantized value (code × 3.1e-7) instead: far off.
    misread = u8_lstm(x, parts[0]["grid"].code(h0[:, 0] * H0_SCALE), c0[:, 0], **parts[0])
    assert np.abs(misread.y - y).max() > 0.05


def _bidirectional_emulation(model, x, exchanged=True):
    """The u8 emulation of lstm_bi_nncf.xml's two layers, each direction forward over its own time order; with
    `exchanged` False, W's scales applied to the rows in OpenVINO's order as stored (not the plugin's exchange)."""
    n = x.shape[0]
    zeros, layer_input, codes, cells = np.zeros((n, 7)), x, [], []
    for seq, fq in (
        ("aten::lstm/LSTMSequence", "input/fq_output_0"),
        ("aten::lstm/LSTMSequence_1", "aten::lstm/Transpose_2/fq_input_0"),
    ):
        results = []
        for direction, steps in ((0, layer_input), (1, layer_input[:, ::-1])):
            part = _layer(model, seq, fq, direction)[0]
            if not exchanged:  # exchanged once more by u8_lstm: as stored
                part["w_scales"] = plugin_scales(part["w_scales"], 7)
            results.append(u8_lstm(steps, zeros, zeros, **part))
        forward, backward = results
        layer_input = np.concatenate([forward.y, backward.y[:, ::-1]], axis=2)
        codes += [forward.h_codes, backward.h_codes]
        cells += [forward.c, backward.c]
    return layer_input, np.stack(codes), np.stack(cells)


def test_a_bidirectional_op_runs_each_direction_as_the_forward_u8_path():
    """nncf's 2-layer bidirectional LSTM IR: the plugin compiles each LSTMSequence as two u8 RNNSeqs, one per
    direction, and each computes the emulation's forward path (the reverse one over the reversed steps), with the
    scales both directions share; layer 1 reads the two directions' Y, concatenated, through its own FakeQuantize."""
    model = ov.Core().read_model(BIDIRECTIONAL_XML)
    compiled = ov.Core().compile_model(model, "CPU", F32)
    rnns = [
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "RNNSeq"
    ]
    assert rnns == ["u8"] * 4
    x = np.random.default_rng(0).uniform(-3, 3, (3, 9, 5)).astype(np.float32)  # partly outside X's range: clamped
    y, h_n, c_n = (compiled(x)[out] for out in compiled.outputs)
    emulated, codes, cells = _bidirectional_emulation(model, x)
    assert np.abs(emulated - y).max() < 1e-6  # measured: 8.1e-8
    assert np.abs(cells - c_n).max() < 2e-6  # measured: 4.5e-7
    assert np.array_equal(codes, np.rint(h_n / H0_SCALE))
    unexchanged, _, _ = _bidirectional_emulation(model, x, exchanged=False)
    assert np.abs(unexchanged - y).max() > 0.005  # measured: 0.014, against 8.1e-8 for the emulation
