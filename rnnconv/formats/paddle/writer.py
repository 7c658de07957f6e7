"""Writing `.pdparams`: the state_dict of paddle.nn.LSTM / GRU / SimpleRNN as `paddle.save` pickles it, without Paddle.

A dict of numpy arrays, pickled with protocol 4 as `paddle.save` does: first the names `RNNBase` gives its cells'
parameters as PyTorch does (`wire.flat_names`, each the very array of the parameter it falls on, so pickled once),
then each layer's cells' own (`{k}.cell.weight_ih`, `cell_fw` and `cell_bw` both ways), then what rnnconv records of
the RNNs (their sources, a SimpleRNN's activation), which `set_state_dict` passes over as keys no layer has.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.dtypes import element_type, encode
from rnnconv.errors import BadInput
from rnnconv.formats.paddle.wire import BIDIRECTIONAL, PADDLE_CLASSES, flat_names
from rnnconv.formats.sources import SOURCE_KEY, recorded_source, source_records
from rnnconv.formats.writing import each_rnn_lines, literal, stored
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import row_for_mode, tensor_name
from rnnconv.table.constants import LSTM, NONLINEARITIES, NONLINEARITY_KEY, RNN

PROTOCOL = 4  # paddle.save's default


def paddle_class(spec: RNNSpec) -> str:
    return row_for_mode("paddle", spec.mode, reset_after=spec.reset_after)[0].source_class


def state_dict_arrays(rnn: CanonicalRNN, dtype: str, prefix: str = "") -> dict[str, np.ndarray]:
    """The state_dict Paddle's module of this RNN has, by key: its aliases first, then its cells' own, as Paddle
    orders them; an RNN without biases gets zero ones, as Paddle's cells always have them."""
    spec = rnn.spec
    row = row_for_mode("paddle", spec.mode, reset_after=spec.reset_after)[0]
    etype = element_type(dtype)
    own: dict[tuple[int, int, str], np.ndarray] = {}
    for layer in range(spec.num_layers):
        for direction in range(spec.num_directions):
            for role, tensor in stored(rnn, row, layer, direction, bias=True).items():
                own[(layer, direction, role)] = np.ascontiguousarray(encode(np.asarray(tensor.values()), etype))
    aliases = flat_names(spec.num_layers, spec.num_directions, (True, True), spec.proj_size > 0)
    out = {prefix + name: own[place] for name, place in aliases.items()}
    for (layer, direction, role), array in own.items():
        out[prefix + tensor_name(row, role, layer, direction, spec.num_directions)] = array
    return out


def activation_of(spec: RNNSpec) -> str:
    return {mode: name for name, mode in NONLINEARITIES.items()}.get(spec.mode, "tanh")


def write_pdparams(rnns: list[CanonicalRNN], path: Path, dtypes: list[str], force: bool = False) -> None:
    """One RNN's state_dict (keys as Paddle's module gives them), or several under their names as prefixes, each in
    its element type of `dtypes`."""
    if path.suffix != ".pdparams":
        raise BadInput(f"output {path} must end in .pdparams for a PaddlePaddle state_dict")
    prefixes = {f"{rnn.name}." if len(rnns) > 1 else "": rnn for rnn in rnns}
    state: dict[str, np.ndarray | str] = {}
    for (prefix, rnn), dtype in zip(prefixes.items(), dtypes):
        state.update(state_dict_arrays(rnn, dtype, prefix))
    state[SOURCE_KEY] = source_records({prefix: recorded_source(rnn, path) for prefix, rnn in prefixes.items()})
    activations = {prefix: activation_of(rnn.spec) for prefix, rnn in prefixes.items() if rnn.spec.cell == RNN}
    if activations:
        state[NONLINEARITY_KEY] = json.dumps(activations)
    with atomic_outputs([path], force) as (tmp,), open(tmp, "wb") as f:
        pickle.Pickler(f, PROTOCOL).dump(state)


def constructor(spec: RNNSpec) -> str:
    """The paddle.nn module call whose set_state_dict takes what `write_pdparams` writes."""
    args = [f"{spec.input_size}", f"{spec.hidden_size}"]
    if spec.num_layers > 1:
        args.append(f"num_layers={spec.num_layers}")
    if spec.bidirectional:
        args.append(f'direction="{BIDIRECTIONAL}"')
    if spec.cell == RNN and activation_of(spec) != "tanh":
        args.append(f'activation="{activation_of(spec)}"')
    if spec.proj_size:
        args.append(f"proj_size={spec.proj_size}")
    return f"paddle.nn.{PADDLE_CLASSES[spec.cell]}({', '.join(args)})"


def loading_code(rnns: list[CanonicalRNN], path: Path, dtypes: list[str]) -> str:
    """The Python that builds the modules and loads what `write_pdparams` wrote into them (and runs the one)."""
    lines = ["import paddle"]
    if set(dtypes) == {"float64"}:
        lines.append('paddle.set_default_dtype("float64")   # before the module is built')
    lines.append(f"state = paddle.load({literal(path)})")
    if len(rnns) == 1:
        spec = rnns[0].spec
        states = "(h, c)" if spec.cell == LSTM else "h"
        lines.append(f"rnn = {constructor(spec)}; rnn.set_state_dict(state)")
        lines.append(
            f"y, {states} = rnn(x)   # x (batch, time, {spec.input_size}), y (batch, time, "
            f"{spec.num_directions * spec.output_size})"
        )
        return "\n".join(lines)
    return "\n".join(lines + each_rnn_lines(rnns, constructor, "set_state_dict"))
