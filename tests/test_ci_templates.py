"""The CI templates as their CI runs them, on a machine without the CI service: rnnconv's GitHub Action (action.yml:
its steps run the way the runner runs a composite action's, the inputs expanded into them, GITHUB_OUTPUT and
GITHUB_STEP_SUMMARY files), the workflow and the GitLab job in docs/ci/ (their rnnconv steps; the service's own
actions are the service's), and the pre-commit hook (`pre-commit try-repo`), with `verify-changed`, what it runs.

rnnconv is installed as each template installs it, from a copy of this checkout (the action's own, a wheel built of
it), offline: into an environment that sees this one's packages (its dependencies: no index is reached at test time).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, assert_clean_failure, run_cli
from test_verify import corrupted, every_cell, swap_gates

import rnnconv

yaml = pytest.importorskip("yaml")  # PyYAML: the test extra's (mkdocs, pre-commit); the templates are YAML
TAGGER = FIXTURES / "audit" / "tagger.pt"  # a GRU and an LSTM
ENCODER = FIXTURES / "torch" / "lstm_proj.pt"  # one LSTM
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
OFFLINE_PIP = "--no-deps --no-index --no-build-isolation"  # the action's pip-args, on a machine with no index
EXPRESSION = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


def checkout(where: Path) -> Path:
    """What a checkout of rnnconv holds that installing it needs (the action's `github.action_path`)."""
    where.mkdir()
    for name in ("action.yml", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, where / name)
    shutil.copytree(ROOT / "rnnconv", where / "rnnconv", ignore=shutil.ignore_patterns("__pycache__"))
    return where


def python_without_rnnconv(where: Path) -> Path:
    """A Python whose environment sees this one's packages (rnnconv's dependencies, pip and setuptools) but not its
    rnnconv: what a job has once it has set up Python and installed the frameworks, before installing rnnconv."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    (site,) = (where / "lib").glob("python*/site-packages")
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = where / "bin" / "python"
    assert subprocess.run([python, "-c", "import rnnconv"], cwd=where, capture_output=True).returncode != 0
    return python


def expand(text: str, context: dict[str, str]) -> str:
    """A workflow's ${{ name }} expressions, as the runner expands them (a name the runner would not know fails)."""

    def value(found: re.Match[str]) -> str:
        assert found.group(1) in context, f"{found.group(1)} is given by nothing"
        return context[found.group(1)]

    return EXPRESSION.sub(value, str(text))


def run_action(
    action: Path, inputs: dict[str, str], workspace: Path, temp: Path, env: dict[str, str], installed: bool = False
) -> dict:
    """action.yml's composite steps, as the runner runs them: each input given or defaulted, expressions expanded,
    each `shell: bash` step run by `bash --noprofile --norc -eo pipefail` in the workspace with GITHUB_OUTPUT (read
    back as the step's outputs) and GITHUB_STEP_SUMMARY, the steps after a failed one skipped. `installed`: the
    install step ran already in this environment (a test runs the action again, as a later job would)."""
    declared = yaml.safe_load((action / "action.yml").read_text())
    assert declared["runs"]["using"] == "composite"
    assert set(inputs) <= set(declared["inputs"]), set(inputs) - set(declared["inputs"])
    context = {"github.action_path": str(action), "runner.temp": str(temp)}
    for name, spec in declared["inputs"].items():
        assert name in inputs or not spec.get("required"), f"input {name} is required"
        context[f"inputs.{name}"] = str(inputs.get(name, spec.get("default", "")))
    summary = temp / "step_summary.md"
    summary.write_text("")
    code = 0
    for number, step in enumerate(declared["runs"]["steps"]):
        assert step["shell"] == "bash" and "uses" not in step, step
        if installed and step["id"] == "install":
            continue
        outputs, script = temp / f"output_{number}", temp / f"step_{number}.sh"
        outputs.write_text("")
        script.write_text(expand(step["run"], context))
        variables = {name: expand(value, context) for name, value in step.get("env", {}).items()}
        variables.update(GITHUB_OUTPUT=str(outputs), GITHUB_STEP_SUMMARY=str(summary), GITHUB_WORKSPACE=str(workspace))
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            capture_output=True,
            text=True,
            env={**os.environ, **env, **variables},
            timeout=600,
        )
        for line in outputs.read_text().splitlines():
            name, _, value = line.partition("=")
            context[f"steps.{step['id']}.outputs.{name}"] = value
        if done.returncode != 0:
            code = done.returncode
            break
    # the action's outputs: its steps', also where a step failed after setting them (a step not run gives '')
    given = {
        name: EXPRESSION.sub(lambda found: context.get(found.group(1), ""), spec["value"])
        for name, spec in declared["outputs"].items()
    }
    return {"code": code, "outputs": given, "summary": summary.read_text(), "log": done.stdout + done.stderr}


@pytest.mark.slow
@pytest.mark.needs("torch", "setuptools")  # rnnconv built from its checkout without an index: its build backend here
def test_the_action_installs_rnnconv_from_its_checkout_verifies_and_writes_the_summary_and_outputs(tmp_path):
    action, workspace = checkout(tmp_path / "action"), tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(TAGGER, workspace / "tagger.pt")
    python = python_without_rnnconv(tmp_path / "python")
    inputs = {"python": str(python), "pip-args": OFFLINE_PIP}
    first = {"target": "enc.bin", "source": "tagger.pt", "convert": "true", "layer": "gru", "args": "--seq-len 6"}
    run = run_action(action, {**inputs, **first}, workspace, tmp_path, {})
    assert run["code"] == 0, run["log"]
    found = subprocess.run(
        [python, "-c", "import rnnconv; print(rnnconv.__file__)"], cwd=workspace, capture_output=True, text=True
    )
    assert found.stdout.startswith(str(tmp_path / "python"))  # the rnnconv verify ran is the action's, installed
    assert run["outputs"] == {
        "verdict": "match",
        "exit-code": "0",
        "report": "verify-out/verify-report.json",
        "junit": "verify-out/verify-junit.xml",
        "summary": "verify-out/verify-summary.md",
    }
    assert run["summary"].startswith("### ✅ rnnconv verify: MATCH \\(exit 0\\)")
    assert "| gru | ✅ MATCH |" in run["summary"] and (workspace / "verify-out" / "verify-junit.xml").exists()

    corrupted(workspace / "enc.bin", workspace / "bad.bin", swap_gates("r", "z", every_cell))
    run = run_action(action, {**inputs, "target": "bad.bin", "source": "tagger.pt"}, workspace, tmp_path, {}, True)
    assert run["code"] == 1 and run["outputs"]["verdict"] == "mismatch" and run["outputs"]["exit-code"] == "1"
    assert "❌ MISMATCH" in run["summary"] and "look swapped" in run["summary"]

    audit = {"target": "deployed.onnx", "source": "tagger.pt", "layer": "/gru/GRU=gru"}  # pairs: the audit
    shutil.copy(FIXTURES / "audit" / "tagger_encoder.onnx", workspace / "deployed.onnx")
    run = run_action(action, {**inputs, **audit}, workspace, tmp_path, {}, installed=True)
    assert run["code"] == 0 and run["outputs"]["verdict"] == "match", run["log"]
    assert "➖ NOT-DEPLOYED" in run["summary"]


@pytest.mark.slow
@pytest.mark.needs("torch", "setuptools")
def test_the_github_workflow_runs_the_action_as_written(tmp_path):
    """docs/ci/github-actions.yml's own rnnconv step, with its inputs (SOURCE and BLOB set, as its comment asks; the
    service's actions, checkout, setup-python and the uploads, are the service's): the files it keeps are there."""
    workflow = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions.yml").read_text())
    (job,) = workflow["jobs"].values()
    env = {**job["env"], "SOURCE": "models/encoder.pt"}
    workspace = tmp_path / "workspace"
    (workspace / "models").mkdir(parents=True)
    shutil.copy(ENCODER, workspace / "models" / "encoder.pt")
    ours = [step for step in job["steps"] if step.get("uses", "").endswith("/rnnconv@REF")]
    services = [step["uses"].split("@")[0] for step in job["steps"] if step not in ours]
    assert len(ours) == 1 and set(services) <= {
        "actions/checkout",
        "actions/setup-python",
        "actions/upload-artifact",
        "mikepenz/action-junit-report",
    }
    inputs = {name: expand(value, {f"env.{k}": v for k, v in env.items()}) for name, value in ours[0]["with"].items()}
    offline = {"python": str(python_without_rnnconv(tmp_path / "python")), "pip-args": OFFLINE_PIP}
    run = run_action(checkout(tmp_path / "action"), {**inputs, **offline}, workspace, tmp_path, {})
    assert run["code"] == 0, run["log"]
    assert run["outputs"]["verdict"] == "match" and (workspace / "build" / "encoder.bin").exists()
    kept = [step["with"].get("path") or step["with"].get("report_paths") for step in job["steps"] if step.get("if")]
    assert kept == ["verify-out/", "verify-out/verify-junit.xml"]  # kept also when verify failed
    assert all((workspace / path).exists() for path in kept)
    assert "| " in run["summary"] and "✅ MATCH" in run["summary"]


@pytest.mark.slow
@pytest.mark.needs("torch", "matplotlib", "setuptools")
def test_the_gitlab_job_installs_rnnconv_from_where_it_is_and_runs_the_recipe(tmp_path):
    """docs/ci/gitlab-ci.yml's script and after_script as the runner runs them (variables as the environment; the
    script's lines in one shell, stopping at the first that fails), rnnconv installed from a wheel built of this
    checkout (RNNCONV_FROM, as its comment offers), the source set."""
    (job,) = yaml.safe_load((ROOT / "docs" / "ci" / "gitlab-ci.yml").read_text()).values()
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(wheels), str(checkout(tmp_path / "rnnconv"))],
        check=True,
        env={**os.environ, **OFFLINE},
        timeout=300,
    )
    (wheel,) = wheels.glob("rnnconv-*.whl")
    workspace = tmp_path / "workspace"
    (workspace / "models").mkdir(parents=True)
    (workspace / "docs" / "ci").mkdir(parents=True)
    shutil.copy(ENCODER, workspace / "models" / "encoder.pt")
    shutil.copy(ROOT / "docs" / "ci" / "verify-model.sh", workspace / "docs" / "ci")  # as its comment asks
    python = python_without_rnnconv(tmp_path / "python")
    variables = {**job["variables"], "RNNCONV_FROM": wheel.as_uri(), "SOURCE": "models/encoder.pt"}
    env = {**os.environ, **OFFLINE, **variables, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    script = subprocess.run(
        ["bash", "-e", "-c", "\n".join(job["script"])], cwd=workspace, env=env, capture_output=True, text=True
    )
    assert script.returncode == 0, script.stdout + script.stderr
    assert "exit 0, the blob computes what its source computes" in script.stderr
    after = subprocess.run(["bash", "-c", "\n".join(job["after_script"])], cwd=workspace, env=env, capture_output=True)
    assert after.returncode == 0 and "✅ MATCH" in after.stdout.decode()
    for path in [*job["artifacts"]["paths"], job["artifacts"]["reports"]["junit"], "verify-out/verify-errors.svg"]:
        assert (workspace / path).exists(), path


def committed(repo: Path, *files: Path) -> None:
    for file in files:
        subprocess.run(["git", "add", file.name], cwd=repo, check=True)
    identity = ["-c", "user.name=rnnconv tests", "-c", "user.email=tests@rnnconv.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *identity, "commit", "-q", "-m", "models"], cwd=repo, check=True)


def repository(tmp_path: Path) -> Path:
    """A repository of a checkpoint, a blob made from it and a copy of the blob with two gates swapped."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shutil.copy(TAGGER, repo / "tagger.pt")
    rnnconv.convert(repo / "tagger.pt", repo / "enc.bin", layer="gru")
    corrupted(repo / "enc.bin", repo / "bad.bin", swap_gates("r", "z", every_cell))
    committed(repo, *(repo / name for name in ("tagger.pt", "enc.bin", "enc.bin.json", "bad.bin", "bad.bin.json")))
    return repo


@pytest.mark.slow
@pytest.mark.needs("torch", "pre_commit")
def test_the_pre_commit_hook_passes_a_good_file_and_fails_a_gate_swap(tmp_path):
    repo = repository(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the rnnconv of the environment
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
    }

    def try_repo(*files: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "rnnconv-verify", "--verbose"]
        return subprocess.run([*command, "--files", *files], cwd=repo, env=env, capture_output=True, text=True)

    good = try_repo("enc.bin")
    assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
    assert "MATCH: 1 of 1 RNN matches" in good.stdout
    bad = try_repo("bad.bin")
    assert bad.returncode == 1 and "Failed" in bad.stdout and "MISMATCH" in bad.stdout, bad.stdout + bad.stderr
    assert "Gates r (reset gate) and z (update gate) look swapped" in " ".join(bad.stdout.split())
    source = try_repo("tagger.pt")  # the source changed: what was made from it is verified
    assert source.returncode == 1 and "MISMATCH: 1 of 2 RNNs match; 1 mismatch" in source.stdout, source.stdout


def test_the_hook_looks_at_every_format_rnnconv_reads():
    """The hook's `files` pattern takes every name each format's files have (a new format must be added to it)."""
    from rnnconv.formats.catalog import FORMAT_INFO

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    pattern = re.compile(hook["files"])
    names = {f"m{suffix}" for info in FORMAT_INFO.values() for suffix in (*info.read_suffixes, *info.default_for)}
    names |= {"m.bin.json", "p.msgpack.rnnconv.json", "ckpt.data-00000-of-00001", "ckpt.meta"}
    names |= {"saved_model.pb", "keras_metadata.pb"}  # a source's parts its digest covers (Format.source_parts)
    assert not [name for name in names if not pattern.search(f"models/{name}")]
    assert not pattern.search("README.md") and not pattern.search("train.py")
    assert hook["entry"] == "rnnconv verify-changed" and hook["language"] == "unsupported"


@pytest.mark.needs("torch")
def test_verify_changed_verifies_what_a_change_touches(tmp_path):
    """A blob changed, its sidecar changed, its source changed: each verifies the blobs it touches (and what was made
    from a blob touched); a file of no RNN rnnconv wrote verifies nothing, and passes."""
    repo = repository(tmp_path)
    back = repo / "back.pt"
    assert run_cli("cudnn-to-torch", repo / "enc.bin", "-o", back, cwd=repo).returncode == 0
    committed(repo, back)

    def verified(*files: str) -> tuple[int, list[tuple[str, str]]]:
        result = run_cli("verify-changed", *files, "--json", cwd=repo)
        return result.returncode, [(Path(r["blob"]).name, r["verdict"]) for r in json.loads(result.stdout)]

    assert verified("enc.bin") == (0, [("enc.bin", "match"), ("back.pt", "match")])
    assert verified("enc.bin.json") == (0, [("enc.bin", "match"), ("back.pt", "match")])
    assert verified("bad.bin") == (1, [("bad.bin", "mismatch")])
    code, rows = verified("tagger.pt")
    assert code == 1 and sorted(rows) == [("bad.bin", "mismatch"), ("enc.bin", "match")]
    (repo / "notes.txt").write_text("no model")
    nothing = run_cli("verify-changed", "notes.txt", cwd=repo)
    assert nothing.returncode == 0 and nothing.stdout.startswith("nothing to verify")
    assert_clean_failure(run_cli("verify-changed", "gone.bin", cwd=repo), 2, "gone.bin does not exist")
