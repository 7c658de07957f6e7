"""What a new user hits in the first hour (issue 33, items 6-8, 10 and 12): the output given the same ways to every
command, damaged files explained by what their names say, doctor listing every format, identify --candidate, and
the small sentences that said something wrong."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import FIXTURES, assert_clean_failure, run_cli

import rnnconv
from rnnconv.errors import RnnconvError
from rnnconv.formats import registry
from rnnconv.table.formats import FORMAT_INFO


@pytest.fixture
def lstm_source(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "bilstm.pt"
    torch.save(torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True).state_dict(), path)
    return path


# --- 6. one option vocabulary: the output positional (convert) or -o/--output (every command) ----------------


@pytest.mark.slow
def test_convert_takes_the_output_with_o_as_every_command_does(lstm_source, tmp_path):
    result = run_cli("convert", lstm_source, "-o", tmp_path / "a.xml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "a.xml").exists() and (tmp_path / "a.bin").exists()
    result = run_cli("convert", lstm_source, "--output", tmp_path / "b.onnx")
    assert result.returncode == 0 and (tmp_path / "b.onnx").exists(), result.stderr
    result = run_cli("convert", lstm_source, tmp_path / "c.onnx")  # positional, as before
    assert result.returncode == 0 and (tmp_path / "c.onnx").exists(), result.stderr
    assert_clean_failure(run_cli("convert", lstm_source), 2, "convert needs an output", "or -o OUTPUT")


@pytest.mark.slow
def test_an_output_given_as_a_source_asks_did_you_mean_o(lstm_source, tmp_path):
    """`torch-to-cudnn bilstm.pt t5/foo.bin` said "t5/foo.bin would be written to t5/foo.bin, which is a source"."""
    missing = tmp_path / "t5" / "foo.bin"
    result = run_cli("torch-to-cudnn", lstm_source, missing)
    assert_clean_failure(result, 2, f"{missing} does not exist", f"did you mean -o {missing}?")
    assert "which is a source" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bilstm.pt"]  # nothing written beside the source
    result = run_cli("convert", lstm_source, tmp_path / "nothing.onnx", "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, f"did you mean -o {tmp_path / 'nothing.onnx'}?")


# --- 7. a damaged file of a known kind: what its name says, and what is wrong with it -------------------------

EVERY_ENDING = sorted(
    {s for info in FORMAT_INFO.values() for s in (*info.read_suffixes, *info.default_for, *info.write_suffixes)}
)


def other_titles_in(sentence: str, named: set[str]) -> set[str]:
    """The titles of formats other than `named` that a sentence names."""
    for title in sorted(named, key=len, reverse=True):  # "TF1 cuDNN checkpoint" holds "cuDNN"
        sentence = sentence.replace(title, "")
    return {info.title for info in FORMAT_INFO.values() if info.title in sentence}


@pytest.mark.parametrize("ending", EVERY_ENDING)
@pytest.mark.parametrize("content", ["empty", "foreign bytes"])
def test_a_damaged_file_is_told_by_what_its_name_says(ending, content, tmp_path):
    """One sentence naming the format(s) the name says and what is wrong: not the list of every format."""
    path = tmp_path / f"model{ending}"
    path.write_bytes(b"" if content == "empty" else bytes(range(7, 71)))
    with pytest.raises(RnnconvError) as caught:
        registry.detect(path)
    sentence = str(caught.value)
    named = {fmt.title for fmt in registry.named_by(path)}
    assert named and "\n" not in sentence and len(sentence) < 500, sentence
    assert "cannot tell" not in sentence and all(title in sentence for title in named), sentence
    assert not other_titles_in(sentence, named), sentence
    assert ("is empty" in sentence) == (content == "empty"), sentence


WRITTEN = ["m.bin", "m.safetensors", "m.pt", "m.keras", "m.weights.h5", "m.onnx", "m.tflite", "m.xml", "m.msgpack"]
WRITTEN += ["m.nnx.msgpack", "m.mlx.safetensors", "m.param"]


@pytest.mark.parametrize("name", WRITTEN)
def test_a_truncated_file_is_one_sentence_about_that_file(name, tmp_path):
    """A file rnnconv wrote, cut in half: its reader's sentence (what the name says when the content no longer
    does), never the 2,300-character list of every format."""
    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(5, 7).state_dict(), tmp_path / "source.pt")
    path = tmp_path / name
    rnnconv.convert(tmp_path / "source.pt", path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RnnconvError) as caught, rnnconv.load(path) as rnns:
        [rnn.arrays() for rnn in rnns]
    sentence = str(caught.value)
    assert sentence.startswith(str(path)) and "\n" not in sentence and len(sentence) < 300, sentence
    assert "cannot tell" not in sentence


def test_a_file_nothing_hints_at_names_a_few_formats_and_counts_the_rest(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("a text file")
    with pytest.raises(RnnconvError, match=r"cannot tell what .*notes.txt is: .* and \d+ more") as caught:
        registry.detect(path)
    assert len(str(caught.value)) < 300


@pytest.mark.slow
def test_the_issue_s_two_files_on_the_command_line(tmp_path):
    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(5, 7).state_dict(), tmp_path / "source.pt")
    mlx = tmp_path / "m.mlx.safetensors"
    rnnconv.convert(tmp_path / "source.pt", mlx)
    mlx.write_bytes(mlx.read_bytes()[:100])
    result = run_cli("convert", mlx, tmp_path / "x.bin")
    assert_clean_failure(result, 2, f"{mlx} (MLX by its name) is not a safetensors file")
    assert len(result.stderr) < 200
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert_clean_failure(run_cli("inspect", empty), 2, f"{empty} (PyTorch by its name) is empty (0 bytes)")


# --- 8. doctor comes from the registry: every format's engine and the frameworks that run its files ----------


def test_doctor_lists_every_format_of_the_registry():
    """Flax, flax.nnx and Equinox were missing: no backends, no jax/flax/equinox versions."""
    from rnnconv.doctor import examine, version

    report = json.loads(json.dumps(examine()))  # as --json prints it
    for fmt in registry.formats():
        if fmt.engine is not None:
            row = report["backends"][fmt.engine.name]
            assert row["format"] == fmt.name
            assert row["versions"] == {p: version(p, m) for p, m in fmt.engine.modules}, fmt.name
        if type(fmt).run is not registry.Format.run:  # it runs its files as sources: a framework does
            rows = [row for row in report["sources"].values() if row["format"] == fmt.name]
            assert rows, f"doctor does not list what runs {fmt.title} files"
    for engine, package in (("flax", "flax"), ("flax-nnx", "flax"), ("equinox", "equinox")):
        assert report["backends"][engine]["available"], engine
        assert report["packages"][package] and report["packages"]["jax"]
    assert {"flax", "flax_nnx", "equinox"} <= set(report["sources"])


# --- 10. identify --candidate: the other layouts of the blob's size counted, and a next step that is one -------

JAX_LSTM = FIXTURES / "identify" / "jax_lstm.bin"
JAX_SPEC = {"mode": "lstm", "input_size": 5, "hidden_size": 7, "num_layers": 2, "bidirectional": True}


def test_a_chosen_candidate_is_not_the_only_layout_of_its_size(tmp_path):
    """18 layouts fit; --candidate said "no other known layout has its size"."""
    found = rnnconv.identify(JAX_LSTM, **JAX_SPEC, candidate="onnx-lstm/per-layer/float32")
    assert found.verdict == "identified"
    assert "no other known layout" not in found.summary
    assert "17 other known layouts have its size too (cudnn-lstm/matrices-then-biases/float32, " in found.summary
    assert "and 14 more)" in found.summary and "--probe" in found.summary


def test_identify_o_says_what_to_do_with_what_it_wrote_not_the_same_command(tmp_path):
    out = tmp_path / "j.pt"
    found = rnnconv.identify(JAX_LSTM, **JAX_SPEC, candidate="onnx-lstm/per-layer/float32", output=out)
    assert found.outputs == [str(out)] and found.convert == f"rnnconv convert {out} OUTPUT"
