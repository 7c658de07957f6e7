"""What `rnnconv --help`, `--version`, every command's `--help` and the shell's completion of a command import:
typer and the table's data, never numpy, pydantic or a framework. Their speed is measured by bench/help_speed.py;
what is held here is why they are fast, which does not depend on the machine. And what a conversion imports: the
modules of its two formats, of every other format only what tells its files apart (its `wire`).

Completing a command's options too: typer (0.2x) coerces every option while it finds the command, through a pydantic
adapter it builds for each, and rnnconv gives back the unset ones itself, as typer would (`cli.aliases.Coerced`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT, run_cli

# In one interpreter, as the `rnnconv` command runs them: the help of the group and of every command (the hidden
# SOURCE-to-TARGET ones included) and the shell's completions of a command name and a hidden one; then of an option.
HELP_AND_COMPLETION = """
import contextlib, io, os, sys
from typer.main import get_command
from rnnconv.cli.commands import app, main

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
assert run("--version").startswith("rnnconv ")
LIBRARIES = ("numpy", "pydantic", "torch", "tensorflow", "jax", "h5py", "onnx", "rich", "importlib.metadata")
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
    assert options == "", f"completing an option imported {options}"  # its unset options coerced without pydantic


# A conversion in a fresh interpreter, as the `rnnconv` command runs it; then every module it imported.
CONVERSION = """
import sys
from rnnconv.cli.commands import main
sys.argv = ["rnnconv", "convert", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""
# The libraries one format's files need, which a conversion between two others must not import.
FORMAT_LIBRARIES = {"keras": "h5py", "onnx": "onnx", "openvino": "xml.sax", "tf1": "google_crc32c"}
# rnnconv's modules that several formats' verbs are built on, and those formats.
SHARED_MODULES = {
    "_graph": {"mlx", "ncnn", "onnx", "openvino", "tflite", "tfjs"},
    "_jax": {"equinox", "flax", "flax_nnx"},
    "_msgpack": {"equinox", "flax", "flax_nnx"},
}


@pytest.mark.parametrize(
    ("source", "output", "formats"),
    [
        ("keras3/lstm.h5", "out.bin", {"keras", "cudnn"}),
        ("torch/rnn_tanh.pt", "out.bin", {"torch", "cudnn"}),
        pytest.param("blob.bin", "out.onnx", {"cudnn", "onnx"}, marks=pytest.mark.needs("onnx")),
    ],
)
def test_a_conversion_imports_only_its_two_formats(source, output, formats, tmp_path):
    """Its lines printed to a pipe are written as rich would print them (`render.say`), so rich is not imported (nor
    where nothing is shown, -q). Every format may be sniffed (detection goes by content),
    so its `wire` module (where its `sniff` is) may be imported; its `format` module, reader, writer and runner (and
    the libraries they need: the IR writer's XML quoting alone imported ssl) and the modules its verbs are built on
    only when it is the conversion's source or target."""
    if source == "blob.bin":
        assert run_cli("convert", FIXTURES / "torch" / "rnn_tanh.pt", tmp_path / source).returncode == 0
    path = tmp_path / source if source == "blob.bin" else FIXTURES / source
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-c", CONVERSION, str(path), str(tmp_path / output)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "\nwrote " in result.stdout  # its result, printed to a pipe
    imported = set(result.stderr.splitlines()[-1].split())
    others = [
        name
        for name in imported
        if name.startswith("rnnconv.formats.")
        and not name.split(".")[2].startswith("_")
        and name.split(".")[2] not in formats
        and name.count(".") == 3
        and name.split(".")[3] != "wire"
    ]
    assert not others, f"converting {source} to {output} imported {sorted(others)}"
    shared = [
        name for name, users in SHARED_MODULES.items() if f"rnnconv.formats.{name}" in imported and not users & formats
    ]
    assert not shared, f"converting {source} to {output} imported rnnconv.formats.{shared[0]}"
    libraries = {library for fmt, library in FORMAT_LIBRARIES.items() if fmt not in formats} & imported
    assert not libraries, f"converting {source} to {output} imported {sorted(libraries)}"
    assert "rich" not in imported, f"converting {source} to {output}, its result shown in no terminal, imported rich"
    # its options, unset or words, given back as typer's coercion gives them without building its pydantic adapters
    assert "typer._adapters" not in imported, f"converting {source} to {output} built typer's option adapters"


def test_a_command_is_made_when_it_is_named():
    """typer makes every registered command's click command for any one; rnnconv's group makes none until it is
    named (a conversion makes its own), and --help makes the listed ones, in their order, and no hidden one."""
    from typer.main import get_command

    from rnnconv.cli.commands import app

    group = get_command(app)
    assert not group.by_name.made
    assert group.commands["torch-to-cudnn"].name == "torch-to-cudnn"
    assert list(group.by_name.made) == ["torch-to-cudnn"]
    listed = group.list_commands(None)
    assert listed[:2] == ["keras-to-cudnn", "torch-to-cudnn"] and "convert" in listed and "onnx-to-keras" not in listed


# The `rnnconv` command as installed (`rnnconv.__main__:main`), with every collection the interpreter makes once it
# has begun noted where it comes before the command's work (which starts by freezing what was imported).
COLLECTIONS = """
import gc, sys
from rnnconv.__main__ import main
during_start = []
def noted(phase, info):
    if phase == "start" and gc.get_freeze_count() == 0:
        during_start.append(info["generation"])
gc.callbacks.append(noted)
sys.argv = ["rnnconv", "convert", sys.argv[1], sys.argv[2], "-q"]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
print(len(during_start), gc.isenabled(), gc.get_freeze_count() > 0)
"""


def test_the_command_line_imports_its_libraries_without_collecting_then_collects_for_its_work(tmp_path):
    """Nothing numpy, pydantic and typer make as they are imported is garbage: the collector's passes over it were a
    sixth of a small conversion's time above its floor (bench/bench.py times it). It is on for the command's work."""
    result = subprocess.run(
        [sys.executable, "-c", COLLECTIONS, str(FIXTURES / "torch" / "rnn_tanh.pt"), str(tmp_path / "out.bin")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "True", "True"], result.stdout  # none while starting; on, the start frozen


@pytest.mark.parametrize("command", ["convert", "keras-to-cudnn", "verify"])
def test_options_given_back_without_typers_adapters_are_what_its_adapters_give(command):
    """The command line skips typer's pydantic adapter of an option only where the value is what that adapter gives
    back: each value here coerced both ways, the same result or the same refusal."""
    from typer._coercion import build_runtime_param
    from typer.main import get_command

    from rnnconv.cli.aliases import Coerced
    from rnnconv.cli.commands import app

    made = get_command(app).commands[command]  # type: ignore[attr-defined]
    ctx = made.make_context(command, ["x", "y"] if command == "convert" else ["x"], resilient_parsing=True)
    tried = 0
    for param in made.get_params(ctx):
        if not hasattr(param, "type_descriptor") or param.type_descriptor.annotation is bool:
            continue
        choices = [getattr(c, "value", c) for c in param.type_descriptor.choices or ()]
        values = [None, param.default, "word", "7", 7, -1, 0.5, "", ("a", "b"), *choices, *(c.upper() for c in choices)]
        for value in values:
            outcomes = []
            for coercion in (Coerced(param.type_descriptor), build_runtime_param(param.type_descriptor)):
                try:
                    outcomes.append(("value", coercion.coerce(value, param=param, ctx=ctx)))
                except Exception as exc:  # the refusal itself is compared
                    outcomes.append((type(exc).__name__, str(exc)))
            assert outcomes[0] == outcomes[1], (param.name, value, outcomes)
            tried += 1
    assert tried > 50


def test_a_line_written_without_rich_is_the_text_rich_prints_of_it_where_it_styles_nothing():
    """`render.escape` and `render.plain` against rich itself: random text of brackets, backslashes, tags, control
    codes and wide characters, escaped as rich escapes it, then inside a conversion's markup, printed by rich to a
    stream it does not style, is what `plain` gives (a tab: rich's, which expands it by cells)."""
    import io
    import random

    from rich.console import Console
    from rich.markup import escape

    from rnnconv.cli import render

    rng = random.Random(0)
    pieces = ["[", "]", "\\", "/", "a", "#", "@", "=", " ", "\r", "\n", "\x07", "\x08", "\x0b", "\x1b", "\x00", "é"]
    pieces += ["中", "\u200b", "x[y]", "[/]", "[b]", "[link=x]", "\t"]
    compared = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert render.escape(text) == escape(text), text
        for markup in (render.escape(text), f"[yellow]warning:[/] {render.escape(text)} [b]x[/b]"):
            shown = render.plain(markup)
            if shown is None:
                assert "\t" in markup
                continue
            printed = io.StringIO()
            Console(file=printed, highlight=False, soft_wrap=True, emoji=False).print(markup)
            assert printed.getvalue() == shown + "\n", markup
            compared += 1
    assert compared > 2000
