"""Flax linen: the variables of `nn.RNN(cell)` modules, as `flax.serialization.to_bytes` writes them (msgpack).

A file is the msgpack of a variables tree `{"params": ...}`; an RNN in it is a cell's params (LSTMCell and
OptimizedLSTMCell: `ii, if, ig, io` kernels (in, H), `hi, hf, hg, ho` kernels (H, H) with biases; GRUCell: `ir, iz,
in` kernels and biases, `hr, hz` kernels, `hn` kernel and bias; SimpleCell: `i` kernel and bias, `h` kernel), under
`cell` (`nn.RNN(cell)`), under `forward_rnn` and `backward_rnn` (`nn.Bidirectional`), and under `layers_0`,
`layers_1`, ... (`nn.Sequential` of them), at any depth: `--layer` names its path. docs/LAYOUTS.md section 12 has
the facts, checked against Flax and PyTorch.

Reading and writing need neither Flax nor JAX (`_msgpack`); `run` builds the same modules in Flax and runs them in
JAX on the CPU, for `verify` and for the `flax` engine (a blob run as Flax linen cells).
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "flax",
        "Flax linen",
        {
            "flax-msgpack": "flax.serialization msgpack of a linen RNN's variables",
            "flax-orbax": "Orbax checkpoint of a linen RNN's variables",
        },
        read_help="X.msgpack from flax.serialization.to_bytes of the variables of nn.RNN(cell), "
        "nn.Bidirectional(nn.RNN(cell), nn.RNN(cell)) or an nn.Sequential of them (LSTMCell, OptimizedLSTMCell, "
        "GRUCell, SimpleCell), or the folder of an Orbax checkpoint of those variables (StandardCheckpointer, "
        "PyTreeCheckpointer, a CheckpointManager's step)",
        write_help="X.msgpack: flax.serialization.from_bytes(variables, data) loads it into the variables of "
        "nn.RNN(nn.LSTMCell(H)) (nn.Bidirectional for two directions, nn.Sequential for several layers), with "
        "X.msgpack.rnnconv.json beside it saying where it came from",
        read_note="Read without Flax or JAX (msgpack decoded by rnnconv, every array's shape and size checked; an "
        "Orbax checkpoint's arrays read by TensorStore, pip install 'rnnconv[orbax]', after rnnconv checked its "
        "folder and metadata); SimpleCell's activation_fn is not stored (--nonlinearity).",
        write_note="Written without Flax or JAX; biases stored summed act as cuDNN's two (a half-precision source's "
        "sums that its type cannot hold are refused: --dtype float32); the printed "
        "line builds the module whose variables it fills.",
        read_suffixes=(".msgpack",),
        write_suffixes=(".msgpack",),
        default_for=(".msgpack",),
        source_options=("bias_split", "nonlinearity"),
        layer="a path in the tree of params (encoder/layers_1)",
        example="params.msgpack",
        examples=("params.msgpack --nonlinearity relu",),
        extra="flax",
    ),
    listed=70,
    sniff_order=45,  # a msgpack map with a params collection; before flax-nnx, whose trees have none
    runtimes=(Runtime("flax", (("jax", "jax"), ("flax", "flax")), "Flax linen modules on the file's variables"),),
    engine=EngineInfo(
        "flax",
        ".msgpack",
        "Flax linen nn.RNN cells in JAX (CPU) running the blob, float32",
        (("jax", "jax"), ("flax", "flax")),
        30,
    ),
    frameworks=("jax", "flax"),
)
