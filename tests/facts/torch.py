"""PyTorch's test facts: a written state_dict loaded (strictly) into the nn.LSTM / GRU / RNN it is for, and the modules
the grids' sources are."""

from __future__ import annotations

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Outputs, Runtime, Way


def torch_module_for(spec: RNNSpec):
    torch = pytest.importorskip("torch")
    kwargs = {"num_layers": spec.num_layers, "bidirectional": spec.bidirectional, "bias": spec.bias}
    if spec.proj_size:
        kwargs["proj_size"] = spec.proj_size
    if spec.mode.startswith("rnn"):
        kwargs["nonlinearity"] = spec.mode[4:]
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(spec.mode, torch.nn.RNN)
    return cls(spec.input_size, spec.hidden_size, **kwargs)


def torch_outputs(module, spec: RNNSpec, x, h0, c0, lengths=None) -> Outputs:
    """The module's outputs from given states (numpy in, numpy out), packed sequences where lengths are given."""
    torch = pytest.importorskip("torch")
    x, h0 = torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(h0, np.float32))
    state = (h0, torch.from_numpy(np.asarray(c0, np.float32))) if spec.mode == "lstm" else h0
    if lengths is not None:
        x = torch.nn.utils.rnn.pack_padded_sequence(x, torch.as_tensor(lengths), enforce_sorted=False)
    with torch.no_grad():
        y, final = module(x, state)
    if lengths is not None:
        y = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=len(x.batch_sizes))[0]
    if spec.mode == "lstm":
        return y.numpy(), final[0].numpy(), final[1].numpy()
    return y.numpy(), final.numpy(), None


def _torch(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """The state_dict loaded (strictly) into the nn.LSTM / GRU / RNN it is for."""
    torch = pytest.importorskip("torch")
    module = torch_module_for(spec)
    module.load_state_dict(torch.load(path, weights_only=True))
    return torch_outputs(module, spec, x, h0, c0, lengths)


RUNTIME = Runtime((".pt",), 2e-5, (Way("torch.nn", _torch, True),))

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
SEEDS = [
    "torch/seq2seq.pt",
    "torch/lstm_proj.pt",
    "torch/cells.pt",
    "torch/lstm_legacy.pt",
    "torch/rnn_relu.safetensors",
    "torch/dataparallel_gru.pth",
    "torch/gru_bf16.pt",
    "torch_kept/seq2seq_script.pt",
    "torch_kept/seq2seq_trace.pt",
    "torch_kept/kept_module.pt",
    "torch_export/lstm_states.pt2",
    "torch_export/gru_head.pt2",
    "torch_export/rnn_relu.pt2",
    "torch_quantized/lstm_qint8.pt",
    "torch_quantized/gru_qint8_per_channel.pt",
    "torch_quantized/lstm_fp16.pt",
    "torch_quantized/lstm_float.pt",
    "torch_quantized/gru_float.pt",
]
