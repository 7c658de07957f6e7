"""TensorFlow checkpoints read without TensorFlow: every tensor as TensorFlow's own reader gives it, and damaged or
hostile indexes and data files refused with one sentence (exit 2), never a traceback, hang or huge allocation."""

from __future__ import annotations

import contextlib
import hashlib
import struct
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
from conftest import FIXTURES, assert_clean_failure, run_cli

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnconv
from rnnconv.errors import BadInput
from rnnconv.formats.tf1 import tensor_bundle
from rnnconv.formats.tf1.tensor_bundle import Checkpoint

TF1 = FIXTURES / "tf1"
FLOATS = {"float16": tf.float16, "bfloat16": tf.bfloat16, "float32": tf.float32, "float64": tf.float64}
KERNEL = "lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"
BIAS = "lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias"


def assert_reads_as_tensorflow(prefix: Path) -> None:
    """Same names, shapes and dtypes as TF's reader lists; every float tensor bit for bit (bfloat16 widened)."""
    reader = tf.train.load_checkpoint(str(prefix))
    checkpoint = Checkpoint.open(prefix)
    assert checkpoint.shapes == {n: tuple(s) for n, s in reader.get_variable_to_shape_map().items()}
    assert checkpoint.dtypes == {n: d.name for n, d in reader.get_variable_to_dtype_map().items()}
    for name, dtype in checkpoint.dtypes.items():
        if dtype not in FLOATS or checkpoint.entries[name].sliced:
            with pytest.raises(BadInput, match=r"not a float type rnnconv reads|saved in slices"):
                checkpoint.tensor(name)
            continue
        expected = reader.get_tensor(name)
        expected = np.asarray(expected, np.float32) if dtype == "bfloat16" else np.asarray(expected)
        got = checkpoint.tensor(name)
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), name
        assert got.tobytes() == expected.tobytes(), name
    checkpoint.check_read()


@pytest.mark.parametrize("index", sorted(TF1.glob("*.index")), ids=lambda p: p.name)
def test_every_fixture_reads_as_tensorflow_reads_it(index):
    assert_reads_as_tensorflow(index.with_suffix(""))


def save(prefix: Path, tensors: dict[str, tf.Tensor]) -> Path:
    """A checkpoint written by TensorFlow's own SaveV2 op (what Saver and tf.train.Checkpoint run)."""
    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=list(tensors),
        shape_and_slices=[""] * len(tensors),
        tensors=list(tensors.values()),
    )
    return prefix.with_name(prefix.name + ".index")


SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, 65504.0, -3.5])


@st.composite
def tensors(draw) -> dict[str, tf.Tensor]:
    count = draw(st.integers(1, 6))
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}(/[a-z0-9_.]{1,8}){0,3}", fullmatch=True),
                          min_size=count, max_size=count, unique=True))  # fmt: skip
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    found: dict[str, tf.Tensor] = {}
    for name in names:
        dtype = draw(st.sampled_from([*FLOATS, "int64", "string"]))
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        values = rng.normal(0, 10, shape)
        if values.size:
            values.flat[rng.integers(0, values.size, min(values.size, 3))] = rng.choice(SPECIAL, min(values.size, 3))
        if dtype == "string":
            found[name] = tf.constant(np.full(shape, b"text", object))
        elif dtype == "int64":
            found[name] = tf.constant(rng.integers(-(2**40), 2**40, shape))
        else:
            found[name] = tf.cast(tf.constant(values), FLOATS[dtype])
    return found


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors())
def test_checkpoints_tensorflow_writes_read_identically(tmp_path_factory, written):
    prefix = tmp_path_factory.mktemp("bundle") / "model.ckpt"
    save(prefix, written)
    assert_reads_as_tensorflow(prefix)


def test_saver_and_object_checkpoints_and_an_index_of_several_blocks(tmp_path):
    """tf.train.Checkpoint's names and object graph; an index past one 256 KiB block (TF's block size)."""
    objects = {"dense": tf.Variable(np.ones((3, 2), np.float32)), "scale": tf.Variable(tf.constant(2.0, tf.bfloat16))}
    path = tf.train.Checkpoint(**objects).write(str(tmp_path / "objects"))
    assert_reads_as_tensorflow(Path(path))
    names = {hashlib.sha256(str(i).encode()).hexdigest() * 2 + "/kernel": i for i in range(2500)}
    index = save(tmp_path / "many", {name: tf.constant(np.full(2, i, np.float32)) for name, i in names.items()})
    assert index.stat().st_size > 256 << 10
    assert_reads_as_tensorflow(tmp_path / "many")


# --- damaged files ------------------------------------------------------------------------------------------


def lstm_checkpoint(folder: Path, hidden: int = 4, n_in: int = 5) -> Path:
    rng = np.random.default_rng(0)
    return save(
        folder / "model.ckpt",
        {
            BIAS: tf.constant(rng.normal(size=4 * hidden).astype(np.float32)),
            KERNEL: tf.constant(rng.normal(size=(n_in + hidden, 4 * hidden)).astype(np.float32)),
        },
    )


def data_file(index: Path) -> Path:
    return index.with_name(index.name.removesuffix(".index") + ".data-00000-of-00001")


def flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x10
    path.write_bytes(bytes(raw))


def refused(index: Path, folder: Path, *phrases: str) -> None:
    """Converting it fails with one sentence, exit 2, and writes nothing."""
    out = folder / "out"
    out.mkdir()
    assert_clean_failure(run_cli("tf1-to-cudnn", index, "-o", out / "x.bin"), 2, *phrases)
    assert not list(out.iterdir())


@pytest.mark.slow
def test_a_flipped_byte_in_a_tensor_is_its_crc32c_also_when_verifying(tmp_path):
    index = lstm_checkpoint(tmp_path)
    blob = tmp_path / "blob.bin"
    rnnconv.convert(index, blob)
    flip(data_file(index), 100)  # a byte of the kernel (the bias's 64 bytes come first)
    refused(index, tmp_path, f"tensor {KERNEL!r} does not match its crc32c (damaged); nothing was written")
    assert_clean_failure(run_cli("verify", blob, "--backend", "numpy"), 2, "does not match its crc32c (damaged)")


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: raw[:30] + bytes([raw[30] ^ 1]) + raw[31:], "does not match its crc32c (damaged)"),
        (lambda raw: raw[: len(raw) // 2], "does not end with the table's magic number"),
        (lambda raw: raw[:20], "shorter than a table's footer"),
        (lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]), "does not end with the table's magic number"),
        (lambda raw: raw[:-48] + b"\xff" * 40 + raw[-8:], "a varint"),
        (
            lambda raw: raw[:-48] + (varint(0) * 2 + varint(10**6) + varint(9)).ljust(40, b"\0") + raw[-8:],
            "past the table's end",
        ),
    ],
    ids=["flipped byte", "truncated", "shorter than a footer", "wrong magic", "endless varint", "handle outside"],
)
def test_a_damaged_index_is_one_sentence(damage, message, tmp_path):
    index = lstm_checkpoint(tmp_path)
    index.write_bytes(damage(index.read_bytes()))
    refused(index, tmp_path, str(index), "is not a readable TensorFlow checkpoint", message)


@pytest.mark.slow
def test_a_truncated_data_file_is_refused_before_reading(tmp_path):
    index = lstm_checkpoint(tmp_path)
    data = data_file(index)
    data.write_bytes(data.read_bytes()[:-10])
    refused(
        index, tmp_path, f"tensor {KERNEL!r} claims 576 bytes at byte 64", "more than its data files hold (630 bytes)"
    )


@pytest.mark.slow
def test_every_flipped_byte_and_every_truncation_of_an_index_is_refused_or_harmless(tmp_path):
    """In-process, every position: BadInput, or (a byte no reader uses: padding) the same tensors."""
    index = lstm_checkpoint(tmp_path)
    original = index.read_bytes()
    expected = Checkpoint.open(index).shapes
    for damaged in [original[:n] for n in range(len(original))] + [
        original[:i] + bytes([original[i] ^ 0x41]) + original[i + 1 :] for i in range(len(original))
    ]:
        index.write_bytes(damaged)
        with contextlib.suppress(BadInput):
            assert Checkpoint.open(index).shapes == expected


# --- hostile indexes, written here (valid crc32cs, any content) ------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value % (1 << 64))


def header(shards: int = 1, big_endian: bool = False, min_consumer: int = 0) -> bytes:
    return field(1, shards) + field(2, int(big_endian)) + field(3, field(1, 1) + field(2, min_consumer))


def entry(data: bytes, dtype: int = 1, shape: tuple[int, ...] = (4,), **fields: int | bytes) -> bytes:
    """A BundleEntryProto of bytes at `offset` (0 by default) of data file 0; `fields` replace or add fields."""
    numbers = {"shard": 3, "offset": 4, "size": 5, "slices": 7}
    message = field(1, dtype) + field(2, b"".join(field(2, field(1, d)) for d in shape))
    values: dict[int, int | bytes] = {5: len(data)} | {numbers[k]: v for k, v in fields.items()}
    message += b"".join(field(n, v) for n, v in values.items())
    masked = masked_crc(google_crc32c.value(data))
    return message + varint(6 << 3 | 5) + struct.pack("<I", masked)


def masked_crc(crc: int) -> int:
    """crc32c::Mask, from tensorflow/core/lib/hash/crc32c.h."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def block(entries: list[tuple[bytes, bytes]], compression: int = 0) -> bytes:
    """A block of whole keys (no shared prefixes), one restart point, and its trailer."""
    body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in entries)
    body += struct.pack("<II", 0, 1)
    return body + bytes([compression]) + struct.pack("<I", masked_crc(google_crc32c.value(body + bytes([compression]))))


def table(entries: list[tuple[bytes, bytes]], compression: int = 0) -> bytes:
    data = block(entries, compression)
    meta = block([])
    separator = entries[-1][0] if entries else b""
    index = block([(separator, varint(0) + varint(len(data) - 5))])
    handles = varint(len(data)) + varint(len(meta) - 5) + varint(len(data) + len(meta)) + varint(len(index) - 5)
    footer = handles.ljust(40, b"\0") + (0xDB4775248B80FB57).to_bytes(8, "little")
    return data + meta + index + footer


def write(folder: Path, entries: list[tuple[bytes, bytes]], data: bytes, compression: int = 0) -> Path:
    index = folder / "model.ckpt.index"
    index.write_bytes(table(entries, compression))
    data_file(index).write_bytes(data)
    return index


VALUES = np.arange(4, dtype=np.float32).tobytes()


def test_the_hostile_writer_writes_what_tensorflow_reads(tmp_path):
    """The tables below are built by this file's own writer: TensorFlow reads a well-formed one."""
    index = write(tmp_path, [(b"", header()), (b"w", entry(VALUES))], VALUES)
    assert np.array_equal(tf.train.load_checkpoint(str(tmp_path / "model.ckpt")).get_tensor("w"), np.arange(4))
    assert np.array_equal(Checkpoint.open(index).tensor("w"), np.arange(4))


HOSTILE = {
    "no header": ([(b"w", entry(VALUES))], "it has no bundle header"),
    "big-endian": ([(b"", header(big_endian=True)), (b"w", entry(VALUES))], "written on a big-endian machine"),
    "newer format": ([(b"", header(min_consumer=2))], "may not read (it asks for >= 2)"),
    "no data files": ([(b"", header(shards=0))], "claims 0 data files"),
    "absurd data files": ([(b"", header(shards=10**9))], "claims 1000000000 data files"),
    "missing data file": ([(b"", header(shards=2))], "has no data file (model.ckpt.data-00000-of-00002 is missing"),
    "keys out of order": ([(b"", header()), (b"w", entry(VALUES)), (b"a", entry(VALUES))], "keys are not in order"),
    "huge tensor": (
        [(b"", header()), (b"w", entry(VALUES, shape=(1 << 40, 1 << 20), size=1 << 62))],
        f"claims {1 << 62} bytes at byte 0 of model.ckpt.data-00000-of-00001, more than its data files hold (16 bytes)",
    ),
    "size against shape": (
        [(b"", header()), (b"w", entry(VALUES, shape=(3,)))],
        "claims 16 bytes, but float32 of shape [3] is 12",
    ),
    "shard out of range": ([(b"", header()), (b"w", entry(VALUES, shard=3))], "names data file 3, of 1"),
    "negative offset": ([(b"", header()), (b"w", entry(VALUES, offset=-8))], "claims 16 bytes at byte -8"),
    "negative dimension": ([(b"", header()), (b"w", entry(VALUES, shape=(-1, 4)))], "has a negative dimension"),
    "unknown rank": ([(b"", header()), (b"w", entry(VALUES) + field(2, field(3, 1)))], "unknown rank"),
    "name not UTF-8": ([(b"", header()), (b"\xff\xfe", entry(VALUES))], "the name b'\\xff\\xfe' is not UTF-8"),
    "endless varint": ([(b"", header()), (b"w", b"\x08" + b"\xff" * 12)], "a varint exceeds 64 bits"),
    "group field": ([(b"", header()), (b"w", entry(VALUES) + b"\x0b")], "wire type 3"),
    "field past its message": ([(b"", header()), (b"w", entry(VALUES) + b"\x12\x7f")], "runs past its message"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_indexes_are_one_sentence(kind, tmp_path):
    entries, message = HOSTILE[kind]
    folder = tmp_path / "in"
    folder.mkdir()
    refused(write(folder, entries, VALUES), tmp_path, message)


def test_a_snappy_compressed_index_is_refused_with_the_reason(tmp_path):
    index = write(tmp_path, [(b"", header()), (b"w", entry(VALUES))], VALUES, compression=1)
    with pytest.raises(BadInput, match=r"snappy-compressed, which rnnconv does not read \(save it again"):
        Checkpoint.open(index)


def test_a_weight_of_another_type_is_listed_not_read(tmp_path):
    index = write(tmp_path, [(b"", header()), (b"w", entry(VALUES, dtype=3)), (b"z", entry(VALUES, dtype=99))], VALUES)
    checkpoint = Checkpoint.open(index)
    assert checkpoint.dtypes == {"w": "int32", "z": "DataType 99"}
    with pytest.raises(BadInput, match="tensor 'w' is int32, not a float type rnnconv reads"):
        checkpoint.tensor("w")


def test_partitioned_variables_are_listed_whole_and_refused(tmp_path):
    full = np.arange(9 * 16, dtype=np.float32).reshape(9, 16)
    tf.raw_ops.SaveV2(
        prefix=str(tmp_path / "model.ckpt"),
        tensor_names=[KERNEL, KERNEL, BIAS],
        shape_and_slices=["9 16 0,4:-", "9 16 4,5:-", ""],
        tensors=[full[:4], full[4:], np.zeros(16, np.float32)],
    )
    assert_reads_as_tensorflow(tmp_path / "model.ckpt")  # the slices' own entries are not listed, as in TF
    refused(tmp_path / "model.ckpt.index", tmp_path, f"tensor {KERNEL!r} is saved in slices (a partitioned variable)")


def test_more_entries_than_any_checkpoint_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tensor_bundle, "ENTRY_LIMIT", 5)
    entries = [(b"", header())] + [(f"w{i}".encode(), entry(VALUES)) for i in range(9)]
    with pytest.raises(BadInput, match="more than 5 entries and blocks"):
        Checkpoint.open(write(tmp_path, entries, VALUES))


def test_an_index_larger_than_any_checkpoint_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(tensor_bundle, "INDEX_LIMIT", 100)
    with pytest.raises(BadInput, match="more than 100 bytes"):
        Checkpoint.open(write(tmp_path, [(b"", header()), (b"w" * 200, entry(VALUES))], VALUES))
