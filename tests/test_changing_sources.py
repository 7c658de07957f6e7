"""A source that changes while rnnconv reads it: truncated, extended, rewritten or replaced mid-conversion.

Every format whose values rnnconv reads in place (zip `.pt` storages, `.safetensors`, contiguous `.h5` and `.keras`
datasets, cuDNN blobs with a sidecar or flags, TF1 data files, ONNX external data) must end the same way: exit 2,
one sentence saying the source changed, no output, no temporary, never a signal (a memory-mapped file that shrinks
raises SIGBUS, exit 135). The change is made at a fixed point of the conversion by a hook in the rnnconv process
itself (when its outputs are opened, or after its first block is written), so nothing here races the clock.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, ROOT, assert_clean_failure

from rnnconv import api
from rnnconv.safeio import inputs, outputs

CHANGED = "changed while it was being read"

# Runs rnnconv's command line with its source changed at one point: `detect` (just after rnnconv's first look),
# `h5open` (as libhdf5 opens it), `outputs` (the temporaries exist, no value read yet) or `copy` (the first block
# written, the next not yet). Sources are read lazily, so the last two fall in the middle of reading.
DRIVER = """
import contextlib, os, sys, time
from pathlib import Path
from rnnconv.safeio import outputs

victim, how, when, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
done = []

def meddle():
    if done:
        return
    done.append(True)
    size = victim.stat().st_size
    if how == "truncate":
        os.truncate(victim, size // 3)
    elif how == "empty":
        os.truncate(victim, 0)
    elif how == "extend":
        with open(victim, "ab") as f:
            f.write(b"\\0" * 4096)
    elif how == "rewrite":  # the same size, other bytes; past a coarse clock's tick, so its times move
        time.sleep(0.03)
        with open(victim, "r+b") as f:
            f.seek(size // 2)
            f.write(bytes(b ^ 0xFF for b in f.read(64))[: 64])
    elif how == "replace":  # another file put at its name, as a writer that saves by renaming does
        other = victim.with_name(victim.name + ".new")
        other.write_bytes(victim.read_bytes()[::-1])
        os.replace(other, victim)
    elif how == "fifo":  # a FIFO at its name: opening it to read waits for a writer, for ever
        victim.unlink()
        os.mkfifo(victim)

real_outputs, real_write = outputs.atomic_outputs, outputs.write_array

@contextlib.contextmanager
def atomic_outputs(paths, force):
    with real_outputs(paths, force) as temps:
        if when == "outputs":
            meddle()
        yield temps

written = []

def write_array(f, array):
    written.append(True)
    if when == "copy" and len(written) == 2:
        meddle()
    return real_write(f, array)

outputs.atomic_outputs, outputs.write_array = atomic_outputs, write_array
if when == "detect":  # just after the first look, before anything opens the file to see what it is
    from rnnconv.formats import registry

    real_detect = registry.detect

    def detect(path):
        meddle()
        return real_detect(path)

    registry.detect = detect
if when == "h5open":  # as libhdf5 opens the file (in rnnconv, and in its structure check's child)
    import h5py

    real_file = h5py.File

    def File(name, *args, **kwargs):
        if isinstance(name, (str, Path)):  # the source, by its name or by the one rnnconv pins it under
            meddle()
        return real_file(name, *args, **kwargs)

    h5py.File = File
from rnnconv.cli.commands import main
sys.argv = ["rnnconv", *args]
main()
"""

RAW_FLAGS = ["--mode", "lstm", "--input-size", "32", "--hidden-size", "128", "--num-layers", "2", "--bidirectional"]


@dataclass
class Source:
    files: list[Path]  # what makes up the source; the first is the file changed
    args: list[str]  # how a command names it ({dir}: the folder it is copied to)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Source]:
    """One model (a 2-layer bidirectional LSTM, 2.2 MB) in every format rnnconv reads in place, and Keras 3's and
    TensorFlow's own small files."""
    folder = tmp_path_factory.mktemp("sources")
    torch.manual_seed(0)
    pt = folder / "lstm.pt"
    torch.save(torch.nn.LSTM(32, 128, num_layers=2, bidirectional=True).state_dict(), pt)
    for target, to in (
        ("lstm.weights.h5", None),
        ("lstm.keras", None),
        ("state.safetensors", "torch"),
        ("lstm.bin", None),
        ("lstm.safetensors", None),
    ):
        api.convert(pt, folder / target, to=to)
    shutil.copy(folder / "lstm.bin", folder / "weights.raw")
    shutil.copy(FIXTURES / "keras3" / "lstm.h5", folder / "keras3.h5")  # what Keras 3's model.save("x.h5") writes
    for name in ("lstm2.ckpt.data-00000-of-00001", "lstm2.ckpt.index"):
        shutil.copy(FIXTURES / "tf1" / name, folder / name)
    for name in ("lstm_external.onnx.data", "lstm_external.onnx"):
        shutil.copy(FIXTURES / "onnx" / name, folder / name)
    stacked = ["--layer", "rnn_layer0,rnn_layer1"]  # the two Keras layers rnnconv writes, as one cuDNN RNN
    return {
        "pt": Source([pt], ["{dir}/lstm.pt"]),
        "torch_safetensors": Source([folder / "state.safetensors"], ["{dir}/state.safetensors"]),
        "h5": Source([folder / "keras3.h5"], ["{dir}/keras3.h5"]),
        "weights_h5": Source([folder / "lstm.weights.h5"], ["{dir}/lstm.weights.h5", *stacked]),
        "keras": Source([folder / "lstm.keras"], ["{dir}/lstm.keras", *stacked]),
        "bin": Source([folder / "lstm.bin", folder / "lstm.bin.json"], ["{dir}/lstm.bin"]),
        "rnnconv_safetensors": Source([folder / "lstm.safetensors"], ["{dir}/lstm.safetensors"]),
        "raw": Source([folder / "weights.raw"], ["{dir}/weights.raw", *RAW_FLAGS]),
        "tf1": Source([folder / "lstm2.ckpt.data-00000-of-00001", folder / "lstm2.ckpt.index"], ["{dir}/lstm2.ckpt"]),
        "onnx_external": Source(
            [folder / "lstm_external.onnx.data", folder / "lstm_external.onnx"], ["{dir}/lstm_external.onnx"]
        ),
    }


def converted_while_changed(
    tmp_path: Path, source: Source, how: str, when: str, output: str
) -> subprocess.CompletedProcess:
    """The conversion of a copy of `source` to `output`, its first file changed `how` at `when`."""
    for path in source.files:
        shutil.copy(path, tmp_path / path.name)
    args = [a.replace("{dir}", str(tmp_path)) for a in source.args]
    command = ["convert", args[0], str(tmp_path / "out" / output), *args[1:]]
    (tmp_path / "out").mkdir()
    return subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path / source.files[0].name), how, when, *command],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def assert_refused_cleanly(result: subprocess.CompletedProcess, out: Path) -> None:
    assert result.returncode >= 0, f"killed by {signal.Signals(-result.returncode).name}: {result.stderr[-500:]}"
    assert_clean_failure(result, 2, CHANGED)
    assert os.listdir(out) == [], "an output or a temporary was left"


FORMATS = [
    "pt",
    "torch_safetensors",
    "h5",
    "weights_h5",
    "keras",
    "bin",
    "rnnconv_safetensors",
    "raw",
    "tf1",
    "onnx_external",
]


def output_for(name: str) -> str:
    return "back.pt" if name in ("bin", "rnnconv_safetensors", "raw") else "out.bin"


@pytest.mark.parametrize("when", ["outputs", "copy"])
@pytest.mark.parametrize("name", FORMATS)
def test_a_source_cut_short_mid_conversion_is_refused_not_a_signal(name, when, sources, tmp_path):
    source = sources[name]
    result = converted_while_changed(tmp_path, source, "truncate", when, output_for(name))
    assert_refused_cleanly(result, tmp_path / "out")
    assert str(tmp_path / source.files[0].name) in " ".join(result.stderr.split())  # the file that changed is named


@pytest.mark.parametrize("how", ["empty", "extend", "rewrite", "replace"])
@pytest.mark.parametrize("name", ["pt", "keras", "bin", "tf1"])
def test_a_source_extended_rewritten_or_replaced_mid_conversion_commits_nothing(name, how, sources, tmp_path):
    result = converted_while_changed(tmp_path, sources[name], how, "copy", output_for(name))
    assert_refused_cleanly(result, tmp_path / "out")


@pytest.mark.parametrize("name", ["pt", "h5", "bin"])
def test_a_source_left_alone_converts_under_the_same_hooks(name, sources, tmp_path):
    """The hooks themselves change nothing: with no change made, each conversion above succeeds."""
    result = converted_while_changed(tmp_path, sources[name], "nothing", "copy", output_for(name))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / output_for(name)).exists()


def test_verify_refuses_a_blob_that_changes_while_it_is_run(sources, tmp_path, monkeypatch):
    for path in sources["bin"].files:
        shutil.copy(path, tmp_path / path.name)
    blob = tmp_path / "lstm.bin"
    real = inputs.read_into

    def cut(path, offset, buffer):
        if Path(path) == blob and blob.stat().st_size:
            os.truncate(blob, blob.stat().st_size // 2)
        return real(path, offset, buffer)

    monkeypatch.setattr(inputs, "read_into", cut)
    with pytest.raises(inputs.SourceChanged, match=CHANGED):
        api.verify(blob, backend="numpy", report=tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())  # the CI step that asked for a report gets one
    assert report["verdict"] == "error" and CHANGED in json.dumps(report)


def test_a_change_that_makes_a_reader_fail_is_reported_as_the_change(sources, tmp_path):
    """h5py reads a cut-short HDF5 file as damaged: the cause, the change, is what the user is told."""
    result = converted_while_changed(tmp_path, sources["h5"], "empty", "outputs", "out.bin")
    assert_refused_cleanly(result, tmp_path / "out")
    assert "damaged" not in result.stderr


def test_a_kernel_copy_that_comes_up_short_is_the_change_too(tmp_path):
    source = tmp_path / "data"
    source.write_bytes(np.arange(1 << 16, dtype=np.float32).tobytes())
    values = inputs.FileArray(source, 0, np.dtype(np.float32), (1 << 16,))
    os.truncate(source, 1000)
    for copies in (outputs._KERNEL_COPIES, []):  # in the kernel, and through this process
        with open(tmp_path / "out", "wb") as f:
            outputs._KERNEL_COPIES, saved = copies, outputs._KERNEL_COPIES
            try:
                with pytest.raises(inputs.SourceChanged):
                    outputs.write_array(f, values)
            finally:
                outputs._KERNEL_COPIES = saved


def test_a_change_is_seen_in_size_times_and_the_file_itself(tmp_path):
    source = tmp_path / "data"
    source.write_bytes(b"x" * 100)
    touched = inputs.unchanged(source)
    stat = source.stat()
    source.write_bytes(b"y" * 100)  # the same size, other bytes...
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ...and the modification time set back
    with pytest.raises(inputs.SourceChanged):
        touched()  # the change time cannot be set back
    replaced = inputs.unchanged(source)
    (tmp_path / "other").write_bytes(source.read_bytes())
    os.replace(tmp_path / "other", source)
    with pytest.raises(inputs.SourceChanged):
        replaced()


def test_a_fifo_or_a_device_put_at_the_source_name_neither_hangs_nor_feeds_a_read(tmp_path):
    """Reads after the first look open the file again: a FIFO at its name would block that open for ever, a
    device feed it bytes that are not the file's. (In a child process: a regression hangs it, not the tests.)"""
    source = tmp_path / "data"
    os.mkfifo(source)
    code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from rnnconv.safeio import inputs\n"
        "try:\n"
        "    inputs.FileArray(Path(sys.argv[1]), 0, np.dtype(np.float32), (1024,)).read()\n"
        "except inputs.SourceChanged as changed:\n"
        "    print(changed)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(source)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert CHANGED in result.stdout, result.stderr
    source.unlink()
    source.symlink_to("/dev/zero")
    with pytest.raises(inputs.SourceChanged):
        inputs.FileArray(source, 0, np.dtype(np.float32), (1024,)).read()


@pytest.mark.parametrize(("name", "when"), [("pt", "detect"), ("keras", "detect"), ("h5", "h5open"), ("bin", "detect")])
def test_a_fifo_put_at_the_source_name_just_after_the_first_look_is_no_hang(name, when, sources, tmp_path):
    """Opening a FIFO to read waits for a writer for ever, in rnnconv's own opens and in libhdf5's or zipfile's:
    while a source is read, rnnconv is that writer for an instant, and the reader finds an empty file."""
    result = converted_while_changed(tmp_path, sources[name], "fifo", when, output_for(name))
    assert_refused_cleanly(result, tmp_path / "out")
