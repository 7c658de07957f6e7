"""What a new user hits in the first hour (issue 33, items 6-8, 10 and 12): the output given the same ways to every
command, damaged files explained by what their names say, doctor listing every format, identify --candidate, and
the small sentences that said something wrong."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_clean_failure, run_cli


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
