"""keras-to-cudnn against Keras itself: byte for byte, and output for output.

Keras 3 and tf-keras run live; Keras 2 (which cannot be installed beside Keras 3)
through the oracle its own run recorded when the fixtures were made.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, per_direction_weight_space
from keras_oracle import oracle

import rnnconv
from rnnconv.core import reference
from rnnconv.core.weightspace import weight_space_elements
from rnnconv.errors import Unsupported
from rnnconv.formats.cudnn.reader import open_bin

MIXED = ["gru_a", "bidi_lstm", "srnn_relu", "srnn_tanh", "gru_nobias", "bidi_gru", "lstm_nobias", "rnn_lstmcell"]
CUDNN_LAYERS = ["cudnn_lstm", "cudnn_gru", "bidi_cudnn_lstm"]
FILES = {
    "keras3": {
        "mixed": ["mixed.h5", "mixed.keras", "mixed.weights.h5"],
        "single_lstm": ["lstm.h5", "lstm.keras", "lstm.weights.h5"],
    },
    "tf_keras": {
        "mixed": ["mixed.h5", "mixed_weights.h5", "mixed.weights.h5"],
        "cudnn": ["cudnn.h5", "cudnn_weights.h5", "cudnn.weights.h5"],
        "single_lstm": ["lstm.h5"],
    },
    "keras2": {
        "mixed": ["mixed.h5", "mixed_weights.h5", "mixed.weights.h5"],
        "cudnn": ["cudnn.h5", "cudnn_weights.h5", "cudnn.weights.h5"],
        "single_lstm": ["lstm.h5"],
    },
}
LAYERS = {"mixed": MIXED, "cudnn": CUDNN_LAYERS, "single_lstm": ["lstm"]}
# tf-keras and Keras 2 write .weights.h5 without layer names: their layers go by group path.
GROUP_NAMES = {
    "gru_a": "gru",
    "bidi_lstm": "bidirectional",
    "srnn_relu": "sequential/simple_rnn",
    "srnn_tanh": "simple_rnn",
    "gru_nobias": "gru_1",
    "bidi_gru": "bidirectional_1",
    "lstm_nobias": "lstm",
    "rnn_lstmcell": "rnn",
    "cudnn_lstm": "cu_dnnlstm",
    "cudnn_gru": "cu_dnngru",
    "bidi_cudnn_lstm": "bidirectional",
    "lstm": "lstm",
}


def is_bare(generation: str, name: str) -> bool:
    """Weights-only files: no model config, so activations are assumed (tanh)."""
    return name.endswith("weights.h5")


def name_in_file(generation: str, name: str, layer: str) -> str:
    return GROUP_NAMES[layer] if generation != "keras3" and name.endswith(".weights.h5") else layer


CASES = [
    (gen, model, name, layer)
    for gen, models in FILES.items()
    for model, names in models.items()
    for name in names
    for layer in LAYERS[model]
]


@cache
def converted(generation: str, name: str, layer: str, tmpdir: Path):
    out = tmpdir / f"{generation}-{name}-{layer}.bin"
    rnnconv.convert(
        FIXTURES / generation / name,
        out,
        to="cudnn",
        source_format="keras",
        layer=name_in_file(generation, name, layer),
    )
    return open_bin(out)


@pytest.fixture(scope="module")
def outdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("blobs")


@pytest.mark.needs("keras", "tf_keras")
@pytest.mark.parametrize("generation,model,name,layer", CASES)
def test_blob_is_what_keras_hands_cudnn(generation, model, name, layer, outdir):
    expected = oracle(generation).params(model, layer)
    if expected is None:
        pytest.skip("Keras has no cuDNN path for this layer (SimpleRNN); its outputs are compared instead")
    blob = converted(generation, name, layer, outdir)
    assert blob.spec.num_directions == len(expected)
    for direction, keras_params in enumerate(expected):
        ours = per_direction_weight_space(blob, direction)
        assert ours.dtype == keras_params.dtype == np.float32
        np.testing.assert_array_equal(ours, keras_params)


@pytest.mark.needs("keras", "tf_keras")
@pytest.mark.parametrize("generation,model,name,layer", CASES)
def test_blob_computes_what_keras_computes(generation, model, name, layer, outdir):
    blob = converted(generation, name, layer, outdir)
    if is_bare(generation, name) and layer == "srnn_relu":
        assert blob.spec.mode == "rnn_tanh"  # assumed, and said so:
        assert any("activations were assumed" in n for n in blob.notes)
        return
    run = oracle(generation).run(model, layer)
    y, h_n, c_n = reference.forward(blob.spec, blob.param, run["x"].transpose(1, 0, 2), run["h0"], run.get("c0"))
    errors = [np.abs(y.transpose(1, 0, 2) - run["y"]).max(), np.abs(h_n - run["h_n"]).max()]
    if "c_n" in run:
        errors.append(np.abs(c_n - run["c_n"]).max())
    worst = float(max(errors))
    LARGEST_ERRORS[f"keras {generation}/{name}/{layer}"] = worst
    assert run["y"].shape[1] == 6 and run["y"].shape[0] == 3  # several steps, batch > 1
    assert worst < 2e-5, worst


@pytest.mark.parametrize("generation", ["keras3", "tf_keras", "keras2"])
def test_bidirectional_directions_are_distinct(generation, outdir):
    """The fixture would hide a swapped direction if both directions held the same weights."""
    blob = converted(generation, "mixed.h5", "bidi_lstm", outdir)
    assert not np.array_equal(per_direction_weight_space(blob, 0), per_direction_weight_space(blob, 1))


@pytest.mark.parametrize(
    "name",
    [
        "seed000_gru.h5",
        "seed000_gru.keras",
        "seed000_gru.weights.h5",
        "seed000_lstm.h5",
        "seed000_lstm.keras",
        "seed000_lstm.weights.h5",
    ],
)
def test_seed000_tables_digit_for_digit(name, tmp_path):
    import seed000

    out = tmp_path / "seed.bin"
    rnnconv.convert(FIXTURES / "keras3" / name, out, to="cudnn", source_format="keras")
    expected = seed000.GRU_CUDNN if "gru" in name else seed000.LSTM_CUDNN
    got = np.fromfile(out, dtype="<f4")
    assert [f"{v:.6f}" for v in got] == [f"{v:.6f}" for v in expected]


@pytest.mark.parametrize(
    "generation,name",
    [("keras3", "mixed.h5"), ("keras3", "mixed.keras"), ("tf_keras", "mixed.h5"), ("keras2", "mixed.h5")],
)
@pytest.mark.parametrize(
    "layer,reason",
    [("gru_reset_before", "reset gate applied before the recurrent product"), ("lstm_hard_sigmoid", "hard_sigmoid")],
)
def test_layers_cudnn_cannot_run_are_refused(generation, name, layer, reason, tmp_path):
    out = tmp_path / "x.bin"
    with pytest.raises(Unsupported) as refused:
        rnnconv.convert(FIXTURES / generation / name, out, to="cudnn", source_format="keras", layer=layer)
    assert reason in " ".join(str(refused.value).split())
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("split", ["input", "half"])
def test_other_bias_splits_compute_the_same(split, tmp_path):
    base = tmp_path / "recurrent.bin"
    other = tmp_path / f"{split}.bin"
    rnnconv.convert(FIXTURES / "keras3" / "mixed.h5", base, to="cudnn", source_format="keras", layer="bidi_lstm")
    rnnconv.convert(
        FIXTURES / "keras3" / "mixed.h5", other, to="cudnn", source_format="keras", layer="bidi_lstm", bias_split=split
    )
    a, b = open_bin(base), open_bin(other)
    assert not np.array_equal(np.asarray(a.words), np.asarray(b.words))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 2, a.spec.input_size))
    h0 = rng.normal(size=(2, 2, a.spec.hidden_size))
    c0 = rng.normal(size=(2, 2, a.spec.hidden_size))
    for got, want in zip(reference.forward(b.spec, b.param, x, h0, c0), reference.forward(a.spec, a.param, x, h0, c0)):
        np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.needs("keras", "tf_keras")
@pytest.mark.parametrize("name", ["bf16_gru.keras", "bf16_gru.weights.h5", "bf16_gru.h5"])
def test_bfloat16_weights_stay_bfloat16(name, tmp_path):
    out = tmp_path / "bf16.bin"
    rnnconv.convert(FIXTURES / "keras3" / name, out, to="cudnn", source_format="keras")
    blob = open_bin(out)
    assert blob.spec.dtype == "bfloat16" and out.stat().st_size == 2 * weight_space_elements(blob.spec)
    (expected,) = oracle("keras3").params("single_bf16_gru", "gru_bf16")
    np.testing.assert_array_equal(per_direction_weight_space(blob, 0), expected)


@pytest.mark.parametrize(
    "cls,layers,bidirectional", [("LSTM", 3, False), pytest.param("GRU", 4, True, marks=pytest.mark.slow)]
)
def test_a_stack_of_equal_layers_computes_what_keras_computes(cls, layers, bidirectional, tmp_path):
    """`--layer a,b,c`: equal sizes let any order of the upper layers stack, so only values tell the order."""
    keras = pytest.importorskip("keras")
    rng = np.random.default_rng(24)
    steps, batch, n_in, units = 6, 3, 5, 4
    lstm, directions = cls == "LSTM", 2 if bidirectional else 1
    per_state = 2 if lstm else 1
    x = keras.Input((steps, n_in), name="x")
    states = [keras.Input((units,), name=f"s{i}") for i in range(layers * directions * per_state)]
    out, finals, names = x, [], [f"{cls.lower()}_{k}" for k in range(layers)]
    for k, name in enumerate(names):
        layer = getattr(keras.layers, cls)(units, return_sequences=True, return_state=True, name=name)
        if bidirectional:
            layer = keras.layers.Bidirectional(layer, name=name)
        own = states[k * directions * per_state : (k + 1) * directions * per_state]
        out, *final = layer(out, initial_state=own)
        finals += final
    model = keras.Model([x, *states], [out, *finals])
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    model.save(tmp_path / "stack.keras")
    feeds = [rng.normal(0, 0.8, (batch, steps, n_in)).astype(np.float32)]
    feeds += [rng.normal(0, 0.5, (batch, units)).astype(np.float32) for _ in states]
    y, *final = (np.asarray(t) for t in keras.models.load_model(tmp_path / "stack.keras")(feeds))

    rnnconv.convert(tmp_path / "stack.keras", tmp_path / "stack.bin", to="cudnn", layer=",".join(names))
    blob = open_bin(tmp_path / "stack.bin")
    assert (blob.spec.num_layers, blob.spec.num_directions) == (layers, directions)
    h0 = np.stack(feeds[1::per_state])  # Keras' states: per layer and direction, h then c: cuDNN's pseudo-layers
    c0 = np.stack(feeds[2::per_state]) if lstm else None
    got_y, h_n, c_n = reference.forward(blob.spec, blob.param, feeds[0].transpose(1, 0, 2), h0, c0)
    errors = [np.abs(got_y.transpose(1, 0, 2) - y).max(), np.abs(h_n - np.stack(final[::per_state])).max()]
    if lstm:
        errors.append(np.abs(c_n - np.stack(final[1::per_state])).max())
    LARGEST_ERRORS[f"keras3 {layers}-layer {cls} stack"] = float(max(errors))
    assert max(errors) < 2e-5, errors
