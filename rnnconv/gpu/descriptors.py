"""cuDNN descriptors for an RNN spec: what rnnconv hands cudnnSetRNNDescriptor_v8 and friends.

The same code builds the descriptors for a GPU run and for the CPU-side checks:
cuDNN's set-calls validate their arguments without a GPU, so every configuration
the converters produce is checked by the real library in CI.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.gpu.api import (
    ALGO_STANDARD,
    BIAS_MODE,
    DATA_LAYOUT,
    DATA_TYPE,
    DIRECTION,
    INPUT_MODE,
    MATH,
    PADDED_IO_ENABLED,
    RNN_MODE,
    Cudnn,
)


@dataclass(frozen=True)
class RNNSettings:
    """The arguments of cudnnSetRNNDescriptor_v8 (after rnnDesc, before dropoutDesc)."""

    algo: int
    cellMode: int
    biasMode: int
    dirMode: int
    inputMode: int
    dataType: int
    mathPrec: int
    mathType: int
    inputSize: int
    hiddenSize: int
    projSize: int
    numLayers: int


# Math types as PyTorch's cuDNN path chooses them with TF32 off: FMA keeps float32 strict (no TF32),
# tensor cores for half data; float64 and bfloat16 take cuDNN's default.
MATH_FOR = {
    "float32": MATH["fma"],
    "float16": MATH["tensor_op"],
    "float64": MATH["default"],
    "bfloat16": MATH["default"],
}


def rnn_settings(spec: RNNSpec, math_type: int | None = None) -> RNNSettings:
    """Strict precision: float math for half and bfloat16 data, double for double; `math_type` overrides
    the math type (the battery's retries for bfloat16)."""
    return RNNSettings(
        algo=ALGO_STANDARD,
        cellMode=RNN_MODE[spec.mode],
        biasMode=BIAS_MODE["double"],
        dirMode=DIRECTION[spec.bidirectional],
        inputMode=INPUT_MODE["linear"],
        dataType=DATA_TYPE[spec.dtype],
        mathPrec=DATA_TYPE["float64" if spec.dtype == "float64" else "float32"],
        mathType=MATH_FOR[spec.dtype] if math_type is None else math_type,
        inputSize=spec.input_size,
        hiddenSize=spec.hidden_size,
        projSize=spec.output_size,  # cuDNN wants hiddenSize when there is no projection (0 is BAD_PARAM)
        numLayers=spec.num_layers,
    )


# cudnnSetRNNDataDescriptor reads its padding fill as one element of the data type: 8 zero bytes are 0.0
# as a double, a float, a half and a bfloat16 alike, so one buffer serves every type.
ZERO_FILL_BYTES = 8


class Descriptors:
    """Every descriptor of one forward run (RNN, dropout, x/y data, h/c tensors), destroyed together."""

    def __init__(
        self,
        cudnn: Cudnn,
        spec: RNNSpec,
        batch: int,
        steps: int,
        lengths: np.ndarray,
        handle: Any = None,
        math_type: int | None = None,
    ):
        self.cudnn = cudnn
        self.spec = spec
        self._created: list[tuple[str, ctypes.c_void_p]] = []
        try:
            self.dropout = self._create("cudnnCreateDropoutDescriptor", "cudnnDestroyDropoutDescriptor")
            if handle is not None:  # dropout 0: no state memory needed
                cudnn.call("cudnnSetDropoutDescriptor", self.dropout, handle, 0.0, None, 0, 0)
            self.rnn = self._create("cudnnCreateRNNDescriptor", "cudnnDestroyRNNDescriptor")
            self.settings = rnn_settings(spec, math_type)
            cudnn.call(
                "cudnnSetRNNDescriptor_v8", self.rnn, *asdict(self.settings).values(), self.dropout, PADDED_IO_ENABLED
            )
            self.lengths = (ctypes.c_int * batch)(*[int(v) for v in lengths])
            self.fill = ctypes.create_string_buffer(ZERO_FILL_BYTES)  # padded outputs are zero, as the reference
            self.x = self._data(steps, batch, spec.input_size)
            self.y = self._data(steps, batch, spec.num_directions * spec.output_size)
            pseudo = spec.num_layers * spec.num_directions
            self.h = self._tensor([pseudo, batch, spec.output_size])
            self.c = self._tensor([pseudo, batch, spec.hidden_size])
        except BaseException:
            self.close()
            raise

    def _create(self, create: str, destroy: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.cudnn.call(create, ctypes.byref(handle))
        self._created.append((destroy, handle))
        return handle

    def _data(self, steps: int, batch: int, size: int) -> ctypes.c_void_p:
        desc = self._create("cudnnCreateRNNDataDescriptor", "cudnnDestroyRNNDataDescriptor")
        self.cudnn.call(
            "cudnnSetRNNDataDescriptor",
            desc,
            DATA_TYPE[self.spec.dtype],
            DATA_LAYOUT["seq_major_unpacked"],
            steps,
            batch,
            size,
            self.lengths,
            ctypes.cast(self.fill, ctypes.c_void_p),
        )
        return desc

    def _tensor(self, dims: list[int]) -> ctypes.c_void_p:
        desc = self._create("cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor")
        strides = [dims[1] * dims[2], dims[2], 1]
        self.cudnn.call(
            "cudnnSetTensorNdDescriptor",
            desc,
            DATA_TYPE[self.spec.dtype],
            3,
            (ctypes.c_int * 3)(*dims),
            (ctypes.c_int * 3)(*strides),
        )
        return desc

    def new_tensor_descriptor(self) -> ctypes.c_void_p:
        """An empty tensor descriptor (for cudnnGetRNNWeightParams to fill), destroyed with the rest."""
        return self._create("cudnnCreateTensorDescriptor", "cudnnDestroyTensorDescriptor")

    def close(self) -> None:
        while self._created:
            destroy, handle = self._created.pop()
            getattr(self.cudnn.lib, destroy)(handle)  # best effort: nothing to report while unwinding

    def __enter__(self) -> Descriptors:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def tensor_dims(cudnn: Cudnn, desc: ctypes.c_void_p) -> tuple[list[int], list[int]]:
    """The dimensions and strides cuDNN filled into a tensor descriptor."""
    data_type, nb_dims = ctypes.c_int(), ctypes.c_int()
    dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    cudnn.call("cudnnGetTensorNdDescriptor", desc, 8, ctypes.byref(data_type), ctypes.byref(nb_dims), dims, strides)
    return list(dims[: nb_dims.value]), list(strides[: nb_dims.value])
