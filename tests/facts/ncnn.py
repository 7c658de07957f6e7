"""ncnn's test facts: a written .param + .bin in ncnn's Net."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Outputs, Runtime, Way


def ncnn_run(param, spec: RNNSpec, x, h0, c0, feed_states: bool = True) -> Outputs:
    """The written model in ncnn's Net, as the README says: each batch item alone, in0 (T, I), h0_k / c0_k
    (directions, H) fed per layer; out0, hn_k, cn_k extracted. Sequence-major results, as cuDNN's."""
    ncnn = pytest.importorskip("ncnn")
    param = Path(param)
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    assert net.load_param(str(param)) == 0 and net.load_model(str(param.with_suffix(".bin"))) == 0
    dirs, layers = spec.num_directions, spec.num_layers
    ys, hs, cs = [], [], []
    for b in range(x.shape[1]):
        ex = net.create_extractor()
        keep = [np.ascontiguousarray(x[:, b], np.float32)]
        ex.input("in0", ncnn.Mat(keep[-1]))
        for k in range(layers if feed_states else 0):
            keep.append(np.ascontiguousarray(h0[k * dirs : (k + 1) * dirs, b], np.float32))
            ex.input(f"h0_{k}", ncnn.Mat(keep[-1]))
            if spec.mode == "lstm":
                keep.append(np.ascontiguousarray(c0[k * dirs : (k + 1) * dirs, b], np.float32))
                ex.input(f"c0_{k}", ncnn.Mat(keep[-1]))
        ys.append(np.array(ex.extract("out0")[1]))
        hs.append(np.concatenate([np.array(ex.extract(f"hn_{k}")[1]) for k in range(layers)]))
        if spec.mode == "lstm":
            cs.append(np.concatenate([np.array(ex.extract(f"cn_{k}")[1]) for k in range(layers)]))
    return np.stack(ys, 1), np.stack(hs, 1), np.stack(cs, 1) if cs else None


def _ncnn(path, spec, x, h0, c0, lengths=None) -> Outputs:
    return ncnn_run(path, spec, x, h0, c0)


RUNTIME = Runtime((".param", ".bin", ".param.rnnconv.json"), 1e-5, (Way("ncnn's Net", _ncnn),))
