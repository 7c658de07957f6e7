"""A stand-in for libcuda.so.1 on a machine without a GPU: the driver API that rnnconv's ctypes session calls.

Each function is a Python function behind the same C function type as the real symbol
(rnnconv.gpu.cuda.CUDA_PROTOTYPES), so every argument crosses ctypes exactly as it would
into libcuda. "Device" memory is host memory: its addresses are real, so cuDNN stand-ins
can read what was uploaded. It records every call and counts context pushes and retains, and
can be told to fail a call with a CUresult. An exception inside a ctypes callback cannot reach
the caller, so a misuse (a copy outside its allocation, a call before cuInit) is kept in
`problems` and answered with CUDA_ERROR_INVALID_VALUE: tests assert that `problems` is empty.
"""

from __future__ import annotations

import ctypes
from typing import Any

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100
ERROR_NAMES = {
    CUDA_ERROR_INVALID_VALUE: b"CUDA_ERROR_INVALID_VALUE",
    CUDA_ERROR_OUT_OF_MEMORY: b"CUDA_ERROR_OUT_OF_MEMORY",
    CUDA_ERROR_NO_DEVICE: b"CUDA_ERROR_NO_DEVICE",
}
CONTEXT = 0x5EED_0000_0000  # the primary context's handle: any pointer-wide value


class StandInCuda:
    def __init__(self, name: bytes = b"Stand-in H100", capability: tuple[int, int] = (9, 0), gpus: int = 1):
        self.name, self.capability, self.gpus = name, capability, gpus
        self.memory: dict[int, ctypes.Array] = {}  # address -> the host buffer standing for device memory
        self.freed: list[int] = []
        self.calls: list[tuple[str, tuple]] = []
        self.fail: dict[str, int] = {}  # symbol -> the CUresult it returns
        self.initialised = False
        self.retained = 0
        self.pushed = 0
        self.synchronized = 0
        self.problems: list[str] = []

    def functions(self) -> dict[str, Any]:
        """Symbol -> function, what rnnconv.gpu.cuda.CudaDriver takes in place of the library."""
        return {name: self._recorded(name) for name in dir(self) if name.startswith("cu")}

    def _recorded(self, name: str):
        method = getattr(self, name)

        def call(*args):
            self.calls.append((name, args))
            if name in self.fail:
                return self.fail[name]
            try:
                return method(*args)
            except Exception as exc:
                self.problems.append(f"{name}: {exc!r}")
                return CUDA_ERROR_INVALID_VALUE

        return call

    # --- the driver API (names as libcuda exports them) ---
    def cuInit(self, flags):
        assert flags == 0
        self.initialised = True
        return 0

    def cuDriverGetVersion(self, version):
        version[0] = 12090
        return 0

    def cuDeviceGetCount(self, count):
        assert self.initialised, "cuDeviceGetCount before cuInit"
        count[0] = self.gpus
        return 0

    def cuDeviceGet(self, device, ordinal):
        if ordinal >= self.gpus:
            return CUDA_ERROR_INVALID_VALUE
        device[0] = ordinal
        return 0

    def cuDeviceGetName(self, name, length, device):
        ctypes.memmove(name, self.name + b"\0", min(len(self.name) + 1, length))
        return 0

    def cuDeviceGetAttribute(self, value, attribute, device):
        value[0] = {75: self.capability[0], 76: self.capability[1]}[attribute]
        return 0

    def cuDevicePrimaryCtxRetain(self, context, device):
        context[0] = CONTEXT
        self.retained += 1
        return 0

    def cuDevicePrimaryCtxRelease_v2(self, device):
        self.retained -= 1
        return 0

    def cuCtxPushCurrent_v2(self, context):
        assert context == CONTEXT, hex(context or 0)
        self.pushed += 1
        return 0

    def cuCtxPopCurrent_v2(self, context):
        self.pushed -= 1
        context[0] = CONTEXT
        return 0

    def cuCtxSynchronize(self):
        self.synchronized += 1
        return 0

    def cuMemAlloc_v2(self, address, nbytes):
        buffer = ctypes.create_string_buffer(nbytes)
        address[0] = ctypes.addressof(buffer)
        self.memory[ctypes.addressof(buffer)] = buffer
        return 0

    def cuMemFree_v2(self, address):
        if address not in self.memory:
            return CUDA_ERROR_INVALID_VALUE
        self.freed.append(address)
        del self.memory[address]
        return 0

    def cuMemcpyHtoD_v2(self, device, host, nbytes):
        self._check(device, nbytes)
        ctypes.memmove(device, host, nbytes)
        return 0

    def cuMemcpyDtoH_v2(self, host, device, nbytes):
        self._check(device, nbytes)
        ctypes.memmove(host, device, nbytes)
        return 0

    def cuGetErrorName(self, status, text):
        if status not in ERROR_NAMES:
            return CUDA_ERROR_INVALID_VALUE
        text[0] = ERROR_NAMES[status]  # module-level bytes: alive as long as the pointer is read
        return 0

    def _check(self, device: int, nbytes: int) -> None:
        """A copy must stay inside one allocation, as on a GPU (where overrunning corrupts memory)."""
        for start, buffer in self.memory.items():
            if start <= device and device + nbytes <= start + len(buffer):
                return
        raise AssertionError(f"copy of {nbytes} bytes at {device:#x} is outside every allocation")
