"""`rnnconv gpu-battery` without a GPU: its configurations, checked by the real libcudnn, and a whole run
through stand-ins for the calls that need a GPU (libcuda, and cuDNN's handle-taking calls), which shows
what the JSON records, that it is written as the battery goes, and that a failure or an interrupt keeps it."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from cuda_stand_in import StandInCuda
from test_cudnn_backend_plumbing import StandInGPU

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.dtypes import element_type
from rnnconv.core.weightspace import regions, weight_space_elements
from rnnconv.gpu import api, battery, cuda
from rnnconv.gpu import backend as cudnn_backend
from rnnconv.gpu.descriptors import Descriptors

FULL, QUICK = battery.configurations(), battery.configurations(quick=True)


def test_the_battery_covers_what_it_is_for():
    specs = [c.spec for c in FULL]
    assert len(FULL) == 215 and len(set(specs)) == len(specs)
    assert {s.mode for s in specs} == {"lstm", "gru", "rnn_tanh", "rnn_relu"}
    assert {s.num_layers for s in specs} == {1, 2, 3} and {s.bidirectional for s in specs} == {False, True}
    assert set(Counter(s.dtype for s in specs)) == {"float32", "float16", "bfloat16", "float64"}
    sizes = {(s.input_size, s.hidden_size) for s in specs}
    assert {(5, 7), (37, 61), (143, 143), (1024, 2048)} == sizes  # odd, not multiples of 8, square, large
    projections = {(s.hidden_size, s.proj_size) for s in specs if s.proj_size}
    assert (2048, 512) in projections and len(projections) == 4  # one with a large hidden size
    for dtype in battery.DTYPES:  # every odd size in every type: where alignment padding would show
        assert {(37, 61), (143, 143)} <= {(s.input_size, s.hidden_size) for s in specs if s.dtype == dtype}


def test_quick_is_a_subset_of_each_kind():
    quick = [c.spec for c in QUICK]
    assert len(QUICK) == 16 and set(quick) <= {c.spec for c in FULL}
    assert {s.mode for s in quick} == {"lstm", "gru", "rnn_tanh", "rnn_relu"}
    assert {s.dtype for s in quick} == set(battery.DTYPES)
    assert {c.group for c in QUICK} == {"grid", "odd sizes", "large"} and any(s.proj_size for s in quick)


@pytest.mark.needs("cudnn")
def test_every_configuration_is_a_descriptor_cudnn_accepts():
    """cuDNN's set-calls validate sizes, modes and types without a GPU: a battery cuDNN would refuse fails here."""
    cudnn = api.Cudnn()
    for configuration in FULL:
        with Descriptors(cudnn, configuration.spec, battery.BATCH, battery.STEPS, np.array(battery.RAGGED)) as desc:
            assert desc.rnn.value


class LearningGPU(StandInGPU):
    """The plumbing tests' stand-in, learning each configuration from its RNN descriptor as the battery goes."""

    refuse: RNNSpec | None = None

    def __call__(self, name, *args):
        if name == "cudnnSetRNNDescriptor_v8":
            settings = args[1:13]
            modes = {code: mode for mode, code in api.RNN_MODE.items()}
            types = {code: dtype for dtype, code in api.DATA_TYPE.items()}
            hidden, proj = settings[9], settings[10]
            self.spec = RNNSpec(
                modes[settings[1]],
                settings[8],
                hidden,
                settings[11],
                settings[3] == 1,
                0 if proj == hidden else proj,
                types[settings[5]],
            )
            self.itemsize = element_type(self.spec.dtype).itemsize
            self.spec_bytes = weight_space_elements(self.spec) * self.itemsize
        if name == "cudnnRNNForward" and self.spec == self.refuse:
            raise api.CudnnError("cudnnRNNForward failed: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002)", 3002)
        return super().__call__(name, *args)


SMALL = [
    battery.Configuration(RNNSpec("lstm", 5, 7, 2, True, 3, "float16"), "grid", True),
    battery.Configuration(RNNSpec("gru", 37, 61, 1, False, 0, "bfloat16"), "odd sizes", True),
    battery.Configuration(RNNSpec("rnn_relu", 5, 7, 3, True, 0, "float64"), "grid", True),
]


@pytest.fixture
def stand_ins(monkeypatch):
    """The battery on stand-ins: libcuda (ctypes session) and the cuDNN calls that need a GPU."""
    libcuda = StandInCuda()
    monkeypatch.setattr(cuda.CudaDriver, "load", classmethod(lambda cls: cls(libcuda.functions(), "stand-in")))
    monkeypatch.setenv(cuda.SESSION_ENV, "ctypes")
    status = cudnn_backend.Status(True, "", {"cudnn_version": api.Cudnn().version_text})
    monkeypatch.setattr(battery, "probe", lambda: status)
    monkeypatch.setattr(battery, "configurations", lambda quick=False: SMALL)
    made = []

    def backend(found):
        made.append(cudnn_backend.CudnnBackend(found))
        stand_in = LearningGPU(made[-1].cudnn)
        monkeypatch.setattr(made[-1].cudnn, "call", stand_in)
        monkeypatch.setattr(made[-1].cudnn.lib, "cudnnDestroy", lambda handle: 0)
        made.append(stand_in)
        return made[-2]

    monkeypatch.setattr(battery, "CudnnBackend", backend)
    yield made
    assert not libcuda.memory and libcuda.pushed == 0 and not libcuda.problems


@pytest.mark.needs("cudnn")
def test_a_run_records_every_place_cuDNN_reported(stand_ins, tmp_path):
    lines = []
    report = battery.run_battery(tmp_path / "layout.json", say=lines.append)
    written = json.loads((tmp_path / "layout.json").read_text())
    assert written == json.loads(json.dumps(report))
    assert written["complete"] and written["configurations_run"] == 3 and written["gpu"] == "Stand-in H100"
    assert written["cuda_session"] == "ctypes (stand-in)" and written["format"] == battery.FORMAT
    for entry, configuration in zip(written["configurations"], SMALL):
        spec = configuration.spec
        assert entry["layout_matches"] and len(entry["placements"]) == len(regions(spec))
        assert {p["tensor"] for p in entry["placements"]} == {r.key.label for r in regions(spec)}
        assert all(set(p) >= {"offset_bytes", "dims", "strides", "rnnconv_offset_bytes"} for p in entry["placements"])
        assert set(entry["forward_runs"]) == {"ragged", "full"}
        assert entry["forward_runs"]["ragged"]["lengths"] == [6, 4, 2] and entry["forward_runs"]["full"]["lengths"] == [
            6,
            6,
            6,
        ]
        assert not entry["forward_runs"]["ragged"]["matches"]  # the stand-in's cudnnRNNForward leaves its outputs zero
    assert not written["all_match"]
    assert lines[0].startswith("3 configurations on Stand-in H100") and len(lines) == 4
    assert lines[1].startswith("[1/3] lstm, input 5, hidden 7, projection 3") and "TOO LARGE" in lines[1]
    assert battery.fixture_problems(written) == []  # what was written reads back as the layout it reported


@pytest.mark.needs("cudnn")
def test_a_configuration_cudnn_refuses_is_recorded_and_the_battery_goes_on(stand_ins, tmp_path, monkeypatch):
    monkeypatch.setattr(LearningGPU, "refuse", SMALL[0].spec)
    report = battery.run_battery(tmp_path / "layout.json", say=lambda line: None)
    first = report["configurations"][0]
    assert first["error"].startswith("CudnnError: cudnnRNNForward failed") and first["cudnn_status"] == 3002
    assert first["layout_matches"] and len(report["configurations"]) == 3  # its layout was recorded all the same


@pytest.mark.needs("cudnn")
def test_an_interrupted_run_leaves_what_it_found(stand_ins, tmp_path):
    lines = []

    def say(line):
        lines.append(line)
        if line.startswith("[2/3]"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        battery.run_battery(tmp_path / "layout.json", say=say)
    written = json.loads((tmp_path / "layout.json").read_text())
    assert not written["complete"] and written["stopped"] == "interrupted" and written["configurations_run"] == 2
    assert battery.fixture_problems(written)[0] == "the battery did not finish (interrupted): rerun it to the end"


@pytest.mark.needs("cudnn")
def test_an_existing_output_needs_force(stand_ins, tmp_path):
    (tmp_path / "layout.json").write_text("{}")
    with pytest.raises(Exception, match="--force"):
        battery.run_battery(tmp_path / "layout.json", say=lambda line: None)
    assert (tmp_path / "layout.json").read_text() == "{}"


class ReferenceBackend:
    """Answers with the numpy reference on exactly the inputs it gets (what a right cuDNN computes), plus `error`."""

    def __init__(self, error: float = 0.0):
        self.details: dict = {}
        self.error, self.seen = error, []

    def run(self, blob, inputs):
        from rnnconv.core.reference import forward

        self.seen.append(inputs)
        y, h_n, c_n = forward(blob.spec, blob.param, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
        return {"y": y + self.error, "h_n": h_n, "c_n": c_n}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_the_forward_check_is_verifys_with_inputs_rounded_to_the_blobs_type(dtype, tmp_path):
    from rnnconv.core.canonical import CanonicalRNN
    from rnnconv.core.compare import tolerance
    from rnnconv.core.dtypes import decode, encode
    from rnnconv.formats.cudnn.reader import open_bin
    from rnnconv.formats.cudnn.writer import write_bin

    spec = RNNSpec("lstm", 5, 7, 2, True, 3, dtype)
    rng = np.random.default_rng(1)
    arrays = {k: rng.normal(0, 0.4, spec.param_shape(k)).astype(np.float32) for k in spec.param_keys()}
    write_bin(CanonicalRNN.from_arrays("t", spec, arrays), tmp_path / "x.bin", dtype)
    blob = open_bin(tmp_path / "x.bin")
    tol = tolerance("cudnn", dtype, dtype)
    right = ReferenceBackend()
    result = battery.check_forward(right, blob, seed=2, ragged=True)
    assert (
        result["matches"]
        and result["max_abs_vs_numpy"] == 0
        and (result["atol"], result["rtol"])
        == (
            tol.atol,
            tol.rtol,
        )
    )
    etype = element_type(dtype)
    for name in ("x", "h0", "c0"):  # what cuDNN is given is what the reference is given: rounded to the type
        value = right.seen[0][name]
        np.testing.assert_array_equal(value, decode(encode(value, etype), etype))
    assert right.seen[0]["lengths"].tolist() == list(battery.RAGGED)
    assert battery.check_forward(ReferenceBackend(tol.atol * 0.9), blob, seed=2, ragged=False)["matches"]
    off = battery.check_forward(ReferenceBackend(tol.atol * 1.1 + tol.rtol * 2), blob, seed=2, ragged=False)
    assert not off["matches"]


@pytest.mark.parametrize(
    "line,version",
    [
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)",
            "580.159.04",
        ),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023", "535.104.05"),
        ("something else entirely", None),
    ],
)
def test_the_battery_records_the_nvidia_driver_from_the_drivers_own_file(line, version, tmp_path):
    (tmp_path / "version").write_text(line + "\nGCC version:  gcc version 12.3.0\n")
    assert battery.nvidia_driver(tmp_path / "version") == version
    assert battery.nvidia_driver(tmp_path / "absent") is None
