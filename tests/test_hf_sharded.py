"""Hugging Face sharded safetensors (fixtures by transformers' save_pretrained): the index or its folder converts and
computes what PyTorch computes with the shards loaded by safetensors itself; a shard read alone is refused naming
its index; an RNN whose parameters stop short, in any checkpoint, is refused and never read as a smaller one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core import reference
from rnnconv.formats.cudnn.reader import open_bin

SHARDED = FIXTURES / "hf_sharded"
INDEX = "model.safetensors.index.json"
MODULES = {"lstm": lambda: torch.nn.LSTM(6, 9, num_layers=2, bidirectional=True), "gru": lambda: torch.nn.GRU(4, 5, 2)}


def loaded_by_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    """The checkpoint as transformers loads it: every shard its index names, read by safetensors."""
    shards = set(json.loads((folder / INDEX).read_text())["weight_map"].values())
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(shards):
        state.update(safetensors_torch.load_file(folder / shard))
    return state


def module_of(name: str) -> torch.nn.Module:
    module = MODULES[name]()
    state = loaded_by_safetensors(SHARDED / name)
    module.load_state_dict({k.removeprefix("rnn."): v for k, v in state.items() if k.startswith("rnn.")}, strict=True)
    return module


def torch_outputs(module: torch.nn.Module, lstm: bool, x, h0, c0) -> list[np.ndarray]:
    with torch.no_grad():
        if lstm:
            y, (h, c) = module(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
            return [y.numpy(), h.numpy(), c.numpy()]
        y, h = module(torch.from_numpy(x), torch.from_numpy(h0))
        return [y.numpy(), h.numpy()]


@pytest.mark.parametrize(("name", "given"), [("lstm", INDEX), ("gru", INDEX), ("lstm", ""), ("gru", "")])
def test_the_index_or_its_folder_computes_what_pytorch_computes(name, given, tmp_path):
    source = SHARDED / name / given if given else SHARDED / name
    out = tmp_path / f"{name}.bin"
    result = run_cli("convert", source, out)
    assert result.returncode == 0, result.stderr
    blob = open_bin(out)
    spec = blob.spec
    assert (spec.num_layers, spec.bidirectional) == ((2, True) if name == "lstm" else (2, False))
    rng = np.random.default_rng(46)
    pseudo = spec.num_layers * spec.num_directions
    x = rng.normal(0, 0.8, (7, 3, spec.input_size)).astype(np.float32)
    h0 = rng.normal(0, 0.5, (pseudo, 3, spec.hidden_size)).astype(np.float32)
    c0 = rng.normal(0, 0.5, (pseudo, 3, spec.hidden_size)).astype(np.float32)
    lstm = spec.mode == "lstm"
    expected = torch_outputs(module_of(name), lstm, x, h0, c0)
    got = reference.forward(spec, blob.param, x, h0, c0 if lstm else None)
    worst = max(float(np.abs(g - e).max()) for g, e in zip(got, expected))
    LARGEST_ERRORS[f"hf sharded {name} ({given or 'folder'})"] = worst
    assert worst < 1e-5, worst
    with rnnconv.load(source) as (rnn,):
        assert rnn.source.format == "torch-sharded"
        assert rnn.source.path == str((SHARDED / name / INDEX).resolve())


def test_verify_runs_the_sharded_checkpoint_in_pytorch(tmp_path):
    out = tmp_path / "gru.pt"
    assert run_cli("convert", SHARDED / "gru", out).returncode == 0
    result = run_cli("verify", out, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "match"
    assert report["source"]["format"] == "torch-sharded"


def test_inspect_lists_the_rnn_of_the_index_and_of_the_folder():
    for source in (SHARDED / "lstm", SHARDED / "lstm" / INDEX):
        report = rnnconv.inspect(source)
        assert report.format == "torch-sharded"
        (entry,) = report.rnns
        assert entry.converts and entry.spec.num_layers == 2 and entry.spec.bidirectional


def test_a_shard_beside_its_index_is_refused_naming_the_index(tmp_path):
    shard = SHARDED / "lstm" / "model-00001-of-00006.safetensors"  # rnn.*_l0 alone: a 1-layer LSTM, read alone
    for command in (["convert", shard, tmp_path / "out.bin"], ["inspect", shard]):
        assert_clean_failure(run_cli(*command), 2, "is one of the 6 shards of the checkpoint", INDEX, "instead")
    assert not list(tmp_path.iterdir())


def test_a_shard_without_its_index_is_refused_by_its_name(tmp_path):
    shard = shutil.copy(SHARDED / "lstm" / "model-00001-of-00006.safetensors", tmp_path)
    result = run_cli("convert", shard, tmp_path / "out.bin")
    assert_clean_failure(result, 2, "by its name, shard 1 of 6 of a sharded checkpoint", "no index beside it names it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model-00001-of-00006.safetensors"]


def test_a_shard_renamed_is_refused_where_its_rnn_is_visibly_incomplete(tmp_path):
    for number, missing in [(4, "less layer 0"), (6, "less layer 0, layer 1's forward direction")]:
        shard = tmp_path / f"part{number}.safetensors"
        shutil.copy(SHARDED / "lstm" / f"model-0000{number}-of-00006.safetensors", shard)
        assert_clean_failure(run_cli("convert", shard, tmp_path / "out.bin"), 2, "RNN 'rnn' is incomplete", missing)
        (entry,) = rnnconv.inspect(shard).rnns
        assert not entry.converts and "is incomplete" in entry.reason


@pytest.mark.parametrize(
    ("dropped", "phrase"),
    [
        ("_l1_reverse", "2-layer bidirectional RNN less layer 1's reverse direction"),
        ("_l0", "3-layer bidirectional RNN less layer 0 (its parameters stop short"),
        ("_l1", "3-layer bidirectional RNN less layer 1 (its parameters stop short"),
        ("weight_ih_l0", "its first cell has no weight_ih"),
    ],
)
@pytest.mark.parametrize("kind", ["safetensors", "pt"])
def test_a_state_dict_cut_down_is_refused_never_read_smaller(dropped, phrase, kind, tmp_path):
    torch.manual_seed(3)
    layers = 2 if dropped == "_l1_reverse" else 3
    state = torch.nn.LSTM(4, 6, num_layers=layers, bidirectional=True).state_dict()
    kept = {k: v for k, v in state.items() if not (k.endswith(dropped) or (dropped + "_") in k or k == dropped)}
    assert len(kept) < len(state)
    path = tmp_path / f"cut.{kind}"
    (safetensors_torch.save_file if kind == "safetensors" else torch.save)(kept, path)
    assert_clean_failure(run_cli("convert", path, tmp_path / "out.bin"), 2, phrase)
    assert not (tmp_path / "out.bin").exists()


def test_an_mlx_stack_missing_a_direction_is_refused(tmp_path):
    torch.manual_seed(4)
    pt = tmp_path / "bi.pt"
    torch.save(torch.nn.GRU(3, 4, num_layers=2, bidirectional=True).state_dict(), pt)
    whole = tmp_path / "bi.mlx.safetensors"
    assert run_cli("convert", pt, whole).returncode == 0
    tensors = safetensors_torch.load_file(whole)
    cut = tmp_path / "cut.safetensors"
    safetensors_torch.save_file({k: v for k, v in tensors.items() if not k.startswith("layers.1.1.")}, cut)
    assert_clean_failure(run_cli("convert", cut, tmp_path / "out.bin"), 2, "less layer 1's reverse direction")
    entries = rnnconv.inspect(cut).rnns  # the stack, and each module of it alone: none converts
    assert [e.name for e in entries] == ["layers", "layers.0.0", "layers.0.1", "layers.1.0"]
    assert all(not entry.converts and "is incomplete" in entry.reason for entry in entries)


def _copy(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(SHARDED / name, folder)
    return folder


def _edit_index(folder: Path, edit) -> Path:
    index = folder / INDEX
    document = json.loads(index.read_text())
    edit(document["weight_map"])
    index.write_text(json.dumps(document))
    return index


DAMAGED = {
    "shard missing": (lambda f: (f / "model-00002-of-00002.safetensors").unlink(), "which is not beside it"),
    "a tensor the shard lacks": (
        lambda f: _edit_index(f, lambda m: m.update({"rnn.weight_hh_l0": "model-00002-of-00002.safetensors"})),
        "holds rnn.weight_hh_l0, which the index gives model-00002-of-00002.safetensors",
    ),
    "a tensor the index leaves out": (
        lambda f: _edit_index(f, lambda m: m.pop("head.bias")),
        "holds head.bias, which the index does not name",
    ),
    "a shard outside the folder": (
        lambda f: _edit_index(f, lambda m: m.update({"head.bias": "../model-00002-of-00002.safetensors"})),
        "which is no plain file name",
    ),
    "a torch.save shard": (
        lambda f: torch.save({"head.bias": torch.zeros(7)}, f / "model-00002-of-00002.safetensors"),
        "which is no safetensors file",
    ),
    "no weight_map": (lambda f: (f / INDEX).write_text('{"weight_map": [1, 2]}'), "does not map names to shards"),
    "not JSON": (lambda f: (f / INDEX).write_text('{"weight_map": {'), "it is not valid JSON"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_sharded_checkpoint_gives_one_sentence(kind, tmp_path):
    folder = _copy("gru", tmp_path)
    damage, phrase = DAMAGED[kind]
    damage(folder)
    before = sorted(p.name for p in folder.iterdir())
    for source in (folder / INDEX, folder):
        assert_clean_failure(run_cli("convert", source, tmp_path / "out.bin"), 2, phrase)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert not (tmp_path / "out.bin").exists()


def test_a_folder_of_two_checkpoints_asks_which(tmp_path):
    folder = _copy("gru", tmp_path)
    (folder / INDEX).rename(folder / "a.safetensors.index.json")
    shutil.copy(folder / "a.safetensors.index.json", folder / "b.safetensors.index.json")
    assert_clean_failure(run_cli("inspect", folder), 2, "holds the indexes of 2 sharded checkpoints", "give the one")
    assert_clean_failure(run_cli("inspect", tmp_path), 2, "is a directory, not a model file")


def test_into_a_sharded_checkpoint_is_refused(tmp_path):
    blob = tmp_path / "gru.bin"
    assert run_cli("convert", SHARDED / "gru", blob).returncode == 0
    result = run_cli("convert", blob, tmp_path / "patched.pt", "--into", SHARDED / "gru")
    assert_clean_failure(result, 2, "is a sharded checkpoint's index", "a state_dict of its own")
    assert not (tmp_path / "patched.pt").exists()
