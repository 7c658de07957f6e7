"""How values still in a source file are copied to an output: inside the kernel where they keep their place within a
page (as `cp` copies), else through one buffer a run at a time, read and written once (the kernel's copy shifts
bytes more slowly). Either way the bytes are the source's and nothing is held whole."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rnnconv.safeio import inputs, outputs

PAGE = outputs.PAGE


@pytest.fixture
def ways(monkeypatch):
    """The bytes each way of copying moved, by way."""
    moved: dict[str, int] = {"kernel": 0, "shifted": 0}
    real_kernel, real_shifted = outputs._kernel_copy, outputs._read_and_write

    def kernel(src, dst, offset, position, size, source):
        done = real_kernel(src, dst, offset, position, size, source)
        moved["kernel"] += size if done else 0
        return done

    def shifted(src, dst, offset, position, size, source):
        real_shifted(src, dst, offset, position, size, source)
        moved["shifted"] += size

    monkeypatch.setattr(outputs, "_kernel_copy", kernel)
    monkeypatch.setattr(outputs, "_read_and_write", shifted)
    return moved


def source_file(tmp_path, size: int) -> tuple[os.PathLike, bytes]:
    data = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "source"
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize(
    ("offset", "position", "way"),
    [
        (0, 0, "kernel"),
        (3 * PAGE, PAGE, "kernel"),  # whole pages apart: each byte keeps its place within a page
        (100, 0, "shifted"),
        (PAGE, 36, "shifted"),
    ],
)
def test_a_copy_goes_in_the_kernel_only_where_no_byte_shifts_within_a_page(tmp_path, ways, offset, position, way):
    size = 2 * outputs.SHIFTED_RUN + 12345  # several runs of the buffer, the last one short
    path, data = source_file(tmp_path, offset + size)
    values = inputs.FileArray(path, offset, np.dtype(np.uint8), (size,))
    with open(tmp_path / "out", "wb") as f:
        f.write(b"h" * position)
        outputs.write_array(f, values)
        f.write(b"tail")
    assert ways == {"kernel": size if way == "kernel" else 0, "shifted": size if way == "shifted" else 0}
    assert (tmp_path / "out").read_bytes() == b"h" * position + data[offset:] + b"tail"


def test_a_shifted_copy_of_a_source_cut_short_is_the_change(tmp_path):
    path, _ = source_file(tmp_path, 3 * outputs.SHIFTED_RUN)
    values = inputs.FileArray(path, 100, np.dtype(np.uint8), (3 * outputs.SHIFTED_RUN - 100,))
    os.truncate(path, outputs.SHIFTED_RUN + 5)
    with open(tmp_path / "out", "wb") as f, pytest.raises(inputs.SourceChanged):
        outputs.write_array(f, values)


def test_without_a_kernel_copy_even_an_aligned_copy_goes_through_the_buffer(tmp_path, ways, monkeypatch):
    monkeypatch.setattr(outputs, "_KERNEL_COPIES", [])
    path, data = source_file(tmp_path, 5000)
    with open(tmp_path / "out", "wb") as f:
        outputs.write_array(f, inputs.FileArray(path, 0, np.dtype(np.uint8), (5000,)))
    assert ways == {"kernel": 0, "shifted": 5000}
    assert (tmp_path / "out").read_bytes() == data


def test_without_positioned_reads_the_values_go_through_the_file_object(tmp_path, ways, monkeypatch):
    monkeypatch.delattr(os, "preadv")  # as on Windows
    path, data = source_file(tmp_path, 5000)
    with open(tmp_path / "out", "wb") as f:
        f.write(b"h")
        outputs.write_array(f, inputs.FileArray(path, 0, np.dtype(np.uint8), (5000,)))
    assert ways == {"kernel": 0, "shifted": 0}
    assert (tmp_path / "out").read_bytes() == b"h" + data
