"""`verify --backend cudnn`: run a blob through NVIDIA's own cudnnRNNForward, and let cuDNN
itself say where every matrix and bias lives.

Device memory, copies and the context come from PyCUDA (the device's primary
context); cuDNN is called through ctypes (rnnconv.cudnn.api). Before anything
runs, cudnnGetRNNWeightSpaceSize and cudnnGetRNNWeightParams are compared with
where the blob says its tensors are: any difference is a finding, reported tensor
by tensor, and `--relayout` writes the blob in the layout this cuDNN reports.
Everything here needs a CUDA driver, a GPU and PyCUDA; `probe` says which are missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rnnconv.canonical import ParamKey, RNNSpec
from rnnconv.compare import Inputs, Outputs
from rnnconv.contracts import BackendInfo, LayoutFinding
from rnnconv.cudnn.api import FWD_MODE_INFERENCE, MATH, Cudnn
from rnnconv.cudnn.descriptors import Descriptors, rnn_settings, tensor_dims
from rnnconv.dtypes import decode, element_type, encode
from rnnconv.errors import BackendMissing, Mismatch
from rnnconv.formats.cudnn import Blob
from rnnconv.table.constants import BIAS_KINDS, LSTM, MATRIX_KINDS, Kind
from rnnconv.weightspace import Region, lin_layer_ids, lin_layer_tensors


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
    int_out = [ctypes.POINTER(ctypes.c_int)]
    libcuda.cuInit.argtypes, libcuda.cuInit.restype = [ctypes.c_uint], ctypes.c_int
    libcuda.cuDriverGetVersion.argtypes, libcuda.cuDriverGetVersion.restype = int_out, ctypes.c_int
    libcuda.cuDeviceGetCount.argtypes, libcuda.cuDeviceGetCount.restype = int_out, ctypes.c_int
    version, count = ctypes.c_int(), ctypes.c_int()
    found: dict[str, Any] = {}
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        found["cuda_driver"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
        found["cuda_driver_number"] = version.value
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
    cudnn = None
    try:
        cudnn = Cudnn()
        found.update(libcudnn=str(cudnn.path), cudnn_version=cudnn.version_text)
    except BackendMissing as exc:
        missing.append(str(exc))
    driver, problem = _driver()
    found.update(driver)
    if problem:
        missing.append(problem)
    elif cudnn is not None and driver.get("cuda_driver_number", 0) < cudnn.cudart_version // 1000 * 1000:
        missing.append(
            f"the CUDA driver ({driver.get('cuda_driver')}) is older than the CUDA "
            f"{cudnn.cudart_version // 1000} this cuDNN was built for"
        )
    try:
        import pycuda.driver  # noqa: F401 -- importable, and built for this CUDA

        found["pycuda"] = importlib.metadata.version("pycuda")
    except ImportError as exc:
        missing.append(
            "pycuda is not installed (pip install 'rnnconv[gpu]', which needs the CUDA toolkit)"
            if importlib.util.find_spec("pycuda") is None
            else f"pycuda does not load ({exc})"
        )
    except OSError as exc:
        missing.append(f"pycuda does not load ({exc})")
    found.pop("cuda_driver_number", None)
    if missing:
        have = ", ".join(f"{k} {v}" for k, v in found.items()) or "nothing"
        return Status(False, "; ".join(missing) + f" (found: {have})", found)
    return Status(True, "", found)


@dataclass
class Placement:
    """Where cuDNN says one tensor lives: byte offset in the weight space, dimensions and strides."""

    key: ParamKey
    pseudo_layer: int
    lin_layer_id: int
    offset_bytes: int
    dims: list[int]
    strides: list[int]


class LayoutMismatch(Mismatch):
    """cuDNN places tensors elsewhere than the blob says."""

    def __init__(
        self, message: str, findings: list[LayoutFinding], placements: list[Placement], size: int, cudnn_version: str
    ):
        super().__init__(message)
        self.findings, self.placements, self.weight_space_bytes = findings, placements, size
        self.cudnn_version = cudnn_version


class Session:
    """PyCUDA on the first GPU's primary context, a cuDNN handle, and every device buffer made in it."""

    def __init__(self, drv: Any, handle: ctypes.c_void_p, device: Any):
        self.drv, self.handle, self.device = drv, handle, device
        self.buffers: list[Any] = []

    def alloc(self, nbytes: int) -> Any:
        buffer = self.drv.mem_alloc(max(int(nbytes), 1))
        self.buffers.append(buffer)
        return buffer

    def upload(self, host: np.ndarray) -> Any:
        host = np.ascontiguousarray(host)
        buffer = self.alloc(host.nbytes)
        self.drv.memcpy_htod(buffer, host)
        return buffer


@contextlib.contextmanager
def gpu_session(cudnn: Cudnn) -> Iterator[Session]:
    """A Session; every buffer is freed and the context popped on exit. CUDA failures are exit 3."""
    try:
        import pycuda.driver as drv
    except (ImportError, OSError) as exc:
        raise BackendMissing(f"pycuda does not load ({exc})") from None
    try:
        drv.init()
        device = drv.Device(0)
        context = device.retain_primary_context()
        context.push()
    except drv.Error as exc:
        raise BackendMissing(f"CUDA does not start on this machine ({exc})") from None
    session = Session(drv, ctypes.c_void_p(), device)
    try:
        cudnn.call("cudnnCreate", ctypes.byref(session.handle))
        yield session
    except drv.Error as exc:
        raise BackendMissing(f"CUDA failed while running cuDNN ({type(exc).__name__}: {exc})") from None
    finally:
        try:
            if session.handle.value:
                cudnn.lib.cudnnDestroy(session.handle)
            for buffer in session.buffers:
                buffer.free()
        finally:
            context.pop()


MATH_NAMES = {code: name.upper() for name, code in MATH.items()}


class CudnnBackend:
    """The verify engine that runs a blob through cudnnRNNForward."""

    name = "cudnn"

    def __init__(self, status: Status):
        self.status = status
        self.notes: list[str] = []
        self.details: dict[str, Any] = {}
        self.cudnn = Cudnn()

    def describe(self) -> BackendInfo:
        return BackendInfo(name=self.name, detail="cudnnRNNForward (inference, FMA math for float32)", **self.details)

    def versions(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.status.found.items() if k in ("cudnn_version", "cuda_driver", "pycuda")}

    def run(self, blob: Blob, inputs: Inputs) -> Outputs:
        x, h0, c0, lengths = inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"]
        spec = blob.spec
        steps, batch, _ = x.shape
        lengths = np.full(batch, steps, dtype=np.int32) if lengths is None else np.asarray(lengths, np.int32)
        etype = element_type(spec.dtype)
        lstm = spec.mode == LSTM
        pseudo = spec.num_layers * spec.num_directions
        with gpu_session(self.cudnn) as session:
            device = session.device
            settings = rnn_settings(spec)
            self.details.update(
                gpu=device.name(),
                compute_capability=".".join(map(str, device.compute_capability())),
                math_type=MATH_NAMES[settings.mathType] + (" (no TF32)" if settings.mathType == MATH["fma"] else ""),
                algo="CUDNN_RNN_ALGO_STANDARD",
            )
            with Descriptors(self.cudnn, spec, batch, steps, lengths, session.handle) as desc:
                words = np.ascontiguousarray(blob.words)
                weights = session.upload(words)
                check_layout(self.cudnn, session.handle, desc, spec, blob.places, int(weights), words.nbytes)
                x_dev, hx = session.upload(encode(x, etype)), session.upload(encode(h0, etype))
                cx = session.upload(encode(c0, etype)) if lstm and c0 is not None else None  # NULL: zeros
                y_host = np.zeros((steps, batch, spec.num_directions * spec.output_size), etype.storage)
                hy_host = np.zeros((pseudo, batch, spec.output_size), etype.storage)
                cy_host = np.zeros((pseudo, batch, spec.hidden_size), etype.storage)
                y, hy, cy = (session.alloc(a.nbytes) for a in (y_host, hy_host, cy_host))
                seq = session.upload(lengths)
                work_size, reserve_size = ctypes.c_size_t(), ctypes.c_size_t()
                self.cudnn.call(
                    "cudnnGetRNNTempSpaceSizes",
                    session.handle,
                    desc.rnn,
                    FWD_MODE_INFERENCE,
                    desc.x,
                    ctypes.byref(work_size),
                    ctypes.byref(reserve_size),
                )
                work = session.alloc(work_size.value)
                self.cudnn.call(
                    "cudnnRNNForward",
                    session.handle,
                    desc.rnn,
                    FWD_MODE_INFERENCE,
                    ctypes.cast(int(seq), ctypes.POINTER(ctypes.c_int32)),
                    desc.x,
                    int(x_dev),
                    desc.y,
                    int(y),
                    desc.h,
                    int(hx),
                    int(hy),
                    desc.c,
                    int(cx) if cx is not None else None,
                    int(cy) if lstm else None,
                    words.nbytes,
                    int(weights),
                    work_size.value,
                    int(work),
                    0,
                    None,
                )
                session.drv.Context.synchronize()
                for host, device_buffer in ((y_host, y), (hy_host, hy), (cy_host, cy)):
                    session.drv.memcpy_dtoh(host, device_buffer)
        out = {
            "y": decode(y_host, etype).astype(np.float64),
            "h_n": decode(hy_host, etype).astype(np.float64),
            "c_n": decode(cy_host, etype).astype(np.float64) if lstm else None,
        }
        second = torch_second_opinion(blob, x, h0, c0, lengths)
        if second is not None:
            self.details["torch_cudnn_rnn"] = second(out)
        return out


def placements(cudnn: Cudnn, handle: Any, desc: Descriptors, spec: RNNSpec, base: int, size: int) -> list[Placement]:
    """Every matrix and bias of the RNN where cudnnGetRNNWeightParams puts it."""
    m_desc, b_desc = desc.new_tensor_descriptor(), desc.new_tensor_descriptor()
    found = []
    ids = lin_layer_ids(spec.gates)
    lin_ids = sorted({lin for (kind, _), lin in ids.items() if kind != Kind.P or spec.proj_size})
    for pseudo in range(spec.num_layers * spec.num_directions):
        layer, direction = divmod(pseudo, spec.num_directions)
        for lin in lin_ids:
            m_addr, b_addr = ctypes.c_void_p(), ctypes.c_void_p()
            cudnn.call(
                "cudnnGetRNNWeightParams",
                handle,
                desc.rnn,
                pseudo,
                size,
                base,
                lin,
                m_desc,
                ctypes.byref(m_addr),
                b_desc,
                ctypes.byref(b_addr),
            )
            matrix, bias = lin_layer_tensors(spec.gates, lin)
            kinds = [(*matrix, m_addr, m_desc)] + ([(*bias, b_addr, b_desc)] if bias else [])
            for kind, gate, addr, tensor in kinds:
                if addr.value:  # a NULL address: cuDNN holds no such tensor
                    dims, strides = tensor_dims(cudnn, tensor)
                    found.append(
                        Placement(ParamKey(layer, direction, kind, gate), pseudo, lin, addr.value - base, dims, strides)
                    )
    return found


def check_layout(
    cudnn: Cudnn, handle: Any, desc: Descriptors, spec: RNNSpec, places: dict[ParamKey, Region], base: int, size: int
) -> None:
    """Raise LayoutMismatch when cuDNN's sizes or offsets differ from where the blob puts its tensors.

    Each tensor is looked up by the pseudo-layer and linLayerID the blob gives it (its sidecar's): a wrong id
    is a wrong place, as it would be for a program that asks cuDNN with the sidecar's ids.
    """
    itemsize = element_type(spec.dtype).itemsize
    reported = ctypes.c_size_t()
    cudnn.call("cudnnGetRNNWeightSpaceSize", handle, desc.rnn, ctypes.byref(reported))
    findings: list[LayoutFinding] = []
    if reported.value != size:
        findings.append(LayoutFinding(tensor="weight space", expected_bytes=size, cudnn_bytes=reported.value))
    found = placements(cudnn, handle, desc, spec, base, max(size, reported.value))
    by_id = {(p.pseudo_layer, p.lin_layer_id, p.key.kind in BIAS_KINDS): p for p in found}
    for region in sorted(places.values(), key=lambda r: r.offset):
        placed = by_id.get((region.pseudo_layer, region.lin_layer_id, region.is_bias))
        expected = {"offset_bytes": region.offset * itemsize, "shape": list(region.shape)}
        if placed is None:
            findings.append(LayoutFinding(tensor=region.key.label, expected=expected))
            continue
        size_ok = int(np.prod(placed.dims)) == region.size
        rows, cols = (region.shape + (1,))[:2]
        row_major = region.is_bias or (placed.dims[-2:] == [rows, cols] and placed.strides[-2:] == [cols, 1])
        if placed.offset_bytes != region.offset * itemsize or not size_ok or not row_major:
            findings.append(
                LayoutFinding(
                    tensor=region.key.label,
                    expected=expected,
                    cudnn={"offset_bytes": placed.offset_bytes, "dims": placed.dims, "strides": placed.strides},
                )
            )
    if findings:
        first = findings[0]
        expected_text = first.expected if first.expected is not None else first.expected_bytes
        cudnn_text = first.cudnn if first.cudnn is not None else first.cudnn_bytes
        raise LayoutMismatch(
            f"cuDNN {cudnn.version_text} lays this RNN out differently from the blob: "
            f"{first.tensor} expected {expected_text}, cuDNN says {cudnn_text} ({len(findings)} "
            f"difference(s)); --relayout OUT writes the blob in cuDNN's layout",
            findings,
            found,
            reported.value,
            cudnn.version_text,
        )


def torch_second_opinion(blob: Blob, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, lengths: np.ndarray):
    """With a CUDA build of PyTorch, run the same weights through torch._cudnn_rnn as well.

    PyTorch places the weights in cuDNN's weight space itself (weight_buf=None: it asks
    cudnnGetRNNWeightParams, as for its own modules), so this checks rnnconv's layout and
    forward call independently. TF32 is off, as in rnnconv's call. Returns a function
    comparing with cudnnRNNForward's outputs, or None when there is no such PyTorch.
    """
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    spec = blob.spec
    if not torch.cuda.is_available() or (lengths != x.shape[0]).any():
        return None
    try:
        dtype = getattr(torch, spec.dtype)
        device = torch.device("cuda")

        def tensor(array: np.ndarray) -> Any:
            return torch.tensor(
                np.array(array, dtype=np.float32 if spec.dtype == "bfloat16" else array.dtype), device=device
            ).to(dtype)

        weights = []
        for layer in range(spec.num_layers):
            for direction in range(spec.num_directions):
                for kind in (*MATRIX_KINDS, *BIAS_KINDS):
                    weights.append(
                        torch.cat([tensor(blob.param(ParamKey(layer, direction, kind, g))) for g in spec.gates])
                    )
                if spec.proj_size:
                    weights.append(tensor(blob.param(ParamKey(layer, direction, Kind.P, ""))))
        lstm = spec.mode == LSTM
        rnn_precision = getattr(torch.backends.cudnn, "rnn", None)
        previous = (torch.backends.cudnn.allow_tf32, getattr(rnn_precision, "fp32_precision", None))
        torch.backends.cudnn.allow_tf32 = False
        if rnn_precision is not None and previous[1] is not None:
            rnn_precision.fp32_precision = "ieee"
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "weights are not part of single contiguous chunk": on purpose
                result = torch._cudnn_rnn(
                    tensor(x),
                    weights,
                    5 if spec.proj_size else 4,
                    None,
                    tensor(h0),
                    tensor(c0) if lstm and c0 is not None else None,
                    rnn_settings(spec).cellMode,
                    spec.hidden_size,
                    spec.proj_size,
                    spec.num_layers,
                    False,
                    0.0,
                    False,
                    spec.bidirectional,
                    [],
                    None,
                )
        finally:
            torch.backends.cudnn.allow_tf32 = previous[0]
            if rnn_precision is not None and previous[1] is not None:
                rnn_precision.fp32_precision = previous[1]
        ours = [r.float().cpu().numpy() for r in result[: 3 if lstm else 2]]
    except (RuntimeError, TypeError, ValueError) as exc:
        message = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return lambda _: {"ran": False, "error": message}

    def compare(out: dict[str, np.ndarray]) -> dict[str, Any]:
        names = ("y", "h_n", "c_n")[: len(ours)]
        return {
            "ran": True,
            **{f"max_abs_{n}_vs_cudnnRNNForward": float(np.abs(t - out[n]).max()) for n, t in zip(names, ours)},
        }

    return compare
