"""The .eqx of a canonical RNN: one cell's leaves, each as np.save writes it, with where it came from beside it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.dtypes import element_type, encode
from rnnconv.formats import _jax, writing
from rnnconv.formats.base import Written
from rnnconv.formats.equinox.reader import ROLE_OF_FIELD
from rnnconv.formats.equinox.wire import EQUINOX_CLASSES
from rnnconv.table.apply import find_row
from rnnconv.table.constants import EQUINOX_FIELDS, LSTM


def leaves_of(rnn: CanonicalRNN, dtype: str) -> list[np.ndarray]:
    spec = rnn.spec
    family = _jax.family(spec)
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


def write(rnn: CanonicalRNN, path: Path, dtype: str, force: bool) -> Written:
    data = b"".join(npy_bytes(leaf) for leaf in leaves_of(rnn, dtype))
    outputs = _jax.write_recorded(rnn, path, data, force)
    return Written(
        outputs,
        usage=f"{_jax.ON_THE_CPU}import equinox as eqx, jax\n"
        f"cell = eqx.tree_deserialise_leaves({writing.literal(path)}, "
        f"{module_code(rnn.spec)})   # {dtype}; one step: "
        + ("h, c = cell(x_t, (h, c))" if rnn.spec.cell == LSTM else "h = cell(x_t, h)")
        + f", x_t ({rnn.spec.input_size},)",
    )
