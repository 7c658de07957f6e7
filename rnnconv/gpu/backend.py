"""`verify --backend cudnn`: run a blob through NVIDIA's own cudnnRNNForward, and let cuDNN
itself say where every matrix and bias lives.

Device memory, copies and the context come from a CUDA session (rnnconv.gpu.cuda:
PyCUDA's when it imports, else rnnconv's own on libcuda through ctypes); cuDNN is
called through ctypes (rnnconv.gpu.api). Before anything runs,
cudnnGetRNNWeightSpaceSize and cudnnGetRNNWeightParams are compared with where the
blob says its tensors are: any difference is a finding, reported tensor by tensor,
and `--relayout` writes the blob in the layout this cuDNN reports when only offsets
differ. Everything here needs a CUDA driver and a GPU; `probe` says what is missing.
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

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import BackendInfo
from rnnconv.core.dtypes import decode, element_type, encode
from rnnconv.core.report_contracts import LayoutFinding
from rnnconv.core.weightspace import Region, lin_layer_ids, lin_layer_tensors
from rnnconv.errors import BackendMissing, Mismatch
from rnnconv.gpu.api import FWD_MODE_INFERENCE, MATH, Cudnn, CudnnError
from rnnconv.gpu.cuda import (
    SESSION_ENV,
    CudaDriver,
    CudaError,
    PyCudaSession,
    Session,
    chosen_kind,
    open_session,
    pycuda_driver,
    version_text,
)
from rnnconv.gpu.descriptors import MATH_FOR, Descriptors, rnn_settings, tensor_dims
from rnnconv.table.constants import BIAS_KINDS, LSTM, MATRIX_KINDS, Kind


@dataclass
class Status:
    ok: bool
    reason: str
    found: dict[str, Any] = field(default_factory=dict)


def _driver() -> tuple[dict[str, Any], str | None]:
    """The CUDA driver and its GPUs, asked through libcuda directly (cuDriverGetVersion, cuInit, cuDeviceGetCount)."""
    try:
        driver = CudaDriver.load()
    except BackendMissing as exc:
        return {}, str(exc)
    found: dict[str, Any] = {"libcuda": driver.path}
    try:
        number = driver.version()
        found.update(cuda_driver=version_text(number), cuda_driver_number=number)
        count = driver.device_count()
    except CudaError as exc:
        return found, f"the CUDA driver does not start ({exc}: no usable GPU)"
    found["gpus"] = count
    return found, None if count else "no GPU (cuDeviceGetCount found none)"


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
    if "libcuda" in found:  # a session runs on the driver: without one there is none to name
        try:
            found["cuda_session"] = session_kind()
        except BackendMissing as exc:
            missing.append(str(exc))
    found.pop("cuda_driver_number", None)
    if missing:
        have = ", ".join(f"{k} {v}" for k, v in found.items()) or "nothing"
        return Status(False, "; ".join(missing) + f" (found: {have})", found)
    return Status(True, "", found)


def session_kind() -> str:
    """Which CUDA session a run would use here, in words: PyCUDA when it imports, else rnnconv's ctypes one."""
    asked = chosen_kind()
    drv, why = pycuda_driver() if asked != "ctypes" else (None, f"{SESSION_ENV}=ctypes")
    if drv is not None:
        return PyCudaSession(drv).describe()
    if asked == "pycuda":
        raise BackendMissing(f"{SESSION_ENV}=pycuda but {why}")
    return f"ctypes on libcuda.so.1 ({why})"


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

    def relayout_refusal(self, itemsize: int) -> str | None:
        """Why `--relayout` cannot write the blob in cuDNN's layout (None: it can)."""
        return relayout_refusal(self.findings, self.placements, self.weight_space_bytes, itemsize)


@contextlib.contextmanager
def gpu_session(cudnn: Cudnn, kind: str | None = None) -> Iterator[Session]:
    """A CUDA session (PyCUDA's or rnnconv's ctypes one) with a cuDNN handle; all of it released on exit."""
    with open_session(kind) as session:
        try:
            cudnn.call("cudnnCreate", ctypes.byref(session.handle))
            yield session
        finally:
            if session.handle.value:
                cudnn.lib.cudnnDestroy(session.handle)
                session.handle = ctypes.c_void_p()


MATH_NAMES = {code: name.upper() for name, code in MATH.items()}
# The math types to try, in order, per data type. cuDNN may refuse bfloat16 RNNs with its default math on
# some GPUs: then FMA, then tensor-op math (which one ran is in the report).
MATH_TRIES: dict[str, tuple[int, ...]] = {
    "bfloat16": (MATH["default"], MATH["fma"], MATH["tensor_op"]),
    **{dtype: (math,) for dtype, math in MATH_FOR.items() if dtype != "bfloat16"},
}


def math_name(math_type: int) -> str:
    return MATH_NAMES[math_type] + (" (no TF32)" if math_type == MATH["fma"] else "")


class CudnnBackend:
    """The verify engine that runs a blob through cudnnRNNForward."""

    name = "cudnn"

    def __init__(self, status: Status):
        self.status = status
        self.notes: list[str] = []
        self.details: dict[str, Any] = {}
        self.cudnn = Cudnn()
        self.session: Session | None = None  # an open session to run in (the battery's); else one per run

    def describe(self) -> BackendInfo:
        return BackendInfo(name=self.name, detail="cudnnRNNForward (inference, FMA math for float32)", **self.details)

    def versions(self) -> dict[str, str]:
        keys = ("cudnn_version", "cuda_driver", "cuda_session")
        return {k: str(v) for k, v in self.status.found.items() if k in keys}

    @contextlib.contextmanager
    def _session(self) -> Iterator[Session]:
        if self.session is None:
            with gpu_session(self.cudnn) as session:
                yield session
        else:
            with self.session.scope():  # the buffers of this run are freed after it
                yield self.session

    def run(self, blob: Blob, inputs: Inputs) -> Outputs:
        x, h0, c0, lengths = inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"]
        spec = blob.spec
        steps, batch, _ = x.shape
        lengths = np.full(batch, steps, dtype=np.int32) if lengths is None else np.asarray(lengths, np.int32)
        with self._session() as session:
            self.details.update(
                gpu=session.device_name(),
                compute_capability=".".join(map(str, session.compute_capability())),
                cuda_session=session.describe(),
                algo="CUDNN_RNN_ALGO_STANDARD",
            )
            self.details.pop("math_type_refused", None)
            words = np.ascontiguousarray(blob.words)
            weights = session.upload(words)
            tries = MATH_TRIES[spec.dtype]
            refused: list[str] = []
            for math_type in tries:
                try:
                    with Descriptors(self.cudnn, spec, batch, steps, lengths, session.handle, math_type) as desc:
                        check_layout(self.cudnn, session.handle, desc, spec, blob.places, int(weights), words.nbytes)
                        out = _forward(self.cudnn, session, desc, spec, weights, words.nbytes, x, h0, c0, lengths)
                    break
                except CudnnError as exc:
                    if not exc.not_supported or math_type == tries[-1]:
                        raise
                    refused.append(f"{MATH_NAMES[math_type]}: {exc}")
            self.details["math_type"] = math_name(math_type)
            if refused:
                self.details["math_type_refused"] = refused
        second = torch_second_opinion(blob, x, h0, c0, lengths)
        if second is not None:
            self.details["torch_cudnn_rnn"] = second(out)
        return out


def _forward(
    cudnn: Cudnn,
    session: Session,
    desc: Descriptors,
    spec: RNNSpec,
    weights: Any,
    weight_bytes: int,
    x: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray | None,
    lengths: np.ndarray,
) -> Outputs:
    """One cudnnRNNForward (inference) on device copies of the inputs; the outputs decoded to float64."""
    steps, batch, _ = x.shape
    etype = element_type(spec.dtype)
    lstm = spec.mode == LSTM
    pseudo = spec.num_layers * spec.num_directions
    x_dev, hx = session.upload(encode(x, etype)), session.upload(encode(h0, etype))
    cx = session.upload(encode(c0, etype)) if lstm and c0 is not None else None  # NULL: zeros
    y_host = np.zeros((steps, batch, spec.num_directions * spec.output_size), etype.storage)
    hy_host = np.zeros((pseudo, batch, spec.output_size), etype.storage)
    cy_host = np.zeros((pseudo, batch, spec.hidden_size), etype.storage)
    y, hy, cy = (session.alloc(a.nbytes) for a in (y_host, hy_host, cy_host))
    seq = session.upload(lengths)
    work_size, reserve_size = ctypes.c_size_t(), ctypes.c_size_t()
    cudnn.call(
        "cudnnGetRNNTempSpaceSizes",
        session.handle,
        desc.rnn,
        FWD_MODE_INFERENCE,
        desc.x,
        ctypes.byref(work_size),
        ctypes.byref(reserve_size),
    )
    work = session.alloc(work_size.value)
    cudnn.call(
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
        weight_bytes,
        int(weights),
        work_size.value,
        int(work),
        0,
        None,
    )
    session.synchronize()
    for host, device_buffer in ((y_host, y), (hy_host, hy), (cy_host, cy)):
        session.download(host, device_buffer)
    return {
        "y": decode(y_host, etype).astype(np.float64),
        "h_n": decode(hy_host, etype).astype(np.float64),
        "c_n": decode(cy_host, etype).astype(np.float64) if lstm else None,
    }


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


def expected_dims(shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """A tensor of rnnconv's layout as cudnnGetRNNWeightParams describes one: 3-D, dense, row-major
    (a (rows, cols) matrix is [1, rows, cols] / [rows*cols, cols, 1], a bias of n is [1, n, 1] / [n, 1, 1])."""
    rows, cols = (*shape, 1)[:2]
    return [1, rows, cols], [rows * cols, cols, 1]


def dense(dims: list[int], strides: list[int]) -> tuple[list[int], list[int]]:
    """The dimensions that are not 1 and their strides: what decides where each element is."""
    kept = [(d, s) for d, s in zip(dims, strides) if d != 1]
    return [d for d, _ in kept], [s for _, s in kept]


def layout_findings(
    spec: RNNSpec, places: dict[ParamKey, Region], found: list[Placement], reported_bytes: int, size: int
) -> list[LayoutFinding]:
    """Every difference between where cuDNN places the tensors (`found`, `reported_bytes` in all) and where
    the blob does (`places`, `size` bytes): the weight space's size, each tensor's offset, dims and strides.

    Each tensor is looked up by the pseudo-layer and linLayerID the blob gives it (its sidecar's): a wrong id
    is a wrong place, as it would be for a program that asks cuDNN with the sidecar's ids.
    """
    itemsize = element_type(spec.dtype).itemsize
    findings: list[LayoutFinding] = []
    if reported_bytes != size:
        findings.append(
            LayoutFinding(tensor="weight space", expected_bytes=size, cudnn_bytes=reported_bytes, differs=["size"])
        )
    by_id = {(p.pseudo_layer, p.lin_layer_id, p.key.kind in BIAS_KINDS): p for p in found}
    for region in sorted(places.values(), key=lambda r: r.offset):
        placed = by_id.get((region.pseudo_layer, region.lin_layer_id, region.is_bias))
        dims, strides = expected_dims(region.shape)
        expected = {"offset_bytes": region.offset * itemsize, "shape": list(region.shape)}
        expected.update(dims=dims, strides=strides)
        if placed is None:
            findings.append(LayoutFinding(tensor=region.key.label, expected=expected, differs=["missing"]))
            continue
        differs = []
        if placed.offset_bytes != region.offset * itemsize:
            differs.append("offset")
        if dense(placed.dims, placed.strides) != dense(dims, strides):
            differs.append("dims and strides")
        if differs:
            said = {"offset_bytes": placed.offset_bytes, "dims": placed.dims, "strides": placed.strides}
            findings.append(LayoutFinding(tensor=region.key.label, expected=expected, cudnn=said, differs=differs))
    return findings


def check_layout(
    cudnn: Cudnn, handle: Any, desc: Descriptors, spec: RNNSpec, places: dict[ParamKey, Region], base: int, size: int
) -> None:
    """Raise LayoutMismatch when cuDNN's size, offsets, dimensions or strides differ from the blob's layout."""
    reported = ctypes.c_size_t()
    cudnn.call("cudnnGetRNNWeightSpaceSize", handle, desc.rnn, ctypes.byref(reported))
    found = placements(cudnn, handle, desc, spec, base, max(size, reported.value))
    findings = layout_findings(spec, places, found, reported.value, size)
    if findings:
        first = findings[0]
        expected_text = first.expected if first.expected is not None else first.expected_bytes
        cudnn_text = first.cudnn if first.cudnn is not None else first.cudnn_bytes
        movable = relayout_refusal(findings, found, reported.value, element_type(spec.dtype).itemsize) is None
        raise LayoutMismatch(
            f"cuDNN {cudnn.version_text} lays this RNN out differently from the blob: "
            f"{first.tensor} expected {expected_text}, cuDNN says {cudnn_text} ({len(findings)} difference(s)); "
            + (
                "--relayout OUT writes the blob in cuDNN's layout"
                if movable
                else "more than offsets differ, so --relayout cannot move the blob into cuDNN's layout"
            ),
            findings,
            found,
            reported.value,
            cudnn.version_text,
        )


def relayout_refusal(
    findings: list[LayoutFinding], found: list[Placement], total_bytes: int, itemsize: int
) -> str | None:
    """Why the blob cannot be moved into cuDNN's layout, or None when it can: moving tensors changes offsets
    and the total size, nothing else, so every other difference (dims, strides, a tensor cuDNN does not
    hold, a tensor beyond cuDNN's weight space) is refused."""
    for finding in findings:
        if any(kind not in ("offset", "size") for kind in finding.differs):
            return (
                f"{finding.tensor}: cuDNN reports {finding.cudnn} where the blob has {finding.expected}"
                if finding.cudnn
                else f"{finding.tensor}: cuDNN reports no place for it"
            )
    for placed in found:
        end = placed.offset_bytes + int(np.prod(placed.dims)) * itemsize
        if placed.offset_bytes < 0 or end > total_bytes:
            return (
                f"{placed.key.label}: cuDNN places it at bytes {placed.offset_bytes}-{end}, outside its own "
                f"{total_bytes}-byte weight space"
            )
    return None


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
