"""verify as a CI step: per-step errors, JUnit XML, stage lines, the sparkline, the plot, the shell recipe."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, assert_clean_failure, run_cli
from rich.text import Text
from test_verify import CORRUPTIONS, TORCH, corrupted, every_cell, swap_gates, to_blob

from rnnconv.cli.render import sparkline
from rnnconv.core.report_contracts import Report
from rnnconv.verification.junit import cases_of, junit_xml
from rnnconv.verification.run import verify
from rnnconv.verification.subject import VerifyOptions

# fresh interpreters, many: CI runs them, `pytest -m "not slow"` leaves them out; the sources run in their frameworks
pytestmark = [pytest.mark.slow, pytest.mark.needs("torch", "keras", "tf_keras")]

DIAGNOSIS = "Gates c (cell candidate) and o (output gate) of layer 1 reverse look swapped"
NOT_A_TERMINAL = {"FORCE_COLOR": "", "TTY_COMPATIBLE": ""}  # whatever the environment running the tests says


def broken(tmp_path: Path) -> Path:
    """A blob of seq2seq's encoder (LSTM, 2 layers, bidirectional) with gates c and o swapped in layer 1 reverse."""
    source, layer, change, _ = CORRUPTIONS["two gates swapped in one cell"]
    good = to_blob(source, layer, tmp_path / "good.bin")
    return corrupted(good, tmp_path / "bad.bin", change)


def suite_of(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    for count, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        assert int(suite.get(count, "-1")) == len(suite.findall(f"testcase/{tag}")), count
    assert int(suite.get("tests", "-1")) == len(suite.findall("testcase"))
    return suite


# --- per-step errors ------------------------------------------------------------------------------


def test_per_step_errors_are_kept_per_direction(tmp_path):
    """Gates swapped in layer 1's reverse direction only: the forward half of the output stays exact."""
    report = verify(broken(tmp_path), VerifyOptions(backend="numpy", seq_len=6))
    comparison, tol = report.comparison, report.tolerance
    assert comparison is not None and tol is not None
    forward, reverse = comparison.y_per_direction_per_step
    assert len(forward) == len(reverse) == 6
    assert max(forward) <= tol.atol < min(reverse)
    assert comparison.y_per_step == [max(f, r) for f, r in zip(forward, reverse)]
    assert comparison.y_per_direction == [max(forward), max(reverse)]
    assert not comparison.y.match and not comparison.h_n.match


# --- JUnit XML ------------------------------------------------------------------------------------


def test_junit_of_a_match_and_of_a_corrupted_blob(tmp_path):
    good = to_blob(TORCH / "lstm_proj.pt", None, tmp_path / "x.bin")
    result = run_cli("verify", good, "--backend", "numpy", "--junit", tmp_path / "good.xml")
    assert result.returncode == 0, result.stderr
    suite = suite_of(tmp_path / "good.xml")
    rnn, *outputs = [case.get("name") for case in suite.iter("testcase")]
    assert outputs == [
        f"{rnn}: y (output sequence)",
        f"{rnn}: h_n (final hidden state)",
        f"{rnn}: c_n (final cell state)",  # an LSTM's
    ]
    assert suite.get("failures") == "0" and suite.get("errors") == "0"

    bad = broken(tmp_path)
    result = run_cli("verify", bad, "--junit", tmp_path / "bad.xml", "--report", tmp_path / "bad.json")
    assert result.returncode == 1, result.stderr
    suite = suite_of(tmp_path / "bad.xml")
    failures = suite.findall("testcase/failure")
    assert len(failures) == 4  # the RNN, y, h_n and c_n: all touch layer 1 reverse
    atol = json.loads((tmp_path / "bad.json").read_text())["tolerance"]["atol"]
    for failure in failures[1:]:
        assert f"exceeds the tolerance {atol:g} + " in failure.get("message", "")
        largest = float(failure.get("message", "").split()[2])
        assert largest > 100 * atol
        assert DIAGNOSIS in (failure.text or "")
        assert "layer 1 rev" in (failure.text or "") or "rev: max abs" in (failure.text or "")
    assert DIAGNOSIS in failures[0].get("message", "")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["verdict"] == "mismatch" and properties["seed"] == "0"


def test_junit_when_verify_cannot_run(tmp_path):
    """Exit 2 and exit 3 still give a JUnit file: one test case with an <error> saying why."""
    junit = tmp_path / "j.xml"
    assert_clean_failure(run_cli("verify", tmp_path / "gone.bin", "--junit", junit), 2, "does not exist")
    suite = suite_of(junit)
    (error,) = suite.findall("testcase/error")
    assert "does not exist" in error.get("message", "") and error.get("type") == "error"
    assert len(suite.findall("testcase")) == 1

    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    no_matplotlib = run_cli(
        "verify", blob, "--plot", tmp_path / "p.svg", "--junit", junit, "--force", env=hide(tmp_path, "matplotlib")
    )
    assert_clean_failure(no_matplotlib, 3, "pip install 'rnnconv[plot]'")
    (error,) = suite_of(junit).findall("testcase/error")
    assert error.get("type") == "backend-missing" and "matplotlib" in error.get("message", "")
    assert not (tmp_path / "p.svg").exists()


def test_junit_never_replaces_a_file_nor_an_input(tmp_path):
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    sidecar = tmp_path / "x.bin.json"
    before = sidecar.read_bytes()
    for target in (sidecar, blob):
        result = run_cli("verify", blob, "--junit", target, "--force")
        assert_clean_failure(result, 2, "never writes over it")
    assert sidecar.read_bytes() == before
    kept = tmp_path / "kept.xml"
    kept.write_text("<mine/>")
    assert_clean_failure(run_cli("verify", blob, "--junit", kept), 2, "already exists", "--force")
    assert kept.read_text() == "<mine/>"


def test_junit_escapes_what_xml_cannot_hold():
    summary = 'a <layer> & "name" with \x01 and \x1b[31m in it'
    report = Report(verdict="error", summary=summary, blob="odd\x00<name>.bin")
    root = ET.fromstring(junit_xml([report]))  # parses: nothing raw that XML forbids
    (error,) = root.iter("error")
    assert error.get("message") == 'a <layer> & "name" with \\x01 and \\x1b[31m in it'
    assert root.find("testsuite").get("name") == "rnnconv verify odd\\x00<name>.bin"


@pytest.mark.parametrize(("allowed", "outcome"), [(False, "error"), (True, "skipped")])
def test_a_structure_check_alone_is_never_a_passed_test(allowed, outcome):
    report = Report(
        verdict="structure-only", summary="no numerical comparison", blob="x.bin", allow_structure_only=allowed
    )
    assert [case.outcome for case in cases_of(report)] == [outcome]


# --- what the terminal shows --------------------------------------------------------------------


def test_stage_lines_on_a_terminal_only(tmp_path):
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    stages = ("reading the blob", "loading and running the source (PyTorch)", "running the blob (numpy)", "comparing")
    shown = run_cli("verify", blob, "--backend", "numpy", env={**NOT_A_TERMINAL, "TTY_COMPATIBLE": "1"})
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in Text.from_ansi(shown.stderr).plain.splitlines() if line.endswith("...")]
    assert lines == [f"{stage}..." for stage in stages]
    for flags, env in (([], NOT_A_TERMINAL), (["-q"], {"TTY_COMPATIBLE": "1"}), (["--json"], {"TTY_COMPATIBLE": "1"})):
        quiet = run_cli("verify", blob, "--backend", "numpy", *flags, env=env)
        assert quiet.returncode == 0 and "comparing" not in quiet.stderr, (flags, quiet.stderr)


def marks(errors: list[float], reference: float, unicode: bool = True) -> str:
    return Text.from_markup(sparkline(errors, reference, unicode)).plain


def test_sparkline_marks_decades_around_the_tolerance():
    tol = 1.5e-4
    assert marks([0, 1e-12, tol * 1e-3, tol * 0.002, tol * 0.5, tol, tol * 1.01, tol * 50, tol * 5e3], tol) == (
        "▁▁▁▂▄▄▅▆█"
    )
    assert marks([math.nan, tol * 0.5], tol) == "█▄"  # NaN is the worst, wherever it is
    assert marks([tol * 0.5, math.nan], tol) == "▄█"
    assert marks([0, tol * 0.5, tol * 1.01, tol * 5e3], tol, unicode=False) == "_-=#"
    for error in (tol * 0.999, tol * 1.001, tol * 0.0999, tol * 9.99):
        within = marks([error], tol) in "▁▂▃▄"
        assert within == (error <= tol), error  # the fourth mark is the tolerance's edge
    long = [0.0] * 200
    long[101] = 1.0
    line = marks(long, tol)
    assert len(line) == 50 and line.index("█") == 101 // 4  # 200 steps, 4 to a mark: the largest of each group


def test_sparklines_in_verify_output_fall_back_to_ascii(tmp_path):
    bad = broken(tmp_path)
    unicode = run_cli("verify", bad, "--backend", "numpy", "--no-diagnose", env={"PYTHONIOENCODING": "utf-8"})
    assert unicode.returncode == 1
    rows = {line.split("│")[1].strip(): line for line in unicode.stdout.splitlines() if line.startswith("│")}
    assert "▁▁▁▁▁▁▁▁" in rows["y, layer 1 fwd"] and "████████" in rows["y, layer 1 rev"]
    ascii_only = run_cli("verify", bad, "--backend", "numpy", "--no-diagnose", env={"PYTHONIOENCODING": "ascii"})
    assert ascii_only.returncode == 1
    assert "per step ________" in ascii_only.stdout and "per step ########" in ascii_only.stdout
    assert "\\u" not in ascii_only.stdout  # no escaped block characters
    assert "_.:- within the tolerance" in ascii_only.stdout


# --- the plot -------------------------------------------------------------------------------------


def hide(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which importing each of `modules` fails, as where its extra is not installed."""
    shadow = tmp_path / "hidden_modules"
    shadow.mkdir(exist_ok=True)
    for module in modules:
        (shadow / f"{module}.py").write_text(f"raise ImportError('No module named {module}')\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}


def test_a_keras_3_file_without_any_keras_names_what_to_install_not_a_keras_2_source(tmp_path):
    """Found on the GPU machine (no TensorFlow): a .keras file's verify said "this Keras 2 source needs tf_keras"."""
    blob = to_blob(ROOT / "fixtures" / "keras3" / "lstm.keras", None, tmp_path / "k.bin")
    result = run_cli("verify", blob, "--backend", "numpy", env=hide(tmp_path, "keras", "tf_keras", "tensorflow"))
    assert_clean_failure(
        result, 3, "needs Keras 3 or tf-keras, and neither is installed", "pip install 'rnnconv[keras]'"
    )
    assert "Keras 2 source" not in result.stderr


def test_plot_of_a_corrupted_blob(tmp_path):
    pytest.importorskip("matplotlib")
    bad = broken(tmp_path)
    result = run_cli("verify", bad, "--plot", tmp_path / "errors.svg", "--no-diagnose")
    assert result.returncode == 1, result.stderr
    svg = (tmp_path / "errors.svg").read_text()
    for label in ("output, layer 1 fwd", "output, layer 1 rev", "final h, layer 0 fwd", "tolerance at |x| = 1"):
        assert f"<!-- {label}" in svg, label  # matplotlib names each text it draws in a comment
    assert "<!-- encoder.rnn: mismatch -->" in svg
    result = run_cli("verify", bad, "--plot", tmp_path / "errors.png", "--no-diagnose")
    assert result.returncode == 1 and (tmp_path / "errors.png").read_bytes().startswith(b"\x89PNG")


def test_plot_refusals(tmp_path):
    blob = to_blob(TORCH / "rnn_tanh.pt", None, tmp_path / "x.bin")
    assert_clean_failure(run_cli("verify", blob, "--plot", tmp_path / "p.jpg"), 2, "a .svg or .png picture")
    result = run_cli("verify", blob, "--plot", tmp_path / "p.png", env=hide(tmp_path, "matplotlib"))
    assert_clean_failure(result, 3, "--plot needs matplotlib", "pip install 'rnnconv[plot]'")
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "p.png").exists()


def test_no_plot_when_nothing_was_compared(tmp_path):
    pytest.importorskip("matplotlib")
    source = tmp_path / "model.pt"
    shutil.copy(TORCH / "rnn_tanh.pt", source)
    blob = to_blob(source, None, tmp_path / "x.bin")
    source.unlink()  # a structure check alone: no error per step to draw
    picture = tmp_path / "p.svg"
    result = run_cli("verify", blob, "--plot", picture, "--allow-structure-only", "--report", tmp_path / "r.json")
    assert result.returncode == 0 and "STRUCTURE-ONLY" in result.stdout, result.stderr
    assert f"{picture} was not drawn" in " ".join(result.stderr.split()) and not picture.exists()
    assert any("was not drawn" in w for w in json.loads((tmp_path / "r.json").read_text())["warnings"])


# --- the CI recipe --------------------------------------------------------------------------------

RECIPE = ROOT / "docs" / "ci" / "verify-model.sh"


def run_recipe(cwd: Path, *args: str | Path, **env: str) -> subprocess.CompletedProcess:
    """docs/ci/verify-model.sh as a CI job runs it, with this interpreter's rnnconv."""
    return subprocess.run(
        ["bash", str(RECIPE), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "RNNCONV": f"{sys.executable} -m rnnconv", **env},
        timeout=300,
    )


def test_the_ci_recipe_converts_verifies_and_keeps_the_exit_code(tmp_path):
    source = TORCH / "seq2seq.pt"
    first = run_recipe(tmp_path, source, "build/encoder.bin", "verify-out", RNNCONV_LAYER="encoder.rnn")
    assert first.returncode == 0, first.stderr
    assert "exit 0, the blob computes what its source computes" in first.stderr
    report = json.loads((tmp_path / "verify-out" / "verify-report.json").read_text())
    assert report["verdict"] == "match" and report["name"] == "encoder.rnn"
    assert suite_of(tmp_path / "verify-out" / "verify-junit.xml").get("failures") == "0"

    blob = tmp_path / "build" / "encoder.bin"
    corrupted(blob, tmp_path / "bad.bin", swap_gates("i", "f", every_cell))
    second = run_recipe(tmp_path, source, "bad.bin", "verify-out", RNNCONV_CONVERT="no")
    assert second.returncode == 1, second.stderr
    assert "exit 1, MISMATCH" in second.stderr
    report = json.loads((tmp_path / "verify-out" / "verify-report.json").read_text())
    assert report["verdict"] == "mismatch"
    failures = suite_of(tmp_path / "verify-out" / "verify-junit.xml").findall("testcase/failure")
    assert failures and all("gates i (input gate) and f (forget gate) look swapped" in f.text.lower() for f in failures)

    missing = run_recipe(tmp_path, tmp_path / "nothing.pt", "x.bin", "verify-out")
    assert missing.returncode == 2 and "converting" in missing.stderr and "nothing was verified" in missing.stderr


def test_a_conversion_that_fails_in_the_recipe_still_leaves_a_report_and_junit(tmp_path):
    """seq2seq.pt holds two RNNs and no layer is named: the conversion fails, and the CI step still has a report
    (verdict error, the conversion's sentence) and a JUnit file with an <error> to keep."""
    result = run_recipe(tmp_path, TORCH / "seq2seq.pt", "build/model.bin", "verify-out")
    assert result.returncode == 2, result.stderr
    assert "holds 2 RNNs" in result.stderr and "nothing was verified" in result.stderr
    report = json.loads((tmp_path / "verify-out" / "verify-report.json").read_text())
    assert report["verdict"] == "error" and "holds 2 RNNs" in report["summary"]
    assert report["summary"].startswith("converting ")
    suite = suite_of(tmp_path / "verify-out" / "verify-junit.xml")
    (error,) = suite.findall("testcase/error")
    assert "holds 2 RNNs" in (error.get("message") or "") + (error.text or "")
    assert not (tmp_path / "build" / "model.bin").exists()


def test_verify_convert_makes_the_blob_then_verifies_it(tmp_path):
    blob = tmp_path / "enc.bin"
    args = ("verify", blob, "--against", TORCH / "seq2seq.pt", "--convert", "--layer", "encoder.rnn")
    result = run_cli(*args, "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "match" and blob.exists()
    assert_clean_failure(run_cli(*args), 2, "already exists", "--force")  # a blob is never replaced silently
    assert run_cli(*args, "--force").returncode == 0
    assert_clean_failure(run_cli("verify", blob, "--convert"), 2, "--convert", "--against")


@pytest.mark.parametrize(
    ("name", "step"),
    [("github-actions.yml", "uses: OWNER/rnnconv@REF"), ("gitlab-ci.yml", "bash docs/ci/verify-model.sh")],
)
def test_the_ci_jobs_run_the_recipe_and_keep_its_files(name, step):
    """GitHub's job runs rnnconv's action, GitLab's the recipe (tests/test_ci_templates.py runs both)."""
    job = (ROOT / "docs" / "ci" / name).read_text()
    assert step in job
    assert "verify-out/verify-junit.xml" in job and "verify-out/" in job
    assert "always" in job  # the files are kept above all when verify failed
