"""verify's reports as a markdown summary (`--summary FILE`): what a CI job shows on its page (GitHub's step summary,
a merge request's note), one row per RNN: its verdict, its largest difference against the tolerance, and the
diagnosis or the reason.

The names and sentences in it come from the files verified, which are untrusted: every ASCII punctuation mark is
escaped (CommonMark shows an escaped one as it is), so that no name makes a link, an image, HTML or a table cell of
its own.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rnnconv.core.report_contracts import WHOLE_MODEL, Report, Reports
from rnnconv.errors import cut

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_NOT_TEXT = re.compile(r"[\x00-\x1f\x7f]+")
HOLDING = ("match", "within-bound")  # the verdicts of an RNN that computes what its source does (exit 0)
MARKS = {
    "match": "✅",
    "within-bound": "✅",
    "not-deployed": "➖",
    "structure-only": "⚠️",
    "lossy-as-recorded": "⚠️",
}  # else ❌


def text(value: str, limit: int = 300) -> str:
    """Untrusted text as markdown shows it, literally and on one line."""
    return _PUNCTUATION.sub(r"\\\1", _NOT_TEXT.sub(" ", cut(value, limit)))


def overall(reports: Sequence[Report]) -> tuple[str, str]:
    """The verdict of several reports (the worst: the highest exit code; MATCH where every RNN held against another
    matches) and the sentence that counts them: how many match, what the others are."""
    everything_held = [r for r in reports if r.verdict != "not-deployed"]
    worst = max(everything_held, key=lambda r: (r.exit_code, r.verdict != "match"), default=None)
    verdict = "match" if worst is None else worst.verdict
    models = [r for r in everything_held if r.name == WHOLE_MODEL]  # counted apart: a whole model is no RNN
    held = [r for r in everything_held if r.name != WHOLE_MODEL]
    one = len(held) == 1
    matched = sum(r.verdict in HOLDING for r in held)
    counted = f"{matched} of {len(held)} RNN{'' if one else 's'} match{'es' if one else ''}"
    bounded = sum(r.verdict == "within-bound" for r in held)
    if bounded:
        counted += f" ({bounded} within {'its' if one else 'their'} quantization's bound)"
    others = Counter(r.verdict for r in held if r.verdict not in HOLDING)
    if others:
        counted += "; " + ", ".join(f"{count} {name}" for name, count in others.items())
    for model in models:
        counted += f"; the whole model {'matches' if model.verdict in HOLDING else model.verdict}"
    absent = len(reports) - len(everything_held)
    if absent:
        counted += f"; {absent} of the checkpoint's RNNs not deployed"
    return verdict, counted


def _rnn(report: Report, several_files: bool) -> str:
    theirs = report.source.layer if report.source else None
    name = text(report.name) or "\\-"
    paired = name if theirs is None or theirs == report.name else f"{name} \\= {text(theirs)}"
    return f"{text(Path(report.blob).name)}: {paired}" if several_files else paired


def _difference(report: Report) -> str:
    comparison, tol = report.comparison, report.tolerance
    if comparison is None or tol is None:
        return "\\-"
    return f"{comparison.worst:.3g} \\(tolerance {tol.atol:g} \\+ {tol.rtol:g}·\\|x\\|\\)"


def _why(report: Report) -> str:
    if report.verdict == "match":
        return text("note: " + "; ".join(report.warnings)) if report.warnings else ""
    if report.diagnosis is not None and report.verdict == "mismatch":
        return text(report.diagnosis.message)
    return text(report.summary)


def markdown(reports: Sequence[Report], title: str = "rnnconv verify") -> str:
    """The reports as a markdown section: a heading with the verdict and its exit code, the count, and the table."""
    verdict, counted = overall(reports)
    code = max((r.exit_code for r in reports), default=0)
    several_files = len({r.blob for r in reports}) > 1
    files = sorted({Path(r.blob).name for r in reports})
    sources = sorted({Path(r.source.path).name for r in reports if r.source and r.source.path})
    against = f" against {text(', '.join(sources))}" if sources else ""
    lines = [
        f"### {MARKS.get(verdict, '❌')} {text(title)}: {verdict.upper()} \\(exit {code}\\)",
        "",
        f"{text(', '.join(files))}{against}: {text(counted)}",
        "",
        "| RNN | verdict | largest difference | diagnosis |",
        "| --- | --- | --- | --- |",
    ]
    for report in reports:
        mark = MARKS.get(report.verdict, "❌")
        verdict_cell = f"{mark} {report.verdict.upper()}"
        lines.append(f"| {_rnn(report, several_files)} | {verdict_cell} | {_difference(report)} | {_why(report)} |")
    return "\n".join(lines) + "\n"


def verdict_in(report: str | Path) -> str:
    """The verdict of a report file verify wrote (`--report`: one report, or a list of them): what a CI step gives
    as its output."""
    document = json.loads(Path(report).read_text(encoding="utf-8"))
    if isinstance(document, list):
        return overall(Reports.model_validate(document).root)[0]
    return Report.model_validate(document).verdict
