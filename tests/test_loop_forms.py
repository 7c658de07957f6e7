"""The loop forms the converters write that rnnconv refused before (fixtures/make_tflite_fixtures.py,
make_tf2onnx_fixtures.py, make_onnx_fixtures.py): TensorFlow's TFLite converter on a Keras 3 LSTM at a fixed batch of
1 and on one of implementation=1 (a product per gate), TF1's BasicLSTMCell (one product of [x, h], forget_bias added)
through tf2onnx and the TFLite converter, tf2onnx's Loop started from the model's input h0, and the dynamo exporter's
nn.LSTMCell steps from zero states. Each converted and run in PyTorch against its own runtime running the file
(non-zero initial states where the model takes them), listed with its sizes, and audited against its checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, run_cli

import rnnconv

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
TOLERANCE = 1e-5
MODULES = {"lstm": torch.nn.LSTM, "rnn_tanh": torch.nn.RNN}
# fixture: (mode, input, hidden, batch fed, batch-major, the model takes h0)
FORMS = {
    "tflite/loop_k3_lstm_batch1.tflite": ("lstm", 3, 4, 1, True, False),
    "tflite/loop_k3_lstm_per_gate.tflite": ("lstm", 3, 4, 2, True, False),
    "tf2onnx/basic_lstm.tflite": ("lstm", 3, 5, 2, True, False),
    "tf2onnx/basic_lstm.onnx": ("lstm", 3, 5, 2, True, False),
    "tf2onnx/simple_rnn_states.onnx": ("rnn_tanh", 3, 5, 2, True, True),
    "onnx/lstm_cell_loop_zeros_dynamo.onnx": ("lstm", 5, 7, 2, False, False),
}
AUDITED = {  # the deployed loop file and the checkpoint it was made from
    "tflite/loop_k3_lstm_batch1.tflite": "tflite/loop_k3_lstm_batch1.keras",
    "tflite/loop_k3_lstm_per_gate.tflite": "tflite/loop_k3_lstm_per_gate.keras",
    "tf2onnx/simple_rnn_states.onnx": "tf2onnx/simple_rnn_states.h5",
    "onnx/lstm_cell_loop_zeros_dynamo.onnx": "onnx/lstm_cell_loop_zeros_dynamo.pt",
}


def runtime(path, x: np.ndarray, h0: np.ndarray | None) -> np.ndarray:
    """The file's first output as its own runtime computes it (LiteRT, onnxruntime)."""
    if path.suffix == ".tflite":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(path))
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    from facts.onnx import ort_session

    session = ort_session(path)
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, [x] if h0 is None else [x, h0])))[0]


@pytest.mark.parametrize("name", sorted(FORMS))
def test_a_loop_form_converts_to_what_its_runtime_computes(name, tmp_path):
    mode, input_size, hidden, batch, batch_major, takes_h0 = FORMS[name]
    source = FIXTURES / name
    (entry,) = rnnconv.inspect(source).rnns
    assert entry.converts, entry.reason
    assert (entry.spec.mode, entry.spec.input_size, entry.spec.hidden_size) == (mode, input_size, hidden)
    assert (entry.sizes.input_size, entry.sizes.hidden_size) == (input_size, hidden)
    result = run_cli("convert", source, tmp_path / "m.pt")
    assert result.returncode == 0, result.stderr
    module = MODULES[mode](input_size, hidden, batch_first=batch_major)
    module.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    rng = np.random.default_rng(7)
    fixed = onnx.load(str(source)).graph.input[0] if source.suffix == ".onnx" else None
    steps = 4 if fixed is not None and fixed.type.tensor_type.shape.dim[0].dim_value == 4 else 5
    x = rng.normal(0, 1.5, (batch, steps, input_size) if batch_major else (steps, batch, input_size))
    x = x.astype(np.float32)
    h0 = rng.normal(0, 0.8, (batch, hidden)).astype(np.float32) if takes_h0 else None
    expected = runtime(source, x, h0)
    with torch.no_grad():
        y, _ = module(torch.from_numpy(x), None if h0 is None else torch.from_numpy(h0)[None])
    assert y.shape == expected.shape
    error = float(np.abs(y.numpy() - expected).max())
    print(f"{name}: torch vs its runtime on the file, max abs {error:.3g}")
    assert error <= TOLERANCE
    verified = run_cli("verify", tmp_path / "m.pt")  # against the file's loops (or steps) run as the file has them
    assert verified.returncode == 0 and "MATCH" in verified.stdout, verified.stdout + verified.stderr


@pytest.mark.parametrize("deployed", sorted(AUDITED))
def test_a_deployed_loop_file_audits_as_one_match_per_rnn(deployed):
    """Before: the batch-1 WHILE and the per-gate one two NOT-FOUND rows, the h0 Loop refused, the dynamo steps from
    zeros three one-step cells (one MATCH, two NOT-FOUND)."""
    result = run_cli("verify", FIXTURES / deployed, "--against", FIXTURES / AUDITED[deployed], "--backend", "numpy")
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = [line for line in result.stdout.splitlines() if line.startswith(("MATCH", "NOT-FOUND", "MISMATCH"))]
    assert verdicts == [next(v for v in verdicts if v.startswith("MATCH: "))], result.stdout
    assert "NOT-FOUND" not in result.stdout, result.stdout


def test_a_loop_body_reading_the_weights_around_it_is_listed_once(tmp_path):
    """The h0 Loop with its body reading its weights from the graph around it (constants there, not values it
    carries): its body's cell is the Loop's, never a second RNN of one step (it was listed twice, the copy
    converting)."""
    model = onnx.load(str(FIXTURES / "tf2onnx/simple_rnn_states.onnx"))
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    body = loop.attribute[0].g
    stored = {t.name for t in model.graph.initializer}
    outer = {
        given.name: start
        for given, result, start in zip(body.input[2:], body.output[1:], loop.input[2:])
        if given.name == result.name and start in stored
    }
    assert len(outer) == 3  # the input matrix, the bias and the recurrent matrix
    for node in body.node:
        node.input[:] = [outer.get(name, name) for name in node.input]
    path = tmp_path / "outer_weights.onnx"
    onnx.save(model, path)
    (entry,) = rnnconv.inspect(path).rnns
    assert entry.converts and entry.layer_class == "RNN cell (Loop body)", entry


def test_a_loop_started_from_a_computed_state_is_refused_naming_it(tmp_path):
    """The h0 Loop's state started from h0 doubled (a value the graph computes, neither zeros nor the model's
    input): refused, naming it."""
    from onnx import helper

    model = onnx.load(str(FIXTURES / "tf2onnx/simple_rnn_states.onnx"))
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    place = list(loop.input).index("h0")
    model.graph.node.insert(0, helper.make_node("Add", ["h0", "h0"], ["h0_doubled"]))
    loop.input[place] = "h0_doubled"
    path = tmp_path / "doubled.onnx"
    onnx.save(model, path)
    (entry,) = rnnconv.inspect(path).rnns
    assert not entry.converts and "'h0_doubled' is neither zeros nor one of the model's inputs" in entry.reason


def test_steps_whose_last_new_state_nothing_reads_are_refused_not_an_rnn(tmp_path):
    """The dynamo exporter's four LSTMCell steps with the model's last output taken from inside the fourth step
    (its tanh(c), where h was): the graph no longer gives that RNN's outputs, so the steps are refused as one, saying
    why (the fuzzer's case: converted, the RNN was off by 1.1 from onnxruntime's run of the file)."""
    model = onnx.load(str(FIXTURES / "onnx/lstm_cell_loop_zeros_dynamo.onnx"))
    (last,) = [n for n in model.graph.node if n.op_type == "Unsqueeze" and n.input[0] == "mul_11"]
    last.input[0] = "tanh"
    path = tmp_path / "unread_step.onnx"
    onnx.save(model, path)
    (entry,) = rnnconv.inspect(path).rnns
    assert not entry.converts and "gives at step 4 of 4 a new state that nothing in the graph reads" in entry.reason
