"""Node.js and the npm packages rnnconv runs in it (TensorFlow.js), found without running anything from a model:
the `node` on PATH, and a `node_modules` folder named by RNNCONV_NODE_MODULES or else installed by `npm ci` in a
checkout of rnnconv (its package.json and package-lock.json)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

NODE_MODULES_VARIABLE: Final = "RNNCONV_NODE_MODULES"
SOURCE_TREE: Final = Path(__file__).resolve().parents[2]  # where package.json is, in a checkout or editable install
VERSION_TIMEOUT: Final = 20  # seconds for `node --version`


def node() -> str | None:
    """The node executable, or None."""
    return shutil.which("node")


def node_modules() -> Path:
    """The node_modules folder rnnconv's npm packages are looked for in."""
    named = os.environ.get(NODE_MODULES_VARIABLE)
    return Path(named) if named else SOURCE_TREE / "node_modules"


def package_version(name: str) -> str | None:
    """The version of an npm package installed in `node_modules()`, or None."""
    try:
        manifest = json.loads((node_modules() / name / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = manifest.get("version") if isinstance(manifest, dict) else None
    return found if isinstance(found, str) else None


def node_version() -> str | None:
    """The version of the node on PATH (without its v), or None."""
    executable = node()
    if executable is None:
        return None
    try:
        done = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().lstrip("v") or None if done.returncode == 0 else None


def version(name: str) -> str | None:
    """`node`'s version, or an npm package's."""
    return node_version() if name == "node" else package_version(name)
