"""`--quantize int8`: TFLite's dynamic-range hybrid LSTM and RNN (the integers and scales TensorFlow's converter writes,
bit for bit), run by LiteRT; ONNX's DynamicQuantizeLSTM and a GRU or RNN with DequantizeLinear weights, run by
onnxruntime; OpenVINO IRs of int8 W and R decompressed by Convert and Multiply, run by its CPU plugin; the refusal of
a target that holds no int8 weights (as its Holds say) and of MNN's profile; and the three-term proof verify gives a
written file against its float source: within-bound for the file as written, a mismatch for a copy with a gate block
swapped or a scale moved to another channel, `--bound`, and the JUnit cases. Sources: torch modules of distinct
random weights per gate and direction, input 5, hidden 7, projection 3, two layers; verify runs 8 steps from non-zero
initial states."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
from rnnconv.formats.catalog import FORMAT_INFO

INPUT, HIDDEN, PROJECTION, LAYERS = 5, 7, 3, 2
NEEDS_TFLITE = pytest.mark.needs("torch", "ai_edge_litert", "flatbuffers")
NEEDS_ONNX = pytest.mark.needs("torch", "onnx", "onnxruntime")
NEEDS_OPENVINO = pytest.mark.needs("torch", "openvino")


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The float torch sources, each saved by torch as its state_dict."""
    import torch

    folder = tmp_path_factory.mktemp("float")
    torch.manual_seed(48)
    modules = {
        "lstm_proj": torch.nn.LSTM(INPUT, HIDDEN, LAYERS, proj_size=PROJECTION),
        "lstm_bi": torch.nn.LSTM(INPUT, HIDDEN, LAYERS, bidirectional=True),
        "gru_bi": torch.nn.GRU(INPUT, HIDDEN, LAYERS, bidirectional=True),
        "rnn_relu": torch.nn.RNN(INPUT, HIDDEN, LAYERS, nonlinearity="relu"),
        "rnn_bi": torch.nn.RNN(INPUT, HIDDEN, LAYERS, bidirectional=True),
    }
    paths = {}
    for name, module in modules.items():
        paths[name] = folder / f"{name}.pt"
        torch.save(module.state_dict(), paths[name])
    return paths


@pytest.fixture(scope="module")
def written(sources, tmp_path_factory):
    """Each source written with --quantize int8 to the targets the tests run, once: (source, suffix) -> path."""
    folder = tmp_path_factory.mktemp("quantized")
    files = {}

    def write(name: str, suffix: str):
        if (name, suffix) not in files:
            files[name, suffix] = folder / f"{name}{suffix}"
            stated = {"nonlinearity": "relu"} if name == "rnn_relu" else {}  # what an nn.RNN's state_dict does not say
            result = rnnconv.convert(sources[name], files[name, suffix], quantize="int8", **stated)
            assert any(w.startswith("--quantize: ") for w in result.warnings), result.warnings
        return files[name, suffix]

    return write


def _terms(report):
    proof = report.quantization
    assert proof is not None, report.summary
    return proof.weights, proof.kernel, proof.end_to_end


def _assert_within_bound(report, what: str):
    assert report.verdict == "within-bound" and report.exit_code == 0, report.summary
    for term in _terms(report):
        assert term.ok and term.measured <= term.bound, term.detail
    _, kernel, end_to_end = _terms(report)
    assert kernel.measured > 0  # the file ran in its runtime, not in the reference
    LARGEST_ERRORS[f"{what}: end to end vs the float source (bound {end_to_end.bound:.3g})"] = end_to_end.measured


# --- TFLite -------------------------------------------------------------------------------------------------------


@NEEDS_TFLITE
def test_tflite_s_hybrid_lstm_is_tensorflow_s_converter_s_own_bit_for_bit(tmp_path):
    """The tf-keras LSTM the converter's fixture was made from, written with --quantize int8: the same int8 matrices,
    scales, zero points, operator version and asymmetric input quantization as TensorFlow's converter's file
    (which also clips the cell, a Keras LSTM's cell_clip=10 the float model does not compute)."""
    from ai_edge_litert import schema_py_generated as schema

    ours = tmp_path / "lstm.tflite"
    rnnconv.convert(FIXTURES / "tflite" / "keras_lstm_dynamic_range.h5", ours, quantize="int8")

    def op_of(path):
        model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(path.read_bytes(), 0))
        graph = model.subgraphs[0]
        (op,) = [o for o in graph.operators if model.operatorCodes[o.opcodeIndex].builtinCode == 44]  # the LSTM
        matrices = []
        for index in op.inputs[1:9]:  # input_to_{i,f,c,o}_weights, recurrent_to_...
            tensor = graph.tensors[index]
            quant = tensor.quantization
            matrices.append((tensor.type, bytes(model.buffers[tensor.buffer].data), list(quant.scale), quant.zeroPoint))
        return model.operatorCodes[op.opcodeIndex].version, op.builtinOptions.asymmetricQuantizeInputs, matrices

    converter = op_of(FIXTURES / "tflite" / "keras_lstm_dynamic_range.tflite")
    assert converter[0] == 3 and converter[1]
    assert all(kind == schema.TensorType.INT8 for kind, *_ in converter[2])
    assert op_of(ours) == converter


@NEEDS_TFLITE
@pytest.mark.parametrize("name", ["lstm_proj", "rnn_relu"])
def test_litert_runs_the_written_hybrid_file_within_the_bound_of_its_float_source(written, sources, name):
    """Each matrix int8 per tensor, the op LiteRT's hybrid one (version 3); verify runs it in LiteRT and proves it in
    three terms against the torch source it records, and so does the audit of the file against that checkpoint."""
    from ai_edge_litert.interpreter import Interpreter

    path = written(name, ".tflite")
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    ops = [o for o in interpreter._get_ops_details() if o["op_name"].startswith("UNIDIRECTIONAL_SEQUENCE_")]
    assert len(ops) == LAYERS
    matrices = [details[i] for op in ops for i in op["inputs"] if i >= 0 and details[i]["dtype"] == np.int8]
    assert len(matrices) == LAYERS * (9 if name == "lstm_proj" else 2)  # 8 gate matrices and the projection
    for detail in matrices:
        params = detail["quantization_parameters"]
        assert params["scales"].shape == (1,) and params["zero_points"].tolist() == [0]
    _assert_within_bound(rnnconv.verify(path), f"LiteRT's hybrid {name}, written by --quantize int8")
    if name == "lstm_proj":  # the audit pairs the op with the checkpoint's RNN by its sizes, its projection's too
        result = run_cli("verify", path, "--against", sources[name], "--seq-len", "3")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 of 1 RNN matches (1 within its quantization's bound)" in result.stdout


# --- ONNX ---------------------------------------------------------------------------------------------------------


def _dequantized_onnx(path):
    """The file's int8 initializers with their scales, as float weights: name -> scale * q (onnx's own arrays)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    stored = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return model, stored


@NEEDS_ONNX
def test_onnxruntime_runs_the_qdq_gru_as_the_float_gru_of_its_dequantized_weights(written, sources):
    """A GRU's W and R int8 behind DequantizeLinear (a scale per row): onnxruntime computes the float GRU of
    scale * q, torch's own GRU with those weights to float32 precision; verify proves it against its source."""
    import onnxruntime
    import torch

    path = written("gru_bi", ".onnx")
    model, stored = _dequantized_onnx(path)
    dequantizing = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dequantizing) == 2 * LAYERS and all(a.i == 1 for n in dequantizing for a in n.attribute)
    gru = torch.nn.GRU(INPUT, HIDDEN, LAYERS, bidirectional=True)
    state = torch.load(sources["gru_bi"], weights_only=True)
    for layer in range(LAYERS):
        for role, kind in (("W", "ih"), ("R", "hh")):
            q, scale = stored[f"{role}_{layer}"], stored[f"{role}_{layer}_scale"]
            assert q.dtype == np.int8 and scale.shape == (3 * HIDDEN,)
            weights = q.astype(np.float32) * scale[:, None]  # (directions, 3H, n): ONNX's z, r, h order
            for direction, suffix in enumerate(("", "_reverse")):
                z, r, h = np.split(weights[direction], 3)
                state[f"weight_{kind}_l{layer}{suffix}"] = torch.from_numpy(np.concatenate([r, z, h]))
    gru.load_state_dict(state)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6, 3, INPUT)).astype(np.float32)
    h0 = rng.normal(0, 0.5, (2 * LAYERS, 3, HIDDEN)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: {"X": x}.get(i.name, h0) for i in session.get_inputs()}
    y, h_n = session.run(None, feeds)[:2]
    with torch.no_grad():
        y_torch, h_torch = gru(torch.from_numpy(x), torch.from_numpy(h0))
    error = max(np.abs(y - y_torch.numpy()).max(), np.abs(h_n - h_torch.numpy()).max())
    assert error <= 1e-5
    LARGEST_ERRORS["onnxruntime's QDQ GRU vs torch's GRU of its dequantized weights"] = float(error)
    _assert_within_bound(rnnconv.verify(path), "onnxruntime's QDQ GRU, written by --quantize int8")


@NEEDS_ONNX
def test_onnxruntime_runs_the_dynamically_quantized_lstm_within_the_bound_of_its_float_source(written):
    """An LSTM as onnxruntime's DynamicQuantizeLSTM (int8, a scale per direction and column): verify runs it in
    onnxruntime's hybrid kernel and proves it in three terms."""
    path = written("lstm_bi", ".onnx")
    model, stored = _dequantized_onnx(path)
    ops = {n.op_type: n.domain for n in model.graph.node}
    assert ops["DynamicQuantizeLSTM"] == "com.microsoft" and "DequantizeLinear" not in ops
    assert stored["W_0"].dtype == np.int8 and stored["W_scale_0"].shape == (2, 4 * HIDDEN)
    _assert_within_bound(rnnconv.verify(path), "onnxruntime's DynamicQuantizeLSTM, written by --quantize int8")


# --- OpenVINO -----------------------------------------------------------------------------------------------------


def _ir_consts(xml):
    """The IR's Consts by name: (element type, shape, offset, size) as its XML says."""
    consts = {}
    for layer in ET.parse(xml).iter("layer"):
        if layer.get("type") == "Const":
            data = layer.find("data")
            shape = tuple(int(n) for n in data.get("shape").split(",") if n.strip())
            where = int(data.get("offset")), int(data.get("size"))
            consts[layer.get("name")] = (data.get("element_type"), shape, *where)
    return consts


def _edited_ir(xml, out, name, change):
    """A copy of the IR whose Const `name` is `change(values)` in its .bin (the XML as it is)."""
    etype, shape, offset, size = _ir_consts(xml)[name]
    data = bytearray(xml.with_suffix(".bin").read_bytes())
    values = np.frombuffer(bytes(data[offset : offset + size]), {"i8": np.int8, "f32": np.float32}[etype])
    data[offset : offset + size] = np.ascontiguousarray(change(values.reshape(shape).copy())).tobytes()
    out.with_suffix(".bin").write_bytes(bytes(data))
    out.write_text(xml.read_text())
    return out


@NEEDS_OPENVINO
@pytest.mark.parametrize("name", ["lstm_bi", "gru_bi", "rnn_bi"])
def test_openvino_reads_the_int8_ir_and_rnnconv_reads_back_its_int8_times_scale_exactly(written, name):
    """Each layer's W and R an i8 Const, Converted to f32 and multiplied by an f32 Const of one scale per direction
    and output row ([2, gates * H, 1]), as OpenVINO's weight compression writes them; B f32. OpenVINO's own reading
    of the IR finds those Consts, rnnconv's reading with --dequantize gives exactly q * scale in the OpenVINO row's
    layout (test_conformance proves these files within their bound with verify)."""
    import openvino as ov

    from rnnconv.table.apply import row_for_mode

    path = written(name, ".xml")
    consts = {node.get_friendly_name(): node for node in ov.Core().read_model(str(path)).get_ops()}
    gates = {"lstm_bi": 4, "gru_bi": 3, "rnn_bi": 1}[name]
    with rnnconv.load(path, dequantize=True) as (rnn,):
        read, written_record = rnn.source.dequantized, rnn.origin.quantized
        assert read.inputs == "float"  # the CPU plugin rounds no input (the bound says so)
        assert (read.tensors, read.scheme, read.largest_step) == (
            written_record.tensors,
            written_record.scheme,
            written_record.largest_step,
        )
        row = row_for_mode("openvino", rnn.spec.mode)[0]
        for layer in range(LAYERS):
            for role in ("input_matrix", "recurrent_matrix"):
                q = consts[f"layer{layer}/{role}/q"]
                scales = consts[f"layer{layer}/{role}/scales"].get_data()
                assert q.get_element_type() == ov.Type.i8 and scales.shape == (2, gates * HIDDEN, 1)
                (convert,) = q.output(0).get_target_inputs()
                (multiply,) = convert.get_node().output(0).get_target_inputs()
                assert convert.get_node().get_type_name() == "Convert"
                assert multiply.get_node().get_type_name() == "Multiply"
                product = q.get_data().astype(np.float64) * scales.astype(np.float64)
                for d in range(2):
                    assert np.array_equal(rnn.stored(row, layer, d)[role], product[d])
            assert consts[f"layer{layer}/bias"].get_element_type() == ov.Type.f32


@NEEDS_OPENVINO
def test_openvino_s_cpu_plugin_computes_the_int8_ir_as_the_f32_ir_of_its_products(written, tmp_path):
    """Why a quantized IR's bound takes no rounding of the kernel's inputs (its record's inputs "float",
    wire.OPENVINO_KERNEL_INPUTS): the CPU plugin runs the LSTM of i8 W and R decompressed by Convert and Multiply bit
    for bit as the same graph with f32 Consts of the products q * scale (verify runs an nncf IR's ops in such a
    graph)."""
    import openvino as ov
    import openvino.opset13 as ops
    from facts.openvino import ov_run

    path = written("lstm_bi", ".xml")
    model = ov.Core().read_model(str(path))
    replaced = 0
    for op in model.get_ops():
        if op.get_type_name() == "LSTMSequence":
            for port in (4, 5):  # W, R
                multiply = op.input_value(port).get_node()
                convert, scales = (multiply.input_value(i).get_node() for i in range(2))
                q = convert.input_value(0).get_node().get_data()
                product = q.astype(np.float32) * scales.get_data()
                op.input(port).replace_source_output(ops.constant(product).output(0))
                replaced += 1
    assert replaced == 2 * LAYERS
    floats = tmp_path / "products.xml"
    ov.save_model(model, str(floats), compress_to_fp16=False)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 6, INPUT)).astype(np.float32)
    h0, c0 = (rng.normal(0, 0.5, (2 * LAYERS, 3, HIDDEN)).astype(np.float32) for _ in range(2))
    quantized, products = (ov_run(p, x, h0, c0) for p in (path, floats))
    for name in ("y", "h_n", "c_n"):
        assert np.array_equal(quantized[name], products[name]), name


@NEEDS_OPENVINO
@pytest.mark.needs("keras")
def test_an_int8_ir_of_a_keras_bidirectional_lstm_is_within_the_bound_of_the_keras_model(tmp_path):
    """A Keras 3 Bidirectional(LSTM) (input 7, hidden 6) written with --quantize int8: verify runs Keras on its
    source and OpenVINO on the IR, within-bound."""
    path = tmp_path / "bidi_lstm.xml"
    rnnconv.convert(FIXTURES / "keras3" / "mixed.keras", path, layer="bidi_lstm", quantize="int8")
    _assert_within_bound(rnnconv.verify(path), "OpenVINO's int8 IR of a Keras Bidirectional(LSTM)")


@NEEDS_OPENVINO
def test_an_ir_with_a_gate_block_swapped_or_a_scale_moved_is_a_mismatch_naming_it(written, tmp_path):
    """The LSTM's IR with layer 0's forget and input gate blocks of W swapped (their integers and scales, forward
    direction), and the GRU's with layer 0's forward W scales moved one row: the weights term names the block, the
    kernel's still holds (the file computes its own weights faithfully), end to end far beyond the bound, which the
    diagnosis says no rounding explains."""
    hidden = slice(0, HIDDEN), slice(HIDDEN, 2 * HIDDEN)

    def swapped(values):
        values[0, hidden[0]], values[0, hidden[1]] = values[0, hidden[1]].copy(), values[0, hidden[0]].copy()
        return values

    lstm = written("lstm_bi", ".xml")
    copy = _edited_ir(lstm, tmp_path / "swapped.xml", "layer0/input_matrix/q", swapped)
    copy = _edited_ir(copy, copy, "layer0/input_matrix/scales", swapped)
    moved = _edited_ir(
        written("gru_bi", ".xml"),
        tmp_path / "moved.xml",
        "layer0/input_matrix/scales",
        lambda values: np.concatenate([np.roll(values[:1], 1, axis=1), values[1:]]),
    )
    for path, gates in ((copy, ("of gate i", "of gate f")), (moved, ("of gate",))):
        report = rnnconv.verify(path)
        weights, kernel, end_to_end = _terms(report)
        assert report.verdict == "mismatch" and report.exit_code == 1, report.summary
        assert not weights.ok and "(layer 0 forward)" in weights.detail
        assert any(gate in weights.detail for gate in gates), weights.detail
        assert kernel.ok and not end_to_end.ok and end_to_end.measured > 2 * end_to_end.bound
        assert report.diagnosis is not None and "which no rounding explains" in report.diagnosis.message


# --- refusals -----------------------------------------------------------------------------------------------------


@pytest.mark.needs("torch")
def test_a_target_that_holds_no_int8_weights_and_mnn_s_profile_are_refused_in_one_sentence(sources, tmp_path):
    holders = sorted(info.title for info in FORMAT_INFO.values() if "int8" in info.holds.quantizes)
    assert holders and "Keras" not in holders
    result = run_cli("convert", sources["gru_bi"], tmp_path / "m.keras", "--quantize", "int8")
    assert_clean_failure(result, 2, "Keras holds no int8 quantized weights (--quantize int8)", *holders)
    result = run_cli("convert", sources["gru_bi"], tmp_path / "m.onnx", "--quantize", "int8", "--profile", "mnn")
    assert_clean_failure(result, 2, "W and R must be stored, not computed by DequantizeLinear", "mnn")
    result = run_cli("convert", sources["lstm_bi"], tmp_path / "m.onnx", "--quantize", "int8", "--profile", "mnn")
    assert_clean_failure(result, 2, "DynamicQuantizeLSTM")
    result = run_cli("convert", sources["rnn_relu"], tmp_path / "m.tflite", "--quantize", "int8", "--streaming")
    assert_clean_failure(result, 2, "leave out --streaming or --quantize")
    assert not list(tmp_path.iterdir())


# --- the proof ----------------------------------------------------------------------------------------------------


def _tflite_copy(path, out, change):
    """The file rewritten through TFLite's own schema classes, `change(model, first LSTM op)` applied."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(path.read_bytes(), 0))
    graph = model.subgraphs[0]
    change(model, next(o for o in graph.operators if model.operatorCodes[o.opcodeIndex].builtinCode == 44))
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    out.write_bytes(builder.Output())
    return out


def _swap_input_gates(model, op):
    inputs = list(op.inputs)
    inputs[1], inputs[2] = inputs[2], inputs[1]  # input_to_input_weights <-> input_to_forget_weights
    op.inputs = inputs


@NEEDS_TFLITE
def test_a_gate_swapped_copy_is_a_mismatch_far_above_the_kernel_s_term_and_bound_holds_the_end_to_end_term(
    written, tmp_path
):
    """The written file: within-bound, each term a case of its JUnit file. Its copy with the first layer's input and
    forget gates' matrices swapped: the weights term names the block, and end to end it is beyond the derived bound
    while the kernel's term still holds, which the diagnosis says no rounding explains; a JUnit failure for each
    term that fails. --bound replaces the end-to-end term's bound: too small, the file as written is a mismatch."""
    good = written("lstm_proj", ".tflite")
    result = run_cli("verify", good, "--junit", tmp_path / "good.xml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WITHIN-BOUND" in result.stdout
    cases = {case.get("name"): case for case in ET.parse(tmp_path / "good.xml").iter("testcase")}
    for term in ("weights", "kernel", "end to end"):
        (case,) = [c for name, c in cases.items() if name.endswith(f": quantized {term}")]
        assert case.find("failure") is None

    swapped = _tflite_copy(good, tmp_path / "swapped.tflite", _swap_input_gates)
    report = rnnconv.verify(swapped, junit=tmp_path / "swapped.xml")
    weights, kernel, end_to_end = _terms(report)
    assert report.verdict == "mismatch" and report.exit_code == 1
    assert not weights.ok and weights.measured > 100 * weights.bound and "(layer 0)" in weights.detail
    assert "of gate i" in weights.detail or "of gate f" in weights.detail
    assert kernel.ok  # the file computes its own (swapped) weights as faithfully as ever
    assert not end_to_end.ok and end_to_end.measured > 2 * end_to_end.bound
    assert report.diagnosis is not None and "which no rounding explains" in report.diagnosis.message
    failed = {
        case.get("name").rsplit(": quantized ", 1)[-1]
        for case in ET.parse(tmp_path / "swapped.xml").iter("testcase")
        if case.find("failure") is not None and ": quantized " in case.get("name")
    }
    assert failed == {"weights", "end to end"}

    tight = rnnconv.verify(good, bound=end_to_end.measured / 1000, seq_len=3)
    assert tight.verdict == "mismatch" and tight.quantization.bound_given
    assert tight.quantization.end_to_end.bound == end_to_end.measured / 1000 and not tight.quantization.end_to_end.ok
    result = run_cli("verify", good, "--bound", "-1")
    assert_clean_failure(result, 2, "--bound must be a positive number")


@NEEDS_ONNX
def test_a_copy_with_a_scale_moved_to_another_channel_is_a_mismatch_naming_the_block(written, tmp_path):
    """DynamicQuantizeLSTM's W scales of the forward direction shifted by one column (each column's scale its
    neighbour's): the weights term names the gate block whose weights are no longer the source's."""
    import onnx
    from onnx import numpy_helper

    model, stored = _dequantized_onnx(written("lstm_bi", ".onnx"))
    scales = stored["W_scale_0"].copy()
    scales[0] = np.roll(scales[0], 1)
    (initializer,) = [i for i in model.graph.initializer if i.name == "W_scale_0"]
    initializer.CopyFrom(numpy_helper.from_array(scales, "W_scale_0"))
    moved = tmp_path / "moved.onnx"
    onnx.save(model, moved)
    report = rnnconv.verify(moved)
    weights, kernel, _ = _terms(report)
    assert report.verdict == "mismatch" and report.exit_code == 1
    assert not weights.ok and "(layer 0 forward)" in weights.detail and kernel.ok

    scales[0, 3] = np.inf  # a scale no step is: refused as it is read, before anything runs (the fuzz found it)
    initializer.CopyFrom(numpy_helper.from_array(scales, "W_scale_0"))
    onnx.save(model, moved)
    result = run_cli("verify", moved)
    assert_clean_failure(result, 2, "the W_scale of node 'layer0' (direction 0) has a scale of inf")
