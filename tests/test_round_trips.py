"""Every way back: cuDNN -> Keras files Keras itself loads, Keras <-> PyTorch, exact round trips."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_torch import module_for, torch_run

import rnnconv
from rnnconv.core import reference
from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.formats.cudnn.writer import write_bin
from rnnconv.formats.keras.reader import KerasFile

K3 = FIXTURES / "keras3"
KERAS_LAYERS = ["gru_a", "bidi_lstm", "srnn_relu", "srnn_tanh", "gru_nobias", "bidi_gru", "lstm_nobias", "rnn_lstmcell"]


def keras_module():
    import keras

    return keras


def keras_weights(path, layer=None) -> list[np.ndarray]:
    """The stored Keras tensors of one layer, read back through rnnconv's own reader."""
    with KerasFile(path) as keras_file:
        chosen = keras_file.layer(layer)
        return [
            np.asarray(t[role])
            for t in chosen.tensors
            for role in ("input_matrix", "recurrent_matrix", "bias")
            if role in t
        ]


def keras_predicts_blob(model_path, blob, label: str) -> None:
    """keras.models.load_model opens the file and predicts what the blob computes (zero initial states)."""
    keras = keras_module()
    model = keras.models.load_model(model_path)
    x = np.random.default_rng(5).normal(0, 0.8, (3, 6, blob.spec.input_size)).astype(np.float32)
    predicted = np.asarray(model(x))
    y, _, _ = reference.forward(blob.spec, blob.param, x.transpose(1, 0, 2))
    worst = float(np.abs(predicted - y.transpose(1, 0, 2)).max())
    LARGEST_ERRORS[f"keras load_model {label}"] = worst
    assert worst < 2e-5, (label, worst)


@pytest.mark.slow
@pytest.mark.parametrize("layer", KERAS_LAYERS)
def test_keras_cudnn_keras_is_identical(layer, tmp_path):
    blob, back = tmp_path / "x.bin", tmp_path / "back.keras"
    rnnconv.convert(K3 / "mixed.keras", blob, to="cudnn", layer=layer, source_format="keras")
    rnnconv.convert(blob, back, to="keras", source_format="cudnn")
    original, returned = keras_weights(K3 / "mixed.keras", layer), keras_weights(back)
    assert len(original) == len(returned)
    for a, b in zip(original, returned):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    keras_predicts_blob(back, open_bin(blob), f"mixed.keras/{layer}")


@pytest.mark.parametrize("layer", ["bidi_lstm", "gru_a"])
def test_weights_only_output_loads_into_the_printed_model(layer, tmp_path):
    blob, weights = tmp_path / "x.bin", tmp_path / "w.weights.h5"
    rnnconv.convert(K3 / "mixed.keras", blob, to="cudnn", layer=layer, source_format="keras")
    result = run_cli("cudnn-to-keras", blob, "-o", weights)
    assert result.returncode == 0, result.stderr
    code = result.stdout[result.stdout.index("model = keras.Sequential") :]
    x = np.random.default_rng(1).normal(size=(2, 6, open_bin(blob).spec.input_size)).astype(np.float32)
    namespace = {"keras": keras_module(), "x": x}
    exec(code, namespace)  # builds the model, loads the weights and runs x
    y, _, _ = reference.forward(open_bin(blob).spec, open_bin(blob).param, x.transpose(1, 0, 2))
    np.testing.assert_allclose(np.asarray(namespace["y"]), y.transpose(1, 0, 2), atol=2e-5)


@pytest.mark.parametrize(
    "name,prefix",
    [
        ("seq2seq.pt", "encoder.rnn"),
        ("seq2seq.pt", "decoder.rnn"),
        ("dataparallel_gru.pth", None),
        ("rnn_relu.safetensors", None),
        ("rnn_tanh.pt", None),
    ],
)
def test_torch_to_keras_predicts_what_the_module_computes(name, prefix, tmp_path):
    out = tmp_path / "m.keras"
    options = {"layer": prefix, "nonlinearity": "relu" if "relu" in name else "tanh"}
    rnnconv.convert(FIXTURES / "torch" / name, out, to="keras", **options, source_format="torch")
    rnnconv.convert(FIXTURES / "torch" / name, tmp_path / "x.bin", to="cudnn", **options, source_format="torch")
    blob = open_bin(tmp_path / "x.bin")
    keras_predicts_blob(out, blob, f"torch {name}")
    back = tmp_path / "back.pt"
    layers = (
        ",".join(f"{blob.name.replace('.', '_')}_layer{k}" for k in range(blob.spec.num_layers))
        if blob.spec.num_layers > 1
        else None
    )
    rnnconv.convert(out, back, to="torch", layer=layers, source_format="keras")
    module = module_for(blob.spec)
    module.load_state_dict(torch.load(back, weights_only=True))
    x = torch.randn(6, 3, blob.spec.input_size, generator=torch.Generator().manual_seed(2))
    zeros = torch.zeros(blob.spec.num_layers * blob.spec.num_directions, 3, blob.spec.hidden_size)
    y_torch = torch_run(module, blob.spec, x, zeros, zeros)[0]
    y_keras = np.asarray(keras_module().models.load_model(out)(x.numpy().transpose(1, 0, 2)))
    np.testing.assert_allclose(y_keras.transpose(1, 0, 2), y_torch, atol=2e-5)


@pytest.mark.slow
def test_projection_cannot_become_keras(tmp_path):
    result = run_cli("torch-to-keras", FIXTURES / "torch" / "lstm_proj.pt", "-o", tmp_path / "x.keras")
    assert_clean_failure(result, 2, "Keras cannot hold", "Keras's LSTM has no projection (h = W_hr h', proj_size=3)")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_general_convert_picks_directions_from_the_files(tmp_path):
    assert run_cli("convert", K3 / "mixed.h5", tmp_path / "g.bin", "--layer", "gru_a").returncode == 0
    assert run_cli("convert", tmp_path / "g.bin", tmp_path / "g.pt").returncode == 0
    assert run_cli("convert", tmp_path / "g.pt", tmp_path / "g.keras").returncode == 0
    assert run_cli("convert", tmp_path / "g.keras", tmp_path / "g2.bin").returncode == 0
    assert run_cli("convert", tmp_path / "g2.bin", tmp_path / "g.safetensors", "--to", "torch").returncode == 0
    assert (tmp_path / "g.bin").read_bytes() == (tmp_path / "g2.bin").read_bytes()
    from safetensors.torch import load_file

    assert load_file(tmp_path / "g.safetensors").keys() == torch.load(tmp_path / "g.pt", weights_only=True).keys()
    assert run_cli("convert", tmp_path / "g.bin", tmp_path / "g.onnx").returncode == 0
    assert run_cli("convert", tmp_path / "g.onnx", tmp_path / "g3.bin").returncode == 0
    assert (tmp_path / "g.bin").read_bytes() == (tmp_path / "g3.bin").read_bytes()
    assert_clean_failure(run_cli("convert", K3 / "lstm.h5", tmp_path / "x.caffemodel"), 2, "cannot tell what to write")


# --- property-based: random RNNs through every writer and reader ---------------------------


@st.composite
def random_rnns(draw) -> CanonicalRNN:
    mode = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    spec = RNNSpec(
        mode,
        draw(st.integers(1, 6)),
        draw(st.integers(1, 6)),
        draw(st.integers(1, 3)),
        draw(st.booleans()),
        bias=draw(st.booleans()),
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrays = {}
    for key in spec.param_keys():
        values = rng.normal(0, 0.5, spec.param_shape(key)).astype(np.float32)
        if key.kind.startswith("b") and (not spec.bias or (key.kind == "bW" and spec.cell != "gru")):
            values[:] = 0  # single-bias formats (Keras LSTM, SimpleRNN) keep only the recurrent side
        arrays[key] = values
    return CanonicalRNN.from_arrays("rnn", spec, arrays)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rnn=random_rnns())
def test_random_rnns_survive_cudnn_keras_cudnn_and_cudnn_torch_cudnn(rnn, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rt")
    first = tmp / "a.bin"
    write_bin(rnn, first, "float32")
    for target, suffix in (("keras", ".keras"), ("keras", ".weights.h5"), ("torch", ".pt"), ("torch", ".safetensors")):
        middle = tmp / f"m{suffix}"
        rnnconv.convert(first, middle, to=target, source_format="cudnn", force=True)
        if suffix == ".weights.h5":
            continue  # no config: the class and activation would be assumed; covered by the .keras case
        again = tmp / f"b{suffix}.bin"
        nonlinearity = "relu" if rnn.spec.mode == "rnn_relu" else "tanh"
        layers = (
            ",".join(f"rnn_layer{k}" for k in range(rnn.spec.num_layers))
            if target == "keras" and rnn.spec.num_layers > 1
            else None
        )
        rnnconv.convert(middle, again, to="cudnn", layer=layers, nonlinearity=nonlinearity, force=True)
        assert again.read_bytes() == first.read_bytes(), (target, suffix, rnn.spec)
        assert open_bin(again).spec == rnn.spec
