"""rnnconv's own CUDA driver session (ctypes on libcuda.so.1), run against a stand-in libcuda.

The stand-in is called through the same C function types as the real driver, so pointer
widths, out-parameters and return codes cross ctypes as they would on a GPU machine.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from cuda_stand_in import CUDA_ERROR_NO_DEVICE, CUDA_ERROR_OUT_OF_MEMORY, StandInCuda

from rnnconv.errors import EXIT_BACKEND_MISSING, BackendMissing
from rnnconv.gpu import backend as cudnn_backend
from rnnconv.gpu import cuda

REAL_LOAD = cuda.CudaDriver.__dict__["load"]


@pytest.fixture
def libcuda(monkeypatch) -> StandInCuda:
    """A stand-in libcuda that CudaDriver.load() returns, with PyCUDA absent."""
    stand_in = StandInCuda()
    monkeypatch.setattr(cuda.CudaDriver, "load", classmethod(lambda cls: cls(stand_in.functions(), "stand-in")))
    monkeypatch.setitem(sys.modules, "pycuda", None)  # `import pycuda` raises ImportError (name "pycuda")
    monkeypatch.delenv(cuda.SESSION_ENV, raising=False)
    yield stand_in
    assert not stand_in.problems


def test_session_round_trip_frees_everything_and_releases_the_context(libcuda):
    session = cuda.new_session()
    assert isinstance(session, cuda.CtypesSession) and session.kind == "ctypes"
    with cuda.open_session() as session:
        assert libcuda.pushed == 1 and libcuda.retained == 1
        assert session.device_name() == "Stand-in H100" and session.compute_capability() == (9, 0)
        assert session.describe() == "ctypes (stand-in)"
        for dtype in ("<f4", "<f8", "<f2", "<u2", "<i4"):
            host = np.arange(1, 38, dtype=dtype)
            buffer = session.upload(host)
            assert int(buffer) > 2**32  # a 64-bit CUdeviceptr went through whole
            back = np.zeros_like(host)
            session.download(back, buffer)
            np.testing.assert_array_equal(back, host)
        session.synchronize()
        assert libcuda.synchronized == 1
        allocated = len(libcuda.memory)
    assert allocated == 5 and not libcuda.memory and len(libcuda.freed) == 5
    assert libcuda.pushed == 0 and libcuda.retained == 0


def test_a_scope_frees_its_own_buffers_only(libcuda):
    with cuda.open_session() as session:
        kept = session.alloc(16)
        with session.scope():
            session.alloc(8), session.alloc(0)  # zero bytes: one byte, as PyCUDA does
            assert len(libcuda.memory) == 3
        assert list(libcuda.memory) == [int(kept)]


def test_a_failing_call_is_one_sentence_with_cudas_name_and_exit_3(libcuda):
    libcuda.fail["cuMemAlloc_v2"] = CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(cuda.CudaError) as failed, cuda.open_session() as session:
        session.alloc(1 << 40)
    assert str(failed.value) == "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)"
    assert failed.value.exit_code == EXIT_BACKEND_MISSING
    assert libcuda.pushed == 0 and libcuda.retained == 0  # unwound all the same


def test_an_unknown_status_still_gives_a_sentence(libcuda):
    libcuda.fail["cuCtxSynchronize"] = 719
    unknown = r"cuCtxSynchronize failed: unknown CUDA error \(719\)"
    with pytest.raises(cuda.CudaError, match=unknown), cuda.open_session() as session:
        session.synchronize()


def test_no_gpu_and_no_driver_are_exit_3_in_one_sentence(libcuda, monkeypatch):
    libcuda.gpus = 0
    with pytest.raises(BackendMissing, match=r"^no GPU \(cuDeviceGetCount found none\)$"), cuda.open_session():
        pass
    libcuda.fail["cuInit"] = CUDA_ERROR_NO_DEVICE
    status = cudnn_backend.probe()
    assert not status.ok and "cuInit failed: CUDA_ERROR_NO_DEVICE (100)" in status.reason
    monkeypatch.setattr(cuda.CudaDriver, "load", REAL_LOAD)
    monkeypatch.setenv("RNNCONV_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    with pytest.raises(BackendMissing, match=r"no CUDA driver \(no libcuda.so.1 /nonexistent/libcuda.so.1\)"):
        cuda.CudaDriver.load()


def test_without_a_driver_doctor_names_no_session_on_it(monkeypatch):
    """doctor's cuDNN row said "no CUDA driver (no libcuda.so.1 ...) (found: ..., cuda_session ctypes on libcuda.so.1
    ...)": what a session would run on, said found where the driver is not."""
    monkeypatch.setenv("RNNCONV_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    monkeypatch.delenv(cuda.SESSION_ENV, raising=False)
    status = cudnn_backend.probe()
    assert not status.ok and "no CUDA driver" in status.reason, status.reason
    assert "cuda_session" not in status.found and "ctypes on" not in status.reason, status.reason
    assert "libcuda.so.1" not in status.reason.partition("(found:")[2], status.reason


def test_probe_and_doctor_say_which_session_runs(libcuda, monkeypatch):
    status = cudnn_backend.probe()
    assert status.found["gpus"] == 1 and status.found["cuda_driver"] == "12.9"
    assert status.found["cuda_session"] == "ctypes on libcuda.so.1 (pycuda is not installed)"
    from rnnconv.cli.doctor import examine

    report = examine()
    assert "ctypes on libcuda.so.1" in report["backends"]["cudnn"]["found"]["cuda_session"]
    if status.ok:  # with the real libcudnn here (CI has it), the backend is available with the stand-in driver
        assert "ctypes on libcuda.so.1" in report["backends"]["cudnn"]["detail"]


def fake_pycuda_module() -> types.ModuleType:
    package = types.ModuleType("pycuda")
    package.driver = types.ModuleType("pycuda.driver")
    package.driver.Error = RuntimeError
    return package


def test_the_session_is_chosen_by_what_imports_or_by_the_environment(libcuda, monkeypatch):
    package = fake_pycuda_module()
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", package.driver)
    assert isinstance(cuda.new_session(), cuda.PyCudaSession)  # PyCUDA when it imports
    monkeypatch.setenv(cuda.SESSION_ENV, "ctypes")
    assert isinstance(cuda.new_session(), cuda.CtypesSession)
    assert cudnn_backend.session_kind() == f"ctypes on libcuda.so.1 ({cuda.SESSION_ENV}=ctypes)"
    monkeypatch.setenv(cuda.SESSION_ENV, "cupy")
    with pytest.raises(BackendMissing, match="names no CUDA session; use pycuda or ctypes"):
        cuda.new_session()
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setenv(cuda.SESSION_ENV, "pycuda")
    with pytest.raises(BackendMissing, match=f"{cuda.SESSION_ENV}=pycuda but pycuda is not installed"):
        cuda.new_session()
    status = cudnn_backend.probe()
    assert not status.ok and "pycuda is not installed" in status.reason


def test_ctypes_types_keep_pointers_whole():
    assert ctypes.sizeof(cuda.CUDA_TYPES["CUdeviceptr"]) == 8
    assert cuda.CUDA_TYPES["CUdeviceptr *"]._type_ is ctypes.c_ulonglong
    for c_type, ctype in cuda.CUDA_TYPES.items():
        if "*" in c_type:
            assert ctypes.sizeof(ctype) == ctypes.sizeof(ctypes.c_void_p), c_type
    used = {c_type for params in cuda.CUDA_PROTOTYPES.values() for c_type, _ in params}
    assert used <= set(cuda.CUDA_TYPES)


def cuda_header() -> Path | None:
    """cuda.h of a CUDA toolkit here (beside nvcc, $CUDA_HOME, or /usr/local/cuda*), if any."""
    places = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_ROOT", "")]
    nvcc = shutil.which("nvcc")
    places += [str(Path(nvcc).resolve().parent.parent)] if nvcc else []
    places += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    for place in filter(None, places):
        if (Path(place) / "include" / "cuda.h").is_file():
            return Path(place) / "include" / "cuda.h"
    return None


@pytest.mark.skipif(
    cuda_header() is None, reason="no CUDA toolkit here (no cuda.h beside nvcc, in CUDA_HOME or /usr/local)"
)
def test_prototypes_match_cuda_h():
    """The symbols and parameter types rnnconv declares are cuda.h's (with its #define'd _v2 names)."""
    text = cuda_header().read_text(errors="replace")
    for symbol, params in cuda.CUDA_PROTOTYPES.items():
        name = symbol.removesuffix("_v2")
        if symbol != name:  # the header maps the plain name to the _v2 symbol
            assert re.search(rf"#define\s+{name}\s+(__CUDA_API_PTDS\()?{symbol}\b", text), symbol
        match = re.search(rf"CUresult CUDAAPI {name}\(([^)]*)\);", text)
        assert match, name
        declared = [" ".join(p.split()) for p in match.group(1).split(",")]
        declared = [] if declared == ["void"] else declared
        ours = [f"{c_type} {param}".replace("* ", "*") for c_type, param in params]
        assert [d.replace("* ", "*") for d in declared] == ours, name
    assert re.search(r"typedef unsigned long long CUdeviceptr_v2;", text)
    attributes = {"MAJOR": cuda.ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "MINOR": cuda.ATTRIBUTE_COMPUTE_CAPABILITY_MINOR}
    for which, value in attributes.items():
        assert re.search(rf"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{which} = {value},", text)
