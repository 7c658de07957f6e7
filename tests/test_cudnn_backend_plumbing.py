"""The cuDNN backend's Python side, run on a CPU with a stand-in PyCUDA and stand-in GPU calls.

Only what needs a GPU is replaced: PyCUDA's device memory (host buffers here),
and the cuDNN calls that need a handle. Every argument of those calls still goes
through the real ctypes prototypes (`from_param`), and every descriptor is made
by the real libcudnn. This checks the plumbing: buffers, lengths, NULL c for a
GRU, outputs decoded, the layout check, and verify's --relayout.
"""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest
from conftest import FIXTURES, cudnn_or_skip
from cuda_stand_in import StandInCuda

import rnnconv
from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.contracts import dump
from rnnconv.core.weightspace import region_map, weight_space_elements
from rnnconv.errors import Unsupported, failure
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.gpu import api, cuda
from rnnconv.gpu import backend as cudnn_backend
from rnnconv.gpu.descriptors import Descriptors
from rnnconv.table.constants import PROJECTION_LIN_LAYER_ID
from rnnconv.verification.run import verify
from rnnconv.verification.subject import VerifyOptions


def fake_pycuda() -> types.ModuleType:
    driver = types.ModuleType("pycuda.driver")

    class Error(Exception):
        pass

    class DeviceAllocation:
        def __init__(self, nbytes: int):
            self.memory = ctypes.create_string_buffer(nbytes)
            self.freed = False

        def __int__(self) -> int:
            return ctypes.addressof(self.memory)

        def free(self) -> None:
            self.freed = True

    class Context:
        stack: list = []

        def push(self) -> None:
            Context.stack.append(self)

        @staticmethod
        def pop() -> None:
            Context.stack.pop()

        @staticmethod
        def synchronize() -> None:
            pass

    class Device:
        def __init__(self, index: int):
            pass

        def retain_primary_context(self) -> Context:
            return Context()

        def name(self) -> str:
            return "stand-in GPU"

        def compute_capability(self) -> tuple[int, int]:
            return (9, 0)

    allocations: list = []

    def mem_alloc(nbytes: int) -> DeviceAllocation:
        allocations.append(DeviceAllocation(nbytes))
        return allocations[-1]

    driver.Error, driver.Device, driver.Context, driver.init = Error, Device, Context, lambda: None
    driver.mem_alloc, driver.allocations = mem_alloc, allocations
    driver.memcpy_htod = lambda dst, src: ctypes.memmove(
        int(dst), np.ascontiguousarray(src).ctypes.data, np.ascontiguousarray(src).nbytes
    )
    driver.memcpy_dtoh = lambda dst, src: ctypes.memmove(dst.ctypes.data, int(src), dst.nbytes)
    package = types.ModuleType("pycuda")
    package.driver = driver
    return package


class StandInGPU:
    """Answers the calls that need a GPU; every argument is first converted by the real argtypes."""

    def __init__(self, cudnn: api.Cudnn, shift_bytes: int = 0):
        self.cudnn, self.real_call, self.shift = cudnn, cudnn.call, shift_bytes
        self.calls: dict[str, tuple] = {}

    def __call__(self, name: str, *args):
        function = getattr(self.cudnn.lib, name)
        assert len(args) == len(function.argtypes), name
        for kind, value in zip(function.argtypes, args):
            if value is not None:
                kind.from_param(value)  # raises on an argument the prototype does not take
        self.calls[name] = args
        if name == "cudnnCreate":
            args[0]._obj.value = 0x1000
        elif name == "cudnnSetDropoutDescriptor":
            pass
        elif name == "cudnnGetRNNWeightSpaceSize":
            args[2]._obj.value = self.spec_bytes + self.shift
        elif name == "cudnnGetRNNWeightParams":
            self._place(*args)
        elif name == "cudnnGetRNNTempSpaceSizes":
            args[4]._obj.value, args[5]._obj.value = 256, 0
        elif name == "cudnnRNNForward":
            pass  # outputs stay zero: the shapes and the plumbing are what is checked here
        else:
            self.real_call(name, *args)

    def _place(self, handle, rnn, pseudo, size, base, lin, m_desc, m_addr, b_desc, b_addr):
        spec, itemsize = self.spec, self.itemsize
        layer, direction = divmod(pseudo, spec.num_directions)
        places = region_map(spec)
        gates = len(spec.gates)
        if lin == PROJECTION_LIN_LAYER_ID:
            matrix, bias = ("P", ""), None
        else:
            side, gate = ("W" if lin < gates else "R"), spec.gates[lin % gates]
            matrix, bias = (side, gate), ("b" + side, gate)
        from rnnconv.core.canonical import ParamKey

        for (kind, gate), addr, desc in ((matrix, m_addr, m_desc), (bias or (None, None), b_addr, b_desc)):
            if kind is None:
                addr._obj.value = None
                continue
            region = places[ParamKey(layer, direction, kind, gate)]
            addr._obj.value = base + self.shift + region.offset * itemsize
            shape = list(region.shape) + [1] * (2 - len(region.shape))
            self.real_call(
                "cudnnSetTensorNdDescriptor",
                desc,
                api.DATA_TYPE[spec.dtype],
                3,
                (ctypes.c_int * 3)(1, *shape),
                (ctypes.c_int * 3)(shape[0] * shape[1], shape[1], 1),
            )


@pytest.fixture
def gpu(monkeypatch):
    cudnn_or_skip()
    package = fake_pycuda()
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
    status = cudnn_backend.Status(True, "", {"cudnn_version": "stand-in"})
    monkeypatch.setattr(cudnn_backend, "probe", lambda: status)

    def install(spec: RNNSpec, shift_bytes: int = 0) -> tuple[cudnn_backend.CudnnBackend, StandInGPU]:
        backend = cudnn_backend.CudnnBackend(status)
        stand_in = StandInGPU(backend.cudnn, shift_bytes)
        stand_in.spec, stand_in.itemsize = (
            spec,
            np.dtype({"float16": "f2", "bfloat16": "u2"}.get(spec.dtype, "f4")).itemsize,
        )
        stand_in.spec_bytes = weight_space_elements(spec) * stand_in.itemsize
        monkeypatch.setattr(backend.cudnn, "call", stand_in)
        monkeypatch.setattr(backend.cudnn.lib, "cudnnDestroy", lambda handle: 0)
        return backend, stand_in

    return install, package.driver


@pytest.mark.parametrize(
    "name,spec",
    [
        ("lstm_proj.pt", RNNSpec("lstm", 5, 8, 2, True, 3)),
        ("rnn_tanh.pt", RNNSpec("rnn_tanh", 6, 4, 1, True)),
        ("gru_bf16.pt", RNNSpec("gru", 5, 4, 1, True, dtype="bfloat16")),
    ],
)
def test_forward_plumbing(name, spec, gpu, tmp_path):
    install, driver = gpu
    rnnconv.convert(FIXTURES / "torch" / name, tmp_path / "x.bin", to="cudnn")
    blob = open_bin(tmp_path / "x.bin")
    backend, stand_in = install(blob.spec)
    pseudo = spec.num_layers * spec.num_directions
    x = np.ones((6, 3, spec.input_size), np.float32)
    h0 = np.zeros((pseudo, 3, spec.output_size), np.float32)
    c0 = np.zeros((pseudo, 3, spec.hidden_size), np.float32) if spec.mode == "lstm" else None
    out = backend.run(blob, {"x": x, "h0": h0, "c0": c0, "lengths": np.array([6, 4, 2])})
    assert out["y"].shape == (6, 3, spec.num_directions * spec.output_size)
    assert out["h_n"].shape == (pseudo, 3, spec.output_size)
    assert (out["c_n"] is None) == (spec.mode != "lstm")
    args = stand_in.calls["cudnnRNNForward"]
    assert np.ctypeslib.as_array(args[3], (3,)).tolist() == [6, 4, 2]  # lengths, on the "device", as int32
    assert args[14] == blob.words.nbytes  # weight space size in bytes
    assert (args[12] is None) == (spec.mode != "lstm") and (args[13] is None) == (spec.mode != "lstm")
    weights = ctypes.string_at(args[15], blob.words.nbytes)
    assert weights == np.asarray(blob.words).tobytes()  # the blob itself went to the device, unchanged
    assert all(a.freed for a in driver.allocations) and not driver.Context.stack
    assert backend.details["gpu"] == "stand-in GPU"


def test_layout_mismatch_and_relayout(gpu, tmp_path, monkeypatch):
    install, _ = gpu
    rnnconv.convert(FIXTURES / "torch" / "seq2seq.pt", tmp_path / "x.bin", to="cudnn", layer="decoder.rnn")
    blob = open_bin(tmp_path / "x.bin")
    backend, _ = install(blob.spec, shift_bytes=64)  # this "cuDNN" puts everything 64 bytes later
    monkeypatch.setattr("rnnconv.verification.subject.select_engine", lambda name: backend)
    relayout = tmp_path / "relayout.bin"
    report = verify(tmp_path / "x.bin", VerifyOptions(backend="cudnn", relayout=relayout))
    assert dump(report)["verdict"] == "mismatch" and report.exit_code == 1
    findings = dump(report)["layout_findings"]
    assert findings[0]["tensor"] == "weight space" and findings[1]["cudnn"]["offset_bytes"] == 64
    moved = open_bin(relayout)
    assert moved.layout.name == "cudnn-reported" and relayout.stat().st_size == blob.words.nbytes + 64
    for key in blob.spec.param_keys():
        np.testing.assert_array_equal(moved.param(key), blob.param(key))
    monkeypatch.undo()  # the real backends again: the moved blob must compute what the source computes
    checked = verify(relayout, VerifyOptions(backend="numpy"))
    assert dump(checked)["verdict"] == "match", dump(checked)["summary"]


@pytest.mark.parametrize("status", [3005, 3006, 3007, 3008, 3009])
def test_cudnn_that_cannot_run_here_is_exit_3_with_the_status_name(status, gpu, tmp_path, monkeypatch):
    """Driver, CUDA runtime, architecture, runtime library or sub-library: the machine, not the RNN."""
    install, _ = gpu
    rnnconv.convert(FIXTURES / "torch" / "rnn_tanh.pt", tmp_path / "x.bin", to="cudnn")
    backend, _ = install(open_bin(tmp_path / "x.bin").spec)
    monkeypatch.setattr(backend.cudnn, "call", api.Cudnn.call.__get__(backend.cudnn))  # the real status check
    monkeypatch.setattr(backend.cudnn.lib, "cudnnCreate", lambda handle: status)
    monkeypatch.setattr("rnnconv.verification.subject.select_engine", lambda name: backend)
    with pytest.raises(api.CudnnError) as failed:
        verify(tmp_path / "x.bin", VerifyOptions(backend="cudnn"))
    code, sentence = failure(failed.value)
    assert code == 3 and api.ENVIRONMENT_STATUSES[status] in sentence and "\n" not in sentence
    assert sentence.startswith(f"cudnnCreate failed: {api.ENVIRONMENT_STATUSES[status]} ({status})")


@pytest.mark.parametrize("status,code", [(3000, 2), (3002, 2), (3003, 2), (3004, 2), (3010, 2), (1001, 3), (5000, 3)])
def test_other_statuses_keep_their_exit_codes(status, code):
    assert api.CudnnError("x failed", status).exit_code == code


@pytest.mark.needs("cudnn")
def test_the_padding_fill_is_eight_zero_bytes_for_every_type():
    """cuDNN reads one element of the data type from paddingFill; read back, it is 0 in every type."""
    cudnn = api.Cudnn()
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        spec = RNNSpec("gru", 5, 7, dtype=dtype)
        with Descriptors(cudnn, spec, 3, 6, np.array([6, 4, 1])) as desc:
            assert ctypes.sizeof(desc.fill) == 8 and desc.fill.raw == bytes(8)
            back = ctypes.create_string_buffer(b"\xff" * 8, 8)
            data_type, layout, steps, batch, size = (ctypes.c_int() for _ in range(5))
            lengths = (ctypes.c_int * 3)()
            cudnn.call(
                "cudnnGetRNNDataDescriptor",
                desc.x,
                *(ctypes.byref(v) for v in (data_type, layout, steps, batch, size)),
                3,
                lengths,
                ctypes.cast(back, ctypes.c_void_p),
            )
            itemsize = {"float32": 4, "float64": 8}.get(dtype, 2)
            assert back.raw[:itemsize] == bytes(itemsize), dtype  # cuDNN wrote back a zero of its type
            assert list(lengths) == [6, 4, 1] and data_type.value == api.DATA_TYPE[dtype]


class TransposingGPU(StandInGPU):
    """A "cuDNN" that reports W_{gate} of the first layer as (in, H), column-major: no relayout can fix that."""

    def _place(self, handle, rnn, pseudo, size, base, lin, m_desc, m_addr, b_desc, b_addr):
        super()._place(handle, rnn, pseudo, size, base, lin, m_desc, m_addr, b_desc, b_addr)
        if pseudo == 0 and lin == 0:
            rows, cols = self.spec.hidden_size, self.spec.input_size
            self.real_call(
                "cudnnSetTensorNdDescriptor",
                m_desc,
                api.DATA_TYPE[self.spec.dtype],
                3,
                (ctypes.c_int * 3)(1, cols, rows),
                (ctypes.c_int * 3)(rows * cols, rows, 1),
            )


def test_relayout_refuses_when_more_than_offsets_differ(gpu, tmp_path, monkeypatch):
    install, _ = gpu
    rnnconv.convert(FIXTURES / "torch" / "lstm_proj.pt", tmp_path / "x.bin", to="cudnn")
    backend, stand_in = install(open_bin(tmp_path / "x.bin").spec, shift_bytes=64)
    transposing = TransposingGPU(backend.cudnn, 64)
    transposing.spec, transposing.itemsize, transposing.spec_bytes = (
        stand_in.spec,
        stand_in.itemsize,
        stand_in.spec_bytes,
    )
    monkeypatch.setattr(backend.cudnn, "call", transposing)
    monkeypatch.setattr("rnnconv.verification.subject.select_engine", lambda name: backend)
    relayout = tmp_path / "relayout.bin"
    with pytest.raises(Unsupported, match=r"--relayout refused: it can only move tensors.*layer0\.fwd\.W_i") as refused:
        verify(tmp_path / "x.bin", VerifyOptions(backend="cudnn", relayout=relayout))
    assert refused.value.exit_code == 2 and not relayout.exists()
    report = verify(tmp_path / "x.bin", VerifyOptions(backend="cudnn"))  # without --relayout: the findings
    findings = dump(report)["layout_findings"]
    assert {"offset", "dims and strides"} <= {kind for f in findings for kind in f["differs"]}
    assert "cannot move the blob into cuDNN's layout" in report.summary


def test_relayout_refusal_names_what_moving_cannot_fix():
    from rnnconv.core.report_contracts import LayoutFinding

    key = ParamKey(0, 0, "W", "h")
    placed = [cudnn_backend.Placement(key, 0, 0, 64, [1, 4, 3], [12, 3, 1])]
    moved = [
        LayoutFinding(tensor=key.label, differs=["offset"]),
        LayoutFinding(tensor="weight space", differs=["size"]),
    ]
    assert cudnn_backend.relayout_refusal(moved, placed, 64 + 48, 4) is None
    missing = [LayoutFinding(tensor=key.label, differs=["missing"])]
    assert cudnn_backend.relayout_refusal(missing, placed, 112, 4) == f"{key.label}: cuDNN reports no place for it"
    outside = cudnn_backend.relayout_refusal(moved, placed, 100, 4)
    assert outside == f"{key.label}: cuDNN places it at bytes 64-112, outside its own 100-byte weight space"


@pytest.mark.parametrize("session", ["pycuda", "ctypes"])
def test_forward_plumbing_in_either_cuda_session(session, gpu, tmp_path, monkeypatch):
    install, driver = gpu
    libcuda = StandInCuda()
    monkeypatch.setattr(cuda.CudaDriver, "load", classmethod(lambda cls: cls(libcuda.functions(), "stand-in")))
    monkeypatch.setenv(cuda.SESSION_ENV, session)
    rnnconv.convert(FIXTURES / "torch" / "gru_bf16.pt", tmp_path / "x.bin", to="cudnn")
    blob = open_bin(tmp_path / "x.bin")
    backend, stand_in = install(blob.spec)
    spec = blob.spec
    pseudo = spec.num_layers * spec.num_directions
    inputs = {
        "x": np.ones((6, 3, spec.input_size)),
        "h0": np.zeros((pseudo, 3, spec.output_size)),
        "c0": None,
        "lengths": np.array([6, 4, 2]),
    }
    seen = {}

    def snapshot(name, *args):  # what the "device" holds while cudnnRNNForward runs (freed after)
        if name == "cudnnRNNForward":
            seen["weights"] = ctypes.string_at(args[15], args[14])
            seen["lengths"] = np.ctypeslib.as_array(args[3], (3,)).tolist()
        return stand_in(name, *args)

    monkeypatch.setattr(backend.cudnn, "call", snapshot)
    backend.run(blob, inputs)
    assert seen["weights"] == np.asarray(blob.words).tobytes() and seen["lengths"] == [6, 4, 2]
    assert backend.details["cuda_session"].startswith(session)
    assert backend.details["math_type"] == "DEFAULT" and "math_type_refused" not in backend.details
    if session == "ctypes":
        assert not libcuda.memory and libcuda.pushed == 0 and libcuda.retained == 0 and not libcuda.problems
    else:
        assert all(a.freed for a in driver.allocations)


def test_bfloat16_retries_fma_then_tensor_op_math_when_cuDNN_refuses(gpu, tmp_path, monkeypatch):
    install, _ = gpu
    rnnconv.convert(FIXTURES / "torch" / "gru_bf16.pt", tmp_path / "x.bin", to="cudnn")
    blob = open_bin(tmp_path / "x.bin")
    backend, stand_in = install(blob.spec)
    math_types = []
    answer = stand_in.__call__

    def refusing(name, *args):
        if name == "cudnnSetRNNDescriptor_v8":
            math_types.append(
                args[8]
            )  # rnnDesc, algo, cellMode, biasMode, dirMode, inputMode, dataType, mathPrec, mathType
        if name == "cudnnGetRNNTempSpaceSizes" and math_types[-1] != api.MATH["tensor_op"]:
            raise api.CudnnError(f"{name} failed: CUDNN_STATUS_NOT_SUPPORTED (3000)", 3000)
        return answer(name, *args)

    monkeypatch.setattr(backend.cudnn, "call", refusing)
    spec = blob.spec
    pseudo = spec.num_layers * spec.num_directions
    inputs = {"x": np.ones((4, 2, spec.input_size)), "h0": np.zeros((pseudo, 2, spec.output_size)), "c0": None}
    backend.run(blob, {**inputs, "lengths": None})
    assert math_types == [api.MATH["default"], api.MATH["fma"], api.MATH["tensor_op"]]
    assert backend.details["math_type"] == "TENSOR_OP"
    assert [r.split(":")[0] for r in backend.details["math_type_refused"]] == ["DEFAULT", "FMA"]
    assert "math_type_refused" in dump(backend.describe())
