"""The rescue of `.keras` archives Keras 3.15 refuses (tf.keras 2.15's) or the Keras that wrote them refused (Keras
3.0's Bidirectional): `rnnconv convert old.keras fixed.keras` writes the whole model, which Keras 3.15 loads and
which computes what the old Keras computed (fixtures/make_keras_rescue_fixtures.py recorded it beside each file).
What the translation does not know is refused, naming the layer and what, and nothing is written."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
import rnnconv.api
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import registry

RESCUE = FIXTURES / "keras_rescue"
NAMES = ["tfkeras215_bidi", "keras30_bidi", "tfkeras215_functional"]


def rewritten(source: Path, path: Path, config=None, weights=None) -> Path:
    """A copy of an archive with its config.json changed by `config` (a function of the parsed config) or its
    model.weights.h5 by `weights` (a function of the open h5py file)."""
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if config is not None:
        parsed = json.loads(members["config.json"])
        config(parsed)
        members["config.json"] = json.dumps(parsed).encode()
    if weights is not None:
        buffer = io.BytesIO(members["model.weights.h5"])
        with h5py.File(buffer, "r+") as h5:
            weights(h5)
        members["model.weights.h5"] = buffer.getvalue()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.needs("keras")
@pytest.mark.parametrize("name", NAMES)
def test_each_rescued_archive_loads_in_keras_3_and_computes_what_the_old_keras_did(name, tmp_path):
    import keras

    fixed = tmp_path / "fixed.keras"
    result = rnnconv.convert(RESCUE / f"{name}.keras", fixed)
    assert result.outputs == [str(fixed)] and result.rnns == []
    recorded = np.load(RESCUE / f"{name}.npz")
    model = keras.saving.load_model(fixed)
    y = model(recorded["x"])
    assert not isinstance(y, list)  # a model of one output gives it alone, as the old Keras did
    worst = float(np.abs(np.asarray(y) - recorded["y"]).max())
    LARGEST_ERRORS[f"rescued {name}"] = worst
    assert worst <= 1e-5, (name, worst)
    if name == "tfkeras215_functional":  # its .weights.h5 alone loads into the rescued model as well
        weights = tmp_path / "fixed.weights.h5"
        rnnconv.convert(RESCUE / f"{name}.keras", weights)
        model.load_weights(weights)
        assert float(np.abs(np.asarray(model(recorded["x"])) - recorded["y"]).max()) <= 1e-5


def test_a_rescued_config_is_what_keras_3_reads(tmp_path):
    """The known differences translated: time_major and implementation gone, batch_input_shape only as an
    InputLayer's batch_shape, the Functional class's module Keras 3's, one input and one output alone."""
    fixed = rnnconv.convert(RESCUE / "tfkeras215_functional.keras", tmp_path / "fixed.keras").outputs[0]
    with zipfile.ZipFile(fixed) as archive:
        config = json.loads(archive.read("config.json"))
        metadata = json.loads(archive.read("metadata.json"))
    assert metadata["keras_version"].startswith("3.")
    assert (config["module"], config["registered_name"]) == ("keras.src.models.functional", "Functional")
    text = json.dumps(config)
    for gone in ("time_major", "implementation", "batch_input_shape", "input_length"):
        assert gone not in text
    assert config["config"]["input_layers"] == ["input_2", 0, 0]
    assert config["config"]["output_layers"] == ["head", 0, 0]


def test_a_layer_with_an_rnn_named_still_converts_that_rnn_alone(tmp_path):
    result = rnnconv.convert(RESCUE / "tfkeras215_bidi.keras", tmp_path / "gru.keras", layer="bidi_gru")
    assert [r.name for r in result.rnns] == ["bidi_gru"]


def _custom_layer(config):
    config["config"]["layers"][3] = {
        "module": "my_project.layers",
        "class_name": "AttentionPooling",
        "config": {"name": "pool", "units": 2},
        "registered_name": "my_project>AttentionPooling",
    }


def _time_major(config):
    config["config"]["layers"][1]["config"]["layer"]["config"]["time_major"] = True


def _unknown_key(config):
    config["config"]["layers"][3]["config"]["lora_rank"] = 4


def _hard_sigmoid(config):
    config["config"]["layers"][2]["config"]["layer"]["config"]["recurrent_activation"] = "hard_sigmoid"


def _activation_object(config):  # found by the keras_rescue fuzz family: an unhashable value where a name goes
    config["config"]["layers"][2]["config"]["layer"]["config"]["recurrent_activation"] = {}


def _initializer_class_object(config):
    config["config"]["layers"][3]["config"]["kernel_initializer"] = {"class_name": {}, "config": {}}


@pytest.mark.parametrize(
    ("change", "phrases"),
    [
        (_activation_object, ["layer 'gru'", "recurrent_activation {}"]),
        (_initializer_class_object, ["layer 'head'", "kernel_initializer {}", "not one of Keras' own"]),
        (_custom_layer, ["layer 'pool'", "custom layer", "my_project>AttentionPooling"]),
        (_time_major, ["layer 'lstm'", "time_major=True"]),
        (_unknown_key, ["layer 'head'", "'lora_rank'"]),
        (_hard_sigmoid, ["layer 'gru'", "hard_sigmoid", "x/6 + 0.5"]),
    ],
    ids=["activation object", "initializer class object", "custom layer", "time_major", "unknown key", "hard_sigmoid"],
)
def test_what_the_translation_does_not_know_is_refused_naming_the_layer(change, phrases, tmp_path):
    source = rewritten(RESCUE / "tfkeras215_bidi.keras", tmp_path / "old.keras", config=change)
    result = run_cli("convert", source, tmp_path / "fixed.keras")
    assert_clean_failure(result, result.returncode or 1, *phrases, "nothing was written")
    assert result.returncode != 0 and not (tmp_path / "fixed.keras").exists()


def test_a_member_besides_the_model_is_refused(tmp_path):
    source = tmp_path / "old.keras"
    source.write_bytes((RESCUE / "keras30_bidi.keras").read_bytes())
    with zipfile.ZipFile(source, "a") as archive:
        archive.writestr("assets/vocabulary.txt", "a\nb\n")
    with pytest.raises(Unsupported, match=r"holds 'assets/vocabulary\.txt' besides its model.*--layer"):
        rnnconv.convert(source, tmp_path / "fixed.keras")
    assert not (tmp_path / "fixed.keras").exists()


def test_a_variable_no_layer_owns_is_refused(tmp_path):
    def extra(h5):
        h5.create_dataset("layers/dense/vars/2", data=np.zeros(2, np.float32))

    source = rewritten(RESCUE / "tfkeras215_bidi.keras", tmp_path / "old.keras", weights=extra)
    result = run_cli("convert", source, tmp_path / "fixed.keras")
    assert_clean_failure(result, result.returncode or 1, "layers/dense/vars/2", "no layer of its config owns")
    assert not (tmp_path / "fixed.keras").exists()


def test_a_variable_of_the_wrong_shape_is_refused(tmp_path):
    def wrong(h5):
        del h5["layers/bidirectional_1/forward_layer/cell/vars/1"]
        h5.create_dataset("layers/bidirectional_1/forward_layer/cell/vars/1", data=np.zeros((3, 12), np.float32))

    source = rewritten(RESCUE / "tfkeras215_bidi.keras", tmp_path / "old.keras", weights=wrong)
    result = run_cli("convert", source, tmp_path / "fixed.keras")
    assert_clean_failure(result, result.returncode or 1, "layer 'bidi_gru'", "cell/vars/1 has shape (3, 12)")


def test_a_variable_holding_nan_is_copied_as_stored_and_said(tmp_path):
    """As every writer says of the NaN and Inf values it writes (the cuDNN writer's warning)."""
    name = "layers/bidirectional/forward_layer/cell/vars/0"

    def spoiled(h5):
        h5[name][0, 1] = np.nan

    source = rewritten(RESCUE / "tfkeras215_bidi.keras", tmp_path / "old.keras", weights=spoiled)
    result = run_cli("convert", source, tmp_path / "fixed.keras")
    assert result.returncode == 0, result.stderr
    assert f"{name} holds 1 NaN or Inf value(s)" in result.stderr


def test_a_setting_of_one_rnn_is_refused_for_a_whole_model(tmp_path):
    """A whole model keeps each variable and setting as stored: a flag it would leave unused is refused."""
    result = run_cli("convert", RESCUE / "keras30_bidi.keras", tmp_path / "fixed.keras", "--dtype", "float16")
    assert_clean_failure(result, result.returncode or 1, "whole model", "leave out --dtype", "--layer")
    for setting, value, flag in (("activation", "relu", "--activation"), ("bias_split", "half", "--bias-split")):
        with pytest.raises(BadInput, match=f"leave out {flag}, or name one RNN with --layer"):
            rnnconv.convert(RESCUE / "keras30_bidi.keras", tmp_path / "fixed.keras", **{setting: value})
    assert not (tmp_path / "fixed.keras").exists()


def test_an_archive_current_keras_wrote_converts_its_rnn_as_before(tmp_path):
    """Keras 3.3.3 on load their own archives: converting one to Keras is of its RNN, as the Keras page says."""
    result = rnnconv.convert(FIXTURES / "keras3" / "lstm.keras", tmp_path / "lstm.keras")
    assert [r.name for r in result.rnns] == ["lstm"]


@pytest.mark.needs("keras")
def test_a_keras_3_functional_model_before_3_3_3_is_rescued_whole(tmp_path):
    """A Keras 3 Functional model's build_config has no input shape (None), as Keras 3 writes it."""
    import keras

    source = FIXTURES / "keras3" / "lstm.keras"
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["metadata.json"] = json.dumps({"keras_version": "3.0.5"}).encode()
    old = tmp_path / "old.keras"
    with zipfile.ZipFile(old, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    result = rnnconv.convert(old, tmp_path / "fixed.keras")
    assert result.rnns == []
    x = np.random.default_rng(4).standard_normal((2, 6, 5)).astype(np.float32)
    want = np.asarray(keras.saving.load_model(source)(x))
    got = np.asarray(keras.saving.load_model(tmp_path / "fixed.keras")(x))
    assert float(np.abs(got - want).max()) <= 1e-6


@pytest.mark.needs("keras")
def test_verify_checks_the_rescued_model_whole_against_the_old_file(tmp_path):
    old = RESCUE / "tfkeras215_functional.keras"
    fixed = rnnconv.convert(old, tmp_path / "fixed.keras").outputs[0]
    assert rnnconv.api.audits(fixed, old)
    whole, *rnns = rnnconv.audit(fixed, against=old).root
    assert (whole.name, whole.verdict) == ("whole model", "match"), whole.summary
    assert [(r.name, r.verdict) for r in rnns] == [("bidi_lstm", "match"), ("gru", "match")]
    from rnnconv.verification.summary import overall

    assert overall([whole, *rnns]) == ("match", "2 of 2 RNNs match; the whole model matches")

    def changed(h5):
        h5["layers/dense/vars/0"][0, 0] += 0.5

    tampered = rewritten(Path(fixed), tmp_path / "tampered.keras", weights=changed)
    whole = registry.detect(tampered).model_report(tampered, old, batch=2, steps=4, seed=0, atol=None)
    assert whole.verdict == "mismatch"
    assert "variables: differ: layers/dense/vars/0" in whole.summary and "outputs" in whole.summary


def _output_object(config):
    config["config"]["output_layers"] = [[{}, 0, 0]]


def _bidirectional_without_layer(config):
    del config["config"]["layers"][2]["config"]["layer"]


@pytest.mark.parametrize(
    ("change", "phrase"),
    [(_output_object, "output_layers names [{}, 0, 0]"), (_bidirectional_without_layer, "wrapping no layer")],
    ids=["output object", "Bidirectional without layer"],
)
def test_a_damaged_config_is_refused_in_a_sentence(change, phrase, tmp_path):
    """Each was an internal error (found looking for more of what the keras_rescue fuzz family found)."""
    source = rewritten(RESCUE / "tfkeras215_functional.keras", tmp_path / "old.keras", config=change)
    with pytest.raises(BadInput, match=re.escape(phrase)):
        rnnconv.convert(source, tmp_path / "fixed.keras")
    assert not (tmp_path / "fixed.keras").exists()
