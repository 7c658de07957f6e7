"""TFLite's dynamic-range quantized LSTM (what TensorFlow's converter writes with Optimize.DEFAULT): refused without
--dequantize, naming it; with it, every int8 weight read as LiteRT's own scale * (q - zero_point), exactly, the
written record saying what was dequantized; verify and the audit hold the quantized file to the bound its scales
give, and a copy with a gate swapped or a scale changed is a mismatch; damaged quantization parameters refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
litert = pytest.importorskip("ai_edge_litert.interpreter")
schema = pytest.importorskip("ai_edge_litert.schema_py_generated")

from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core.canonical import ParamKey

SOURCE = FIXTURES / "tflite" / "keras_lstm_dynamic_range.tflite"
CHECKPOINT = FIXTURES / "tflite" / "keras_lstm_dynamic_range.h5"  # the float model of both LSTM(33) files
FULL_INTEGER = FIXTURES / "tflite" / "keras_lstm_full_integer.tflite"  # calibrated: int8 activations, int16 cell
LOOP = FIXTURES / "tflite" / "loop_k3_gru_dynamic_range.tflite"  # a Keras 3 GRU(33)'s WHILE loop, int8 per channel
LOOP_CHECKPOINT = LOOP.with_suffix(".keras")
STACKED = FIXTURES / "tflite" / "loop_k3_bilstm2_dynamic_range.tflite"  # two Bidirectional(LSTM(33)): four loops
# The op's matrix inputs (TFLite's order: input_to_{input,forget,cell,output}, then recurrent_to_...) and
# torch's gate order (i, f, g, o): the same.
MATRICES = range(1, 9)


def _copy(tmp_path, name, change, source=SOURCE):
    """The fixture rewritten through TFLite's own schema classes, `change(model, op)` applied (op: the main graph's
    LSTM, or its first op)."""
    import flatbuffers

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(source.read_bytes(), 0))
    codes = [code.builtinCode for code in model.operatorCodes]
    lstm = schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    ops = model.subgraphs[0].operators
    change(model, next((op for op in ops if codes[op.opcodeIndex] == lstm), ops[0]))
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(builder.Output())
    return path


def _quantization(model, op, slot):
    return model.subgraphs[0].tensors[op.inputs[slot]].quantization


def test_refused_without_dequantize_in_one_sentence_naming_it(tmp_path):
    """The fused op names --dequantize; so does a Keras 3 GRU's WHILE loop whose body's products have int8 weights
    (listed with its sizes, as its cell reads)."""
    (entry,) = rnnconv.inspect(SOURCE).rnns
    assert not entry.converts and "int8 quantized weights" in entry.reason and "--dequantize" in entry.reason
    result = run_cli("convert", SOURCE, tmp_path / "m.pt", "--allow-lossy")
    assert_clean_failure(result, 2, "int8 quantized weights", "--dequantize")
    (entry,) = rnnconv.inspect(LOOP).rnns
    assert not entry.converts and "--dequantize" in entry.reason and entry.sizes.hidden_size == 33
    result = run_cli("convert", LOOP, tmp_path / "m.pt")
    assert_clean_failure(
        result, 2, "WHILE loops' bodies multiply by quantized weights (2 FULLY_CONNECTED", "--dequantize"
    )
    assert not (tmp_path / "m.pt").exists()


def test_dequantized_weights_are_litert_s_own_exactly_and_verify_holds_them_to_the_bound(tmp_path):
    """Each weight of the converted nn.LSTM is LiteRT's scale * (q - zero_point) of the int8 tensor, exactly (float64
    holds every product); within half a step of the float Keras model's; the record says per-tensor int8; verify
    runs LiteRT's hybrid kernel a step at a time and holds it to the bound the scales give."""
    out = tmp_path / "lstm.pt"
    result = run_cli("convert", SOURCE, out, "--dequantize", "--allow-lossy")  # the converter's cell_clip=10 too
    assert result.returncode == 0, result.stderr
    assert "dequantized: 8 int8 weight tensors (per-tensor, zero points 0" in result.stderr
    interpreter = litert.Interpreter(model_path=str(SOURCE))
    interpreter.allocate_tensors()
    (op,) = [o for o in interpreter._get_ops_details() if o["op_name"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    blocks = []
    for slot in MATRICES:
        detail = details[op["inputs"][slot]]
        q = interpreter.get_tensor(detail["index"])
        scale, zero = detail["quantization_parameters"]["scales"], detail["quantization_parameters"]["zero_points"]
        assert q.dtype == np.int8 and scale.shape == (1,) and zero.tolist() == [0]
        blocks.append(np.float64(np.float32(scale[0])) * (q.astype(np.int64) - int(zero[0])))
    state = torch.load(out, weights_only=True)
    assert state["weight_ih_l0"].dtype == torch.float64
    assert np.array_equal(state["weight_ih_l0"].numpy(), np.concatenate(blocks[:4]))
    assert np.array_equal(state["weight_hh_l0"].numpy(), np.concatenate(blocks[4:]))

    with rnnconv.load(out) as (rnn,), rnnconv.load(CHECKPOINT) as (keras,):
        record = rnn.origin.dequantized if rnn.origin is not None else None
        assert record is not None and (record.scheme, record.bits, record.symmetric) == ("per-tensor", 8, True)
        for kind in ("W", "R"):
            for gate in rnn.spec.gates:
                key = ParamKey(0, 0, kind, gate)
                assert np.abs(rnn.param(key) - keras.param(key)).max() <= record.largest_step / 2 * (1 + 2**-20)

    report = rnnconv.verify(out)
    assert report.verdict == "match" and report.tolerance.bound is not None
    assert report.comparison.worst < report.tolerance.bound
    assert any("held to the bound its scales give" in w for w in report.warnings)
    LARGEST_ERRORS["LiteRT's hybrid int8 LSTM, a step, vs its dequantized nn.LSTM"] = report.comparison.worst


@pytest.mark.parametrize("source", [SOURCE, FULL_INTEGER], ids=["dynamic_range", "full_integer"])
def test_the_audit_holds_the_quantized_file_to_its_float_checkpoint_and_catches_a_swap_or_a_scale(tmp_path, source):
    """The converter's quantized files (dynamic range; full integer, run in LiteRT's integer kernel) against the
    tf-keras model they came from: within the bound their scales give, every weight within half a step; a copy with
    two gates' input matrices swapped, or one scale 1.5 times its own, is a mismatch naming the weight that was not
    quantized from the checkpoint. (The Keras model as the nn.LSTM rnnconv converts it to: the same weights, run
    without importing TensorFlow.)"""
    checkpoint = tmp_path / "float.pt"
    rnnconv.convert(CHECKPOINT, checkpoint)
    result = run_cli("verify", source, "--against", checkpoint)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WITHIN-BOUND" in result.stdout and "within its quantization's bound" in result.stdout
    assert "1 of 1 RNN matches (1 within its quantization's bound)" in result.stdout

    def swapped(model, op):
        inputs = list(op.inputs)
        inputs[1], inputs[2] = inputs[2], inputs[1]
        op.inputs = inputs

    def rescaled(model, op):
        quant = _quantization(model, op, 5)
        quant.scale = [quant.scale[0] * 1.5]

    for name, change, named in (("swapped", swapped, "of gate"), ("rescaled", rescaled, "R of gate i")):
        damaged = _copy(tmp_path, name, change, source)
        result = run_cli("verify", damaged, "--against", checkpoint)
        assert result.returncode == 1, (name, result.stdout, result.stderr)
        assert "MISMATCH" in result.stdout and named in result.stdout and "half its largest" in result.stdout


@pytest.mark.parametrize(
    ("name", "scales", "zeros", "axis", "phrase"),
    [
        ("zero_scale", [0.0], [0], 0, "a scale of 0:"),
        ("nan_scale", [float("nan")], [0], 0, "a scale of nan"),
        ("negative_scale", [-0.01], [0], 0, "a scale of -0.01"),
        ("zero_point_outside", [0.01], [300], 0, "zero point of 300, outside int8's range"),
        ("channels_that_lie", [0.01, 0.02, 0.03], [0, 0, 0], 0, "3 scales, one per channel along axis 0"),
        ("per_channel", [0.01] * 33, [0] * 33, 0, "per-channel scales on its quantized weight"),
    ],
)
def test_damaged_quantization_is_refused_in_one_sentence(tmp_path, name, scales, zeros, axis, phrase):
    def damaged(model, op):
        quant = _quantization(model, op, 1)
        quant.scale, quant.zeroPoint, quant.quantizedDimension = scales, zeros, axis

    path = _copy(tmp_path, name, damaged)
    result = run_cli("convert", path, tmp_path / "m.pt", "--dequantize", "--allow-lossy")
    assert_clean_failure(result, 2, phrase)
    assert not (tmp_path / "m.pt").exists()


def test_a_dynamic_range_op_with_a_quantized_bias_is_refused(tmp_path):
    """A bias quantized in an op whose input is float is neither a dynamic-range op nor an integer one: refused,
    naming it."""

    def quantized_bias(model, op):
        bias = model.subgraphs[0].tensors[op.inputs[12]]
        bias.type, bias.quantization = schema.TensorType.INT16, schema.QuantizationParametersT()
        bias.quantization.scale, bias.quantization.zeroPoint = [1e-5], [0]

    path = _copy(tmp_path, "quantized_bias", quantized_bias)
    result = run_cli("convert", path, tmp_path / "m.pt", "--dequantize", "--allow-lossy")
    assert_clean_failure(result, 2, "quantizes input_gate_bias but holds input float32", "neither a dynamic-range op")


def _litert_constants(path):
    """The LSTM op's constant inputs as LiteRT's interpreter reads them: by slot, (integers, scale, zero point)."""
    interpreter = litert.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (op,) = [o for o in interpreter._get_ops_details() if o["op_name"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    found = {}
    for slot in (*MATRICES, 12, 13, 14, 15):
        detail = details[op["inputs"][slot]]
        quant = detail["quantization_parameters"]
        found[slot] = (interpreter.get_tensor(detail["index"]), quant["scales"], quant["zero_points"])
    return found


def test_the_converters_full_integer_lstm_converts_with_dequantize_and_allow_lossy(tmp_path):
    """TensorFlow's converter with a representative dataset: QUANTIZE, an int8 LSTM (int8 input and output state,
    int16 cell state, int32 biases), DEQUANTIZE. Refused without --dequantize naming it, then without --allow-lossy
    naming the grids LiteRT's integer kernel rounds its input and each step's states to (the ranges calibration
    gave); with both, each weight and bias of the nn.LSTM is LiteRT's scale * (q - zero_point) exactly (float64),
    the rounding is recorded, and verify runs the file's own op in LiteRT's integer kernel a step at a time within
    the bound its grids give."""
    out = tmp_path / "m.pt"
    report = rnnconv.inspect(FULL_INTEGER)
    (entry,) = report.rnns
    assert entry.sizes.dtype == "int8" and (entry.sizes.input_size, entry.sizes.hidden_size) == (32, 33)
    assert "QUANTIZE" in " ".join(report.notes)
    result = run_cli("convert", FULL_INTEGER, out)
    assert_clean_failure(result, 2, "has int8 quantized weights", "--dequantize")
    result = run_cli("convert", FULL_INTEGER, out, "--dequantize")
    assert_clean_failure(
        result,
        2,
        "full-integer quantization): LiteRT's integer kernel rounds its input to int8 over [-3.88, 3.67], each "
        "step's h to int8 over [-0.858, 0.799], each step's c to int16 over [-2, 2]",
        "--allow-lossy converts the float RNN",
    )
    assert not out.exists()
    result = run_cli("convert", FULL_INTEGER, out, "--dequantize", "--allow-lossy")
    assert result.returncode == 0, result.stderr
    assert "4 int32 biases" in result.stderr
    stored = _litert_constants(FULL_INTEGER)
    blocks = {}
    for slot, (q, scale, zero) in stored.items():
        assert q.dtype == (np.int8 if slot in MATRICES else np.int32) and scale.shape == (1,) and zero.tolist() == [0]
        blocks[slot] = np.float64(np.float32(scale[0])) * q.astype(np.int64)
    state = torch.load(out, weights_only=True)
    assert state["weight_ih_l0"].dtype == torch.float64
    assert np.array_equal(state["weight_ih_l0"].numpy(), np.concatenate([blocks[s] for s in range(1, 5)]))
    assert np.array_equal(state["weight_hh_l0"].numpy(), np.concatenate([blocks[s] for s in range(5, 9)]))
    assert np.array_equal(
        state["bias_ih_l0"].numpy() + state["bias_hh_l0"].numpy(), np.concatenate([blocks[s] for s in range(12, 16)])
    )

    with rnnconv.load(out) as (rnn,):
        record = rnn.origin.dequantized if rnn.origin is not None else None
        assert record is not None and record.inputs == "integer" and (record.scheme, record.bits) == ("per-tensor", 8)
        grids = {(r.value, r.layer): (r.levels, r.step) for r in record.rounded}
        assert grids == {
            ("x", 0): (256, pytest.approx(0.0296, rel=1e-3)),
            ("h", 0): (256, pytest.approx(0.0065, rel=1e-3)),
            ("c", 0): (65536, 2.0**-14),
        }
    report = rnnconv.verify(out)
    assert report.verdict == "match" and report.tolerance.bound is not None
    assert report.comparison.worst < report.tolerance.bound
    LARGEST_ERRORS["LiteRT's integer LSTM, a step, vs its dequantized nn.LSTM"] = report.comparison.worst


def test_the_integer_op_rnnconv_rebuilds_computes_what_the_file_computes_in_litert():
    """The graph verify runs of a full-integer LSTM (its op rebuilt by rnnconv's builder: weights, int32 biases,
    int8 and int16 states and the kernel's intermediates, with their grids) gives LiteRT's run of the file itself
    bit for bit, and from initial states other than zero its final states are on their grids."""
    from rnnconv.formats.tflite.model import TfliteFile
    from rnnconv.formats.tflite.runner import graph_of_file, run_graph

    file = TfliteFile.load(FULL_INTEGER, dequantize=True)
    (chain,) = file.chains
    rng = np.random.default_rng(7)
    x = rng.normal(0, 1, (6, 2, 32)).astype(np.float32)
    ours = run_graph(graph_of_file(file, chain), {"x": x, "h0": None, "c0": None, "lengths": None})
    interpreter = litert.Interpreter(model_path=str(FULL_INTEGER))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x.transpose(1, 0, 2))
    interpreter.invoke()
    theirs = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).transpose(1, 0, 2)
    assert np.array_equal(ours["y"], theirs)
    h0 = rng.normal(0, 0.3, (1, 2, 33)).astype(np.float32)
    c0 = rng.normal(0, 0.8, (1, 2, 33)).astype(np.float32)
    started = run_graph(graph_of_file(file, chain), {"x": x, "h0": h0, "c0": c0, "lengths": None})
    assert not np.array_equal(started["y"][0], ours["y"][0])
    assert np.allclose(started["c_n"] / 2.0**-14, np.rint(started["c_n"] / 2.0**-14), atol=1e-3)


def _loop_weights(model, body=2):
    """A loop body's FULLY_CONNECTED weights (schema objects): the state's product's, then the input's (`body`: the
    body's subgraph, the first loop's by default)."""
    body = model.subgraphs[body]
    codes = [code.builtinCode for code in model.operatorCodes]
    products = [op for op in body.operators if codes[op.opcodeIndex] == schema.BuiltinOperator.FULLY_CONNECTED]
    return [body.tensors[op.inputs[1]] for op in products]


def test_a_while_loop_with_int8_weights_converts_with_dequantize_to_litert_s_own_weights(tmp_path):
    """Keras 3 GRU's loop, its two products' weights int8 per channel: with --dequantize each converted weight is
    LiteRT's scale * (q - zero_point), exactly (float64 holds each product); verify runs the body's cells in LiteRT's
    hybrid FULLY_CONNECTED kernel, its int8 weights as stored, a step at a time, within the bound the scales give."""
    out = tmp_path / "gru.pt"
    result = run_cli("convert", LOOP, out, "--dequantize")
    assert result.returncode == 0, result.stderr
    assert "dequantized: 2 int8 weight tensors (per-channel (axis 0), zero points 0" in " ".join(result.stderr.split())
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(LOOP.read_bytes(), 0))
    dequantized = []
    for tensor in _loop_weights(model):
        q = np.frombuffer(bytes(bytearray(model.buffers[tensor.buffer].data)), np.int8).reshape(tensor.shape)
        scales = np.asarray(tensor.quantization.scale, np.float32).astype(np.float64)
        assert tensor.quantization.quantizedDimension == 0 and len(scales) == q.shape[0]
        dequantized.append(scales[:, None] * q.astype(np.int64))
    recurrent, given = dequantized  # Keras's gate blocks z, r, h; torch's r, z, n
    order = np.r_[33:66, 0:33, 66:99]
    state = torch.load(out, weights_only=True)
    assert state["weight_hh_l0"].dtype == torch.float64
    assert np.array_equal(state["weight_hh_l0"].numpy(), recurrent[order])
    assert np.array_equal(state["weight_ih_l0"].numpy(), given[order])
    report = rnnconv.verify(out)
    assert report.verdict == "match" and report.tolerance.bound is not None, report.message
    assert report.comparison.worst < report.tolerance.bound
    assert report.source is not None and "ai-edge-litert" in report.source.run and "int8 weights" in report.source.run
    LARGEST_ERRORS["LiteRT's hybrid int8 GRU loop, a step, vs its dequantized nn.GRU"] = report.comparison.worst


def test_the_audit_holds_a_quantized_loop_to_its_float_checkpoint_and_catches_a_moved_scale(tmp_path):
    """The converter's quantized loop against the Keras 3 model it came from: the three terms within their bounds;
    a copy whose recurrent weight's per-channel scales are rolled by one channel (each row scaled by its neighbour's)
    is a mismatch naming the weight that was not quantized from the checkpoint."""
    result = run_cli("verify", LOOP, "--against", LOOP_CHECKPOINT)
    said = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WITHIN-BOUND" in said and "1 of 1 RNN matches (1 within its quantization's bound)" in said
    assert "weights " in said and "kernel " in said and "end to end " in said

    def rolled(model, op):
        quant = _loop_weights(model)[0].quantization
        quant.scale = list(np.roll(np.asarray(quant.scale), 1))

    damaged = _copy(tmp_path, "rolled", rolled, LOOP)
    result = run_cli("verify", damaged, "--against", LOOP_CHECKPOINT)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout and "half its largest" in result.stdout


def test_a_loop_whose_body_computes_in_integers_is_refused_naming_it(tmp_path):
    """A loop whose body's product gives an int8 tensor (full-integer quantization: LiteRT computes the cell in
    integers) is listed with the reason and refused in one sentence, not read as a float cell."""

    def integer_product(model, op):
        body = model.subgraphs[2]
        codes = [code.builtinCode for code in model.operatorCodes]
        (first, *_) = [o for o in body.operators if codes[o.opcodeIndex] == schema.BuiltinOperator.FULLY_CONNECTED]
        body.tensors[first.outputs[0]].type = schema.TensorType.INT8

    damaged = _copy(tmp_path, "integer", integer_product, LOOP)
    (entry,) = rnnconv.inspect(damaged).rnns
    assert not entry.converts and "full-integer" in entry.reason
    result = run_cli("convert", damaged, tmp_path / "m.pt", "--dequantize")
    assert_clean_failure(result, 2, "computes with quantized values", "full-integer")


def test_the_audit_pairs_a_deployed_multi_layer_rnn_with_the_checkpoints_stacked_layers(tmp_path):
    """Two stacked Keras 3 Bidirectional(LSTM) layers, deployed as one 2-layer bidirectional RNN of four int8 loops:
    the audit pairs it with the checkpoint's two layers stacked (as convert --layer rnn0,rnn1 reads them; they were
    two NOT-FOUND rows and one more), and holds it in the three terms; --layer names the stack too, and a stack out
    of order is one sentence. A copy with a second-layer loop's scales rolled by a channel is a mismatch."""
    checkpoint = STACKED.with_suffix(".keras")
    result = run_cli("verify", STACKED, "--against", checkpoint)
    said = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "= rnn0,rnn1: WITHIN-BOUND" in said and "1 of 1 RNN matches (1 within its quantization's bound)" in said
    (deployed,) = rnnconv.inspect(STACKED).rnns
    result = run_cli("verify", STACKED, "--against", checkpoint, "--layer", f"{deployed.name}=rnn0,rnn1")
    assert result.returncode == 0 and "WITHIN-BOUND" in result.stdout, result.stdout + result.stderr
    result = run_cli("verify", STACKED, "--against", checkpoint, "--layer", f"{deployed.name}=rnn1,rnn0")
    assert_clean_failure(result, 2, "rnn1, rnn0 do not stack into one RNN")

    def rolled(model, op):
        quant = _loop_weights(model, body=-1)[0].quantization
        quant.scale = list(np.roll(np.asarray(quant.scale), 1))

    damaged = _copy(tmp_path, "rolled", rolled, STACKED)
    result = run_cli("verify", damaged, "--against", checkpoint)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout and "layer 1" in result.stdout and "half its largest" in result.stdout


def test_verify_holds_a_conversions_weights_to_the_sources_dequantized_ones_exactly(tmp_path):
    """The per-step bound is a worst case: a weight space of the loop's GRU with its first 3,000 weights 10% off
    stays within it (0.106 against 0.134) and was a MATCH. verify also holds every weight of a file converted from a
    quantized source to the source's dequantized reading, which the conversion writes as it is: exactly here, within
    float32's rounding with --dtype float32, and the damaged copy is a mismatch naming the gate block."""
    out = tmp_path / "gru.bin"
    assert run_cli("convert", LOOP, out, "--dequantize").returncode == 0
    result = run_cli("verify", out)
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr
    assert "dequantized weights" in result.stdout and "exactly" in result.stdout
    damaged = tmp_path / "damaged.bin"
    values = np.fromfile(out, np.float64)
    values[:3000] *= 1.1
    values.tofile(damaged)
    damaged.with_name("damaged.bin.json").write_text(out.with_name("gru.bin.json").read_text())
    result = run_cli("verify", damaged)
    said = " ".join(result.stdout.split())
    assert result.returncode == 1 and "MISMATCH" in said, result.stdout + result.stderr
    assert "its W of gate r (layer 0) is" in said and "does not hold the float model of the source's weights" in said
    narrowed = tmp_path / "gru.onnx"
    pytest.importorskip("onnxruntime")
    assert run_cli("convert", LOOP, narrowed, "--dequantize", "--dtype", "float32").returncode == 0
    result = run_cli("verify", narrowed)
    assert result.returncode == 0 and "float32's rounding" in " ".join(result.stdout.split()), result.stdout


@pytest.mark.parametrize(
    ("x_scale", "h_range", "c_range"), [(0.1, 0.3, 0.5), (1.0, 0.8, 1.9)], ids=["inside", "clamped"]
)
def test_a_step_of_litert_s_integer_kernel_stays_within_the_bound_its_grids_give(x_scale, h_range, c_range):
    """One step of the full-integer op in LiteRT against the float step of its dequantized weights, from random
    inputs and states (small ones, the grids' steps alone; large ones, which the grids clamp): always within the
    bound, and the bound not vacuous (the difference at least a tenth of it where the grids clamp)."""
    from rnnconv.core.bound import integer_gates, quantization_bound
    from rnnconv.core.contracts import Provenance
    from rnnconv.core.reference import forward
    from rnnconv.formats.tflite.model import TfliteFile
    from rnnconv.formats.tflite.reader import to_canonical
    from rnnconv.formats.tflite.runner import graph_of_file, run_graph

    file = TfliteFile.load(FULL_INTEGER, dequantize=True)
    (chain,) = file.chains
    rnn = to_canonical(file, chain, Provenance(path=str(FULL_INTEGER)), drop_clip=True)
    record = rnn.source.dequantized
    graph = graph_of_file(file, chain)
    rng = np.random.default_rng(11)
    ratios = []
    for _ in range(10):
        x = (rng.uniform(-3.5, 3.5, (1, 16, 32)) * x_scale).astype(np.float32)
        h0 = rng.uniform(-h_range, h_range, (1, 16, 33)).astype(np.float32)
        c0 = rng.uniform(-c_range, c_range, (1, 16, 33)).astype(np.float32)
        got = run_graph(graph, {"x": x, "h0": h0, "c0": c0, "lengths": None})
        y, _, c_n = forward(rnn.spec, rnn.param, x, h0, c0)
        off = max(np.abs(got["y"] - y).max(), np.abs(got["c_n"] - c_n).max())
        bound = quantization_bound(rnn.spec, rnn.param, x, h0, c0, 0.0, None, record.rounded, integer_gates(record))
        ratios.append(off / bound)
    assert max(ratios) < 1
    if h_range > 0.5:
        assert max(ratios) > 0.1
