"""TF1 checkpoints of tf.compat.v1's own cells (BasicLSTMCell, LSTMCell, GRUCell): each conversion computes what
tf.compat.v1 itself computed when the fixtures were made (fixtures/make_tf1_cells_fixtures.py, non-zero initial
states), its forget_bias read from the .meta graph, or stated, never assumed; GRUCell's reset gate, applied before
the candidate's product, written only where a format holds that form (ONNX, Keras, OpenVINO), refused for cuDNN."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, largest_difference, run_cli

import rnnconv
from rnnconv.core import reference
from rnnconv.errors import Unsupported
from rnnconv.formats.cudnn.reader import open_bin

TF1 = FIXTURES / "tf1"
# fixture -> (class, layers, bidirectional, projection)
CELLS = {
    "basic_lstm": ("BasicLSTMCell", 1, False, 0),
    "basic_lstm_fb0": ("BasicLSTMCell", 1, False, 0),
    "lstm_proj": ("LSTMCell", 1, False, 3),
    "multi2": ("BasicLSTMCell", 2, False, 0),
    "bidi": ("LSTMCell", 1, True, 0),
}


def _oracle(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """x, h0, c0 in cuDNN's shapes and what tf.compat.v1 computed (y, h_n, c_n) from the fixture's record."""
    got = np.load(TF1 / f"{name}.npz")
    cells = sorted(int(k.split("_")[1]) for k in got if k.startswith("h0_"))
    h0 = np.stack([got[f"h0_{n}"] for n in cells])
    c0 = np.stack([got[f"c0_{n}"] for n in cells])
    expected = (
        got["y"].transpose(1, 0, 2),
        np.stack([got[f"h_{n}"] for n in cells]),
        np.stack([got[f"c_{n}"] for n in cells]),
    )
    return got["x"].transpose(1, 0, 2), h0, c0, expected


def test_each_cell_converts_and_computes_what_tf_compat_v1_computed(tmp_path):
    for name, (layer_class, layers, bidirectional, proj) in CELLS.items():
        out = tmp_path / f"{name}.bin"
        result = rnnconv.convert(TF1 / f"{name}.ckpt", out)
        notes = result.rnns[0].notes
        assert any("forget_bias" in note and ".meta" in note for note in notes), notes
        blob = open_bin(out)
        spec = blob.spec
        assert (spec.num_layers, spec.bidirectional, spec.proj_size, spec.input_size, spec.hidden_size) == (
            layers,
            bidirectional,
            proj,
            5,
            4,
        )
        assert json.loads((tmp_path / f"{name}.bin.json").read_text())["source"]["class"] == layer_class
        x, h0, c0, expected = _oracle(name)
        got = reference.forward(spec, blob.param, x, h0, c0)
        worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
        LARGEST_ERRORS[f"tf.compat.v1 {name}"] = worst
        assert worst <= 1e-5, (name, worst)


def test_the_forget_bias_is_folded_into_the_f_gate_and_stated_without_a_meta_graph(tmp_path):
    """Without its .meta the checkpoint is refused naming --forget-bias; stated, it gives the blob the graph gives."""
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(TF1 / f"multi2.ckpt{suffix}", tmp_path / f"multi2.ckpt{suffix}")
    with pytest.raises(Unsupported, match=r"no \.meta graph \(multi2\.ckpt\.meta\).*--forget-bias.*never assumed"):
        rnnconv.convert(tmp_path / "multi2.ckpt", tmp_path / "refused.bin")
    assert not (tmp_path / "refused.bin").exists()
    rnnconv.convert(TF1 / "basic_lstm.ckpt", tmp_path / "meta.bin")
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(TF1 / f"basic_lstm.ckpt{suffix}", tmp_path / f"basic_lstm.ckpt{suffix}")
    rnnconv.convert(tmp_path / "basic_lstm.ckpt", tmp_path / "stated.bin", forget_bias=1.0)
    assert (tmp_path / "stated.bin").read_bytes() == (tmp_path / "meta.bin").read_bytes()
    rnnconv.convert(tmp_path / "basic_lstm.ckpt", tmp_path / "zero.bin", forget_bias=0.0)
    stated, zero = open_bin(tmp_path / "stated.bin"), open_bin(tmp_path / "zero.bin")
    from rnnconv.core.canonical import ParamKey

    for kind in ("bW", "bR"):
        for gate in "ico":
            assert np.array_equal(stated.param(ParamKey(0, 0, kind, gate)), zero.param(ParamKey(0, 0, kind, gate)))
    shift = stated.param(ParamKey(0, 0, "bR", "f")) - zero.param(ParamKey(0, 0, "bR", "f"))
    np.testing.assert_allclose(shift, 1.0, atol=1e-6)  # --bias-split recurrent: the whole bias on the bR side


def test_verify_runs_the_cells_in_tensorflow_and_the_gru_cell_is_refused_for_cudnn(tmp_path):
    pytest.importorskip("tensorflow")
    for name in ("lstm_proj", "multi2", "bidi"):
        blob = tmp_path / f"{name}.bin"
        rnnconv.convert(TF1 / f"{name}.ckpt", blob)
        report = rnnconv.verify(blob, backend="numpy")
        assert report.verdict == "match", report.summary
        assert report.source is not None and "forget_bias added" in (report.source.run or "")
    inspected = json.loads(run_cli("inspect", TF1 / "gru.ckpt", "--json").stdout)["rnns"]
    assert [(r["class"], r["converts"], r["spec"]["input_size"], r["spec"]["hidden_size"]) for r in inspected] == [
        ("GRUCell", True, 5, 4)
    ]
    assert inspected[0]["spec"]["reset_after"] is False
    for out in ("gru.bin", "gru.pt"):
        result = run_cli("convert", TF1 / "gru.ckpt", tmp_path / out, "--allow-lossy")
        assert_clean_failure(result, 2, "even with --allow-lossy", "reset gate applied before the recurrent product")
        assert "Keras's reset_after=False" in result.stderr and not (tmp_path / out).exists()
    rnnconv.convert(TF1 / "gru_cell_bidi.ckpt", tmp_path / "gru.onnx")
    report = rnnconv.verify(tmp_path / "gru.onnx", against=TF1 / "gru_cell_bidi.ckpt")
    assert report.verdict == "match" and "GRUCell's equations" in (report.source.run or ""), report.summary


GRU_CELLS = {"gru": (1, False), "gru_cell_multi2": (2, False), "gru_cell_bidi": (1, True)}


@pytest.mark.needs("onnxruntime", "keras", "tensorflow")
def test_gru_cells_written_as_onnx_and_keras_compute_what_tf_compat_v1_computed(tmp_path):
    """Each GRUCell checkpoint (one layer, a MultiRNNCell of two, bidirectional; input 5, hidden 4) written as ONNX
    (linear_before_reset=0) run in onnxruntime, and as Keras (reset_after=False) run in Keras 3, from tf.compat.v1's
    own initial states: what GRUCell computed when the fixture was made."""
    import keras
    import onnxruntime

    from rnnconv.formats.keras.runner import run_layer

    for name, (layers, bidirectional) in GRU_CELLS.items():
        got = np.load(TF1 / f"{name}.npz")
        dirs = 2 if bidirectional else 1
        h0 = np.stack([got[f"h0_{n}"] for n in range(layers * dirs)])
        want_y, want_h = got["y"], np.stack([got[f"h_{n}"] for n in range(layers * dirs)])
        rnnconv.convert(TF1 / f"{name}.ckpt", tmp_path / f"{name}.onnx")
        session = onnxruntime.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        y, h_n = session.run(None, {"X": got["x"].transpose(1, 0, 2), "initial_h": h0})
        onnx_error = largest_difference((y.transpose(1, 0, 2), h_n), (want_y, want_h))
        rnnconv.convert(TF1 / f"{name}.ckpt", tmp_path / f"{name}.keras")
        model = keras.models.load_model(tmp_path / f"{name}.keras")
        recurrent = [layer for layer in model.layers if layer.weights]
        assert len(recurrent) == layers
        x, finals = got["x"], []
        for k, layer in enumerate(recurrent):
            run = run_layer(keras, layer, x, h0[k * dirs : (k + 1) * dirs], None)
            x = run["y"]
            finals.append(run["h_n"])
        keras_error = largest_difference((x, np.concatenate(finals)), (want_y, want_h))
        LARGEST_ERRORS[f"tf.compat.v1 {name} as ONNX (onnxruntime)"] = onnx_error
        LARGEST_ERRORS[f"tf.compat.v1 {name} as Keras 3"] = keras_error
        assert onnx_error <= 1e-5 and keras_error <= 1e-5, (name, onnx_error, keras_error)


@pytest.mark.parametrize(
    "damage, said",
    [
        ("nan", "adds a forget bias of nan"),
        ("renamed", "does not say the one of 'rnn/basic_lstm_cell/kernel'"),
        ("cut", "is not a readable MetaGraphDef"),
    ],
)
def test_a_damaged_meta_graph_is_one_sentence(damage, said, tmp_path):
    """What the tf1_meta fuzz family does to a .meta graph: the f gate's constant made NaN, the Add renamed (same
    length, so the protobuf stays well formed), the graph cut short; nothing is written."""
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(TF1 / f"basic_lstm.ckpt{suffix}", tmp_path / f"basic_lstm.ckpt{suffix}")
    meta = bytearray((TF1 / "basic_lstm.ckpt.meta").read_bytes())
    if damage == "nan":
        one = b"\x2a\x04" + np.float32(1.0).tobytes()  # the forget bias's float_val
        assert meta.count(one) == 1
        meta = meta.replace(one, b"\x2a\x04" + np.float32("nan").tobytes())
    elif damage == "renamed":
        meta = meta.replace(b"AddV2", b"MulV2")
    else:
        meta = meta[: len(meta) // 2]
    (tmp_path / "basic_lstm.ckpt.meta").write_bytes(bytes(meta))
    result = run_cli("convert", tmp_path / "basic_lstm.ckpt", tmp_path / "out.bin")
    assert_clean_failure(result, 2, said)
    assert not (tmp_path / "out.bin").exists()


def test_a_read_setting_of_another_format_is_refused_not_left_unused(tmp_path):
    """--forget-bias given for a PyTorch checkpoint (it is TF1's) is refused in one sentence, nothing written: a
    setting given is never silently left unused."""
    out = tmp_path / "x.bin"
    result = run_cli("convert", FIXTURES / "torch" / "gru_bf16.pt", out, "--forget-bias", "1")
    assert_clean_failure(result, 2, "--forget-bias is for TF1 checkpoint files, and gru_bf16.pt is PyTorch")
    assert not out.exists()
