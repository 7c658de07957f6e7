"""The `odd_environment` family: commands run as CI runners and containers start them, in fresh processes.

Each case sets a few terminal variables to odd values (COLUMNS and LINES of 0, negative, huge or no number; TERM
dumb, unset or garbage; NO_COLOR, FORCE_COLOR and rich's TTY_* switches; an ASCII locale), and leaves stdout and
stderr captured, closed (`>&-`), on a full device (/dev/full), on a pipe whose reader is gone (`| head -c0`) or
merged (`2>&1`). The command is one that fails (a missing file, an existing output, an unknown layer, a usage
error, a file that is no model) or one that succeeds (inspect, a conversion, explain, --help, --version), and its
exit code, error sentence and result are those of the same command in a plain environment, except that a result
that cannot reach a full stdout is an error said on stderr. A sentence or a result that does not arrive counts
as `message_lost`.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
TIME_LIMIT = 120.0
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

ODD_NUMBERS = ["0", "1", "2", "-1", "-80", "39", "40", "10001", "1" + "0" * 30, "", " ", "abc", "\u00b2", "\u0663"]
ODD_NUMBERS += ["1e3", "0x50", " 80", "80 ", "+80", "80.5", "NaN", "inf", "\u221e", "8\u00a00", "9" * 400]
VARIABLES = {
    "COLUMNS": ODD_NUMBERS,
    "LINES": ODD_NUMBERS,
    "TERM": [None, "", "dumb", "unknown", "xterm-256color", "vt100", "\x1b[31m;;xterm\x7f", "x" * 5000, "linux"],
    "NO_COLOR": [None, "", "1", "0", "yes", "\u2603"],
    "FORCE_COLOR": [None, "", "0", "1", "2", "3", "true", "-1", "\u2603"],
    "TTY_COMPATIBLE": [None, "", "0", "1", "2"],
    "TTY_INTERACTIVE": [None, "", "0", "1", "2"],
    "COLORTERM": [None, "", "truecolor", "24bit", "nonsense"],
    "CLICOLOR_FORCE": [None, "1", "0"],
    "PYTHONIOENCODING": [None, "ascii", "latin-1", "utf-8", "ascii:strict"],
    "LC_ALL": [None, "C", "POSIX", "nonexistent_LOCALE.UTF-8"],
    "TERMINAL_WIDTH": [None, "0", "-3", "abc"],
    "TYPER_USE_RICH": [None, "0", "1", "maybe"],
}
STDOUT = ["pipe"] * 6 + ["devnull", "closed", "full", "pipe_closed"]
STDERR = ["pipe"] * 6 + ["closed", "full", "pipe_closed", "merged"]


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]  # {dir}: the case's folder
    shows: tuple[str, ...] = ()  # what its result on stdout must hold
    output: str | None = None  # the file a conversion writes in the case's folder


COMMANDS = [
    Command("inspect", ("inspect", str(FIXTURES / "keras3" / "lstm.h5")), ("lstm", "yes")),
    Command("inspect_json", ("inspect", str(FIXTURES / "keras3" / "mixed.h5"), "--json"), ('"rnns"',)),
    Command("convert", ("convert", str(FIXTURES / "torch" / "rnn_tanh.pt"), "{dir}/out.bin"), ("wrote",), "out.bin"),
    Command("convert_quiet", ("convert", str(FIXTURES / "torch" / "seq2seq.pt"), "{dir}/out.pt", "-q"), (), "out.pt"),
    Command("explain", ("explain", str(FIXTURES / "keras3" / "lstm.h5")), ("LSTM", "kernel")),
    Command("explain_row", ("explain", "keras", "GRU"), ("GRU",)),
    Command("help", ("--help",), ("Usage",)),
    Command("version", ("--version",), ("rnnconv",)),
    Command("missing", ("inspect", "{dir}/missing.h5")),
    Command("existing", ("convert", str(FIXTURES / "torch" / "rnn_tanh.pt"), "{dir}/existing.bin")),
    Command("no_layer", ("convert", str(FIXTURES / "keras3" / "lstm.h5"), "{dir}/out.bin", "--layer", "nope")),
    Command("not_a_model", ("convert", "{dir}/notes.h5", "{dir}/out.bin")),
    Command("usage", ("convert",)),
    Command("bad_option", ("inspect", "--bogus")),
]


def _prepare_folder(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "existing.bin").write_bytes(b"an existing file that must survive")
    (folder / "notes.h5").write_text("these are notes, not a model\n")


@dataclass
class Baseline:
    code: int
    stdout: bool  # whether it prints anything on stdout
    said: list[str]  # its error lines on stderr


_baselines: dict[str, Baseline] = {}
_lock = threading.Lock()


def baseline(command: Command, work: Path) -> Baseline:
    """The command in a plain environment (COLUMNS=100, no colours), both streams captured."""
    with _lock:
        if command.name not in _baselines:
            folder = work / "odd_baseline" / command.name
            shutil.rmtree(folder, ignore_errors=True)
            _prepare_folder(folder)
            env = {k: v for k, v in os.environ.items() if k not in VARIABLES} | {"COLUMNS": "100", "NO_COLOR": "1"}
            done = subprocess.run(
                [sys.executable, "-m", "rnnconv", *(a.replace("{dir}", str(folder)) for a in command.args)],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                timeout=TIME_LIMIT,
            )
            said = [
                line.replace(str(folder), "{dir}")
                for line in done.stderr.splitlines()
                if line.startswith(("error:", "Error:"))
            ]
            _baselines[command.name] = Baseline(done.returncode, bool(done.stdout.strip()), said)
            shutil.rmtree(folder, ignore_errors=True)
        return _baselines[command.name]


def environment(rng: random.Random) -> dict[str, str | None]:
    chosen = rng.sample(sorted(VARIABLES), rng.randint(1, 5))
    if rng.random() < 0.5 and "COLUMNS" not in chosen:
        chosen.append("COLUMNS")  # the variable that hid every message: in half the cases
    return {name: rng.choice(VARIABLES[name]) for name in chosen}


def run_case(index: int, rng: random.Random, work: Path, tally, keep: Path | None) -> None:
    """One command in one odd environment, judged against its baseline."""
    command = rng.choice(COMMANDS)
    env_changes = environment(rng)
    stdout_kind, stderr_kind = rng.choice(STDOUT), rng.choice(STDERR)
    stdin_closed = rng.random() < 0.2
    name = f"{index:06d}_odd_environment_{command.name}_{stdout_kind}_{stderr_kind}"
    folder = work / "cases" / name
    _prepare_folder(folder)
    expected = baseline(command, work)
    tally.cases["odd_environment"] += 1
    tally.commands["odd_environment"] += 1
    env = dict(os.environ)
    for variable, value in env_changes.items():
        if value is None:
            env.pop(variable, None)
        else:
            env[variable] = value
    opened: list[int] = []

    def stream(kind: str) -> int | None:
        if kind == "pipe":
            return subprocess.PIPE
        if kind in ("devnull", "closed"):
            return subprocess.DEVNULL
        if kind == "merged":
            return subprocess.STDOUT
        if kind == "full":
            fd = os.open("/dev/full", os.O_WRONLY)
        else:  # pipe_closed: its reader gone before anything is written
            read, fd = os.pipe()
            os.close(read)
        opened.append(fd)
        return fd

    closes = [f"{fd}>&-" for fd, kind in ((1, stdout_kind), (2, stderr_kind)) if kind == "closed"]
    closes += ["0<&-"] if stdin_closed else []
    args = [a.replace("{dir}", str(folder)) for a in command.args]
    try:  # the shell closes what `>&-` closes, as a CI step's script would
        process = subprocess.Popen(
            ["/bin/sh", "-c", f'exec "$@" {" ".join(closes)}', "sh", sys.executable, "-m", "rnnconv", *args],
            stdin=subprocess.DEVNULL,
            stdout=stream(stdout_kind),
            stderr=stream(stderr_kind),
            env=env,
            cwd=ROOT,
        )
    finally:
        for fd in opened:
            os.close(fd)
    try:
        out, err = process.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        tally.exits["hang"] += 1
        tally.fail("odd_environment", "hang", f"{name}: {env_changes}")
        shutil.rmtree(folder, ignore_errors=True)
        return
    code = process.returncode
    tally.exits[str(code)] += 1
    encoding = (env.get("PYTHONIOENCODING") or "utf-8").split(":")[0]  # what the streams were written in

    def read(data: bytes | None) -> str:
        return ANSI.sub("", (data or b"").decode(encoding, errors="replace"))

    said, shown = read(err) + (read(out) if stderr_kind == "merged" else ""), read(out)
    said = said.replace(str(folder), "{dir}")
    problems = []
    result_lost = stdout_kind == "full" and expected.stdout and expected.code == 0
    if code < 0 or code == 4:
        problems.append("internal_error")
    elif code != (2 if result_lost else expected.code) and not (
        # click ends --help on a pipe closed early with 1, as it always has
        command.name in ("help", "version") and stdout_kind == "pipe_closed" and code == 1
    ):
        problems.append("bad_exit_code")
    if "Traceback" in said + shown:
        problems.append("traceback")
    stderr_seen = stderr_kind == "pipe" or (stderr_kind == "merged" and stdout_kind == "pipe")
    if stderr_seen:
        wanted = ["error: cannot write to stdout"] if result_lost else expected.said
        if not all(_flat(sentence) in _flat(said) for sentence in wanted):
            problems.append("message_lost")
    if stdout_kind == "pipe" and expected.code == 0 and not all(token in shown for token in command.shows):
        problems.append("message_lost")
    made = {p.name for p in folder.iterdir()} - {"existing.bin", "notes.h5"}
    if any(n.startswith(".") or ".part" in n for n in made):
        problems.append("temp_left")
    if command.output and expected.code == 0 and command.output not in made:
        problems.append("partial_output")  # a conversion that did its work must have written it
    if expected.code != 0 and made:
        problems.append("partial_output")
    if (folder / "existing.bin").read_bytes() != b"an existing file that must survive":
        problems.append("clobbered")
    for problem in problems:
        tally.fail(
            "odd_environment",
            problem,
            f"{name}: {' '.join(command.args)} {env_changes} -> exit {code}: {said[-300:]!r} / {shown[-200:]!r}",
        )
    if problems and keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{name}.txt").write_text(
            f"command: {args}\nenvironment changes: {env_changes!r}\nstdout: {stdout_kind}, stderr: {stderr_kind}, "
            f"stdin closed: {stdin_closed}\nexit: {code} (plain: {expected.code})\n"
            f"stderr: {said!r}\nstdout: {shown!r}\n"
        )
    shutil.rmtree(folder, ignore_errors=True)


def _flat(text: str) -> str:
    return " ".join(text.split())
