"""verify's report as JUnit XML, the test-report format CI systems show: one suite per run.

The suite holds one test case for the RNN as a whole (its verdict, structure problems
included) and one per compared output (the output sequence, h_n, and c_n for an LSTM);
a failure carries the largest error, the tolerance and the diagnosis. A verify that could
not run (exit 2 or 3) is one test case with an <error>; a structure check alone that was
accepted is skipped, since nothing was compared, and so is a checkpoint's RNN that the audit's pairs leave out; a
file that loses what its --allow-lossy record says is one case, failed unless --accept-recorded-loss accepted it; a
file written with --quantize has a case for each of its proof's three terms (weights, kernel, end to end).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rnnconv.core.report_contracts import Comparison, Report, Tolerance
from rnnconv.table.constants import DIRECTIONS
from rnnconv.verification.quantized import terms

OUTPUTS = {"y": "output sequence", "h_n": "final hidden state", "c_n": "final cell state"}
# What XML 1.0 cannot hold at all, escaping or not (control characters, lone surrogates): shown as \xNN.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """Text XML can hold: ElementTree escapes <, & and quotes, but writes control characters as they are."""
    return _NOT_XML.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


@dataclass
class Case:
    name: str
    outcome: str = ""  # "", "failure", "error" or "skipped"
    message: str = ""
    details: str = ""


def _tolerance_text(tol: Tolerance) -> str:
    return f"{tol.atol:g} + {tol.rtol:g}*|source|"


def _output_cases(rnn: str, comparison: Comparison, tol: Tolerance, diagnosis: str) -> list[Case]:
    cases = []
    for key, title in OUTPUTS.items():
        error = getattr(comparison, key)
        if error is None:
            continue
        case = Case(f"{rnn}: {key} ({title})")
        if key == "y":
            where = [f"{DIRECTIONS[d]}: max abs {v:.3g}" for d, v in enumerate(comparison.y_per_direction)]
        else:
            cells = getattr(comparison, f"{key}_per_layer_direction") or []
            where = [f"layer {e.layer} {e.direction}: max abs {e.max_abs:.3g}" for e in cells]
        if not error.match:
            case.outcome = "failure"
            case.message = f"largest error {error.max_abs:.3g} exceeds the tolerance {_tolerance_text(tol)}"
            case.details = "\n".join([case.message, *where, diagnosis])
        cases.append(case)
    return cases


def cases_of(report: Report) -> list[Case]:
    """The test cases of one verify run."""
    rnn = report.name or (report.source.layer if report.source else None) or Path(report.blob).name
    if report.verdict == "not-found":
        return [Case(rnn, "failure", report.summary, report.summary)]
    if report.verdict == "not-deployed":  # nothing of the deployed file is held against it: nothing passed or failed
        return [Case(rnn, "skipped", report.summary, report.summary)]
    if report.verdict in ("error", "backend-missing"):
        return [Case(rnn, "error", report.summary, report.summary)]
    if report.verdict == "structure-only":
        outcome = "skipped" if report.allow_structure_only else "error"
        return [Case(rnn, outcome, report.summary, report.summary)]
    overall = Case(rnn)
    if report.verdict == "lossy-as-recorded":  # the outputs differ from the source's by what was recorded: one case
        return [Case(rnn, "" if report.accept_recorded_loss else "failure", report.summary, report.summary)]
    if report.verdict == "mismatch":
        overall.outcome, overall.message = "failure", report.summary
        overall.details = "\n".join([report.summary, *report.problems])
    cases = [overall]
    proof = report.quantization
    if proof is not None:  # a file written with --quantize: its proof's three terms, a case each
        for title, term in terms(proof):
            case = Case(f"{rnn}: quantized {title}")
            if not term.ok:
                case.outcome = "failure"
                case.message = f"{term.measured:.3g} exceeds the bound {term.bound:.3g}"
                case.details = term.detail
            cases.append(case)
    if report.comparison is not None and report.tolerance is not None:
        diagnosis = report.diagnosis.message if report.diagnosis else ""
        cases += _output_cases(rnn, report.comparison, report.tolerance, diagnosis)
    return cases


def junit_xml(reports: Sequence[Report]) -> bytes:
    """Reports as a JUnit XML document (UTF-8): one test suite per verified RNN."""
    suites = [(report, cases_of(report)) for report in reports]
    every = [case for _, cases in suites for case in cases]
    root = ET.Element("testsuites", {"name": "rnnconv verify", **_counts(every, skipped=False)})
    for report, cases in suites:
        _suite(root, report, cases)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _counts(cases: list[Case], skipped: bool = True) -> dict[str, str]:
    """A suite's attributes (with `skipped`); the root's leave skipped cases out of its counts' names."""
    counts = {
        "tests": len(cases),
        "failures": sum(c.outcome == "failure" for c in cases),
        "errors": sum(c.outcome == "error" for c in cases),
    }
    if skipped:
        counts["skipped"] = sum(c.outcome == "skipped" for c in cases)
    return {key: str(value) for key, value in counts.items()}


def _suite(root: ET.Element, report: Report, cases: list[Case]) -> None:
    name = f"rnnconv verify {report.blob}" + (f" [{report.name}]" if report.name else "")
    suite = ET.SubElement(root, "testsuite", {"name": xml_text(name), **_counts(cases)})
    properties = ET.SubElement(suite, "properties")
    settings = {"verdict": report.verdict, "blob": report.blob}
    if report.backend:
        settings["backend"] = report.backend.detail
    if report.source:
        settings["source"] = report.source.path
    if report.tolerance:
        settings["tolerance"] = _tolerance_text(report.tolerance)
    if report.inputs:
        settings["seed"] = str(report.inputs.seed)
    settings.update({f"version.{k}": v for k, v in report.versions.items()})
    for key, value in settings.items():
        ET.SubElement(properties, "property", name=key, value=xml_text(value))
    for case in cases:
        element = ET.SubElement(suite, "testcase", name=xml_text(case.name), classname="rnnconv.verify")
        element.set("file", xml_text(report.blob))
        if case.outcome:
            outcome = ET.SubElement(element, case.outcome, message=xml_text(case.message))
            if case.outcome != "skipped":
                outcome.set("type", report.verdict)
                outcome.text = xml_text(case.details)
