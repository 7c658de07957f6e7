"""The documents of verify, audit and identify (the report, the reports of several RNNs, the identification) and of
a conversion of several sources: apart from `rnnconv.core.contracts` (whose models they are built of), so that a
conversion, which writes none of them, does not create their classes (pydantic's class creation is a tenth of a
small conversion's start). `SCHEMAS` names every document `rnnconv schema` prints.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator

from rnnconv.core.contracts import (
    REPORT_SCHEMA_VERSION,
    BackendInfo,
    ConversionResult,
    ErrorDocument,
    InspectReport,
    LayoutInfo,
    Sidecar,
    SpecModel,
)
from rnnconv.core.record import Record
from rnnconv.errors import BackendMissing, BadInput, Mismatch
from rnnconv.table.constants import DIRECTIONS

T = TypeVar("T")


class Contract(BaseModel):
    """A document of verify's, as a pydantic model (the documents a conversion writes are records, which these nest)."""

    # defer_build: a model is built when first used
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, defer_build=True)


# error / backend-missing: verify could not run (exit 2 / 3); a report asked for is still written, saying why.
# lossy-as-recorded: a file written with --allow-lossy differs from its source by what its record says was dropped,
# and by nothing more (exit 1 unless --accept-recorded-loss). not-found: an RNN of a deployed model or of its
# checkpoint that has no partner on the other side (exit 1). not-deployed: a checkpoint's RNN that the audit's --layer
# pairs leave out, as they say the deployed file holds only the others (exit 0: nothing of the file is wrong).
# within-bound: a file written with --quantize whose three terms (weights, kernel, end to end) each hold (exit 0).
Verdict = Literal[
    "match",
    "mismatch",
    "lossy-as-recorded",
    "within-bound",
    "structure-only",
    "error",
    "backend-missing",
    "not-found",
    "not-deployed",
]


# --- verify's report ----------------------------------------------------------------------------


class Check(Contract):
    check: str
    ok: bool
    detail: str


class SourceRun(Contract):
    path: str
    format: str | None = None
    layer: str | None = None
    run: str  # how the source ran: framework, version and call


class Tolerance(Contract):
    atol: float
    rtol: float
    # A quantized RNN's: the part of atol that is the quantization's own error bound, computed from its scales for
    # each step of the run (verification/quantized.py), float32's rounding the rest.
    bound: float | None = None

    def described(self) -> str:
        text = f"{self.atol:g} + {self.rtol:g}*|x|"
        return text if self.bound is None else f"{text}, of which {self.bound:.3g} the quantization's bound per step"

    @property
    def at_unit(self) -> float:
        """The tolerance for a value of magnitude 1: what the per-step sparkline and the plot mark."""
        return self.atol + self.rtol


class InputsInfo(Contract):
    seed: int
    seq_len: int
    batch: int
    lengths: list[int] | None = None
    x_distribution: str = "normal(0, 0.8)"
    state_distribution: str = "normal(0, 0.5), h0 and c0 non-zero"


class OutputError(Contract):
    max_abs: float
    max_rel: float
    match: bool  # every element within the tolerance


class LayerDirectionError(Contract):
    layer: int
    direction: str
    max_abs: float

    @field_validator("direction")
    @classmethod
    def _known_direction(cls, value: str) -> str:
        if value not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}")
        return value


class Comparison(Contract):
    match: bool
    y: OutputError
    h_n: OutputError
    c_n: OutputError | None = None
    y_per_step: list[float]
    y_per_direction: list[float]
    y_per_direction_per_step: list[list[float]]  # [direction][step], of the last layer (the output sequence)
    h_n_per_layer_direction: list[LayerDirectionError]
    c_n_per_layer_direction: list[LayerDirectionError] | None = None

    @property
    def worst(self) -> float:
        return max(e.max_abs for e in (self.y, self.h_n, self.c_n) if e is not None)


class Diagnosis(Contract):
    found: bool
    tried: int
    mistake: str | None = None
    message: str


class LossCheck(Contract):
    """A file written with `--allow-lossy`, held against what its record says was dropped: how far it is from its
    source (the conversion's measure, and verify's), and how far from its source without what was dropped."""

    dropped: list[str]
    recorded: float  # the largest difference the conversion measured, on its probe inputs
    same_inputs: bool  # whether verify's inputs are the conversion's probe inputs (then `measured` repeats it)
    measured: float  # the largest difference from the source, on verify's inputs
    beyond: float  # the largest difference from the source without what was dropped
    explained: bool  # `beyond` is within the tolerance: the file loses what its record says, and nothing more


class QuantizationTerm(Contract):
    """One term of a quantized file's proof: the largest difference measured, the bound it is held to, and whether it
    is within it."""

    # NaN (and not ok) where a run or the bound gave values that are not finite, as a comparison's errors are
    measured: float
    # the weights': half the largest step; the kernel's and a derived end to end's: the bound the scales give plus
    # float32's 1e-4 (and 1e-3 x |value|, which `detail` says); --bound's as given
    bound: float
    ok: bool
    detail: str


class QuantizationProof(Contract):
    """A file written with `--quantize`, proved in three terms: its weights (each dequantized weight within half a
    step of the float source's), its kernel (the file in its runtime against the float run of its dequantized weights,
    a step at a time from the same states, within the bound its scales give) and end to end (the file in its runtime
    against the float source over the whole sequence, within `--bound` or the bound derived from the other two)."""

    scheme: str
    bits: int
    weights: QuantizationTerm
    kernel: QuantizationTerm
    end_to_end: QuantizationTerm
    bound_given: bool  # end_to_end's bound is --bound's, not derived


class LayoutFinding(Contract):
    """A tensor (or the whole weight space) that cuDNN places elsewhere than the blob says."""

    tensor: str
    expected: dict[str, Any] | None = None
    cudnn: dict[str, Any] | None = None
    expected_bytes: int | None = None
    cudnn_bytes: int | None = None
    # what differs: "size" (the weight space's), "offset", "dims and strides", "missing" (cuDNN holds no such
    # tensor); --relayout can move tensors (offset, size), nothing else
    differs: list[str] = []


WHOLE_MODEL = "whole model"  # the name of an audit's row for a whole model copied as it is, beside its RNNs' rows


class Report(Contract):
    """What `verify` found: the verdict, why, and everything needed to repeat it."""

    schema_version: int = REPORT_SCHEMA_VERSION
    verdict: Verdict
    summary: str
    blob: str
    name: str = ""
    spec: SpecModel | None = None  # None only when verify could not read the blob
    layout: LayoutInfo | None = None
    checks: list[Check] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    source: SourceRun | None = None
    backend: BackendInfo | None = None
    tolerance: Tolerance | None = None
    inputs: InputsInfo | None = None
    comparison: Comparison | None = None
    diagnosis: Diagnosis | None = None
    layout_findings: list[LayoutFinding] | None = None
    relayout: str | None = None
    assumptions: list[str] | None = None  # settings the source file does not store, which the blob assumed
    allow_structure_only: bool = False  # whether a structure check alone was accepted
    loss: LossCheck | None = None  # a file written with --allow-lossy: what it loses, measured
    accept_recorded_loss: bool = False  # whether a lossy-as-recorded file was accepted
    quantization: QuantizationProof | None = None  # a file written with --quantize: its three terms
    warnings: list[str] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 match (or within-bound, or a recorded loss accepted, or an RNN not deployed), 1 mismatch (or a recorded
        loss not accepted, or no partner found), 2 nothing could be compared (unless a structure check alone was
        accepted) or verify could not run, 3 a backend is missing."""
        if self.verdict in ("mismatch", "not-found") or (
            self.verdict == "lossy-as-recorded" and not self.accept_recorded_loss
        ):
            return Mismatch.exit_code
        if self.verdict == "backend-missing":
            return BackendMissing.exit_code
        if self.verdict == "error":
            return BadInput.exit_code
        if self.verdict == "structure-only" and not self.allow_structure_only:
            return BadInput.exit_code
        return 0


class Documents(RootModel[T], Generic[T]):
    """A list of documents; built when first used (a conversion does not pay for verify's)."""

    model_config = ConfigDict(strict=True, defer_build=True)


class Reports(Documents[list[Report]]):
    """`verify --all`: one report per RNN of an rnnconv `.safetensors` (its --report file and --json)."""


class BatchItem(Contract):
    """One source of a conversion of several: where it went, and its exit code and sentence when it failed."""

    source: str
    output: str  # the main output it was to be written to
    exit_code: int = Field(ge=0)
    error: str | None = None  # the sentence the command printed for it
    result: ConversionResult | None = None  # None when it failed


class BatchResults(Documents[list[BatchItem]]):
    """A conversion of several sources (`-o DIR`): one entry per source, in the order given (its --json)."""


class LayoutCandidate(Contract):
    """One way to read a flat blob: a storage layout of the table's rows, a packing, an element type."""

    id: str  # what --candidate takes
    rows: list[str]  # the table's rows (format and class) that store a cell this way
    gate_order: list[str]
    matrix: str
    bias: str  # the rows' bias layout, or "none"
    packing: str
    packing_order: str  # the packing in words
    dtype: str
    spec: SpecModel
    max_abs_error: float | None = None  # against the probe's outputs, when one was given
    reproduces: bool | None = None  # the probe's outputs within the tolerance


class Identification(Contract):
    """What `identify` found: the layouts a headerless blob's size allows, and the one a probe picks."""

    schema_version: int = 1
    verdict: Literal["identified", "ambiguous", "unidentified"]
    summary: str
    blob: str
    bytes: int = Field(ge=0)
    searched: int = Field(ge=0)  # candidate layouts checked against the size
    probe: str | None = None
    tolerance: Tolerance | None = None
    identified: LayoutCandidate | None = None
    candidates: list[LayoutCandidate] = Field(default_factory=list)  # consistent with the size, best first
    convert: str | None = None  # the command that reads the blob, when one layout is identified
    outputs: list[str] = Field(default_factory=list)  # what -o wrote

    @property
    def exit_code(self) -> int:
        """0 one layout identified, 1 several fit or none does."""
        return 0 if self.verdict == "identified" else Mismatch.exit_code


SCHEMAS: dict[str, type[BaseModel] | type[Record]] = {
    "sidecar": Sidecar,
    "report": Report,
    "inspect": InspectReport,
    "conversion": ConversionResult,
    "reports": Reports,
    "batch": BatchResults,
    "error": ErrorDocument,
    "identify": Identification,
}
