"""The .eqx of a canonical RNN: one cell's leaves, each as np.save writes it, with where it came from beside it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.dtypes import element_type, encode
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats import _jax, registry
from rnnconv.formats.equinox.reader import LEAF_TYPES, ROLE_OF_FIELD
from rnnconv.formats.equinox.wire import EQUINOX_CLASSES
from rnnconv.formats.registry import WriteOptions, Written
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import find_row
from rnnconv.table.constants import EQUINOX_FIELDS, LSTM


def losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What one Equinox cell cannot hold: several layers, two directions, a simple RNN, a projection."""
    spec = rnn.spec
    found = _jax.projection_losses(rnn, "Equinox")
    if spec.num_layers > 1 or spec.bidirectional:
        found.append(registry.Loss(
            f"Equinox has no multi-layer or bidirectional RNN (an .eqx holds one cell), and this RNN has "
            f"{spec.num_layers} layer{'s' * (spec.num_layers > 1)} and {spec.num_directions} "
            f"direction{'s' * spec.bidirectional}"
        ))  # fmt: skip
    if _jax.family(spec) not in EQUINOX_CLASSES:
        found.append(registry.Loss("Equinox has no simple RNN cell (eqx.nn has LSTMCell and GRUCell)"))
    return found


def leaves_of(rnn: CanonicalRNN, dtype: str) -> list[np.ndarray]:
    spec = rnn.spec
    if refused := losses(rnn):
        raise Unsupported(f"{rnn.name}: {refused[0].term}")
    family = _jax.family(spec)
    if dtype not in LEAF_TYPES.values():
        raise BadInput(
            f"an .eqx leaf is a .npy, which has no {dtype}: choose --dtype {' or '.join(LEAF_TYPES.values())}"
        )
    row = find_row("equinox", EQUINOX_CLASSES[family])
    stored = rnn.stored(row, 0, 0)
    fields = EQUINOX_FIELDS[family] if spec.bias else EQUINOX_FIELDS[family][:2]
    etype = element_type(dtype)
    return [np.ascontiguousarray(encode(stored[ROLE_OF_FIELD[f]], etype)) for f in fields]


def npy_bytes(values: np.ndarray) -> bytes:
    """What np.save writes for an array."""
    out = io.BytesIO()
    np.lib.format.write_array(out, values, allow_pickle=False)
    return out.getvalue()


def module_code(spec: RNNSpec) -> str:
    cls = EQUINOX_CLASSES[_jax.family(spec)]
    bias = "" if spec.bias else ", use_bias=False"
    return f"eqx.nn.{cls}({spec.input_size}, {spec.hidden_size}{bias}, key=jax.random.key(0))"


def write(rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
    rnn = _jax.one_rnn(rnns, "Equinox")
    dtype = _jax.written_dtype(rnn, options.dtype)
    data = b"".join(npy_bytes(leaf) for leaf in leaves_of(rnn, dtype))
    beside = _jax.sidecar(path)
    with atomic_outputs([path, beside], options.force) as (tmp, tmp_beside):
        tmp_beside.write_text(_jax.sidecar_text(rnn, path))
        tmp.write_bytes(data)
    return Written(
        [path, beside],
        usage=f"{_jax.ON_THE_CPU}import equinox as eqx, jax\n"
        f"cell = eqx.tree_deserialise_leaves({registry.literal(path)}, "
        f"{module_code(rnn.spec)})   # {dtype}; one step: "
        + ("h, c = cell(x_t, (h, c))" if rnn.spec.cell == LSTM else "h = cell(x_t, h)")
        + f", x_t ({rnn.spec.input_size},)",
    )
