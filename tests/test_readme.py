"""The README's and the documentation's own examples, run as printed: the set-up command's conversion, the first three
things a user does, the Python blocks as scripts a user pastes. Each keeps the pages honest: a renamed field or a
changed default fails here, not in a user's hands. The pages' links are checked by `mkdocs build --strict` in CI;
the README's, which the site does not hold, here."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, doc_code, run_cli

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
# The commands' outputs go to /tmp, outside the checkout; here they go to the test's own folder.
TMP = "/tmp/"


def pasted(code: str, folder: Path) -> subprocess.CompletedProcess:
    """`code` pasted into a file and run with `python script.py` (no `if __name__ == "__main__":` guard, as users
    paste it), from a folder holding the shipped fixtures, /tmp/ being that folder."""
    (folder / "fixtures").symlink_to(FIXTURES)
    script = folder / "example.py"
    script.write_text(code.replace(TMP, f"{folder}/"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, str(script)], cwd=folder, capture_output=True, text=True, env=env, timeout=600
    )


def rnnconv_commands(block: str, folder: Path) -> list[list[str]]:
    """Each `.venv/bin/rnnconv ...` of a bash block (comments left out), /tmp/ being `folder`."""
    found = []
    for line in block.splitlines():
        words = shlex.split(line.replace(TMP, f"{folder}/"), comments=True)
        while ".venv/bin/rnnconv" in words:
            words = words[words.index(".venv/bin/rnnconv") + 1 :]
            found.append(words[: words.index("&&")] if "&&" in words else words)
    return found


@pytest.mark.needs("torch", "keras")
def test_the_python_api_page_runs_as_a_pasted_script(tmp_path):
    """docs/python.md's block runs through, jobs=2 included."""
    result = pasted(doc_code("docs/python.md"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for written in ("out/encoder.bin", "out/encoder.bin.json", "out/lstm.bin", "out/patched.h5", "out/r.json"):
        assert (tmp_path / written).is_file(), written
    assert not (tmp_path / "out" / "seq2seq.bin").exists()  # the batch's failing source wrote nothing


@pytest.mark.needs("torch", "keras")
def test_the_readme_python_block_runs(tmp_path):
    result = pasted(doc_code("README.md"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["match"]


def test_the_set_up_command_converts_outside_the_checkout(tmp_path):
    """The README's first command (after its install) writes its blob under /tmp, not into the checkout; the
    install page gives the same command."""
    block = doc_code("README.md", "bash")
    assert block == doc_code("docs/install.md", "bash")
    assert block.startswith("python3 -m venv .venv && .venv/bin/pip install . && ")
    (command,) = rnnconv_commands(block, tmp_path)
    assert command[-2:] == ["-o", f"{tmp_path}/lstm.bin"]
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    result = run_cli(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "lstm.bin").is_file() and (tmp_path / "lstm.bin.json").is_file()


def test_the_second_command_is_the_test_command():
    assert doc_code("README.md", "bash", after="Install everything the tests need").strip() == "bash .ci/run"


@pytest.mark.needs("torch", "keras")
def test_the_first_three_things_run_as_printed(tmp_path):
    """inspect, convert and verify on a shipped fixture, each exit 0, verify's verdict MATCH."""
    commands = rnnconv_commands(doc_code("README.md", "bash", after="## The first three things"), tmp_path)
    assert [command[0] for command in commands] == ["inspect", "convert", "verify"]
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    results = [run_cli(*command, cwd=tmp_path) for command in commands]
    for command, result in zip(commands, results):
        assert result.returncode == 0, (command, result.stderr)
    assert "bidi_lstm" in results[0].stdout and "MATCH" in results[2].stdout


def test_the_readme_says_first_what_verify_needs_and_each_extra_exists():
    """After the first install verify needs the source's framework: the README's first lines say which extra
    installs it, and every extra they name is one pyproject.toml declares."""
    import tomllib

    opening = README.split("\n## ", 1)[0]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = set(re.findall(r"pip install '\.\[(\w+)\]'", opening))
    assert {"torch", "keras", "onnx"} <= named <= set(extras), named
    assert "pip install --no-deps tf-keras" in opening and "rnnconv verify" in opening
    install = (DOCS / "install.md").read_text()
    assert set(re.findall(r"pip install '\.\[(\w+)\]'", install)) <= set(extras)


def test_the_readme_is_short_and_its_links_lead_somewhere():
    assert len(README.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links and all(not link.startswith("http") for link in links)  # the project stands alone
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def test_every_docs_python_block_compiles():
    """The blocks no test runs whole (an OpenVINO or ncnn loading recipe) are valid Python at least."""
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for number, block in enumerate(re.findall(r"^ *```python\n(.*?)^ *```", page.read_text(), re.S | re.M)):
            compile(block, f"{page.relative_to(ROOT)} block {number}", "exec")


def test_the_module_map_names_every_module():
    """docs/development.md's module map is written by hand: a module it does not name fails here."""
    page = (DOCS / "development.md").read_text()
    modules = sorted(path.relative_to(ROOT / "rnnconv").as_posix() for path in (ROOT / "rnnconv").rglob("*.py"))
    missing = [name for name in modules if f"`{name}`" not in page]
    assert not missing, f"docs/development.md's module map does not name {missing}"


def test_every_page_is_in_the_site():
    """mkdocs.yml's nav holds every page of docs/ (mkdocs itself fails on a nav entry without its page)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert [page for page in pages if f": {page}\n" not in nav] == []


def test_a_keras_2_source_without_tf_keras_says_both_installs(tmp_path):
    """Verify against a tf-keras file where tf-keras is missing: the hint works on a machine without TensorFlow."""
    from conftest import assert_clean_failure

    shadow = tmp_path / "no_tf_keras"
    shadow.mkdir()
    (shadow / "tf_keras.py").write_text("raise ImportError('No module named tf_keras')\n")
    blob = tmp_path / "x.bin"
    assert run_cli("convert", FIXTURES / "keras2" / "lstm.h5", blob).returncode == 0
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}
    result = run_cli("verify", blob, env=env)
    assert_clean_failure(result, 3, "pip install 'rnnconv[keras]' && pip install --no-deps tf-keras")
