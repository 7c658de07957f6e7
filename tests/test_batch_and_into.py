"""Several sources at once (-o DIR, -j), verify --all, and --into: an RNN written back into the user's own model."""

from __future__ import annotations

import io
import json
import os
import shutil
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, assert_clean_failure, run_cli
from test_torch import FIXTURE_RNNS, module_for

import rnnconv
from rnnconv.core.report_contracts import BatchResults, Reports
from rnnconv.formats import _safetensors

KERAS, TORCH = FIXTURES / "keras3", FIXTURES / "torch"


# --- several sources --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_several_sources_go_into_a_directory_made_for_them(tmp_path):
    sources = [KERAS / "lstm.h5", KERAS / "seed000_gru.h5"]
    result = run_cli("keras-to-cudnn", *sources, "-o", f"{tmp_path / 'out'}/")
    assert result.returncode == 0, result.stderr
    assert "lstm.h5" in result.stdout and "seed000_gru.bin" in result.stdout and "converted 2 of 2" in result.stdout
    for source in sources:
        alone = tmp_path / "alone.bin"
        rnnconv.convert(source, alone, force=True)
        batch = tmp_path / "out" / (source.stem + ".bin")
        assert batch.read_bytes() == alone.read_bytes()  # each as a conversion of its own would write it


@pytest.mark.slow
def test_a_missing_directory_without_the_slash_is_refused(tmp_path):
    result = run_cli("keras-to-cudnn", KERAS / "lstm.h5", KERAS / "seed000_gru.h5", "-o", tmp_path / "out")
    assert_clean_failure(result, 2, "does not exist (end it with / to create it)")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_sources_with_one_stem_are_refused_before_any_work(tmp_path):
    result = run_cli("keras-to-cudnn", KERAS / "lstm.h5", KERAS / "lstm.keras", "-o", f"{tmp_path / 'out'}/")
    assert_clean_failure(result, 2, "would both be written to", "lstm.bin")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_failure_is_reported_and_the_others_go_on_in_parallel(tmp_path):
    sources = [KERAS / "lstm.h5", KERAS / "mixed.h5", tmp_path / "absent.h5", KERAS / "seed000_gru.h5"]
    result = run_cli("keras-to-cudnn", *sources, "-o", tmp_path, "-j", "2", "--json")
    assert result.returncode == 2, result.stderr  # the worst: two bad inputs, no mismatch or internal error
    assert "Traceback" not in result.stderr
    entries = BatchResults.model_validate(json.loads(result.stdout)).root
    assert [Path(e.source).name for e in entries] == [s.name for s in sources]  # in the order given
    assert [e.exit_code for e in entries] == [0, 2, 2, 0]
    assert "has 10 recurrent layers" in (entries[1].error or "")
    failures = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(failures) == 2 and any("absent.h5 (exit 2): " in line for line in failures)
    assert {p.name for p in tmp_path.iterdir()} == {
        "lstm.bin",
        "lstm.bin.json",
        "seed000_gru.bin",
        "seed000_gru.bin.json",
    }


def test_the_api_plans_every_name_and_converts_beside_the_sources(tmp_path):
    for name in ("lstm.h5", "seed000_gru.keras"):
        shutil.copy(KERAS / name, tmp_path / name)
    seen = []
    results = rnnconv.convert_many([tmp_path / "lstm.h5", tmp_path / "seed000_gru.keras"], on_result=seen.append)
    assert [item.exit_code for item in results.root] == [0, 0] and len(seen) == 2
    assert (tmp_path / "lstm.bin").exists() and (tmp_path / "seed000_gru.bin").exists()
    again = rnnconv.convert_many([tmp_path / "lstm.h5"], tmp_path)  # nothing is replaced without force
    assert again.root[0].exit_code == 2 and "already exists" in (again.root[0].error or "")
    with pytest.raises(rnnconv.BadInput, match="--jobs must be at least 1"):
        rnnconv.convert_many([tmp_path / "lstm.h5"], tmp_path, jobs=0)
    with pytest.raises(rnnconv.BadInput, match="is a source"):
        rnnconv.convert_many([tmp_path / "lstm.bin", tmp_path / "other.bin"], to="cudnn")


@pytest.mark.slow
def test_jobs_below_one_are_refused_by_the_option():
    result = run_cli("keras-to-cudnn", KERAS / "lstm.h5", KERAS / "seed000_gru.h5", "-j", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.slow
def test_convert_takes_several_sources_and_a_directory(tmp_path):
    result = run_cli("convert", KERAS / "lstm.h5", KERAS / "seed000_gru.h5", f"{tmp_path}/", "--to", "torch", "-q")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "lstm.pt").exists() and (tmp_path / "seed000_gru.pt").exists()


@pytest.mark.slow
def test_one_source_keeps_writing_the_file_it_names(tmp_path):
    result = run_cli("keras-to-cudnn", KERAS / "lstm.h5", "-o", tmp_path / "x.bin")
    assert result.returncode == 0, result.stderr
    assert f"wrote {tmp_path / 'x.bin'}, {tmp_path / 'x.bin.json'}" in result.stdout.splitlines()


# --- verify --all -------------------------------------------------------------------------------------------


def scale_tensor(path: Path, name: str, factor: float) -> None:
    """Multiply one tensor of a float32 safetensors file in place."""
    header, start = _safetensors.read_header(path)
    lo, hi = header[name]["data_offsets"]
    words = np.memmap(path, dtype="<f4", mode="r+", offset=start + lo, shape=((hi - lo) // 4,))
    words *= factor
    words.flush()


@pytest.mark.slow
def test_verify_all_checks_every_rnn_and_reports_the_worst(tmp_path):
    blob = tmp_path / "seq2seq.safetensors"
    rnnconv.convert(TORCH / "seq2seq.pt", blob)
    report = tmp_path / "reports.json"
    result = run_cli("verify", blob, "--all", "--backend", "numpy", "--report", report)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = Reports.model_validate(json.loads(report.read_text())).root
    assert [(r.name, r.verdict) for r in reports] == [("encoder.rnn", "match"), ("decoder.rnn", "match")]
    assert "encoder.rnn" in result.stdout and "decoder.rnn" in result.stdout
    assert result.stdout.splitlines()[-1] == "MATCH: 2 of 2 RNNs match"  # the verdict of them all, last

    scale_tensor(blob, "decoder.rnn", 1.5)
    junit = tmp_path / "junit.xml"
    result = run_cli("verify", blob, "--all", "--backend", "numpy", "--json", "--no-diagnose", "--junit", junit)
    assert result.returncode == 1, result.stderr
    assert [r["verdict"] for r in json.loads(result.stdout)] == ["match", "mismatch"]
    suites = ET.parse(junit).getroot()  # one suite per RNN, the failure in the decoder's
    assert [s.get("name").rsplit(" ", 1)[1] for s in suites] == ["[encoder.rnn]", "[decoder.rnn]"]
    assert [int(s.get("failures")) > 0 for s in suites] == [False, True]
    assert int(suites.get("failures")) == sum(int(s.get("failures")) for s in suites)
    assert_clean_failure(run_cli("verify", blob, "--all", "--plot", tmp_path / "p.svg"), 2, "--plot draws one RNN")


@pytest.mark.slow
def test_verify_all_names_every_rnn_itself():
    result = run_cli("verify", FIXTURES / "torch" / "seq2seq.pt", "--all", "--layer", "encoder.rnn")
    assert_clean_failure(result, 2, "--all verifies every RNN")


# --- --into: PyTorch -------------------------------------------------------------------------------------


def to_blob(source: Path, out: Path, layer: str | None = None) -> Path:
    rnnconv.convert(source, out, to="cudnn", layer=layer)
    return out


def perturb(blob: Path, factor: float = 2.0) -> None:
    words = np.memmap(blob, dtype="<f4", mode="r+")
    words *= factor
    words.flush()


def flat(checkpoint: object, prefix: str = "") -> dict[str, object]:
    if isinstance(checkpoint, dict):
        return {k: v for key, value in checkpoint.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: checkpoint}


TORCH_INTO = [case for case in FIXTURE_RNNS if not case[0].endswith(".safetensors")]


@pytest.mark.slow
@pytest.mark.parametrize("name,prefix,spec,key_prefix", TORCH_INTO, ids=lambda v: str(v) if v else "-")
def test_into_a_checkpoint_round_trips_bit_for_bit(name, prefix, spec, key_prefix, tmp_path):
    blob = to_blob(TORCH / name, tmp_path / "x.bin", prefix)
    patched = tmp_path / f"patched{Path(name).suffix}"
    result = run_cli("cudnn-to-torch", blob, "--into", TORCH / name, "-o", patched)
    assert result.returncode == 0, result.stderr
    original = flat(torch.load(TORCH / name, weights_only=True))
    patched = flat(torch.load(patched, weights_only=True))
    assert list(patched) == list(original)  # same keys, same order, same nesting
    for key, value in original.items():
        if isinstance(value, torch.Tensor):
            assert patched[key].dtype == value.dtype and torch.equal(patched[key], value), key
        else:
            assert patched[key] == value, key


@pytest.mark.parametrize("name,prefix,spec,key_prefix", TORCH_INTO, ids=lambda v: str(v) if v else "-")
def test_into_a_checkpoint_replaces_exactly_the_rnn(name, prefix, spec, key_prefix, tmp_path):
    blob = to_blob(TORCH / name, tmp_path / "x.bin", prefix)
    perturb(blob)
    rnnconv.convert(blob, tmp_path / f"patched{Path(name).suffix}", into=TORCH / name)
    original = flat(torch.load(TORCH / name, weights_only=True))
    patched = flat(torch.load(tmp_path / f"patched{Path(name).suffix}", weights_only=True))
    changed = {k for k, v in original.items() if isinstance(v, torch.Tensor) and not torch.equal(v, patched[k])}
    rnn_keys = {k for k in original if k.startswith(key_prefix) and k[len(key_prefix) :].count(".") == 0}
    assert changed == {k for k in rnn_keys if original[k].abs().sum() > 0}
    module = module_for(spec)
    module.load_state_dict({k[len(key_prefix) :]: patched[k] for k in rnn_keys}, strict=True)
    for key in rnn_keys:
        assert torch.equal(patched[key], original[key] * 2), key


def test_into_puts_every_rnn_of_a_safetensors_back_where_it_came_from(tmp_path):
    blob = tmp_path / "both.safetensors"
    rnnconv.convert(TORCH / "seq2seq.pt", blob)
    scale_tensor(blob, "decoder.rnn", 3.0)
    rnnconv.convert(blob, tmp_path / "patched.pt", into=TORCH / "seq2seq.pt")
    original = torch.load(TORCH / "seq2seq.pt", weights_only=True)["state_dict"]
    patched = torch.load(tmp_path / "patched.pt", weights_only=True)["state_dict"]
    for key, value in original.items():
        expected = value * 3 if key.startswith("decoder.rnn.") else value
        assert torch.equal(patched[key], expected), key


@pytest.mark.slow
def test_into_with_layer_replaces_the_rnn_named(tmp_path):
    blob = to_blob(TORCH / "seq2seq.pt", tmp_path / "x.bin", "decoder.rnn")
    perturb(blob)
    out = tmp_path / "p.pt"
    result = run_cli("cudnn-to-torch", blob, "--into", TORCH / "seq2seq.pt", "--layer", "decoder.rnn", "-o", out)
    assert result.returncode == 0, result.stderr
    key = "decoder.rnn.weight_hh_l0"
    original = torch.load(TORCH / "seq2seq.pt", weights_only=True)["state_dict"][key]
    assert torch.equal(torch.load(out, weights_only=True)["state_dict"][key], 2 * original)


@pytest.mark.slow
@pytest.mark.parametrize(
    "layer,phrases",
    [("decoder.rnn", ("decoder.rnn.weight_ih_l0 has shape (21, 18)",)), ("nope", ("has no RNN with prefix 'nope'",))],
)
def test_into_refuses_a_place_that_does_not_fit(layer, phrases, tmp_path):
    blob = to_blob(TORCH / "seq2seq.pt", tmp_path / "x.bin", "encoder.rnn")
    result = run_cli("cudnn-to-torch", blob, "--into", TORCH / "seq2seq.pt", "--layer", layer, "-o", tmp_path / "p.pt")
    assert_clean_failure(result, 2, *phrases)
    assert not (tmp_path / "p.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "module,phrases",
    [
        (torch.nn.LSTM(3, 5), ("weight_ih_l0 has shape (20, 3)", "gives (16, 3)")),  # the same keys, wider
        (torch.nn.LSTM(3, 4, bias=False), ("has no bias_ih_l0 for rnn",)),
        (torch.nn.LSTM(3, 4, num_layers=2), ("bias_hh_l1 has no counterpart in rnn",)),
    ],
)
def test_into_refuses_missing_tensors_and_other_shapes(module, phrases, tmp_path):
    torch.save(module.state_dict(), tmp_path / "model.pt")
    blob = to_blob(TORCH / "lstm_legacy.pt", tmp_path / "x.bin")
    result = run_cli("cudnn-to-torch", blob, "--into", tmp_path / "model.pt", "-o", tmp_path / "p.pt")
    assert_clean_failure(result, 2, *phrases)
    assert not (tmp_path / "p.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra,phrases",
    [
        (("-o", "p.onnx"), ("a name ending in .pt, .pth or .bin",)),  # any torch.save ending is the model's kind
        ((), ("--into needs -o",)),
        (("-o", "p.pt", "--dtype", "float16"), ("leave out --dtype",)),
        (("-o", "same.pt"), ("is the source being read",)),
    ],
)
def test_into_refuses_what_would_not_be_a_copy_of_the_model(extra, phrases, tmp_path):
    shutil.copy(TORCH / "lstm_legacy.pt", tmp_path / "same.pt")
    blob = to_blob(TORCH / "lstm_legacy.pt", tmp_path / "x.bin")
    result = run_cli("cudnn-to-torch", blob, "--into", tmp_path / "same.pt", *extra, "--force", cwd=tmp_path)
    assert_clean_failure(result, 2, *phrases)


@pytest.mark.slow
def test_into_refuses_a_safetensors_state_dict(tmp_path):
    blob = to_blob(TORCH / "rnn_relu.safetensors", tmp_path / "x.bin")
    result = run_cli("cudnn-to-torch", blob, "--into", TORCH / "rnn_relu.safetensors", "-o", tmp_path / "p.safetensors")
    assert_clean_failure(result, 2, "--into takes a torch.save checkpoint")


@pytest.mark.slow
def test_a_state_dict_named_like_a_blob_is_written_with_a_warning(tmp_path):
    blob = to_blob(TORCH / "lstm_legacy.pt", tmp_path / "x.bin")
    result = run_cli("cudnn-to-torch", blob, "-o", tmp_path / "pytorch_model.bin")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "cuDNN blob" in warnings[0] and "pytorch_model.bin" in warnings[0]
    assert "warning:" not in run_cli("cudnn-to-torch", blob, "-o", tmp_path / "model.pt").stderr


# --- --into: Keras -----------------------------------------------------------------------------------------


def keras_datasets(path: Path) -> dict[str, np.ndarray]:
    """Every dataset of a Keras file (of its model.weights.h5 for a .keras archive), by HDF5 path, as stored."""
    found: dict[str, np.ndarray] = {}
    source = io.BytesIO(zipfile.ZipFile(path).read("model.weights.h5")) if path.suffix == ".keras" else path
    with h5py.File(source, "r") as h5:
        h5.visititems(lambda name, obj: found.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return found


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm.h5", "lstm.keras", "lstm.weights.h5", "bf16_gru.keras"])
def test_into_a_keras_file_round_trips_bit_for_bit(name, tmp_path):
    blob = to_blob(KERAS / name, tmp_path / "x.bin")
    patched = tmp_path / ("patched" + "".join(Path(name).suffixes))
    result = run_cli("cudnn-to-keras", blob, "--into", KERAS / name, "-o", patched)
    assert result.returncode == 0, result.stderr
    original, copy = keras_datasets(KERAS / name), keras_datasets(patched)
    assert list(copy) == list(original) and all(same(copy[k], original[k]) for k in original)
    if name.endswith(".keras"):
        before, after = zipfile.ZipFile(KERAS / name), zipfile.ZipFile(patched)
        assert before.namelist() == after.namelist()
        assert all(before.read(n) == after.read(n) for n in before.namelist() if n != "model.weights.h5")


@pytest.mark.parametrize("name,layer", [("lstm.keras", None), ("mixed.h5", "bidi_gru"), ("bf16_gru.weights.h5", None)])
def test_into_a_keras_file_replaces_exactly_the_layer_and_keras_loads_it(name, layer, tmp_path):
    blob = to_blob(KERAS / name, tmp_path / "x.bin", layer)
    if "bf16" in name:
        perturb_bf16(blob)
    else:
        perturb(blob)
    patched = tmp_path / ("patched" + "".join(Path(name).suffixes))
    rnnconv.convert(blob, patched, into=KERAS / name)
    original, copy = keras_datasets(KERAS / name), keras_datasets(patched)
    changed = {k for k in original if not same(copy[k], original[k])}
    with rnnconv.load(KERAS / name, layer=layer) as (rnn,):
        count = 3 * rnn.spec.num_directions
    assert len(changed) == count and all(layer is None or layer in k for k in changed)
    with rnnconv.load(patched, layer=layer) as (written,), rnnconv.load(blob) as (wanted,):
        for key, value in wanted.arrays().items():
            np.testing.assert_array_equal(written.param(key), value)
    if name.endswith(".keras"):
        import keras

        loaded = np.sort(np.concatenate([w.ravel() for w in keras.models.load_model(patched).get_weights()]))
        np.testing.assert_array_equal(loaded, np.sort(np.concatenate([v.ravel() for v in copy.values()])))


def perturb_bf16(blob: Path) -> None:
    words = np.memmap(blob, dtype="<u2", mode="r+")
    words ^= np.uint16(0x0001)  # the lowest mantissa bit of every value: still a finite bfloat16
    words.flush()


@pytest.mark.slow
def test_into_a_keras_file_refuses_another_kind_of_layer(tmp_path):
    blob = to_blob(KERAS / "seed000_gru.h5", tmp_path / "x.bin")
    result = run_cli("cudnn-to-keras", blob, "--into", KERAS / "lstm.h5", "-o", tmp_path / "p.h5")
    assert_clean_failure(result, 2, "lstm.h5 has no recurrent layer named 'gru'; it holds: lstm")  # where it came from
    result = run_cli("cudnn-to-keras", blob, "--into", KERAS / "lstm.h5", "--layer", "lstm", "-o", tmp_path / "p.h5")
    assert_clean_failure(result, 2, "layer 'lstm' of", "is a lstm", "gru is a gru")
    assert not (tmp_path / "p.h5").exists()


@pytest.mark.slow
def test_into_a_damaged_keras_archive_is_one_sentence(tmp_path):
    """Every member of the model is copied: one whose bytes do not match its CRC-32 is refused, not a crash."""
    model = tmp_path / "model.keras"
    with zipfile.ZipFile(KERAS / "lstm.keras") as source, zipfile.ZipFile(model, "w") as copy:
        for info in source.infolist():
            copy.writestr(info, source.read(info))
        copy.writestr("assets/notes.txt", b"a member Keras does not read" * 10)
    with zipfile.ZipFile(model) as archive:
        extra = archive.getinfo("assets/notes.txt")
    data = bytearray(model.read_bytes())
    data[extra.header_offset + 30 + len(extra.filename) + 5] ^= 0xFF  # inside the member's stored bytes
    model.write_bytes(bytes(data))
    blob = to_blob(KERAS / "lstm.keras", tmp_path / "x.bin")
    result = run_cli("cudnn-to-keras", blob, "--into", model, "-o", tmp_path / "patched.keras")
    assert_clean_failure(result, 2, "assets/notes.txt", "cannot be read")
    assert not (tmp_path / "patched.keras").exists()


def test_into_a_zip_checkpoint_needs_no_torch_and_keeps_everything_else(tmp_path):
    """A training checkpoint (the RNN among other layers, an optimizer's state, an epoch, a name): patched by
    rnnconv's own reader and writer where torch is not installed, every other object exactly as it was."""
    model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(7, 3), "rnn": torch.nn.GRU(3, 5, num_layers=2)})
    optimizer = torch.optim.Adam(model.parameters())
    loss = model["rnn"](model["embed"](torch.tensor([[1, 2, 3]])))[0].sum()
    loss.backward()
    optimizer.step()
    source = tmp_path / "train.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 7, "tag": "v1"}, source)
    blob = to_blob(source, tmp_path / "x.bin", "model.rnn")
    perturb(blob)
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('no torch here')\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")]))}
    result = run_cli("cudnn-to-torch", blob, "--into", source, "-o", tmp_path / "patched.pt", env=env)
    assert result.returncode == 0, result.stderr
    original = flat(torch.load(source, weights_only=True))
    patched = flat(torch.load(tmp_path / "patched.pt", weights_only=True, mmap=True))
    assert list(patched) == list(original)
    for key, value in original.items():
        if key.startswith("model.rnn."):
            assert patched[key].dtype == value.dtype and torch.equal(patched[key], 2 * value), key
        elif isinstance(value, torch.Tensor):
            assert torch.equal(patched[key], value), key
        else:
            assert patched[key] == value, key


def test_into_refuses_a_tensor_tied_to_another(tmp_path):
    rnn = torch.nn.LSTM(3, 4)
    state = dict(rnn.state_dict())
    state["shadow"] = state["weight_ih_l0"][:2]  # a view of the RNN's storage, saved with it
    source = tmp_path / "tied.pt"
    torch.save(state, source)
    blob = to_blob(source, tmp_path / "x.bin", None)
    result = run_cli("cudnn-to-torch", blob, "--into", source, "-o", tmp_path / "patched.pt")
    assert_clean_failure(result, 2, "shares its storage with another tensor")
    assert not (tmp_path / "patched.pt").exists()


def test_into_a_model_without_an_ending_takes_its_kind_of_ending(tmp_path):
    """A checkpoint named without a suffix: the patched copy may take any torch.save ending (or none), and a
    refusal names the endings it takes, never a sentence with a hole."""
    model = tmp_path / "ckpt"
    shutil.copy(TORCH / "seq2seq.pt", model)
    blob = to_blob(model, tmp_path / "x.bin", "encoder.rnn")
    for name in ("patched.pt", "patched.pth", "patched"):
        result = run_cli("cudnn-to-torch", blob, "--into", model, "-o", tmp_path / name)
        assert result.returncode == 0, result.stderr
    assert_clean_failure(
        run_cli("cudnn-to-torch", blob, "--into", model, "-o", tmp_path / "p.onnx"), 2, "ending in .pt, .pth or .bin"
    )
    keras = tmp_path / "kmodel"
    shutil.copy(KERAS / "mixed.keras", keras)
    kblob = to_blob(keras, tmp_path / "k.bin", "bidi_lstm")
    assert run_cli("cudnn-to-keras", kblob, "--into", keras, "-o", tmp_path / "k.keras").returncode == 0
    assert_clean_failure(
        run_cli("cudnn-to-keras", kblob, "--into", keras, "-o", tmp_path / "k.h5"), 2, "ending in .keras"
    )


def test_a_batch_source_with_several_rnns_gets_advice_that_works_in_a_batch(tmp_path):
    """The refusal's advice is followed as printed, and it converts the file."""
    results = rnnconv.convert_many([TORCH / "seq2seq.pt", TORCH / "rnn_tanh.pt"], f"{tmp_path}/")
    refused = results.root[0]
    assert refused.exit_code == 2 and "rnnconv convert" in (refused.error or "")
    advice = (refused.error or "").split("(rnnconv convert ", 1)[1].rstrip(")").split()
    followed = run_cli("convert", advice[0], tmp_path / advice[1].replace("OUT", "seq2seq"))
    assert followed.returncode == 0, followed.stderr
    assert {b.name for b in rnnconv.load(tmp_path / "seq2seq.safetensors", all_rnns=True)} == {
        "encoder.rnn",
        "decoder.rnn",
    }


def test_verify_on_several_rnns_mentions_all_and_quiet_keeps_each_verdict(tmp_path):
    blob = tmp_path / "both.safetensors"
    rnnconv.convert(TORCH / "seq2seq.pt", blob)
    assert_clean_failure(run_cli("verify", blob), 2, "pick one with --layer, or verify them all with --all")
    quiet = run_cli("verify", blob, "--all", "-q")
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stdout.splitlines()
    assert any(line.startswith("encoder.rnn: MATCH") for line in lines), quiet.stdout
    assert any(line.startswith("decoder.rnn: MATCH") for line in lines), quiet.stdout
