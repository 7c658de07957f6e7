"""An RNN of a .tflite in canonical form: each op checked for what cuDNN cannot compute, its stored tensors mapped
through the table's TFLite rows."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Literal

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.compare import STATE_SCALE, make_inputs
from rnnconv.core.contracts import Provenance, RecordedLoss, RNNSizes, RoundedInput
from rnnconv.core.reference import forward
from rnnconv.errors import BadInput, RnnconvError, Unsupported, listing
from rnnconv.formats import sources
from rnnconv.formats._graph import Chain
from rnnconv.formats._quantized import (
    QUANTIZED_RANGES,
    Quantization,
    exact_dtype,
    note,
    record,
    rounding_dropped,
)
from rnnconv.formats.holding import CLIP_PROBE_SCALE, CLIP_PROBE_STEPS, PROBE_BATCH, PROBE_SEED, PROBE_STEPS
from rnnconv.formats.reading import Found, StoredCell, read, settle
from rnnconv.formats.tflite.loops import loop_canonical
from rnnconv.formats.tflite.model import (
    FLOAT_TYPES,
    QUANTIZED_TYPES,
    Layer,
    Op,
    TfliteFile,
    cell_of_op,
    input_of,
    op_options,
    refused_quantized,
)
from rnnconv.formats.tflite.wire import (
    ACTIVATION_NAMES,
    FORMAT,
    INTEGER_LSTM_INTERMEDIATES,
    OP_INPUTS,
    TFLITE_CELL_OPS,
    TFLITE_STATE_INPUTS,
    UNSET,
)
from rnnconv.table.apply import find_row
from rnnconv.table.constants import CUDNN_GATES, CUDNN_MODES, INPUT_MATRIX, LSTM, PROJECTION
from rnnconv.table.layouts import per_gate
from rnnconv.table.rows import Row

CLIPS = ("cell_clip", "proj_clip")  # the op options that clip (what cuDNN does not)


def clip_dropped(rnn: CanonicalRNN, clip: tuple[float, float]) -> CanonicalRNN:
    """An LSTM its file clips (cell state and projected output, within `clip`; 0: not), read without the clip, as
    --allow-lossy asks: the loss recorded in its source's provenance as a target's is (verify holds the written file
    to it), measured on probe inputs in the numpy reference: the ordinary ones, whose difference is recorded, and
    ones large enough to reach the clip, whose difference the dropped term names."""

    def moved(x: np.ndarray, h0: np.ndarray | None, c0: np.ndarray | None) -> float:
        exact, unclipped = (forward(rnn.spec, rnn.param, x, h0, c0, clip=bounds) for bounds in (clip, (0.0, 0.0)))
        return max(float(np.max(np.abs(a - b))) for a, b in zip(exact, unclipped, strict=True) if a is not None)

    ordinary = make_inputs(rnn.spec, PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    large = make_inputs(rnn.spec, CLIP_PROBE_STEPS, PROBE_BATCH, PROBE_SEED, ragged=False)
    c0 = large["c0"]
    if c0 is not None and clip[0]:  # initial cells of about twice the clip: it is reached from the first step
        c0 = c0 * (2 * clip[0] / STATE_SCALE)
    reaching = moved(large["x"] * CLIP_PROBE_SCALE, large["h0"], c0)
    named = zip(("cell_clip", "proj_clip"), clip, strict=True)
    terms = ", ".join(f"{name}={value:g}" for name, value in named if value)
    loss = RecordedLoss(
        dropped=[
            f"{terms}: on inputs large enough to reach it ({CLIP_PROBE_STEPS} steps, x scaled by {CLIP_PROBE_SCALE:g}, "
            f"initial cells of about twice the clip) the outputs move by up to {reaching:.3g}"
        ],
        difference=moved(ordinary["x"], ordinary["h0"], ordinary["c0"]),
        seed=PROBE_SEED,
        steps=PROBE_STEPS,
        batch=PROBE_BATCH,
    )
    return dataclasses.replace(rnn, source=rnn.source.model_copy(update={"loss": loss}))


def why_refused(file: TfliteFile, op: Op, where: str, drop_clip: bool = False) -> str | None:
    """Why cuDNN cannot compute this op (one sentence naming the term), or None; `drop_clip`: a clip is no reason
    (--allow-lossy reads the op without it)."""
    names = OP_INPUTS[op.name]
    if op.refusal:
        return op.refusal
    held = [n for n in names if (t := input_of(op, n)) != UNSET and file.tensors[t].quantized]
    quantized = [file.tensors[input_of(op, n)] for n in held]
    others = [n for n in held if not n.endswith("weights")]  # the LSTM's `*_weights`, the RNN's two
    if quantized and not file.dequantize:  # named first: a converter's quantized LSTM also clips (--allow-lossy)
        weights = [file.tensors[input_of(op, n)] for n in held if n not in others]
        return refused_quantized(where, weights or quantized)
    if others:  # full-integer quantization: int8 activations, int32 biases, an int16 cell state
        reason = _integer_refusal(file, op, where, others)
        if reason or not drop_clip:
            return reason or _rounding_refusal(file, op, where)
    channels = [t for t in quantized if file.quantization_of(t, where).axis is not None]
    if channels:  # LiteRT's hybrid kernel, run on such a file, computes far from what the scales say (0.6 off)
        return (
            f"{where} has per-channel scales on its quantized weight {channels[0].name!r}, which LiteRT's "
            f"{op.name} kernel does not compute with as they say: its dequantized weights would not compute what "
            f"LiteRT computes of the file"
        )
    if op.name == TFLITE_CELL_OPS[LSTM]:
        if len(op.inputs) not in (20, 24):
            return f"{where} has {len(op.inputs)} inputs, not the 20 or 24 of an UNIDIRECTIONAL_SEQUENCE_LSTM"
        present = [n for n in names if input_of(op, n) != UNSET]
        peepholes = [n for n in present if n.startswith("cell_to_")]
        if peepholes:
            return f"{where} has peephole weights ({', '.join(peepholes)}): cuDNN's LSTM has no peepholes"
        norms = [n for n in present if n.endswith("_layer_norm_coefficients")]
        if norms:
            return f"{where} normalizes its gates ({', '.join(norms)}): cuDNN's LSTM has no layer normalization"
        options = op_options(op)
        for clip in CLIPS:
            if options[clip] and not drop_clip:
                return (
                    f"{where} clips with {clip}={options[clip]}: cuDNN's LSTM does not clip (--allow-lossy reads it "
                    f"without the clip and says how far that moves the outputs)"
                )
        if options["diagonal"]:
            return f"{where} has diagonal recurrent weights: cuDNN's recurrent matrices are full"
        bias = input_of(op, "projection_bias")
        if bias != UNSET and np.any(file.constant(bias, f"{where} projection_bias")):
            return f"{where} has a non-zero projection_bias: cuDNN's projection has no bias"
    elif len(op.inputs) != len(names):
        return f"{where} has {len(op.inputs)} inputs, not the {len(names)} of an {op.name}"
    required = [name for key, name in find_row(FORMAT, op.name).tensors.items() if key != PROJECTION]
    missing = [name for name in required if input_of(op, name) == UNSET]
    if missing:
        cifg = " (its input gate coupled to its forget gate, CIFG)" if missing[0] == required[0] else ""
        cell = cell_of_op(op.name).upper()
        return f"{where} has no {', '.join(missing)}{cifg}: cuDNN's {cell} needs every gate's weights"
    for state in TFLITE_STATE_INPUTS[op.name]:
        if input_of(op, state) == UNSET:
            return f"{where} has no {state} tensor"
    return None


def _integer_refusal(file: TfliteFile, op: Op, where: str, names: list[str]) -> str | None:
    """Why an op of full-integer quantization (`names`: its quantized inputs other than weights) is not one LiteRT's
    integer LSTM kernel computes as rnnconv reads it, or None: an int8 input and output state on one grid with its
    output, an int16 cell state, int32 biases with their scales, and the kernel's five intermediates."""
    if op.name != TFLITE_CELL_OPS[LSTM]:
        return (
            f"{where} is an {op.name} quantized to integers throughout ({listing(names, 3)}): rnnconv reads "
            "full-integer quantization of LSTMs only"
        )
    want = {"input": "int8", "output_state": "int8", "cell_state": "int16"}
    types = {name: file.tensors[t].dtype if (t := input_of(op, name)) != UNSET else "absent" for name in want}
    wrong = [f"{name} {types[name]}" for name, dtype in want.items() if types[name] != dtype]
    if wrong:
        return (
            f"{where} quantizes {listing(names, 3)} but holds {listing(wrong, 3)}: neither a dynamic-range op "
            "(int8 weights, float activations) nor LiteRT's full-integer LSTM (int8 input and output state, int16 "
            "cell state)"
        )
    biases = [n for n in names if n.endswith("_bias")] + [
        n for n in OP_INPUTS[op.name] if n.endswith("gate_bias") and not _integer_bias(file, op, n)
    ]
    if biases:
        return f"{where} is quantized to integers throughout, but its {biases[0]} is not an int32 bias with a scale"
    if input_of(op, "projection_weights") != UNSET:
        return f"{where} is quantized to integers throughout with a projection, which rnnconv does not read"
    if len(op.intermediates) != len(INTEGER_LSTM_INTERMEDIATES):
        return (
            f"{where} is quantized to integers throughout with {len(op.intermediates)} intermediate tensors, not the "
            f"{len(INTEGER_LSTM_INTERMEDIATES)} of the integer LSTM kernel rnnconv runs (LiteRT's 8x8_16)"
        )
    output, state = file.tensors[op.outputs[0]], file.tensors[input_of(op, "output_state")]
    if output.dtype != "int8" or file.quantization_of(output, where) != file.quantization_of(state, where):
        return f"{where} gives its output on another grid than its output state's: rnnconv reads one grid for both"
    return None


def _integer_bias(file: TfliteFile, op: Op, name: str) -> bool:
    t = input_of(op, name)
    return t != UNSET and file.tensors[t].quantized_bias


def _roundings(file: TfliteFile, chain: Chain[Layer]) -> list[RoundedInput]:
    """The grids a full-integer chain's kernel computes on, per layer: its input's and its states' (each step's, the
    initial ones too); one grid per layer: its directions' must agree."""
    found = []
    for layer, held in enumerate(chain.layers):
        held_grids = set()
        for op in held.ops:
            where = f"op {op.index} ({op.title}, layer {layer})"
            held_grids.add(
                tuple(
                    (name, tensor.dtype, file.quantization_of(tensor, f"{where} {name}"))
                    for name in ("input", "output_state", "cell_state")
                    for tensor in [file.tensors[input_of(op, name)]]
                )
            )
        if len(held_grids) > 1:
            raise Unsupported(f"{chain.name}: layer {layer}'s directions compute on different integer grids")
        ((x, h, c),) = held_grids
        by = f"op {held.ops[0].index}"
        grids: list[tuple[Literal["x", "h", "c"], tuple[str, str, Quantization]]] = [("x", x), ("h", h), ("c", c)]
        for values, (name, dtype, quant) in grids:
            low, high = QUANTIZED_RANGES[dtype]
            step = quant.scales[0]
            found.append(
                RoundedInput(
                    value=values,
                    layer=layer,
                    low=step * (low - quant.zero_points[0]),
                    step=step,
                    levels=high - low + 1,
                    by=f"{by}'s {dtype} {name}",
                )
            )
    return found


def _weights(file: TfliteFile, op: Op, row: Row, where: str) -> dict[str, int]:
    """The op's stored tensors by the row's keys, each checked to be a float constant (Unsupported otherwise)."""
    found = {}
    for key, name in row.tensors.items():
        t = input_of(op, name)
        if t == UNSET:
            continue
        tensor = file.tensors[t]
        if tensor.data is None or (
            tensor.dtype not in FLOAT_TYPES and not tensor.quantized and not tensor.quantized_bias
        ):
            file.constant(t, f"{where} {name}")  # says why
        found[key] = t
    return found


def to_canonical(file: TfliteFile, chain: Chain[Layer], source: Provenance, drop_clip: bool = False) -> CanonicalRNN:
    """The canonical RNN of a chain of ops; `drop_clip`: an LSTM that clips read without the clip, the loss recorded
    (--allow-lossy)."""
    if chain.first.loops:
        return loop_canonical(chain, source, file.dequantize)
    first = chain.first.op
    row = find_row(FORMAT, first.name)
    cells: dict[tuple[int, int], dict[str, int]] = {}
    clips = set()
    for layer, held in enumerate(chain.layers):
        for direction, op in enumerate(held.ops):
            where = f"op {op.index} ({op.title}, layer {layer})"
            reason = why_refused(file, op, where, drop_clip)
            if reason:
                raise Unsupported(reason)
            cells[(layer, direction)] = _weights(file, op, row, where)
            clips.add(tuple(float(op_options(op).get(clip, 0.0)) for clip in CLIPS))
    if len(clips) > 1:
        raise Unsupported(f"{chain.name}: its ops clip by different bounds ({listing(map(str, sorted(clips)))})")
    code = op_options(first)["activation"]
    activation = ACTIVATION_NAMES.get(code, f"activation code {code}")
    settled = settle(row, {"activation": activation}, chain.name, unstored=())
    gate = CUDNN_GATES[row.cell][-1]
    weights = cells[(0, 0)]
    shape = file.tensors[weights[per_gate(INPUT_MATRIX, gate)]].shape
    if len(shape) != 2:
        raise BadInput(f"{chain.name}: its input matrix has shape {list(shape)}, not (hidden, input)")
    hidden, input_size = shape
    proj_tensor = weights.get(PROJECTION)
    proj = file.tensors[proj_tensor].shape[0] if proj_tensor is not None else 0
    weights_held = [(key, t) for cell in cells.values() for key, t in cell.items()]
    integers = [(key, t) for key, t in weights_held if file.tensors[t].quantized or file.tensors[t].quantized_bias]
    dtypes = {file.tensors[t].dtype for _, t in weights_held if (_, t) not in integers}
    if len(dtypes) > 1:
        raise Unsupported(f"{chain.name}: its weights are of several types ({', '.join(sorted(dtypes))})")
    dtype, provenance, notes = dtypes.pop() if dtypes else "float32", dict[str, object](), list[str]()
    integer = file.tensors[input_of(first, "input")].quantized  # full-integer: its kernel computes in integers
    roundings = _roundings(file, chain) if integer else []
    if integers:  # the type that holds every dequantized product exactly (float32 where it can)
        dtype, provenance, notes = _dequantized(file, chain.name, integers, row, dtype, integer)

    def cell_of(layer: int, direction: int, _: RNNSpec) -> StoredCell:
        held = cells[(layer, direction)]
        where = f"{chain.name} layer {layer} direction {direction}"

        def fetch(key: str) -> np.ndarray:
            values = file.constant(held[key], f"{where} {row.tensors[key]}")
            return values.astype(np.float64 if dtype == "float64" else np.float32, copy=False)

        return StoredCell(
            fetch=fetch,
            shapes={key: file.tensors[t].shape for key, t in held.items()},
            names={key: file.tensors[t].name or row.tensors[key] for key, t in held.items()},
            where=where,
        )

    found = Found(
        chain.name,
        row,
        settled,
        int(input_size),
        int(hidden),
        dtype,
        cell_of,
        first.title,
        num_layers=len(chain.layers),
        bidirectional=len(chain.layers[0].ops) == 2,
        proj=int(proj),
        later_notes=notes,
        provenance=provenance,
        handover={"keepalive": file},
    )
    rnn = read(found, source)
    (clip,) = clips
    if any(clip):
        rnn = clip_dropped(rnn, (clip[0], clip[1]))
    if roundings:
        rnn = rounding_dropped(rnn, roundings)
    if file.record is not None:
        rnn.origin = sources.read_source_record(file.record, file.path)
    return rnn


def _dequantized(
    file: TfliteFile, name: str, held: list[tuple[str, int]], row: Row, stored: str, integer: bool
) -> tuple[str, dict[str, object], list[str]]:
    """What --dequantize reads of an RNN's quantized weights (and an integer kernel's int32 biases): the element
    type that holds every product exactly, the provenance recording the scheme, and the conversion's note
    (`integer`: a full-integer op, whose kernel computes in integers)."""
    values = [file.constant(t, f"{name} {row.tensors[key]}") for key, t in held]
    tensors = [file.tensors[t] for _, t in held if file.tensors[t].quantized]
    kinds = {t.dtype for t in tensors}
    if len(kinds) != 1:
        raise Unsupported(f"{name}: its weights are quantized to several types ({', '.join(sorted(kinds))})")
    (kind,) = kinds
    exact = exact_dtype(values)
    dtype = "float64" if "float64" in (exact, stored) else stored
    rec = record(
        [(t.name or f"tensor {t.index}", file.quantization_of(t, name)) for t in tensors],
        8 * QUANTIZED_TYPES[kind].itemsize,
    )
    how = "LiteRT's hybrid kernels also quantize each step's inputs to 8 bits"
    if integer:
        rec = rec.model_copy(update={"inputs": "integer"})
        biases = len(held) - len(tensors)
        how = (
            f"with {biases} int32 biases at the input's scale times the weight's; LiteRT's integer kernel also "
            "computes its gates in int16 and rounds its states each step"
        )
    return dtype, {"dtype": kind, "dequantized": rec}, [note(name, rec, dtype, how)]


def _rounding_refusal(file: TfliteFile, op: Op, where: str) -> str:
    """Why a full-integer op is not read without --allow-lossy, in one sentence naming the grids of its input and
    states (the ranges it clips them to)."""
    grids = []
    for name, what in (("input", "its input"), ("output_state", "each step's h"), ("cell_state", "each step's c")):
        tensor = file.tensors[input_of(op, name)]
        low, high = file.quantization_of(tensor, f"{where} {name}").range(tensor.dtype)
        grids.append(f"{what} to {tensor.dtype} over [{low:.3g}, {high:.3g}]")
    return (
        f"{where} is quantized to integers throughout (full-integer quantization): LiteRT's integer kernel rounds "
        f"{listing(grids, 3)}, which no float RNN computes; --allow-lossy converts the float RNN its dequantized "
        "weights compute, and says how far leaving the rounding out moves the outputs"
    )


def chain_sizes(file: TfliteFile, chain: Chain[Layer]) -> RNNSizes | None:
    """The sizes of ops that do not convert, as far as their weights' shapes tell (a loop's: as its cell reads)."""
    if chain.first.loops:
        first_loop = chain.first.loops[0]
        if any(loop.reading is None for layer in chain.layers for loop in layer.loops) or not first_loop.reading:
            return None
        cell = first_loop.reading
        spec = RNNSpec(cell.mode, cell.input_size, cell.hidden, len(chain.layers), len(chain.first.loops) == 2)
        stored = {tensor.dtype for layer in chain.layers for loop in layer.loops for tensor, _ in loop.quantized}
        return RNNSizes.of(spec.to_model()).model_copy(update={"dtype": "/".join(sorted(stored)) or spec.dtype})
    first = chain.first.op
    row = find_row(FORMAT, first.name)
    gate = CUDNN_GATES[row.cell][-1]
    matrix = input_of(first, row.tensors[per_gate(INPUT_MATRIX, gate)])
    if matrix == UNSET or len(file.tensors[matrix].shape) != 2:
        return None
    hidden, input_size = file.tensors[matrix].shape
    projection = input_of(first, row.tensors[PROJECTION]) if PROJECTION in row.tensors else UNSET
    shape = file.tensors[projection].shape if projection != UNSET else ()
    proj = shape[0] if len(shape) == 2 else 0  # (P, H): an audit pairs the op with its checkpoint's RNN by these sizes
    mode = next(mode for mode, (cell, _) in CUDNN_MODES.items() if cell == row.cell)
    with contextlib.suppress(RnnconvError, ValueError):
        spec = RNNSpec(mode, input_size, hidden, len(chain.layers), len(chain.layers[0].ops) == 2, proj)
        return RNNSizes.of(spec.to_model()).model_copy(update={"dtype": file.tensors[matrix].dtype})  # as stored
    return None
