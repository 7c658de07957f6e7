"""The command line in odd environments: whatever COLUMNS, LINES, TERM, NO_COLOR, FORCE_COLOR and the standard
streams say, an error reaches stderr (when there is one) as its one sentence, the exit code is the command's, and
nothing crashes or prints a traceback. (With COLUMNS=0, rich printed nothing at all: every error was lost.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, run_cli

SOURCE = FIXTURES / "keras3" / "lstm.h5"

ENVIRONMENTS = {
    "COLUMNS=0": {"COLUMNS": "0"},
    "COLUMNS=1": {"COLUMNS": "1"},
    "COLUMNS=-1": {"COLUMNS": "-1"},
    "COLUMNS=huge": {"COLUMNS": "1" + "0" * 30},
    "COLUMNS=abc": {"COLUMNS": "abc"},
    "COLUMNS=superscript two": {"COLUMNS": "\u00b2"},  # a digit to str.isdigit(), not to int()
    "COLUMNS empty": {"COLUMNS": ""},
    "LINES=0": {"LINES": "0"},
    "LINES=-5": {"LINES": "-5"},
    "LINES=superscript two": {"LINES": "\u00b2"},
    "TERM=dumb": {"TERM": "dumb"},
    "TERM unset": {"TERM": None},
    "TERM garbage": {"TERM": "\x1b[31m;;xterm\x7f"},
    "NO_COLOR=1": {"NO_COLOR": "1"},
    "FORCE_COLOR=1": {"FORCE_COLOR": "1"},
    "FORCE_COLOR=1 TERM=dumb COLUMNS=0 LINES=0": {"FORCE_COLOR": "1", "TERM": "dumb", "COLUMNS": "0", "LINES": "0"},
    "ascii, COLUMNS=0": {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "COLUMNS": "0"},
}


def rnnconv(args: list[str], env: dict[str, str | None] | None = None, stdout=None, stderr=None, closing=()):
    """`python -m rnnconv ARGS` with the environment changed by `env` (None: unset), stdout and stderr as given
    (default: captured) and the descriptors in `closing` closed, as `>&-` leaves them."""
    environment = {**os.environ}
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run(
        [sys.executable, "-m", "rnnconv", *args],
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE if stderr is None else stderr,
        env=environment,
        cwd=ROOT,
        timeout=120,
        preexec_fn=(lambda: [os.close(fd) for fd in closing]) if closing else None,
    )


def text(data: bytes | None) -> str:
    """What a person reads: the bytes decoded, colours and cursor moves left out."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", (data or b"").decode(errors="replace"))


FAILURES = {
    "a missing file": (["inspect", "/no/such/model.h5"], "error: /no/such/model.h5 does not exist"),
    "a usage error": (["convert"], "Missing argument 'SOURCE'"),
}


@pytest.mark.slow
@pytest.mark.parametrize("failing", FAILURES)
@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_an_error_is_said_on_stderr_whatever_the_terminal_says(name, failing):
    args, sentence = FAILURES[failing]
    result = rnnconv(args, ENVIRONMENTS[name])
    assert result.returncode == 2, text(result.stderr)
    assert sentence in text(result.stderr)
    assert "Traceback" not in text(result.stderr) + text(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_results_are_shown_whatever_the_terminal_says(name):
    result = rnnconv(["inspect", str(SOURCE)], ENVIRONMENTS[name])
    assert result.returncode == 0, text(result.stderr)
    shown = text(result.stdout)
    for cell in ("lstm", "keras-h5", "yes"):  # the table's cells, not just its frame
        assert cell in shown, shown
    assert "Traceback" not in text(result.stderr)


def test_a_narrow_terminal_still_shows_the_table_whole():
    narrow, plain = (text(rnnconv(["inspect", str(SOURCE)], {"COLUMNS": c}).stdout) for c in ("1", "40"))
    assert narrow == plain  # below 40 columns a table would hide its cells: it is drawn 40 wide


# Standard streams as a caller may leave them. Each gives (stdout, stderr, descriptors closed in the child).
def full():
    return open("/dev/full", "wb")


def closed_pipe():
    read, write = os.pipe()
    os.close(read)  # its reader is gone before anything is written: `| head -c0`
    return write


STREAMS = ["stdout closed", "stdout full", "stdout pipe closed", "stderr closed", "stderr full", "stderr pipe closed"]


def run_with_streams(args: list[str], streams: str) -> tuple[subprocess.CompletedProcess, bool]:
    """The command with its streams set up as `streams` says; and whether its stderr was captured."""
    which, how = streams.split(" ", 1)
    target = {"closed": subprocess.DEVNULL, "full": None, "pipe closed": None}[how]
    opened = full() if how == "full" else None
    pipe = closed_pipe() if how == "pipe closed" else None
    stream = opened if opened is not None else pipe if pipe is not None else target
    closing = (1 if which == "stdout" else 2,) if how == "closed" else ()
    try:
        if which == "stdout":
            return rnnconv(args, stdout=stream, closing=closing), True
        return rnnconv(args, stderr=stream, closing=closing), False
    finally:
        if opened is not None:
            opened.close()
        if pipe is not None:
            os.close(pipe)


@pytest.mark.parametrize("streams", STREAMS)
def test_a_failure_keeps_its_exit_code_and_sentence_whatever_the_streams(streams):
    result, stderr_seen = run_with_streams(["inspect", "/no/such/model.h5"], streams)
    assert result.returncode == 2
    if stderr_seen:
        assert text(result.stderr).strip() == "error: /no/such/model.h5 does not exist"


@pytest.mark.parametrize("quiet", [False, True])
@pytest.mark.parametrize("streams", STREAMS)
def test_a_conversion_whatever_the_streams(streams, quiet, tmp_path):
    """A full stdout (a result that cannot be shown) is an error, said on stderr; a closed one or a pipe closed
    early is the caller's choice; a stderr that cannot take notes changes nothing. The output is written."""
    output = tmp_path / "out.bin"
    args = ["convert", str(SOURCE), str(output), *(["-q"] if quiet else [])]
    result, stderr_seen = run_with_streams(args, streams)
    cannot_show = streams == "stdout full" and not quiet
    assert result.returncode == (2 if cannot_show else 0), text(result.stderr)
    assert output.exists() and (tmp_path / "out.bin.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    if stderr_seen:
        said = text(result.stderr).strip()
        assert said == ("error: cannot write to stdout: no space left on the device" if cannot_show else "")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["inspect", "--help"]])
def test_help_that_cannot_be_shown_is_an_error_not_a_traceback(args):
    with full() as stdout:
        result = rnnconv(args, stdout=stdout)
    assert result.returncode == 2
    assert text(result.stderr).strip() == "error: cannot write to stdout: no space left on the device"


def test_a_closed_stderr_cannot_receive_an_output_file_descriptor(tmp_path):
    """With stderr closed, the first file opened would take descriptor 2, and a library's log line to stderr
    would land in it: rnnconv holds 0-2 on /dev/null first."""
    output = tmp_path / "out.bin"
    code = (
        "import os, sys\n"
        "from rnnconv.cli import commands as cli\n"
        "sys.argv = ['rnnconv', 'convert', sys.argv[1], sys.argv[2], '-q']\n"
        "real = cli.app\n"
        "def app():\n"
        "    real(standalone_mode=False)\n"
        "    os.write(2, b'a library logs to stderr\\n')\n"  # what TensorFlow or libhdf5 would do
        "    os.write(1, b'and to stdout\\n')\n"
        "cli.app = app\n"
        "cli.main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(SOURCE), str(output)],
        cwd=ROOT,
        capture_output=False,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: [os.close(fd) for fd in (0, 1, 2)],
        timeout=120,
    )
    assert result.returncode == 0
    written = output.read_bytes()
    assert b"library" not in written and b"stdout" not in written
    assert Path(f"{output}.json").read_text().startswith("{")


def test_a_name_is_printed_as_it_is_never_as_an_emoji(tmp_path):
    """rich turns `:name:` into an emoji by default; a path (or a layer) holding one must show what it is."""
    source = tmp_path / "lstm:thumbs_up:.pt"
    shutil.copy(FIXTURES / "torch" / "lstm_proj.pt", source)
    result = run_cli("torch-to-cudnn", source, "-o", tmp_path / "out:smile:.bin")
    assert result.returncode == 0, result.stderr
    assert "out:smile:.bin" in result.stdout, result.stdout
    assert "\N{SMILING FACE WITH OPEN MOUTH}" not in result.stdout
