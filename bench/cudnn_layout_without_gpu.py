"""Ask the real libcudnn where it puts every tensor, on a machine without a GPU.

    python bench/cudnn_layout_without_gpu.py

cudnnGetRNNWeightSpaceSize and cudnnGetRNNWeightParams only compute sizes and
addresses, but they take a cudnnHandle_t, which cudnnCreate cannot make without a
GPU. This experiment hands them a zero-filled stand-in handle instead. cuDNN does
not promise that this works (it is undefined behaviour that happened to work with
cuDNN 9.28 on x86-64), so it is evidence, not proof, and no test relies on it:
`rnnconv gpu-battery` on a real GPU is the authority. It prints, for a range of
modes, sizes, layers, directions, projections and dtypes, whether cuDNN's answer
equals rnnconv's layout table (layout cudnn-flat v1, projection after the
recurrent matrices).
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.dtypes import element_type
from rnnconv.core.weightspace import region_map, weight_space_elements
from rnnconv.gpu.api import Cudnn
from rnnconv.gpu.backend import LayoutMismatch, check_layout
from rnnconv.gpu.descriptors import Descriptors


def main() -> None:
    cudnn = Cudnn()
    stand_in = ctypes.create_string_buffer(1 << 20)
    handle = ctypes.c_void_p(ctypes.addressof(stand_in))
    checked = differ = 0
    for mode, (n_in, hidden, proj), layers, bidirectional, dtype in itertools.product(
        ("lstm", "gru", "rnn_tanh", "rnn_relu"),
        ((37, 1000, 129), (1, 1, 0), (7, 3, 1), (513, 255, 0), (64, 2048, 512)),
        (1, 3),
        (False, True),
        ("float32", "float16", "bfloat16", "float64"),
    ):
        spec = RNNSpec(mode, n_in, hidden, layers, bidirectional, proj if mode == "lstm" else 0, dtype)
        with Descriptors(cudnn, spec, 2, 3, np.array([3, 1])) as desc:
            checked += 1
            size = weight_space_elements(spec) * element_type(dtype).itemsize
            try:
                check_layout(cudnn, handle, desc, spec, region_map(spec), 0x7000_0000_0000, size)
            except LayoutMismatch as exc:
                differ += 1
                print(f"DIFFERS {spec.describe()}: {exc}")
    print(f"cuDNN {cudnn.version_text}: {checked} configurations, {differ} differ from rnnconv's layout table")


if __name__ == "__main__":
    main()
