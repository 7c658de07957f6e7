"""TFLite / LiteRT: the .tflite rnnconv writes runs in LiteRT's interpreter as the frameworks run their RNNs, reads
back exactly, and what TFLite cannot hold (or cuDNN cannot compute) is refused in a sentence; hostile files too."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter

from conftest import (
    FIXTURES,
    LARGEST_ERRORS,
    assert_clean_failure,
    assert_no_framework_imported,
    doc_code,
    fresh_cli,
    largest_difference,
    run_cli,
)
from facts.tflite import litert_run

import rnnconv
from rnnconv.core.contracts import Provenance
from rnnconv.core.reference import forward
from rnnconv.core.report_contracts import Report
from rnnconv.errors import BadInput, RnnconvError, Unsupported
from rnnconv.formats import registry
from rnnconv.formats._flatbuffer import Flat
from rnnconv.formats.tflite.builder import Constant, write_graph
from rnnconv.formats.tflite.model import TfliteFile
from rnnconv.formats.tflite.wire import TFLITE_ACTIVATIONS, TFLITE_LSTM_INPUTS
from rnnconv.formats.tflite.writer import graph_of

TFLITE = FIXTURES / "tflite"
CONVERTER = TFLITE / "keras_lstm_converter.tflite"
BATCH, STEPS = 3, 6  # not the (1, 1) a written file's x starts with: every run resizes
TOLERANCE = 2e-5


TORCH_CASES = {
    "lstm": ("lstm", {}),
    "lstm_2_layers_bidirectional": ("lstm", {"num_layers": 2, "bidirectional": True}),
    "lstm_projection_2_layers": ("lstm", {"num_layers": 2, "proj_size": 3}),
    "lstm_projection_bidirectional": ("lstm", {"bidirectional": True, "proj_size": 4}),
    "lstm_no_bias": ("lstm", {"bias": False}),
    "rnn_tanh_2_layers": ("rnn_tanh", {"num_layers": 2}),
    "rnn_relu_2_layers_bidirectional": ("rnn_relu", {"num_layers": 2, "bidirectional": True}),
}


def torch_module(mode: str, kwargs: dict, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    if mode == "lstm":
        return torch.nn.LSTM(5, 7, **kwargs)
    return torch.nn.RNN(5, 7, nonlinearity=mode[4:], **kwargs)


def torch_outputs(module, x, h0, c0):
    with torch.no_grad():
        if isinstance(module, torch.nn.LSTM):
            y, (h_n, c_n) = module(x, (h0, c0))
            return y.numpy(), h_n.numpy(), c_n.numpy()
        y, h_n = module(x, h0)
        return y.numpy(), h_n.numpy(), None


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Every torch case saved and written to .tflite with the API (one with the CLI): case -> (module, .pt, .tflite)."""
    folder = tmp_path_factory.mktemp("torch")
    made = {}
    for case, (mode, kwargs) in TORCH_CASES.items():
        module = torch_module(mode, kwargs, seed=len(made))
        source, out = folder / f"{case}.pt", folder / f"{case}.tflite"
        torch.save(module.state_dict(), source)
        nonlinearity = mode[4:] if mode.startswith("rnn") else None
        if case == "lstm":
            assert run_cli("convert", source, out).returncode == 0
        else:
            rnnconv.convert(source, out, nonlinearity=nonlinearity)
        made[case] = (module, source, out)
    return made


def test_zero_states_and_other_shapes_after_resizing(written):
    """Left alone the states start at zero (allocate_tensors zeroes the variables); any batch and steps run."""
    module, _, out = written["lstm_2_layers_bidirectional"]
    for steps, batch in ((1, 1), (9, 2)):
        x = torch.randn(steps, batch, 5)
        depth = 4
        zeros = torch.zeros(depth, batch, 7)
        expected = torch_outputs(module, x, zeros, zeros)
        got = litert_run(out, x.numpy(), zeros.numpy(), zeros.numpy())
        assert largest_difference(got, expected) < TOLERANCE


@pytest.mark.parametrize("name", ["rnn_stack_torchscript", "lstm_bi_dynamo"])
def test_tflite_from_onnx_computes_what_onnxruntime_computes(name, tmp_path):
    """The ONNX source's own nodes in onnxruntime (as verify runs them), against the written .tflite in LiteRT."""
    source, out = FIXTURES / "onnx" / f"{name}.onnx", tmp_path / "model.tflite"
    rnnconv.convert(source, out)
    with rnnconv.load(source) as (rnn,):
        spec = rnn.spec
    rng = np.random.default_rng(5)
    depth = spec.num_layers * spec.num_directions
    inputs = {
        "x": rng.normal(0, 0.8, (STEPS, BATCH, spec.input_size)).astype(np.float32),
        "h0": rng.normal(0, 0.5, (depth, BATCH, spec.hidden_size)).astype(np.float32),
        "c0": rng.normal(0, 0.5, (depth, BATCH, spec.hidden_size)).astype(np.float32),
        "lengths": None,
    }
    onnx_format = registry.get("onnx")
    expected, _ = onnx_format.run(source, onnx_format.resolve(source, Provenance(), None), spec, inputs)
    lstm = spec.mode == "lstm"
    got = litert_run(out, inputs["x"], inputs["h0"], inputs["c0"] if lstm else None)
    error = largest_difference(got, [expected["y"], expected["h_n"], expected["c_n"] if lstm else None])
    LARGEST_ERRORS[f"LiteRT from onnx {name}"] = error
    assert error < TOLERANCE, error


# --- reading back ------------------------------------------------------------------------------------------------


def test_the_file_holds_torch_weights_exactly_where_the_op_takes_them(written):
    """Read by LiteRT itself, not by rnnconv: each gate's (H, in) weights are PyTorch's rows, the bias b_ih + b_hh."""
    module, _, out = written["lstm_projection_bidirectional"]
    interpreter = Interpreter(model_path=str(out))
    tensors = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    hidden = module.hidden_size
    for suffix in ("", "_reverse"):
        for k, word in enumerate(("input", "forget", "cell", "output")):
            rows = slice(k * hidden, (k + 1) * hidden)
            stored = interpreter.get_tensor(tensors[f"layer0{suffix}/input_to_{word}_weights"])
            np.testing.assert_array_equal(stored, state[f"weight_ih_l0{suffix}"][rows])
            stored = interpreter.get_tensor(tensors[f"layer0{suffix}/recurrent_to_{word}_weights"])
            np.testing.assert_array_equal(stored, state[f"weight_hh_l0{suffix}"][rows])
            bias = interpreter.get_tensor(tensors[f"layer0{suffix}/{word}_gate_bias"])
            np.testing.assert_array_equal(bias, state[f"bias_ih_l0{suffix}"][rows] + state[f"bias_hh_l0{suffix}"][rows])
        projection = interpreter.get_tensor(tensors[f"layer0{suffix}/projection_weights"])
        np.testing.assert_array_equal(projection, state[f"weight_hr_l0{suffix}"])


@pytest.mark.parametrize(
    "case", ["lstm_2_layers_bidirectional", "lstm_projection_2_layers", "rnn_relu_2_layers_bidirectional"]
)
def test_round_trips_are_exact(case, written, tmp_path):
    """.tflite -> PyTorch -> .tflite and .tflite -> cuDNN -> .tflite give the very weights; the PyTorch state_dict
    holds the file's weights, each bias as b_hh (b_ih zero: only the sum acts)."""
    module, _, out = written[case]
    nonlinearity = "relu" if "relu" in case else None
    pt, blob, again, again2 = tmp_path / "b.pt", tmp_path / "b.bin", tmp_path / "c.tflite", tmp_path / "d.tflite"
    rnnconv.convert(out, pt)
    rnnconv.convert(pt, again, nonlinearity=nonlinearity)
    rnnconv.convert(out, blob)
    rnnconv.convert(blob, again2)
    with rnnconv.load(out) as (first,), rnnconv.load(again) as (second,), rnnconv.load(again2) as (third,):
        assert first.spec == second.spec == third.spec
        a, b, c = first.arrays(), second.arrays(), third.arrays()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key.label)
            np.testing.assert_array_equal(a[key], c[key], err_msg=key.label)
    state = torch.load(pt, weights_only=True)
    original = module.state_dict()
    for name, values in original.items():
        if name.startswith("bias_ih"):
            assert not state[name].any()
        elif name.startswith("bias_hh"):
            torch.testing.assert_close(state[name], values + original[name.replace("_hh", "_ih")], rtol=0, atol=0)
        else:
            torch.testing.assert_close(state[name], values, rtol=0, atol=0)


def test_the_source_is_recorded_and_read_back_as_origin(written):
    _, source, out = written["lstm"]
    with rnnconv.load(out) as (rnn,):
        assert rnn.source.format == "tflite" and rnn.source.path == str(out.resolve())
        assert rnn.origin is not None and rnn.origin.path == str(source.resolve()) and rnn.origin.format == "torch"


def test_inspect_lists_the_ops_and_one_rnn(written):
    report = rnnconv.inspect(written["lstm_2_layers_bidirectional"][2])
    assert [(e.name, e.layer_class, e.converts) for e in report.rnns] == [("y", "UNIDIRECTIONAL_SEQUENCE_LSTM", True)]
    assert report.rnns[0].spec.num_layers == 2 and report.rnns[0].spec.bidirectional
    assert "operators: UNIDIRECTIONAL_SEQUENCE_LSTM x4, REVERSE_V2 x4, CONCATENATION x2" in report.notes


def _unclipped(path, into):
    """A copy of a converter's file with every LSTM op's cell_clip set to 0."""
    data = bytearray(path.read_bytes())
    for op in TfliteFile.load(path).ops:
        if op.name == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            data[op.options._field(1) : op.options._field(1) + 4] = struct.pack("<f", 0.0)  # cell_clip
    into.write_bytes(bytes(data))
    return into


def test_what_tensorflows_converter_writes_reads_as_keras_computes(tmp_path):
    """TensorFlow's converter writes cell_clip=10 for every Keras LSTM: refused (cuDNN does not clip). With the clip
    set to 0 in the file (inactive here anyway: |c| stays far below 10), each op reads back as the layer it came
    from: run in PyTorch, the two layers give what tf-keras computed."""
    report = rnnconv.inspect(CONVERTER)
    assert [e.converts for e in report.rnns] == [False, False]
    assert all("cell_clip=10.0: cuDNN's LSTM does not clip" in e.reason for e in report.rnns)
    with pytest.raises(BadInput, match="holds 2 RNNs"):
        rnnconv.convert(CONVERTER, tmp_path / "x.bin")
    unclipped = _unclipped(CONVERTER, tmp_path / "unclipped.tflite")
    recorded = np.load(TFLITE / "keras_lstm_converter.npz")
    y = torch.from_numpy(recorded["x"])
    for chain in TfliteFile.load(unclipped).chains:
        rnnconv.convert(unclipped, tmp_path / "layer.pt", layer=chain.name, force=True)
        state = torch.load(tmp_path / "layer.pt", weights_only=True)
        module = torch.nn.LSTM(state["weight_ih_l0"].shape[1], state["weight_hh_l0"].shape[1], batch_first=True)
        module.load_state_dict(state)
        with torch.no_grad():
            y = module(y)[0]
    error = float(np.abs(y.numpy() - recorded["y"]).max())
    LARGEST_ERRORS["tf-keras vs its converter's .tflite read back"] = error
    assert error < TOLERANCE


def test_the_converters_bidirectional_stack_reads_as_one_rnn(tmp_path):
    """The converter writes Bidirectional(LSTM) as rnnconv does (REVERSE_V2, the op, REVERSE_V2, CONCATENATION): two
    such layers are one 2-layer bidirectional RNN, which (clip set to 0) computes what tf-keras computed."""
    source = TFLITE / "keras_bilstm_converter.tflite"
    (entry,) = rnnconv.inspect(source).rnns
    assert not entry.converts and "cell_clip=10.0" in entry.reason
    assert (entry.sizes.num_layers, entry.sizes.bidirectional, entry.sizes.hidden_size) == (2, True, 7)
    unclipped = _unclipped(source, tmp_path / "unclipped.tflite")
    (entry,) = rnnconv.inspect(unclipped).rnns
    assert entry.converts and entry.spec.num_layers == 2 and entry.spec.bidirectional
    rnnconv.convert(unclipped, tmp_path / "bi.pt")
    module = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    module.load_state_dict(torch.load(tmp_path / "bi.pt", weights_only=True))
    recorded = np.load(TFLITE / "keras_bilstm_converter.npz")
    with torch.no_grad():
        y = module(torch.from_numpy(recorded["x"]))[0].numpy()
    error = float(np.abs(y - recorded["y"]).max())
    LARGEST_ERRORS["tf-keras Bidirectional vs its converter's .tflite read back"] = error
    assert error < TOLERANCE


def test_the_converters_cell_clip_is_refused_naming_allow_lossy(tmp_path):
    result = run_cli("convert", TFLITE / "keras_bilstm_converter.tflite", tmp_path / "m.pt")
    assert_clean_failure(result, 2, "cell_clip=10.0", "cuDNN's LSTM does not clip", "--allow-lossy")
    assert not (tmp_path / "m.pt").exists()


def test_allow_lossy_drops_the_converters_cell_clip_and_says_how_far_it_moves(tmp_path):
    """--allow-lossy reads TensorFlow's converter's LSTM without its cell_clip=10 and says how far that moves the
    outputs: not at all on ordinary inputs (the cell state stays far inside the clip), and by a measured amount on
    inputs that reach it; the written file computes what LiteRT computes running the converter's own file, and the
    loss is recorded for verify."""
    source = TFLITE / "keras_bilstm_converter.tflite"
    result = run_cli("convert", source, tmp_path / "m.pt", "--allow-lossy", "--json")
    assert result.returncode == 0, result.stderr
    (warning,) = json.loads(result.stdout)["warnings"]
    ordinary = re.search(r"non-zero states\) its outputs move by up to (\S+)$", warning)
    reaching = re.search(r"cell_clip=10: on inputs large enough to reach it .* by up to ([0-9.e+-]+)\)", warning)
    assert ordinary and reaching, warning
    assert float(ordinary[1]) == 0 and float(reaching[1]) > 1e-3
    recorded = np.load(TFLITE / "keras_bilstm_converter.npz")
    interpreter = Interpreter(model_path=str(source))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], recorded["x"])
    interpreter.invoke()
    own = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    module = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    module.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    with torch.no_grad():
        y = module(torch.from_numpy(recorded["x"]))[0].numpy()
    error = float(np.abs(y - own).max())
    LARGEST_ERRORS["LiteRT's run of the converter's clipped LSTM vs its --allow-lossy conversion"] = error
    assert error < 1e-5
    (rnn,) = rnnconv.convert(source, tmp_path / "again.pt", allow_lossy=True).rnns
    assert rnn.source.loss is not None and "cell_clip=10" in rnn.source.loss.dropped[0]
    assert rnnconv.verify(tmp_path / "m.pt").verdict == "match"


def test_the_clip_allow_lossy_measures_is_the_one_litert_computes():
    """What --allow-lossy's measurement runs (the numpy reference with the cell state clipped) is what LiteRT
    computes for the converter's clipped LSTM, on inputs that reach the clip (initial cells set beyond it), and the
    unclipped reading differs there: the reported change is the clip's own."""
    model = TfliteFile.load(CONVERTER)
    first = next(op for op in model.ops if op.name == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    rng = np.random.default_rng(36)
    x = (rng.standard_normal((2, 6, 5)) * 10).astype(np.float32)
    c0 = (rng.standard_normal((2, 7)) * 20).astype(np.float32)
    interpreter = Interpreter(model_path=str(CONVERTER))
    interpreter.allocate_tensors()
    interpreter.set_tensor(first.inputs[TFLITE_LSTM_INPUTS.index("cell_state")], c0)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    own = interpreter.get_tensor(first.outputs[0])
    with rnnconv.load(CONVERTER, layer=model.chains[0].name, drop_clip=True) as (rnn,):
        clipped, unclipped = (
            forward(rnn.spec, rnn.param, x.transpose(1, 0, 2), None, c0[None], clip=clip)[0].transpose(1, 0, 2)
            for clip in ((10.0, 0.0), (0.0, 0.0))
        )
    error = float(np.abs(clipped - own).max())
    LARGEST_ERRORS["LiteRT's clipped LSTM vs the numpy reference's clip"] = error
    assert error < 1e-5 and float(np.abs(unclipped - own).max()) > 1e-3


@pytest.mark.parametrize("streaming", [[], ["--streaming"]], ids=["whole", "streaming"])
def test_verify_says_nothing_of_litert_s_own(streaming, tmp_path):
    """LiteRT's XNNPACK delegate wrote "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." to stderr on every
    verify of a .tflite, -q too (once a process: a fresh one shows it)."""
    torch.save(torch.nn.LSTM(3, 4).state_dict(), tmp_path / "lstm.pt")
    out = tmp_path / "lstm.tflite"
    rnnconv.convert(tmp_path / "lstm.pt", out, streaming=bool(streaming))
    result = fresh_cli("verify", out, *streaming, "-q")
    assert result.returncode == 0 and result.stdout.startswith("MATCH"), (result.stdout, result.stderr)
    assert result.stderr == ""


# --- refusals ----------------------------------------------------------------------------------------------------


def test_a_gru_is_refused_naming_the_ways_out_and_they_verify(tmp_path):
    """The refusal said a GRU would need unrolled ops "which rnnconv does not write", when --streaming writes just
    that, and it verifies."""
    torch.save(torch.nn.GRU(5, 7).state_dict(), tmp_path / "gru.pt")
    result = run_cli("convert", tmp_path / "gru.pt", tmp_path / "gru.tflite")
    assert_clean_failure(
        result, 2, "TFLite / LiteRT has no GRU", "--streaming writes it exactly", "it is held exactly by cuDNN (.bin)"
    )
    assert "does not write" not in result.stderr
    assert not (tmp_path / "gru.tflite").exists()
    assert run_cli("convert", tmp_path / "gru.pt", tmp_path / "gru.tflite", "--streaming", "-q").returncode == 0
    result = run_cli("verify", tmp_path / "gru.tflite", "--streaming", "-q")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("target", ["m.onnx", "m.xml"])
def test_a_projection_refused_names_the_formats_that_hold_it_and_they_verify(target, tmp_path):
    """ONNX's and OpenVINO's projection refusals named no target that holds a projection: TFLite's does, exactly."""
    result = run_cli("convert", FIXTURES / "torch" / "lstm_proj.pt", tmp_path / target)
    assert_clean_failure(result, 2, "has no projection", "it is held exactly by", "TFLite / LiteRT (.tflite)")
    named = re.findall(r"\((\.[\w.]+)\)", result.stderr.split("held exactly by")[1])
    assert ".tflite" in named and ".keras" not in named, result.stderr  # Keras's LSTM has no projection either
    for index, ending in enumerate(named):  # each in its folder: an ncnn model's .bin beside its .param
        (tmp_path / str(index)).mkdir()
        out = tmp_path / str(index) / f"held{ending}"
        assert run_cli("convert", FIXTURES / "torch" / "lstm_proj.pt", out, "-q").returncode == 0, ending
        result = run_cli("verify", out, "-q")
        assert result.returncode == 0, (ending, result.stdout, result.stderr)


def test_element_types_tflite_cannot_hold_are_refused(tmp_path):
    torch.save(torch.nn.LSTM(5, 7).double().state_dict(), tmp_path / "f64.pt")
    with pytest.raises(Unsupported, match="float64 weights would be rounded; say --dtype float32"):
        rnnconv.convert(tmp_path / "f64.pt", tmp_path / "a.tflite")
    rnnconv.convert(tmp_path / "f64.pt", tmp_path / "a.tflite", dtype="float32")
    with pytest.raises(Unsupported, match="float32 weights, not float16"):
        rnnconv.convert(tmp_path / "f64.pt", tmp_path / "b.tflite", dtype="float16")
    assert not (tmp_path / "b.tflite").exists()


def _crafted(written, tmp_path, change) -> object:
    """The 1-layer LSTM's graph with one change made to its op (inputs, options), written to a file."""
    _, source, _ = written["lstm_projection_2_layers"]
    with rnnconv.load(source) as (rnn,):
        graph = graph_of(rnn)
        _, inputs, _, options = graph.ops[0]
        change(graph, inputs, options)
        path = tmp_path / "crafted.tflite"
        with open(path, "wb") as f:
            write_graph(graph, f)
    return path


def _add(name: str, shape):
    def change(graph, inputs, options):
        inputs[TFLITE_LSTM_INPUTS.index(name)] = graph.constant(
            Constant(name, shape, "float32", lambda: np.full(shape, 0.25, np.float32))
        )

    return change


def _drop(name: str):
    def change(graph, inputs, options):
        inputs[TFLITE_LSTM_INPUTS.index(name)] = -1

    return change


def _option(key: str, value):
    return lambda graph, inputs, options: options.update({key: value})


CRAFTED = {
    "peepholes": (_add("cell_to_forget_weights", (7,)), "peephole weights (cell_to_forget_weights)"),
    "layer_norm": (_add("cell_layer_norm_coefficients", (7,)), "cuDNN's LSTM has no layer normalization"),
    "cifg": (_drop("input_to_input_weights"), "CIFG"),
    "projection_bias": (_add("projection_bias", (3,)), "non-zero projection_bias: cuDNN's projection has no bias"),
    "cell_clip": (_option("cell_clip", 3.0), "clips with cell_clip=3.0"),
    "proj_clip": (_option("proj_clip", 2.0), "clips with proj_clip=2.0"),
    "relu": (_option("activation", TFLITE_ACTIVATIONS["relu"]), "activation='relu': cuDNN's"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_what_cudnn_cannot_compute_is_refused(case, written, tmp_path):
    change, sentence = CRAFTED[case]
    path = _crafted(written, tmp_path, change)
    with pytest.raises(Unsupported, match=re.escape(sentence)):
        rnnconv.convert(path, tmp_path / "x.bin")
    assert not (tmp_path / "x.bin").exists()
    (entry,) = rnnconv.inspect(path).rnns
    assert not entry.converts and sentence in entry.reason


# --- hostile files -------------------------------------------------------------------------------------------------


def _mutations(data: bytes):
    """Truncations, a root offset far out, a tensor naming a buffer that does not exist, and seeded random words."""
    yield "truncated to 6 bytes", data[:6]
    for cut in (12, 64, len(data) // 2, len(data) - 9):
        yield f"truncated to {cut}", data[:cut]
    yield "root out of range", struct.pack("<I", 0x7FFFFF00) + data[4:]
    flat = Flat(Path("in memory"), len(data), data)
    tensor = flat.root().tables(2)[0].tables(0)[3]
    changed = bytearray(data)
    struct.pack_into("<I", changed, tensor._field(2), 9999)
    yield "buffer index out of range", bytes(changed)
    rng = np.random.default_rng(11)
    for i in range(120):
        changed = bytearray(data)
        at = int(rng.integers(8, len(data) - 4)) & ~3
        struct.pack_into("<I", changed, at, int(rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x10000, rng.integers(0, 2**32)])))
        yield f"word at {at} changed ({i})", bytes(changed)


def test_hostile_files_give_one_sentence(written, tmp_path):
    data = written["lstm_2_layers_bidirectional"][2].read_bytes()
    bad = tmp_path / "bad.tflite"
    refused = 0
    for what, mutated in _mutations(data):
        bad.write_bytes(mutated)
        try:
            rnnconv.inspect(bad)
            with rnnconv.load(bad) as rnns:
                for rnn in rnns:
                    rnn.arrays()
        except RnnconvError as exc:
            assert "\n" not in str(exc) and str(exc), what
            refused += 1
    assert refused >= 6


@pytest.mark.slow
@pytest.mark.parametrize(
    "what, cut, sentence",
    [("truncated", 200, "not a readable TFLite model"), ("root out of range", None, "offset points outside the file")],
)
def test_hostile_files_on_the_command_line_exit_2(what, cut, sentence, written, tmp_path):
    data = written["lstm"][2].read_bytes()
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(data[:cut] if cut else struct.pack("<I", 0x7FFFFF00) + data[4:])
    for command in ("inspect", "convert"):
        args = [command, bad] + ([tmp_path / "x.bin"] if command == "convert" else [])
        assert_clean_failure(run_cli(*args), 2, sentence)


# --- verify ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_verify_runs_the_tflite_source_in_litert_and_catches_swapped_gates(written, tmp_path):
    out = written["lstm_2_layers_bidirectional"][2]
    source, blob = tmp_path / "model.tflite", tmp_path / "blob.bin"
    source.write_bytes(out.read_bytes())
    rnnconv.convert(source, blob)
    result = run_cli("verify", blob, "--backend", "numpy", "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout
    report = Report.model_validate_json((tmp_path / "r.json").read_text())
    assert report.source.run.startswith("ai-edge-litert")
    assert_clean_failure(run_cli("verify", blob, "--backend", "numpy", "--ragged"), 2, "no sequence lengths")
    swapped = tmp_path / "swapped.tflite"
    _swap_gates(source, swapped)
    result = run_cli("verify", blob, "--backend", "numpy", "--against", swapped)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


def _swap_gates(path, into, first="layer0/input_to_input_weights", second="layer0/input_to_forget_weights"):
    """A copy of a written file with two gates' weights swapped in place (same shapes: the file stays valid)."""
    names = {t.name: t.data for t in TfliteFile.load(path).tensors}
    (a, n), (b, m) = names[first], names[second]
    data = bytearray(path.read_bytes())
    data[a : a + n], data[b : b + m] = bytes(data[b : b + m]), bytes(data[a : a + n])
    into.write_bytes(bytes(data))


@pytest.mark.slow
def test_verify_a_written_file_runs_it_against_the_source_it_records(written, tmp_path):
    """`rnnconv verify model.tflite`: the file as written in LiteRT against its recorded PyTorch source; two gates
    swapped in the file give a mismatch (exit 1)."""
    out = written["lstm_2_layers_bidirectional"][2]
    result = run_cli("verify", out, "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout
    report = Report.model_validate_json((tmp_path / "r.json").read_text())
    assert report.backend.name == "tflite" and "ai-edge-litert" in report.backend.detail
    swapped = tmp_path / "swapped.tflite"
    _swap_gates(out, swapped)
    result = run_cli("verify", swapped)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


@pytest.mark.slow
def test_verify_backend_tflite_runs_a_blob_in_litert(written, tmp_path):
    blob, gru = tmp_path / "blob.bin", tmp_path / "gru.bin"
    rnnconv.convert(written["lstm_projection_2_layers"][1], blob)
    result = run_cli("verify", blob, "--backend", "tflite", "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["backend"]["name"] == "tflite"
    torch.save(torch.nn.GRU(5, 7).state_dict(), tmp_path / "gru.pt")
    rnnconv.convert(tmp_path / "gru.pt", gru)
    assert_clean_failure(run_cli("verify", gru, "--backend", "tflite"), 2, "TFLite / LiteRT has no GRU")


# --- what a conversion imports ------------------------------------------------------------------------------------


def test_writing_and_reading_need_no_framework(tmp_path):
    assert_no_framework_imported(FIXTURES / "torch" / "rnn_tanh.pt", tmp_path / "m.tflite", tmp_path / "back.bin")


def test_the_documented_loading_snippet_runs(written, tmp_path):
    """docs/formats/tflite.md's loading block, run on a written two-layer bidirectional LSTM."""
    block = doc_code("docs/formats/tflite.md")
    (tmp_path / "model.tflite").write_bytes(written["lstm_2_layers_bidirectional"][2].read_bytes())
    result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("count", [3000, 5000])
def test_many_rnn_ops_are_grouped_in_linear_time_or_refused(count, written, tmp_path):
    """A file of thousands of LSTM ops (one set of weights shared) reads in about a second; beyond 4096 RNN ops it
    is refused in a sentence."""
    import time

    _, source, _ = written["lstm"]
    with rnnconv.load(source) as (rnn,):
        graph = graph_of(rnn)
    op = graph.ops[0]
    for k in range(count - 1):
        y = graph.activation(f"y{k}", 7)
        graph.ops.append((op[0], list(op[1]), [y], op[3]))
    path = tmp_path / "many.tflite"
    with open(path, "wb") as f:
        write_graph(graph, f)
    started = time.perf_counter()
    if count > 4096:
        with pytest.raises(BadInput, match=f"holds {count} RNN ops, more than any model"):
            TfliteFile.load(path)
    else:
        assert len(TfliteFile.load(path).chains) == count
    assert time.perf_counter() - started < 20


def test_a_file_cut_short_while_it_is_read_is_one_sentence(written, tmp_path):
    """The file is read, never mapped: cut short after it was opened, its weights' reads say so (no SIGBUS)."""
    path = tmp_path / "model.tflite"
    data = written["lstm_2_layers_bidirectional"][2].read_bytes()
    path.write_bytes(data)
    with rnnconv.load(path) as (rnn,):
        with open(path, "r+b") as f:
            f.truncate(len(data) // 3)
        with pytest.raises(BadInput, match="changed while it was being read"):
            rnn.arrays()


def test_a_model_over_2_gib_is_refused_before_anything_is_written(written, tmp_path):
    """flatbuffers' offsets are 32-bit: the sizes alone decide, before a weight is read or a file made."""
    from rnnconv.formats.tflite.builder import serialize

    _, source, _ = written["lstm"]
    with rnnconv.load(source) as (rnn,):
        graph = graph_of(rnn)

    def never() -> np.ndarray:
        raise AssertionError("read")

    graph.constant(Constant("huge", (600_000_000,), "float32", never))  # 2.4 GB
    with pytest.raises(Unsupported, match=r"the model would take 2\.40 GB, but a \.tflite flatbuffer holds at most 2"):
        serialize(graph)


def _bidirectional_op_file(module: torch.nn.LSTM, path):
    """The module as one BIDIRECTIONAL_SEQUENCE_LSTM per layer, written with rnnconv's graph: batch-major, its two
    outputs joined by CONCATENATION (LiteRT 2.3's merge_outputs=true is wrong for batch-major inputs of batch > 1:
    docs/LAYOUTS.md section 13)."""
    from rnnconv.formats.tflite.builder import Graph, GraphTensor
    from rnnconv.formats.tflite.wire import TFLITE_BIDIRECTIONAL_LSTM_INPUTS as NAMES

    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    hidden, graph = module.hidden_size, Graph()
    x = graph.activation("x", module.input_size)
    graph.inputs = [x]
    for layer in range(module.num_layers):
        inputs = [x] + [-1] * (len(NAMES) - 1)
        for prefix, suffix in (("fw_", ""), ("bw_", "_reverse")):
            for k, word in enumerate(("input", "forget", "cell", "output")):
                rows = slice(k * hidden, (k + 1) * hidden)
                for name, values in (
                    (f"input_to_{word}_weights", state[f"weight_ih_l{layer}{suffix}"][rows]),
                    (f"recurrent_to_{word}_weights", state[f"weight_hh_l{layer}{suffix}"][rows]),
                    (
                        f"{word}_gate_bias",
                        state[f"bias_ih_l{layer}{suffix}"][rows] + state[f"bias_hh_l{layer}{suffix}"][rows],
                    ),
                ):
                    inputs[NAMES.index(prefix + name)] = graph.constant(
                        Constant(f"l{layer}/{prefix}{name}", values.shape, "float32", lambda v=values: v)
                    )
            for name in ("output_state", "cell_state"):
                tensor = GraphTensor(f"l{layer}/{prefix}{name}", [1, hidden], [-1, hidden], variable=True)
                inputs[NAMES.index(prefix + name)] = graph.tensor(tensor)
        outputs = [graph.activation(f"y{layer}_{side}", hidden) for side in ("fw", "bw")]
        options = {"activation": TFLITE_ACTIVATIONS["tanh"], "merge_outputs": False}  # merged: see below
        graph.ops.append(("BIDIRECTIONAL_SEQUENCE_LSTM", inputs, outputs, options))
        x = graph.activation(f"y{layer}", 2 * hidden)
        graph.ops.append(("CONCATENATION", outputs, [x], {"axis": 2}))
    graph.outputs = [x]
    with open(path, "wb") as f:
        write_graph(graph, f)


def test_bidirectional_sequence_lstm_ops_read_as_one_rnn(tmp_path):
    """A file of BIDIRECTIONAL_SEQUENCE_LSTM ops (48 inputs: 1-17 forward, 18-34 backward, 35-38 the states),
    which LiteRT runs as PyTorch's module, reads back as that module's weights."""
    torch.manual_seed(3)
    module = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True)
    path = tmp_path / "bi.tflite"
    _bidirectional_op_file(module, path)
    interpreter = Interpreter(model_path=str(path))
    for detail in interpreter.get_tensor_details():
        if detail["name"].endswith("_state"):
            interpreter.resize_tensor_input(detail["index"], [BATCH, 7])
    interpreter.resize_tensor_input(0, [BATCH, STEPS, 5])
    interpreter.allocate_tensors()
    x = torch.randn(STEPS, BATCH, 5)
    interpreter.set_tensor(0, x.numpy().transpose(1, 0, 2).copy())
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).transpose(1, 0, 2)
    with torch.no_grad():
        expected = module(x)[0].numpy()
    assert np.abs(got - expected).max() < TOLERANCE  # the file is the module, as LiteRT runs it
    (entry,) = rnnconv.inspect(path).rnns
    assert (entry.layer_class, entry.converts, entry.spec.num_layers, entry.spec.bidirectional) == (
        "BIDIRECTIONAL_SEQUENCE_LSTM",
        True,
        2,
        True,
    )
    rnnconv.convert(path, tmp_path / "back.pt")
    back = torch.load(tmp_path / "back.pt", weights_only=True)
    for name, values in module.state_dict().items():
        if name.startswith("weight"):
            torch.testing.assert_close(back[name], values, rtol=0, atol=0)
        elif name.startswith("bias_hh"):
            torch.testing.assert_close(back[name], values + module.state_dict()[name.replace("_hh", "_ih")])
    blob = tmp_path / "blob.bin"
    rnnconv.convert(path, blob)
    result = run_cli("verify", blob, "--backend", "numpy")
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr


def test_a_tflite_source_without_litert_is_exit_3_even_where_its_metadata_is_gone_too(tmp_path, monkeypatch):
    """Found on the GPU machine (flatbuffers there, ai-edge-litert not): the report's version was asked of the
    package metadata before the interpreter's import, and the missing metadata was an internal error (exit 4)."""
    from importlib import metadata

    from rnnconv.errors import BackendMissing
    from rnnconv.formats.tflite import runner as tflite

    def absent(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    assert tflite.litert_version() == "(version unknown)"  # importable without metadata: still runs
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    with pytest.raises(BackendMissing, match=r"pip install 'rnnconv\[tflite\]'"):
        tflite.litert_version()
    blob = tmp_path / "t.bin"
    rnnconv.convert(FIXTURES / "tflite" / "rnn_tanh.tflite", blob, to="cudnn")
    shadow = tmp_path / "shadow" / "ai_edge_litert"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named ai_edge_litert')\n")
    result = run_cli("verify", blob, "--backend", "numpy", env={"PYTHONPATH": str(shadow.parent)})
    assert result.returncode == 3 and "pip install 'rnnconv[tflite]'" in result.stderr, result.stderr
