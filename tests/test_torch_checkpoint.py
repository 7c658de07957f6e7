"""torch.save's zip checkpoints read without torch agree with torch.load, value for value; what torch.load
(weights_only=True) would refuse, and what no torch.save writes, is refused in a sentence."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, assert_clean_failure, run_cli

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rnnconv.errors import BadInput
from rnnconv.formats.torch import checkpoint
from rnnconv.formats.torch.checkpoint import TensorToSave, storage_class, write_zip
from rnnconv.formats.torch.reader import flatten_checkpoint, load_state_dict

CHECKPOINTS = sorted(
    p for p in (FIXTURES / "torch").iterdir() if p.suffix in (".pt", ".pth") and p.name != "pickled_module.pt"
)


def assert_same_as_torch_load(path: Path) -> None:
    ours = load_state_dict(path)
    loaded = torch.load(path, weights_only=True, map_location="cpu")
    theirs = {k: v for k, v in flatten_checkpoint(loaded, "") if isinstance(v, torch.Tensor) and v.is_floating_point()}
    assert set(ours) == set(theirs)
    for key, tensor in theirs.items():
        if tensor.layout != torch.strided or tensor.is_meta:
            assert ours[key].problem
            continue
        expected = tensor.detach().float() if tensor.dtype == torch.bfloat16 else tensor.detach()
        got = ours[key][...]
        assert got.shape == tuple(tensor.shape) and got.dtype == expected.numpy().dtype, key
        assert np.array_equal(got, expected.numpy(), equal_nan=True), key


@pytest.mark.parametrize("path", CHECKPOINTS, ids=lambda p: p.name)
def test_fixtures_read_as_torch_load_reads_them(path):
    assert_same_as_torch_load(path)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]


@st.composite
def state_dicts(draw):
    """Tensors of every float type (and an int one), views at offsets, transposes, shared storages,
    parameters, nested in the containers people wrap state_dicts in."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    out: dict = {}
    for i in range(draw(st.integers(1, 6))):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
        base = (torch.randn(int(np.prod(shape)) + 7, generator=g) * 10).to(dtype)
        start = draw(st.integers(0, 7))
        tensor = base[start : start + int(np.prod(shape))].view(shape)
        if len(shape) == 2 and draw(st.booleans()):
            tensor = tensor.t()
        if dtype.is_floating_point and draw(st.booleans()):
            tensor = torch.nn.Parameter(tensor, requires_grad=False)
        out[f"layer{i}.weight"] = tensor
    wrap = draw(st.sampled_from(["bare", "dict", "list"]))
    return {"bare": out, "dict": {"state_dict": out, "epoch": 3, "lr": 0.1}, "list": [out, {"step": 1}]}[wrap]


@given(state=state_dicts())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_state_dicts_read_as_torch_load_reads_them(state, tmp_path):
    path = tmp_path / "random.pt"
    torch.save(state, path)
    assert_same_as_torch_load(path)


def rewrite(path: Path, out: Path, change) -> None:
    """A copy of a checkpoint with members changed by `change(name, data) -> data | None (drop)`."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as target:
        for info in source.infolist():
            data = change(info.filename, source.read(info))
            if data is not None:
                target.writestr(info.filename, data)


def test_big_endian_checkpoints_read_the_same_values(tmp_path):
    """What a big-endian machine writes: byteorder says so, every storage's elements byte-swapped."""
    source = FIXTURES / "torch" / "seq2seq.pt"  # float32 storages only

    def swap(name, data):
        if name.endswith("/byteorder"):
            return b"big"
        return np.frombuffer(data, "<f4").astype(">f4").tobytes() if "/data/" in name else data

    big = tmp_path / "big.pt"
    rewrite(source, big, swap)
    ours, reference = load_state_dict(big), load_state_dict(source)
    assert set(ours) == set(reference)
    for key in reference:
        assert np.array_equal(ours[key][...], reference[key][...]), key


class Evil:
    def __reduce__(self):
        return (exec, ("open('MARKER', 'w').write('ran')",))


@pytest.mark.slow
@pytest.mark.parametrize(
    "payload, phrase",
    [
        (Evil(), "exec"),
        ({"args": Path("x")}, "pathlib"),
    ],
)
def test_pickles_of_other_globals_are_read_inertly_and_never_run(payload, phrase, tmp_path):
    path = tmp_path / "evil.pt"
    torch.save(payload, path)
    result = run_cli("torch-to-cudnn", path, "-o", tmp_path / "out.bin", cwd=tmp_path)
    assert_clean_failure(result, 2, "holds no tensors", phrase, "without importing or running")
    assert not (tmp_path / "MARKER").exists() and not (tmp_path / "out.bin").exists()


def _pickle_member(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        return next(n for n in archive.namelist() if n.endswith("/data.pkl"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, phrase",
    [
        ("storage_gone", "is not in the archive"),
        ("storage_short", "more than its member holds"),
        ("offset_past_end", "reaches past its storage"),
        ("two_pickles", "no single <name>/data.pkl"),
    ],
)
def test_storages_that_do_not_hold_their_tensors_are_refused(damage, phrase, tmp_path):
    source = tmp_path / "lstm.pt"
    torch.save(torch.nn.LSTM(3, 4).state_dict(), source)
    pickled = _pickle_member(source)
    folder = pickled[: -len("data.pkl")]

    def change(name, data):
        if damage == "storage_gone" and name == folder + "data/0":
            return None
        if damage == "storage_short" and name == folder + "data/0":
            return data[:8]
        if damage == "offset_past_end" and name == pickled:
            return _with_offset(data, 10_000)
        return data

    out = tmp_path / "damaged.pt"
    rewrite(source, out, change)
    if damage == "two_pickles":
        with zipfile.ZipFile(out, "a") as archive:
            archive.writestr("other/data.pkl", b"\x80\x02}q\x00.")
    result = run_cli("torch-to-cudnn", out, "-o", tmp_path / "out.bin")
    assert_clean_failure(result, 2, phrase)


def _with_offset(data: bytes, offset: int) -> bytes:
    """The pickle with the first tensor's storage offset (the integer after its storage) replaced."""
    import pickletools

    ops = list(pickletools.genops(data))
    ends = [pos for _, _, pos in ops[1:]] + [len(data)]
    storage = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
    target = next(i for i in range(storage, len(ops)) if ops[i][0].name.startswith(("BININT", "LONG")))
    start = ops[target][2]
    return data[:start] + b"J" + offset.to_bytes(4, "little") + data[ends[target] :]


@pytest.mark.slow
def test_a_pickle_sharing_one_list_exponentially_is_bounded(tmp_path):
    """[a, a] where a = [b, b] ...: 2**60 entries from a few hundred bytes of pickle."""
    node: list = [torch.zeros(1)]
    for _ in range(60):
        node = [node, node]
    path = tmp_path / "shared.pt"
    torch.save({"x": node}, path)
    with pytest.raises(BadInput, match="more than"):
        load_state_dict(path)


# --- writing without torch -------------------------------------------------------------------------

WRITABLE = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


@st.composite
def tensors_to_save(draw):
    """Keys and tensors of every element type rnnconv writes, empty and single-element shapes among them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    out = {}
    for i in range(draw(st.integers(1, 5))):
        dtype = draw(st.sampled_from(sorted(WRITABLE)))
        shape = tuple(draw(st.lists(st.integers(0, 6), min_size=0, max_size=3)))
        values = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(WRITABLE[dtype])
        key = draw(st.sampled_from(["weight_ih_l", "bias_hh_l", "décodeur.rnn.w_", "x"])) + str(i)
        out[key] = values
    return out


def save_without_torch(tensors: dict, path: Path) -> None:
    def words(tensor):
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(np.uint16)
        return tensor.numpy()

    names = {v: k for k, v in WRITABLE.items()}
    write_zip(path, {k: TensorToSave(words(t), storage_class(names[t.dtype])) for k, t in tensors.items()})


def assert_loads_as(path: Path, tensors: dict) -> None:
    for loaded in (torch.load(path, weights_only=True), torch.load(path, weights_only=True, mmap=True)):
        assert list(loaded) == list(tensors)
        for key, tensor in tensors.items():
            got = loaded[key]
            assert got.dtype == tensor.dtype and got.shape == tensor.shape and got.is_contiguous(), key
            assert torch.equal(got, tensor), key
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None  # every CRC-32 right
    assert_same_as_torch_load(path)  # and rnnconv's own reader agrees


@given(tensors=tensors_to_save())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_checkpoints_written_without_torch_load_in_torch(tensors, tmp_path):
    path = tmp_path / "written.pt"
    path.unlink(missing_ok=True)
    save_without_torch(tensors, path)
    assert_loads_as(path, tensors)


def test_zip64_records_and_directory_load_in_torch(tmp_path, monkeypatch):
    """Members and offsets past 4 GiB, shown with the limit lowered: the Zip64 fields torch and zipfile read."""
    monkeypatch.setattr(checkpoint, "_ZIP64_LIMIT", 200)
    tensors = {f"w{i}": torch.randn(8, 9) for i in range(4)}  # 288 bytes each
    save_without_torch(tensors, tmp_path / "zip64.pt")
    with zipfile.ZipFile(tmp_path / "zip64.pt") as archive:
        big = [i for i in archive.infolist() if "/data/" in i.filename]
        assert all(i.extract_version == 45 for i in big)  # written with Zip64 sizes and offsets
    assert_loads_as(tmp_path / "zip64.pt", tensors)


def test_the_same_weights_give_the_same_file(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.randn(5).to(torch.bfloat16)}
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        save_without_torch(tensors, tmp_path / run / "model.pt")
    assert (tmp_path / "one" / "model.pt").read_bytes() == (tmp_path / "two" / "model.pt").read_bytes()
    torch.save(tensors, tmp_path / "torch.pt")
    with zipfile.ZipFile(tmp_path / "one" / "model.pt") as ours, zipfile.ZipFile(tmp_path / "torch.pt") as theirs:
        assert [i.filename.split("/", 1)[1] for i in ours.infolist()] == [
            i.filename.split("/", 1)[1] for i in theirs.infolist() if "serialization_id" not in i.filename
        ]
