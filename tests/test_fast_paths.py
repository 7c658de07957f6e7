"""The speed paths give the same bytes as the plain ones: kernel copies, the source digest, the NaN scan."""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import os
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import blake3
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, run_cli

pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnconv import api
from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.dtypes import count_non_finite, element_type
from rnnconv.errors import BadInput
from rnnconv.formats import _zip
from rnnconv.formats.cudnn import reader as cudnn
from rnnconv.formats.cudnn import writer
from rnnconv.formats.keras import reader
from rnnconv.safeio import digests, inputs, outputs
from rnnconv.table.constants import Kind
from rnnconv.table.transpose import transposed

TORCH = FIXTURES / "torch"


@pytest.fixture
def copies(monkeypatch):
    """Count the file-to-file copies a conversion makes (and the bytes they move): in the kernel, or shifted
    within a page, through one buffer run by run (never the tensor assembled in memory)."""
    moved: list[int] = []
    real_kernel, real_shifted = os.copy_file_range, outputs._read_and_write

    def kernel(src, dst, count, offset_src=None, offset_dst=None):
        n = real_kernel(src, dst, count, offset_src, offset_dst)
        moved.append(n)
        return n

    def shifted(src, dst, offset, position, size, source):
        real_shifted(src, dst, offset, position, size, source)
        moved.append(size)

    monkeypatch.setattr(os, "copy_file_range", kernel)
    monkeypatch.setattr(outputs, "_read_and_write", shifted)
    return moved


def plain_blob(source: Path, out: Path, monkeypatch, **options) -> bytes:
    """The blob written with every byte going through this process (no file-to-file copy)."""
    with monkeypatch.context() as patch:
        patch.setattr(outputs, "_file_copy", lambda *args: False)
        api.convert(source, out, **options)
    return out.read_bytes()


@pytest.mark.parametrize("name", ["seq2seq.pt", "lstm_proj.pt", "dataparallel_gru.pth", "rnn_relu.safetensors"])
def test_a_pytorch_source_is_copied_file_to_file_byte_for_byte(name, tmp_path, copies, monkeypatch):
    source = TORCH / name
    layer = "encoder.rnn" if name == "seq2seq.pt" else None
    result = api.convert(source, tmp_path / "fast.bin", layer=layer)
    spec = result.rnns[0].spec
    gates = {"lstm": 4, "gru": 3}.get(spec.mode, 1)
    weight_bytes = 4 * gates * spec.hidden_size * (spec.input_size + spec.hidden_size)  # first layer's W and R
    assert sum(copies) >= weight_bytes  # the matrices, at least, went file to file
    plain = plain_blob(source, tmp_path / "plain.bin", monkeypatch, layer=layer)
    assert (tmp_path / "fast.bin").read_bytes() == plain
    if source.suffix != ".safetensors":  # and the bytes are torch's own, not just equal to another path of ours
        first = first_input_matrix(torch.load(source, weights_only=True), layer or "")
        assert plain[: first.numel() * 4] == first.numpy().tobytes()


def first_input_matrix(state: dict, prefix: str) -> torch.Tensor:
    """weight_ih_l0 of the RNN under `prefix`, in a state_dict that may be nested in a checkpoint dict."""
    for key, value in state.items():
        if isinstance(value, dict):
            return first_input_matrix(value, prefix)
        if key.endswith(f"{prefix}.weight_ih_l0".lstrip(".")):
            return value
    raise KeyError(prefix)


def test_a_blob_is_copied_file_to_file_into_safetensors(tmp_path, copies):
    blob = tmp_path / "m.bin"
    api.convert(TORCH / "lstm_proj.pt", blob)
    copies.clear()
    api.convert(blob, tmp_path / "m.safetensors")
    (words,) = [b.words for b in cudnn.open_safetensors(tmp_path / "m.safetensors")]
    assert np.asarray(words).tobytes() == blob.read_bytes()
    assert sum(copies) == blob.stat().st_size


def test_a_changed_element_type_is_converted_not_copied(tmp_path, copies):
    api.convert(TORCH / "seq2seq.pt", tmp_path / "half.bin", layer="encoder.rnn", dtype="float16")
    assert copies == []
    blob = cudnn.open_bin(tmp_path / "half.bin")
    state = torch.load(TORCH / "seq2seq.pt", weights_only=True)
    first = first_input_matrix(state, "encoder.rnn").numpy().astype(np.float16).ravel()
    assert np.array_equal(np.asarray(blob.words[: first.size]), first)


@pytest.mark.parametrize("failure", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP])
def test_a_kernel_that_cannot_copy_falls_back_to_sendfile_then_writes(failure, tmp_path, monkeypatch):
    plain = plain_blob(TORCH / "rnn_tanh.pt", tmp_path / "plain.bin", monkeypatch)

    def refuse(*args):
        raise OSError(failure, os.strerror(failure))

    monkeypatch.setattr(os, "copy_file_range", refuse)
    api.convert(TORCH / "rnn_tanh.pt", tmp_path / "sendfile.bin")
    assert (tmp_path / "sendfile.bin").read_bytes() == plain
    monkeypatch.setattr(os, "sendfile", refuse)
    api.convert(TORCH / "rnn_tanh.pt", tmp_path / "written.bin")
    assert (tmp_path / "written.bin").read_bytes() == plain


def test_values_still_in_a_file_keep_their_place_through_slices_and_read_as_numpy_does(tmp_path):
    path = tmp_path / "data"
    values = np.arange(64, dtype=np.float32)
    path.write_bytes(b"head" + values.tobytes())
    whole = inputs.FileArray(path, 4, np.dtype(np.float32), (4, 4, 4))
    expected = values.reshape(4, 4, 4)
    assert np.array_equal(np.asarray(whole), expected)
    rows = whole[1:3]
    assert isinstance(rows, inputs.FileArray) and (rows.offset, rows.shape) == (4 + 64, (2, 4, 4))
    assert isinstance(whole[2, 1], inputs.FileArray) and whole[2, 1].offset == 4 + 4 * (2 * 16 + 4)
    assert isinstance(whole[-1, :], inputs.FileArray) and whole[-1, :].offset == 4 + 4 * 48
    assert isinstance(whole.reshape(16, -1)[3:5], inputs.FileArray)
    for index in [(1, 2, 3), (slice(None), 1), (Ellipsis,), (slice(0, 4, 2),), (0, slice(1, 3)), (-1, -2), 3, ()]:
        assert np.array_equal(np.asarray(whole[index]), expected[index]), index
    assert whole[1, 2, 3] == expected[1, 2, 3] and np.ndim(whole[1, 2, 3]) == 0  # one value read, a scalar
    runs = [run.copy() for run in whole.runs(size=24)]  # one buffer, refilled: each run is copied before the next
    assert [len(run) for run in runs] == [6] * 10 + [4] and np.array_equal(np.concatenate(runs), values)
    with pytest.raises(IndexError):
        whole[4]
    with pytest.raises(ValueError, match="cannot reshape"):
        whole.reshape(5, 5)
    path.write_bytes(b"head" + values.tobytes()[:100])  # cut short after its place was taken
    with pytest.raises(inputs.SourceChanged, match="changed while it was being read"):
        np.asarray(whole)
    with pytest.raises(inputs.SourceChanged):
        list(whole.runs())
    path.unlink()
    with pytest.raises(inputs.SourceChanged):
        whole.read()


@pytest.mark.slow
def test_the_digest_is_blake3_of_the_source_and_no_hash_leaves_it_out(tmp_path):
    source = TORCH / "rnn_tanh.pt"
    api.convert(source, tmp_path / "a.bin")
    doc = json.loads((tmp_path / "a.bin.json").read_text())
    assert doc["schema_version"] == 4
    assert doc["source"]["digest"] == "blake3:" + blake3.blake3(source.read_bytes()).hexdigest()
    assert "sha256" not in doc["source"]
    result = run_cli("torch-to-cudnn", source, "-o", tmp_path / "b.bin", "--no-hash")
    assert result.returncode == 0, result.stderr
    assert "digest" not in json.loads((tmp_path / "b.bin.json").read_text())["source"]
    report = api.verify(tmp_path / "b.bin", backend="numpy")
    assert report.verdict == "match"
    assert any("records no digest" in w and "--no-hash" in w for w in report.warnings)


def test_a_schema_2_sidecar_with_sha256_still_tells_a_changed_source(tmp_path):
    source = tmp_path / "rnn.pt"
    source.write_bytes((TORCH / "rnn_tanh.pt").read_bytes())
    api.convert(source, tmp_path / "a.bin")
    side = tmp_path / "a.bin.json"
    doc = json.loads(side.read_text())
    doc["schema_version"] = 2
    digest = doc["source"].pop("digest")
    doc["source"]["sha256"] = digests.digest_of(source, "sha256").removeprefix("sha256:")
    side.write_text(json.dumps(doc))
    assert digest.startswith("blake3:")
    assert api.verify(tmp_path / "a.bin", backend="numpy").warnings == []
    state = torch.load(source, weights_only=True)
    state["bias_hh_l0"][0] += 1
    torch.save(state, source)
    report = api.verify(tmp_path / "a.bin", backend="numpy")
    assert any("changed since the blob was made (sha256 differs)" in w for w in report.warnings)
    assert report.verdict == "mismatch"


@pytest.mark.parametrize("size", [0, 1, digests.DIGEST_RUN + 3, 3 * digests.DIGEST_RUN])
def test_the_digest_of_any_size_is_blake3_of_the_bytes(size, tmp_path):
    path = tmp_path / "data"
    path.write_bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes())
    assert digests.digest_of(path) == "blake3:" + blake3.blake3(path.read_bytes()).hexdigest()
    assert digests.digest_differs(path, digests.digest_of(path, "sha256")) is False
    assert digests.digest_differs(path, "md5:" + "0" * 32) is None


def test_one_read_of_the_source_gives_its_digest_and_whether_its_arrays_are_finite(tmp_path):
    path = tmp_path / "data"
    values = np.random.default_rng(7).standard_normal(digests.DIGEST_RUN // 2 + 5).astype(np.float32)  # 2+ runs
    with_nan = values.copy()
    with_nan[-3] = np.nan
    path.write_bytes(b"header of 13 " + values.tobytes() + with_nan.tobytes() + b"tail")
    finite = inputs.FileArray(path, 13, np.dtype(np.float32), values.shape)
    not_finite = inputs.FileArray(path, 13 + values.nbytes, np.dtype(np.float32), values.shape)
    beyond = inputs.FileArray(path, path.stat().st_size - 4, np.dtype(np.float32), (2,))  # the file is shorter
    reading = digests.SourcePass(path)
    for array in (finite, not_finite, beyond):
        reading.watch(array)
    data = path.read_bytes()
    crc = _zip._crc32
    claimed = data + bytes(5)  # what a checksum stored for bytes past the end was made of
    whole, cut, wrong = (
        reading.checksum(5, size, crc, zlib.crc32(claimed[5 : 5 + size]) ^ flip, f"damaged {size} {flip}")
        for size, flip in ((len(data) - 9, 0), (len(data), 0), (len(data) - 9, 1))  # across runs; past the end
    )
    assert reading.start().digest.result() == digests.digest_of(path)
    assert reading.checksum(0, 1, crc, 0, "too late") is None  # begun: the caller reads it alone
    whole()
    for guard in (cut, wrong):
        with pytest.raises(BadInput, match="damaged"):
            guard()
    assert reading.finite(finite).result() is True
    assert reading.finite(finite[100:200]).result() is True  # a block of a watched array
    assert reading.finite(not_finite).result() is False
    assert reading.finite(beyond).result() is False
    assert reading.finite(inputs.FileArray(path, 1, np.dtype(np.float32), (2,))) is None  # not watched
    overlapping = digests.SourcePass(path)  # read as part of the range it overlaps, where its values lie alike
    inside, across = (inputs.FileArray(path, at, np.dtype(np.float32), (4,)) for at in (17, 15))
    for array in (finite, inside, across):
        overlapping.watch(array)
    overlapping.start()
    assert overlapping.finite(finite).result() is True
    assert overlapping.finite(inside).result() is True
    assert overlapping.finite(across) is None  # its floats are not the range's: the writer counts them


def test_blocks_copied_file_to_file_are_not_read_again_for_the_nan_scan(tmp_path, monkeypatch):
    scanned: list[type] = []
    count = writer.count_non_finite
    monkeypatch.setattr(writer, "count_non_finite", lambda block: scanned.append(type(block)) or count(block))
    api.convert(TORCH / "lstm_proj.pt", tmp_path / "a.bin")
    assert inputs.FileArray not in scanned  # the digest's read of the source found their values finite
    api.convert(TORCH / "lstm_proj.pt", tmp_path / "b.bin", hash_source=False)
    assert inputs.FileArray in scanned  # without that read, the writer reads them
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


@pytest.mark.parametrize("hash_source", [True, False])
def test_nan_and_inf_in_blocks_copied_file_to_file_are_counted_and_named(hash_source, tmp_path):
    torch.manual_seed(0)
    state = torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True).state_dict()
    state["weight_hh_l1_reverse"][2 * 7 + 3, 1] = float("nan")  # torch's gate 2 (g), cuDNN's c
    state["weight_hh_l1_reverse"][2 * 7 + 4, 0] = float("-inf")
    state["bias_ih_l0"][3 * 7] = float("inf")  # gate 3 (o)
    torch.save(state, tmp_path / "nan.pt")
    result = api.convert(tmp_path / "nan.pt", tmp_path / "nan.bin", hash_source=hash_source)
    assert result.warnings == [
        "rnn: layer1.rev.R_c holds 2 NaN or Inf value(s)",
        "rnn: layer0.fwd.bW_o holds 1 NaN or Inf value(s)",
    ]


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    size=st.integers(0, 300),
    specials=st.lists(st.tuples(st.integers(0, 299), st.sampled_from([np.nan, np.inf, -np.inf])), max_size=5),
    scale=st.sampled_from([1.0, 1e4, 6e4, 1e30, 3e38, 1e300]),
    seed=st.integers(0, 2**16),
)
def test_the_non_finite_count_is_exact(dtype, size, specials, scale, seed):
    with np.errstate(over="ignore"):
        values = (np.random.default_rng(seed).standard_normal(size) * scale).astype(dtype)
    for index, value in specials:
        if index < size:
            values[index] = value
    assert count_non_finite(values) == size - np.count_nonzero(np.isfinite(values))


KERAS_FILES = sorted(
    p
    for folder in ("keras3", "keras2", "tf_keras")
    for p in (FIXTURES / folder).iterdir()
    if p.suffix in (".h5", ".keras") and "reset_before" not in p.name  # those GRUs have no cuDNN form
)


@pytest.mark.slow
@pytest.mark.parametrize("path", KERAS_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_keras_weights_mapped_in_place_are_those_h5py_reads(path, tmp_path, monkeypatch):
    mapped: list[str] = []
    real = reader.TensorReader._mapped

    def spy(self, dataset):
        values = real(self, dataset)
        if isinstance(values, inputs.FileArray):
            mapped.append(dataset.name)
        return values

    monkeypatch.setattr(reader.TensorReader, "_mapped", spy)
    fast = api.convert(path, tmp_path / "fast.safetensors")
    if "bf16" not in path.name:  # bfloat16 words are widened on reading, never mapped
        assert mapped
    monkeypatch.setattr(reader.TensorReader, "_mapped", lambda self, dataset: dataset[...])
    plain = api.convert(path, tmp_path / "plain.safetensors")
    assert [r.name for r in fast.rnns] == [r.name for r in plain.rnns]
    assert [np.asarray(b.words).tobytes() for b in cudnn.open_safetensors(tmp_path / "fast.safetensors")] == [
        np.asarray(b.words).tobytes() for b in cudnn.open_safetensors(tmp_path / "plain.safetensors")
    ]


@pytest.mark.parametrize("hash_source", [True, False])
def test_a_keras_archive_is_read_once_for_its_digest_and_its_member_crc(hash_source, tmp_path, monkeypatch):
    own_reads: list[Path] = []
    checksum_guard = _zip.checksum_guard
    monkeypatch.setattr(_zip, "checksum_guard", lambda *args: own_reads.append(args[0]) or checksum_guard(*args))
    source = FIXTURES / "keras3" / "lstm.keras"
    api.convert(source, tmp_path / "a.bin", hash_source=hash_source)
    assert own_reads == ([] if hash_source else [source])  # the digest's read computed the CRC-32 too


def test_a_file_loaded_outside_a_conversion_leaves_no_guard_behind(tmp_path):
    """A damaged .keras loaded through the library must not hold up a later, unrelated conversion."""
    damaged = tmp_path / "lstm.keras"
    source = FIXTURES / "keras3" / "lstm.keras"
    with zipfile.ZipFile(source) as archive:
        member = archive.getinfo("model.weights.h5")
    data = bytearray(source.read_bytes())
    data[member.header_offset + 200] ^= 0xFF  # inside model.weights.h5: its CRC-32 no longer matches
    damaged.write_bytes(bytes(data))
    with contextlib.suppress(Exception), api.load(damaged) as rnns:
        [rnn.arrays() for rnn in rnns]
    api.convert(TORCH / "rnn_tanh.pt", tmp_path / "later.bin")
    assert (tmp_path / "later.bin").exists()


def test_a_kernel_stored_as_columns_is_transposed_straight_into_the_output(tmp_path):
    """A kernel whose column blocks are the gates (a Keras kernel, here in another gate order than cuDNN's) goes from
    the source file into a map of its place in the output, tile by tile, each band summed as it is copied: the bytes
    and the NaN count those of the block-by-block write, and no copy of the kernel, transposed or not, is made in
    memory."""
    spec = RNNSpec("lstm", 384, 256)
    order = tuple(reversed(spec.gates))
    rng = np.random.default_rng(0)
    stored = {kind: rng.standard_normal((n, 4 * 256), dtype=np.float32) for kind, n in ((Kind.W, 384), (Kind.R, 256))}
    stored[Kind.W][5, order.index(spec.gates[1]) * 256 + 3] = np.nan
    stored[Kind.R][:4, :8] = 3e38  # finite, though their sum overflows: counted, not taken for NaN or Inf
    source = tmp_path / "kernels.bin"
    source.write_bytes(stored[Kind.W].tobytes() + stored[Kind.R].tobytes())
    in_file = {
        Kind.W: inputs.FileArray(source, 0, np.dtype(np.float32), (384, 1024)),
        Kind.R: inputs.FileArray(source, stored[Kind.W].nbytes, np.dtype(np.float32), (256, 1024)),
    }

    def block(key: ParamKey) -> np.ndarray:  # as the Keras reader loads one: its whole kernel transposed first
        at = order.index(key.gate) * 256
        return transposed(in_file[key.kind])[at : at + 256]

    biases = {key: rng.standard_normal(256, dtype=np.float32) for key in spec.param_keys() if key.kind not in stored}
    loaders = {
        key: functools.partial(block, key) if key.kind in stored else biases[key].copy for key in spec.param_keys()
    }
    rnn = CanonicalRNN(
        "rnn", spec, loaders, columns=lambda _, __, kind: (in_file[kind], order) if kind in in_file else None
    )
    etype = element_type("float32")
    blockwise = io.BytesIO()  # no file under it: each block written as it is loaded
    expected = writer.write_weight_space(rnn, blockwise, etype)
    with open(tmp_path / "out.bin", "w+b") as f:
        tracemalloc.start()
        warnings = writer.write_weight_space(rnn, f, etype)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert (tmp_path / "out.bin").read_bytes() == blockwise.getvalue()
    assert warnings == expected == [f"rnn: {ParamKey(0, 0, Kind.W, spec.gates[1]).label} holds 1 NaN or Inf value(s)"]
    assert peak < stored[Kind.R].nbytes // 4, peak  # a band of rows, not a kernel


@pytest.mark.parametrize("failure", [errno.ENOSPC, errno.EOPNOTSUPP])
def test_a_kernels_place_that_cannot_be_allocated_is_a_full_disk_or_a_plain_write(failure, tmp_path, monkeypatch):
    """A full disk while a kernel's place is allocated is one sentence and no output; a file system that cannot
    allocate ahead gets the blocks written one by one, the same bytes."""
    source = FIXTURES / "keras3" / "lstm.h5"
    api.convert(source, tmp_path / "mapped.bin")

    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(failure, os.strerror(failure))

    monkeypatch.setattr(outputs.os, "posix_fallocate", refuse)
    if failure == errno.ENOSPC:
        with pytest.raises(BadInput, match=r"^cannot write .*written\.bin: .*[Nn]o space"):
            api.convert(source, tmp_path / "written.bin")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mapped.bin", "mapped.bin.json"]
    else:
        api.convert(source, tmp_path / "written.bin")
        assert (tmp_path / "written.bin").read_bytes() == (tmp_path / "mapped.bin").read_bytes()


def test_a_failure_while_a_kernel_is_transposed_into_its_place_is_said_as_itself(tmp_path, monkeypatch):
    """The map of a kernel's place is let go without hiding what went wrong (arrays on it live on in the traceback)."""

    def changed(block, out, pieces=None, sums=False):
        out[0, 0] = 1.0
        raise inputs.SourceChanged(FIXTURES / "keras3" / "lstm.h5")

    monkeypatch.setattr(writer, "transpose_into", changed)
    with pytest.raises(inputs.SourceChanged):
        api.convert(FIXTURES / "keras3" / "lstm.h5", tmp_path / "out.bin")
    assert list(tmp_path.iterdir()) == []


def test_a_weight_space_is_hashed_behind_its_writer_not_read_again_after_it(tmp_path, monkeypatch):
    """The digest a sidecar records of its blob is computed as the blob is written (a thread hashing each block
    once it is in the file), not by reading the finished file again: `digest_of` is never asked, and the digest is
    the finished file's, for a state_dict's blocks copied file to file and a Keras kernel transposed into its map."""

    def read_again(*args, **kwargs):
        raise AssertionError("the finished blob was read again for its digest")

    monkeypatch.setattr(writer, "digest_of", read_again)
    for source, out in ((FIXTURES / "torch" / "rnn_tanh.pt", "t.bin"), (FIXTURES / "keras3" / "lstm.h5", "k.bin")):
        api.convert(source, tmp_path / out)
        recorded = json.loads((tmp_path / f"{out}.json").read_text())["weight_space"]["digest"]
        assert recorded == digests.digest_of(tmp_path / out)


def test_the_trailing_digest_is_the_files_and_stops_with_its_writer(tmp_path):
    """Told each block written, it gives the digest of the whole file; leaving it on an error stops its thread; a
    file shorter than it was told is an error, not a digest of fewer bytes."""
    path, rng = tmp_path / "f.bin", np.random.default_rng(0)
    with open(path, "wb") as f, digests.TrailingDigest(path) as trailing:
        for size in (1, 5 << 20, 3, 2 << 20):
            f.write(rng.bytes(size))
            f.flush()
            trailing.written(f.tell())
        got = trailing.result()
    assert got == digests.digest_of(path)
    with pytest.raises(KeyError), open(path, "ab") as f, digests.TrailingDigest(path) as trailing:
        trailing.written(10)
        raise KeyError("the writer failed")
    assert not trailing._thread.is_alive()
    with digests.TrailingDigest(path) as trailing:
        trailing.written(path.stat().st_size + 1)
        with pytest.raises(RuntimeError, match="shorter than"):
            trailing.result()
