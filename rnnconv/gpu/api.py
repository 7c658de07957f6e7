"""ctypes bindings to the cuDNN 9 RNN API (libcudnn.so.9), written against its headers.

Every function rnnconv calls is declared in PROTOTYPES with the C types of its
header declaration (cudnn_graph.h, cudnn_ops.h, cudnn_adv.h of cuDNN 9.28); the
ctypes argtypes and restype are derived from them, so 64-bit pointers are never
truncated and the tests can check the table against the headers themselves.
Every status is checked and turned into a sentence naming the call, with
cuDNN's own error strings. Nothing here needs a GPU until a handle is created.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
from pathlib import Path
from typing import Any

from rnnconv.core.dtypes import ELEMENT_TYPES
from rnnconv.errors import EXIT_BACKEND_MISSING, EXIT_BAD_INPUT, BackendMissing, RnnconvError
from rnnconv.table import constants

# The enum values (cudnn_graph.h / cudnn_adv.h) are the layout table's; the tests check them against the headers.
STATUS_SUCCESS = constants.STATUS_SUCCESS
STATUS_NOT_SUPPORTED = constants.STATUS_NOT_SUPPORTED
DATA_TYPE = {name: etype.cudnn for name, etype in ELEMENT_TYPES.items()}  # cudnnDataType_t
MATH = constants.MATH  # cudnnMathType_t
RNN_MODE = {name: code for name, (_, code) in constants.CUDNN_MODES.items()}  # cudnnRNNMode_t
BIAS_MODE = constants.BIAS_MODE  # cudnnRNNBiasMode_t
DIRECTION = constants.DIRECTION  # cudnnDirectionMode_t: UNIDIRECTIONAL, BIDIRECTIONAL
INPUT_MODE = constants.INPUT_MODE  # cudnnRNNInputMode_t
ALGO_STANDARD = constants.ALGO_STANDARD  # cudnnRNNAlgo_t
FWD_MODE_INFERENCE = constants.FWD_MODE_INFERENCE  # cudnnForwardMode_t
DATA_LAYOUT = constants.DATA_LAYOUT  # cudnnRNNDataLayout_t
PADDED_IO_ENABLED = constants.PADDED_IO_ENABLED  # auxFlags bit of cudnnSetRNNDescriptor_v8

# --- C types -> ctypes --------------------------------------------------------------------------
OPAQUE = {
    "cudnnHandle_t",
    "cudnnRNNDescriptor_t",
    "cudnnRNNDataDescriptor_t",
    "cudnnTensorDescriptor_t",
    "cudnnDropoutDescriptor_t",
    "cudaStream_t",
}
ENUMS = {
    "cudnnStatus_t",
    "cudnnDataType_t",
    "cudnnMathType_t",
    "cudnnRNNAlgo_t",
    "cudnnRNNMode_t",
    "cudnnRNNBiasMode_t",
    "cudnnDirectionMode_t",
    "cudnnRNNInputMode_t",
    "cudnnForwardMode_t",
    "cudnnRNNDataLayout_t",
}
SCALARS = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "unsigned long long": ctypes.c_ulonglong,
}


def ctype_of(c_type: str) -> Any:
    """The ctypes type for a C type as the header writes it (const dropped, pointers kept)."""
    text = " ".join(c_type.replace("const ", "").split())
    if text.endswith("[]"):
        text = text[:-2].strip() + " *"
    stars = text.count("*")
    base = text.replace("*", "").strip()
    if stars == 0:
        if base in OPAQUE:
            return ctypes.c_void_p
        if base in ENUMS:
            return ctypes.c_int
        if base == "void":
            return None
        return SCALARS[base]
    if base == "char" and stars == 1:
        return ctypes.c_char_p
    if base == "void":
        return ctypes.c_void_p if stars == 1 else ctypes.POINTER(ctypes.c_void_p)  # void ** receives an address
    if base in OPAQUE:
        return ctypes.POINTER(ctypes.c_void_p)
    if base in ENUMS:
        return ctypes.POINTER(ctypes.c_int)
    return ctypes.POINTER(SCALARS[base])


# name -> (return type, [(C type, parameter name)]), as declared in the cuDNN 9 headers.
PROTOTYPES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "cudnnGetVersion": ("size_t", []),
    "cudnnGetCudartVersion": ("size_t", []),
    "cudnnGetErrorString": ("const char *", [("cudnnStatus_t", "status")]),
    "cudnnGetLastErrorString": ("void", [("char *", "message"), ("size_t", "max_size")]),
    "cudnnCreate": ("cudnnStatus_t", [("cudnnHandle_t *", "handle")]),
    "cudnnDestroy": ("cudnnStatus_t", [("cudnnHandle_t", "handle")]),
    "cudnnSetStream": ("cudnnStatus_t", [("cudnnHandle_t", "handle"), ("cudaStream_t", "streamId")]),
    "cudnnCreateTensorDescriptor": ("cudnnStatus_t", [("cudnnTensorDescriptor_t *", "tensorDesc")]),
    "cudnnSetTensorNdDescriptor": (
        "cudnnStatus_t",
        [
            ("cudnnTensorDescriptor_t", "tensorDesc"),
            ("cudnnDataType_t", "dataType"),
            ("int", "nbDims"),
            ("const int []", "dimA"),
            ("const int []", "strideA"),
        ],
    ),
    "cudnnGetTensorNdDescriptor": (
        "cudnnStatus_t",
        [
            ("const cudnnTensorDescriptor_t", "tensorDesc"),
            ("int", "nbDimsRequested"),
            ("cudnnDataType_t *", "dataType"),
            ("int *", "nbDims"),
            ("int []", "dimA"),
            ("int []", "strideA"),
        ],
    ),
    "cudnnDestroyTensorDescriptor": ("cudnnStatus_t", [("cudnnTensorDescriptor_t", "tensorDesc")]),
    "cudnnCreateDropoutDescriptor": ("cudnnStatus_t", [("cudnnDropoutDescriptor_t *", "dropoutDesc")]),
    "cudnnSetDropoutDescriptor": (
        "cudnnStatus_t",
        [
            ("cudnnDropoutDescriptor_t", "dropoutDesc"),
            ("cudnnHandle_t", "handle"),
            ("float", "dropout"),
            ("void *", "states"),
            ("size_t", "stateSizeInBytes"),
            ("unsigned long long", "seed"),
        ],
    ),
    "cudnnDestroyDropoutDescriptor": ("cudnnStatus_t", [("cudnnDropoutDescriptor_t", "dropoutDesc")]),
    "cudnnCreateRNNDescriptor": ("cudnnStatus_t", [("cudnnRNNDescriptor_t *", "rnnDesc")]),
    "cudnnDestroyRNNDescriptor": ("cudnnStatus_t", [("cudnnRNNDescriptor_t", "rnnDesc")]),
    "cudnnSetRNNDescriptor_v8": (
        "cudnnStatus_t",
        [
            ("cudnnRNNDescriptor_t", "rnnDesc"),
            ("cudnnRNNAlgo_t", "algo"),
            ("cudnnRNNMode_t", "cellMode"),
            ("cudnnRNNBiasMode_t", "biasMode"),
            ("cudnnDirectionMode_t", "dirMode"),
            ("cudnnRNNInputMode_t", "inputMode"),
            ("cudnnDataType_t", "dataType"),
            ("cudnnDataType_t", "mathPrec"),
            ("cudnnMathType_t", "mathType"),
            ("int32_t", "inputSize"),
            ("int32_t", "hiddenSize"),
            ("int32_t", "projSize"),
            ("int32_t", "numLayers"),
            ("cudnnDropoutDescriptor_t", "dropoutDesc"),
            ("uint32_t", "auxFlags"),
        ],
    ),
    "cudnnGetRNNWeightSpaceSize": (
        "cudnnStatus_t",
        [("cudnnHandle_t", "handle"), ("cudnnRNNDescriptor_t", "rnnDesc"), ("size_t *", "weightSpaceSize")],
    ),
    "cudnnGetRNNWeightParams": (
        "cudnnStatus_t",
        [
            ("cudnnHandle_t", "handle"),
            ("cudnnRNNDescriptor_t", "rnnDesc"),
            ("int32_t", "pseudoLayer"),
            ("size_t", "weightSpaceSize"),
            ("const void *", "weightSpace"),
            ("int32_t", "linLayerID"),
            ("cudnnTensorDescriptor_t", "mDesc"),
            ("void **", "mAddr"),
            ("cudnnTensorDescriptor_t", "bDesc"),
            ("void **", "bAddr"),
        ],
    ),
    "cudnnCreateRNNDataDescriptor": ("cudnnStatus_t", [("cudnnRNNDataDescriptor_t *", "rnnDataDesc")]),
    "cudnnDestroyRNNDataDescriptor": ("cudnnStatus_t", [("cudnnRNNDataDescriptor_t", "rnnDataDesc")]),
    "cudnnSetRNNDataDescriptor": (
        "cudnnStatus_t",
        [
            ("cudnnRNNDataDescriptor_t", "rnnDataDesc"),
            ("cudnnDataType_t", "dataType"),
            ("cudnnRNNDataLayout_t", "layout"),
            ("int", "maxSeqLength"),
            ("int", "batchSize"),
            ("int", "vectorSize"),
            ("const int []", "seqLengthArray"),
            ("void *", "paddingFill"),
        ],
    ),
    "cudnnGetRNNDataDescriptor": (
        "cudnnStatus_t",
        [
            ("cudnnRNNDataDescriptor_t", "rnnDataDesc"),
            ("cudnnDataType_t *", "dataType"),
            ("cudnnRNNDataLayout_t *", "layout"),
            ("int *", "maxSeqLength"),
            ("int *", "batchSize"),
            ("int *", "vectorSize"),
            ("int", "arrayLengthRequested"),
            ("int []", "seqLengthArray"),
            ("void *", "paddingFill"),
        ],
    ),
    "cudnnGetRNNTempSpaceSizes": (
        "cudnnStatus_t",
        [
            ("cudnnHandle_t", "handle"),
            ("cudnnRNNDescriptor_t", "rnnDesc"),
            ("cudnnForwardMode_t", "fwdMode"),
            ("cudnnRNNDataDescriptor_t", "xDesc"),
            ("size_t *", "workSpaceSize"),
            ("size_t *", "reserveSpaceSize"),
        ],
    ),
    "cudnnRNNForward": (
        "cudnnStatus_t",
        [
            ("cudnnHandle_t", "handle"),
            ("cudnnRNNDescriptor_t", "rnnDesc"),
            ("cudnnForwardMode_t", "fwdMode"),
            ("const int32_t []", "devSeqLengths"),
            ("cudnnRNNDataDescriptor_t", "xDesc"),
            ("const void *", "x"),
            ("cudnnRNNDataDescriptor_t", "yDesc"),
            ("void *", "y"),
            ("cudnnTensorDescriptor_t", "hDesc"),
            ("const void *", "hx"),
            ("void *", "hy"),
            ("cudnnTensorDescriptor_t", "cDesc"),
            ("const void *", "cx"),
            ("void *", "cy"),
            ("size_t", "weightSpaceSize"),
            ("const void *", "weightSpace"),
            ("size_t", "workSpaceSize"),
            ("void *", "workSpace"),
            ("size_t", "reserveSpaceSize"),
            ("void *", "reserveSpace"),
        ],
    ),
}
HEADERS = ("cudnn_graph.h", "cudnn_ops.h", "cudnn_adv.h")


# cudnnStatus_t codes of the NOT_SUPPORTED family (3xxx) that say the machine cannot run cuDNN, not that it
# refuses this RNN: an incompatible driver or CUDA runtime, a GPU architecture this build lacks, a missing
# runtime prerequisite, a sub-library that does not load (cudnn_graph.h).
ENVIRONMENT_STATUSES = {
    3005: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER",
    3006: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART",
    3007: "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
    3008: "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
    3009: "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
}


class CudnnError(RnnconvError):
    """A cuDNN call failed; the message names the call and gives cuDNN's own explanation.

    cuDNN failing to run here (no GPU, an old driver, a GPU its build lacks, a sub-library that does not
    load, an execution failure) is a backend that is unavailable (exit 3); a configuration cuDNN does not
    support is unsupported input (exit 2).
    """

    exit_code = EXIT_BACKEND_MISSING

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
        if self.not_supported:
            self.exit_code = EXIT_BAD_INPUT

    @property
    def not_supported(self) -> bool:
        """cuDNN refuses this configuration (3xxx), as opposed to not running on this machine at all."""
        return STATUS_NOT_SUPPORTED <= self.status < STATUS_NOT_SUPPORTED + 1000 and (
            self.status not in ENVIRONMENT_STATUSES
        )


def library_candidates() -> list[Path | str]:
    """Where libcudnn.so.9 may be: $RNNCONV_CUDNN_LIBRARY alone; else the lib/ folder of the nvidia-cudnn-cu12 or
    -cu13 wheel (nvidia/cudnn/lib, or any nvidia/*/lib), then the system's."""
    if os.environ.get("RNNCONV_CUDNN_LIBRARY"):  # named explicitly: that one or none
        return [Path(os.environ["RNNCONV_CUDNN_LIBRARY"])]
    found: list[Path | str] = []
    for package in ("nvidia.cudnn", "nvidia"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            pattern = "lib/libcudnn.so.9" if package == "nvidia.cudnn" else "*/lib/libcudnn.so.9"
            found += [path for path in sorted(Path(location).glob(pattern)) if path not in found]
    system = ctypes.util.find_library("cudnn")
    found.append(system or "libcudnn.so.9")
    return found


class Cudnn:
    """The loaded library, with every prototype declared and every status checked."""

    def __init__(self, path: Path | str | None = None):
        errors = []
        lib = None
        for candidate in [path] if path else library_candidates():
            try:
                lib = ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
                self.path = candidate
                break
            except OSError as exc:
                errors.append(f"{candidate}: {exc}")
        if lib is None:
            raise BackendMissing(
                "libcudnn.so.9 was not found (pip install nvidia-cudnn-cu12, or -cu13 for CUDA 13, or set "
                "RNNCONV_CUDNN_LIBRARY); tried " + "; ".join(errors)
            )
        self.lib: ctypes.CDLL = lib
        for name, (restype, params) in PROTOTYPES.items():
            try:
                function = getattr(self.lib, name)
            except AttributeError:
                raise BackendMissing(f"{self.path} has no {name}: it is not cuDNN 9") from None
            function.restype = ctype_of(restype)
            function.argtypes = [ctype_of(c_type) for c_type, _ in params]

    @property
    def version(self) -> int:
        return int(self.lib.cudnnGetVersion())

    @property
    def cudart_version(self) -> int:
        """The CUDA runtime this cuDNN was built against (12090 = 12.9)."""
        return int(self.lib.cudnnGetCudartVersion())

    @property
    def version_text(self) -> str:
        v = self.version
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"

    def call(self, name: str, *args: Any) -> None:
        """Call a status-returning function; raise CudnnError naming it unless it succeeded."""
        status = getattr(self.lib, name)(*args)
        if status != STATUS_SUCCESS:
            raise CudnnError(f"{name} failed: {self.explain(status)}", status)

    def explain(self, status: int) -> str:
        text = (self.lib.cudnnGetErrorString(status) or b"").decode(errors="replace")
        buffer = ctypes.create_string_buffer(1024)
        self.lib.cudnnGetLastErrorString(buffer, len(buffer))
        detail = " ".join(buffer.value.decode(errors="replace").split())
        return f"{text} ({status})" + (f": {detail}" if detail else "")
