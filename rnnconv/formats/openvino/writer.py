"""The IR of a canonical RNN: its sequence ops, each stored tensor made by the table's writing as the OpenVINO row
lays it out, the .bin streamed, and where the RNN came from in the IR's rt_info."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.dtypes import element_type
from rnnconv.formats import sources, writing
from rnnconv.formats.openvino.builder import Layer, Parts, Tensor, build
from rnnconv.formats.openvino.wire import (
    OPENVINO_BIDIRECTIONAL,
    OPENVINO_DEFAULT_ACTIVATIONS,
    OPENVINO_ELEMENT_TYPES,
    OPENVINO_FORWARD,
)
from rnnconv.formats.writing import stored
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import row_for_mode, stored_shapes
from rnnconv.table.rows import Row
from rnnconv.version import __version__


def layers_of(rnn: CanonicalRNN, dtype: str) -> list[Layer]:
    """The sequence ops of a canonical RNN, its tensors stored as the table's OpenVINO row says."""
    spec = rnn.spec
    row, activation = row_for_mode("openvino", spec.mode, reset_after=spec.reset_after)
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
            weights[role] = Tensor(etype, (spec.num_directions, *shape), _parts(rnn, row, layer, role, dtype))
        layers.append(Layer(row.source_class, attributes, weights))
    return layers


def _activations_for(op: str, activation: str) -> list[str]:
    default = list(OPENVINO_DEFAULT_ACTIVATIONS[op])
    return [activation] if len(default) == 1 else default


def _parts(rnn: CanonicalRNN, row: Row, layer: int, role: str, dtype: str) -> Parts:
    """One role's tensor of one layer, direction after direction, as the table's writing gives it (blocks copied
    from the source file where they lie there; biases always, zeros where the RNN has none); what is assembled is
    assembled in float32, as OpenVINO computes."""
    directions, etype = range(rnn.spec.num_directions), element_type(dtype)
    return lambda: (run for d in directions for run in stored(rnn, row, layer, d, np.float32, True)[role].words(etype))


def write_ir(
    rnns: list[CanonicalRNN], path: Path, dtype: str, force: bool, progress: Callable[[int, int], None] | None
) -> Path:
    rnn = writing.only_rnn(rnns, "an .xml")
    weights = path.with_suffix(".bin")
    writing.weights_free(path, weights, force)
    graph = build(layers_of(rnn, dtype), rnn.spec.input_size, rnn.name)
    with atomic_outputs([path, weights], force) as (xml_tmp, bin_tmp):
        with open(bin_tmp, "wb") as f:
            graph.write_bin(f, progress)
        # where the RNN came from, for `verify model.xml` (its digest was computed meanwhile, on another core)
        graph.rt_info[sources.SOURCE_KEY] = sources.source_record(rnn, path)
        graph.rt_info["rnnconv.version"] = __version__
        xml_tmp.write_text(graph.xml(), encoding="utf-8")
    return weights
