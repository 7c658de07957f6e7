"""PyTorch's dynamically quantized LSTM and GRU (`torch.ao.quantization.quantize_dynamic`), read without torch.

Their state_dict holds one key per layer and direction, `<module>._all_weight_values.<k>.param` (k = layer *
directions + direction), a ScriptObject the inert unpickler records with the state BUILD gave it:
`(state, "__torch__.torch.classes.rnn.CellParamsBase")`, state `(kind, tensors, doubles, longs, packed)`:

- `quantized_dynamic` (dtype=torch.qint8): tensors `[b_ih, b_hh]` (float32), longs `[reduce_range]`, packed two
  `LinearPackedParamsBase` ScriptObjects whose state is `(weight, bias)`, each weight an int8 quantized tensor
  (`_rebuild_qtensor` over a QInt8Storage) per tensor (`per_tensor_affine`, scale, zero point) or, with a
  per-channel qconfig, per output row (`per_channel_affine`, scales, zero points, axis 0);
- `quantized_fp16` (dtype=torch.float16): tensors empty, packed `(weight, bias)` in float32, the weights rounded to
  float16 values: the kernel computes with them as they are.

The cells become the tensors an nn.LSTM/GRU's state_dict holds under their own names (`weight_ih_l0`, ...), int8
weights dequantized exactly, `scale * (q - zero_point)` (`_quantized`), so the rest of the reader takes them as any
state_dict's; what was dequantized is kept (`QuantizedRNN`) for the record, the refusal without --dequantize and the
runner, which rebuilds the quantized module from the stored integers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnconv.core.contracts import Dequantized
from rnnconv.errors import BadInput
from rnnconv.formats import _pickled
from rnnconv.formats._quantized import Quantization, dequantized, exact_dtype, quantization, record
from rnnconv.formats.torch.checkpoint import PickledTensor, ZipCheckpoint
from rnnconv.table.constants import TORCH_LAYER_NAME, TORCH_PARAMETERS, TORCH_REVERSE_SUFFIX

CELL_PARAMS = "__torch__.torch.classes.rnn.CellParamsBase"
LINEAR_PARAMS = "__torch__.torch.classes.quantized.LinearPackedParamsBase"
DYNAMIC, FP16 = "quantized_dynamic", "quantized_fp16"  # the kinds of cell params quantize_dynamic writes
KEY = re.compile(r"^(?P<prefix>(?:.*\.)?)_all_weight_values\.(?P<index>\d+)\.param$")
ROLES = ("input_matrix", "recurrent_matrix")  # the two linear products of a cell, in the order it packs them
BIASES = ("input_bias", "recurrent_bias")
WEIGHT_TYPES = {"i1": "int8"}  # the quantized integers a dynamic RNN's fbgemm kernel computes with
MAX_CELLS = 1024  # layers times directions: more than any RNN


def is_cell_params(value: Any) -> bool:
    return isinstance(value, _pickled.Object) and value.of("torch", "ScriptObject")


@dataclass
class QuantizedCell:
    """One layer and direction: its two weights and biases as stored, and (int8) whether its kernel quantizes its
    inputs to 7 bits (`reduce_range`) rather than 8."""

    key: str
    weights: tuple[PickledTensor, PickledTensor]  # input_matrix, recurrent_matrix
    biases: tuple[PickledTensor, PickledTensor] | None  # the packed weights' own: what the CPU kernel adds
    listed: tuple[PickledTensor, ...]  # the cell params' copy of them (int8 cells), which only serialization uses
    reduce_range: bool


@dataclass
class QuantizedRNN:
    """A quantized module's cells by layer and direction, and what reading them dequantized (None: float16 weights,
    read as they are)."""

    kind: str  # DYNAMIC or FP16
    cells: dict[tuple[int, int], QuantizedCell]
    quantizations: dict[tuple[int, int, str], Quantization]  # of int8 weights, by (layer, direction, role)
    record: Dequantized | None
    dtype: str  # the float type that holds every weight exactly
    bidirectional: bool


def _script_state(value: Any, cls: str, where: str) -> Any:
    """A ScriptObject's state, checked to be of class `cls`."""
    state = value.state if is_cell_params(value) else None
    if not (isinstance(state, tuple) and len(state) == 2 and state[1] == cls):
        named = state[1] if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], str) else None
        raise BadInput(f"{where} is a ScriptObject {'of ' + named[:80] if named else 'without a class'}, not {cls}")
    return state[0]


def _tensor(value: Any, where: str) -> PickledTensor:
    if not isinstance(value, PickledTensor):
        raise BadInput(f"{where} is no tensor torch.save wrote")
    return value


def _cell(value: Any, key: str) -> tuple[str, QuantizedCell]:
    """One CellParamsBase: its kind and cell, every part's type checked (its values are read later)."""
    state = _script_state(value, CELL_PARAMS, key)
    if not (isinstance(state, tuple) and len(state) == 5 and all(isinstance(p, list) for p in state[1:])):
        raise BadInput(f"{key}: its cell params' state is not (kind, tensors, doubles, longs, packed params)")
    kind, tensors, _, longs, packed = state
    if kind not in (DYNAMIC, FP16):
        raise BadInput(
            f"{key} holds {str(kind)[:40]!r} cell params: rnnconv reads the dynamically quantized ones of "
            f"quantize_dynamic (dtype=torch.qint8 or torch.float16)"
        )
    if len(packed) != 2:
        raise BadInput(f"{key}: its cell params pack {len(packed)} linear weights, not an input and a recurrent one")
    linears = []
    for role, linear in zip(ROLES, packed):
        where = f"{key}: its {TORCH_PARAMETERS[role]}"
        pair = _script_state(linear, LINEAR_PARAMS, where)
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise BadInput(f"{where}'s packed params are not (weight, bias)")
        linears.append((_tensor(pair[0], where), None if pair[1] is None else _tensor(pair[1], f"{where}'s bias")))
    given = [bias for _, bias in linears]
    if any(b is None for b in given) and any(b is not None for b in given):
        raise BadInput(f"{key}: one of its packed linear weights has a bias and the other none")
    listed: tuple[PickledTensor, ...] = ()
    reduce_range = False
    if kind == DYNAMIC:
        if len(tensors) != 2 or len(longs) > 1 or any(not isinstance(v, int) for v in longs):
            raise BadInput(f"{key}: its dynamic cell params are not ([b_ih, b_hh], [reduce_range])")
        listed = (_tensor(tensors[0], f"{key}: its b_ih"), _tensor(tensors[1], f"{key}: its b_hh"))
        reduce_range = bool(longs[0]) if longs else False
    biases = None if given[0] is None else (given[0], given[1])
    weights = (linears[0][0], linears[1][0])
    return kind, QuantizedCell(key, weights, biases, listed, reduce_range)  # type: ignore[arg-type]


def _grid(cells: Mapping[int, QuantizedCell], what: str) -> bool:
    """Whether the cells (k = layer * directions + direction) are a bidirectional RNN's: their input sizes tell,
    which every layer but the first takes from the one below (hidden, twice that when bidirectional)."""
    count = len(cells)
    if sorted(cells) != list(range(count)):
        raise BadInput(f"{what}: its _all_weight_values are numbered {sorted(cells)[:8]}, not 0 to {count - 1}")
    shapes = [(cell.weights[0].shape, cell.weights[1].shape) for cell in (cells[k] for k in range(count))]
    if any(len(ih) != 2 or len(hh) != 2 for ih, hh in shapes):
        raise BadInput(f"{what}: a cell's weights are not matrices")
    first, hidden = shapes[0][0][1], shapes[0][1][1]

    def fits(directions: int) -> bool:
        if count % directions:
            return False
        wanted = [first if k < directions else hidden * directions for k in range(count)]
        return all(ih[1] == n and hh == shapes[0][1] for (ih, hh), n in zip(shapes, wanted))

    both = fits(1), fits(2)
    if all(both):
        raise BadInput(
            f"{what}: its 2 cells are 2 layers or 1 bidirectional layer, which a quantized RNN's state_dict does not "
            f"say and its shapes cannot tell (input size = hidden size = {hidden})"
        )
    if not any(both):
        raise BadInput(
            f"{what}: its {count} cells' weight shapes {[list(ih) for ih, _ in shapes][:6]} fit no stack of layers "
            f"of hidden size {hidden}"
        )
    return both[1]


def quantized_rnns(
    found: ZipCheckpoint, entries: list[tuple[str, Any]], add: Callable[[str, np.ndarray, str], None]
) -> dict[str, QuantizedRNN]:
    """The quantized RNNs of a checkpoint's `(key, ScriptObject)` entries, by module prefix; each weight and bias is
    given to `add` under the name an nn.LSTM/GRU's state_dict has for it, with its float type."""
    by_prefix: dict[str, dict[int, tuple[str, QuantizedCell]]] = {}
    for key, value in entries:
        match = KEY.match(key)
        if match is None or not is_cell_params(value) or not isinstance(value.state, tuple):
            continue
        cells = by_prefix.setdefault(match["prefix"], {})
        if len(cells) >= MAX_CELLS or len(match["index"]) > 6:
            raise BadInput(f"{found.path}: {key} is past the {MAX_CELLS} layers and directions any RNN has")
        try:
            cells[int(match["index"])] = _cell(value, key)
        except BadInput as exc:
            raise BadInput(f"{found.path}: {exc}") from None
    return {prefix: _read(found, prefix, cells, add) for prefix, cells in by_prefix.items()}


def _read(
    found: ZipCheckpoint,
    prefix: str,
    cells: dict[int, tuple[str, QuantizedCell]],
    add: Callable[[str, np.ndarray, str], None],
) -> QuantizedRNN:
    what = f"{found.path}: the quantized RNN {prefix.rstrip('.') or 'rnn'!r}"
    kinds = {kind for kind, _ in cells.values()}
    if len(kinds) > 1:
        raise BadInput(f"{what} mixes {' and '.join(sorted(kinds))} cells")
    (kind,) = kinds
    by_index = {k: cell for k, (_, cell) in cells.items()}
    bidirectional = _grid(by_index, what)
    dirs = 2 if bidirectional else 1
    grid = {(k // dirs, k % dirs): cell for k, cell in by_index.items()}
    values: dict[str, np.ndarray] = {}
    quantizations: dict[tuple[int, int, str], Quantization] = {}
    held: list[tuple[str, Quantization]] = []
    for (layer, direction), cell in grid.items():

        def name(role: str, layer: int = layer, direction: int = direction) -> str:
            suffix = TORCH_REVERSE_SUFFIX if direction else ""
            return prefix + TORCH_LAYER_NAME.format(name=TORCH_PARAMETERS[role], layer=layer, suffix=suffix)

        for role, weight in zip(ROLES, cell.weights):
            if kind == DYNAMIC:
                q, quant = stored(found, weight, f"{found.path}: {name(role)}")
                quantizations[(layer, direction, role)] = quant
                held.append((name(role), quant))
                values[name(role)] = dequantized(q, quant)
            else:
                values[name(role)] = _float(found, weight, f"{found.path}: {name(role)}")
        for role, bias in zip(BIASES, cell.biases or ()):
            values[name(role)] = _float(found, bias, f"{found.path}: {name(role)}")
        copies = [
            _float(found, bias, f"{found.path}: {cell.key}'s copy of {name(role)}")
            for role, bias in zip(BIASES, cell.listed)
        ]
        if cell.listed and (
            cell.biases is None
            or any(not np.array_equal(copy, values[name(role)]) for role, copy in zip(BIASES, copies))
        ):
            raise BadInput(
                f"{found.path}: {cell.key} holds two different biases, its packed weights' (which its kernel adds) "
                f"and its cell params' copy: it was not written by quantize_dynamic"
            )
    dtype = exact_dtype(values.values())
    for key, array in values.items():
        add(key, array, dtype)
    # fbgemm quantizes each product's input to uint8, halved to 0..127 where the cell says reduce_range
    inputs = "uint8 per tensor, 7 bits" if any(c.reduce_range for c in grid.values()) else "uint8 per tensor"
    rec = record(held, 8).model_copy(update={"inputs": inputs}) if held else None
    return QuantizedRNN(kind, grid, quantizations, rec, dtype, bidirectional)


def stored(found: ZipCheckpoint, tensor: PickledTensor, where: str) -> tuple[np.ndarray, Quantization]:
    """A quantized weight's integers and its quantization, checked (`_quantized.quantization`)."""
    quantizer = tensor.quantizer
    if quantizer is None or tensor.problem:
        raise BadInput(f"{where} {tensor.problem or 'is not a quantized tensor'}")
    kind = WEIGHT_TYPES.get(tensor.dtype)
    if kind is None:
        raise BadInput(f"{where} is quantized to {tensor.dtype}, not the qint8 of a dynamically quantized RNN")
    q = np.asarray(found.values(tensor))
    if isinstance(quantizer.scales, PickledTensor) and isinstance(quantizer.zero_points, PickledTensor):
        scales = np.asarray(found.values(quantizer.scales), np.float64).ravel()
        zeros = np.asarray(found.values(quantizer.zero_points)).ravel()
        if scales.dtype.kind != "f" or zeros.dtype.kind not in "iu" or len(scales) > len(q):
            raise BadInput(f"{where}: its per-channel scales and zero points are not float and integer vectors")
        if not np.array_equal(scales.astype(np.float32).astype(np.float64), scales, equal_nan=True):
            raise BadInput(f"{where} has a scale that is not a float32: quantize_dynamic's observers give float32 ones")
        axis = quantizer.axis if quantizer.axis is not None else 0
        if axis != 0:  # fbgemm's dynamic kernels scale each output row: quantize_dynamic's observers give no other
            raise BadInput(f"{where} is quantized per channel along axis {axis}, not per output row (axis 0)")
        return q, quantization(list(scales), list(zeros), axis, q.shape, kind, where)
    assert isinstance(quantizer.scales, float) and isinstance(quantizer.zero_points, int)
    # torch dequantizes with float(scale): the pickled double rounded to float32, as `dequantized` does (checked so)
    with np.errstate(over="ignore"):
        scale = float(np.float32(quantizer.scales))
    return q, quantization([scale], [quantizer.zero_points], 0, q.shape, kind, where)


def _float(found: ZipCheckpoint, tensor: PickledTensor, where: str) -> np.ndarray:
    if tensor.problem or tensor.quantizer is not None or tensor.dtype != "<f4":
        raise BadInput(f"{where} {tensor.problem or 'is not a float32 tensor'}")
    return np.asarray(found.values(tensor), np.float32)
