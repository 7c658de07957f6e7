"""The README's own examples, run exactly as printed: its Python block as a script a user pastes, and its first
command. Each keeps the README honest: a renamed field or a changed default fails here, not in a user's hands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
