"""The GPU under cuDNN: the CUDA driver's primary context, device memory and copies.

Two sessions give the backend the same few verbs (alloc, upload, download,
synchronize, the device's name and compute capability):

- PyCUDA's, when `pycuda` imports (the documented `gpu` extra);
- rnnconv's own, on libcuda.so.1 through ctypes, otherwise. It needs nothing but
  the driver, so a machine where PyCUDA cannot be built still runs cuDNN.

RNNCONV_CUDA_SESSION=pycuda or =ctypes picks one; the report and `doctor` say which ran.
The driver functions are declared in CUDA_PROTOTYPES with the C types of cuda.h, under the
symbol names the header maps them to (cuMemAlloc is cuMemAlloc_v2 since CUDA 3.2, the
context push/pop and primary-context release are _v2 since CUDA 4.0 and 11.0), so a
CUdeviceptr is always 64 bits wide.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from rnnconv.errors import BackendMissing, first_line

SESSION_ENV = "RNNCONV_CUDA_SESSION"
SESSION_KINDS = ("pycuda", "ctypes")
CUDA_SUCCESS = 0
# CUdevice_attribute (cuda.h)
ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

# C type (as cuda.h writes it) -> ctypes. Output buffers are pointers, never c_char_p: ctypes would
# hand a stand-in a copy of the bytes instead of the caller's buffer.
CUDA_TYPES: dict[str, Any] = {
    "CUresult": ctypes.c_int,
    "CUdevice_attribute": ctypes.c_int,
    "CUdevice": ctypes.c_int,
    "CUdevice *": ctypes.POINTER(ctypes.c_int),
    "CUdeviceptr": ctypes.c_ulonglong,
    "CUdeviceptr *": ctypes.POINTER(ctypes.c_ulonglong),
    "CUcontext": ctypes.c_void_p,
    "CUcontext *": ctypes.POINTER(ctypes.c_void_p),
    "unsigned int": ctypes.c_uint,
    "int": ctypes.c_int,
    "int *": ctypes.POINTER(ctypes.c_int),
    "size_t": ctypes.c_size_t,
    "char *": ctypes.POINTER(ctypes.c_char),
    "void *": ctypes.c_void_p,
    "const void *": ctypes.c_void_p,
    "const char **": ctypes.POINTER(ctypes.c_char_p),
}

# symbol -> [(C type, parameter name)]; every one returns CUresult.
CUDA_PROTOTYPES: dict[str, list[tuple[str, str]]] = {
    "cuInit": [("unsigned int", "Flags")],
    "cuDriverGetVersion": [("int *", "driverVersion")],
    "cuDeviceGetCount": [("int *", "count")],
    "cuDeviceGet": [("CUdevice *", "device"), ("int", "ordinal")],
    "cuDeviceGetName": [("char *", "name"), ("int", "len"), ("CUdevice", "dev")],
    "cuDeviceGetAttribute": [("int *", "pi"), ("CUdevice_attribute", "attrib"), ("CUdevice", "dev")],
    "cuDevicePrimaryCtxRetain": [("CUcontext *", "pctx"), ("CUdevice", "dev")],
    "cuDevicePrimaryCtxRelease_v2": [("CUdevice", "dev")],
    "cuCtxPushCurrent_v2": [("CUcontext", "ctx")],
    "cuCtxPopCurrent_v2": [("CUcontext *", "pctx")],
    "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [("CUdeviceptr *", "dptr"), ("size_t", "bytesize")],
    "cuMemFree_v2": [("CUdeviceptr", "dptr")],
    "cuMemcpyHtoD_v2": [("CUdeviceptr", "dstDevice"), ("const void *", "srcHost"), ("size_t", "ByteCount")],
    "cuMemcpyDtoH_v2": [("void *", "dstHost"), ("CUdeviceptr", "srcDevice"), ("size_t", "ByteCount")],
    "cuGetErrorName": [("CUresult", "error"), ("const char **", "pStr")],
}


class CudaError(BackendMissing):
    """A CUDA driver call failed: the GPU, its driver or its memory is not usable here (exit 3)."""


def cuda_library_candidates() -> list[str]:
    """Where libcuda.so.1 may be: $RNNCONV_CUDA_LIBRARY alone, else the loader's search path, then the
    places drivers install it when that path does not name them."""
    if os.environ.get("RNNCONV_CUDA_LIBRARY"):
        return [os.environ["RNNCONV_CUDA_LIBRARY"]]
    return [
        "libcuda.so.1",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/lib/wsl/lib/libcuda.so.1",
    ]


class CudaDriver:
    """libcuda's driver API with every prototype declared and every status checked.

    `library` is a loaded libcuda, or (for tests) a mapping from symbol to a Python function:
    both are called through the same C function types, so a stand-in sees exactly what libcuda would.
    """

    def __init__(self, library: ctypes.CDLL | Mapping[str, Callable[..., int]], path: str = "libcuda.so.1"):
        self.path = path
        self.functions: dict[str, Any] = {}
        for name, params in CUDA_PROTOTYPES.items():
            prototype = ctypes.CFUNCTYPE(ctypes.c_int, *(CUDA_TYPES[c_type] for c_type, _ in params))
            if isinstance(library, Mapping):
                self.functions[name] = prototype(library[name])
                continue
            try:
                self.functions[name] = prototype((name, library))
            except AttributeError:
                raise BackendMissing(f"{path} has no {name}: the CUDA driver is older than 11.0") from None

    @classmethod
    def load(cls) -> CudaDriver:
        errors = []
        for candidate in cuda_library_candidates():
            try:
                return cls(ctypes.CDLL(candidate), candidate)
            except OSError as exc:  # the usual "cannot open shared object file" is said once, for all
                where = "on the loader's path" if "/" not in candidate else candidate
                errors.append(where if "cannot open shared object" in str(exc) else f"{where} ({first_line(exc)})")
        raise BackendMissing("no CUDA driver (no libcuda.so.1 " + ", ".join(errors) + ")")

    def call(self, name: str, *args: Any) -> None:
        status = self.functions[name](*args)
        if status != CUDA_SUCCESS:
            raise CudaError(f"{name} failed: {self.error_name(status)} ({status})")

    def error_name(self, status: int) -> str:
        text = ctypes.c_char_p()
        if self.functions["cuGetErrorName"](status, ctypes.byref(text)) != CUDA_SUCCESS or not text.value:
            return "unknown CUDA error"
        return text.value.decode(errors="replace")

    def version(self) -> int:
        """The CUDA version the driver supports (12040 = 12.4)."""
        value = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(value))
        return value.value

    def device_count(self) -> int:
        """cuInit, then the number of GPUs; a driver that does not start raises CudaError."""
        self.call("cuInit", 0)
        count = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        return count.value


def version_text(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


class DeviceBuffer:
    """Device memory from cuMemAlloc; int() is its device address."""

    def __init__(self, address: int, nbytes: int):
        self.address, self.nbytes = address, nbytes

    def __int__(self) -> int:
        return self.address


class Session:
    """What the cuDNN backend needs of a GPU. `kind` says which session it is ("pycuda" or "ctypes")."""

    kind = ""

    def __init__(self) -> None:
        self.handle = ctypes.c_void_p()  # the cuDNN handle, made once the context is current
        self.buffers: list[Any] = []
        self.errors: tuple[type[BaseException], ...] = ()  # the session's own exceptions: CUDA failed

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Free the buffers allocated inside it at its end (one run among many in the same session)."""
        mark = len(self.buffers)
        try:
            yield
        finally:
            while len(self.buffers) > mark:
                self.free(self.buffers.pop())

    def open(self) -> None:
        """Make the first GPU's primary context current."""
        raise NotImplementedError

    def close(self) -> None:
        """Free every buffer and release the context."""
        raise NotImplementedError

    def alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def free(self, buffer: Any) -> None:
        raise NotImplementedError

    def copy_to_device(self, buffer: Any, host: np.ndarray) -> None:
        raise NotImplementedError

    def download(self, host: np.ndarray, buffer: Any) -> None:
        raise NotImplementedError

    def synchronize(self) -> None:
        raise NotImplementedError

    def device_name(self) -> str:
        raise NotImplementedError

    def compute_capability(self) -> tuple[int, int]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def upload(self, host: np.ndarray) -> Any:
        host = np.ascontiguousarray(host)
        buffer = self.alloc(host.nbytes)
        self.copy_to_device(buffer, host)
        return buffer


class CtypesSession(Session):
    """The first GPU's primary context, through libcuda directly."""

    kind = "ctypes"

    def __init__(self, driver: CudaDriver):
        super().__init__()
        self.driver = driver
        self.device = ctypes.c_int()
        self.context = ctypes.c_void_p()

    def open(self) -> None:
        if self.driver.device_count() < 1:
            raise BackendMissing("no GPU (cuDeviceGetCount found none)")
        self.driver.call("cuDeviceGet", ctypes.byref(self.device), 0)
        self.driver.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.device)
        try:
            self.driver.call("cuCtxPushCurrent_v2", self.context)
        except BaseException:
            self.driver.functions["cuDevicePrimaryCtxRelease_v2"](self.device)
            self.context = ctypes.c_void_p()
            raise

    def close(self) -> None:
        """Free every buffer, pop the context and release it (best effort: nothing to report while unwinding)."""
        functions = self.driver.functions
        while self.buffers:
            self.free(self.buffers.pop())
        if self.context.value:
            functions["cuCtxPopCurrent_v2"](ctypes.byref(ctypes.c_void_p()))
            functions["cuDevicePrimaryCtxRelease_v2"](self.device)
            self.context = ctypes.c_void_p()

    def alloc(self, nbytes: int) -> DeviceBuffer:
        nbytes = max(int(nbytes), 1)
        address = ctypes.c_ulonglong()
        self.driver.call("cuMemAlloc_v2", ctypes.byref(address), nbytes)
        self.buffers.append(DeviceBuffer(address.value, nbytes))
        return self.buffers[-1]

    def free(self, buffer: Any) -> None:
        self.driver.functions["cuMemFree_v2"](int(buffer))  # best effort: it may run while unwinding

    def copy_to_device(self, buffer: Any, host: np.ndarray) -> None:
        self.driver.call("cuMemcpyHtoD_v2", int(buffer), host.ctypes.data, host.nbytes)

    def download(self, host: np.ndarray, buffer: Any) -> None:
        if not host.flags.c_contiguous:
            raise ValueError("download needs a contiguous host array")
        self.driver.call("cuMemcpyDtoH_v2", host.ctypes.data, int(buffer), host.nbytes)

    def synchronize(self) -> None:
        self.driver.call("cuCtxSynchronize")

    def device_name(self) -> str:
        name = ctypes.create_string_buffer(256)
        self.driver.call("cuDeviceGetName", name, len(name), self.device)
        return name.value.decode(errors="replace")

    def compute_capability(self) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.driver.call("cuDeviceGetAttribute", ctypes.byref(major), ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device)
        self.driver.call("cuDeviceGetAttribute", ctypes.byref(minor), ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device)
        return major.value, minor.value

    def describe(self) -> str:
        return f"ctypes ({self.driver.path})"


class PyCudaSession(Session):
    """The first GPU's primary context, through PyCUDA."""

    kind = "pycuda"

    def __init__(self, drv: Any):
        super().__init__()
        self.drv = drv
        self.device: Any = None
        self.context: Any = None
        self.errors = (drv.Error,)

    def open(self) -> None:
        try:
            self.drv.init()
            self.device = self.drv.Device(0)
            self.context = self.device.retain_primary_context()
            self.context.push()
        except self.drv.Error as exc:
            self.context = None
            raise BackendMissing(f"CUDA does not start on this machine ({exc})") from None

    def close(self) -> None:
        try:
            while self.buffers:
                self.free(self.buffers.pop())
        finally:
            if self.context is not None:
                self.context.pop()
                self.context = None

    def alloc(self, nbytes: int) -> Any:
        buffer = self.drv.mem_alloc(max(int(nbytes), 1))
        self.buffers.append(buffer)
        return buffer

    def free(self, buffer: Any) -> None:
        buffer.free()

    def copy_to_device(self, buffer: Any, host: np.ndarray) -> None:
        self.drv.memcpy_htod(buffer, host)

    def download(self, host: np.ndarray, buffer: Any) -> None:
        self.drv.memcpy_dtoh(host, buffer)

    def synchronize(self) -> None:
        self.drv.Context.synchronize()

    def device_name(self) -> str:
        return str(self.device.name())

    def compute_capability(self) -> tuple[int, int]:
        major, minor = self.device.compute_capability()
        return int(major), int(minor)

    def describe(self) -> str:
        try:
            return f"pycuda {importlib.metadata.version('pycuda')}"
        except importlib.metadata.PackageNotFoundError:
            return "pycuda"


def chosen_kind() -> str | None:
    """The session asked for in $RNNCONV_CUDA_SESSION, or None (PyCUDA when it imports, else ctypes)."""
    asked = os.environ.get(SESSION_ENV, "").strip().lower()
    if asked and asked not in SESSION_KINDS:
        raise BackendMissing(f"{SESSION_ENV}={asked!r} names no CUDA session; use pycuda or ctypes")
    return asked or None


def pycuda_driver() -> tuple[Any, str]:
    """PyCUDA's driver module, or None and why not."""
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        if exc.name in ("pycuda", "pycuda.driver"):
            return None, "pycuda is not installed"
        return None, f"pycuda does not load ({first_line(exc)})"  # built for another CUDA, or no libcuda
    except OSError as exc:
        return None, f"pycuda does not load ({first_line(exc)})"
    return drv, ""


def new_session(kind: str | None = None) -> Session:
    """An unopened session of the kind asked for (or the environment's choice, or the best available)."""
    kind = kind or chosen_kind()
    if kind != "ctypes":
        drv, why = pycuda_driver()
        if drv is not None:
            return PyCudaSession(drv)
        if kind == "pycuda":
            raise BackendMissing(f"{SESSION_ENV}=pycuda but {why}")
    return CtypesSession(CudaDriver.load())


@contextlib.contextmanager
def open_session(kind: str | None = None) -> Iterator[Session]:
    """A session with its context current; every buffer is freed and the context released on exit."""
    session = new_session(kind)
    try:
        session.open()
        yield session
    except session.errors as exc:
        raise BackendMissing(f"CUDA failed while running cuDNN ({type(exc).__name__}: {first_line(exc)})") from None
    finally:
        session.close()
