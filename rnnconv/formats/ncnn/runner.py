"""Recurrent layers run in ncnn (CPU, float32), one sequence at a time: a blob's, or a file's own as stored."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.compare import Inputs, Outputs
from rnnconv.errors import BackendMissing, BadInput
from rnnconv.formats.ncnn.reader import Layer, NcnnFile
from rnnconv.formats.ncnn.wire import IN, NARROW_OPTIONS, NCNN_PARAMS, OUT
from rnnconv.formats.ncnn.writer import LayerBlobs, compose
from rnnconv.table.constants import LSTM


def require_ncnn() -> Any:
    try:
        import ncnn
    except ImportError:
        raise BackendMissing(
            "running ncnn needs its Python wheel, which is not installed (pip install 'rnnconv[ncnn]')"
        ) from None
    return ncnn


def source_layers(file: NcnnFile, chain: list[Layer]) -> list[LayerBlobs]:
    """The chain's layers as the file holds them: their params and their weight blobs' bytes, untouched."""
    out = []
    with open(file.weights, "rb") as f:
        for layer in chain:
            blobs = []
            for blob in layer.blobs:
                f.seek(blob.offset)
                blobs.append(f.read(blob.size))
            params = {k: v for k, v in layer.params.items() if k in NCNN_PARAMS.values() and isinstance(v, int)}
            out.append(LayerBlobs(layer.type, params, blobs, layer.cell, layer.output, layer.hidden, layer.directions))
    return out


def run_model(layers: list[LayerBlobs], inputs: Inputs) -> Outputs:
    """The layers in ncnn (CPU, float32), one batch item at a time (each within its length); sequence-major
    outputs as cuDNN's, zeros past each sequence's length."""
    ncnn = require_ncnn()
    text, data = compose(layers)
    x = np.asarray(inputs["x"], np.float32)
    steps, batch = x.shape[:2]
    lengths = inputs.get("lengths")
    dirs = layers[0].directions
    y = np.zeros((steps, batch, dirs * layers[-1].output), np.float32)
    h_n = np.zeros((len(layers) * dirs, batch, layers[0].output), np.float32)
    lstm = layers[0].cell == LSTM
    c_n = np.zeros((len(layers) * dirs, batch, layers[0].hidden), np.float32) if lstm else None
    with tempfile.TemporaryDirectory(prefix="rnnconv-ncnn-") as folder:
        param, weights = Path(folder) / "model.param", Path(folder) / "model.bin"
        param.write_text(text)
        weights.write_bytes(data)
        net = ncnn.Net()
        net.opt.use_vulkan_compute = False
        for option in NARROW_OPTIONS:
            setattr(net.opt, option, False)
        if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
            raise BadInput("ncnn cannot load these layers")
        for b in range(batch):
            n = steps if lengths is None else int(lengths[b])
            ex = net.create_extractor()
            # ncnn.Mat wraps the array's memory without a copy: the arrays live as long as the extractor
            fed = {IN: np.ascontiguousarray(x[:n, b])}
            for k in range(len(layers)):
                pseudo = slice(k * dirs, (k + 1) * dirs)
                fed[f"h0_{k}"] = np.ascontiguousarray(inputs["h0"][pseudo, b], np.float32)
                if lstm:
                    fed[f"c0_{k}"] = np.ascontiguousarray(inputs["c0"][pseudo, b], np.float32)
            mats = {name: ncnn.Mat(array) for name, array in fed.items()}
            for name, mat in mats.items():
                ex.input(name, mat)
            y[:n, b] = _extract(ex, OUT)
            for k in range(len(layers)):
                h_n[k * dirs : (k + 1) * dirs, b] = _extract(ex, f"hn_{k}")
                if c_n is not None:
                    c_n[k * dirs : (k + 1) * dirs, b] = _extract(ex, f"cn_{k}")
    return {"y": y, "h_n": h_n, "c_n": c_n}


def _extract(ex: Any, name: str) -> np.ndarray:
    code, mat = ex.extract(name)
    if code != 0:
        raise BadInput(f"ncnn could not compute {name} (error {code})")
    return np.array(mat)
