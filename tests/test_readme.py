"""The README's own examples, run exactly as printed: its Python block as a script a user pastes, and its first
command. Each keeps the README honest: a renamed field or a changed default fails here, not in a user's hands."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def python_block() -> str:
    """The README's Python example (the block under '## Python')."""
    section = README.split("\n## Python\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "README.md has no ```python block under ## Python"
    return found.group(1)


def test_the_readme_python_block_runs_as_a_pasted_script(tmp_path):
    """Pasted into a file and run with `python script.py` (no `if __name__ == "__main__":` guard, as users paste
    it), from a folder holding the shipped fixtures, it runs through, jobs=2 included."""
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    script = tmp_path / "example.py"
    script.write_text(python_block())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for written in ("out/encoder.bin", "out/encoder.bin.json", "out/lstm.bin", "out/patched.h5", "out/r.json"):
        assert (tmp_path / written).is_file(), written
    assert not (tmp_path / "out" / "seq2seq.bin").exists()  # the batch's failing source wrote nothing


def test_the_readme_says_first_what_verify_needs_and_each_extra_exists():
    """After the first install verify needs the source's framework: the README's first lines say which extra
    installs it, and every extra they name is one pyproject.toml declares."""
    import tomllib

    opening = README.split("\n## ", 1)[0]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = set(re.findall(r"pip install '\.\[(\w+)\]'", opening))
    assert {"torch", "keras", "onnx"} <= named <= set(extras), named
    assert "pip install --no-deps tf-keras" in opening and "rnnconv verify" in opening


def test_a_keras_2_source_without_tf_keras_says_both_installs(tmp_path):
    """Verify against a tf-keras file where tf-keras is missing: the hint works on a machine without TensorFlow."""
    from conftest import FIXTURES, assert_clean_failure, run_cli

    shadow = tmp_path / "no_tf_keras"
    shadow.mkdir()
    (shadow / "tf_keras.py").write_text("raise ImportError('No module named tf_keras')\n")
    blob = tmp_path / "x.bin"
    assert run_cli("convert", FIXTURES / "keras2" / "lstm.h5", blob).returncode == 0
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}
    result = run_cli("verify", blob, env=env)
    assert_clean_failure(result, 3, "pip install 'rnnconv[keras]' && pip install --no-deps tf-keras")
