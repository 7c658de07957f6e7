"""The IR of a canonical RNN: its sequence ops, each stored tensor made by the table's writing as the OpenVINO row
lays it out, the .bin streamed, and where the RNN came from in the IR's rt_info. With --quantize, each layer's W and
R int8, symmetric, one scale per output row of each direction ((directions, rows, 1)), decompressed before the op as
OpenVINO's weight compression writes it (an i8 Const, a Convert to f32, a Multiply by an f32 Const of the scales);
B stays f32. The CPU plugin computes the op in f32 with those products (`wire.OPENVINO_KERNEL_INPUTS`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from rnnconv.core.canonical import CanonicalRNN
from rnnconv.core.dtypes import element_type
from rnnconv.formats import sources, writing
from rnnconv.formats._quantized import Quantization, largest_rounding, quantized_note, symmetric, written_record
from rnnconv.formats.openvino.builder import Layer, Parts, QuantizedTensor, Tensor, build, constant
from rnnconv.formats.openvino.wire import (
    COMPUTE_TYPE,
    OPENVINO_BIDIRECTIONAL,
    OPENVINO_DEFAULT_ACTIVATIONS,
    OPENVINO_ELEMENT_TYPES,
    OPENVINO_FORWARD,
    QUANTIZED_ETYPES,
)
from rnnconv.formats.settings import WriteOptions
from rnnconv.formats.writing import stored
from rnnconv.safeio.outputs import atomic_outputs
from rnnconv.table.apply import row_for_mode, stored_shapes
from rnnconv.table.constants import INPUT_MATRIX, RECURRENT_MATRIX
from rnnconv.table.rows import Row
from rnnconv.version import __version__

MATRICES = (INPUT_MATRIX, RECURRENT_MATRIX)  # what --quantize quantizes: the op's W and R


def layers_of(
    rnn: CanonicalRNN, dtype: str, quantize: str | None = None
) -> tuple[list[Layer], list[tuple[str, Quantization]], float]:
    """The sequence ops of a canonical RNN, its tensors stored as the table's OpenVINO row says; with `quantize`,
    its W and R quantized, each quantized tensor's scheme (per direction), and the largest rounding of a weight."""
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
    held: list[tuple[str, Quantization]] = []
    rounded = 0.0
    for layer in range(spec.num_layers):
        n_in = spec.layer_input_size(layer)
        shapes = stored_shapes(row, spec.hidden_size, n_in, spec.output_size)
        weights: dict[str, Tensor | QuantizedTensor] = {}
        for role, shape in shapes.items():
            if quantize is not None and role in MATRICES:
                weights[role], rounding = _quantized(rnn, row, layer, role, quantize, held)
                rounded = max(rounded, rounding)
            else:
                weights[role] = Tensor(etype, (spec.num_directions, *shape), _parts(rnn, row, layer, role, dtype))
        layers.append(Layer(row.source_class, attributes, weights))
    return layers, held, rounded


def _quantized(
    rnn: CanonicalRNN, row: Row, layer: int, role: str, quantize: str, held: list[tuple[str, Quantization]]
) -> tuple[QuantizedTensor, float]:
    """One layer's W or R quantized, a scale per direction and output row; the tensor, and its largest rounding
    (each direction's scheme added to `held`, named as the reader names it)."""
    directions = range(rnn.spec.num_directions)
    values = np.stack([stored(rnn, row, layer, d, np.float32, True)[role].assembled() for d in directions])
    q, scales = symmetric(values, (0, 1), quantize)
    name = f"layer{layer}/{row.source_class}/{role}"  # the op's name in the graph `build` makes, and the role
    for d in directions:
        each = tuple(scales[d].ravel().tolist())
        held.append((f"{name}[{d}]" if len(directions) > 1 else name, Quantization(each, (0,) * len(each), 1)))
    tensor = QuantizedTensor(constant(q, QUANTIZED_ETYPES[quantize]), constant(scales, COMPUTE_TYPE))
    return tensor, largest_rounding(values, q, scales)


def _activations_for(op: str, activation: str) -> list[str]:
    default = list(OPENVINO_DEFAULT_ACTIVATIONS[op])
    return [activation] if len(default) == 1 else default


def _parts(rnn: CanonicalRNN, row: Row, layer: int, role: str, dtype: str) -> Parts:
    """One role's tensor of one layer, direction after direction, as the table's writing gives it (blocks copied
    from the source file where they lie there; biases always, zeros where the RNN has none); what is assembled is
    assembled in float32, as OpenVINO computes."""
    directions, etype = range(rnn.spec.num_directions), element_type(dtype)
    return lambda: (run for d in directions for run in stored(rnn, row, layer, d, np.float32, True)[role].words(etype))


def write_ir(rnns: list[CanonicalRNN], path: Path, dtype: str, options: WriteOptions) -> tuple[Path, list[str]]:
    """The IR and its .bin (returned), and the warnings its writing gives (what --quantize wrote)."""
    rnn = writing.only_rnn(rnns, "an .xml")
    weights = path.with_suffix(".bin")
    writing.weights_free(path, weights, options.force)
    layers, held, rounded = layers_of(rnn, dtype, options.quantize)
    warnings = []
    if options.quantize is not None:  # the record says what was written: verify holds the file to it
        quantized = written_record(rnn, held, options.quantize, rounded, inputs_quantized=False)
        rnn = dataclasses.replace(rnn, source=rnn.source.model_copy(update={"quantized": quantized}))
        warnings.append(quantized_note(rnn.name, quantized, "OpenVINO IR"))
    graph = build(layers, rnn.spec.input_size, rnn.name)
    with atomic_outputs([path, weights], options.force) as (xml_tmp, bin_tmp):
        with open(bin_tmp, "wb") as f:
            graph.write_bin(f, options.progress)
        # where the RNN came from, for `verify model.xml` (its digest was computed meanwhile, on another core)
        graph.rt_info[sources.SOURCE_KEY] = sources.source_record(rnn, path)
        graph.rt_info["rnnconv.version"] = __version__
        xml_tmp.write_text(graph.xml(), encoding="utf-8")
    return weights, warnings
