"""PaddlePaddle: `paddle.save(model.state_dict())` of `paddle.nn.LSTM`, `GRU` and `SimpleRNN` (`.pdparams`).

A `.pdparams` is a plain pickle of a dict of numpy arrays: read by rnnconv's inert unpickler (`formats/_pickled.py`),
never by `paddle.load` (which unpickles whatever the file names). Each layer's cells keep their parameters under
`{layer}.cell.*` (`cell_fw`, `cell_bw` both ways): those are what Paddle computes with; the same weights again under
PyTorch's names (`weight_ih_l0`) are aliases that `set_state_dict` loads first and the cells' keys overwrite.
Written: both sets of keys, as Paddle's own module names them. `run` (verify) and the `paddle` engine build the
module in Paddle on the CPU and give it the weights rnnconv read.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "paddle",
        "PaddlePaddle",
        {"paddle": "paddle.save state_dict (.pdparams)"},
        read_help="a .pdparams from paddle.save(model.state_dict()) of paddle.nn.LSTM, GRU or SimpleRNN (any "
        "key prefix)",
        write_help="model.pdparams: what paddle.load + set_state_dict take for paddle.nn.LSTM(I, H) (GRU, SimpleRNN)",
        read_note="Read without Paddle by rnnconv's inert unpickler (numpy arrays and plain containers only, "
        "nothing the file names is run); RNNs are found by their cells' parameter names ({k}.cell.*), "
        "which are what Paddle computes with.",
        write_note="The state_dict of paddle.nn.LSTM / GRU / SimpleRNN, both key sets Paddle's module has; the "
        "module call whose set_state_dict takes it is printed. The source is recorded beside the weights.",
        read_suffixes=(".pdparams",),
        write_suffixes=(".pdparams",),
        default_for=(".pdparams",),
        source_options=("nonlinearity",),
        layer="a key prefix (encoder.lstm)",
        example="model.pdparams",
        examples=("seq2seq.pdparams --layer encoder.lstm", "rnn.pdparams --nonlinearity relu"),
        extra="paddle",
        holds=Holds(dtypes=("float32", "float64")),  # Paddle's CPU RNN kernels run float32 and float64 only
    ),
    listed=125,
    sniff_order=50,  # a plain pickle: after torch.save's legacy checkpoints, which are pickles too
    runtimes=(Runtime("paddle", (("paddlepaddle", "paddle"),), "PaddlePaddle state_dicts in paddle.nn modules"),),
    engine=EngineInfo(
        "paddle",
        ".pdparams",
        "PaddlePaddle's paddle.nn.LSTM/GRU/SimpleRNN (CPU) running the blob, float32",
        (("paddlepaddle", "paddle"),),
        95,
    ),
    frameworks=("paddle",),
)
