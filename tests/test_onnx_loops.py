"""RNNs tf2onnx writes as ONNX Loops (fixtures/make_tf2onnx_fixtures.py: a Keras SimpleRNN, a 2-layer stack, a
Bidirectional one, one returning its last step; a GRU with reset_after=False): each read by what its body computes,
converted, and the result run in PyTorch (the GRU: ONNX) against onnxruntime running tf2onnx's whole file; bodies
that step no RNN listed with the reason and refused in one sentence."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
TF2ONNX = FIXTURES / "tf2onnx"
TOLERANCE = 1e-5
SIMPLE_RNN_LOOP = "simple_rnn/simple_rnn/while_loop"
# fixture: (layers, bidirectional, the model's output is every step's)
LOOPS = {
    "simple_rnn": (1, False, True),
    "simple_rnn2": (2, False, True),
    "simple_rnn_bi": (1, True, True),
    "simple_rnn_last": (1, False, False),
}


def ort(path, x: np.ndarray) -> np.ndarray:
    from facts.onnx import ort_session

    return ort_session(path).run(None, {"x": x})[0]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_tf2onnx_loop_converts_to_what_onnxruntime_computes_of_the_whole_file(name, tmp_path):
    layers, bidirectional, sequences = LOOPS[name]
    source = TF2ONNX / f"{name}.onnx"
    (entry,) = [e for e in rnnconv.inspect(source).rnns if e.spec is not None and e.spec.num_layers == layers]
    assert entry.converts, entry.reason
    spec = entry.spec
    assert (spec.mode, spec.input_size, spec.hidden_size, spec.bidirectional) == ("rnn_tanh", 3, 5, bidirectional)
    out = tmp_path / "m.pt"
    result = run_cli("convert", source, out, "--layer", entry.name)
    assert result.returncode == 0, result.stderr
    module = torch.nn.RNN(3, 5, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    module.load_state_dict(torch.load(out, weights_only=True))
    x = np.random.default_rng(7).normal(0, 1.5, (2, 6, 3)).astype(np.float32)  # 6 steps: not the probes' 3
    expected = ort(source, x)
    with torch.no_grad():
        y, h = module(torch.from_numpy(x))
    got = y.numpy() if sequences else h.numpy()[-1]
    assert got.shape == expected.shape
    error = float(np.abs(got - expected).max())
    print(f"{name}: torch vs onnxruntime on tf2onnx's file, max abs {error:.3g}")
    assert error <= TOLERANCE
    result = run_cli("verify", out)  # against the Loops run step by step, each step their bodies' own cells
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr
    assert "run by onnxruntime" in result.stdout and "the file's Loop bodies' cells" in " ".join(result.stdout.split())


@pytest.mark.parametrize("name", sorted(n for n, (_, _, sequences) in LOOPS.items() if sequences))
def test_the_cells_onnxruntime_runs_of_a_loops_body_stepped_by_rnnconv_compute_the_whole_file(name):
    """verify's run of the source: each Loop's body's own nodes from the step's input and state to its new state,
    a model of their own in onnxruntime, stepped by rnnconv from the file's zero states, give what onnxruntime gives
    of the whole file."""
    from rnnconv.core.canonical import RNNSpec
    from rnnconv.formats._cells import run_loops
    from rnnconv.formats.onnx.reader import OnnxFile
    from rnnconv.formats.onnx.runner import compiled_cells

    layers = LOOPS[name][0]
    source = TF2ONNX / f"{name}.onnx"
    (entry,) = [e for e in rnnconv.inspect(source).rnns if e.spec is not None and e.spec.num_layers == layers]
    (chain,) = [c for c in OnnxFile.load(source).chains if len(c.layers) == layers]
    spec = RNNSpec.from_model(entry.spec)
    x = np.random.default_rng(8).normal(0, 1.5, (6, 2, 3)).astype(np.float32)  # steps, batch
    cells, how = compiled_cells(source, chain.layers)
    assert how.startswith("onnxruntime ")
    states = np.zeros((spec.num_layers * spec.num_directions, 2, spec.hidden_size), np.float32)
    y = run_loops(cells, spec, {"x": x, "h0": states}, "a Loop")["y"].transpose(1, 0, 2)
    expected = ort(source, np.ascontiguousarray(x.transpose(1, 0, 2)))
    assert y.shape == expected.shape and float(np.abs(y - expected).max()) < TOLERANCE


def test_a_reset_before_gru_loop_converts_to_onnx_and_is_refused_for_cudnn(tmp_path):
    """tf2onnx's GRU(reset_after=False): its body multiplies r*h by the candidate's block of the recurrent matrix
    (the matrix multiplied in parts, taken whole): read as a reset-before GRU, written as ONNX's linear_before_reset=0
    computing what onnxruntime computes of tf2onnx's file, and refused for cuDNN naming the term."""
    from facts.onnx import reset_before_gru_to_onnx

    source = TF2ONNX / "gru_reset_before.onnx"
    x = np.random.default_rng(5).normal(0, 1.5, (2, 6, 3)).astype(np.float32)  # 6 steps: not the probes' 3
    entry, error = reset_before_gru_to_onnx(source, tmp_path, (3, 5), x, ort(source, x))
    assert entry.layer_class == "GRU cell (Loop body)"
    LARGEST_ERRORS["tf2onnx reset-before GRU Loop to ONNX"] = error
    assert error <= TOLERANCE


def _mutated(tmp_path, change) -> object:
    model = onnx.load(TF2ONNX / "simple_rnn.onnx")
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    change(model, loop, loop.attribute[0].g)
    path = tmp_path / f"{change.__name__}.onnx"
    onnx.save(model, path)
    return path


def _body_node(body, op):
    return next(n for n in body.node if n.op_type == op)


def sigmoid_for_tanh(model, loop, body):
    _body_node(body, "Tanh").op_type = "Sigmoid"


def weight_changed_each_step(model, loop, body):
    from onnx import helper, numpy_helper

    recurrent = body.input[7].name  # the recurrent matrix, carried unchanged by tf2onnx
    body.initializer.append(numpy_helper.from_array(np.float32(1.01), "grown"))
    body.node.append(helper.make_node("Mul", [recurrent, "grown"], ["recurrent_next"]))
    body.output[6].name = "recurrent_next"  # carried value 5: the body's output 6


def counter_by_two(model, loop, body):
    from onnx import numpy_helper

    (one,) = [t for t in body.initializer if t.name.endswith("while/add/y:0")]
    one.CopyFrom(numpy_helper.from_array(np.asarray(2, numpy_helper.to_array(one).dtype), one.name))


def scan_output_not_the_state(model, loop, body):
    add = next(n for n in body.node if n.op_type == "Add" and n.name.endswith("simple_rnn_cell/add"))
    body.output[-1].name = add.output[0]


def initial_state_not_zeros(model, loop, body):
    from onnx import helper

    model.graph.node.insert(0, helper.make_node("Constant", [], ["half"], value_float=0.5))
    expand = next(n for n in model.graph.node if n.op_type == "Expand")
    expand.input[0] = "half"


def fewer_trips(model, loop, body):
    from onnx import numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(np.asarray(2, np.int64), "two"))
    loop.input[0] = "two"


def negative_trips(model, loop, body):
    """A trip count of -1: onnxruntime runs no step (it converted as if the count were no limit)."""
    from onnx import numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(np.asarray(-1, np.int64), "minus_one"))
    loop.input[0] = "minus_one"


def steps_counted_by_the_batch(model, loop, body):
    """The loop's condition compares its counter with the batch's size, not the sequence's (a probe of as many steps
    as entries converted it as if it ran every step)."""
    loop.input[4] = next(n for n in model.graph.node if n.name == "simple_rnn/simple_rnn/strided_slice").output[0]


def input_read_at_a_fixed_step(model, loop, body):
    """The body reads step 1 of the sequence at every step, by an integer it carries unchanged."""
    from onnx import TensorProto, helper, numpy_helper

    model.graph.initializer.append(numpy_helper.from_array(np.asarray(1, np.int32), "one"))
    carried = len(loop.input) - 2
    loop.input.append("one")
    loop.output.insert(carried, "fixed_final")
    body.input.append(helper.make_tensor_value_info("fixed", TensorProto.INT32, []))
    body.output.insert(1 + carried, helper.make_tensor_value_info("fixed", TensorProto.INT32, []))
    _body_node(body, "Gather").input[1] = "fixed"


MUTATIONS = {
    sigmoid_for_tanh: "its body's cell computes none of the",
    weight_changed_each_step: "its body's cell holds 1 matrix product (",
    counter_by_two: "is not a counter moving on by one each step",
    scan_output_not_the_state: "which is not the step's new state",
    initial_state_not_zeros: "is neither zeros nor one of the model's inputs",
    fewer_trips: "it runs 2 times over a sequence of 4 steps",
    negative_trips: "it runs 0 times over a sequence of 4 steps",
    steps_counted_by_the_batch: "it runs 3 times over a sequence of 4 steps",
    input_read_at_a_fixed_step: "does not read its input at a step it counts",
}


@pytest.mark.parametrize("change", list(MUTATIONS), ids=lambda c: c.__name__)
def test_a_loop_that_does_not_step_an_rnn_is_listed_with_the_reason_and_refused(change, tmp_path):
    """Each a valid model onnxruntime runs (computing something else than the SimpleRNN): listed with the reason,
    refused in one sentence, nothing written (before, each was only 'a Loop rnnconv does not read')."""
    path = _mutated(tmp_path, change)
    x = np.random.default_rng(3).normal(size=(2, 3, 3)).astype(np.float32)
    assert np.all(np.isfinite(ort(path, x)))
    reason = MUTATIONS[change]
    (entry,) = rnnconv.inspect(path).rnns
    assert not entry.converts and f"Loop {SIMPLE_RNN_LOOP!r}" in entry.reason and reason in entry.reason, entry.reason
    result = run_cli("convert", path, tmp_path / "m.pt")
    assert_clean_failure(result, 2, f"Loop {SIMPLE_RNN_LOOP!r} steps matrix products like an RNN cell", reason)
    assert not (tmp_path / "m.pt").exists()


def test_a_loop_whose_matrices_are_computed_at_run_time_is_named_as_a_loop_not_read(tmp_path):
    """Its weights made Abs(weights) in the graph (no constant rnnconv folds): no product a cell's, the file holds no
    RNN, said in one sentence naming the Loop."""

    def weights_computed(model, loop, body):
        from onnx import helper

        for place in (5, 6, 7):  # the input matrix, the bias, the recurrent matrix
            model.graph.node.insert(0, helper.make_node("Abs", [loop.input[place]], [f"computed{place}"]))
            loop.input[place] = f"computed{place}"

    path = _mutated(tmp_path, weights_computed)
    assert rnnconv.inspect(path).rnns == []
    result = run_cli("convert", path, tmp_path / "m.pt")
    assert_clean_failure(
        result, 2, f"holds no LSTM, GRU or RNN node: its Loop {SIMPLE_RNN_LOOP!r} steps matrix products over time"
    )
    assert not (tmp_path / "m.pt").exists()


def test_a_reset_before_gru_loop_is_read_as_the_onnx_gru_that_computes_it(tmp_path):
    """The GRU read off tf2onnx's reset-before loop (its recurrent matrix multiplied in parts, taken whole), as an
    ONNX GRU node with linear_before_reset=0, computes in onnxruntime what onnxruntime computes of tf2onnx's file."""
    from facts.onnx import ort_session
    from onnx import TensorProto, helper, numpy_helper

    from rnnconv.formats.onnx.reader import OnnxFile

    source = TF2ONNX / "gru_reset_before.onnx"
    (node,) = OnnxFile.load(source).layers
    assert node.op == "GRU" and node.attributes["linear_before_reset"] == 0 and node.refusal is None
    weights = [numpy_helper.from_array(node.weights[role].astype(np.float32), role) for role in ("W", "R", "B")]
    gru = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], hidden_size=5, linear_before_reset=0)
    graph = helper.make_graph(
        [gru, helper.make_node("Squeeze", ["Y", "axis"], ["y"])],
        "read",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [*weights, numpy_helper.from_array(np.asarray([1], np.int64), "axis")],
    )
    read = tmp_path / "read.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), read)
    x = np.random.default_rng(5).normal(0, 1.5, (2, 6, 3)).astype(np.float32)
    (expected,) = ort_session(source).run(None, {"x": x})
    (got,) = ort_session(read).run(None, {"X": np.ascontiguousarray(x.transpose(1, 0, 2))})
    error = float(np.abs(got.transpose(1, 0, 2) - expected).max())
    print(f"gru_reset_before: the GRU read vs onnxruntime on tf2onnx's file, max abs {error:.3g}")
    assert error <= TOLERANCE


def test_reading_loops_is_bounded(monkeypatch):
    """More Loops than rnnconv reads in one file is one sentence; a body of more nodes than a cell's is not read as
    one (the file then holds no RNN, naming the Loop); an evaluated value larger than a cell's is not computed."""
    from rnnconv.formats.onnx import loops

    source = TF2ONNX / "simple_rnn.onnx"
    monkeypatch.setattr(loops, "MAX_LOOPS", 0)
    with pytest.raises(rnnconv.BadInput, match="holds 1 Loops, more than any model rnnconv reads"):
        rnnconv.inspect(source)
    monkeypatch.setattr(loops, "MAX_LOOPS", 1024)
    monkeypatch.setattr(loops, "MAX_BODY_NODES", 5)
    assert rnnconv.inspect(source).rnns == []
    monkeypatch.setattr(loops, "MAX_BODY_NODES", 4096)
    monkeypatch.setattr(loops, "MAX_EVALUATED", 8)  # the probes' sequence (36 values) is not computed
    (entry,) = rnnconv.inspect(source).rnns
    assert not entry.converts and "not a sequence" in entry.reason, entry.reason


def test_loops_named_alike_are_each_read_with_their_own_body(tmp_path):
    """A copy of the Loop under the same name, its body's Tanh a Relu: each read by its own body (a name does not
    tell their bodies apart), a tanh RNN and a relu RNN."""

    def relu_copy(model, loop, body):
        copy = model.graph.node.add()
        copy.CopyFrom(loop)
        copy.output[:] = [f"{name}_copy" for name in loop.output]
        _body_node(copy.attribute[0].g, "Tanh").op_type = "Relu"

    path = _mutated(tmp_path, relu_copy)
    modes = sorted(entry.spec.mode for entry in rnnconv.inspect(path).rnns if entry.converts)
    assert modes == ["rnn_relu", "rnn_tanh"], modes


def test_a_state_carried_in_another_shape_is_refused(tmp_path):
    """The new state carried to the next step unsqueezed (1, batch, H): not the state an RNN carries (onnxruntime
    cannot run it past the first step); refused, saying so (it was read past the Unsqueeze as the state)."""

    def state_unsqueezed(model, loop, body):
        from onnx import helper, numpy_helper

        body.initializer.append(numpy_helper.from_array(np.asarray([0], np.int64), "axis0"))
        body.node.append(helper.make_node("Unsqueeze", [_body_node(body, "Tanh").output[0], "axis0"], ["h_next"]))
        body.output[2].name = "h_next"  # carried value 1, the state

    path = _mutated(tmp_path, state_unsqueezed)
    (entry,) = rnnconv.inspect(path).rnns
    assert not entry.converts and "does not carry its state from one step to the next" in entry.reason, entry.reason
