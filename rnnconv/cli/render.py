"""How the command line shows results: the library's typed results, as terminal text or JSON.

Results go to stdout, notes, warnings and errors to stderr; `--json` prints the
result document itself; `quiet` keeps only warnings and errors; `verbose` adds
where things came from. Messages are never wrapped (`soft_wrap`): a path in a
log stays on one line. rich is imported when something is printed: a command that
prints nothing (-q, --json, no progress bar) does not import it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

from rnnconv.cli import streams
from rnnconv.core.canonical import RNNSpec
from rnnconv.core.contracts import ConversionResult, ErrorDocument, InspectReport, RNNSizes, SpecModel, dump
from rnnconv.core.record import Record
from rnnconv.errors import EXIT_INTERNAL, BadInput, cut, failure, sentence
from rnnconv.safeio.outputs import remove_live_temps
from rnnconv.table.constants import DIRECTIONS, LSTM

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console
    from rich.table import Table

    from rnnconv.core.report_contracts import (
        BatchItem,
        BatchResults,
        Comparison,
        Identification,
        Report,
        Reports,
        Tolerance,
    )


def _console(file: IO[str] | None = None) -> Console:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """A closed pipe (`| head -1`) ends the output, not the command (rich would exit with 1)."""
            self.quiet = True
            streams.silence(1)  # nothing more is shown, and nothing fails at exit either

    return _Console(file=file, highlight=False, soft_wrap=True, emoji=False)  # ":smile:" in a name is printed as it is


@functools.cache
def out() -> Console:
    """Results (stdout), made when first printed to."""
    return _console()


@functools.cache
def err() -> Console:
    """Messages (stderr): on a stderr that cannot take them (full, closed early) they are given up, and the exit
    code stays."""
    return _console(cast(IO[str], streams.Tolerant("stderr", 2)))


# rich's markup, as rich.markup parses and escapes it (rich 13-15): a tag is `[` then a letter, #, / or @, up to the
# first `]` with no `[` before it; each backslash before one is doubled to show it and one more escapes the tag.
MARKUP_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
ESCAPED_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")
RICH_STRIPS = dict.fromkeys((7, 8, 11, 12, 13))  # the control codes rich's Text leaves out (rich.control)


def escape(text: str) -> str:
    """`text` shown as it is (rich's markup in it escaped, as rich.markup.escape does)."""
    text = ESCAPED_TAG.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    return text + "\\" if text.endswith("\\") and not text.endswith("\\\\") else text


def plain(markup: str) -> str | None:
    """The text rich prints of a line of markup where it prints no styles (rich.markup.render): its tags left out,
    each escaped one and each pair of backslashes before one shown as one, `\\[` elsewhere as `[`, the control codes
    rich leaves out left out; None where it holds a tab (which rich expands to its columns, measured in cells)."""
    if "\t" in markup:
        return None
    if "[" not in markup:
        return markup.translate(RICH_STRIPS)
    parts, position = [], 0
    for match in MARKUP_TAG.finditer(markup):
        start, end = match.span()
        parts.append(markup[position:start].replace("\\[", "["))
        backslashes, escaped = divmod(len(match.group(2)), 2)
        parts.append("\\" * backslashes)
        if escaped:
            parts.append(match.group(1)[len(match.group(2)) :].replace("\\[", "["))
        position = end
    parts.append(markup[position:].replace("\\[", "["))
    return "".join(parts).translate(RICH_STRIPS)


def say(markup: str, stderr: bool = False) -> None:
    """One line of markup on stdout (or stderr): where the stream is no terminal, the text rich would print of it
    written as it is, so that a conversion's few lines do not import rich (14 ms); else rich prints it."""
    text = None if styled(stderr) else plain(markup)
    if text is None:
        (err() if stderr else out()).print(markup)
    elif stderr:
        streams.Tolerant("stderr", 2).write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


def styled(stderr: bool) -> bool:
    """Whether rich would style stdout (or stderr), taking it for a terminal (rich's Console.is_terminal, without
    making one): TTY_COMPATIBLE=1 or FORCE_COLOR set, else not with TTY_COMPATIBLE=0, else where it is a tty."""
    environ = os.environ
    if environ.get("TTY_COMPATIBLE") in ("0", "1"):
        return environ["TTY_COMPATIBLE"] == "1"
    if "FORCE_COLOR" in environ:
        return environ["FORCE_COLOR"] != ""
    try:
        return (sys.stderr if stderr else sys.stdout).isatty()
    except (AttributeError, ValueError):  # closed, or no file
        return False


Shown = TypeVar("Shown", bound=Callable[..., "int | None"])


def _table(**options: Any) -> Table:
    """A rich table; rich's table module is imported only by the commands that print one (not a conversion)."""
    from rich.table import Table

    return Table(**options)


VERDICT_COLOURS = {
    "match": "green",
    "within-bound": "green",
    "structure-only": "yellow",
    "lossy-as-recorded": "yellow",
    "not-deployed": "yellow",
}  # else red


def shown(function: Shown) -> Shown:
    """A result printer for which a closed pipe (`| head -1`) is no error: what is left is not shown."""

    @functools.wraps(function)
    def show(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            return result
        except BrokenPipeError:
            streams.silence(1)
        except (OSError, ValueError) as exc:  # a full device, an I/O error: the result did not reach the user
            streams.silence(1)
            raise BadInput(f"cannot write to stdout: {streams.reason(exc)}") from None

    return show  # type: ignore[return-value]


@shown
def print_json(document: Record | BaseModel | dict[str, Any]) -> None:
    data = document if isinstance(document, dict) else dump(document)
    print(json.dumps(data, indent=1))


def note(text: str) -> None:
    say(f"[dim]note:[/] {escape(sentence(text))}", stderr=True)


def warning(text: str) -> None:
    say(f"[yellow]warning:[/] {escape(sentence(text))}", stderr=True)


def spec_text(spec: SpecModel | None) -> str:
    """An RNN's mode and sizes; a GRU whose reset gate is applied before the recurrent product says so."""
    if spec is None:
        return "-"
    return f"{spec.mode}{' (reset before)' if spec.reset_after is False else ''} {sizes_text(spec)}"


def sizes_text(sizes: SpecModel | RNNSizes | None) -> str:
    """An RNN's sizes: a spec's without its mode, or those of an RNN that does not convert (which has none)."""
    if sizes is None:
        return "-"
    text = f"in {sizes.input_size} hidden {sizes.hidden_size}"
    if sizes.proj_size:
        text += f" proj {sizes.proj_size}"
    if sizes.num_layers > 1:
        text += f" x{sizes.num_layers} layers"
    return text + (" bidirectional" if sizes.bidirectional else "") + (f" {sizes.dtype}" if sizes.dtype else "")


@shown
def identification(result: Identification, as_json: bool, quiet: bool, verbose: bool) -> None:
    if as_json:
        print_json(result)
        return
    listed = result.candidates if verbose or result.verdict != "identified" else []
    if listed and not quiet:
        out().print("candidates (ids for --candidate):")
    for c in listed if not quiet else []:
        error = (
            ""
            if c.reproduces is None
            else f"  error {c.max_abs_error:.3g}"
            if c.max_abs_error is not None
            else "  error nan"
        )
        mark = " (reproduces the probe)" if c.reproduces else ""
        bias = "no biases" if c.bias == "none" else f"{c.bias} biases"
        out().print(
            f"  {c.id}: {escape(', '.join(c.rows))}; gates {','.join(c.gate_order)}, {c.matrix} matrices, {bias}"
            f"{error}{mark}"
        )
    out().print(f"{result.verdict}: {escape(sentence(result.summary))}")
    if result.convert and not quiet:
        out().print(f"convert with: {escape(result.convert)}")
    for path in result.outputs:
        note(f"wrote {path}")


@shown
def conversion(result: ConversionResult, as_json: bool, quiet: bool, verbose: bool) -> None:
    for skipped in result.skipped:
        say(f"[yellow]skipped[/] {escape(sentence(f'{cut(skipped.name)}: {skipped.reason}'))}", stderr=True)
    for text in result.warnings:
        warning(text)
    if as_json:
        print_json(result)
        return
    if quiet:
        return
    for rnn in result.rnns:
        for text in rnn.notes:
            note(text)
        described = RNNSpec.from_model(rnn.spec.model_copy(update={"dtype": result.dtype})).describe()
        say(f"{escape(cut(rnn.name))}: {escape(described)}")
        if verbose and rnn.source.path:
            source = rnn.source
            where = ", ".join(
                f"{k} {v}"
                for k, v in (
                    ("kind", source.format),
                    ("layer", source.layer),
                    ("digest", source.digest or source.sha256),
                )
                if v
            )
            say(f"  from {escape(source.path or '')} ({escape(where)})")
    say("wrote " + ", ".join(escape(p) for p in result.outputs))
    if result.usage:
        say(escape(result.usage))


def batch_entry(item: BatchItem, quiet: bool) -> None:
    """One source of a batch as it finishes: its failure in one line, or what its conversion had to say."""
    name = escape(item.source)
    if item.result is None:
        err().print(
            f"[bold red]{failure_label(item.exit_code)}:[/] {name} (exit {item.exit_code}): "
            f"{escape(sentence(item.error or ''))}"
        )
        return
    for skipped in item.result.skipped:
        err().print(f"[yellow]skipped[/] {name}: {escape(sentence(f'{cut(skipped.name)}: {skipped.reason}'))}")
    for text in item.result.warnings:
        warning(f"{item.source}: {text}")
    if not quiet:
        for text in (n for rnn in item.result.rnns for n in rnn.notes):
            note(f"{item.source}: {text}")


@shown
def batch(results: BatchResults, as_json: bool, quiet: bool) -> None:
    """A batch's table (source, RNNs, output, result), or its list of entries as JSON."""
    if as_json:
        print_json(results)
        return
    if quiet:
        return
    folders = {str(Path(item.output).parent) for item in results.root}
    folder = folders.pop() if len(folders) == 1 else None  # said once, above the rows
    rows = []
    for item in results.root:
        rnns = ", ".join(rnn.name for rnn in item.result.rnns) if item.result else "-"
        result = "done" if item.exit_code == 0 else f"{failure_label(item.exit_code)} (exit {item.exit_code})"
        # the file's name is enough: a batch whose sources share a name is refused before it starts
        rows.append((Path(item.source).name, rnns, Path(item.output).name if folder else item.output, result))
    if folder:
        out().print(f"into {escape(folder)}{os.sep}")
    headers = ("file", "RNNs", "output", "result")
    widths = [max(len(word) for row in [headers, *rows] for word in row[i].split()) for i in range(len(headers))]
    if sum(widths) + 3 * len(widths) + 1 <= out().width:  # a table whose cells never break a word
        table = _table()
        for column in headers:
            table.add_column(column)
        for row in rows:
            colour = "green" if row[3] == "done" else "red"
            table.add_row(*map(escape, row[:3]), f"[{colour}]{escape(row[3])}[/]")
        out().print(table)
    else:  # too narrow for one: a line each, names whole
        for file, rnns, output, result in rows:
            out().print(f"{escape(file)}: {escape(rnns)} -> {escape(output)}: {escape(result)}")
    done = sum(item.exit_code == 0 for item in results.root)
    out().print(f"converted {done} of {len(results.root)}")


def _paired(report: Report) -> str:
    """An RNN as a row names it: its name, and the source RNN it was held against where that is named otherwise (the
    audit of a deployed model pairs them: DEPLOYED = CHECKPOINT; a checkpoint's RNN with no partner: - = NAME)."""
    theirs = report.source.layer if report.source else None
    if theirs is None or theirs == report.name:
        return cut(report.name)
    return f"{cut(report.name) or '-'} = {cut(theirs)}"


@shown
def verifications(reports: Reports, as_json: bool, quiet: bool) -> None:
    """`verify --all` and the audit: one row per RNN (name, spec, verdict, summary), or the reports as JSON; then
    the verdict of them all."""
    for report in reports.root:
        for text in report.warnings:
            warning(f"{report.name}: {text}")
    if as_json:
        print_json(reports)
        return
    rows = []
    several_files = len({report.blob for report in reports.root}) > 1  # verify-changed: each RNN named with its file
    for report in reports.root:
        colour = VERDICT_COLOURS.get(report.verdict, "red")
        verdict = f"[bold {colour}]{report.verdict.upper()}[/] (exit {report.exit_code})"
        name = f"{cut(report.blob)} {_paired(report)}" if several_files else _paired(report)
        rows.append((escape(name), spec_text(report.spec), verdict, escape(sentence(report.summary))))
    table = _table(show_header=True)
    for column in ("RNN", "spec", "verdict", "summary"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    from rich.measure import Measurement

    if quiet:  # -q keeps the verdicts: one line each
        for name, _, verdict, summary in rows:
            out().print(f"{name}: {verdict}: {summary}")
    elif Measurement.get(out(), out().options.update_width(streams.MAX_COLUMNS), table).maximum <= out().width:
        out().print(table)
    else:  # a table too narrow for its summaries (a CI log's 80 columns) would wrap each to a dozen lines
        for name, spec, verdict, summary in rows:
            out().print(f"{name}: {verdict}, {spec}\n  {summary}")
    out().print(overall(reports))


def changed(reports: Reports, given: int, as_json: bool, quiet: bool) -> int:
    """`verify-changed`: the rows of what was verified, or that nothing was; the exit code, the worst (0: none)."""
    if not reports.root and not as_json:
        files = f"none of the {given} files given is" if given > 1 else "the file given is not"
        out().print(f"nothing to verify: {files} one rnnconv wrote, and git tracks none made from one")
        return 0
    verifications(reports, as_json, quiet)
    return max((report.exit_code for report in reports.root), default=0)


def overall(reports: Reports) -> str:
    """The verdict of several reports, as the last line says it: the worst, and the count (`summary.overall`)."""
    from rnnconv.verification.summary import overall as verdict_of

    verdict, counted = verdict_of(reports.root)
    return f"[bold {VERDICT_COLOURS.get(verdict, 'red')}]{verdict.upper()}[/]: {escape(counted)}"


@shown
def inspection(report: InspectReport, json: bool, quiet: bool, verbose: bool) -> int:
    """Shows the report; its exit code: 1 where --profile found a limit broken."""
    code = 1 if report.broken_limits else 0
    if json:
        print_json(report)
        return code
    if quiet:
        return code
    versions = "".join(f", {k} {v}" for k, v in report.versions.items())
    title = f"{escape(report.path)} ({report.format}{escape(versions)})"
    table = _table(title=title)
    # a name is what --layer takes: never wrapped (a file's name too long to type, cut); where the longest does not
    # fit, one RNN a line
    names = [cut(rnn.name) for rnn in report.rnns]
    table.add_column("name", no_wrap=True, min_width=max(map(len, names), default=4))
    converts = "converts" if report.target is None else f"converts to {report.target}"
    for column in ("class", "cuDNN spec", converts):
        table.add_column(column, overflow="fold")
    rows = []
    for rnn, name in zip(report.rnns, names):
        verdict = "[green]yes[/]" if rnn.converts else "[red]no[/], see below"
        spec = spec_text(rnn.spec) if rnn.spec else sizes_text(rnn.sizes)
        rows.append((escape(name), escape(cut(rnn.layer_class)), spec, verdict))
        table.add_row(*rows[-1])
    from rich.measure import Measurement

    if Measurement.get(out(), out().options.update_width(streams.MAX_COLUMNS), table).minimum <= out().width:
        out().print(table)
    else:
        out().print(title)
        for name, layer_class, spec, verdict in rows:
            out().print(f"{name}\n  {layer_class}; {spec}; {converts}: {verdict}")
    if not report.rnns:
        out().print("no recurrent layers found")
    for rnn, name in zip(report.rnns, names):
        if not rnn.converts:
            does_not = "does not convert" if report.target is None else f"does not convert to {report.target}"
            out().print(f"[red]{escape(name)} {does_not}:[/] {escape(sentence(rnn.reason or ''))}")
        if verbose and rnn.source and rnn.source.path:
            out().print(f"{escape(name)} was made from {escape(cut(rnn.source.path, 300))} ({rnn.source.format})")
    for text in report.notes + [n for r in report.rnns for n in r.notes]:
        note(text)
    if report.profile is not None:
        kept = f"[green]keeps {report.profile}'s documented limits[/]"
        out().print(f"{escape(report.path)} {kept}" if not report.broken_limits else f"{report.profile} would refuse:")
        for line in report.broken_limits:
            out().print(f"  {escape(line)}")
    return code


# One mark per time step, one decade of error each: the first four within the tolerance at |x| = 1, the rest beyond.
SPARK_MARKS = ("▁▂▃▄▅▆▇█", "_.:-=+*#")  # Unicode, and ASCII for a terminal that cannot show it
SPARK_WIDTH = 64  # marks at most: a longer sequence shows the largest error of each group of steps


def sparkline(errors: list[float], reference: float, unicode: bool) -> str:
    """Errors as marks, one decade each around `reference`: ▄ within it (down to a tenth), ▅ up to ten times it."""
    marks = SPARK_MARKS[0 if unicode else 1]
    group = -(-len(errors) // SPARK_WIDTH)
    text = ""
    for start in range(0, len(errors), group):
        chunk = errors[start : start + group]
        error = math.inf if any(map(math.isnan, chunk)) else max(chunk)
        if error > reference * 1e3:
            level = 7
        elif error <= reference * 1e-3:
            level = 0
        else:
            level = math.ceil(math.log10(error / reference)) + 3
        colour = "red" if level > 3 else "green"
        text += f"[{colour}]{marks[level]}[/]"
    return text


def _can_show(console: Console, text: str) -> bool:
    try:
        text.encode(console.encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _per_step(comparison: Comparison, tol: Tolerance, layers: int) -> tuple[list[tuple[str, str]], str]:
    """Table rows of each output direction's errors step by step (the last layer's: the only one seen step by
    step), and the line that says how to read them."""
    unicode = _can_show(out(), SPARK_MARKS[0])
    rows = [
        (
            f"y, layer {layers - 1} {DIRECTIONS[d]}",
            f"max abs {max(errors):.3g}, per step {sparkline(errors, tol.at_unit, unicode)}",
        )
        for d, errors in enumerate(comparison.y_per_direction_per_step)
    ]
    marks = SPARK_MARKS[0 if unicode else 1]
    group = -(-len(comparison.y_per_step) // SPARK_WIDTH)
    each = f", each the largest of {group} steps" if group > 1 else ""
    legend = (
        f"  per step: {marks[:4]} within the tolerance at |x| = 1 ({tol.at_unit:.2g}), {marks[4:]} beyond; "
        f"a decade a mark{each}"
    )
    return rows, legend


@shown
def verification(report: Report, as_json: bool, quiet: bool, verbose: bool) -> None:
    for text in report.warnings:
        warning(text)
    if as_json:
        print_json(report)
        return
    colour = VERDICT_COLOURS.get(report.verdict, "red")
    verdict = f"[bold {colour}]{report.verdict.upper()}[/]: {escape(sentence(report.summary))}"
    if quiet:
        out().print(verdict)
        return
    out().print(f"[bold]verify[/] {escape(report.blob)}: {escape(cut(report.name))}, {spec_text(report.spec)}")
    if report.source and report.backend:
        source = report.source
        out().print(
            f"  source:  {escape(source.path)} ({source.format}"
            f"{'' if source.layer is None else ', ' + escape(cut(source.layer))}), run by {escape(source.run)}"
        )
        out().print(f"  backend: {escape(report.backend.detail)}")
    if report.inputs:
        inputs = report.inputs
        seeded = inputs.x_distribution == type(inputs).model_fields["x_distribution"].default  # else a probe's own
        states = "non-zero h0 and c0" if report.spec and report.spec.mode == LSTM else "non-zero h0"
        out().print(
            f"  inputs:  {f'seed {inputs.seed}' if seeded else inputs.x_distribution}, {inputs.seq_len} steps, "
            f"batch {inputs.batch}"
            + (f", lengths {inputs.lengths}" if inputs.lengths else "")
            + f", {states if seeded else inputs.state_distribution}"
        )
    table = _table(show_header=True)
    for column in ("check", "result", "ok"):
        table.add_column(column)
    for check in report.checks:
        table.add_row(check.check, escape(check.detail), "[green]yes[/]" if check.ok else "[red]no[/]")
    comparison, tol = report.comparison, report.tolerance
    legend = ""
    if comparison and tol:
        for name, error in (("y", comparison.y), ("h_n", comparison.h_n), ("c_n", comparison.c_n)):
            if error is not None:
                table.add_row(f"{name} vs source", f"max abs {error.max_abs:.3g}, max rel {error.max_rel:.3g}", "")
        rows, legend = _per_step(comparison, tol, report.spec.num_layers if report.spec else 1)
        for label, text in rows:
            table.add_row(label, text, "")
        for item in comparison.h_n_per_layer_direction:
            table.add_row(f"h_n layer {item.layer} {item.direction}", f"max abs {item.max_abs:.3g}", "")
        if verbose:
            for step, value in enumerate(comparison.y_per_step):
                table.add_row(f"y, step {step}", f"max abs {value:.3g}", "")
        table.add_row(
            "tolerance",
            f"{tol.atol:g} + {tol.rtol:g} x |source|",
            "[green]yes[/]" if comparison.match else "[red]no[/]",
        )
    out().print(table)
    if legend:
        out().print(legend)
    for finding in (report.layout_findings or [])[: None if verbose else 5]:
        out().print(f"  layout: {escape(json.dumps(dump(finding)))}")
    if report.relayout:
        out().print(f"  wrote the blob in cuDNN's layout to {escape(report.relayout)}")
    if verbose:
        out().print("  versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items()))
    out().print(verdict)


@shown
def doctor(report: dict[str, Any], as_json: bool, quiet: bool, verbose: bool) -> None:
    if as_json:
        print_json(report)
        return
    if quiet:
        return
    out().print(f"rnnconv {report['rnnconv']} on Python {report['python']}")
    table = _table(title="what verify can use here")
    for column in ("part", "available", "detail"):
        table.add_column(column, overflow="fold")
    for group in ("backends", "sources"):
        for name, item in report[group].items():
            table.add_row(
                f"{group[:-1]}: {name}", "[green]yes[/]" if item["available"] else "[red]no[/]", escape(item["detail"])
            )
    for name, value in report["torch_cuda"].items():
        table.add_row(f"torch {name}", "", escape(str(value)))
    out().print(table)
    shown = report["packages"].items() if verbose else [(k, v) for k, v in report["packages"].items() if v]
    out().print("packages: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in shown))


@shown
def battery(report: dict[str, Any], output: Any, as_json: bool, quiet: bool) -> None:
    if as_json:
        print_json(report)
    elif not quiet:
        verdict = (
            "every configuration matches rnnconv's layout table"
            if report["all_match"]
            else "some configurations DIFFER from rnnconv's layout table (see the JSON)"
        )
        out().print(f"{verdict}; wrote {escape(str(output))}")


class Terminated(BaseException):
    """SIGTERM or SIGHUP: unwind like an interrupt, so that no temporary file is left."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


def failure_label(code: int) -> str:
    return "internal error" if code == EXIT_INTERNAL else "error"


def guarded(run: Callable[..., int | None], values: dict[str, Any], command: str | None = None) -> int | None:
    """Run a command; every failure becomes one sentence on stderr and its exit code."""
    streams.collecting()
    for stream in (sys.stdout, sys.stderr):  # a layer named in Unicode must print in an ASCII locale too
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _terminate)
    as_json = bool(values.get("json"))
    try:
        return run(**values)
    except Terminated as exc:
        remove_live_temps()
        return failed(
            128 + exc.signum, "terminated; no half-written output was left behind", as_json, command, plain=True
        )
    except KeyboardInterrupt:
        return failed(130, "interrupted; no half-written output was left behind", as_json, command, plain=True)
    except Exception as exc:
        code, told = failure(exc)
        if code == EXIT_INTERNAL and os.environ.get("RNNCONV_DEBUG"):
            raise
        return failed(code, told, as_json, command)


def failed(code: int, told: str, as_json: bool, command: str | None = None, plain: bool = False) -> int:
    """A failure shown: its sentence on stderr, and with --json the error document on stdout."""
    shown = escape(sentence(told))
    err().print(shown if plain else f"[bold red]{failure_label(code)}:[/] {shown}")
    if as_json:
        print_json(ErrorDocument(error=sentence(told), exit_code=code, command=command))
    return code


def stage_printer(enabled: bool) -> Callable[[str], None] | None:
    """A line on stderr for each stage of a long command, on a terminal only: a log or a pipe gets none."""
    if not (enabled and styled(stderr=True)):
        return None
    return lambda text: err().print(f"[dim]{escape(text)}...[/]")


@contextlib.contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback (bytes written, total) that shows a bar on a terminal for large weight spaces."""
    if not (enabled and styled(stderr=True)):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(
        "writing",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err(),
        transient=True,
    )
    task = None

    def advance(nbytes: int, total: int) -> None:
        nonlocal task
        if total < 64 << 20:  # smaller weight spaces are written before a bar could help
            return
        if task is None:
            bar.start()
            task = bar.add_task("write", total=total)
        bar.advance(task, nbytes)

    try:
        yield advance
    finally:
        if task is not None:
            bar.stop()
