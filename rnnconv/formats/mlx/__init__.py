"""MLX: the weights of `mlx.nn.LSTM`, `mlx.nn.GRU` and `mlx.nn.RNN`, as `Module.save_weights` writes them.

A file is a `.safetensors` of parameters named as MLX's modules name them (`Wx`, `Wh`, `bias`; the GRU's `b` and
`bhn`; the RNN's `Wxh`, `Whh`, `bias`), under any prefix (`encoder.lstm.Wx`). MLX has one class per cell and one
layer and direction per module; rnnconv writes several layers as a list `layers` of them (`layers.0.Wx`, ...,
each feeding the next) and two directions as pairs (`layers.0.0.Wx` forward, `layers.0.1.Wx` backward, run on the
sequence reversed), the `Stack` of docs/formats/mlx.md, and reads such modules back as one RNN. MLX has no LSTM
projection: it is refused. MLX before 0.18 stored `Wx` and `Wh` transposed ((in, G*H)); such a file is refused.

Reading and writing need no MLX; `run` (verify) and the `mlx` engine run the modules in MLX on the CPU.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "mlx",
        "MLX",
        {
            "mlx-safetensors": "MLX weights (.safetensors) of mlx.nn.LSTM / GRU / RNN",
            "mlx-npz": "MLX weights (.npz) of mlx.nn.LSTM / GRU / RNN",
        },
        read_help="an MLX .safetensors or .npz of mlx.nn.LSTM, GRU or RNN weights (Module.save_weights; any "
        "key prefix)",
        write_help="model.mlx.safetensors (or any .safetensors with --to mlx): what Module.load_weights takes "
        "for mlx.nn.LSTM(I, H) (GRU, RNN); several layers as layers.{k}.<name>",
        read_note="Read without MLX, from the parameter names and shapes (MLX 0.18 or later: earlier versions "
        "stored Wx and Wh transposed and are refused); layers.{k}. (and layers.{k}.{d}.) modules of one "
        "class, each feeding the next, are one RNN.",
        write_note="One layer: exactly the parameters of mlx.nn.LSTM(I, H) (GRU, RNN). Several: a list "
        "`layers` of them, each feeding the next; two directions: [forward, backward] pairs (docs/formats/mlx.md's "
        "Stack). MLX has no LSTM projection: it is refused. The source is recorded in the metadata.",
        read_suffixes=(".safetensors", ".npz"),
        write_suffixes=(".safetensors",),
        default_for=(".mlx.safetensors",),
        source_options=("nonlinearity",),
        layer="a module prefix (encoder.layers)",
        example="model.safetensors",
        examples=("mlx.safetensors --layer encoder.layers",),
        extra="mlx",
        holds=Holds(dtypes=("float32", "float16", "bfloat16")),  # MLX loads float64 weights as float32
    ),
    listed=110,
    sniff_order=30,  # a safetensors of MLX's parameter names: after rnnconv's own, before PyTorch's state_dicts
    runtimes=(Runtime("mlx", (("mlx", "mlx.core"),), "MLX files' own modules"),),
    engine=EngineInfo(
        "mlx", ".mlx.safetensors", "MLX (CPU) running the blob as mlx.nn modules, float32", (("mlx", "mlx.core"),), 70
    ),
    frameworks=("mlx",),
)
