"""How long `rnnconv --help`, every command's `--help` and the shell's completion take, against 0.15 s.

    python bench/help_speed.py [--repeat 5] [--each]

Each runs in a fresh process as the installed `rnnconv` command runs (this checkout's rnnconv, bytecode cached,
best and median of --repeat runs after an untimed one), beside its floors: an empty interpreter and one that
imports typer (what any typer command line pays). The SOURCE-to-TARGET commands --help hides are summed up in two
rows (the median and the slowest of them), or each in its own with --each. `python -X importtime -c "import
rnnconv.cli.commands"` shows where an import comes from. A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# What the `rnnconv` script pip installs runs: its name is what completion's variable is made of.
RNNCONV = [PYTHON, "-c", "import sys; sys.argv[0] = 'rnnconv'; from rnnconv.cli.commands import main; main()"]
TARGET = 0.15  # seconds
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}
COMPLETIONS = {  # what was typed -> what it completes
    "rnnconv ": "a command",
    "rnnconv onnx-to": "a hidden command",
    "rnnconv convert --la": "an option (typer imports pydantic for it)",
}


def timed(command: list[str], env: dict[str, str], repeat: int) -> tuple[float, float]:
    """Best and median wall seconds of `repeat` fresh processes, after an untimed one."""
    walls = []
    for attempt in range(repeat + 1):
        start = time.perf_counter()
        done = subprocess.run(
            command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT
        )
        if done.returncode != 0:
            raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr.decode()}")
        if attempt:
            walls.append(time.perf_counter() - start)
    return min(walls), statistics.median(walls)


def commands() -> tuple[list[str], list[str]]:
    """The commands --help lists, and the hidden ones."""
    listing = "from typer.main import get_command; from rnnconv.cli.commands import app; g = get_command(app); " + (
        "print(' '.join(g.list_commands(None))); print(' '.join(n for n in g.commands if n not in g.by_name.made))"
    )
    listed, hidden = subprocess.run(
        [PYTHON, "-c", listing], capture_output=True, text=True, check=True, env=ENV, cwd=ROOT
    ).stdout.splitlines()
    return listed.split(), hidden.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--each", action="store_true", help="a row for every hidden command too")
    args = parser.parse_args()
    rows: list[tuple[str, float, float, bool]] = []  # label, best, median, judged against the target

    def row(label: str, command: list[str], env: dict[str, str] = ENV, judged: bool = True) -> None:
        best, median = timed(command, env, args.repeat)
        rows.append((label, best, median, judged))
        print(f"{label:64} {best:6.3f} {median:7.3f}", file=sys.stderr)

    row("floor: python -c pass", [PYTHON, "-c", "pass"], judged=False)
    row("floor: python -c 'import typer.main'", [PYTHON, "-c", "import typer.main"], judged=False)
    row("rnnconv --help", [*RNNCONV, "--help"])
    listed, hidden = commands()
    for name in listed:
        row(f"rnnconv {name} --help", [*RNNCONV, name, "--help"])
    timings = []  # (best, median, name) of each hidden command's --help
    for name in hidden:
        if args.each:
            row(f"rnnconv {name} --help (hidden)", [*RNNCONV, name, "--help"])
        else:
            timings.append((*timed([*RNNCONV, name, "--help"], ENV, args.repeat), name))
    if timings:
        typical = statistics.median(best for best, _, _ in timings), statistics.median(m for _, m, _ in timings)
        rows.append((f"the {len(timings)} hidden commands' --help: the median one", *typical, True))
        best, median, name = max(timings)
        rows.append((f"the slowest of them: rnnconv {name} --help", best, median, True))
    for typed, what in COMPLETIONS.items():
        env = {**ENV, "_RNNCONV_COMPLETE": "complete_bash", "COMP_WORDS": typed, "COMP_CWORD": str(typed.count(" "))}
        row(f"complete {typed!r}: {what}", RNNCONV, env)

    print(f"\n{'task':64} {'best s':>6} {'median':>7}  target")
    for label, best, median, judged in rows:
        verdict = f"<= {TARGET:g} s: {'met' if best <= TARGET else 'MISSED'}" if judged else ""
        print(f"{label:64} {best:6.3f} {median:7.3f}  {verdict}")
    print(
        f"\n(best and median of {args.repeat} fresh processes after an untimed one; {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]})"
    )


if __name__ == "__main__":
    main()
