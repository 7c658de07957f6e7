"""An inert unpickler: a pickle read for what it records, never for what it would run.

A pickle is a program: each global it names is imported and each object it makes is made by calling that global
(REDUCE, NEWOBJ, INST, OBJ) and then its `__setstate__` (BUILD). This reader imports nothing and calls nothing the
file names. Every global becomes a `Global`, a fresh inert type carrying its module and name (`Global.module`,
`Global.name`); what the pickle makes of it is an `Object` of that type holding the arguments it was given, the
state it was built with, and the items and entries the pickle appended or set. So a pickled `nn.Module` reads as
the record of its class, its attribute dict and its `_parameters` and `_modules`, none of its code run, and a
pickle whose `__reduce__` would call `os.system` reads as an `Object` of `os.system` with its arguments.

Only these globals become values:

- plain containers: `collections.OrderedDict`, `collections.Counter`, `builtins.set` and `frozenset`, and the
  bytes protocol 2 writes as `_codecs.encode(text, "latin1")` (and `bytes()`);
- numpy's arrays as `pickle.dumps(array)` and `paddle.save` write them (`numpy.core.multiarray._reconstruct` of
  `numpy.ndarray` built from a `numpy.dtype` and its raw bytes, `numpy.core.numeric._frombuffer`, and
  `numpy.core.multiarray.scalar`, under `numpy._core` too), as read-only `np.ndarray` (scalars as 0-d arrays): of a
  numeric dtype only, their shape checked against the bytes present;
- what the caller names in `rebuilds` (torch's tensor and storage rebuilds, `torch.save`'s words), called with the
  pickle's own (inert) arguments, which they check.

Bounded: the pickle's size (`MAX_PICKLE`), its opcodes (`MAX_OPCODES`, counted before anything is made, so a small
file cannot make millions of objects) and the memo slots they name (no higher than that count: the C unpickler's
memo is an array as long as the highest slot), and the nesting of what it makes (`MAX_DEPTH`, walked without recursing
past it). Anything damaged or past a bound is `BadInput`, one sentence naming the file.

API: `load(data, what, rebuilds=..., persistent_load=...)` -> the pickle's root; `globals_named(root)`: the
`Global`s an object tree holds, for messages; `Object.of(module, name)`: whether a record is of that class.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from rnnconv.errors import BadInput, first_line

MAX_PICKLE = 256 << 20  # bytes: a pickle names tensors and records; their values lie beside it
MAX_OPCODES = 5_000_000  # about 15 per tensor of a state_dict, more than any checkpoint's pickle holds
MAX_DEPTH = 200  # containers within containers: a module tree is three per module level
_PUTS = ("PUT", "BINPUT", "LONG_BINPUT")  # the opcodes that put an object in the memo at a slot they name


class Object:
    """What a pickle made of a global: `args` (REDUCE's, NEWOBJ's), `kwargs` (NEWOBJ_EX's), `state` (BUILD's,
    None when never built), `items` (APPEND's), `entries` (SETITEM's). Its class is a `Global`."""

    module: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Object:
        made = object.__new__(cls)
        made.__dict__.update(args=args, kwargs=kwargs, state=None, items=[], entries={})
        return made

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # everything was recorded by __new__

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def append(self, item: Any) -> None:
        self.items.append(item)

    def extend(self, items: Any) -> None:
        self.items.extend(items)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.entries[key] = value

    @classmethod
    def of(cls, module: str, name: str) -> bool:
        return cls.module == module and cls.name == name

    @classmethod
    def qualified(cls) -> str:
        return f"{cls.module}.{cls.name}"

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: Any
    items: list[Any]
    entries: dict[Any, Any]


# --- numpy's arrays ------------------------------------------------------------------------------------------------

# The element types an array may have: numbers only (an object array is a pickle of its own).
NUMPY_KINDS = frozenset(
    f"{kind}{size}"
    for kind, sizes in (("f", (2, 4, 8)), ("i", (1, 2, 4, 8)), ("u", (1, 2, 4, 8)), ("c", (8, 16)))
    for size in sizes
) | {"b1"}
_ORDERS = "<>|="  # the byte orders numpy pickles


class _NumpyDtype:
    """numpy.dtype(spec, align, copy), its byte order set by BUILD."""

    def __init__(self, spec: Any, *_: Any) -> None:
        if not isinstance(spec, str) or spec.lstrip("<>|=") not in NUMPY_KINDS:
            raise BadInput(f"it names a numpy dtype {str(spec)[:40]!r}, not a numeric one")
        self.spec, self.order = spec.lstrip("<>|="), spec[0] if spec[:1] in tuple(_ORDERS) else "="

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 2 or state[1] not in tuple(_ORDERS):
            raise BadInput("a numpy dtype's state is not the one numpy pickles")
        if any(part is not None for part in state[2:5]):  # subarray, names, fields: a structured dtype
            raise BadInput("it holds a structured numpy dtype, not a numeric one")
        self.order = state[1]

    def dtype(self) -> np.dtype:
        return np.dtype(self.order + self.spec)


class _NdarrayType:
    """The numpy.ndarray a pickle names as the type to reconstruct."""


class _NumpyArray:
    """numpy.core.multiarray._reconstruct(ndarray, ...) until BUILD gives its shape, dtype and bytes."""

    array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) != 5:
            raise BadInput("a numpy array's state is not the one numpy pickles")
        _, shape, dtype, fortran, data = state
        self.array = _array(data, dtype, shape, "F" if fortran else "C")


def _reconstruct(kind: Any, shape: Any, *_: Any) -> _NumpyArray:
    if kind is not _NdarrayType:
        raise BadInput("it reconstructs a numpy array of a type that is not numpy.ndarray")
    return _NumpyArray()


def _array(data: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    if not isinstance(dtype, _NumpyDtype):
        raise BadInput("a numpy array's dtype is not a numpy.dtype")
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and 0 <= n < 1 << 48 for n in shape):
        raise BadInput(f"a numpy array's shape {str(shape)[:60]} is not a tuple of sizes")
    if isinstance(data, (pickle.PickleBuffer, bytearray)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise BadInput("a numpy array's values are not raw bytes")
    kind = dtype.dtype()
    if math.prod(shape) * kind.itemsize != len(data):
        raise BadInput(
            f"a numpy array of shape {shape} ({kind}) is given {len(data)} bytes, "
            f"not {math.prod(shape) * kind.itemsize}"
        )
    if order not in ("C", "F"):
        raise BadInput(f"a numpy array's order is {str(order)[:20]!r}, not C or F")
    values = np.frombuffer(data, kind).reshape(shape, order=order)
    values.flags.writeable = False
    return values


def _frombuffer(data: Any, dtype: Any, shape: Any, order: Any = "C") -> np.ndarray:
    return _array(data, dtype, shape, order)


def _scalar(dtype: Any, data: Any = b"") -> np.ndarray:
    return _array(data, dtype, (), "C")


def _latin1(text: Any, encoding: Any = "latin1") -> bytes:
    """_codecs.encode(text, "latin1"): how protocol 2 pickles bytes."""
    if not isinstance(text, str) or encoding != "latin1":
        raise BadInput("it encodes something other than text as latin-1 bytes")
    return text.encode("latin1")


def _no_bytes(*args: Any) -> bytes:
    """bytes(): how protocol 2 pickles empty bytes."""
    if args:
        raise BadInput("it makes bytes of something other than latin-1 text")
    return b""


VALUES: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): Counter,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "set"): set,
    ("_codecs", "encode"): _latin1,
    ("builtins", "bytes"): _no_bytes,
    ("__builtin__", "bytes"): _no_bytes,
    ("numpy", "ndarray"): _NdarrayType,
    ("numpy", "dtype"): _NumpyDtype,
    **{
        (f"numpy.{core}.{module}", name): made
        for core in ("core", "_core")
        for module, name, made in (
            ("multiarray", "_reconstruct", _reconstruct),
            ("multiarray", "scalar", _scalar),
            ("numeric", "_frombuffer", _frombuffer),
        )
    },
}


# --- reading ------------------------------------------------------------------------------------------------------


class _Unpickler(pickle.Unpickler):
    def __init__(
        self,
        data: bytes,
        rebuilds: Mapping[tuple[str, str], Any],
        persistent_load: Callable[[Any], Any] | None,
    ):
        super().__init__(io.BytesIO(data))
        self._rebuilds = rebuilds
        self._persistent = persistent_load
        self._globals: dict[tuple[str, str], type[Object]] = {}

    def find_class(self, module: str, name: str) -> Any:
        key = (module, name)
        found = self._rebuilds.get(key, VALUES.get(key))
        if found is not None:
            return found
        if key not in self._globals:  # a fresh type per global, so `type(record)` tells its class
            self._globals[key] = type("Global", (Object,), {"module": module, "name": name, "__slots__": ()})
        return self._globals[key]

    def persistent_load(self, pid: Any) -> Any:
        if self._persistent is None:
            raise BadInput(f"the pickle names a persistent object {str(pid)[:80]}, which this kind of file has none of")
        return self._persistent(pid)


def load(
    data: bytes,
    what: str,
    rebuilds: Mapping[tuple[str, str], Any] | None = None,
    persistent_load: Callable[[Any], Any] | None = None,
) -> Any:
    """The pickle's root object, read inertly (the module docstring); `what` names the file in messages."""
    if len(data) > MAX_PICKLE:
        raise BadInput(f"{what}: its pickle is {len(data):,} bytes, more than any checkpoint's ({MAX_PICKLE:,})")
    try:
        for count, (opcode, argument, _) in enumerate(pickletools.genops(data), 1):
            if count > MAX_OPCODES:
                raise BadInput(
                    f"{what}: its pickle makes more than {MAX_OPCODES:,} objects, more than any checkpoint's"
                )
            # the C unpickler's memo is an array as long as the highest slot put: picklers number slots from 0
            if opcode.name in _PUTS and not (isinstance(argument, int) and 0 <= argument <= MAX_OPCODES):
                raise BadInput(
                    f"{what}: its pickle puts an object in memo slot {str(argument)[:20]}, past any pickler's"
                )
        root = _Unpickler(data, rebuilds or {}, persistent_load).load()
    except BadInput as exc:
        raise BadInput(str(exc) if str(exc).startswith(what) else f"{what}: {exc}") from None
    except Exception as exc:  # a damaged pickle raises anything pickle can raise
        raise BadInput(f"{what} holds no readable pickle (truncated or corrupt: {first_line(exc)})") from None
    return _settle(root, what)


def _settle(root: Any, what: str) -> Any:
    """The tree with numpy's reconstructed arrays as arrays, its nesting bounded (MAX_DEPTH)."""
    seen: dict[int, Any] = {}

    def settle(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise BadInput(f"{what}: its pickle nests objects more than {MAX_DEPTH} deep, more than any checkpoint")
        if id(node) in seen:
            return seen[id(node)]
        if isinstance(node, _NumpyArray):
            if node.array is None:
                raise BadInput(f"{what}: a numpy array of its pickle was never given its values")
            return node.array
        if isinstance(node, _NumpyDtype):
            return node.dtype()
        seen[id(node)] = node
        if isinstance(node, dict):
            for key, value in node.items():
                node[key] = settle(value, depth + 1)
        elif isinstance(node, list):
            node[:] = [settle(value, depth + 1) for value in node]
        elif isinstance(node, tuple):
            seen[id(node)] = node = tuple(settle(value, depth + 1) for value in node)
        elif isinstance(node, (set, frozenset)):  # members are hashable: no arrays, Objects perhaps
            for value in node:
                settle(value, depth + 1)
        elif isinstance(node, Object):
            node.args = settle(node.args, depth + 1)
            node.kwargs = settle(node.kwargs, depth + 1)
            node.state = settle(node.state, depth + 1)
            node.items = settle(node.items, depth + 1)
            node.entries = settle(node.entries, depth + 1)
        return node

    return settle(root, 0)


def objects(root: Any) -> Iterator[Object]:
    """Every Object of a settled tree, once each (the tree's nesting was bounded by `load`)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Object):
            yield node
            stack += [node.args, node.kwargs, node.state, node.items, node.entries]
        elif isinstance(node, dict):
            stack += [*node.keys(), *node.values()]
        elif isinstance(node, (list, tuple, set, frozenset)):
            stack += list(node)


def globals_named(root: Any) -> list[str]:
    """The globals (module.name) whose Objects a settled tree holds, in the order first met."""
    return list(dict.fromkeys(type(obj).qualified() for obj in objects(root)))
