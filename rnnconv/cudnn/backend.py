"""`verify --backend cudnn`: run a blob through NVIDIA's own cudnnRNNForward, and let cuDNN
itself say where every matrix and bias lives.

Device memory, copies and the context come from PyCUDA (the device's primary
context); cuDNN is called through ctypes (rnnconv.cudnn.api). Before anything
runs, cudnnGetRNNWeightSpaceSize and cudnnGetRNNWeightParams are compared with
rnnconv's layout table: any difference is a finding, reported tensor by tensor,
and `--relayout` writes the blob in the layout this cuDNN reports. Everything
here needs a CUDA driver, a GPU and PyCUDA; `probe` says which are missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from rnnconv.canonical import ParamKey, RNNSpec
from rnnconv.cudnn.api import FWD_MODE_INFERENCE, Cudnn
from rnnconv.cudnn.descriptors import Descriptors, rnn_settings, tensor_dims
from rnnconv.dtypes import decode, element_type, encode
from rnnconv.errors import BackendMissing, Mismatch
from rnnconv.weightspace import PROJECTION_LIN_LAYER_ID, regions


@dataclass
class Status:
    ok: bool
    reason: str
    found: dict[str, Any] = field(default_factory=dict)


def _driver() -> tuple[dict[str, Any], str | None]:
    """The CUDA driver and its GPUs, asked through libcuda directly (CUresult cuInit, cuDeviceGetCount)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return {}, "no CUDA driver (libcuda.so.1 not found)"
    libcuda.cuInit.argtypes, libcuda.cuInit.restype = [ctypes.c_uint], ctypes.c_int
    libcuda.cuDriverGetVersion.argtypes, libcuda.cuDriverGetVersion.restype = [ctypes.POINTER(ctypes.c_int)], ctypes.c_int
    libcuda.cuDeviceGetCount.argtypes, libcuda.cuDeviceGetCount.restype = [ctypes.POINTER(ctypes.c_int)], ctypes.c_int
    version, count = ctypes.c_int(), ctypes.c_int()
    found: dict[str, Any] = {}
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        found["cuda_driver"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    status = libcuda.cuInit(0)
    if status != 0:
        return found, f"the CUDA driver does not start (cuInit returned {status}: no usable GPU)"
    libcuda.cuDeviceGetCount(ctypes.byref(count))
    found["gpus"] = count.value
    return found, None if count.value else "no GPU (cuDeviceGetCount found none)"


def probe() -> Status:
    """What the cuDNN backend needs, and what this machine has."""
    found: dict[str, Any] = {}
    missing: list[str] = []
    try:
        cudnn = Cudnn()
        found.update(libcudnn=str(cudnn.path), cudnn_version=cudnn.version_text)
    except BackendMissing as exc:
        missing.append(str(exc))
    driver, problem = _driver()
    found.update(driver)
    if problem:
        missing.append(problem)
    if importlib.util.find_spec("pycuda") is None:
        missing.append("pycuda is not installed (pip install 'rnnconv[gpu]', which needs the CUDA toolkit)")
    else:
        found["pycuda"] = importlib.metadata.version("pycuda")
    if missing:
        have = ", ".join(f"{k} {v}" for k, v in found.items()) or "nothing"
        return Status(False, "; ".join(missing) + f" (found: {have})", found)
    return Status(True, "", found)


@dataclass
class Placement:
    """Where cuDNN says one tensor lives: byte offset in the weight space and its dimensions."""

    key: ParamKey
    pseudo_layer: int
    lin_layer_id: int
    offset_bytes: int
    dims: list[int]


class LayoutMismatch(Mismatch):
    """cuDNN places tensors elsewhere than rnnconv's layout table says."""

    def __init__(self, message: str, findings: list[dict[str, Any]], placements: list[Placement], size: int):
        super().__init__(message)
        self.findings, self.placements, self.weight_space_bytes = findings, placements, size


class CudnnBackend:
    name = "cudnn"

    def __init__(self, status: Status):
        self.status = status
        self.notes: list[str] = []
        self.details: dict[str, Any] = {}
        self.cudnn = Cudnn()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "detail": "cudnnRNNForward (inference, FMA math for float32)", **self.details}

    def versions(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.status.found.items() if k in ("cudnn_version", "cuda_driver", "pycuda")}

    def run(self, blob: Any, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
            lengths: np.ndarray | None) -> dict[str, np.ndarray | None]:
        spec = blob.spec
        steps, batch, _ = x.shape
        lengths = np.full(batch, steps, dtype=np.int32) if lengths is None else np.asarray(lengths, np.int32)
        etype = element_type(spec.dtype)
        with gpu_session(self.cudnn) as (drv, handle, device):
            self.details.update(gpu=device.name(), compute_capability=".".join(map(str, device.compute_capability())),
                                math_type="FMA (no TF32)" if spec.dtype in ("float32", "float64") else "TENSOR_OP",
                                algo="CUDNN_RNN_ALGO_STANDARD")
            with Descriptors(self.cudnn, spec, batch, steps, lengths, handle) as desc:
                words = np.ascontiguousarray(blob.words)
                weights = _to_device(drv, words, None)
                check_layout(self.cudnn, handle, desc, spec, int(weights), words.nbytes)
                buffers = {name: _to_device(drv, array, etype) for name, array in
                           (("x", x), ("hx", h0), ("cx", c0 if c0 is not None else np.zeros_like(h0)))}
                y_words = np.zeros((steps, batch, spec.num_directions * spec.output_size), etype.storage)
                hy_words = np.zeros(h0.shape, etype.storage)
                cy_words = np.zeros((h0.shape[0], batch, spec.hidden_size), etype.storage)
                y, hy, cy = (drv.mem_alloc(max(a.nbytes, 1)) for a in (y_words, hy_words, cy_words))
                seq = _to_device(drv, lengths, None)
                work_size, reserve_size = ctypes.c_size_t(), ctypes.c_size_t()
                self.cudnn.call("cudnnGetRNNTempSpaceSizes", handle, desc.rnn, FWD_MODE_INFERENCE, desc.x,
                                ctypes.byref(work_size), ctypes.byref(reserve_size))
                work = drv.mem_alloc(max(work_size.value, 1))
                lstm = spec.mode == "lstm"
                self.cudnn.call("cudnnRNNForward", handle, desc.rnn, FWD_MODE_INFERENCE,
                                ctypes.cast(int(seq), ctypes.POINTER(ctypes.c_int32)), desc.x, int(buffers["x"]),
                                desc.y, int(y), desc.h, int(buffers["hx"]), int(hy), desc.c,
                                int(buffers["cx"]) if lstm else None, int(cy) if lstm else None,
                                words.nbytes, int(weights), work_size.value, int(work), 0, None)
                drv.Context.synchronize()
                for dst, src in ((y_words, y), (hy_words, hy), (cy_words, cy)):
                    drv.memcpy_dtoh(dst, src)
        out = {"y": decode(y_words, etype).astype(np.float64), "h_n": decode(hy_words, etype).astype(np.float64),
               "c_n": decode(cy_words, etype).astype(np.float64) if spec.mode == "lstm" else None}
        second = torch_second_opinion(blob, x, h0, c0, lengths)
        if second is not None:
            self.details["torch._cudnn_rnn"] = second(out)
        return out


@contextlib.contextmanager
def gpu_session(cudnn: Cudnn) -> Iterator[tuple[Any, ctypes.c_void_p, Any]]:
    """PyCUDA on the first GPU's primary context, and a cuDNN handle; both released on exit."""
    import pycuda.driver as drv

    drv.init()
    device = drv.Device(0)
    context = device.retain_primary_context()
    context.push()
    handle = ctypes.c_void_p()
    try:
        cudnn.call("cudnnCreate", ctypes.byref(handle))
        yield drv, handle, device
    finally:
        if handle.value:
            cudnn.lib.cudnnDestroy(handle)
        context.pop()


def _to_device(drv: Any, array: np.ndarray, etype: Any) -> Any:
    host = np.ascontiguousarray(encode(array, etype) if etype is not None else array)
    buffer = drv.mem_alloc(max(host.nbytes, 1))
    drv.memcpy_htod(buffer, host)
    return buffer


def placements(cudnn: Cudnn, handle: Any, desc: Descriptors, spec: RNNSpec, base: int, size: int) -> list[Placement]:
    """Every matrix and bias of the RNN where cudnnGetRNNWeightParams puts it."""
    m_desc, b_desc = desc.new_tensor_descriptor(), desc.new_tensor_descriptor()
    found = []
    gates = len(spec.gates)
    lin_ids = list(range(2 * gates)) + ([PROJECTION_LIN_LAYER_ID] if spec.proj_size else [])
    for pseudo in range(spec.num_layers * spec.num_directions):
        layer, direction = divmod(pseudo, spec.num_directions)
        for lin in lin_ids:
            m_addr, b_addr = ctypes.c_void_p(), ctypes.c_void_p()
            cudnn.call("cudnnGetRNNWeightParams", handle, desc.rnn, pseudo, size, base, lin, m_desc,
                       ctypes.byref(m_addr), b_desc, ctypes.byref(b_addr))
            if lin == PROJECTION_LIN_LAYER_ID:
                kinds = [("P", "", m_addr, m_desc)]
            else:
                gate = spec.gates[lin % gates]
                side = "W" if lin < gates else "R"
                kinds = [(side, gate, m_addr, m_desc), ("b" + side, gate, b_addr, b_desc)]
            for kind, gate, addr, tensor in kinds:
                if addr.value:  # a NULL address: cuDNN holds no such tensor
                    found.append(Placement(ParamKey(layer, direction, kind, gate), pseudo, lin,
                                           addr.value - base, tensor_dims(cudnn, tensor)))
    return found


def check_layout(cudnn: Cudnn, handle: Any, desc: Descriptors, spec: RNNSpec, base: int, size: int) -> None:
    """Raise LayoutMismatch when cuDNN's sizes or offsets differ from rnnconv's layout table."""
    itemsize = element_type(spec.dtype).itemsize
    reported = ctypes.c_size_t()
    cudnn.call("cudnnGetRNNWeightSpaceSize", handle, desc.rnn, ctypes.byref(reported))
    findings: list[dict[str, Any]] = []
    if reported.value != size:
        findings.append({"tensor": "weight space", "expected_bytes": size, "cudnn_bytes": reported.value})
    found = placements(cudnn, handle, desc, spec, base, max(size, reported.value))
    by_key = {p.key: p for p in found}
    for region in regions(spec):
        placed = by_key.get(region.key)
        expected = {"offset_bytes": region.offset * itemsize, "shape": list(region.shape)}
        if placed is None:
            findings.append({"tensor": region.key.label, "expected": expected, "cudnn": None})
            continue
        size_ok = int(np.prod(placed.dims)) == region.size
        shape_ok = region.is_bias or list(placed.dims[-2:]) == list(region.shape)
        if placed.offset_bytes != region.offset * itemsize or not size_ok or not shape_ok:
            findings.append({"tensor": region.key.label, "expected": expected,
                             "cudnn": {"offset_bytes": placed.offset_bytes, "dims": placed.dims}})
    if findings:
        first = findings[0]
        raise LayoutMismatch(f"cuDNN {cudnn.version_text} lays this RNN out differently from rnnconv's table: "
                             f"{first['tensor']} expected {first.get('expected', first.get('expected_bytes'))}, "
                             f"cuDNN says {first.get('cudnn', first.get('cudnn_bytes'))} ({len(findings)} "
                             f"difference(s)); --relayout OUT writes the blob in cuDNN's layout",
                             findings, found, reported.value)


def torch_second_opinion(blob: Any, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, lengths: np.ndarray):
    """With a CUDA build of PyTorch, run the same blob through torch._cudnn_rnn (weight_buf) as well.

    Returns a function comparing its outputs with cudnnRNNForward's, or None when there is no such PyTorch.
    """
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available() or blob.spec.dtype == "bfloat16" or len(set(lengths.tolist())) > 1:
        return None
    spec = blob.spec
    dtype = getattr(torch, spec.dtype)
    device = torch.device("cuda")
    buf = torch.from_numpy(np.ascontiguousarray(blob.words)).to(device)  # float16/32/64 words are the values
    weights = []
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            for kind in ("W", "R", "bW", "bR"):
                weights.append(torch.cat([torch.from_numpy(np.ascontiguousarray(
                    blob.param(ParamKey(layer, direction, kind, g)))) for g in spec.gates]).to(device, dtype))
            if spec.proj_size:
                weights.append(torch.from_numpy(np.ascontiguousarray(
                    blob.param(ParamKey(layer, direction, "P", "")))).to(device, dtype))
    mode = rnn_settings(spec).cellMode
    try:
        result = torch._cudnn_rnn(torch.from_numpy(x).to(device, dtype), weights, 5 if spec.proj_size else 4, buf,
                                  torch.from_numpy(h0).to(device, dtype),
                                  torch.from_numpy(c0).to(device, dtype) if c0 is not None else None,
                                  mode, spec.hidden_size, spec.proj_size, spec.num_layers, False, 0.0, False,
                                  spec.bidirectional, [], None)
    except (RuntimeError, TypeError) as exc:
        return lambda _: {"ran": False, "error": str(exc).splitlines()[0][:200]}
    y = result[0].float().cpu().numpy()

    def compare(out: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"ran": True, "max_abs_vs_cudnnRNNForward": float(np.abs(y - out["y"]).max())}

    return compare
