"""The IR of a canonical RNN: its sequence ops, each stored tensor assembled as the table's OpenVINO row says, the
.bin streamed, and where the RNN came from in the IR's rt_info."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from rnnconv.canonical import CanonicalRNN, ParamKey
from rnnconv.dtypes import ElementType, element_type, encode
from rnnconv.errors import Unsupported
from rnnconv.formats import registry
from rnnconv.formats.openvino.builder import Layer, Tensor, build
from rnnconv.formats.openvino.wire import (
    OPENVINO_BIDIRECTIONAL,
    OPENVINO_DEFAULT_ACTIVATIONS,
    OPENVINO_ELEMENT_TYPES,
    OPENVINO_FORWARD,
)
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import row_for_mode, stored_shapes
from rnnconv.table.constants import CUDNN_GATES, KIND_OF_ROLE, MATRIX_ROLES, Kind
from rnnconv.table.layouts import MATRIX_ROWS
from rnnconv.table.rows import Row
from rnnconv.version import __version__

WRITES = ("float32", "float16", "bfloat16")  # float16 and bfloat16 weights are decompressed to float32


def openvino_losses(rnn: CanonicalRNN) -> list[registry.Loss]:
    """What OpenVINO's sequence ops cannot compute of `rnn`: an LSTM's projection."""
    if not rnn.spec.proj_size:
        return []
    return [
        registry.Loss(
            f"OpenVINO's LSTMSequence has no projection (h = W_hr h', proj_size={rnn.spec.proj_size}): no OpenVINO "
            f"op holds the LSTM's projection matrix"
        )
    ]


def layers_of(rnn: CanonicalRNN, dtype: str) -> list[Layer]:
    """The sequence ops of a canonical RNN, its tensors stored as the table's OpenVINO row says."""
    spec = rnn.spec
    if losses := openvino_losses(rnn):
        raise Unsupported(f"{rnn.name}: {losses[0].term}")
    row, activation = row_for_mode("openvino", spec.mode)
    attributes = {
        "direction": OPENVINO_BIDIRECTIONAL if spec.bidirectional else OPENVINO_FORWARD,
        "hidden_size": str(spec.hidden_size),
        "activations": ", ".join(_activations_for(row.source_class, activation)),
        "activations_alpha": "",
        "activations_beta": "",
        "clip": "0",
    }
    if "linear_before_reset" in row.when:
        attributes["linear_before_reset"] = str(row.when["linear_before_reset"]).lower()
    etype = OPENVINO_ELEMENT_TYPES[dtype]
    layers = []
    for layer in range(spec.num_layers):
        n_in = spec.layer_input_size(layer)
        shapes = stored_shapes(row, spec.hidden_size, n_in, spec.output_size)
        weights = {}
        for role, shape in shapes.items():
            weights[role] = Tensor(etype, (spec.num_directions, *shape), _parts(rnn, row, layer, role, shape, dtype))
        layers.append(Layer(row.source_class, attributes, weights))
    return layers


def _activations_for(op: str, activation: str) -> list[str]:
    default = list(OPENVINO_DEFAULT_ACTIVATIONS[op])
    return [activation] if len(default) == 1 else default


def _in_file(rnn: CanonicalRNN, key: ParamKey, etype: ElementType) -> FileArray | None:
    """A gate's block still in the source file as `etype`'s words (a state_dict, a weight space holding the gates
    stacked in cuDNN's order): copied file to file, never read."""
    stacked = rnn.stacked(key.layer, key.direction, key.kind)
    if not isinstance(stacked, FileArray) or stacked.dtype != etype.storage or etype.name == "bfloat16":
        return None
    rows = rnn.spec.param_shape(key)[0]
    if stacked.shape != (len(rnn.spec.gates) * rows, *rnn.spec.param_shape(key)[1:]):
        return None
    index = rnn.spec.gates.index(key.gate)
    block: FileArray = stacked[index * rows : (index + 1) * rows]
    return block


def _parts(
    rnn: CanonicalRNN, row: Row, layer: int, role: str, shape: tuple[int, ...], dtype: str
) -> Callable[[], Iterator[np.ndarray | FileArray]]:
    """One role's tensor of one layer, direction by direction, assembled from cuDNN's blocks by the row's layout
    (a matrix stacked by rows is its gates' blocks one after the other: written block by block, from the source
    file itself where it holds them)."""
    spec = rnn.spec
    order, etype = row.gate_order, element_type(dtype)

    def parts() -> Iterator[np.ndarray | FileArray]:
        for d in range(spec.num_directions):
            if role in MATRIX_ROLES and row.matrix == MATRIX_ROWS:  # each gate's block is a run of the tensor
                for gate in order:
                    key = ParamKey(layer, d, KIND_OF_ROLE[role], gate)
                    in_file = _in_file(rnn, key, etype)
                    yield encode(rnn.param(key), etype) if in_file is None else in_file
                continue
            out = {role: np.zeros(shape, np.float32)}
            for gate in CUDNN_GATES[row.cell]:
                if role in MATRIX_ROLES:
                    block = rnn.param(ParamKey(layer, d, KIND_OF_ROLE[role], gate))
                    row.matrix.store(out, role, order, gate, spec.hidden_size, block)
                else:
                    biases = (rnn.param(ParamKey(layer, d, kind, gate)) for kind in (Kind.bW, Kind.bR))
                    row.bias.store(out, order, gate, spec.hidden_size, *biases)
            yield encode(out[role], etype)

    return parts


def write_ir(
    rnns: list[CanonicalRNN], path: Path, dtype: str, force: bool, progress: Callable[[int, int], None] | None
) -> Path:
    rnn = registry.only_rnn(rnns, "an .xml")
    if dtype not in WRITES:
        raise Unsupported(
            f"rnnconv writes OpenVINO IRs of {', '.join(WRITES)} weights (computed in float32 by OpenVINO), "
            f"not {dtype}: {dtype} values would be rounded; say --dtype float32"
        )
    weights = path.with_suffix(".bin")
    registry.weights_free(path, weights, force)
    graph = build(layers_of(rnn, dtype), rnn.spec.input_size, rnn.name)
    with atomic_outputs([path, weights], force) as (xml_tmp, bin_tmp):
        with open(bin_tmp, "wb") as f:
            graph.write_bin(f, progress)
        # where the RNN came from, for `verify model.xml` (its digest was computed meanwhile, on another core)
        graph.rt_info[registry.SOURCE_KEY] = registry.source_record(rnn, path)
        graph.rt_info["rnnconv.version"] = __version__
        xml_tmp.write_text(graph.xml(), encoding="utf-8")
    return weights
