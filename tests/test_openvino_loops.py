"""RNNs OpenVINO's TensorFlow frontend writes as `Loop` ops (fixtures/make_openvino_fixtures.py: `ov.convert_model` of
Keras 3 LSTM, GRU, SimpleRNN and a Bidirectional LSTM): each read by what its body computes, converted, and the result
run in PyTorch against OpenVINO's CPU plugin running the frontend's own file."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv

OPENVINO = FIXTURES / "openvino"
TOLERANCE = 1e-5
MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}
LOOPS = {  # fixture: (mode, input, hidden, layers, bidirectional)
    "keras_lstm_loop": ("lstm", 3, 4, 1, False),
    "keras_gru_loop": ("gru", 3, 5, 1, False),
    "keras_rnn_loop": ("rnn_tanh", 3, 4, 1, False),
    "keras_bilstm_loop": ("lstm", 3, 4, 1, True),
    "keras_gru2_loop": ("gru", 3, 4, 2, False),
    "keras_lstm_dynamic_loop": ("lstm", 3, 4, 1, False),  # batch and steps left open
    "keras_bigru_last_loop": ("gru", 3, 4, 1, True),  # return_sequences=False: each direction's last step kept
    # port maps that slice the sequence into the steps and concatenate the new states (tf-keras's Loops, ONNX Scans'
    # TensorIterators; the bidirectional Scan's backward one slicing and concatenating with stride -1)
    "tf_keras_lstm_sliced": ("lstm", 3, 4, 1, False),
    "tf_keras_gru_sliced": ("gru", 3, 5, 1, False),
    "tf_keras_bilstm_sliced": ("lstm", 3, 4, 1, True),
    "tf_keras_rnn_sliced": ("rnn_tanh", 3, 4, 1, False),
    # return_sequences=False: the last layer's Loop gives out its last step's new state alone
    "tf_keras_lstm_last_state": ("lstm", 3, 4, 1, False),
    "tf_keras_gru2_last_state": ("gru", 3, 4, 2, False),
    "tf_keras_bilstm_last_state": ("lstm", 3, 4, 1, True),  # the two directions' final states joined: h_n
    "onnx_scan_lstm_ti": ("lstm", 3, 4, 1, False),
    "onnx_scan_bilstm_ti": ("lstm", 3, 4, 1, True),
}
SAVED_F16 = ("keras_lstm_loop", "keras_gru_loop", "keras_rnn_loop", "onnx_scan_lstm_ti")  # saved f16 too: NAME_f16
LOOPS.update({f"{name}_f16": LOOPS[name] for name in SAVED_F16})
TIME_MAJOR = {"onnx_scan_lstm_ti", "onnx_scan_bilstm_ti", "onnx_scan_lstm_ti_f16"}  # (steps, batch, features)
LAST_STATE = {  # the model gives out h_n
    "tf_keras_lstm_last_state",
    "tf_keras_gru2_last_state",
    "tf_keras_bilstm_last_state",
    "keras_bigru_last_loop",
}


def openvino(path, x: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled(x)[0]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_frontend_loop_converts_to_what_openvino_computes(name, tmp_path):
    mode, input_size, hidden, layers, bidirectional = LOOPS[name]
    source = OPENVINO / f"{name}.xml"
    entry = rnnconv.inspect(source).rnns[0]  # the whole RNN (its layers are listed after it)
    assert entry.converts, entry.reason
    spec = entry.spec
    assert (spec.mode, spec.input_size, spec.hidden_size, spec.num_layers, spec.bidirectional) == LOOPS[name]
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr
    batch_first = name not in TIME_MAJOR
    module = MODULES[mode](input_size, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    module.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    x = np.random.default_rng(7).normal(0, 1.5, (2, 5, input_size) if batch_first else (5, 2, input_size))
    expected = openvino(source, x.astype(np.float32))
    with torch.no_grad():
        y, h_n = module(torch.from_numpy(x.astype(np.float32)))
    if name in LAST_STATE:  # the last layer's final state of each direction, joined on the features
        h_n = h_n[0] if mode == "lstm" else h_n
        if not bidirectional:
            assert float(np.abs(y[:, -1].numpy() - expected).max()) < TOLERANCE  # y's last step
        y = torch.cat(list(h_n[-2:] if bidirectional else h_n[-1:]), dim=-1)
    assert y.shape == expected.shape
    assert float(np.abs(y.numpy() - expected).max()) < TOLERANCE


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_verify_runs_a_frontend_loop_against_its_conversion(name, tmp_path):
    source = OPENVINO / f"{name}.xml"
    assert run_cli("convert", source, tmp_path / "m.pt").returncode == 0
    result = run_cli("verify", tmp_path / "m.pt", "--against", source)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout
    assert "run by OpenVINO" in result.stdout and "CPU plugin: the file's" in " ".join(result.stdout.split())


@pytest.mark.parametrize("name", sorted(set(LOOPS) - LAST_STATE))
def test_the_cells_openvino_compiles_from_a_loops_body_stepped_by_rnnconv_compute_the_files_own_graph(name):
    """The source's run in verify: each Loop's body, as OpenVINO reads it, cut at the step's input and state and
    compiled, stepped by rnnconv from the file's zero states, gives what the file's whole graph gives in OpenVINO."""
    from rnnconv.core.canonical import RNNSpec
    from rnnconv.formats._cells import run_loops
    from rnnconv.formats.openvino.reader import IRFile
    from rnnconv.formats.openvino.runner import compiled_cells

    source = OPENVINO / f"{name}.xml"
    ir = IRFile(source)
    (chain,) = ir.chains
    spec = RNNSpec.from_model(rnnconv.inspect(source).rnns[0].spec)
    x = np.random.default_rng(8).normal(0, 1.5, (5, 2, spec.input_size)).astype(np.float32)  # steps, batch
    expected = openvino(source, x if name in TIME_MAJOR else x.transpose(1, 0, 2))
    cells, how = compiled_cells(ir, chain)
    assert how.startswith(f"OpenVINO {ov.__version__.split('-')[0]} CPU plugin")
    states = np.zeros((spec.num_layers * spec.num_directions, 2, spec.hidden_size), np.float32)
    y = run_loops(cells, spec, {"x": x, "h0": states, "c0": states}, "a Loop")["y"]
    y = y if name in TIME_MAJOR else y.transpose(1, 0, 2)
    assert y.shape == expected.shape and float(np.abs(y - expected).max()) < TOLERANCE


@pytest.mark.parametrize("name", SAVED_F16)
def test_a_loop_saved_f16_reads_as_float16_the_weights_of_the_loop_saved_f32_rounded(name, tmp_path):
    """`ov.save_model`'s default compress_to_fp16: each float Const f16, Converted to f32 where the body reads it.
    The Loop reads as float16, its weights the f16 Consts' own: the same model saved in f32, rounded to f16."""
    (entry,) = rnnconv.inspect(OPENVINO / f"{name}_f16.xml").rnns
    assert entry.converts and entry.spec.dtype == "float16", entry.reason
    rnnconv.convert(OPENVINO / f"{name}_f16.xml", tmp_path / "f16.pt")
    rnnconv.convert(OPENVINO / f"{name}.xml", tmp_path / "f32.pt")
    half, full = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("f16", "f32"))
    assert half.keys() == full.keys() and all(t.dtype == torch.float16 for t in half.values())
    assert all(torch.equal(half[key], full[key].half()) for key in full)
    assert any(not torch.equal(half[key].float(), full[key]) for key in full)  # f16 did round them


def test_a_loop_of_f16_and_f32_weights_reads_as_float32_exactly(tmp_path):
    """A body whose bias stays f32 beside f16 matrices (as `ov.save_model` keeps a Const f16 cannot hold): no one
    type is the source's, so the Loop reads as float32, which holds both exactly, and computes what OpenVINO does."""
    source = tmp_path / "mixed.xml"
    weights = bytearray((OPENVINO / "keras_lstm_loop_f16.bin").read_bytes())
    text = (OPENVINO / "keras_lstm_loop_f16.xml").read_text()
    old = '<data element_type="f16" shape="1, 16" offset="279" size="32" />'
    assert text.count(old) == 1
    bias = np.frombuffer(bytes(weights[279:311]), np.float16).astype(np.float32)
    at = text.index(old)
    port = text.index('precision="FP16"', at)  # the Const's output port's
    new = f'<data element_type="f32" shape="1, 16" offset="{len(weights)}" size="64" />'
    source.write_text(text[:at] + new + text[at + len(old) : port] + 'precision="FP32"' + text[port + 16 :])
    source.with_suffix(".bin").write_bytes(bytes(weights) + (bias + 1e-4).tobytes())  # no longer f16 values
    (entry,) = rnnconv.inspect(source).rnns
    assert entry.converts and entry.spec.dtype == "float32", entry.reason
    rnnconv.convert(source, tmp_path / "m.pt")
    module = torch.nn.LSTM(3, 4, batch_first=True)
    module.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    x = np.random.default_rng(7).normal(0, 1.5, (2, 5, 3)).astype(np.float32)
    with torch.no_grad():
        y, _ = module(torch.from_numpy(x))
    assert float(np.abs(y.numpy() - openvino(source, x)).max()) < TOLERANCE


MUTATIONS = {  # a change to the LSTM fixture's Loop: what it breaks, and the phrase its refusal says
    "its output concatenated over the iterations": (
        (
            '<output external_port_id="8" internal_layer_id="50" />',
            '<output external_port_id="8" internal_layer_id="50" axis="0" />',
        ),
        None,
        "which is not the step's new state",
    ),
    "the sequence not given to the body (the fuzz found it: StopIteration, exit 4)": (
        ('<input external_port_id="7" internal_layer_id="5" />', ""),
        None,
        "does not read its input, counter and state from what the Loop is given",
    ),
    "state and cell state exchanged": (
        ('<edge from-layer="51" to-layer="3" />', '<edge from-layer="52" to-layer="3" />'),
        ('<edge from-layer="52" to-layer="4" />', '<edge from-layer="51" to-layer="4" />'),
        "does not carry its state",
    ),
    "the counter given out, not the states": (
        (
            '<output external_port_id="8" internal_layer_id="50" />',
            '<output external_port_id="8" internal_layer_id="49" />',
        ),
        None,
        "gives out no sequence of its new states",
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_loop_that_does_not_step_its_cell_as_an_rnn_is_listed_with_the_reason(mutation, tmp_path):
    first, second, phrase = MUTATIONS[mutation]
    text = (OPENVINO / "keras_lstm_loop.xml").read_text()
    for old, new in [first] + ([second] if second else []):
        assert text.count(old) == 1
        text = text.replace(old, new)
    source = tmp_path / "loop.xml"
    source.write_text(text)
    source.with_suffix(".bin").write_bytes((OPENVINO / "keras_lstm_loop.bin").read_bytes())
    (entry,) = rnnconv.inspect(source).rnns
    assert not entry.converts and phrase in entry.reason
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert_clean_failure(result, 2, "is a Loop whose body looks like an RNN cell", phrase)
    assert not (tmp_path / "m.pt").exists()


def test_a_loop_run_once_per_batch_entry_is_refused_not_read_as_once_a_step(tmp_path):
    """The open-size LSTM's trip count taken from the batch (ShapeOf(x)[0]), not the steps: OpenVINO runs it as many
    steps as the batch has entries. With every open size probed as 3, the two could not be told apart, and the file
    converted as an LSTM over every step."""
    text = (OPENVINO / "keras_lstm_dynamic_loop.xml").read_text()
    steps_index = '<edge from-layer="4" from-port="0" to-layer="6" to-port="1" />'  # Gather(ShapeOf(x), 1)
    assert text.count(steps_index) == 1
    source = tmp_path / "loop.xml"
    source.write_text(text.replace(steps_index, steps_index.replace('"4"', '"5"', 1)))  # Const 5 holds 0: the batch
    source.with_suffix(".bin").write_bytes((OPENVINO / "keras_lstm_dynamic_loop.bin").read_bytes())
    ov = pytest.importorskip("openvino")
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    (y,) = ov.Core().compile_model(source, "CPU")(x).values()
    assert y.shape == (2, 2, 4)  # OpenVINO ran 2 steps of 5: the mutation does what it says
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert_clean_failure(result, 2, "is a Loop whose body looks like an RNN cell")
    assert not (tmp_path / "m.pt").exists()


def test_a_loop_stepping_backwards_alone_is_listed_with_the_reason(tmp_path):
    """Keras GRU(go_backwards=True): its Loop reads the sequence reversed (ReverseSequence), with no forward loop
    beside it; cuDNN has no backward-only direction: listed, refused in one sentence (it converted as a forward GRU)."""
    source = OPENVINO / "keras_gru_backwards_loop.xml"
    (entry,) = rnnconv.inspect(source).rnns
    assert not entry.converts and "runs backwards over its sequence" in entry.reason
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert_clean_failure(result, 2, "is a Loop whose body looks like an RNN cell", "no backward-only direction")
    assert not (tmp_path / "m.pt").exists()


SLICED_INPUT = 'axis="0" external_port_id="6" internal_layer_id="4" start="0" end="-1" stride="1" part_size="1"'
LAST_STATE_GIVEN = '<edge from-layer="28" from-port="2" to-layer="30" to-port="0" />'  # Unsqueeze(new h), given out
SLICED_MUTATIONS = {  # a change to a port map slicing or concatenating over the iterations: fixture, edits, phrase
    "the sequence sliced from its last step, nothing reversing it back": (
        "tf_keras_lstm_sliced",
        [(SLICED_INPUT, SLICED_INPUT.replace('start="0" end="-1" stride="1"', 'start="-1" end="0" stride="-1"'))],
        "runs backwards over its sequence with no forward loop beside it",
    ),
    "the forward Scan's sequence sliced from its last step, its output not reversed back": (
        "onnx_scan_bilstm_ti",
        [
            (
                '<input axis="0" external_port_id="0" internal_layer_id="2" start="0" end="-1" stride="1" ',
                '<input axis="0" external_port_id="0" internal_layer_id="2" start="-1" end="0" stride="-1" ',
            )
        ],
        "runs backwards over its sequence with no forward loop beside it",
    ),
    "the cell state concatenated, not the state": (
        "tf_keras_lstm_sliced",
        [('external_port_id="7" internal_layer_id="35"', 'external_port_id="7" internal_layer_id="37"')],
        "which is not the step's new state",
    ),
    "the sequence sliced two steps at a time": (
        "tf_keras_lstm_sliced",
        [(SLICED_INPUT, SLICED_INPUT.replace('stride="1"', 'stride="2"'))],
        "otherwise than a step at a time over all 5 steps as OpenVINO's frontends write it (axis 0, start 0, end -1, "
        "stride 2, part_size 1)",
    ),
    "the Scan's sequence ending at its length, not -1 (OpenVINO's CPU plugin refuses to run it)": (
        "onnx_scan_lstm_ti",
        [('internal_layer_id="2" start="0" end="-1" stride="1"', 'internal_layer_id="2" start="0" end="5" stride="1"')],
        "(axis 0, start 0, end 5, stride 1, part_size 1)",
    ),
    "the sequence sliced in parts of two steps": (
        "tf_keras_lstm_sliced",
        [(SLICED_INPUT, SLICED_INPUT.replace('part_size="1"', 'part_size="2"'))],
        "otherwise than a step at a time",
    ),
    "the sequence sliced on the batch": (
        "tf_keras_lstm_sliced",
        [(SLICED_INPUT, SLICED_INPUT.replace('axis="0"', 'axis="1"'))],
        "otherwise than a step at a time",
    ),
    "the outputs concatenated two steps at a time": (
        "onnx_scan_lstm_ti",
        [
            (
                'internal_layer_id="29" start="0" end="-1" stride="1"',
                'internal_layer_id="29" start="0" end="-1" stride="2"',
            )
        ],
        "otherwise than a step at a time",
    ),
    "the last step's cell state given out, not its state (return_sequences=False)": (
        "tf_keras_lstm_last_state",
        [(LAST_STATE_GIVEN, LAST_STATE_GIVEN.replace('from-layer="28"', 'from-layer="25"'))],
        "which is not the step's new state",
    ),
    "the state the last step starts from given out, not its new state (return_sequences=False)": (
        "tf_keras_lstm_last_state",
        [(LAST_STATE_GIVEN, LAST_STATE_GIVEN.replace('from-layer="28" from-port="2"', 'from-layer="2" from-port="0"'))],
        "which is not the step's new state",
    ),
    "the state of step 0 given out, the Loop run once (its trip count a Const of 1)": (
        "tf_keras_lstm_last_state",
        [
            (
                '<data element_type="i32" shape="" offset="0" size="4" />',
                '<data element_type="i32" shape="" offset="41" size="4" />',
            )
        ],
        "it runs 1 times over a sequence of 5 steps",
    ),
    "the carried cell state given out after the last step (return_sequences=False)": (
        "tf_keras_lstm_last_state",
        [('external_port_id="7" internal_layer_id="35"', 'external_port_id="7" internal_layer_id="37"')],
        "its body writes no output sequence",
    ),
    "a body that is no cell (its LSTM's output tanh a relu)": (
        "tf_keras_lstm_sliced",
        [('name="while/Tanh_1" type="Tanh"', 'name="while/Tanh_1" type="Relu"')],
        "computes none of the",
    ),
}


@pytest.mark.parametrize("mutation", sorted(SLICED_MUTATIONS))
def test_a_sliced_loop_that_does_not_step_its_cell_as_an_rnn_is_listed_with_the_reason(mutation, tmp_path):
    """Port maps slicing the sequence or concatenating the new states otherwise than an RNN's loop: each listed with
    the reason and refused in one sentence, nothing written (OpenVINO runs them: none computes the RNN read)."""
    name, edits, phrase = SLICED_MUTATIONS[mutation]
    text = (OPENVINO / f"{name}.xml").read_text()
    for old, new in edits:
        assert text.count(old) == 1
        text = text.replace(old, new)
    source = tmp_path / "loop.xml"
    source.write_text(text)
    source.with_suffix(".bin").write_bytes((OPENVINO / f"{name}.bin").read_bytes())
    refused = [entry for entry in rnnconv.inspect(source).rnns if not entry.converts]
    assert refused and phrase in refused[0].reason
    result = run_cli("convert", source, tmp_path / "m.pt", "--layer", refused[0].name)
    assert_clean_failure(result, 2, "whose body looks like an RNN cell", phrase)
    assert not (tmp_path / "m.pt").exists()


def test_a_reset_before_gru_loop_converts_to_onnx_and_is_refused_for_cudnn(tmp_path):
    """tf-keras GRU(reset_after=False): its body multiplies the reset state by the candidate's block of R (a third
    product): read as a reset-before GRU, written as ONNX's linear_before_reset=0 computing what OpenVINO computes of
    the frontend's file, and refused for cuDNN naming the term."""
    from facts.onnx import reset_before_gru_to_onnx

    source = OPENVINO / "tf_keras_gru_reset_before_sliced.xml"
    x = np.random.default_rng(7).normal(0, 1.5, (2, 5, 3)).astype(np.float32)
    _, error = reset_before_gru_to_onnx(source, tmp_path, (3, 5), x, openvino(source, x))
    LARGEST_ERRORS["OpenVINO reset-before GRU Loop to ONNX"] = error
    assert error <= TOLERANCE


DAMAGED = {  # a change to the LSTM fixture's Loop that leaves it no graph: the phrase its refusal says
    "a layer of the body reads itself": (
        (
            '<edge from-layer="0" from-port="0" to-layer="7" to-port="0" />',
            '<edge from-layer="7" from-port="2" to-layer="7" to-port="0" />',
        ),
        "read each other in a cycle",
    ),
    "the port map names no layer of the body": (
        (
            '<output external_port_id="8" internal_layer_id="50" />',
            '<output external_port_id="8" internal_layer_id="500" />',
        ),
        "which is no Result of its body",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_loop_body_is_refused_in_a_sentence(damage, tmp_path):
    (old, new), phrase = DAMAGED[damage]
    text = (OPENVINO / "keras_lstm_loop.xml").read_text()
    assert text.count(old) == 1
    source = tmp_path / "loop.xml"
    source.write_text(text.replace(old, new))
    source.with_suffix(".bin").write_bytes((OPENVINO / "keras_lstm_loop.bin").read_bytes())
    for command in (["inspect", source], ["convert", source, tmp_path / "m.pt"]):
        assert_clean_failure(run_cli(*command), 2, phrase)
    assert not (tmp_path / "m.pt").exists()


def test_a_tensor_iterator_whose_states_are_given_is_listed_with_the_reason(tmp_path):
    """OpenVINO's ONNX frontend's TensorIterator of an ONNX Scan given h0 and c0 (fixtures/onnx/lstm_cell_in_scan.onnx):
    its states start from the model's inputs, not zeros: listed with that reason, refused, nothing written."""
    source = tmp_path / "scan.xml"
    ov.save_model(ov.convert_model(str(FIXTURES / "onnx" / "lstm_cell_in_scan.onnx")), str(source), False)
    (entry,) = rnnconv.inspect(source).rnns
    assert not entry.converts and "its initial state is not zeros" in entry.reason
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert_clean_failure(result, 2, "is a TensorIterator whose body looks like an RNN cell", "not zeros")
    assert not (tmp_path / "m.pt").exists()


def test_a_direction_keeping_its_last_step_beside_one_keeping_every_step_is_refused_not_a_crash(tmp_path):
    """The tf-keras Bidirectional LSTM's backward Loop concatenating nothing (its last step's state alone) while the
    forward one gives out every step: the two are no bidirectional layer. Joining them to check crashed (exit 4)."""
    text = (OPENVINO / "tf_keras_bilstm_sliced.xml").read_text()
    old = '<output axis="0" external_port_id="7" internal_layer_id="35" start="0" end="-1" stride="1" part_size="1" />'
    assert text.count(old) == 2
    at = text.rindex(old)  # the backward Loop's
    source = tmp_path / "loop.xml"
    source.write_text(text[:at] + '<output external_port_id="7" internal_layer_id="35" />' + text[at + len(old) :])
    source.with_suffix(".bin").write_bytes((OPENVINO / "tf_keras_bilstm_sliced.bin").read_bytes())
    refused = [entry for entry in rnnconv.inspect(source).rnns if not entry.converts]
    assert refused and "runs backwards over its sequence" in refused[0].reason
    result = run_cli("convert", source, tmp_path / "m.pt", "--layer", refused[0].name)
    assert_clean_failure(result, 2, "whose body looks like an RNN cell", "runs backwards over its sequence")
    assert not (tmp_path / "m.pt").exists()


def test_a_loop_whose_body_openvino_reads_with_its_cells_output_named_twice_is_not_run_in_its_place(tmp_path):
    """OpenVINO's model knows a body's layers by name alone: where two share the name of the layer whose value is the
    cell's new state, verify says it cannot cut the cell there, rather than run some other value as it."""
    xml = (OPENVINO / "keras_lstm_loop.xml").read_text()
    new_state = "functional_1/lstm_1/while/lstm_cell_1/mul_2"
    other = "functional_1/lstm_1/while/lstm_cell_1/mul_1"
    assert f'name="{new_state}" type="Multiply"' in xml and f'name="{other}" type="Multiply"' in xml
    source = tmp_path / "named_twice.xml"
    source.write_text(xml.replace(f'name="{other}" type="Multiply"', f'name="{new_state}" type="Multiply"'))
    source.with_suffix(".bin").write_bytes((OPENVINO / "keras_lstm_loop.bin").read_bytes())
    assert run_cli("convert", source, tmp_path / "m.pt").returncode == 0  # rnnconv reads a body by its layers' ids
    result = run_cli("verify", tmp_path / "m.pt", "--against", source)
    assert_clean_failure(result, 2, "OpenVINO reads 2 Multiply layers named", "so the cell rnnconv read there cannot")
