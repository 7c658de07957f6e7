"""An ExecuTorch program read without ExecuTorch: its extended header, and of each method (execution plan) its
constant tensors (their element types, shapes, names where it keeps any, and where their bytes lie, checked to lie
inside the file), its operators and its delegates; every offset, vector and segment bounds-checked."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rnnconv.formats._flatbuffer import Flat, Table
from rnnconv.formats.executorch.wire import (
    BUFFER_STORAGE,
    DELEGATE_ID,
    EVALUE_TYPE,
    EVALUE_VALUE,
    EXTRA_TENSOR_INFO,
    FLOAT_TYPES,
    HEADER_AT,
    HEADER_LEAST,
    HEADER_MAGIC,
    IDENTIFIER,
    KERNEL_TYPE_TENSOR,
    LOCATION_EXTERNAL,
    OPERATOR_NAME,
    PLAN,
    PROGRAM,
    SCALAR_BYTES,
    SEGMENT,
    SUBSEGMENTS,
    TENSOR,
)
from rnnconv.safeio.inputs import regular_file

WHAT = "ExecuTorch program"
MAX_RANK = 16  # ExecuTorch's kTensorDimensionLimit


@dataclass(frozen=True)
class Constant:
    """A constant tensor of a method: its EValue index, element type (None: not a float type), shape, and the name
    the program gives it ("" for none: a program lowered the usual way keeps none)."""

    value: int
    dtype: str | None
    shape: tuple[int, ...]
    name: str = ""
    external: bool = False  # its bytes lie in a .ptd data file beside the program, not in it


@dataclass(frozen=True)
class Method:
    name: str
    constants: list[Constant]
    operators: list[str]
    delegates: list[str]  # each delegate's backend id (XnnpackBackend)


@dataclass(frozen=True)
class Program:
    path: Path
    methods: list[Method]


def load(path: Path) -> Program:
    size = regular_file(path)
    flat = Flat(path, size, what=WHAT)
    if size < HEADER_AT or flat.read(4, 4) != IDENTIFIER:
        raise flat.damaged(f"it has no {IDENTIFIER.decode()} identifier")
    program_size, segment_base, segment_data = size, 0, 0
    if size >= HEADER_AT + HEADER_LEAST and flat.read(HEADER_AT, 4) == HEADER_MAGIC:
        length, program_size, segment_base = struct.unpack("<IQQ", flat.read(HEADER_AT + 4, 20))
        if length >= HEADER_LEAST + 8:  # the segment data's size, where the header has it
            (segment_data,) = struct.unpack("<Q", flat.read(HEADER_AT + HEADER_LEAST, 8))
        if length < HEADER_LEAST or not 0 < program_size <= size or segment_base + segment_data > size:
            raise flat.damaged("its extended header points outside the file (truncated or corrupt)")
    body = Flat(path, program_size, what=WHAT)
    root = body.root()
    segments = [
        (s.scalar(SEGMENT["offset"], "u64", 0), s.scalar(SEGMENT["size"], "u64", 0))
        for s in root.tables(PROGRAM["segments"])
    ]
    if any(segment_base + start + length > size for start, length in segments):
        raise flat.damaged("a segment lies outside the file (truncated or corrupt)")
    buffers = root.tables(PROGRAM["constant_buffer"])
    constant_segment = root.table(PROGRAM["constant_segment"])
    offsets = (constant_segment.u64s(SUBSEGMENTS["offsets"]) or []) if constant_segment else []
    segment_index = constant_segment.scalar(SUBSEGMENTS["segment_index"], "u32", 0) if constant_segment else 0

    def check_data(index: int, nbytes: int, where: str) -> None:
        """A constant's bytes lie inside its buffer, or its subsegment of the constant segment, inside the file."""
        if len(buffers) > 1:  # constants inline in the flatbuffer (programs of before segments)
            held = buffers[index].bytes_at(BUFFER_STORAGE) if index < len(buffers) else None
            if held is None or held[1] < nbytes:
                raise flat.damaged(f"{where} names constant buffer {index}, which does not hold its bytes")
            return
        if segment_index >= len(segments) or index >= len(offsets):
            raise flat.damaged(f"{where} names constant {index}, which its constant segment does not hold")
        if offsets[index] + nbytes > segments[segment_index][1]:
            raise flat.damaged(f"{where}'s bytes lie outside its segment (corrupt)")

    methods = []
    for plan in root.tables(PROGRAM["execution_plan"]):
        name = plan.string(PLAN["name"])
        constants = []
        for number, value in enumerate(plan.tables(PLAN["values"])):
            if value.scalar(EVALUE_TYPE, "u8", 0) != KERNEL_TYPE_TENSOR:
                continue
            tensor = value.table(EVALUE_VALUE)
            if tensor is None:
                raise flat.damaged(f"method {name!r}'s value {number} is a tensor without its table")
            constant = _constant(flat, tensor, number, f"method {name!r}'s tensor {number}", check_data)
            if constant is not None:
                constants.append(constant)
        operators = [op.string(OPERATOR_NAME) for op in plan.tables(PLAN["operators"])]
        delegates = [d.string(DELEGATE_ID) for d in plan.tables(PLAN["delegates"])]
        methods.append(Method(name, constants, operators, delegates))
    if not methods:
        raise flat.damaged("it has no method")
    return Program(path, methods)


def _constant(
    flat: Flat, tensor: Table, number: int, where: str, check_data: Callable[[int, int, str], None]
) -> Constant | None:
    """A tensor of a method, if it is a constant (its data in the program, not planned memory), its bytes checked."""
    index = tensor.scalar(TENSOR["data_buffer_idx"], "u32", 0)
    if index == 0 or tensor.table(TENSOR["allocation_info"]) is not None:
        return None  # an input, an activation or a state: memory the runtime plans
    shape = tuple(tensor.ints(TENSOR["sizes"]) or [])
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise flat.damaged(f"{where} has shape {shape}")
    scalar = tensor.scalar(TENSOR["scalar_type"], "u8", 0)
    info = tensor.table(TENSOR["extra_tensor_info"])
    name = info.string(EXTRA_TENSOR_INFO["fully_qualified_name"]) if info else ""
    external = info is not None and info.scalar(EXTRA_TENSOR_INFO["location"], "u8", 0) == LOCATION_EXTERNAL
    if not external:
        check_data(index, math.prod(shape) * SCALAR_BYTES.get(scalar, 1), where)
    return Constant(number, FLOAT_TYPES.get(scalar), shape, name, external)
