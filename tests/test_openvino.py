"""OpenVINO IR: the .xml + .bin rnnconv writes (without OpenVINO) runs in OpenVINO's CPU plugin as the frameworks run
their weights; IRs OpenVINO itself saved read back; round trips are exact; what cannot convert is refused in a
sentence; hostile IRs are refused before anything is read."""

from __future__ import annotations

import re

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, assert_no_framework_imported, run_cli
from facts.openvino import ov_run

import rnnconv
import rnnconv.core.report_contracts

STEPS, BATCH, INPUT, HIDDEN = 6, 3, 5, 4
LENGTHS = np.array([6, 2, 4])  # ragged: OpenVINO zeroes y past each length, as torch's packed sequences
K3 = FIXTURES / "keras3"


def torch_module(kind: str, layers: int = 2, bidirectional: bool = True, **kwargs) -> torch.nn.Module:
    torch.manual_seed(hash((kind, layers, bidirectional)) % 1000)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN, "rnn_relu": torch.nn.RNN}[kind]
    if kind.startswith("rnn_"):
        kwargs["nonlinearity"] = kind[4:]
    module = cls(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional, batch_first=True, **kwargs)
    with torch.no_grad():  # distinct biases on both sides, so a lost or doubled one shows
        for name, p in module.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    return module


def inputs(module: torch.nn.Module, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    depth = module.num_layers * (2 if module.bidirectional else 1)
    x = (rng.standard_normal((BATCH, STEPS, module.input_size)) * 0.8).astype(np.float32)
    h0 = (rng.standard_normal((depth, BATCH, module.hidden_size)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((depth, BATCH, module.hidden_size)) * 0.5).astype(np.float32)
    return x, h0, c0


def torch_outputs(module, x, h0, c0, lengths) -> dict[str, np.ndarray]:
    lstm = isinstance(module, torch.nn.LSTM)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        torch.tensor(x), torch.tensor(lengths), batch_first=True, enforce_sorted=False
    )
    with torch.no_grad():
        y, state = module(packed, (torch.tensor(h0), torch.tensor(c0)) if lstm else torch.tensor(h0))
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
    out = {"y": y.numpy(), "h_n": (state[0] if lstm else state).numpy()}
    if lstm:
        out["c_n"] = state[1].numpy()
    return out


def worst(got: dict, expected: dict) -> float:
    return max(float(np.abs(got[k] - expected[k]).max()) for k in expected)


def run_against_torch(module, xml, label: str) -> float:
    x, h0, c0 = inputs(module)
    lstm = isinstance(module, torch.nn.LSTM)
    got = ov_run(xml, x, h0, c0 if lstm else None, LENGTHS)
    error = worst(got, torch_outputs(module, x, h0, c0, LENGTHS))
    LARGEST_ERRORS[f"openvino {label}"] = error
    return error


def test_cli_writes_ir_and_reads_it_back_exactly(tmp_path):
    """.xml -> cuDNN -> .xml and .xml -> PyTorch -> .xml give the same bytes; the matrices are the source's own."""
    module = torch_module("lstm", 2, True)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    result = run_cli("convert", tmp_path / "m.pt", tmp_path / "m.xml")
    assert result.returncode == 0, result.stderr
    for middle in ("blob.bin", "back.pt"):
        rnnconv.convert(tmp_path / "m.xml", tmp_path / middle)
        rnnconv.convert(tmp_path / middle, tmp_path / f"again_{middle}.xml")
        assert (tmp_path / f"again_{middle}.bin").read_bytes() == (tmp_path / "m.bin").read_bytes(), middle
    back, original = torch.load(tmp_path / "back.pt"), module.state_dict()
    for name, value in original.items():
        if "weight" in name:
            assert torch.equal(back[name], value), name
        elif name.startswith("bias_ih"):  # one summed bias per gate: split as --bias-split recurrent says
            assert not back[name].any(), name
        else:
            assert torch.equal(back[name], original[name.replace("bias_hh", "bias_ih")] + value), name
    again = torch_module("lstm", 2, True)
    again.load_state_dict(back)
    assert run_against_torch(again, tmp_path / "m.xml", "round trip through torch") < 1e-5


def test_float16_weights_are_decompressed_to_float32(tmp_path):
    module = torch_module("gru", 1, True)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.xml", dtype="float16")
    text = (tmp_path / "m.xml").read_text()
    assert 'element_type="f16"' in text and 'type="Convert"' in text
    assert run_against_torch(module, tmp_path / "m.xml", "from torch gru [float16]") < 5e-3
    (entry,) = [e for e in rnnconv.inspect(tmp_path / "m.xml").rnns if e.converts]
    assert entry.spec.dtype == "float16"


def test_ir_from_onnx_written_by_rnnconv(tmp_path):
    pytest.importorskip("onnx")
    module = torch_module("gru", 2, True)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.onnx")
    rnnconv.convert(tmp_path / "m.onnx", tmp_path / "m.xml")
    assert run_against_torch(module, tmp_path / "m.xml", "from onnx gru x2 bi") < 1e-5


# --- IRs OpenVINO wrote ----------------------------------------------------------------------------------------


def saved_by_openvino(tmp_path, kind: str, compress: bool, linear_before_reset: bool = True, direction="forward"):
    """One sequence op built with openvino.opset16 and saved by ov.save_model, and its weights."""
    import openvino.opset16 as ops

    rng = np.random.default_rng(5)
    gates = {"lstm": 4, "gru": 3, "rnn": 1}[kind]
    dirs = 2 if direction == "bidirectional" else 1
    w = rng.standard_normal((dirs, gates * HIDDEN, INPUT)).astype(np.float32)
    r = rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)).astype(np.float32)
    b = rng.standard_normal((dirs, (gates + (kind == "gru" and linear_before_reset)) * HIDDEN)).astype(np.float32)
    x = ops.parameter([-1, -1, INPUT], np.float32, name="data")
    h = ops.parameter([-1, dirs, HIDDEN], np.float32, name="h")
    lengths = ops.parameter([-1], np.int32, name="len")
    weights = [ops.constant(v) for v in (w, r, b)]
    if kind == "lstm":
        c = ops.parameter([-1, dirs, HIDDEN], np.float32, name="c")
        seq = ops.lstm_sequence(x, h, c, lengths, *weights, HIDDEN, direction)
        params = [x, h, c, lengths]
    elif kind == "gru":
        seq = ops.gru_sequence(x, h, lengths, *weights, HIDDEN, direction, linear_before_reset=linear_before_reset)
        params = [x, h, lengths]
    else:
        seq = ops.rnn_sequence(x, h, lengths, *weights, HIDDEN, direction, activations=["relu"])
        params = [x, h, lengths]
    path = tmp_path / f"{kind}.xml"
    ov.save_model(ov.Model(list(seq.outputs()), params, "hand"), str(path), compress_to_fp16=compress)
    return path, (w, r, b)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_ir_saved_by_openvino_reads_and_verifies(kind, tmp_path):
    path, (w, r, b) = saved_by_openvino(tmp_path, kind, compress=False, direction="bidirectional")
    blob = tmp_path / "m.bin"
    rnnconv.convert(path, blob)
    rnnconv.convert(blob, tmp_path / "back.xml")  # the same weights, as rnnconv writes them
    text = (tmp_path / "back.xml").read_text()
    offsets = [int(m) for m in re.findall(r'offset="(\d+)" size="\d+"', text)]
    data = (tmp_path / "back.bin").read_bytes()
    assert w.tobytes() in data[offsets[4] :] and r.tobytes() in data and b.tobytes() in data
    assert rnnconv.verify(blob, ragged=True).verdict == "match"


def test_ir_compressed_to_float16_by_openvino_reads_as_float16(tmp_path):
    path, (w, r, _) = saved_by_openvino(tmp_path, "lstm", compress=True)
    assert 'element_type="f16"' in path.read_text()
    from rnnconv.core.canonical import ParamKey

    with rnnconv.load(path) as (rnn,):  # OpenVINO's gates f, i, c, o: the forget gate is its first block
        assert np.array_equal(rnn.param(ParamKey(0, 0, "W", "f")), w[0, :HIDDEN].astype(np.float16))
        assert np.array_equal(rnn.param(ParamKey(0, 0, "R", "o")), r[0, 3 * HIDDEN :].astype(np.float16))
    report = rnnconv.inspect(path)
    (entry,) = report.rnns
    assert entry.converts and entry.spec.dtype == "float16"
    rnnconv.convert(path, tmp_path / "m.bin")
    assert rnnconv.verify(tmp_path / "m.bin").verdict == "match"


def test_reverse_only_op_verifies(tmp_path):
    path, _ = saved_by_openvino(tmp_path, "gru", compress=False, direction="reverse")
    converted = rnnconv.convert(path, tmp_path / "m.bin")
    assert "reverse-only" in " ".join(converted.rnns[0].notes)
    assert rnnconv.verify(tmp_path / "m.bin", ragged=True).verdict == "match"


def test_verify_blob_with_the_openvino_backend(tmp_path):
    module = torch_module("gru", 2, True)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.bin")
    report = rnnconv.verify(tmp_path / "m.bin", backend="openvino", ragged=True)
    assert report.verdict == "match" and report.backend.name == "openvino", report.summary


def test_a_blob_from_an_ir_with_two_gates_swapped_mismatches(tmp_path):
    module = torch_module("lstm", 1, False)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.xml")
    rnnconv.convert(tmp_path / "m.xml", tmp_path / "blob.bin")
    data = bytearray((tmp_path / "blob.bin").read_bytes())
    block = HIDDEN * INPUT * 4  # W_i and W_f are cuDNN's first two blocks
    data[:block], data[block : 2 * block] = data[block : 2 * block], data[:block]
    (tmp_path / "blob.bin").write_bytes(bytes(data))
    assert rnnconv.verify(tmp_path / "blob.bin").verdict == "mismatch"


# --- refused, in one sentence ------------------------------------------------------------------------------------


def test_projection_is_refused(tmp_path):
    module = torch.nn.LSTM(INPUT, 6, proj_size=3)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    assert_clean_failure(run_cli("convert", tmp_path / "m.pt", tmp_path / "m.xml"), 2, "no projection")
    assert not (tmp_path / "m.xml").exists() and not (tmp_path / "m.bin").exists()


def test_a_reset_before_gru_saved_by_openvino_reads_back_and_is_refused_for_cudnn(tmp_path):
    """A GRUSequence with linear_before_reset=false, built and saved by OpenVINO itself, bidirectional: rnnconv's IR
    of it holds the same W, R and B and computes what it computes (verify runs both); cuDNN refuses it."""
    path, (w, r, b) = saved_by_openvino(
        tmp_path, "gru", compress=False, linear_before_reset=False, direction="bidirectional"
    )
    back = tmp_path / "back.xml"
    rnnconv.convert(path, back)
    assert 'linear_before_reset="false"' in back.read_text()
    data = (tmp_path / "back.bin").read_bytes()
    assert w.tobytes() in data and r.tobytes() in data and b.tobytes() in data
    assert rnnconv.verify(back, against=path).verdict == "match"
    with pytest.raises(rnnconv.Unsupported, match="reset gate applied before the recurrent product"):
        rnnconv.convert(path, tmp_path / "m.bin")
    assert not (tmp_path / "m.bin").exists()


def test_the_weights_of_an_ir_are_never_written_over(tmp_path):
    """model.xml's weights are model.bin, the name a cuDNN blob of model.xml would have by default."""
    xml = _written(tmp_path)
    before = (tmp_path / "m.bin").read_bytes()
    with pytest.raises(rnnconv.BadInput, match="is the source being read"):
        rnnconv.convert(xml, tmp_path / "m.bin", force=True)
    rnnconv.convert(xml, tmp_path / "blob.bin")
    with pytest.raises(rnnconv.BadInput, match="is the source being read"):
        rnnconv.convert(tmp_path / "blob.bin", tmp_path / "blob.xml", force=True)
    assert (tmp_path / "m.bin").read_bytes() == before


def test_float64_output_is_refused(tmp_path):
    module = torch_module("rnn_tanh", 1, False)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    with pytest.raises(rnnconv.Unsupported, match="not float64"):
        rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.xml", dtype="float64")


def _written(tmp_path):
    module = torch_module("rnn_tanh", 1, False)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.xml")
    return tmp_path / "m.xml"


def test_hostile_irs_are_refused(tmp_path):
    xml = _written(tmp_path)
    text = xml.read_text()
    bomb = '<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>\n'
    (tmp_path / "bomb.xml").write_text(bomb + text.split("\n", 1)[1].replace('name="x"', 'name="&b;"', 1))
    (tmp_path / "bomb.bin").write_bytes((tmp_path / "m.bin").read_bytes())
    assert_clean_failure(run_cli("inspect", tmp_path / "bomb.xml"), 2, "DOCTYPE or an entity")
    far = re.sub(r'offset="(\d+)" size="(\d+)"', lambda m: f'offset="{int(m[1]) + 10**9}" size="{m[2]}"', text)
    (tmp_path / "far.xml").write_text(far.replace("<net", "<net ", 1))
    (tmp_path / "far.bin").write_bytes((tmp_path / "m.bin").read_bytes())
    with pytest.raises(rnnconv.BadInput, match="points past its weights"):
        rnnconv.convert(tmp_path / "far.xml", tmp_path / "o1.bin")
    (tmp_path / "cut.xml").write_text(text)
    (tmp_path / "cut.bin").write_bytes((tmp_path / "m.bin").read_bytes()[:40])
    assert_clean_failure(run_cli("inspect", tmp_path / "cut.xml"), 2, "points past its weights")
    (tmp_path / "lone.xml").write_text(text)
    with pytest.raises(rnnconv.BadInput, match=r"lone\.bin does not exist"):
        rnnconv.convert(tmp_path / "lone.xml", tmp_path / "o3.bin")
    (tmp_path / "bad.xml").write_text(text[: len(text) // 2])
    with pytest.raises(rnnconv.BadInput, match="not well-formed XML"):
        rnnconv.inspect(tmp_path / "bad.xml")


def test_writing_and_reading_need_no_framework(tmp_path):
    xml = _written(tmp_path)
    assert_no_framework_imported(xml.with_suffix(".pt"), tmp_path / "again.xml", tmp_path / "back.bin")
    assert (tmp_path / "again.bin").read_bytes() == (tmp_path / "m.bin").read_bytes()


def test_explain_draws_the_openvino_rows():
    result = run_cli("explain", "openvino")
    assert result.returncode == 0, result.stderr
    for name in ("LSTMSequence", "GRUSequence", "RNNSequence", "gates as stored: f i c o", "stored: z r h"):
        assert name in result.stdout, name


# --- verify a written .xml: the file itself, run in OpenVINO, against the source it records ----------------------


def _swap_first_two_gates(xml, hidden: int) -> None:
    """Swap the first two gates (OpenVINO's f and i) of layer 0, direction 0, in W, R and B of the IR's .bin."""
    text = xml.read_text()
    weights = xml.with_suffix(".bin")
    data = bytearray(weights.read_bytes())
    for role in ("input_matrix", "recurrent_matrix", "bias"):
        found = re.search(
            rf'name="layer0/{role}"[^>]*>\s*<data element_type="f32" shape="([\d, ]+)" offset="(\d+)"', text
        )
        shape = [int(n) for n in found[1].split(",")]
        offset, block = int(found[2]), hidden * (shape[2] if len(shape) == 3 else 1) * 4
        first, second = slice(offset, offset + block), slice(offset + block, offset + 2 * block)
        data[first], data[second] = data[second], data[first]
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_verify_runs_a_written_ir_against_the_source_it_records(kind, tmp_path):
    module = torch_module(kind, 2, True)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "model.xml")
    report = rnnconv.verify(tmp_path / "model.xml", ragged=True)
    assert report.verdict == "match", report.summary
    assert report.backend.name == "openvino" and "model.xml run as written" in report.backend.detail
    assert "the file's own graph" in report.backend.detail
    assert report.source.path == str((tmp_path / "m.pt").resolve())


def test_verify_catches_a_written_ir_with_two_gates_swapped(tmp_path):
    module = torch_module("lstm", 1, False)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "model.xml")
    _swap_first_two_gates(tmp_path / "model.xml", HIDDEN)
    result = run_cli("verify", tmp_path / "model.xml", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = rnnconv.core.report_contracts.Report.model_validate_json(result.stdout)
    assert report.verdict == "mismatch" and report.diagnosis is not None and report.diagnosis.found
    assert "look swapped" in report.diagnosis.message


def test_a_garbled_source_record_is_refused_in_a_sentence(tmp_path):
    xml = _written(tmp_path)
    text = re.sub(r"<rnnconv.source value='[^']*'", "<rnnconv.source value='{'", xml.read_text())
    text = re.sub(r'<rnnconv.source value="[^"]*"', '<rnnconv.source value="{"', text)
    xml.write_text(text)
    with pytest.raises(rnnconv.BadInput, match=r"rnnconv\.source record"):
        rnnconv.convert(xml, tmp_path / "blob.bin")


def test_an_ir_rnnconv_wrote_and_openvino_saved_again_reads_back(tmp_path):
    """OpenVINO takes the IR as its own: read_model and save_model (f16-compressed by default) keep the graph, the
    rt_info record and the layers' chain; rnnconv reads the result as the same RNN, float16."""
    module = torch_module("lstm", 2, True)
    torch.save(module.state_dict(), tmp_path / "m.pt")
    rnnconv.convert(tmp_path / "m.pt", tmp_path / "m.xml")
    ov.save_model(ov.Core().read_model(str(tmp_path / "m.xml")), str(tmp_path / "saved.xml"))
    (entry,) = [e for e in rnnconv.inspect(tmp_path / "saved.xml").rnns if e.sizes.num_layers == 2]
    assert entry.converts and entry.spec.dtype == "float16" and entry.spec.bidirectional
    assert rnnconv.verify(tmp_path / "saved.xml", ragged=True).verdict == "match"


def test_the_shipped_ir_fixtures_read():
    (entry,) = rnnconv.inspect(FIXTURES / "openvino" / "lstm_saved_f16.xml").rnns
    assert entry.converts and entry.layer_class == "LSTMSequence" and entry.spec.dtype == "float16"
    assert entry.spec.bidirectional and (entry.spec.input_size, entry.spec.hidden_size) == (3, 4)
    (entry,) = rnnconv.inspect(FIXTURES / "openvino" / "rnn_tanh.xml").rnns
    assert entry.converts and entry.spec.mode == "rnn_tanh"


def test_an_ir_of_openvinos_onnx_frontend_reads_as_one_rnn(tmp_path):
    """`ov.convert_model("model.onnx")` of a 2-layer bidirectional LSTM joins its two LSTMSequence ops by Transpose,
    Reshape and Transpose (ONNX's axes moved into OpenVINO's and back): the glue only moves axes, so the ops are one
    RNN, and converted it computes what OpenVINO computes running the file itself."""
    path = FIXTURES / "openvino" / "lstm_onnx_frontend.xml"
    report = rnnconv.inspect(path)
    (chain,) = [e for e in report.rnns if "," in e.name]
    assert chain.converts and chain.spec.num_layers == 2 and chain.spec.bidirectional
    assert (chain.spec.input_size, chain.spec.hidden_size) == (5, 7)
    result = run_cli("convert", path, tmp_path / "m.pt")  # the file's one RNN: no --layer needed
    assert result.returncode == 0, result.stderr
    assert run_cli("convert", path, tmp_path / "same.pt", "--layer", chain.name).returncode == 0
    module = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True)
    module.load_state_dict(torch.load(tmp_path / "m.pt"))
    x = np.random.default_rng(36).standard_normal((2, 6, 5)).astype(np.float32)
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = compiled({0: x})
    own = [np.asarray(results[output]) for output in compiled.outputs]  # y, h_n, c_n as ONNX's graph gives them
    with torch.no_grad():
        y, (h_n, c_n) = module(torch.tensor(x))
    error = worst(dict(zip("yhc", own, strict=True)), {"y": y.numpy(), "h": h_n.numpy(), "c": c_n.numpy()})
    LARGEST_ERRORS["openvino onnx frontend's 2-layer bidirectional LSTM"] = error
    assert error < 1e-5
    rnnconv.convert(path, tmp_path / "m.bin")
    assert rnnconv.verify(tmp_path / "m.bin", ragged=True).verdict == "match"


def test_glue_that_moves_data_across_axes_is_not_followed(tmp_path):
    """The same IR with its Transpose before the Reshape swapping batch and directions ([2, 1, 0, 3] for
    [2, 0, 1, 3]): the Reshape then merges the hidden size with the batch, so the ops are two RNNs, not one."""
    xml = (FIXTURES / "openvino" / "lstm_onnx_frontend.xml").read_text()
    const = re.search(r'element_type="i64" shape="4" offset="(\d+)"', xml)  # the permutation
    data = bytearray((FIXTURES / "openvino" / "lstm_onnx_frontend.bin").read_bytes())
    offset = int(const[1])
    assert list(np.frombuffer(data[offset : offset + 32], np.int64)) == [2, 0, 1, 3]
    data[offset : offset + 32] = np.array([2, 1, 0, 3], np.int64).tobytes()
    (tmp_path / "m.xml").write_text(xml)
    (tmp_path / "m.bin").write_bytes(bytes(data))
    assert not [e for e in rnnconv.inspect(tmp_path / "m.xml").rnns if "," in e.name]
    assert_clean_failure(run_cli("convert", tmp_path / "m.xml", tmp_path / "m.pt"), 2, "holds 2 RNNs")
