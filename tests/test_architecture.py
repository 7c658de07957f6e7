"""The shape of the code, held by tests: one registry, one table, no cycles, one vocabulary, a public API."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, assert_clean_failure, run_cli

from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import catalog, registry
from rnnconv.formats._graph import GraphFormat
from rnnconv.formats.catalog import FORMAT_INFO
from rnnconv.formats.plugin import NPM
from rnnconv.table.apply import find_row, rows_for
from rnnconv.table.rows import ADAPTER_FORMATS, TABLE

PACKAGE = ROOT / "rnnconv"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every rnnconv module a file imports, at the top, inside functions and under TYPE_CHECKING alike."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("rnnconv")}


def test_no_import_cycle():
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert not cycles, cycles


# Words only the table may write: gate orders, stored tensor names, cuDNN and element-type codes.
FORBIDDEN = [
    (r"weight_ih|weight_hh|bias_ih|bias_hh|weight_hr", "a PyTorch parameter name"),
    (r"recurrent_kernel|[\"']kernel[\"']", "a Keras variable name"),
    (r"\(\s*[\"'][ifcozrhg][\"']\s*,\s*[\"'][ifcozrhg][\"']", "a gate order"),
    (r"[\"'](F32|F16|BF16|F64)[\"']", "a safetensors dtype code"),
    (r"[\"'](rnn_relu|rnn_tanh|lstm|gru)[\"']\s*:\s*\d", "a cuDNN code"),
    (r"[\"'](float32|float16|bfloat16|float64)[\"']\s*:\s*\d", "an element-type code"),
    (r"CUDNN_(LSTM|GRU|RNN_RELU|RNN_TANH|DATA_\w+)\b", "a cuDNN enum"),
]
# What a format's wire module (formats/<name>/wire.py) may write besides the table: its own file's words (the names
# and codes of the element types its files use, its direction and input names), never a gate order or another
# layout fact.
WIRE_MAY_WRITE = {"an element-type code", "a safetensors dtype code"}


# Names the table gives (constants.Kind, LSTM / GRU / RNN, DIRECTIONS, DIRECTION_WORDS) or a format's wire module
# (KERAS_DIRECTION_PREFIXES, TF1_DIRECTIONS, ONNX_INPUTS), by what they name.
NAMED = {
    "a tensor kind": r"(?<!\w)[\"'](W|R|bW|bR|P)[\"']",
    "a cell or mode compared by name": r"[!=]=\s*[\"'](lstm|gru|rnn\w*)[\"']|[\"'](lstm|gru|rnn\w*)[\"']\s*[!=]=",
    "a direction word": r"(?<!\w)[\"'](fwd|rev|fw|bw|forward|reverse|backward)[\"']",
    "an ONNX input or output name": r"(?<!\w)[\"'](X|B|sequence_lens|initial_h|initial_c|Y|Y_h|Y_c)[\"']",
}
# Modules that still write some of them, and which: this list may only shrink (a module cleaned must leave it).
ONNX_NAMES = "an ONNX input or output name"
NOT_YET_CLEAN = {
    "formats/onnx/format.py": {ONNX_NAMES},
    "formats/onnx/nodes.py": {"a tensor kind", "a direction word", ONNX_NAMES},
    "formats/onnx/reader.py": {"a tensor kind", "a direction word", ONNX_NAMES},
    "formats/onnx/runner.py": {"a direction word", ONNX_NAMES},
    "formats/onnx/writer.py": {"a tensor kind", "a direction word", ONNX_NAMES},
}
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "table" not in p.parts)


def code_of(path: Path) -> str:
    code = re.sub(r'"""[\s\S]*?"""', "", path.read_text())  # docstrings may explain
    return "\n".join(line.split("#")[0] for line in code.splitlines())  # and so may comments


def is_wire(path: Path) -> bool:
    return path.name == "wire.py" and path.parent.parent == PACKAGE / "formats"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_enumeration_outside_the_table(path):
    code = code_of(path)
    for pattern, what in FORBIDDEN:
        found = re.search(pattern, code)
        if is_wire(path) and what in WIRE_MAY_WRITE:
            continue
        assert not found, f"{path.name} writes {what} ({found.group(0)!r}): take it from rnnconv.table"
    name = path.relative_to(PACKAGE).as_posix()
    if is_wire(path):
        return
    for what, pattern in NAMED.items():
        found = re.search(pattern, code)
        if what in NOT_YET_CLEAN.get(name, ()):
            assert found, f"{name} no longer writes {what}: take it off NOT_YET_CLEAN"
        else:
            assert not found, f"{name} writes {what} ({found.group(0)!r}): take it from rnnconv.table"


def test_the_not_yet_clean_modules_exist():
    assert {p.relative_to(PACKAGE).as_posix() for p in MODULES} >= set(NOT_YET_CLEAN)


# Each format by the first word of its title (the weight space aside: every sentence may name cuDNN).
FORMAT_WORDS = sorted({info.title.split()[0] for name, info in FORMAT_INFO.items() if name != catalog.WEIGHT_SPACE})
NAMES_A_FORMAT = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, FORMAT_WORDS)) + r")(?!\w)")
PUBLIC = ("__init__.py", "api.py")  # whose docstrings are the library's documentation


def prose_of(path: Path) -> list[tuple[int, str]]:
    """The text a user reads of a module: its strings (help, messages), and the docstrings of the public API's."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    if path.name not in PUBLIC:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_prose_outside_the_format_packages_lists_formats_by_hand():
    """Help texts, messages and the public API's docs that name formats take them from the plugins: a text that
    names two formats by hand drifts as formats are added (the --streaming help said ONNX and TFLite after TF.js
    streamed too). Within a format's package, and in the table's rows, a format speaks of itself."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "table" or (parts[0] == "formats" and len(parts) > 2):
            continue
        for line, text in prose_of(path):
            named = sorted(set(NAMES_A_FORMAT.findall(text)))
            if len(named) > 1:
                found.append(f"{path.relative_to(PACKAGE)}:{line} names {', '.join(named)}")
    assert not found, found


def test_no_module_outside_the_formats_imports_one_format():
    """Verify, the GPU layer, the command line and the core reach a format through the registry and the plugins'
    data, never by importing its package."""
    packages = tuple(plugin.package for plugin in catalog.plugins())
    found = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "formats"
        for module in sorted(imports_of(path))
        if module.startswith(packages)
    ]
    assert not found, found


def test_the_house_keeps_its_shape():
    """At most 16 modules and packages at the top level, no file over 800 lines, the registry under 400, one
    package named cudnn (the format's: the GPU layer is gpu/)."""
    top = [p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    assert len(top) <= 16, sorted(top)
    long = {
        str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 800
    }
    assert not long, long
    assert len((PACKAGE / "formats" / "registry.py").read_text().splitlines()) <= 400
    assert [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("cudnn") if p.is_dir()] == ["formats/cudnn"]


def test_cli_is_thin():
    assert len((PACKAGE / "cli" / "commands.py").read_text().splitlines()) <= 350


def test_registry_holds_one_module_per_table_format():
    names = [fmt.name for fmt in registry.formats()]
    assert sorted(names) == sorted(ADAPTER_FORMATS) == sorted(FORMAT_INFO)
    for fmt in registry.formats():
        assert fmt.info is FORMAT_INFO[fmt.name]
        assert rows_for(fmt.name), fmt.name
        for kind in fmt.info.kinds:
            assert registry.for_kind(kind) is fmt


def test_every_format_is_the_package_its_plugin_describes():
    """A format is a package: its plugin (`__init__.py`, plain data) and its registered Format (`format.py`)."""
    for plugin in catalog.plugins():
        fmt = registry.get(plugin.info.name)
        assert fmt.plugin is plugin and type(fmt).__module__ == f"{plugin.package}.format", plugin.package


def test_every_extra_is_declared_installed_by_the_tests_and_pinned():
    """The packaging check, read from the plugins: each format's extra is declared in pyproject.toml and installed by
    the test extra, each of its requirements pinned in .ci/constraints.txt, as is a runtime installed apart
    (tf-keras); its test dependencies name every module its runtimes and its engine import."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    constraints = (ROOT / ".ci" / "constraints.txt").read_text().splitlines()
    pinned = {line.split("==")[0].strip().lower() for line in constraints if "==" in line}
    tested = re.fullmatch(r"rnnconv\[(.*)\]", extras["test"][0])
    assert tested, extras["test"][0]

    def package(requirement: str) -> str:
        return re.split(r"[\[<>=!;~ ]", requirement, maxsplit=1)[0].lower()

    for plugin in catalog.plugins():
        name, extra = plugin.info.name, plugin.info.extra
        modules = [m for runtime in plugin.runtimes for _, m in runtime.modules]
        modules += [m for _, m in plugin.engine.modules] if plugin.engine else []
        imported = {m.split(".")[0] for m in modules if not m.startswith(NPM)}  # npm packages: package.json's
        assert imported <= set(plugin.frameworks), (name, imported - set(plugin.frameworks))
        if extra is None:
            assert not plugin.frameworks, f"{name} names frameworks but no extra that installs them"
            continue
        assert extra in extras, f"{name}'s extra {extra!r} is not declared in pyproject.toml"
        assert extra in tested.group(1).split(","), f"the test extra does not install {name}'s extra {extra!r}"
        unpinned = [r for r in extras[extra] if package(r) not in pinned]
        assert not unpinned, f"{name}'s extra {extra!r}: .ci/constraints.txt pins no version of {unpinned}"
        for runtime in plugin.runtimes:
            if runtime.install:  # installed apart from the extra
                apart = [p for p, _ in runtime.modules if p.lower() not in pinned]
                assert not apart, f"{name}'s runtime {runtime.key}: .ci/constraints.txt pins no version of {apart}"


@pytest.mark.needs("onnx")
def test_one_layer_rule_for_every_graph_format(tmp_path):
    """--layer in a file of layers (ONNX, OpenVINO, TFLite, ncnn, MLX), one rule: an RNN by its name, a chain by its
    layers' names as a,b, one layer alone by its name."""
    import rnnconv

    source = FIXTURES / "torch" / "rnn_relu.safetensors"  # two layers
    written = [tmp_path / "rnn.tflite", tmp_path / "rnn.xml"]
    for path in written:
        rnnconv.convert(source, path)
    graphs = [FIXTURES / "onnx" / "gru3_dynamo.onnx", FIXTURES / "ncnn" / "tagger.param"]
    graphs += [FIXTURES / "mlx" / "encoder.safetensors", *written]
    for path in graphs:
        fmt = registry.detect(path)
        assert isinstance(fmt, GraphFormat), fmt.name
        chain = next(c for c in fmt.load(path).chains if len(c.layers) > 1)
        names = [layer.name for layer in chain.layers]
        with rnnconv.load(path, layer=chain.name) as (whole,):
            assert whole.spec.num_layers > 1, path
        with rnnconv.load(path, layer=", ".join(names)) as (by_names,):
            assert by_names.spec == whole.spec and by_names.name == chain.name, path
        with rnnconv.load(path, layer=names[0]) as (alone,):
            assert alone.spec.num_layers == 1 and alone.name == names[0], path


def test_registering_a_name_twice_fails():
    existing = type(registry.get("keras"))
    with pytest.raises(RuntimeError, match="registered twice"):
        registry.register(existing)


def test_unknown_formats_and_outputs_fail_with_the_exact_key(tmp_path):
    with pytest.raises(Unsupported, match="no reader or writer for format 'caffe'"):
        registry.get("caffe")
    with pytest.raises(BadInput, match="cannot tell what to write from the name"):
        registry.for_output(tmp_path / "x.caffemodel")
    with pytest.raises(BadInput, match=r"must end in \.keras or \.weights\.h5 for Keras"):
        registry.for_output(tmp_path / "x.pt", "keras")
    strange = tmp_path / "strange.dat"
    strange.write_bytes(b"\x00\x01not a model at all" * 10)
    with pytest.raises(BadInput, match="cannot tell what"):
        registry.detect(strange)


@pytest.mark.slow
def test_inspect_never_falls_through_to_another_format(tmp_path):
    strange = tmp_path / "notes.txt"
    strange.write_text("a text file")
    assert_clean_failure(run_cli("inspect", strange), 2, "cannot tell what")


def test_rows_have_explicit_defaults():
    for row in TABLE:
        assert "activation" in row.defaults, row
        for key in [*row.when, *row.requires]:
            assert key in row.defaults, (row.format, row.source_class, key)
        same_class = rows_for(row.format, row.source_class)
        assert all(other.defaults == row.defaults for other in same_class), row
    # a missing key means the format's documented default: ONNX's GRU resets before the recurrent matrix
    assert not find_row("onnx", "GRU", {}).reset_after
    assert not find_row("onnx", "GRU", {"linear_before_reset": 1}).refusal
    assert find_row("keras", "GRU", {}).bias == "stacked"  # reset_after=True since TF2


# --- the public API ------------------------------------------------------------------------------


def test_public_api_is_documented_and_lazy():
    code = """
import sys, rnnconv
names = ("load", "convert", "verify", "inspect")
assert all(getattr(rnnconv, n).__doc__ for n in names), names
print("ok")
"""
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "ok"
    lazy = subprocess.run(
        [sys.executable, "-c", "import sys, rnnconv; print('numpy' in sys.modules)"], capture_output=True, text=True
    )
    assert lazy.stdout.strip() == "False"  # `import rnnconv` costs nothing until a function is used


@pytest.mark.needs("keras")
def test_public_api_with_str_paths(tmp_path):
    import numpy as np

    import rnnconv
    from rnnconv.core.canonical import ParamKey

    source = str(FIXTURES / "keras3" / "mixed.h5")
    report = rnnconv.inspect(source)
    assert report.format == "keras-h5" and any(r.name == "bidi_gru" for r in report.rnns)
    with rnnconv.load(source, layer="bidi_gru") as rnns:
        (rnn,) = rnns
        assert rnn.spec.bidirectional and rnn.param(ParamKey(0, 1, "W", "r")).shape == (
            rnn.spec.hidden_size,
            rnn.spec.input_size,
        )
        arrays = rnn.arrays()
    out = str(tmp_path / "g.bin")
    result = rnnconv.convert(source, out, layer="bidi_gru")
    assert result.outputs == [out, out + ".json"]
    blob = rnnconv.load(out)[0]
    for key, value in arrays.items():
        np.testing.assert_array_equal(blob.param(key), value)
    verdict = rnnconv.verify(out, backend="numpy", report=str(tmp_path / "r.json"))
    assert verdict.verdict == "match" and json.loads((tmp_path / "r.json").read_text())["verdict"] == "match"
    with pytest.raises(BadInput, match="has no recurrent layer named 'nope'"):
        rnnconv.load(source, layer="nope")


def test_a_test_worker_ends_with_its_heap_frozen():
    """A green `bash .ci/run` printed a KeyboardInterrupt traceback from hypothesis's gc callback at [100%]: pytest's
    last collections in an xdist worker walked every framework's objects for seconds after the worker said it was
    finished, and execnet interrupts (SIGINT) a worker still running 5 s later. The session's end freezes the heap
    first: those collections then walk only what is new."""
    import gc
    from types import SimpleNamespace

    import conftest

    session = SimpleNamespace(config=SimpleNamespace(workeroutput={}))
    try:
        conftest.pytest_sessionfinish(session)
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # this interpreter's modules and objects
        assert "largest_errors" in session.config.workeroutput
    finally:
        gc.unfreeze()  # the rest of this session collects as before


def test_paths_are_resolved_by_the_helper_that_survives_a_symlink_loop():
    """Path.resolve raises RuntimeError on a symlink loop (a TF.js shard linked to itself was exit 4): a path from a
    user or a file is resolved by safeio.inputs.resolved, which leaves the loop for the read to refuse."""
    resolving = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "rnnconv").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ".resolve()" in line and "Path(__file__).resolve()" not in line
    ]
    assert not resolving, resolving


# --- one vocabulary on the command line -----------------------------------------------------------


def commands() -> list[str]:
    from typer.main import get_command

    from rnnconv.cli.commands import app

    return sorted(get_command(app).commands)  # type: ignore[attr-defined]


def options_of(name: str) -> dict[str, object]:
    from typer.main import get_command

    from rnnconv.cli.commands import app

    command = get_command(app).commands[name]  # type: ignore[attr-defined]
    return {opt: param for param in command.params for opt in param.opts + param.secondary_opts}


@pytest.mark.slow
@pytest.mark.parametrize("name", commands())
def test_every_command_speaks_the_same_options(name):
    options = options_of(name)
    if name != "schema":
        assert {"--json", "-q", "--quiet", "-v", "--verbose"} <= set(options), name
    if "-to-" in name or name in ("convert", "verify"):
        assert "--layer" in options
        assert "--force" in options
    help_text = run_cli(name, "--help").stdout
    assert "<bool>" not in help_text  # flags take no value
    assert "Example" in help_text


LISTED_COMMANDS = {
    *("keras-to-cudnn", "torch-to-cudnn", "cudnn-to-keras", "cudnn-to-torch"),
    *("convert", "verify", "verify-changed", "inspect", "explain", "doctor", "schema", "gpu-battery"),
    "identify",
}


@pytest.mark.parametrize("name", sorted(LISTED_COMMANDS | {"onnx-to-tflite", "tf1-to-torch"}))
def test_help_says_each_value_in_words(name):
    """The usage line showed `{BLOB}` in braces and the options' values Python's types (`<list[str]>`, `<int
    range>`, `<str>`)."""
    text = run_cli(name, "--help").stdout
    usage = text.splitlines()[0]
    assert f" {name} [OPTIONS]" in usage and "{" not in usage, usage
    assert not re.search(r"<(list\[|int\b|float\b|str\b|Path\b)|\brange>", text), text


def test_verify_help_describes_verify():
    """verify's --streaming was convert's text ("Write a streaming model"), its exit codes left out 4."""
    text = " ".join(run_cli("verify", "--help").stdout.split())
    assert "Write a streaming model" not in text and "--streaming The file is a streaming model" in text
    assert "4 internal error" in text
    assert re.search(r" verify \[OPTIONS\] BLOB\b", text)


OLD_NAME_SOURCES = {  # one small file per source format; a cuDNN blob is made from the PyTorch one
    "keras": FIXTURES / "keras3" / "lstm.h5",
    "torch": FIXTURES / "torch" / "rnn_tanh.pt",
    "onnx": FIXTURES / "onnx" / "rnn_relu_torchscript.onnx",
    "tf1": FIXTURES / "tf1" / "rnn_tanh.ckpt",
    "tflite": FIXTURES / "tflite" / "rnn_tanh.tflite",
    "openvino": FIXTURES / "openvino" / "rnn_tanh.xml",
    "mlx": FIXTURES / "mlx" / "lstm.safetensors",
    "ncnn": FIXTURES / "ncnn" / "lstm.param",
}
# Sources for a target that does not hold a relu RNN (ncnn's RNN computes tanh only): a GRU.
TANH_ONLY_SOURCES = {"ncnn": {"onnx": (FIXTURES / "onnx" / "gru3_dynamo.onnx",)}}
# Sources for a target that holds one cell only (Equinox): one layer, one direction, an LSTM or a GRU.
ONE_CELL_SOURCES = {
    "keras": (FIXTURES / "keras3" / "lstm.h5",),
    "torch": (FIXTURES / "torch" / "lstm_legacy.pt",),
    "onnx": (FIXTURES / "onnx" / "gru3_dynamo.onnx", "--layer", "node_GRU_44"),
    "tf1": (FIXTURES / "tf1" / "seq2seq.ckpt", "--layer", "decoder/cudnn_gru"),
}


def test_help_lists_the_commands_a_person_reads():
    text = run_cli("--help").stdout
    listed = re.findall(r"^  (\S+)  ", text.split("Commands:")[1], re.M)
    assert set(listed) == LISTED_COMMANDS and len(listed) == len(LISTED_COMMANDS), listed
    assert listed[:2] == ["keras-to-cudnn", "torch-to-cudnn"]
    assert "still work" in " ".join(text.split()) and "convert --to" in text  # where the other directions went


@pytest.mark.needs("torch", "onnx", "flatbuffers")
@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in commands() if "-to-" in name])
def test_every_old_command_name_still_converts(name, tmp_path):
    source_format, target = name.split("-to-")
    one_cell = target == "equinox"
    if all(row.refusal for row in rows_for(source_format)):  # a format whose every row is refused converts nothing
        (program, *_) = sorted((FIXTURES / source_format).iterdir())
        out = tmp_path / f"old{FORMAT_INFO[target].default_for[0]}"
        assert_clean_failure(run_cli(name, program, "-o", out), 2, "does not convert")
        return
    if one_cell and source_format in ONE_CELL_SOURCES:
        source, *args = ONE_CELL_SOURCES[source_format]
    elif source_format in TANH_ONLY_SOURCES.get(target, {}):
        source, *args = TANH_ONLY_SOURCES[target][source_format]
    elif not one_cell and source_format in OLD_NAME_SOURCES:
        source, args = OLD_NAME_SOURCES[source_format], []
    else:  # a format rnnconv writes, with no fixture of the kind asked for: made from the PyTorch one
        made = FORMAT_INFO[source_format].default_for[0]
        source, args = tmp_path / f"source{made}", []
        base = ONE_CELL_SOURCES["torch"][0] if one_cell or source_format == "equinox" else OLD_NAME_SOURCES["torch"]
        assert run_cli("convert", base, source, "--to", source_format).returncode == 0
    suffix = FORMAT_INFO[target].default_for[0]
    old = run_cli(name, source, *args, "-o", tmp_path / f"old{suffix}", "--json")
    assert old.returncode == 0, old.stderr
    new = run_cli("convert", source, *args, tmp_path / f"new{suffix}", "--to", target, "--json")
    assert new.returncode == 0, new.stderr
    converted = json.loads(old.stdout)
    assert all(Path(output).is_file() for output in converted["outputs"])
    assert converted["rnns"] == json.loads(new.stdout)["rnns"]


@pytest.mark.slow
def test_old_option_name_still_works(tmp_path):
    result = run_cli(
        "torch-to-cudnn", FIXTURES / "torch" / "seq2seq.pt", "--prefix", "encoder.rnn", "-o", tmp_path / "x.bin"
    )
    assert result.returncode == 0, result.stderr
    assert "--prefix" not in run_cli("torch-to-cudnn", "--help").stdout  # hidden: the documented name is --layer


@pytest.mark.needs("keras")
@pytest.mark.slow
def test_json_is_the_result_on_stdout_everywhere(tmp_path):
    out = tmp_path / "x.bin"
    conversion = json.loads(run_cli("keras-to-cudnn", FIXTURES / "keras3" / "lstm.h5", "-o", out, "--json").stdout)
    assert conversion["outputs"][0] == str(out)
    report = json.loads(run_cli("verify", out, "--backend", "numpy", "--json").stdout)
    assert report["verdict"] == "match" and report["schema_version"] == 7
    assert json.loads(run_cli("inspect", out, "--json").stdout)["format"] == "cudnn-bin"
    rows = json.loads(run_cli("explain", "keras", "GRU", "--json").stdout)
    assert rows[0]["gate_order"] == ["z", "r", "h"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sidecar", "report", "inspect", "conversion", "reports", "batch", "identify"])
def test_schemas_are_exported_and_documented(name):
    result = run_cli("schema", name)
    assert result.returncode == 0, result.stderr
    exported = json.loads(result.stdout)
    documented = json.loads((ROOT / "docs" / "schema" / f"{name}.schema.json").read_text())
    assert exported == documented, f"docs/schema/{name}.schema.json is stale: regenerate with `rnnconv schema {name}`"


@pytest.mark.slow
def test_schema_names_a_wrong_name():
    assert_clean_failure(run_cli("schema", "sidecars"), 2, "no document named 'sidecars'", "did you mean sidecar")


def test_verify_engines_come_from_the_registry():
    """Besides rnnconv's own (cuDNN, its numpy reference, auto), every engine is a format's, found by name."""
    from rnnconv.formats.catalog import ENGINES
    from rnnconv.verification.engines import select_engine

    offered = {e.name: fmt.name for fmt in registry.formats() for e in (fmt.engine, *fmt.plugin.more_engines) if e}
    assert set(offered) == set(ENGINES) - {"auto", "cudnn", "numpy"}
    for name in offered:
        assert select_engine(name).name == name
    reached = {m for m in imports_of(PACKAGE / "verification" / "engines.py") if m.startswith("rnnconv.formats.")}
    assert reached <= {"rnnconv.formats.registry", "rnnconv.formats.runtimes", "rnnconv.formats.runtimes.Engine",
                       "rnnconv.formats.catalog",
                       "rnnconv.formats.catalog.ENGINES", "rnnconv.formats.cudnn.reader",
                       "rnnconv.core.blob.Blob"}, reached  # fmt: skip


TESTS = ROOT / "tests"


def test_no_test_module_imports_a_framework_at_its_top():
    """The core tier (`pip install -e . pytest`, no framework) collects every test module: one that imports a
    framework at its top (what runs on import: its statements outside functions and classes) fails its collection
    there, unless an earlier statement skips the module without it (pytest.importorskip)."""
    from conftest import FRAMEWORKS

    found = []
    for path in sorted([*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py"), *(TESTS / "facts").glob("*.py")]):
        skipped: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "importorskip" and call.args:
                    first = call.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        skipped.add(first.value.split(".")[0])
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] in FRAMEWORKS and name.split(".")[0] not in skipped
            ]
    assert not found, found


def test_the_public_functions_stay_callable_once_every_module_is_imported():
    """Importing a subpackage sets its name on `rnnconv`: where that name is also a public function's (`formats`), the
    package answers the call; no other module shares a public function's name (`rnnconv.audit` was one: a second
    call found the module)."""
    script = (
        "import importlib, pkgutil, rnnconv\n"
        "for m in pkgutil.walk_packages(rnnconv.__path__, 'rnnconv.'):\n"
        "    if not m.name.startswith(('rnnconv.gpu', 'rnnconv.__main__')) and '.formats.' not in m.name:\n"
        "        importlib.import_module(m.name)\n"
        "assert list(rnnconv.formats()) and list(rnnconv.formats())\n"
        "names = [n for n in rnnconv.__all__ if n[0].islower() and n != '__version__']\n"
        "stale = [n for n in names if not callable(getattr(rnnconv, n))]\n"
        "assert not stale, stale\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_format_that_writes_has_its_test_facts():
    """Each format's test facts are one module named as its package (tests/facts): every format rnnconv writes runs
    its files in the conformance grid through its RUNTIME, and no facts module is a format's that does not exist."""
    from facts import RUNTIMES

    packages = {plugin.package.rpartition(".")[2] for plugin in catalog.plugins()}
    modules = {path.stem for path in (TESTS / "facts").glob("*.py") if path.stem != "__init__"}
    assert modules <= packages, modules - packages
    assert set(RUNTIMES) == {name for name, info in FORMAT_INFO.items() if info.writes}
