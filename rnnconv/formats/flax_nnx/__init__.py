"""flax.nnx: the parameters of `nnx.RNN(cell)` modules, as the pure dict of `nnx.state(model, nnx.Param)` packed by
`flax.serialization.msgpack_serialize` (what Flax's guide saves without Orbax).

An RNN in the dict is a cell's params (LSTMCell: `ii, if_, ig, io` kernels (in, H), `hi, hf, hg, ho` kernels (H, H)
with biases; OptimizedLSTMCell: `dense_i` (in, 4H), `dense_h` (H, 4H) with the bias; GRUCell: `dense_i` (in, 3H)
with the bias, `dense_h` (H, 3H) without one; SimpleCell: as GRUCell with one gate), under `cell` (`nnx.RNN`), under
`forward_rnn` and `backward_rnn` (`nnx.Bidirectional`), and under `layers` 0, 1, ... (`nnx.Sequential`), at any
depth. nnx's GRUCell has no b_hn (the bias inside the reset product): a GRU whose b_hn is non-zero is refused.

Reading and writing need neither Flax nor JAX (`_msgpack`); `run` loads the file into the same nnx modules with
`nnx.replace_by_pure_dict` and runs them in JAX on the CPU.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "flax-nnx",
        "flax.nnx",
        {
            "flax-nnx-msgpack": "flax.serialization msgpack of an nnx RNN's parameters (a pure dict)",
            "flax-nnx-orbax": "Orbax checkpoint of an nnx RNN's state",
        },
        read_help="X.nnx.msgpack: flax.serialization.msgpack_serialize(nnx.state(model, nnx.Param).to_pure_dict()) "
        "of nnx.RNN(cell), nnx.Bidirectional or an nnx.Sequential of them (LSTMCell, OptimizedLSTMCell, GRUCell, "
        "SimpleCell), or the folder of an Orbax checkpoint of nnx.state(model) or nnx.split(model)'s state",
        write_help="X.nnx.msgpack: the pure dict of nnx.state(model, nnx.Param) of nnx.RNN(nnx.LSTMCell(I, H)) "
        "(nnx.Bidirectional, nnx.Sequential), for nnx.replace_by_pure_dict, with X.nnx.msgpack.rnnconv.json "
        "beside it",
        read_note="Read without Flax or JAX; activation_fn is not stored (--nonlinearity for a SimpleCell).",
        write_note="Written without Flax or JAX. nnx's GRUCell has no b_hn: a GRU whose b_hn is non-zero is refused.",
        read_suffixes=(".msgpack",),
        write_suffixes=(".msgpack",),
        default_for=(".nnx.msgpack",),
        source_options=("bias_split", "nonlinearity"),
        layer="a path in the tree of params (encoder/layers/0)",
        example="params.nnx.msgpack",
        extra="flax",
    ),
    listed=80,
    sniff_order=46,  # any other msgpack map named .msgpack: after Flax linen's variables
    runtimes=(Runtime("flax-nnx", (("jax", "jax"), ("flax", "flax")), "flax.nnx modules on the file's params"),),
    engine=EngineInfo(
        "flax-nnx",
        ".nnx.msgpack",
        "flax.nnx nnx.RNN cells in JAX (CPU) running the blob, float32",
        (("jax", "jax"), ("flax", "flax")),
        40,
    ),
    frameworks=("jax", "flax"),
)
