"""Orbax checkpoints (fixtures/orbax, saved by Orbax itself): each reads, bit for bit, what Orbax restores; each
model converts to what Flax computes on the params Orbax restores, from non-zero initial states (slow: Flax compiles
each cell); inspect lists each RNN with its sizes; --layer picks by path; verify runs the checkpoint in Flax; the
source's digest covers every file; a folder that is not a plain checkpoint, or damaged, is refused in a sentence."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, ROOT, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core import reference
from rnnconv.core.contracts import Provenance
from rnnconv.formats import registry

ORBAX = FIXTURES / "orbax"
NNX_STEP = ORBAX / "nnx_manager" / "1"
# fixture folder -> (format, the RNN's name, mode, layers, bidirectional)
CHECKPOINTS = {
    "lstm_bi2": ("flax", "params", "lstm", 2, True),
    "gru": ("flax", "params", "gru", 1, False),
    "gru_zarr": ("flax", "params", "gru", 1, False),
    "nnx_manager/1": ("flax-nnx", "layers", "lstm", 2, False),
}
IN, H, T, B = 5, 7, 6, 3


def inputs(spec):
    rng = np.random.default_rng(11)
    pseudo = spec.num_layers * spec.num_directions
    return {
        "x": rng.normal(0, 0.8, (T, B, IN)).astype(np.float32),
        "h0": rng.normal(0, 0.5, (pseudo, B, H)).astype(np.float32),
        "c0": rng.normal(0, 0.5, (pseudo, B, H)).astype(np.float32),
        "lengths": None,
    }


@pytest.mark.needs("tensorstore", "jax", "orbax.checkpoint")
def test_each_checkpoint_reads_exactly_what_orbax_restores():
    """Every param rnnconv reads without JAX (of the storage of each: OCDBT, per-array zarr, a manager's step) is,
    bit for bit, what Orbax's own restore gives; what the Flax cells then compute of them is the next test's."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    for name, (fmt, *_) in CHECKPOINTS.items():
        reader = registry.get(fmt)._module("reader")
        source = registry.source_file(ORBAX / name)
        ours, orbax = reader.load_tree(source), reader.restored(source)

        def leaves(tree, path=()):
            if isinstance(tree, dict):
                for key, value in tree.items():
                    yield from leaves(value, (*path, key))
            elif isinstance(tree, np.ndarray):
                yield path, tree

        restored = dict(leaves(orbax))
        read = dict(leaves(ours))
        assert read and read.keys() == restored.keys(), name
        for key, array in read.items():
            assert array.dtype == restored[key].dtype and np.array_equal(array, restored[key]), (name, key)


@pytest.mark.slow
@pytest.mark.needs("tensorstore", "jax", "flax", "orbax.checkpoint")
@pytest.mark.parametrize("name", ["lstm_bi2", "nnx_manager/1"])  # the GRU's is verify's, in the CLI test below
def test_each_checkpoint_converts_to_what_flax_computes_on_what_orbax_restores(name):
    """The canonical RNN read without JAX, run by cuDNN's equations, against Flax's cells on Orbax's own restore."""
    fmt, rnn_name, mode, layers, bidirectional = CHECKPOINTS[name]
    with rnnconv.load(ORBAX / name) as (rnn,):
        spec = rnn.spec
        assert (spec.mode, spec.input_size, spec.hidden_size, spec.num_layers, spec.bidirectional) == (
            mode, IN, H, layers, bidirectional,
        )  # fmt: skip
        given = inputs(spec)
        ours = reference.forward(spec, rnn.param, given["x"], given["h0"], given["c0"] if mode == "lstm" else None)
    source = registry.source_file(ORBAX / name)
    flax_ran, how = registry.get(fmt).run(source, Provenance(layer=rnn_name), spec, given)
    assert "flax" in how
    error = max(float(np.abs(np.asarray(a) - b).max()) for a, b in zip(ours, flax_ran.values()) if b is not None)
    LARGEST_ERRORS[f"orbax {name}"] = error
    assert error <= 1e-5


@pytest.mark.needs("tensorstore")
def test_inspect_lists_each_rnn_with_its_sizes():
    for name, (fmt, rnn_name, mode, layers, bidirectional) in CHECKPOINTS.items():
        result = run_cli("inspect", ORBAX / name, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["format"] == f"{fmt}-orbax"
        (entry,) = report["rnns"]
        spec = entry["spec"]
        assert entry["name"] == rnn_name and spec["mode"] == mode, entry
        assert (spec["input_size"], spec["hidden_size"], spec["num_layers"], spec["bidirectional"]) == (
            IN, H, layers, bidirectional,
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.needs("tensorstore", "jax", "flax", "orbax.checkpoint")
def test_convert_with_layer_and_verify_runs_the_checkpoint_in_flax(tmp_path):
    out = tmp_path / "gru.pt"
    result = run_cli("convert", ORBAX / "gru", out, "--layer", "params")
    assert result.returncode == 0, result.stderr
    result = run_cli("verify", out, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "match", report
    assert_clean_failure(run_cli("convert", ORBAX / "gru", tmp_path / "x.pt", "--layer", "cell"), 2, "params")


def copy_of(tmp_path, name="gru"):
    folder = tmp_path / name
    shutil.copytree(ORBAX / name, folder)
    return folder


def damaged_metadata(folder, change):
    document = json.loads((folder / "_METADATA").read_text())
    change(document)
    (folder / "_METADATA").write_text(json.dumps(document))


def first_leaf(document):
    return next(iter(document["tree_metadata"].values()))


HOSTILE = {
    "a symbolic link in it": (lambda f: (f / "elsewhere").symlink_to("/etc"), "symbolic link"),
    "a data file cut short": (
        lambda f: [p.write_bytes(p.read_bytes()[:20]) for p in f.rglob("d/*")],
        "is damaged or cut short (TensorStore: OUT_OF_RANGE); save the checkpoint again",
    ),
    "no data files": (lambda f: [shutil.rmtree(p) for p in sorted(f.rglob("d"))], "cannot be read"),
    "a chunk missing": (  # not read as the fill value: refused, as Orbax refuses it
        lambda f: (f / "params.cell.hn.kernel" / "0.0").unlink(),
        "'params.cell.hn.kernel' cannot be read: its stored data (file params.cell.hn.kernel/0.0) is missing",
    ),
    "a chunk damaged": (
        lambda f: (f / "params.cell.in.bias" / "0").write_bytes(b"not zstd"),
        "its stored data (file params.cell.in.bias/0) is damaged or cut short (TensorStore: FAILED_PRECONDITION)",
    ),
    "a huge declared shape": (
        lambda f: damaged_metadata(f, lambda d: first_leaf(d)["value_metadata"].update(write_shape=[2**45, 2**45])),
        "write_shape",
    ),
    "another shape": (
        lambda f: damaged_metadata(f, lambda d: first_leaf(d)["value_metadata"].update(write_shape=[3])),
        "not the [3]",
    ),
    "zarr3": (lambda f: damaged_metadata(f, lambda d: d.update(use_zarr3=True)), "use_zarr3"),
    "a key with a slash": (
        lambda f: damaged_metadata(f, lambda d: first_leaf(d)["key_metadata"][0].update(key="../x")),
        "no name Orbax gives",
    ),
    "a leaf missing from the store": (
        lambda f: damaged_metadata(f, lambda d: first_leaf(d)["key_metadata"][0].update(key="other")),
        "missing from the checkpoint",
    ),
    "not JSON": (lambda f: (f / "_METADATA").write_bytes(b'{"tree_metadata": {'), "not valid JSON"),
}


@pytest.mark.needs("tensorstore")
@pytest.mark.parametrize("damage", sorted(HOSTILE))
def test_a_damaged_checkpoint_is_refused_in_a_sentence(damage, tmp_path):
    change, phrase = HOSTILE[damage]
    folder = copy_of(tmp_path, "gru_zarr" if "chunk" in damage else "gru")
    change(folder)
    result = run_cli("convert", folder, tmp_path / "out.pt")
    assert_clean_failure(result, 2, phrase)
    assert "TensorStore({" not in result.stderr and "at byte" not in result.stderr  # none of its internal text
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.needs("tensorstore")
def test_the_source_digest_covers_every_file_of_the_checkpoint(tmp_path):
    """A change to one array file alone (bytes no read reaches) is seen by verify (its warning, without the run that
    costs seconds) and by verify-changed."""
    from pathlib import Path

    from rnnconv.core.contracts import Sidecar
    from rnnconv.verification.changed import made_from
    from rnnconv.verification.subject import source_changed

    folder = copy_of(tmp_path)
    blob = tmp_path / "gru.bin"
    rnnconv.convert(folder, blob)
    recorded = Sidecar.model_validate_json((tmp_path / "gru.bin.json").read_text()).source
    data = max((folder / "ocdbt.process_0" / "d").iterdir(), key=lambda p: p.stat().st_size)
    assert made_from(blob, [recorded], [data])  # verify-changed verifies what was made from it
    assert not made_from(blob, [recorded], [tmp_path / "gru.bin.json"])
    assert source_changed(recorded, Path(recorded.path)) == []
    data.write_bytes(data.read_bytes() + b"\0")
    (warning,) = source_changed(recorded, Path(recorded.path))
    assert "or a file read with it" in warning and "changed since" in warning, warning
    with rnnconv.load(folder) as (rnn,):  # the bytes added are none a read reaches: only the digest tells
        assert rnn.spec.mode == "gru"
    import yaml

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())  # the hook looks at each such file
    for name in [data, folder / "manifest.ocdbt", FIXTURES / "orbax/gru_zarr/params.cell.hn.kernel/0.0"]:
        assert re.search(hook["files"], str(name.relative_to(tmp_path if folder in name.parents else ROOT))), name


@pytest.mark.needs("tensorstore", "jax", "orbax.checkpoint")
def test_a_restore_orbax_refuses_is_said_naming_the_file_and_leaves_nothing_pending(tmp_path):
    """Orbax's restore closes its event loop as soon as one read fails: the reads still running then called into a
    closed loop from TensorStore's threads ("Event loop is closed" tracebacks at exit). Its loops now drain first;
    and a metadata file only Orbax reads is checked, and named, before Orbax is called."""
    import asyncio

    from rnnconv.formats import _orbax

    folder = copy_of(tmp_path)
    (folder / "array_metadatas" / "process_0").write_bytes(b"")
    with rnnconv.load(folder) as (rnn,):
        spec = rnn.spec
    with pytest.raises(rnnconv.errors.BadInput, match="array_metadatas/process_0 cannot be read: it is not valid JSON"):
        registry.get("flax").run(folder / "_METADATA", Provenance(layer="params"), spec, {})
    (folder / "array_metadatas" / "process_0").write_bytes((ORBAX / "gru/array_metadatas/process_0").read_bytes())
    sharding = folder / "_sharding"
    sharding.write_bytes(sharding.read_bytes() + b" " * 100_000)  # as large as a large model's: checked whole
    assert "params" in registry.get("flax")._module("reader").restored(folder / "_METADATA")
    finished, started = [], []

    async def read():
        await asyncio.sleep(0.05)
        finished.append(True)

    async def restore():  # as Orbax's run_sync runs one: a read begun, then a failure, then the loop closed
        started.append(asyncio.ensure_future(read()))
        raise ValueError("one read failed")

    with _orbax._draining_loops():
        loop = asyncio.new_event_loop()
        with pytest.raises(ValueError):
            loop.run_until_complete(restore())
        loop.close()
    assert finished == [True] and loop.is_closed()
    assert not isinstance(asyncio.new_event_loop(), _orbax._DrainingLoop)  # only while Orbax restores


def test_folders_of_several_are_refused_naming_what_to_pick(tmp_path):
    assert_clean_failure(run_cli("inspect", ORBAX / "nnx_manager"), 2, "CheckpointManager", "nnx_manager/1")
    step = tmp_path / "step"
    shutil.copytree(NNX_STEP, step)
    shutil.copytree(NNX_STEP / "state", step / "other")
    assert_clean_failure(run_cli("inspect", step), 2, "several items", "other, state")


def test_without_tensorstore_the_refusal_names_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tensorstore", None)
    with pytest.raises(rnnconv.errors.BackendMissing, match=r"rnnconv\[orbax\]"):
        rnnconv.inspect(ORBAX / "gru")
