"""Keras files as Keras 2.0 and 2.1 wrote them, and what a file holds that does not convert.

The fixtures (fixtures/make_keras2_fixtures.py) are written with h5py in the structure Keras 2.0.8 and
2.1.6 saved: `Sequential` configs that are a list of layers, weight groups whose inner names differ from
the layer's (`bidirectional_19_1/...`), GRUs without `reset_after`. tf-keras' own legacy loader reads
them; conversions are held against what tf-keras computes with them and hands cuDNN.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, per_direction_weight_space, run_cli
from keras_oracle import cudnn_params, inputs_for, recurrent_layers, units_of

import rnnconv
from rnnconv.core import reference
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.formats.keras.runner import cell_input_size, directions, is_lstm, run_layer
from rnnconv.table.apply import keras_era

OLD = FIXTURES / "keras2_early"

# file -> layer -> (class, converts, sizes (input, hidden, bidirectional), a phrase of the reason)
LISTED = {
    "gru_2_0_8.h5": {"gru_1": ("GRU", False, (5, 7, False), "Keras 2.0.8 wrote it, and Keras 2.0-2.1.4 had no")},
    "bidi_gru_2_0_8.h5": {
        "bidirectional_5": ("Bidirectional(GRU)", False, (5, 6, True), "recurrent_activation='hard_sigmoid'")
    },
    "lstm_sigmoid_2_0_8.h5": {
        "lstm_1": ("LSTM", True, (5, 7, False), None),
        "lstm_2": ("LSTM", False, (7, 4, False), "recurrent_activation='hard_sigmoid'"),
    },
    "bidi_lstm_2_1_6.h5": {
        "bidirectional_17": ("Bidirectional(LSTM)", True, (5, 6, True), None),
        "bidirectional_18": ("Bidirectional(LSTM)", True, (12, 6, True), None),
        "bidirectional_19": ("Bidirectional(LSTM)", False, (12, 6, True), "hard_sigmoid"),
    },
    "bidi_lstm_2_1_6_weights.h5": {
        f"bidirectional_{n}": ("Bidirectional(LSTM)", False, (5 if n == 17 else 12, 6, True), "--recurrent-activation")
        for n in (17, 18, 19)
    },
    "nested_gru_2_1_6.h5": {
        "gru_3": ("GRU", True, (5, 5, False), None),
        "gru_4": ("GRU", False, (5, 4, False), "recurrent_activation='hard_sigmoid'"),
    },
}
CONVERTING = [(file, layer) for file, layers in LISTED.items() for layer, row in layers.items() if row[1]]


@pytest.mark.parametrize("file", list(LISTED))
def test_inspect_lists_every_recurrent_layer_with_its_sizes(file):
    result = run_cli("inspect", OLD / file, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["versions"]["keras_version"] in ("2.0.8", "2.1.6")
    found = {rnn["name"]: rnn for rnn in report["rnns"]}
    assert list(found) == list(LISTED[file])
    for name, (cls, converts, sizes, phrase) in LISTED[file].items():
        rnn = found[name]
        assert (rnn["class"], rnn["converts"]) == (cls, converts), rnn
        held = rnn["sizes"]
        assert (held["input_size"], held["hidden_size"], held["bidirectional"]) == sizes
        assert held["dtype"] == "float32" and held["bias"] is True
        if phrase:
            assert phrase in rnn["reason"] and "has shape" not in rnn["reason"], rnn["reason"]
    shown = run_cli("inspect", OLD / file, env={"COLUMNS": "200"})
    assert "no recurrent layers found" not in shown.stdout
    for name, (_, _, sizes, _) in LISTED[file].items():
        assert name in shown.stdout and f"in {sizes[0]} hidden {sizes[1]}" in shown.stdout


def _tf_keras_model(file: str):
    import tf_keras

    return tf_keras, tf_keras.models.load_model(OLD / file, compile=False)


@pytest.mark.needs("tf_keras")
@pytest.mark.parametrize("file,layer", CONVERTING)
def test_blob_is_what_keras_computes_and_hands_cudnn(file, layer, tmp_path):
    """tf-keras' legacy loader reads the file; its layer's cuDNN buffer is the blob, byte for byte."""
    out = tmp_path / "x.bin"
    rnnconv.convert(OLD / file, out, to="cudnn", layer=layer)
    blob = open_bin(out)
    keras, model = _tf_keras_model(file)
    keras_layer = next(found for found in recurrent_layers(model) if found.name == layer)
    for direction, params in enumerate(cudnn_params(keras, keras_layer)):
        np.testing.assert_array_equal(per_direction_weight_space(blob, direction), params)
    first = directions(keras_layer)[0]
    data = inputs_for(
        cell_input_size(first), units_of(first), len(directions(keras_layer)), is_lstm(keras_layer), seed=3
    )
    run = run_layer(keras, keras_layer, data["x"], data["h0"], data["c0"])
    y, h_n, c_n = reference.forward(blob.spec, blob.param, data["x"].transpose(1, 0, 2), data["h0"], data["c0"])
    errors = [np.abs(y.transpose(1, 0, 2) - run["y"]).max(), np.abs(h_n - run["h_n"]).max()]
    if c_n is not None:
        errors.append(np.abs(c_n - run["c_n"]).max())
    LARGEST_ERRORS[f"keras2_early/{file}/{layer}"] = float(max(errors))
    assert max(errors) < 2e-5


@pytest.mark.needs("tf_keras")
def test_tf_keras_refuses_the_pre_2_1_5_grus_for_the_same_reason():
    """tf-keras' own loader takes the missing reset_after as True and then finds the (3H,) bias of a reset-before
    GRU: the files are what Keras 2.0.8 wrote, and reset-before is what they hold."""
    for file in ("gru_2_0_8.h5", "bidi_gru_2_0_8.h5"):
        with pytest.raises(ValueError, match="reset_after=False"):
            _tf_keras_model(file)


@pytest.mark.needs("tf_keras")
def test_stacked_bidirectional_layers_convert_and_verify(tmp_path):
    blob = tmp_path / "stack.bin"
    result = run_cli(
        "keras-to-cudnn", OLD / "bidi_lstm_2_1_6.h5", "--layer", "bidirectional_17,bidirectional_18", "-o", blob
    )
    assert result.returncode == 0, result.stderr
    spec = open_bin(blob).spec
    assert (spec.num_layers, spec.bidirectional, spec.input_size, spec.hidden_size) == (2, True, 5, 6)
    verified = run_cli("verify", blob, "--backend", "numpy", "--json")
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["verdict"] == "match" and "tf_keras" in json.dumps(report)


def test_pre_2_1_5_gru_is_refused_for_its_hard_sigmoid_not_by_its_shape(tmp_path):
    """Keras before 2.1.5 had no reset_after: its GRUs are reset-before (rnnconv holds that form) with hard_sigmoid
    (which it does not): refused naming both, never by a tensor's shape."""
    for file, layer in (("gru_2_0_8.h5", None), ("bidi_gru_2_0_8.h5", "bidirectional_5")):
        args = ["--layer", layer] if layer else []
        result = run_cli("keras-to-cudnn", OLD / file, *args, "-o", tmp_path / "x.bin")
        assert_clean_failure(result, 2, "hard_sigmoid", "had no reset_after setting")
        assert "has shape" not in result.stderr and "it holds: none" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_bare_weights_of_2_1_6_name_layers_by_their_groups_and_convert_when_stated(tmp_path):
    bare, stated = tmp_path / "bare.bin", tmp_path / "config.bin"
    refused = run_cli("keras-to-cudnn", OLD / "bidi_lstm_2_1_6_weights.h5", "--layer", "bidirectional_17", "-o", bare)
    assert_clean_failure(refused, 2, "hard_sigmoid", "--recurrent-activation sigmoid")
    result = run_cli(
        "keras-to-cudnn",
        OLD / "bidi_lstm_2_1_6_weights.h5",
        "--layer",
        "bidirectional_17",
        "--recurrent-activation",
        "sigmoid",
        "-o",
        bare,
    )
    assert result.returncode == 0, result.stderr
    rnnconv.convert(OLD / "bidi_lstm_2_1_6.h5", stated, to="cudnn", layer="bidirectional_17")
    assert bare.read_bytes() == stated.read_bytes()


@pytest.mark.parametrize(
    "version,reset_after,recurrent_activation",
    [
        ("1.2.2", False, "hard_sigmoid"),
        ("2.0.8", False, "hard_sigmoid"),
        ("2.1.4", False, "hard_sigmoid"),
        ("2.1.6", False, "hard_sigmoid"),
        ("2.1.6-tf", False, "hard_sigmoid"),
        ("2.2.4-tf", None, None),
        ("2.3.1", False, "sigmoid"),
        ("2.3.0-tf", True, "sigmoid"),
        ("2.15.0", True, "sigmoid"),
        ("3.6.0", True, "sigmoid"),
    ],
)
def test_keras_defaults_by_version(version, reset_after, recurrent_activation):
    era = keras_era(version)
    assert era is not None
    if reset_after is None:
        assert era.defaults is None  # the version string does not tell TensorFlow 1 from 2
    else:
        assert era.defaults == {"recurrent_activation": recurrent_activation, "reset_after": reset_after}
    assert keras_era("not a version") is None


def test_a_gru_config_without_reset_after_and_no_version_is_read_by_its_bias(tmp_path):
    import h5py

    source = tmp_path / "gru.h5"
    source.write_bytes((OLD / "nested_gru_2_1_6.h5").read_bytes())
    with h5py.File(source, "r+") as h5:
        del h5.attrs["keras_version"]
        config = json.loads(h5.attrs["model_config"])
        for layer in (config["config"]["layers"][1]["config"][0], config["config"]["layers"][2]):
            del layer["config"]["reset_after"]
        h5.attrs["model_config"] = json.dumps(config)
    report = json.loads(run_cli("inspect", source, "--json").stdout)
    by_name = {rnn["name"]: rnn for rnn in report["rnns"]}
    assert by_name["gru_3"]["converts"] and "the bias's shape says reset_after=True" in " ".join(
        by_name["gru_3"]["notes"]
    )
    assert not by_name["gru_4"]["converts"] and "reset_after=False" in by_name["gru_4"]["reason"]


# --- recurrent layers that do not convert are listed, never left out -----------------------------------------


KERAS3_UNCONVERTED = """
import sys
import keras
L = keras.layers
inp = keras.Input((4, 3))
x = L.RNN([L.LSTMCell(5), L.LSTMCell(5)], return_sequences=True, name="stacked_cells")(inp)
x = L.Reshape((4, 5, 1))(x)
x = L.ConvLSTM1D(2, 3, padding="same", return_sequences=True, name="conv_lstm")(x)
x = L.Reshape((4, 10))(x)
back = L.GRU(3, return_sequences=True, go_backwards=True)
x = L.Bidirectional(L.LSTM(3, return_sequences=True), backward_layer=back, name="two_kinds")(x)
x = L.Reshape((2, 2, 6))(x)
x = L.TimeDistributed(L.LSTM(2), name="per_step")(x)
x = L.LSTM(6, name="plain")(x)
model = keras.Model(inp, x)
model.save(sys.argv[1] + "/unconverted.keras")
model.save(sys.argv[1] + "/unconverted.h5")
"""


@pytest.fixture(scope="module")
def unconverted(tmp_path_factory) -> Path:
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("unconverted")
    subprocess.run([sys.executable, "-c", KERAS3_UNCONVERTED, str(folder)], check=True, capture_output=True)
    return folder


@pytest.mark.needs("keras")
@pytest.mark.parametrize("name", ["unconverted.keras", "unconverted.h5"])
def test_recurrent_layers_rnnconv_does_not_convert_are_listed_with_the_reason(name, unconverted, tmp_path):
    source = unconverted / name
    report = json.loads(run_cli("inspect", source, "--json").stdout)
    by_name = {rnn["name"]: rnn for rnn in report["rnns"]}
    assert list(by_name) == ["stacked_cells", "conv_lstm", "two_kinds", "per_step", "plain"]
    assert by_name["plain"]["converts"]
    assert by_name["stacked_cells"]["class"] == "RNN(StackedRNNCells)"
    assert by_name["per_step"]["class"] == "TimeDistributed(LSTM)"
    assert "TimeDistributed wrapper around LSTM is not among" in by_name["per_step"]["reason"]
    assert by_name["two_kinds"]["class"] == "Bidirectional(LSTM)"
    assert "backward layer differs from its forward one" in by_name["two_kinds"]["reason"]
    assert by_name["two_kinds"]["sizes"]["bidirectional"] and by_name["two_kinds"]["sizes"]["input_size"] == 10
    sizes = by_name["stacked_cells"]["sizes"]
    assert (sizes["input_size"], sizes["hidden_size"], sizes["num_layers"]) == (3, 5, 2)
    assert by_name["conv_lstm"]["class"] == "ConvLSTM1D"
    for refused in ("stacked_cells", "conv_lstm"):
        assert not by_name[refused]["converts"]
        assert "is not among the recurrent layers rnnconv converts" in by_name[refused]["reason"]
    result = run_cli("keras-to-cudnn", source, "--layer", "conv_lstm", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, "ConvLSTM1D layer is not among the recurrent layers rnnconv converts")
    every = run_cli("convert", source, tmp_path / "all.safetensors")
    assert every.returncode == 0, every.stderr
    assert "skipped stacked_cells" in every.stderr and "skipped conv_lstm" in every.stderr


# --- configs that are present but not what Keras writes: one sentence, exit 2 ---------------------------------


def _layers(config: dict) -> list:
    return config["config"]["layers"]


def _by_name(config: dict, name: str) -> dict:
    return next(layer for layer in _layers(config) if layer["config"].get("name") == name)


DAMAGE = {
    "a layer's config is a list": lambda c: _by_name(c, "gru_a").update(config=[1, 2]),
    "a layer's config is null": lambda c: _by_name(c, "srnn_tanh").update(config=None),
    "an RNN's cell is a list": lambda c: _by_name(c, "rnn_lstmcell")["config"].update(cell=[1]),
    "an RNN cell's config is a string": lambda c: _by_name(c, "rnn_lstmcell")["config"]["cell"].update(config="x"),
    "Bidirectional's layer is a number": lambda c: _by_name(c, "bidi_lstm")["config"].update(layer=3),
    "Bidirectional's layer config is a list": lambda c: _by_name(c, "bidi_gru")["config"]["layer"].update(config=[]),
    "Bidirectional's backward layer is a string": lambda c: _by_name(c, "bidi_gru")["config"].update(
        backward_layer="x"
    ),
    "a nested model's config is a number": lambda c: _by_name(c, "sub").update(config=5),
    "a nested model's layers are an object": lambda c: _by_name(c, "sub")["config"].update(layers={}),
    "a layer is a number": lambda c: _layers(c).append(7),
    "a layer has no class_name": lambda c: _by_name(c, "gru_nobias").pop("class_name"),
    "the model's config is a string": lambda c: c.update(config="layers"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("name", ["mixed.h5", "mixed.keras"])
def test_a_config_present_but_not_an_object_is_refused_at_any_depth(damage, name, tmp_path):
    import shutil
    import zipfile

    import h5py

    source = tmp_path / name
    shutil.copy(FIXTURES / "keras3" / name, source)
    if name.endswith(".h5"):
        with h5py.File(source, "r+") as h5:
            config = json.loads(h5.attrs["model_config"])
            DAMAGE[damage](config)
            h5.attrs["model_config"] = json.dumps(config)
    else:
        with zipfile.ZipFile(FIXTURES / "keras3" / name) as original:
            members = {info.filename: original.read(info) for info in original.infolist()}
        config = json.loads(members["config.json"])
        DAMAGE[damage](config)
        members["config.json"] = json.dumps(config).encode()
        with zipfile.ZipFile(source, "w") as archive:
            for member, data in members.items():
                archive.writestr(member, data)
    for args in (["inspect", source], ["convert", source, tmp_path / "out.safetensors"]):
        result = run_cli(*args)
        assert_clean_failure(result, 2, "the model config is damaged")
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_list_config_is_the_old_sequential_form_only_for_a_sequential(tmp_path):
    import h5py

    source = tmp_path / "old.h5"
    source.write_bytes((OLD / "lstm_sigmoid_2_0_8.h5").read_bytes())
    with h5py.File(source, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        h5.attrs["model_config"] = json.dumps({"class_name": "Model", "config": config["config"]})
    assert_clean_failure(run_cli("inspect", source), 2, "the config of model 'Model' is a list")


def test_keras_1_layers_are_listed_as_not_converting(tmp_path):
    report = json.loads(run_cli("inspect", OLD / "lstm_1_2_2.h5", "--json").stdout)
    (rnn,) = report["rnns"]
    assert (rnn["name"], rnn["class"], rnn["converts"]) == ("lstm_1", "LSTM", False)
    assert "Keras 1.2.2 wrote it" in rnn["reason"] and "lstm_1_W_i:0" in rnn["reason"]
    result = run_cli("keras-to-cudnn", OLD / "lstm_1_2_2.h5", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, "load the model in Keras 2 and save it again")


def _swapped(config: dict) -> int:
    """Every Sequential of a config turned between its list form (Keras 1 to 2.1) and its object form."""
    count = 0
    inner = config.get("config")
    if config.get("class_name") == "Sequential":
        if isinstance(inner, list):
            config["config"] = {"name": "swapped", "layers": inner}
        else:
            config["config"] = inner["layers"]
        count += 1
    for layer in inner if isinstance(inner, list) else inner.get("layers", []):
        count += _swapped(layer)
    return count


@pytest.mark.parametrize(
    "source", [OLD / "bidi_lstm_2_1_6.h5", OLD / "nested_gru_2_1_6.h5", FIXTURES / "keras3" / "mixed.h5"]
)
def test_a_sequential_reads_the_same_in_its_list_and_object_forms(source, tmp_path):
    import h5py

    copy = tmp_path / source.name
    copy.write_bytes(source.read_bytes())
    with h5py.File(copy, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        assert _swapped(config) == 1
        h5.attrs["model_config"] = json.dumps(config)
    reports = [json.loads(run_cli("inspect", path, "--json").stdout) for path in (source, copy)]
    assert reports[0]["rnns"] == reports[1]["rnns"] and len(reports[0]["rnns"]) >= 2


@pytest.mark.needs("keras")
def test_bare_tensors_that_fit_no_layer_are_listed_and_a_dense_layer_is_not(tmp_path):
    import h5py
    import keras

    odd = tmp_path / "odd_weights.h5"
    odd.write_bytes((FIXTURES / "tf_keras" / "lstm_weights.h5").read_bytes())
    with h5py.File(odd, "r+") as h5:
        name = next(n for n in _datasets(h5) if n.endswith("recurrent_kernel:0"))
        del h5[name]
        h5[name] = np.zeros((7, 21), np.float32)  # three gates' columns beside an LSTM's kernel
    (rnn,) = json.loads(run_cli("inspect", odd, "--json").stdout)["rnns"]
    assert (rnn["name"], rnn["class"], rnn["converts"]) == ("lstm", "unknown", False)
    assert "fit no Keras recurrent layer" in rnn["reason"] and "recurrent_kernel (7, 21)" in rnn["reason"]
    model = keras.Sequential([keras.Input((4, 3)), keras.layers.LSTM(5, return_sequences=True), keras.layers.Dense(6)])
    model.save_weights(tmp_path / "dense.weights.h5")
    report = json.loads(run_cli("inspect", tmp_path / "dense.weights.h5", "--json").stdout)
    assert [rnn["class"] for rnn in report["rnns"]] == ["LSTM"]


def _datasets(h5) -> list[str]:
    names: list[str] = []
    h5.visit(names.append)
    return names
