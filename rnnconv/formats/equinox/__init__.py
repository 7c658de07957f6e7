"""Equinox: one `eqx.nn.LSTMCell` or `eqx.nn.GRUCell`, as `eqx.tree_serialise_leaves` writes it.

The file is the cell's array leaves, in its fields' order, each as `np.save` writes it (a .npy: magic, header,
data), one after another: LSTMCell `weight_ih` (4H, in), `weight_hh` (4H, H), `bias` (4H) = bW + bR, gates i, f,
g, o; GRUCell `weight_ih` (3H, in), `weight_hh` (3H, H), `bias` (3H) = bW + bR of r and z and b_in, `bias_n` (H) =
b_hn; `use_bias=False` leaves the biases out. The file holds no tree: what the leaves are is told by their
count and shapes, so a file holds one cell (Equinox has no multi-layer or bidirectional RNN module).

Reading and writing need neither Equinox nor JAX (headers parsed, never unpickled); `run` loads the file with
`eqx.tree_deserialise_leaves` into the cell it describes and steps it in JAX on the CPU.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Holds, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "equinox",
        "Equinox",
        {"equinox": "equinox.tree_serialise_leaves of an eqx.nn.LSTMCell or GRUCell"},
        read_help="X.eqx from eqx.tree_serialise_leaves of one eqx.nn.LSTMCell or eqx.nn.GRUCell",
        write_help="X.eqx: eqx.tree_deserialise_leaves(X.eqx, eqx.nn.LSTMCell(I, H, key=...)) loads it, with "
        "X.eqx.rnnconv.json beside it",
        read_note="Read without Equinox or JAX (each leaf's .npy header parsed, never unpickled). The file holds "
        "leaves without their tree: one cell (Equinox has no multi-layer or bidirectional RNN).",
        write_note="Written without Equinox or JAX; one layer, one direction.",
        read_suffixes=(".eqx",),
        write_suffixes=(".eqx",),
        default_for=(".eqx",),
        source_options=("bias_split",),
        example="cell.eqx",
        extra="equinox",
        # an .eqx holds one cell, its leaves each a .npy (which has no bfloat16)
        holds=Holds(dtypes=("float32", "float64", "float16"), layers=False, directions=False),
    ),
    listed=90,
    runtimes=(Runtime("equinox", (("jax", "jax"), ("equinox", "equinox")), "Equinox cells, one step at a time"),),
    engine=EngineInfo(
        "equinox",
        ".eqx",
        "an Equinox cell in JAX (CPU) running the blob, float32",
        (("jax", "jax"), ("equinox", "equinox")),
        50,
    ),
    frameworks=("jax", "equinox"),
)
