"""What `rnnconv --help`, every command's `--help` and the shell's completion of a command import: typer and the
table's data, never numpy, pydantic or a framework. Their speed is measured by bench/help_speed.py; what is held
here is why they are fast, which does not depend on the machine.

Completing a command's options is the exception: typer (0.2x) coerces every option's default through pydantic
while it finds the command, so pydantic comes with it, but still no numpy and no framework."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

# In one interpreter, as the `rnnconv` command runs them: the help of the group and of every command (the hidden
# SOURCE-to-TARGET ones included) and the shell's completions of a command name and a hidden one; then of an option.
HELP_AND_COMPLETION = """
import contextlib, io, os, sys
from typer.main import get_command
from rnnconv.cli import app, main

def run(*words, **env):
    os.environ.update(env)
    sys.argv = ["rnnconv", *words]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main()
    for name in env:
        del os.environ[name]
    return out.getvalue()

names = list(get_command(app).commands)
assert "onnx-to-keras" in names and "convert" in names, names
shown = [run(*([name] if name else []), "--help") for name in ["", *names]]
assert all("Usage:" in text for text in shown)
LIBRARIES = ("numpy", "pydantic", "torch", "tensorflow", "jax", "h5py", "onnx", "rich")
for words in ("rnnconv ", "rnnconv onnx-to", "rnnconv convert --la"):
    if words.endswith("--la"):
        print(" ".join(sorted(m for m in LIBRARIES if m in sys.modules)))
    completed = run(_RNNCONV_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1))
    assert completed.split(), words
print(" ".join(sorted(m for m in LIBRARIES if m in sys.modules)))
"""


def test_help_and_completion_import_neither_numpy_nor_pydantic_nor_a_framework():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-c", HELP_AND_COMPLETION], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    helps, options = result.stdout.split("\n")[:2]
    assert helps == "", f"--help or completing a command imported {helps}"
    assert set(options.split()) <= {"pydantic"}, f"completing an option imported {options}"
