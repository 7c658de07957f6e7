"""ExecuTorch's own words (its schema `program.fbs` and `scalar_type.fbs`, and `extended_header.h`): the file
identifier, the extended header, the field slots of the tables rnnconv reads, the union tags, and the element types
of tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

KIND: Final = "executorch"  # the file kind a source records
IDENTIFIER: Final = b"ET12"  # program.fbs: file_identifier, at bytes 4 to 8
HEADER_MAGIC: Final = b"eh00"  # the extended header, at byte 8: its length, program size, segment base and size
HEADER_AT: Final = 8
HEADER_LEAST: Final = 24  # magic, length, program size, segment base offset; the segment data size may follow

# Field slots, in the order program.fbs declares each table's fields (a union takes two: its type, then its value).
PROGRAM = {"execution_plan": 1, "constant_buffer": 2, "segments": 4, "constant_segment": 5}
PLAN = {"name": 0, "values": 2, "inputs": 3, "outputs": 4, "operators": 6, "delegates": 7}
EVALUE_TYPE, EVALUE_VALUE = 0, 1  # EValue.val: KernelTypes
TENSOR = {"scalar_type": 0, "sizes": 2, "data_buffer_idx": 5, "allocation_info": 6, "extra_tensor_info": 9}
EXTRA_TENSOR_INFO = {"fully_qualified_name": 1, "location": 2}
OPERATOR_NAME = 0
DELEGATE_ID = 0
BUFFER_STORAGE = 0
SEGMENT = {"offset": 0, "size": 1}
SUBSEGMENTS = {"segment_index": 0, "offsets": 1}

KERNEL_TYPE_TENSOR: Final = 5  # KernelTypes: Null 1, Int 2, Bool 3, Double 4, Tensor 5, ...
LOCATION_EXTERNAL: Final = 1  # TensorDataLocation: SEGMENT 0, EXTERNAL 1 (a .ptd data file beside the program)

# ScalarType -> numpy dtype of the float types an RNN's weights are; other tensors are counted, never read.
FLOAT_TYPES: Final[dict[int, str]] = {5: "float16", 6: "float32", 7: "float64", 15: "bfloat16"}
SCALAR_BYTES: Final[dict[int, int]] = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2}


def sniff(probe: Probe) -> bool:
    """A flatbuffer whose file identifier is a program's."""
    return probe.head[4:8] == IDENTIFIER
