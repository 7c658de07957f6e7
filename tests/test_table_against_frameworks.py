"""Every adapter row of the layout table against the framework it describes, not against itself.

For each row: a real layer of that framework (Keras 3, tf-keras, PyTorch) with distinct random weights
per gate and direction, two stacked bidirectional layers where the class allows, I != H (!= P), several
steps and non-zero initial states; its stored tensors go through the row (`gate_loaders`) into the
canonical form, the reference engine runs them, and the outputs and final states must be the
framework's own. A wrong gate order, matrix or bias rule in any row fails here.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LARGEST_ERRORS

from rnnconv.core import reference
from rnnconv.core.canonical import CanonicalRNN, RNNSpec, stack
from rnnconv.table.apply import find_row, gate_loaders, row_for_mode, rows_for
from rnnconv.table.constants import CUDNN_GATES, CUDNN_MODES, KERAS_VARIABLES, TORCH_REVERSE_SUFFIX
from rnnconv.table.rows import BIAS_SINGLE, BIAS_SPLITS, TABLE

STEPS, BATCH, INPUT, HIDDEN, PROJ = 6, 3, 5, 7, 3


def assert_same(got: tuple, want: dict, label: str, atol: float = 2e-5) -> None:
    errors = [
        float(np.abs(np.asarray(g) - np.asarray(want[k])).max())
        for g, k in zip(got, ("y", "h_n", "c_n"))
        if want.get(k) is not None
    ]
    LARGEST_ERRORS[f"table row {label}"] = max(errors)
    assert max(errors) < atol, (label, errors)


def states(spec: RNNSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pseudo = spec.num_layers * spec.num_directions
    x = rng.normal(0, 0.8, (STEPS, BATCH, spec.input_size)).astype(np.float32)
    h0 = rng.normal(0, 0.5, (pseudo, BATCH, spec.output_size)).astype(np.float32)
    c0 = rng.normal(0, 0.5, (pseudo, BATCH, spec.hidden_size)).astype(np.float32)
    return x, h0, c0


# --- Keras 3 -----------------------------------------------------------------------------------

KERAS_ROWS = [
    (row, activation)
    for row in rows_for("keras")
    if row.adapter and not row.refusal and not row.source_class.startswith("CuDNN")
    for activation in row.modes
]


@pytest.mark.parametrize("row,activation", KERAS_ROWS, ids=lambda v: getattr(v, "source_class", v))
@pytest.mark.parametrize("bias_split", list(BIAS_SPLITS))
def test_keras_rows(row, activation, bias_split):
    if row.bias != BIAS_SINGLE and bias_split != "recurrent":
        pytest.skip("the split applies to single biases only")
    keras = pytest.importorskip("keras")
    rng = np.random.default_rng(len(row.source_class) + len(activation))
    settings = {key: allowed[0] for key, allowed in row.requires.items()} | dict(row.when)
    spec = RNNSpec(row.modes[activation], INPUT, HIDDEN, 2, True, reset_after=row.reset_after)
    x, h0, c0 = states(spec, rng)
    lstm = row.cell == "lstm"
    layers, runs, layer_input = [], [], x.transpose(1, 0, 2)
    for layer in range(2):
        cell = getattr(keras.layers, row.source_class)(
            HIDDEN,
            activation=activation,
            return_sequences=True,
            return_state=True,
            bias_initializer="random_normal",
            recurrent_initializer="random_normal",
            **settings,
        )
        wrapped = keras.layers.Bidirectional(cell, merge_mode="concat")
        initial = []
        for d in range(2):
            initial += [h0[2 * layer + d]] + ([c0[2 * layer + d]] if lstm else [])
        outputs = [np.asarray(t) for t in wrapped(layer_input, initial_state=initial)]
        directions = []
        for sub in (wrapped.forward_layer, wrapped.backward_layer):
            stored = dict(zip(KERAS_VARIABLES, sub.get_weights()))
            directions.append(gate_loaders(row, HIDDEN, stored.__getitem__, True, bias_split))
        n_in = INPUT if layer == 0 else 2 * HIDDEN
        layers.append(
            CanonicalRNN.from_cell_loaders(
                f"l{layer}",
                RNNSpec(spec.mode, n_in, HIDDEN, 1, True, reset_after=row.reset_after),
                {(0, d): c for d, c in enumerate(directions)},
            )
        )
        runs.append(outputs)
        layer_input = outputs[0]
    rnn = stack("stacked", layers)
    per = 2 if lstm else 1
    finals = [run[1:] for run in runs]
    want = {
        "y": runs[-1][0].transpose(1, 0, 2),
        "h_n": np.stack([f[d * per] for f in finals for d in range(2)]),
        "c_n": np.stack([f[d * per + 1] for f in finals for d in range(2)]) if lstm else None,
    }
    got = reference.forward(rnn.spec, rnn.param, x, h0, c0 if lstm else None)
    assert_same(got, want, f"keras {row.source_class} {activation} {bias_split}")


# --- tf-keras CuDNNLSTM / CuDNNGRU (they run on a CPU only through Keras' own conversion of their weights) --

CUDNN_KERAS_ROWS = [row for row in rows_for("keras") if row.source_class.startswith("CuDNN")]


@pytest.mark.parametrize("row", CUDNN_KERAS_ROWS, ids=lambda r: r.source_class)
def test_tf_keras_cudnn_rows(row):
    tf_keras = pytest.importorskip("tf_keras")
    import importlib

    from rnnconv.formats.keras.runner import run_layer

    module = importlib.import_module(f"tf_keras.src.layers.rnn.cudnn_{row.cell}")
    rng = np.random.default_rng(11)
    layer = getattr(module, row.source_class)(HIDDEN, return_sequences=True, return_state=True)
    layer.build((None, None, INPUT))
    weights = [rng.normal(0, 0.4, w.shape).astype(np.float32) for w in layer.get_weights()]
    layer.set_weights(weights)
    spec = RNNSpec(row.modes["tanh"], INPUT, HIDDEN)
    x, h0, c0 = states(spec, rng)
    lstm = row.cell == "lstm"
    want = run_layer(tf_keras, layer, x.transpose(1, 0, 2), h0, c0 if lstm else None)
    loaders = gate_loaders(row, HIDDEN, dict(zip(KERAS_VARIABLES, weights)).__getitem__, True)
    rnn = CanonicalRNN.from_cell_loaders("cudnn", spec, {(0, 0): loaders})
    got = reference.forward(spec, rnn.param, x, h0, c0 if lstm else None)
    want["y"] = np.asarray(want["y"]).transpose(1, 0, 2)
    assert_same(got, want, f"tf-keras {row.source_class}")


# --- PyTorch ------------------------------------------------------------------------------------

TORCH_ROWS = [(row, activation) for row in rows_for("torch") for activation in row.modes]


@pytest.mark.parametrize("row,activation", TORCH_ROWS, ids=lambda v: getattr(v, "source_class", v))
def test_torch_rows(row, activation):
    torch = pytest.importorskip("torch")
    torch.manual_seed(len(row.source_class) + len(activation))
    cell = row.source_class.endswith("Cell")
    lstm = row.cell == "lstm"
    kwargs = {} if row.cell != "rnn" else {"nonlinearity": activation}
    if cell:
        module = getattr(torch.nn, row.source_class)(INPUT, HIDDEN, **kwargs)
        spec = RNNSpec(row.modes[activation], INPUT, HIDDEN)
    else:
        proj = PROJ if lstm else 0
        module = getattr(torch.nn, row.source_class)(
            INPUT, HIDDEN, num_layers=2, bidirectional=True, **kwargs, **({"proj_size": proj} if proj else {})
        )
        spec = RNNSpec(row.modes[activation], INPUT, HIDDEN, 2, True, proj)
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    cells = {}
    for layer in range(spec.num_layers):
        for d in range(spec.num_directions):
            suffix = TORCH_REVERSE_SUFFIX if d else ""
            names = {role: name.format(layer=layer, suffix=suffix) for role, name in row.tensors.items()}
            stored = {role: state[name] for role, name in names.items() if name in state}
            cells[(layer, d)] = gate_loaders(row, HIDDEN, stored.__getitem__, True, proj=spec.proj_size)
    rnn = CanonicalRNN.from_cell_loaders("torch", spec, cells)
    x, h0, c0 = states(spec, np.random.default_rng(5))
    with torch.no_grad():
        tx, th, tc = (torch.from_numpy(a) for a in (x, h0, c0))
        if cell:
            h, c, ys = th[0], tc[0], []
            for t in range(STEPS):
                if lstm:
                    h, c = module(tx[t], (h, c))
                else:
                    h = module(tx[t], h)
                ys.append(h)
            want = {"y": torch.stack(ys).numpy(), "h_n": h[None].numpy(), "c_n": c[None].numpy() if lstm else None}
        elif lstm:
            y, (h, c) = module(tx, (th, tc))
            want = {"y": y.numpy(), "h_n": h.numpy(), "c_n": c.numpy()}
        else:
            y, h = module(tx, th)
            want = {"y": y.numpy(), "h_n": h.numpy(), "c_n": None}
    got = reference.forward(spec, rnn.param, x, h0, c0 if lstm else None)
    assert_same(got, want, f"torch {row.source_class} {activation}")


def test_weight_space_size_is_pytorchs_parameter_count():
    """cuDNN's weight space holds exactly the parameters of the PyTorch module it runs for."""
    torch = pytest.importorskip("torch")
    from rnnconv.core.weightspace import weight_space_elements

    for mode, layers, bidirectional, proj in [
        ("lstm", 3, True, 4),
        ("gru", 2, False, 0),
        ("rnn_relu", 1, True, 0),
        ("lstm", 1, False, 0),
    ]:
        spec = RNNSpec(mode, INPUT, HIDDEN, layers, bidirectional, proj)
        row, _ = row_for_mode("torch", mode)
        kwargs = {"proj_size": proj} if proj else {}
        module = getattr(torch.nn, row.source_class)(
            INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional, **kwargs
        )
        assert weight_space_elements(spec) == sum(p.numel() for p in module.parameters()), spec


# --- cuDNN ------------------------------------------------------------------------------------


def test_cudnn_rows_are_the_cudnn_constants():
    """cuDNN's rows restate nothing: gate order and modes are the constants the headers are checked against."""
    for row in rows_for("cudnn"):
        assert row.gate_order == CUDNN_GATES[row.cell]
        assert all(CUDNN_MODES[mode][0] == row.cell for mode in row.modes.values())
    # PyTorch hands cuDNN its tensors unchanged, and the PyTorch rows are checked against PyTorch above.
    for row in rows_for("cudnn"):
        assert find_row("torch", row.source_class).gate_order == row.gate_order


def test_every_row_stores_each_cudnn_gate_once():
    for row in TABLE:
        assert sorted(row.gate_order) == sorted(CUDNN_GATES[row.cell]), row
