"""GRUs whose reset gate is applied before the recurrent product (Keras reset_after=False, ONNX linear_before_reset=0,
OpenVINO linear_before_reset=false, TF1's GRUCell): held in the canonical form as such, written only by the formats
whose table rows hold that form, each file computing what Keras computes; every other writer refuses it, even asked
directly, and never writes it as cuDNN's reset-after GRU."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, largest_difference
from facts.keras import reset_before_keras_run

import rnnconv
from rnnconv.errors import Unsupported
from rnnconv.formats import holding, registry
from rnnconv.formats.settings import ReadOptions, WriteOptions

K3 = FIXTURES / "keras3"
SOURCE = K3 / "gru_reset_before.keras"  # GRU(4, reset_after=False), input 5, random weights and biases
HOLDERS = ("keras", "onnx", "openvino")  # the formats whose rows write a reset-before GRU


@pytest.mark.needs("keras", "tensorflow", "onnxruntime", "openvino")
def test_a_keras_reset_before_gru_through_onnx_and_openvino_and_back_computes_what_keras_computes(tmp_path):
    import onnxruntime
    import openvino

    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (3, 6, 5)).astype(np.float32)  # batch 3, 6 steps, input 5
    h0 = rng.normal(0, 0.5, (1, 3, 4)).astype(np.float32)
    want = reset_before_keras_run(SOURCE, x, h0)
    errors = {}
    rnnconv.convert(SOURCE, tmp_path / "m.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    y, h_n = session.run(None, {"X": x.transpose(1, 0, 2), "initial_h": h0})
    errors["onnx"] = largest_difference((y.transpose(1, 0, 2), h_n), want)
    rnnconv.convert(SOURCE, tmp_path / "m.xml")
    core = openvino.Core()
    model = core.read_model(tmp_path / "m.xml")
    feeds = {"x": x, "initial_h": h0, "sequence_lens": np.full(3, 6, np.int32)}
    model.reshape({name: list(value.shape) for name, value in feeds.items()})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    ran = compiled(feeds)
    errors["openvino"] = largest_difference((ran["y"], ran["h_n"]), want)
    for via in ("m.onnx", "m.xml"):
        back = tmp_path / f"back_{via.split('.')[1]}.keras"
        rnnconv.convert(tmp_path / via, back)
        errors[f"{via} back to Keras"] = largest_difference(reset_before_keras_run(back, x, h0), want)
    for how, error in errors.items():
        LARGEST_ERRORS[f"keras reset_after=False via {how}"] = error
    assert max(errors.values()) <= 1e-5, errors


@pytest.mark.parametrize("target", ["cudnn", "torch", "tflite", "flax", "mlx", "ncnn", "paddle", "tfjs"])
def test_every_other_target_refuses_it_naming_the_term_even_with_allow_lossy(target, tmp_path):
    out = tmp_path / f"out{registry.get(target).info.write_suffixes[0]}"
    with pytest.raises(Unsupported) as refused:
        rnnconv.convert(SOURCE, out, to=target, allow_lossy=True)
    said = str(refused.value)
    assert "reset gate applied before the recurrent product" in said and "even with --allow-lossy" in said, said
    assert holding.reset_before_settings() in said
    assert not list(tmp_path.iterdir())


def test_no_writer_writes_it_as_a_reset_after_gru_even_asked_directly(tmp_path):
    """Each writer of a format whose rows hold no reset-before GRU, given one without the conversion's check, refuses
    it (its row for the spec is none), and leaves no file: no silent reset-after GRU."""
    with registry.get("keras").read(SOURCE, ReadOptions(hash_source=False)) as found:
        (rnn,) = found.rnns
        assert not rnn.spec.reset_after
        writers = [fmt for fmt in registry.formats() if fmt.info.writes and fmt.name not in HOLDERS]
        assert {"cudnn", "torch", "mlx", "ncnn", "paddle"} <= {fmt.name for fmt in writers}
        for fmt in writers:
            folder = tmp_path / fmt.name
            folder.mkdir()
            with pytest.raises(Unsupported):
                fmt.write([rnn], folder / f"out{fmt.info.write_suffixes[0]}", WriteOptions())
            assert not list(folder.iterdir()), fmt.name
