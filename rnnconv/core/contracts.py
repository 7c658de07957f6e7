"""The typed, versioned documents rnnconv writes and reads: sidecars, provenance, inspect's and a conversion's
results (verify's, identify's and a batch's, built of these, are in `rnnconv.core.report_contracts`).

One declaration per document (a `rnnconv.core.record.Record`): the writer builds it, checked as it is built, and
the reader validates with the pydantic model generated from the same declaration, so neither can drift from the
other; a conversion builds its documents without importing pydantic. `rnnconv schema NAME` prints each document's
JSON schema (`docs/schema/` holds them). Every field name is an identifier; `class` is kept as it was written by
rnnconv 0.1 sidecars.

A document that does not validate is bad input: `parse` turns pydantic's
errors into one sentence naming the first offending field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from rnnconv.core.dtypes import DTYPES
from rnnconv.core.record import Record, checks, field
from rnnconv.errors import BadInput
from rnnconv.table.constants import CUDNN_MODES, KINDS, MAX_LAYERS, MAX_SIZE

if TYPE_CHECKING:
    from pydantic import BaseModel

SIDECAR_FORMAT: Final = "rnnconv.cudnn-weight-space"
# Version 1: rnnconv 0.1 (no schema_version field). Version 2: the typed model, source.format names the file kind.
# Version 3: source.digest ("ALGORITHM:HEX") instead of source.sha256. Version 4: weight_space.digest, the written
# blob's own digest.
SIDECAR_SCHEMA_VERSION = 4
# Report version 2: per-step errors per output direction and each output's `match`. Version 3: the verdict
# lossy-as-recorded and the report's `loss`; a source record's `loss` (what --allow-lossy dropped). Version 4: the
# verdict not-found (a row of the audit of a deployed model: an RNN with no partner on the other side). Version 5: the
# verdict not-deployed (a checkpoint's RNN that the audit's --layer pairs leave out). Version 6: the verdict
# within-bound and the report's `quantization` (a file written with --quantize: its three terms); a source record's
# `quantized` (what --quantize wrote). Version 7: a spec's `reset_after` (false: a GRU whose reset gate is applied
# before the recurrent product, TF1's GRUCell or Keras reset_after=False; left out for every other RNN).
REPORT_SCHEMA_VERSION = 7


M = TypeVar("M", bound="Record | BaseModel")


def parse(model: type[M], data: Any, where: str) -> M:
    """`data` validated as `model`, or BadInput naming the first field that is wrong."""
    try:
        return model.model_validate(data)  # type: ignore[return-value]
    except ValueError as exc:  # pydantic's ValidationError is one: imported only once a document is refused
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "the document"
        # a validator's own sentence, not pydantic's wording around it ("Value error, ...")
        message = str(first.get("ctx", {}).get("error", "")) if first["type"] == "value_error" else first["msg"]
        raise BadInput(f"{where}: {field}: {(message or first['msg'])[:200]}") from None


def dump(document: Record | BaseModel) -> Any:
    """The JSON form, with the names the documents use (`class`); fields without a value are left out."""
    return document.model_dump(mode="json", by_alias=True, exclude_none=True)


class SpecModel(Record):
    """An RNN's spec as documents carry it; `RNNSpec.from_model` checks what types alone cannot."""

    mode: str
    input_size: int = field(ge=1, le=MAX_SIZE)
    hidden_size: int = field(ge=1, le=MAX_SIZE)
    num_layers: int = field(default=1, ge=1, le=MAX_LAYERS)
    bidirectional: bool = False
    proj_size: int = field(default=0, ge=0, le=MAX_SIZE)
    dtype: str = "float32"
    bias: bool = True
    # False: a GRU whose reset gate multiplies the state before the recurrent product (RNNSpec.reset_after); left
    # out for every other RNN.
    reset_after: bool | None = None
    bias_mode: Literal["double"] | None = None  # what cuDNN gets: two biases, zero when the source had none

    @checks("mode")
    def _known_mode(value: str) -> str:
        if value not in CUDNN_MODES:
            raise ValueError(f"unknown RNN mode {value!r} (choose {', '.join(CUDNN_MODES)})")
        return value

    @checks("dtype")
    def _known_dtype(value: str) -> str:
        if value not in DTYPES:
            raise ValueError(f"unknown dtype {value!r} (choose {', '.join(DTYPES)})")
        return value


ConfigValue = str | int | float | bool | None


class RecordedLoss(Record):
    """What `--allow-lossy` left out of an RNN to write a target that cannot hold it (each term as the refusal names
    it), and how far that moved the outputs: the largest difference the conversion measured on its probe inputs."""

    dropped: list[str] = field(min_length=1)
    difference: float = field(ge=0)
    seed: int = field(ge=0)
    steps: int = field(ge=1)
    batch: int = field(ge=1)


class RoundedInput(Record):
    """An input a quantized file rounds before its RNN computes with it (a FakeQuantize, a QuantizeLinear and
    DequantizeLinear pair): each value clamped to `levels` evenly spaced values from `low`, `step` apart, and rounded
    to the nearest. What the float RNN rnnconv converts it to leaves out (--allow-lossy)."""

    # a layer's input sequence, its initial states (as verify's inputs name them), or each step's new states (h, c:
    # an integer kernel's, rounded to its state tensors' grids as it computes them)
    value: Literal["x", "h0", "c0", "h", "c"]
    layer: int = field(ge=0)
    low: float
    step: float = field(gt=0)
    levels: int = field(ge=2, le=1 << 16)
    by: str  # the file's op that rounds it, as the conversion's warning names it

    @property
    def high(self) -> float:
        """The largest of its levels."""
        return self.low + self.step * (self.levels - 1)


class Dequantized(Record):
    """What `--dequantize` read of a quantized RNN: the scheme of its integer weights (per tensor, or per channel
    along an axis of the stored tensor), their bits, whether every zero point is 0, the tensors, and the largest
    quantization step (each dequantized weight is within half a step of the float weight it was rounded from)."""

    scheme: str
    bits: int = field(ge=1, le=32)
    symmetric: bool
    tensors: list[str] = field(min_length=1)
    largest_step: float = field(gt=0)
    # how its kernel rounds each product's input at run time (core.bound.INPUT_ROUNDINGS; "float": it rounds none,
    # computing in float with the dequantized weights; "integer": it computes in integers, its inputs and states on
    # the grids `rounded` names, its gates on int16's); None: int8 per row
    inputs: Literal["uint8 per tensor, 7 bits", "uint8 per tensor", "float", "integer"] | None = None
    rounded: list[RoundedInput] | None = None  # inputs the quantized file rounds, left out with --allow-lossy


class Quantized(Dequantized):
    """What `--quantize` wrote of an RNN: its scheme (as `Dequantized` records one), the largest difference of a
    written weight, scale * q, from the source's (at most half a step), whether the target's kernel also quantizes each
    step's inputs to 8 bits at run time, and the bound its scales give each step on the conversion's probe inputs."""

    weight_error: float = field(ge=0)
    inputs_quantized: bool
    step_bound: float = field(ge=0)
    seed: int = field(ge=0)
    steps: int = field(ge=1)
    batch: int = field(ge=1)


class Provenance(Record):
    """Where an RNN came from: the file, its kind, its hash, and what in it."""

    path: str | None = None
    format: str | None = None  # the file's kind: keras-h5, keras-archive, torch, cudnn-bin, ...
    digest: str | None = None  # "blake3:HEX" (or "sha256:HEX") of the source file; None: --no-hash
    sha256: str | None = None  # what schema 2 recorded instead of `digest`
    name: str | None = None  # an RNN's name inside a blob source
    layer: str | None = None
    layer_class: str | None = field(default=None, json_name="class")
    prefix: str | None = None  # a PyTorch RNN's key prefix, wrapper keys included
    stacked: list[str] | None = None  # Keras layers stacked into one multi-layer RNN
    bias_split: str | None = None
    dtype: str | None = None  # the source's element type
    keras_version: str | None = None
    backend: str | None = None  # the Keras backend that wrote the file
    keras_config: dict[str, ConfigValue] | None = None
    relative_path: str | None = None  # the source seen from the output's folder, to find it again if moved
    assumptions: list[str] | None = None  # settings the file does not store, taken as the format's default
    loss: RecordedLoss | None = None  # what --allow-lossy left out writing the file that records this source
    dequantized: Dequantized | None = None  # what --dequantize read of its quantized weights
    quantized: Quantized | None = None  # what --quantize wrote of the file that records this source


class LayoutInfo(Record):
    name: str
    version: int | str
    order: str
    bias_mode: Literal["double"] = "double"
    projection: str | None = None
    verified_on_gpu: bool = False
    unverified: str | None = None


class CudnnSettings(Record):
    """The values to hand cudnnSetRNNDescriptor_v8 (named as its parameters' types)."""

    cudnnRNNMode_t: int
    cudnnRNNBiasMode_t: int
    cudnnDirectionMode_t: int
    cudnnRNNInputMode_t: int
    cudnnDataType_t: int
    inputSize: int
    hiddenSize: int
    projSize: int
    numLayers: int


class WeightSpaceInfo(Record):
    elements: int = field(ge=1)
    bytes: int = field(ge=1)
    byte_order: Literal["little"] = "little"
    # "ALGORITHM:HEX" of the weight space's bytes as they were written (schema 4; None: an older rnnconv wrote it)
    digest: str | None = None


class TensorEntry(Record):
    """One matrix or bias: where it is in the weight space."""

    name: str
    layer: int = field(ge=0)
    direction: int = field(ge=0, le=1)
    tensor: str
    gate: str
    pseudo_layer: int = field(ge=0)
    lin_layer_id: int = field(ge=0)
    offset_bytes: int = field(ge=0)
    shape: list[int]

    @checks("tensor")
    def _known_kind(value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"unknown tensor kind {value!r} (one of {', '.join(KINDS)})")
        return value


class Sidecar(Record):
    """`X.bin.json`, and each RNN's entry in an rnnconv `.safetensors`' metadata."""

    format: Literal["rnnconv.cudnn-weight-space"]
    schema_version: int = field(default=SIDECAR_SCHEMA_VERSION, ge=1, le=SIDECAR_SCHEMA_VERSION)
    rnnconv_version: str
    name: str
    spec: SpecModel
    layout: LayoutInfo
    cudnn: CudnnSettings | None = None
    weight_space: WeightSpaceInfo
    source: Provenance = field(default_factory=Provenance)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tensors: list[TensorEntry] = field(default_factory=list)


class BackendInfo(Record):
    """Where the blob ran; the cuDNN backend adds what it ran on."""

    name: str
    detail: str
    gpu: str | None = None
    compute_capability: str | None = None
    math_type: str | None = None
    algo: str | None = None
    torch_cudnn_rnn: dict[str, Any] | None = None  # the second opinion of torch._cudnn_rnn, when it ran
    cuda_session: str | None = None  # which CUDA session ran cuDNN: PyCUDA's, or rnnconv's ctypes one on libcuda
    math_type_refused: list[str] | None = None  # math types cuDNN refused (NOT_SUPPORTED) before math_type ran
    cudnn_unavailable: str | None = None  # why --backend auto ran the numpy reference instead of cuDNN


# --- inspect and convert results --------------------------------------------------------------


class RNNSizes(Record):
    """An RNN's sizes as its file stores them, known whether or not it converts (a refused RNN has no cuDNN spec,
    and its sizes are what a user needs to decide what to state or retrain)."""

    input_size: int = field(ge=0, le=MAX_SIZE)
    hidden_size: int = field(ge=0, le=MAX_SIZE)
    num_layers: int = field(default=1, ge=1, le=MAX_LAYERS)
    bidirectional: bool = False
    proj_size: int = field(default=0, ge=0, le=MAX_SIZE)
    dtype: str | None = None  # the stored element type, when it is one rnnconv names
    bias: bool | None = None  # whether the file stores biases, when that is known

    @classmethod
    def of(cls, spec: SpecModel) -> RNNSizes:
        return cls(
            input_size=spec.input_size,
            hidden_size=spec.hidden_size,
            num_layers=spec.num_layers,
            bidirectional=spec.bidirectional,
            proj_size=spec.proj_size,
            dtype=spec.dtype,
            bias=spec.bias,
        )


class InspectEntry(Record):
    name: str
    layer_class: str = field(json_name="class")
    spec: SpecModel | None = None
    sizes: RNNSizes | None = None  # always given with a spec; for a refused RNN, where the file tells them
    converts: bool
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    source: Provenance | None = None
    layout: LayoutInfo | None = None

    def _complete(self) -> None:
        if self.spec is not None and self.sizes is None:
            self.sizes = RNNSizes.of(self.spec)


class InspectReport(Record):
    schema_version: int = REPORT_SCHEMA_VERSION
    path: str
    format: str  # the file's kind
    versions: dict[str, str] = field(default_factory=dict)
    rnns: list[InspectEntry]
    notes: list[str] = field(default_factory=list)
    profile: str | None = None  # inspect --profile: the consumer whose documented limits were checked
    target: str | None = None  # inspect --to: the format whose files each RNN's `converts` says it can be written in
    broken_limits: list[str] = field(default_factory=list)  # each limit of the profile a node breaks, a line each


class ConvertedRNN(Record):
    name: str
    spec: SpecModel
    notes: list[str]
    source: Provenance


class Skipped(Record):
    name: str
    reason: str


class ConversionResult(Record):
    schema_version: int = REPORT_SCHEMA_VERSION
    outputs: list[str]
    target: str
    dtype: str
    rnns: list[ConvertedRNN]
    warnings: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    usage: str = ""  # how to load what was written


class ErrorDocument(Record):
    """What a command that fails prints on stdout with --json (its sentence goes to stderr as always), so that a
    CI step parsing stdout always gets a document: the exit code and the sentence."""

    schema_version: int = 1
    error: str  # the sentence printed after `error:` (or `internal error:`)
    exit_code: int = field(ge=1, le=255)  # 2 bad input, 3 a backend is missing, 4 a bug, 128+N a signal
    command: str | None = None  # the command that failed, when it got that far
