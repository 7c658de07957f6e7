"""ExecuTorch programs (fixtures by ExecuTorch 1.5.1: portable and XNNPACK-delegated): recognised and parsed without
ExecuTorch, listed by inspect with the RNNs their constants' shapes fit, and refused in one sentence that says why
and what to convert instead; damaged programs give one sentence."""

from __future__ import annotations

import struct

import pytest
from conftest import FIXTURES, assert_clean_failure, run_cli

import rnnconv
from rnnconv.errors import BadInput
from rnnconv.formats.executorch.program import load

PROGRAMS = FIXTURES / "executorch"
HAND_OVER = "convert the checkpoint it was exported from instead"
LISTED = {  # program -> what inspect lists: (name, class, a phrase of why it does not convert)
    "lstm_portable.pte": [
        ("forward:0-15", "nn.LSTM", "shaped as a 2-layer bidirectional nn.LSTM's parameters (input 3, hidden 5)")
    ],
    "gru_portable.pte": [("forward:0-7", "nn.GRU", "shaped as a 2-layer nn.GRU's parameters (input 4, hidden 6)")],
    "tagger_portable.pte": [("forward:0-3", "nn.LSTM", "shaped as a 1-layer nn.LSTM's parameters (input 3, hidden 4)")],
    "lstm_xnnpack.pte": [("forward", "ExecuTorch method", "inside 14 XnnpackBackend delegate payloads")],
}


@pytest.mark.parametrize("name", sorted(LISTED))
def test_inspect_lists_what_a_program_holds_and_why_it_does_not_convert(name):
    report = rnnconv.inspect(PROGRAMS / name)
    assert report.format == "executorch"
    got = [(e.name, e.layer_class, e.converts) for e in report.rnns]
    assert got == [(n, c, False) for n, c, _ in LISTED[name]]
    for entry, (_, _, phrase) in zip(report.rnns, LISTED[name]):
        assert phrase in entry.reason and HAND_OVER in entry.reason


@pytest.mark.parametrize("name", sorted(LISTED))
def test_a_conversion_is_refused_in_one_sentence_naming_what_to_convert_instead(name, tmp_path):
    for target in ("out.bin", "out.pt", "out.onnx"):
        result = run_cli("convert", PROGRAMS / name, tmp_path / target)
        assert_clean_failure(result, 2, "is an ExecuTorch program, which rnnconv lists but does not convert", HAND_OVER)
    assert not list(tmp_path.iterdir())


def test_the_parser_reads_the_constants_as_executorch_laid_them_out():
    """The portable LSTM's 16 constants are nn.LSTM's parameters in the order torch.export lifts them; the lowered
    program keeps none of them in the plan (they are in XNNPACK's payloads) and names no tensor."""
    (method,) = load(PROGRAMS / "lstm_portable.pte").methods
    shapes = [c.shape for c in method.constants]
    layer0, layer1 = [(20, 3), (20, 5), (20,), (20,)], [(20, 10), (20, 5), (20,), (20,)]
    assert shapes == layer0 * 2 + layer1 * 2
    assert {c.dtype for c in method.constants} == {"float32"} and not any(c.name for c in method.constants)
    assert "aten::sigmoid" in method.operators and not method.delegates
    (lowered,) = load(PROGRAMS / "lstm_xnnpack.pte").methods
    assert not lowered.constants and set(lowered.delegates) == {"XnnpackBackend"}


def _damaged(data: bytes):
    yield "cut to 7 bytes", data[:7]
    yield "cut in half", data[: len(data) // 2]
    yield "program size beyond the file", data[:16] + struct.pack("<Q", len(data) + 1) + data[24:]
    yield "segments beyond the file", data[:24] + struct.pack("<Q", len(data) * 2) + data[32:]
    yield "root far out", struct.pack("<I", 0x7FFFFF00) + data[4:]


@pytest.mark.parametrize("name", ["lstm_portable.pte", "lstm_xnnpack.pte"])
def test_a_damaged_program_gives_one_sentence(name, tmp_path):
    data = (PROGRAMS / name).read_bytes()
    for kind, damaged in _damaged(data):
        path = tmp_path / f"damaged{len(damaged)}.pte"
        path.write_bytes(damaged)
        with pytest.raises(BadInput, match="is not a readable ExecuTorch program"):
            rnnconv.inspect(path)
        result = run_cli("inspect", path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (kind, result.stderr)
        path.unlink()
