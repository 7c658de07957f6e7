"""verify of every file rnnconv writes, against the source it records: the verdict users trust.

The grid writes each target from PyTorch and Keras sources with and without biases, of one and two layers and one
and two directions, then runs `verify` on the written file: MATCH, or the target's refusal at convert time (exit 2,
one sentence, nothing written) where it cannot hold the RNN. A copy written with two gates swapped must give
MISMATCH, and the diagnosis must name the swap.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, declared_refusal, run_cli

import rnnconv
from rnnconv.core.canonical import CanonicalRNN, ParamKey
from rnnconv.core.contracts import dump
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import registry
from rnnconv.formats.settings import WriteOptions
from rnnconv.table.constants import RNN
from rnnconv.verification.run import verify
from rnnconv.verification.subject import VerifyOptions

TARGETS = {  # format: the output's ending
    "cudnn": ".bin",
    "onnx": ".onnx",
    "openvino": ".xml",
    "tflite": ".tflite",
    "flax": ".msgpack",
    "flax-nnx": ".nnx.msgpack",
    "equinox": ".eqx",
    "mlx": ".mlx.safetensors",
    "ncnn": ".param",
    "torch": ".pt",
    "keras": ".keras",
}
INPUT, HIDDEN = 5, 7


# PyTorch sources: every LSTM kind, and GRUs and simple RNNs of one layer one way and two layers both ways.
TORCH_KINDS = [
    ("LSTM", bias, layers, bi) for bias, layers, bi in itertools.product((True, False), (1, 2), (False, True))
]
TORCH_KINDS += [
    (cls, bias, layers, layers == 2) for cls in ("GRU", "RNN") for bias in (True, False) for layers in (1, 2)
]
KERAS_LAYERS = ["lstm_nobias", "gru_nobias", "bidi_lstm", "gru_a"]  # fixtures/keras3/mixed.h5


def torch_name(cls: str, bias: bool, layers: int, bi: bool) -> str:
    return f"{cls.lower()}{'' if bias else '_nobias'}_x{layers}{'_bi' if bi else ''}"


@pytest.fixture(scope="session")
def torch_sources(tmp_path_factory) -> dict[str, Path]:
    """state_dicts of nn.LSTM/GRU/RNN with PyTorch's own random weights (distinct per gate and direction)."""
    folder = tmp_path_factory.mktemp("torch_sources")
    torch.manual_seed(33)
    sources = {}
    for cls, bias, layers, bi in TORCH_KINDS:
        module = getattr(torch.nn, cls)(INPUT, HIDDEN, num_layers=layers, bidirectional=bi, bias=bias)
        name = torch_name(cls, bias, layers, bi)
        torch.save(module.state_dict(), folder / f"{name}.pt")
        sources[name] = folder / f"{name}.pt"
    return sources


def source_cases() -> list[tuple[str, str | None]]:
    torch_cases: list[tuple[str, str | None]] = [("torch", torch_name(*kind)) for kind in TORCH_KINDS]
    return torch_cases + [("keras", layer) for layer in KERAS_LAYERS]


def source_of(case: tuple[str, str | None], torch_sources: dict[str, Path]) -> tuple[Path, str | None]:
    kind, name = case
    if kind == "torch":
        assert name is not None
        return torch_sources[name], None
    return FIXTURES / "keras3" / "mixed.h5", name


def swapped(rnn: CanonicalRNN) -> tuple[CanonicalRNN, list[str]]:
    """`rnn` as a writer that mixed up two of its gates would give it (every layer and direction), and what the
    diagnosis calls that; a simple RNN, which has one gate, with its recurrent matrices transposed instead."""
    spec = rnn.spec
    if spec.cell == RNN:

        def transposed(key: ParamKey) -> np.ndarray:
            value = rnn.param(key)
            return value.T.copy() if key.kind == "R" else value

        loaders = {key: (lambda key=key: transposed(key)) for key in spec.param_keys()}
        return CanonicalRNN(rnn.name, spec, loaders, rnn.source), ["recurrent matrices look stored transposed"]
    a, b = spec.gates[:2]
    other = {a: b, b: a}

    def moved(key: ParamKey) -> np.ndarray:
        return rnn.param(ParamKey(key.layer, key.direction, key.kind, other.get(key.gate, key.gate)))

    loaders = {key: (lambda key=key: moved(key)) for key in spec.param_keys()}
    return CanonicalRNN(rnn.name, spec, loaders, rnn.source), [f"Gates {a} (", f" and {b} (", "look swapped"]


def write_and_verify(source: Path, layer: str | None, target: str, folder: Path) -> None:
    out = folder / f"model{TARGETS[target]}"
    with rnnconv.load(source, layer=layer) as (rnn,):
        refused = declared_refusal(target, rnn)
        if refused is not None:  # refused at convert time, in one sentence, nothing written
            with pytest.raises(Unsupported) as caught:
                rnnconv.convert(source, out, layer=layer)
            message = str(caught.value)
            assert caught.value.exit_code == 2 and refused in message and "\n" not in message, message
            assert not any(folder.iterdir())
            return
        rnnconv.convert(source, out, layer=layer)
        report = verify(out, VerifyOptions())
        data = dump(report)
        assert report.verdict == "match" and report.exit_code == 0, data["summary"]
        errors = [data["comparison"][k]["max_abs"] for k in ("y", "h_n", "c_n") if k in data["comparison"]]
        assert max(errors) <= data["tolerance"]["atol"], errors
        LARGEST_ERRORS[f"verify {target} of {source.name}/{layer or rnn.spec.describe()}"] = max(errors)

        broken, mistake = swapped(rnn)  # what the diagnosis must say
        bad = folder / "swapped" / out.name
        bad.parent.mkdir()
        registry.get(target).write([broken], bad, WriteOptions())
    report = verify(bad, VerifyOptions())
    assert report.verdict == "mismatch" and report.exit_code == 1, dump(report)["summary"]
    assert report.diagnosis is not None and report.diagnosis.found, report.summary
    assert all(phrase in report.diagnosis.message for phrase in mistake), report.diagnosis.message


@pytest.mark.slow
@pytest.mark.parametrize("case", source_cases(), ids=lambda case: f"{case[0]}-{case[1]}")
@pytest.mark.parametrize("target", list(TARGETS))
def test_every_target_verifies_what_it_wrote(target, case, torch_sources, tmp_path):
    """Write, verify: MATCH (or refused at convert time); a gate swap in the written file: MISMATCH naming it."""
    source, layer = source_of(case, torch_sources)
    write_and_verify(source, layer, target, tmp_path)


@pytest.mark.parametrize("target", ["openvino", "tflite", "ncnn", "flax", "flax-nnx"])
def test_a_file_from_a_bias_free_source_verifies(target, torch_sources, tmp_path):
    """Targets that always hold biases hold zeros for a bias-free source: verify runs the source as it is (without
    biases), not as the file's spec says, and the file matches it."""
    out = tmp_path / f"nobias{TARGETS[target]}"
    rnnconv.convert(torch_sources[torch_name("LSTM", False, 1, False)], out)
    report = verify(out, VerifyOptions())
    assert report.verdict == "match", report.summary


def test_a_file_from_a_bias_free_keras_layer_verifies(tmp_path):
    """The issue's case: `convert fixtures/keras3/mixed.h5 k.xml --layer lstm_nobias && verify k.xml`."""
    out = tmp_path / "k.xml"
    assert run_cli("convert", FIXTURES / "keras3" / "mixed.h5", out, "--layer", "lstm_nobias").returncode == 0
    result = run_cli("verify", out)
    assert result.returncode == 0 and "MATCH" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("target", list(TARGETS))
def test_verify_against_another_rnn_says_what_each_holds(target, torch_sources, tmp_path):
    """An LSTM's file against a GRU's checkpoint: one sentence saying what the file holds and what the source holds
    (not PyTorch's load_state_dict text cut off), whatever the file's format."""
    out = tmp_path / f"x{TARGETS[target]}"
    rnnconv.convert(torch_sources[torch_name("LSTM", True, 1, False)], out)
    with pytest.raises(BadInput) as caught:
        verify(out, VerifyOptions(against=torch_sources[torch_name("GRU", True, 1, False)]))
    message = str(caught.value)
    assert f"{out.name} holds an RNN (lstm, input 5, hidden 7" in message, message
    assert "gru_x1.pt holds another (gru, input 5, hidden 7" in message, message
    assert "\n" not in message and "PyTorch says" not in message and message.endswith(f"source of {out.name}")


def test_verify_against_another_rnn_on_the_command_line(torch_sources, tmp_path):
    out = tmp_path / "x.tflite"
    rnnconv.convert(torch_sources[torch_name("LSTM", True, 1, False)], out)
    result = run_cli("verify", out, "--against", torch_sources[torch_name("GRU", True, 1, False)])
    assert_clean_failure(result, 2, "x.tflite holds an RNN (lstm,", "gru_x1.pt holds another (gru,")
    assert len(result.stderr.strip().splitlines()) == 1 and len(result.stderr) < 300, result.stderr


# --- a converted state_dict or Keras file records its source, and verify holds it against that ----------------


@pytest.mark.parametrize("ending", [".pt", ".safetensors", ".keras", ".weights.h5"])
def test_a_file_converted_back_from_an_ir_verifies_against_the_ir(ending, torch_sources, tmp_path):
    """The issue's `verify back/ov32.pt`: the .pt (or .keras) records the IR it was made from, and verify runs it
    in its framework against that IR, from wherever the command runs."""
    ir, back = tmp_path / "ov" / "ov32.xml", tmp_path / "back" / f"ov32{ending}"
    ir.parent.mkdir()
    back.parent.mkdir()
    rnnconv.convert(torch_sources[torch_name("LSTM", True, 2, True)], ir)
    rnnconv.convert(ir, back, to="torch" if ending == ".safetensors" else None)
    result = run_cli("verify", Path("back") / back.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ov32{ending} computes what ov32.xml computes" in " ".join(result.stdout.split())
    assert "convert it first" not in result.stdout + result.stderr


@pytest.mark.parametrize("ending", [".pt", ".safetensors", ".weights.h5"])
def test_a_simple_rnn_s_nonlinearity_is_recorded_where_the_file_cannot_say_it(ending, tmp_path):
    """A state_dict (and a Keras weights file) stores no nonlinearity: what rnnconv writes records it, so the file
    reads back, and verifies, as the relu RNN it is."""
    out = tmp_path / f"relu{ending}"
    rnnconv.convert(
        FIXTURES / "torch" / "rnn_relu.safetensors",
        out,
        nonlinearity="relu",
        to="torch" if ending == ".safetensors" else None,
    )
    with rnnconv.load(out) as (rnn,):
        assert rnn.spec.mode == "rnn_relu"
    report = verify(out, VerifyOptions())
    assert report.verdict == "match", report.summary


def test_a_multi_layer_rnn_written_to_keras_reads_back_as_one(torch_sources, tmp_path):
    """rnnconv writes a 2-layer RNN as two Keras layers and records them as one RNN: converting the file back
    gives the 2-layer RNN without naming its layers, and `--layer a,b` still stacks them."""
    model = tmp_path / "two.keras"
    rnnconv.convert(torch_sources[torch_name("LSTM", True, 2, True)], model)
    for layer in (None, "rnn_layer0,rnn_layer1"):
        with rnnconv.load(model, layer=layer) as (rnn,):
            assert (rnn.spec.num_layers, rnn.spec.bidirectional) == (2, True)
            assert rnn.origin is not None and rnn.origin.path == str(torch_sources[torch_name("LSTM", True, 2, True)])


def test_a_state_dict_rnnconv_did_not_write_says_it_records_no_source():
    result = run_cli("verify", FIXTURES / "torch" / "seq2seq.pt", "--layer", "encoder.rnn")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "seq2seq.pt is a PyTorch file that records no source, so rnnconv did not write it" in " ".join(
        result.stdout.split()
    )


def test_a_hint_to_convert_first_keeps_the_folder(tmp_path):
    """A TF1 checkpoint given to verify: the command it suggests names the file where it is."""
    index = FIXTURES / "tf1" / "gru_bi.ckpt.index"
    result = run_cli("verify", index, cwd=tmp_path)
    assert_clean_failure(result, 2, f"convert it first (rnnconv tf1-to-cudnn {index})")


# --- a file written with --allow-lossy: verify knows what it lost ------------------------------------------------

LOSSY_SOURCE = (FIXTURES / "keras3" / "mixed.keras", "gru_a")  # a GRU with a non-zero b_hn, which nnx cannot hold


@pytest.fixture(scope="module")
def lossy(tmp_path_factory) -> Path:
    """mixed.keras's gru_a written to flax.nnx with --allow-lossy: its b_hn dropped."""
    out = tmp_path_factory.mktemp("lossy") / "g.nnx.msgpack"
    source, layer = LOSSY_SOURCE
    result = rnnconv.convert(source, out, layer=layer, allow_lossy=True)
    assert any("--allow-lossy" in warning for warning in result.warnings)
    return out


def test_a_lossy_file_records_what_was_dropped_and_the_loss_it_measured(lossy):
    with rnnconv.load(lossy) as (rnn,):
        loss = rnn.origin.loss if rnn.origin else None
    assert loss is not None and len(loss.dropped) == 1 and "b_hn" in loss.dropped[0]
    assert loss.difference > 0.01 and (loss.seed, loss.steps, loss.batch) == (0, 8, 3)


def test_a_file_that_loses_what_it_recorded_is_lossy_as_recorded(lossy):
    """verify measures the loss, compares it with the record, and holds the file against its source without what
    was dropped: the verdict says so, and fails unless the loss is accepted explicitly."""
    report = verify(lossy, VerifyOptions())
    assert report.verdict == "lossy-as-recorded" and report.exit_code == 1, report.summary
    assert report.loss is not None and report.loss.explained and report.loss.same_inputs
    assert report.loss.measured == pytest.approx(report.loss.recorded, rel=1e-3)  # the same probe inputs
    assert report.loss.beyond <= report.tolerance.atol < report.loss.measured
    assert report.diagnosis is None and "b_hn" in report.summary and "--accept-recorded-loss" in report.summary
    accepted = verify(lossy, VerifyOptions(accept_recorded_loss=True))
    assert accepted.verdict == "lossy-as-recorded" and accepted.exit_code == 0, accepted.summary
    other_inputs = verify(lossy, VerifyOptions(seq_len=5, seed=3))
    assert other_inputs.verdict == "lossy-as-recorded" and not other_inputs.loss.same_inputs


def test_lossy_as_recorded_on_the_command_line(lossy, tmp_path):
    result = run_cli("verify", lossy, "--junit", tmp_path / "j.xml")
    assert result.returncode == 1 and "LOSSY-AS-RECORDED" in result.stdout, result.stdout + result.stderr
    assert "<failure" in (tmp_path / "j.xml").read_text()
    result = run_cli("verify", lossy, "--accept-recorded-loss", "--junit", tmp_path / "ok.xml")
    assert result.returncode == 0 and "accepted with --accept-recorded-loss" in " ".join(result.stdout.split())
    assert "<failure" not in (tmp_path / "ok.xml").read_text()
    assert "--accept-recorded-loss" in run_cli("verify", "--help").stdout


def test_a_lossy_file_that_loses_more_than_it_recorded_is_a_mismatch(lossy, tmp_path):
    """Two gates swapped in a lossy file: more is lost than the record says, so MISMATCH (accepted or not), and the
    diagnosis, looking beyond the recorded loss, names the swap."""
    bad = tmp_path / "bad.nnx.msgpack"
    with rnnconv.load(lossy) as (rnn,):
        assert rnn.origin is not None
        broken, mistake = swapped(rnn)
        registry.get("flax-nnx").write([dataclasses.replace(broken, source=rnn.origin)], bad, WriteOptions())
    report = verify(bad, VerifyOptions(accept_recorded_loss=True))
    assert report.verdict == "mismatch" and report.exit_code == 1, report.summary
    assert report.loss is not None and not report.loss.explained
    assert "loses more than its record says" in report.summary
    assert report.diagnosis is not None and all(phrase in report.diagnosis.message for phrase in mistake)


@pytest.mark.parametrize("ending", [".pt", ".keras"])
def test_a_patched_copy_records_the_source_of_what_was_written_into_it(ending, torch_sources, tmp_path):
    """`convert other.pt patched.pt --into first.pt`, where first.pt records its own source: the copy records
    other.pt for the RNN written into it (a stale record would make verify compare it with first.pt's source)."""
    first, patched, other = tmp_path / f"first{ending}", tmp_path / f"patched{ending}", tmp_path / "other.pt"
    rnnconv.convert(torch_sources[torch_name("LSTM", True, 1, False)], first)
    torch.manual_seed(1)
    torch.save(torch.nn.LSTM(INPUT, HIDDEN).state_dict(), other)
    rnnconv.convert(other, patched, into=first)
    report = verify(patched, VerifyOptions())
    assert report.verdict == "match" and report.source is not None and report.source.path == str(other), report.summary
