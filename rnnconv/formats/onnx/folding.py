"""An ONNX model's graphs at any depth, and the constant computations that feed an RNN's weights, folded.

Exporters do not always store an RNN's weights as initializers. torch.onnx.export writes a scripted
`LSTMCell` (silero-vad's decoder is one) as an LSTM node inside an `If` branch whose W, R and B are sliced
out of the cell's parameters and concatenated in ONNX's gate order. Such a value is computed here, with
numpy, when every node on its way is a pure op of a short list (`FOLDABLE`) whose inputs are constants;
anything else (an input given at run time, a `Shape` of the data, an op off the list) is named in the
reason. Folding is bounded, so that a hostile graph can neither hang nor exhaust memory: the nodes
evaluated, the bytes produced (a budget that grows with the stored tensors read), the nesting of
subgraphs and the rank of tensors; a cycle is refused, never followed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, cut
from rnnconv.safeio.inputs import add_guard, read_array, regular_file, unchanged

MAX_DEPTH = 16  # subgraphs inside subgraphs: real models nest 3 or 4 deep
MAX_GRAPHS = 10_000  # subgraphs in one model
MAX_STEPS = 100_000  # values visited while folding one model's weights
MAX_RANK = 16  # dimensions of a folded tensor
BASE_BUDGET = 64 << 20  # bytes folding may produce, plus FOLD_GROWTH times the stored tensors it reads,
FOLD_GROWTH = 8
MAX_BUDGET = 1 << 30  # and never more than this in all
SUBGRAPH = "::"  # joins the names on a node's path: If_1::then_branch::LSTM
FOLDABLE = (
    "Constant",
    "Identity",
    "Cast",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Slice",
    "Concat",
    "Split",
    "Transpose",
    "Gather",
    "Add",
    "Sub",
    "Mul",
    "Div",
)


class NotFoldable(Exception):
    """A value that is not a constant computation rnnconv folds; the message says which and why."""


@dataclass(eq=False)
class Scope:
    """One graph: the main graph, or a subgraph (an If branch, a Loop or Scan body) inside another."""

    graph: Any
    path: str  # "" for the main graph; else the path of the node holding it and the attribute: If_1::then_branch
    parent: Scope | None
    depth: int
    produced: dict[str, tuple[Any, int]] = field(default_factory=dict)  # value -> (node, output index)
    stored: dict[str, Any] = field(default_factory=dict)  # value -> its initializer (a TensorProto)
    given: set[str] = field(default_factory=set)  # the graph's inputs without an initializer: known at run time

    def __post_init__(self) -> None:
        self.stored = {t.name: t for t in self.graph.initializer}
        self.given = {i.name for i in self.graph.input} - set(self.stored)
        for position, node in enumerate(self.graph.node):
            for index, output in enumerate(node.output):
                if output in self.produced:  # onnxruntime refuses it too; read, every copy would be looked at again
                    raise BadInput(
                        f"value {cut(output)!r} is the output of more than one node (one is "
                        f"{self.qualified(node_name(node, position))!r}), where ONNX assigns each value once"
                    )
                if output:
                    self.produced[output] = (node, index)

    def qualified(self, name: str) -> str:
        """A node's name with the path of the subgraph it is in."""
        return f"{self.path}{SUBGRAPH}{name}" if self.path else name

    def owner(self, value: str) -> Scope | None:
        """The graph that defines a value: this one, or the nearest enclosing one (ONNX's scoping)."""
        scope: Scope | None = self
        while scope is not None:
            if value in scope.produced or value in scope.stored or value in scope.given:
                return scope
            scope = scope.parent
        return None


def node_name(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def scopes(graph: Any) -> list[Scope]:
    """The main graph and every subgraph in it, depth first; too deep or too many is refused."""
    found = [Scope(graph, "", None, 0)]
    pending = [found[0]]
    while pending:
        scope = pending.pop()
        for index, node in enumerate(scope.graph.node):
            for attribute in node.attribute:
                bodies = [(attribute.name, attribute.g)] if attribute.HasField("g") else []
                bodies += [(f"{attribute.name}[{i}]", g) for i, g in enumerate(attribute.graphs)]
                for label, body in bodies:
                    if scope.depth + 1 > MAX_DEPTH:
                        raise BadInput(
                            f"node {scope.qualified(node_name(node, index))!r} holds subgraphs nested more than "
                            f"{MAX_DEPTH} deep"
                        )
                    if len(found) >= MAX_GRAPHS:
                        raise BadInput(f"the model holds more than {MAX_GRAPHS} subgraphs")
                    path = f"{scope.qualified(node_name(node, index))}{SUBGRAPH}{label}"
                    child = Scope(body, path, scope, scope.depth + 1)
                    found.append(child)
                    pending.append(child)
    return found


def element_dtype(code: int) -> np.dtype:
    """The numpy type of an ONNX element type that folding computes with."""
    from onnx import helper

    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, ValueError, TypeError):
        raise NotFoldable(f"element type {code} is not one rnnconv folds") from None
    if dtype.kind not in "biuf" and dtype.name != "bfloat16":
        raise NotFoldable(f"element type {dtype} is not one rnnconv folds")
    if dtype.kind == "f" and dtype.itemsize == 1:  # float8: ml_dtypes' own rounding rules
        raise NotFoldable(f"element type {dtype} is not one rnnconv folds")
    return dtype


def tensor_values(tensor: Any, folder: Path, limit: int) -> np.ndarray:
    """A TensorProto's values (ml_dtypes' bfloat16 for bfloat16), its claimed size checked first; external data
    only inside `folder`, read (never mapped)."""
    import onnx
    from onnx import numpy_helper

    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise BadInput(f"tensor {tensor.name!r} has a negative dimension")
    if len(dims) > MAX_RANK:
        raise BadInput(f"tensor {tensor.name!r} has {len(dims)} dimensions")
    try:
        dtype = element_dtype(tensor.data_type)
    except NotFoldable:
        raise BadInput(f"tensor {tensor.name!r} is of ONNX type {tensor.data_type}, not a type rnnconv reads") from None
    nbytes = math.prod(dims) * dtype.itemsize
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = Path(info.get("location", ""))
        if not info.get("location") or location.is_absolute() or ".." in location.parts:
            raise BadInput(f"tensor {tensor.name!r} names external data {str(location)!r} outside the model's folder")
        path = folder / location
        size = regular_file(path, "the external data")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", nbytes))
        except ValueError:
            raise BadInput(f"tensor {tensor.name!r} gives an offset or length that is not a number") from None
        if length != nbytes or offset < 0 or offset + length > size:
            raise BadInput(f"tensor {tensor.name!r} claims {nbytes} bytes at {offset} of {path}, which holds {size}")
        if nbytes == 0:
            return np.zeros(dims, dtype)
        storage = np.dtype(f"u{dtype.itemsize}") if dtype.name == "bfloat16" else dtype
        add_guard(unchanged(path))  # part of the source: one that changes while it is read commits nothing
        return read_array(path, offset, storage, tuple(dims)).view(dtype)  # read, not mapped: no SIGBUS
    if nbytes > limit:
        raise BadInput(f"tensor {tensor.name!r} claims {nbytes} bytes, more than the model file holds")
    try:
        values = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, AttributeError) as exc:
        raise BadInput(f"tensor {tensor.name!r} cannot be read ({str(exc).splitlines()[0][:160]})") from None
    if values.shape != tuple(dims):
        raise BadInput(f"tensor {tensor.name!r} holds {values.size} values for its shape {dims}")
    return np.asarray(values)


class Folder:
    """Values of a model computed from its constants, each once; bounded in steps and bytes."""

    def __init__(self, folder: Path, limit: int):
        self.folder, self.limit = folder, limit
        self.read = 0  # bytes of the stored tensors read
        self.spent = 0  # bytes produced
        self.steps = 0
        self.values: dict[tuple[int, str], np.ndarray] = {}
        self.sources: dict[tuple[int, str], frozenset[str]] = {}  # the stored tensors each value comes from

    def stored_sources(self, value: str, scope: Scope) -> frozenset[str]:
        owner = scope.owner(value)
        return self.sources.get((id(owner), value), frozenset()) if owner else frozenset()

    def value(self, value: str, scope: Scope) -> np.ndarray:
        """The value named `value` as seen from `scope`, computed; NotFoldable says why it cannot be."""
        pending: list[tuple[str, Scope]] = [(value, scope)]
        expanding: set[tuple[int, str]] = set()
        while pending:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise NotFoldable(f"folding it takes more than {MAX_STEPS} steps")
            name, where = pending[-1]
            owner = where.owner(name)
            if owner is None:
                raise NotFoldable(f"{name!r} is produced by no node and is no initializer")
            key = (id(owner), name)
            if key in self.values:
                pending.pop()
                continue
            if name in owner.stored:
                self._keep(key, self._stored(owner.stored[name]), frozenset([name]))
                pending.pop()
                continue
            if name not in owner.produced:
                raise NotFoldable(f"{name!r} is an input of the graph, given at run time")
            node, _ = owner.produced[name]
            label = owner.qualified(node.name or node.op_type)
            if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx"):
                raise NotFoldable(
                    f"{name!r} is computed by a {node.op_type} node ({label!r}), which is not one of the "
                    f"constant operations rnnconv folds ({', '.join(FOLDABLE)})"
                )
            missing = [(i, owner) for i in node.input if i and self._key(i, owner) not in self.values]
            if missing:
                if key in expanding:
                    raise NotFoldable(f"{name!r} depends on itself (a cycle through node {label!r})")
                expanding.add(key)
                pending.extend(missing)
                continue
            inputs = [self.values[self._key(i, owner)] if i else None for i in node.input]
            try:
                with np.errstate(all="ignore"):
                    outputs = self._evaluate(node, inputs)
            except NotFoldable as exc:
                raise NotFoldable(f"node {label!r} ({node.op_type}): {exc}") from None
            except (ValueError, TypeError, IndexError, OverflowError) as exc:
                raise NotFoldable(f"node {label!r} ({node.op_type}) cannot be computed: {_first(exc)}") from None
            sources = frozenset().union(*(self.sources[self._key(i, owner)] for i in node.input if i))
            if len(outputs) < len([o for o in node.output if o]):
                raise NotFoldable(f"node {label!r} ({node.op_type}) has more outputs than it computes")
            for output, result in zip(node.output, outputs):
                if output:
                    self._keep((id(owner), output), result, sources)
            expanding.discard(key)
            pending.pop()
        return self.values[self._key(value, scope)]

    def known(self, value: str, scope: Scope, array: np.ndarray, sources: frozenset[str]) -> None:
        """Take a graph's input, given at run time, as the constant it is known to be (a Loop's carried value its
        body passes on unchanged, started from a constant), computed from the stored tensors `sources`."""
        self._keep(self._key(value, scope), array, sources)

    def evaluate(self, node: Any, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        """One node of a FOLDABLE op computed as folding computes it, on any values (a loop's on probes); NotFoldable
        where it cannot be."""
        if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx"):
            raise NotFoldable(f"{node.op_type} is not one of the operations rnnconv folds")
        with np.errstate(all="ignore"):
            return self._evaluate(node, inputs)

    def _key(self, name: str, scope: Scope) -> tuple[int, str]:
        owner = scope.owner(name)
        return (id(owner) if owner else 0, name)

    def _keep(self, key: tuple[int, str], result: np.ndarray, sources: frozenset[str]) -> None:
        if result.ndim > MAX_RANK:
            raise NotFoldable(f"{key[1]!r} would have {result.ndim} dimensions")
        self.values[key] = result
        self.sources[key] = sources

    def _spend(self, nbytes: int) -> None:
        """Count bytes about to be produced; refuse before allocating what is beyond the budget."""
        allowed = min(BASE_BUDGET + FOLD_GROWTH * self.read, MAX_BUDGET)
        if self.spent + nbytes > allowed:
            raise NotFoldable(f"it would produce {nbytes} bytes, more than folding the weights it reads can need")
        self.spent += nbytes

    def _stored(self, tensor: Any) -> np.ndarray:
        values = tensor_values(tensor, self.folder, self.limit)
        self.read += values.nbytes
        return values

    def _evaluate(self, node: Any, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        from onnx import helper

        attributes = {a.name: a for a in node.attribute}

        def attribute(name: str, default: Any = None) -> Any:
            return helper.get_attribute_value(attributes[name]) if name in attributes else default

        def given(index: int) -> np.ndarray:
            if index >= len(inputs) or inputs[index] is None:
                raise NotFoldable(f"input {index} is missing")
            value = inputs[index]
            assert value is not None
            return value

        def integers(index: int, name: str) -> list[int] | None:
            """An optional list of integers: input `index` (newer opsets) or attribute `name` (older)."""
            if index < len(inputs) and inputs[index] is not None:
                values = given(index)
                if values.dtype.kind not in "iu" or values.ndim > 1 or values.size > 4096:
                    raise NotFoldable(f"input {index} is not a list of integers")
                return [int(v) for v in values.reshape(-1)]
            value = attribute(name)
            return None if value is None else [int(v) for v in np.atleast_1d(value)]

        op = node.op_type
        if op == "Constant":
            return [self._constant(node, attribute)]
        data = given(0)
        if op == "Identity":
            return [data]
        if op == "Cast":
            dtype = element_dtype(int(attribute("to", 0)))
            self._spend(data.size * dtype.itemsize)
            return [data.astype(dtype)]
        if op == "Reshape":
            shape = integers(1, "shape") or []
            allow_zero = int(attribute("allowzero", 0))
            target = [data.shape[i] if d == 0 and not allow_zero and i < data.ndim else d for i, d in enumerate(shape)]
            if len(target) > MAX_RANK or sum(d == -1 for d in target) > 1 or any(d < -1 for d in target):
                raise NotFoldable(f"shape {shape} is not one a tensor of shape {list(data.shape)} can take")
            return [data.reshape(target)]
        if op == "Squeeze":
            axes = integers(1, "axes")
            if axes is None:
                return [np.squeeze(data)]
            return [np.squeeze(data, axis=tuple(_axes(axes, data.ndim)))]
        if op == "Unsqueeze":
            axes = integers(1, "axes") or []
            rank = data.ndim + len(axes)
            if rank > MAX_RANK:
                raise NotFoldable(f"it would make a tensor of {rank} dimensions")
            return [np.expand_dims(data, tuple(_axes(axes, rank)))]
        if op == "Transpose":
            perm = attribute("perm")
            perm = list(range(data.ndim))[::-1] if perm is None else [int(p) for p in perm]
            if sorted(perm) != list(range(data.ndim)):
                raise NotFoldable(f"perm {perm} is no permutation of {data.ndim} axes")
            return [np.transpose(data, perm)]
        if op == "Slice":
            steps = integers(4, "")
            return [self._slice(data, integers(1, "starts"), integers(2, "ends"), integers(3, "axes"), steps)]
        if op == "Concat":
            parts = [given(i) for i in range(len(inputs))]
            self._spend(sum(p.nbytes for p in parts))
            return [np.concatenate(parts, axis=_axes([int(attribute("axis", 0))], data.ndim)[0])]
        if op == "Split":
            return self._split(data, node, integers(1, "split"), attribute)
        if op == "Gather":
            indices = given(1)
            axis = _axes([int(attribute("axis", 0))], data.ndim)[0]
            if indices.dtype.kind not in "iu":
                raise NotFoldable("its indices are not integers")
            dim = data.shape[axis]
            if indices.size and (indices.min() < -dim or indices.max() >= dim):
                raise NotFoldable(f"an index is outside the {dim} entries of axis {axis}")
            self._spend(indices.size * (data.nbytes // max(dim, 1)))
            return [np.take(data, np.where(indices < 0, indices + dim, indices), axis=axis)]
        return [self._arithmetic(op, data, given(1))]

    def _constant(self, node: Any, attribute: Callable[[str], Any]) -> np.ndarray:
        attributes = {a.name for a in node.attribute}
        if "value" in attributes:
            import onnx

            value = attribute("value")
            if not isinstance(value, onnx.TensorProto):  # an attribute named value of another type
                raise NotFoldable("its value attribute is no tensor")
            return self._stored(value)
        for name, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
            if name in attributes:
                return np.array(attribute(name), dtype)
        for name in ("value_int", "value_ints"):
            if name in attributes:
                try:
                    return np.array(attribute(name), np.int64)
                except OverflowError:
                    raise NotFoldable("an integer is out of range") from None
        raise NotFoldable(f"it holds {', '.join(sorted(attributes)) or 'no value'}, not a tensor of numbers")

    def _slice(
        self,
        data: np.ndarray,
        starts: list[int] | None,
        ends: list[int] | None,
        axes: list[int] | None,
        steps: list[int] | None,
    ) -> np.ndarray:
        if starts is None or ends is None or len(starts) != len(ends):
            raise NotFoldable("its starts and ends do not match")
        axes = _axes(axes if axes is not None else list(range(len(starts))), data.ndim)
        steps = steps if steps is not None else [1] * len(starts)
        if len(axes) != len(starts) or len(steps) != len(starts) or len(set(axes)) != len(axes) or 0 in steps:
            raise NotFoldable("its starts, ends, axes and steps do not fit together")
        index = [slice(None)] * data.ndim
        for axis, start, end, step in zip(axes, starts, ends, steps):
            index[axis] = slice(start, end, step)  # Python clamps as ONNX does
        return data[tuple(index)]

    def _split(
        self, data: np.ndarray, node: Any, split: list[int] | None, attribute: Callable[..., Any]
    ) -> list[np.ndarray]:
        axis = _axes([int(attribute("axis", 0))], data.ndim)[0]
        count = len(node.output)
        dim = data.shape[axis]
        if split is None:
            parts = int(attribute("num_outputs", count) or count)
            if parts < 1 or parts != count:
                raise NotFoldable(f"it splits into {parts} parts but has {count} outputs")
            size = -(-dim // parts)
            split = [min(size, max(dim - i * size, 0)) for i in range(parts)]
        if len(split) != count or any(s < 0 for s in split) or sum(split) != dim:
            raise NotFoldable(f"split {split} does not divide the {dim} entries of axis {axis} into {count}")
        bounds = np.cumsum([0, *split])
        index = [slice(None)] * data.ndim
        out = []
        for lo, hi in itertools.pairwise(bounds):
            index[axis] = slice(int(lo), int(hi))
            out.append(data[tuple(index)])
        return out

    def _arithmetic(self, op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype != b.dtype or a.dtype.kind == "b":
            raise NotFoldable(f"its operands are of types {a.dtype} and {b.dtype}")
        shape = np.broadcast_shapes(a.shape, b.shape)
        self._spend(math.prod(shape) * a.dtype.itemsize)
        if op == "Add":
            return np.add(a, b)
        if op == "Sub":
            return np.subtract(a, b)
        if op == "Mul":
            return np.multiply(a, b)
        if a.dtype.kind in "iu":  # integer division truncates toward zero
            if np.any(b == 0):
                raise NotFoldable("it divides an integer by zero")
            quotient = np.floor_divide(a, b)
            adjust = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))
            return (quotient + adjust.astype(quotient.dtype)).astype(a.dtype)
        return np.divide(a, b).astype(a.dtype)


def _axes(axes: list[int], rank: int) -> list[int]:
    """Axes counted from the end made positive; each must be one of `rank` axes."""
    out = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise NotFoldable(f"axis {axis} is outside a tensor of {rank} dimensions")
        out.append(axis + rank if axis < 0 else axis)
    return out


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def walk_nodes(found: list[Scope]) -> Iterator[tuple[Scope, int, Any]]:
    for scope in found:
        for index, node in enumerate(scope.graph.node):
            yield scope, index, node
