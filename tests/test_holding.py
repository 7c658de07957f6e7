"""What a target can hold, as its declarations say (formats/holding.py), held against the files it writes.

The element type a conversion reports is the one the written file holds, read back from it, for every target from
every source whose type is not float32 (the shipped half-precision fixtures, and a float64 weight space made from
one); a conversion says so wherever that is not the source's type, and a target that would round the source's values
refuses it in one sentence naming --dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

import rnnconv
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats.catalog import FORMAT_INFO

HALF_SOURCES = (
    "torch/gru_bf16.pt",
    "keras3/bf16_gru.keras",
    "ncnn/gru_fp16.param",
    "openvino/lstm_saved_f16.xml",
    "openvino/keras_gru_loop_f16.xml",  # a Loop ov.save_model saved f16 by default: f16 Consts Converted in its body
)
TARGETS = [info.name for info in FORMAT_INFO.values() if info.writes]


@pytest.fixture(scope="module")
def float64_source(tmp_path_factory) -> Path:
    """An LSTM weight space in float64 (what rnnconv writes of a shipped LSTM with --dtype float64)."""
    out = tmp_path_factory.mktemp("float64") / "lstm64.bin"
    rnnconv.convert(FIXTURES / "keras3" / "lstm.h5", out, dtype="float64", hash_source=False)
    return out


def _source(name: str, float64_source: Path) -> Path:
    return float64_source if name == "float64" else FIXTURES / name


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", [*HALF_SOURCES, "float64"])
def test_the_reported_dtype_is_the_one_the_file_holds(name, target, float64_source, tmp_path):
    source = _source(name, float64_source)
    with rnnconv.load(source) as (rnn,):
        own = rnn.spec.dtype
    info = FORMAT_INFO[target]
    out = tmp_path / f"model{info.default_for[0]}"
    try:
        result = rnnconv.convert(source, out, to=target)
    except BackendMissing as exc:
        pytest.skip(str(exc))
    except Unsupported as exc:
        message = str(exc)
        assert "\n" not in message and not any(tmp_path.iterdir()), message
        if own not in info.holds.dtypes and own not in ("float16", "bfloat16"):  # a narrower type would round it
            assert f"--dtype {info.holds.dtypes[0]}" in message, message
        return
    try:
        with rnnconv.load(result.outputs[0]) as back:
            held = {r.spec.dtype for r in back}
    except BackendMissing as exc:
        pytest.skip(str(exc))
    assert held == {result.dtype}, (result.dtype, held)
    changed = [w for w in result.warnings if f"written as {result.dtype}" in w and own in w]
    assert bool(changed) == (result.dtype != own), result.warnings
    assert result.dtype in info.holds.dtypes


def test_a_dtype_the_target_does_not_store_is_refused_naming_what_it_stores(tmp_path):
    with pytest.raises(Unsupported, match=r"ncnn stores float32 or float16 weights, not bfloat16 \(--dtype\)"):
        rnnconv.convert(FIXTURES / "torch" / "rnn_tanh.pt", tmp_path / "m.param", dtype="bfloat16")
    assert not any(tmp_path.iterdir())


def test_inspect_to_says_which_rnns_convert_to_a_target_as_a_conversion_would():
    """inspect --to FORMAT: each RNN's `converts` is whether a conversion to FORMAT writes it; where not, its reason
    is the refusal that conversion gives (mixed.keras to TFLite: its LSTMs and simple RNNs convert, its GRUs not)."""
    path = FIXTURES / "keras3" / "mixed.keras"
    report = rnnconv.inspect(path, to="tflite")
    assert report.target == "tflite"
    by_name = {entry.name: entry for entry in report.rnns}
    assert by_name["bidi_lstm"].converts and by_name["srnn_tanh"].converts
    gru = by_name["gru_a"]
    assert not gru.converts and "has no GRU" in (gru.reason or "")
    with pytest.raises(Unsupported) as refused:
        rnnconv.convert(path, FIXTURES.parent / "never-written.tflite", layer="gru_a")
    assert str(refused.value) == gru.reason
    plain = {entry.name: entry.converts for entry in rnnconv.inspect(path).rnns}
    assert plain["gru_a"]  # without --to, it converts to the canonical form


def test_inspect_to_a_format_rnnconv_only_reads_is_refused():
    with pytest.raises(BadInput, match="reads TF1 checkpoint files but does not write them"):
        rnnconv.inspect(FIXTURES / "keras3" / "mixed.keras", to="tf1")
