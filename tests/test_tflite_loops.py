"""RNNs TensorFlow's converter writes as WHILE loops (fixtures/make_tflite_fixtures.py: Keras 3 LSTM, Keras 3 and
tf-keras GRU and SimpleRNN; one and two layers, Bidirectional, return_sequences both ways): each read by what its
body computes, converted, and the result run in PyTorch against LiteRT running the converter's own file."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter

from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv

TFLITE = FIXTURES / "tflite"
TOLERANCE = 1e-5
MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}
# fixture: (mode, input, hidden, layers, bidirectional, the model's output is every step's)
LOOPS = {
    "loop_k3_lstm2": ("lstm", 3, 4, 2, False, True),
    "loop_k3_bigru2": ("gru", 3, 4, 2, True, False),
    "loop_k3_rnn": ("rnn_tanh", 3, 5, 1, False, False),
    "loop_tfk_gru": ("gru", 3, 5, 1, False, True),
    "loop_tfk_birnn": ("rnn_tanh", 3, 4, 1, True, True),
}


def litert(path, x: np.ndarray) -> np.ndarray:
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_converter_loop_converts_to_what_litert_computes(name, tmp_path):
    mode, input_size, hidden, layers, bidirectional, sequences = LOOPS[name]
    source = TFLITE / f"{name}.tflite"
    (entry,) = rnnconv.inspect(source).rnns
    assert entry.converts, entry.reason
    spec = entry.spec
    assert (spec.mode, spec.input_size, spec.hidden_size, spec.num_layers, spec.bidirectional) == LOOPS[name][:5]
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr
    module = MODULES[mode](input_size, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    module.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    x = np.random.default_rng(7).normal(0, 1.5, (2, 5, input_size)).astype(np.float32)
    expected = litert(source, x)
    with torch.no_grad():
        y, state = module(torch.from_numpy(x))
    h = (state[0] if mode == "lstm" else state).numpy()
    got = y.numpy() if sequences else np.concatenate(list(h[-2:] if bidirectional else h[-1:]), axis=-1)
    assert got.shape == expected.shape
    assert float(np.abs(got - expected).max()) < TOLERANCE


def test_a_gru_applying_its_reset_before_the_product_converts_to_onnx_and_is_refused_for_cudnn(tmp_path):
    """tf-keras GRU(reset_after=False): its body multiplies r*h by the candidate's recurrent block, a third product
    (the block's split by tf.split's -1 size): read as a reset-before GRU, written as ONNX's linear_before_reset=0
    (and Keras's reset_after=False) computing what LiteRT computes of the converter's file, and refused for cuDNN
    naming the term."""
    from facts.onnx import reset_before_gru_to_onnx

    source = TFLITE / "loop_tfk_gru_reset_before.tflite"
    x = np.random.default_rng(7).normal(0, 1.5, (2, 5, 3)).astype(np.float32)  # the file's batch and steps
    expected = litert(source, x)
    errors = {"ONNX": reset_before_gru_to_onnx(source, tmp_path, (3, 4), x, expected)[1]}
    if importlib.util.find_spec("keras") is not None:  # Keras 3 runs the .keras written (reset_after=False)
        from facts.keras import reset_before_keras_run

        rnnconv.convert(source, tmp_path / "m.keras")
        y, _ = reset_before_keras_run(tmp_path / "m.keras", x, np.zeros((1, 2, 4), np.float32))
        errors["Keras"] = float(np.abs(y - expected).max())
    for target, error in errors.items():
        LARGEST_ERRORS[f"TFLite reset-before GRU WHILE to {target}"] = error
    assert max(errors.values()) <= TOLERANCE, errors


def test_verify_runs_the_loops_own_cells_in_litert_against_the_conversion(tmp_path):
    """verify runs the source's loops step by step, each step their bodies' own cell ops in LiteRT, the backward
    loops over the sequences reversed: a 2-layer bidirectional GRU's conversion matches them."""
    converted = tmp_path / "m.pt"
    rnnconv.convert(TFLITE / "loop_k3_bigru2.tflite", converted)
    result = run_cli("verify", converted)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "MATCH" in said and "ai-edge-litert" in said and "the file's WHILE loop bodies' cells" in said


# Every WHILE-loop fixture: the file's first output is its last layer's sequence, else its final state(s).
STEPPED = [*LOOPS, "loop_tfk_gru_reset_before", "loop_k3_lstm_batch1", "loop_k3_lstm_per_gate", "basic_lstm"]


@pytest.mark.parametrize("name", STEPPED)
def test_the_cells_litert_runs_of_a_loops_body_stepped_by_rnnconv_compute_the_whole_file(name):
    """verify's run of the source: each WHILE body's own ops from the step's input and state to its new state,
    written again as a model of their own and run in LiteRT, stepped by rnnconv from the file's zero states, give
    what LiteRT gives of the whole file (its own loops)."""
    from rnnconv.core.canonical import RNNSpec
    from rnnconv.formats._cells import run_loops
    from rnnconv.formats.tflite.model import TfliteFile
    from rnnconv.formats.tflite.runner import compiled_cells

    source = FIXTURES / "tf2onnx" / f"{name}.tflite" if name == "basic_lstm" else TFLITE / f"{name}.tflite"
    (entry,) = rnnconv.inspect(source).rnns
    spec = RNNSpec.from_model(entry.spec)
    (chain,) = TfliteFile.load(source).chains
    cells, how = compiled_cells(chain)
    assert how.startswith("ai-edge-litert ")
    interpreter = Interpreter(model_path=str(source))
    shape = interpreter.get_input_details()[0]["shape"]  # the file's batch and steps
    x = np.random.default_rng(8).normal(0, 1.5, shape).astype(np.float32)
    expected = litert(source, x)
    out = run_loops(cells, spec, {"x": np.ascontiguousarray(x.transpose(1, 0, 2))}, "a WHILE loop")
    finals = out["h_n"][-spec.num_directions :]
    got = out["y"].transpose(1, 0, 2) if expected.ndim == 3 else np.concatenate(list(finals), axis=-1)
    assert got.shape == expected.shape
    assert float(np.abs(got - expected).max()) < TOLERANCE


def test_a_cells_values_are_written_with_the_shapes_rnnconv_computes_not_those_the_file_declares(tmp_path):
    """A body whose products' outputs declare a shape of 2**30 x 2**30 (LiteRT's XNNPACK delegate fails to prepare a
    graph holding it as declared): the cell rnnconv writes again gives each value the shape its own evaluation
    computed, so verify runs it and the conversion matches."""

    def huge(model, codes):
        body = model.subgraphs[2]
        for op in body.operators:
            if op.opcodeIndex == codes["FULLY_CONNECTED"]:
                body.tensors[op.outputs[0]].shape = [2**30, 2**30]

    mutated = tmp_path / "huge.tflite"
    mutated.write_bytes(_rebuilt(TFLITE / "loop_tfk_gru.tflite", huge))
    rnnconv.convert(mutated, tmp_path / "m.pt")
    result = run_cli("verify", tmp_path / "m.pt")
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr


def test_a_cell_litert_cannot_run_is_refused_in_its_words(tmp_path):
    """A loop whose body's FULLY_CONNECTED ops claim an operator version this LiteRT has no kernel for (a newer
    converter's): read (the ops compute a cell), but verify cannot run its cell and says so in one sentence."""

    def version_99(model, codes):
        model.operatorCodes[codes["FULLY_CONNECTED"]].version = 99

    mutated = tmp_path / "v99.tflite"
    mutated.write_bytes(_rebuilt(TFLITE / "loop_tfk_gru.tflite", version_99))
    (entry,) = rnnconv.inspect(mutated).rnns
    assert entry.converts, entry.reason
    rnnconv.convert(mutated, tmp_path / "m.pt")
    result = run_cli("verify", tmp_path / "m.pt")
    assert_clean_failure(result, 2, "LiteRT cannot run the cell of the WHILE loop", "FULLY_CONNECTED")


def _rebuilt(source, change) -> bytes:
    """The .tflite with `change(model, codes)` made to it (LiteRT's schema module: parsed, changed, rebuilt)."""
    flatbuffers = pytest.importorskip("flatbuffers")
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(source.read_bytes(), 0))
    for graph in model.subgraphs:
        for op in graph.operators:
            op.inputs = [int(t) for t in op.inputs]
    codes = {
        name: index
        for index, code in enumerate(model.operatorCodes)
        for name, number in vars(schema.BuiltinOperator).items()
        if number == code.builtinCode
    }
    change(model, codes)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_a_loop_body_that_computes_no_cell_is_listed_with_the_reason(tmp_path):
    """A SimpleRNN loop whose body's TANH is made a LOGISTIC (LiteRT runs it: a cell rnnconv does not read) and one
    whose input matrix is a computed tensor: listed, each with its reason, and refused in one sentence."""

    def sigmoid_for_tanh(model, codes):
        (body,) = [g for g in model.subgraphs if any(op.opcodeIndex == codes["TANH"] for op in g.operators)]
        for op in body.operators:
            if op.opcodeIndex == codes["TANH"]:
                op.opcodeIndex = codes.get("LOGISTIC", op.opcodeIndex)

    def computed_weights(model, codes):
        body = model.subgraphs[2]
        products = [op for op in body.operators if op.opcodeIndex == codes["FULLY_CONNECTED"]]
        products[0].inputs[1] = products[1].outputs[0]

    source = TFLITE / "loop_tfk_gru.tflite"
    for change, reason in ((sigmoid_for_tanh, "computes none of the"), (computed_weights, "1 matrix product (")):
        mutated = tmp_path / f"{change.__name__}.tflite"
        mutated.write_bytes(_rebuilt(source, change))
        (entry,) = rnnconv.inspect(mutated).rnns
        assert not entry.converts and reason in entry.reason and "WHILE loop" in entry.reason
        result = run_cli("convert", mutated, tmp_path / "m.pt")
        assert_clean_failure(result, 2, "WHILE loop", reason)


def test_a_file_whose_loops_step_no_cell_says_so(tmp_path):
    """A loop whose body multiplies by no constant weights (its FULLY_CONNECTED ops made ADDs) steps no cell: the
    file holds no RNN, said in one sentence naming its loops (it said a GRU is a loop rnnconv does not read)."""

    def no_products(model, codes):
        for graph in model.subgraphs[1:]:
            for op in graph.operators:
                if op.opcodeIndex == codes["FULLY_CONNECTED"]:
                    op.opcodeIndex, op.inputs = codes["ADD"], op.inputs[:2]

    mutated = tmp_path / "no_products.tflite"
    mutated.write_bytes(_rebuilt(TFLITE / "loop_tfk_gru.tflite", no_products))
    assert rnnconv.inspect(mutated).rnns == []
    result = run_cli("convert", mutated, tmp_path / "m.pt")
    assert_clean_failure(result, 2, "holds no UNIDIRECTIONAL_SEQUENCE_LSTM", "WHILE loops' bodies multiply by no")


def test_a_loop_whose_counters_do_not_start_from_zero_is_refused(tmp_path):
    """A loop whose counters start from another constant than 0 (LiteRT runs it from there, skipping steps) steps
    no RNN over its whole sequence: refused, saying so (it converted as if it started at 0)."""

    def counters_from_five(model, codes):
        main = model.subgraphs[0]
        stored = [
            bytes(bytearray(model.buffers[t.buffer].data)) if model.buffers[t.buffer].data is not None else b""
            for t in main.tensors
        ]
        (steps,) = [
            i
            for i, t in enumerate(main.tensors)
            if t.type == 2 and t.shape is not None and len(t.shape) == 0 and stored[i] == bytes([5, 0, 0, 0])
        ][:1]
        (loop,) = [op for op in main.operators if op.opcodeIndex == codes["WHILE"]]
        loop.inputs[0] = loop.inputs[1] = steps

    mutated = tmp_path / "from_five.tflite"
    mutated.write_bytes(_rebuilt(TFLITE / "loop_tfk_gru.tflite", counters_from_five))
    (entry,) = rnnconv.inspect(mutated).rnns
    assert not entry.converts and "does not start from 0" in entry.reason
