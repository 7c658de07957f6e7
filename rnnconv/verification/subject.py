"""What `verify` checks and against what, set up before anything runs: the file verified (a blob, or a file a
runtime runs as written, or a streaming model), read back as a weight space (`Subject`); the source it is compared
with, found where the file records it or given (`Against`); and the engine that runs the file. `run.verify` judges
them."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import BackendInfo, Provenance, Sidecar
from rnnconv.core.dtypes import count_non_finite
from rnnconv.core.report_contracts import Check
from rnnconv.core.weightspace import REPORTED_LAYOUT_NAME, regions
from rnnconv.errors import BadInput, Unsupported, cut, listing
from rnnconv.formats import base, registry, runtimes
from rnnconv.formats.probe import Probe
from rnnconv.formats.settings import ReadOptions
from rnnconv.formats.sources import pick_named
from rnnconv.safeio.digests import digest_differs
from rnnconv.safeio.inputs import FileArray, regular_file
from rnnconv.table.constants import CUDNN_MODES, DIRECTION, MANTISSA_BITS
from rnnconv.verification.engines import select_engine
from rnnconv.verification.identify import PROBE_KIND
from rnnconv.verification.streaming import StreamRun

CONFIG_LIMIT = 1 << 12  # characters of --runtime-config: a handful of settings
MAX_STEPS = 1 << 16  # test inputs stay small: enough steps and items to show any layout mistake


@dataclass
class VerifyOptions:
    against: Path | None = None  # the source model, when not the one the blob names
    backend: str = "auto"  # auto, cudnn or numpy
    seq_len: int = 8
    batch: int = 3
    seed: int = 0
    ragged: bool = False
    atol: float | None = None
    rtol: float | None = None
    layer: str | None = None  # the RNN to check in an rnnconv .safetensors (and in --against)
    raw_spec: RNNSpec | None = None
    require_source: bool = False  # no source: exit 2 without a report (the default gives a structure-only report)
    diagnose: bool = True
    relayout: Path | None = None  # where to write the blob in cuDNN's layout when they differ
    force: bool = False
    allow_structure_only: bool = False  # accept a structure check alone when the source is nowhere (exit 0)
    require_stated: bool = False  # refuse a blob that assumed a setting its source does not store
    accept_recorded_loss: bool = False  # exit 0 for a file that loses what --allow-lossy recorded, and no more
    bound: float | None = None  # a file written with --quantize: the end-to-end bound [default: derived]
    streaming: bool = False  # the file is a streaming model: fed in chunks, its states carried
    stream_runtime: str | None = None  # what runs it [default: its format's own runtime]
    runtime_config: str | None = (
        None  # a JSON object: how the deployed file's runtime is set up (OpenVINO's properties)
    )

    def deployed_config(self) -> dict[str, bool | int | float | str]:
        """--runtime-config's settings (none: the runtime's defaults)."""
        if self.runtime_config is None:
            return {}
        try:
            settings = json.loads(self.runtime_config) if len(self.runtime_config) <= CONFIG_LIMIT else None
        except (ValueError, RecursionError):
            settings = None
        if not isinstance(settings, dict) or not all(
            isinstance(value, bool | int | float | str) for value in settings.values()
        ):
            raise BadInput(
                f"--runtime-config takes a JSON object of settings, each a name and true, false, a number or a word "
                f"(e.g. '{{\"LP_TRANSFORMS_MODE\": false}}'), not {cut(self.runtime_config, 80)}"
            )
        return settings

    def __post_init__(self) -> None:
        """Refuse impossible settings before any work."""
        if not 2 <= self.seq_len <= MAX_STEPS or not 1 <= self.batch <= MAX_STEPS:
            raise BadInput(f"verify needs --seq-len of at least 2 and --batch of at least 1 (each at most {MAX_STEPS})")
        if self.seed < 0 or (self.atol is not None and self.atol < 0) or (self.rtol is not None and self.rtol < 0):
            raise BadInput("--seed, --atol and --rtol cannot be negative")
        if self.bound is not None and not (math.isfinite(self.bound) and self.bound > 0):
            raise BadInput(
                f"--bound must be a positive number (the largest difference allowed end to end), not {self.bound}"
            )
        self.deployed_config()  # refused now, before any work, where it is no JSON object of settings
        if self.stream_runtime is not None and not self.streaming:
            raise BadInput("--stream-runtime runs a streaming model: give it with --streaming")
        if self.streaming and (self.ragged or self.raw_spec is not None):
            raise BadInput("--streaming runs a streaming model on whole sequences: leave out --ragged and the raw spec")
        if self.streaming and self.backend != "auto":
            raise BadInput(
                "--streaming runs a streaming model in its format's runtime (--stream-runtime names another): leave "
                "out --backend"
            )


@dataclass
class Subject:
    """The file verify checks (`path`), as the weight space read from it (`blob`); the format whose runtime runs it
    as written (None: a blob, which an engine runs) and where its RNN is in it; a streaming model's run."""

    path: Path
    blob: Blob
    runtime: base.Format | None = None
    where: Provenance | None = None
    streamed: StreamRun | None = None

    @property
    def called(self) -> str:
        """What a sentence calls it."""
        return "the blob" if self.runtime is None else self.path.name


def open_subject(path: Path, options: VerifyOptions) -> Subject:
    """The file to verify, read: a streaming model, a file of a format whose runtime runs it, or a blob."""
    runtime = runtime_format(path, options)
    if options.streaming:
        blob, streamed = open_streaming_file(path, options)
        return Subject(path, blob, runtime, None, streamed)
    if runtime is None:
        return Subject(path, open_blob(path, options))
    blob, where = open_runtime_file(path, runtime, options)
    return Subject(path, blob, runtime, where)


@dataclass
class Against:
    """The source verify compares with: its file, its format (None: the probe identify found the file's layout
    with, whose outputs the file must give for its input), and what is recorded of its RNN in it."""

    path: Path
    fmt: base.Format | None
    source: Provenance


def find_against(subject: Subject, options: VerifyOptions) -> tuple[Against | None, str, list[str]]:
    """The source to compare with (None where there is none), why it was taken or is missing (a sentence, or ""),
    and the warnings it gives (a source changed since, found elsewhere than recorded)."""
    path, runtime, source = subject.path, subject.runtime, subject.blob.source
    if options.require_stated and source.assumptions:
        raise BadInput(
            f"--require-stated: the blob was made assuming {source.assumptions[0]}, which its source does not store"
        )
    source_path: Path | None
    if options.against is not None:
        regular_file(options.against, "--against")
        source_path, why = options.against, ""
    else:
        source_path, why = find_source(path, source)
        if runtime is not None and not source.path:
            why = (
                f"{path.name} is a {runtime.title} file that records no source, so rnnconv did not write it (to "
                f"check a conversion from it, verify what `rnnconv convert {path} OUT` writes)"
            )
    if source_path is None:
        if options.require_source:
            raise BadInput(f"no numerical comparison is possible: {why} (give it with --against)")
        return None, why, []
    warnings = ([why] if why else []) + (source_changed(source, source_path) if options.against is None else [])
    if source.format == PROBE_KIND and options.against is None:  # identify -o wrote it: the probe is its source
        return Against(source_path, None, source), why, warnings
    fmt = _source_format(source_path, source, options.against is not None, options.raw_spec)
    blob_source = isinstance(fmt, base.WeightSpaceFormat)
    if runtime is not None and options.raw_spec is not None and not blob_source:  # they describe none
        raise BadInput(
            f"the raw-blob flags describe a cuDNN blob without a sidecar, and neither {path.name} nor its source "
            f"{source_path.name} is one: leave them out"
        )
    if options.against is not None:
        source = fmt.resolve(source_path, source, options.layer)
    elif blob_source:  # a blob's record names its RNN by its name in the blob, not as a layer
        source = fmt.resolve(source_path, source, None)
    if source.dtype is not None and source.dtype not in MANTISSA_BITS:  # the record is the file's: untrusted
        raise BadInput(
            f"{path} records its source's element type as {cut(source.dtype)!r}, none rnnconv knows "
            f"({', '.join(MANTISSA_BITS)})"
        )
    return Against(source_path, fmt, source), why, warnings


def choose_engine(subject: Subject, options: VerifyOptions) -> runtimes.Engine:
    """What runs the file: a streaming model's runtime fed in chunks, a runtime's file as written in its own
    runtime, else (a blob, or the weights read back from a runtime's file) the engine asked for."""
    runtime, where = subject.runtime, subject.where
    if subject.streamed is not None:
        return subject.streamed
    own = None if runtime is None else runtime.make_engine(None if options.backend == "auto" else options.backend)
    if runtime is not None and own is not None and where is not None:
        return FileRun(runtime, subject.path, where, own)  # the file itself, in its own runtime
    return select_engine(options.backend)


def open_blob(path: Path, options: VerifyOptions) -> Blob:
    (blob,) = pick_named(
        registry.weight_spaces().blobs(path, options.raw_spec),
        options.layer,
        path,
        or_else=", or verify them all with --all",
    )
    return blob


def runtime_format(path: Path, options: VerifyOptions) -> base.Format | None:
    """The format of a file its own runtime runs (an .onnx rnnconv wrote, ...), or None: a cuDNN blob, or a file
    verify cannot run (open_blob then says what it is). With the raw-blob flags, only a file its content says is of
    such a format is (the flags then describe its source, a raw blob); anything else is the raw blob they describe."""
    try:
        fmt = registry.detect(path) if options.raw_spec is None else registry.sniffed(Probe(path))
    except BadInput:
        return None
    return fmt if fmt is not None and fmt.engine is not None else None


def open_runtime_file(path: Path, fmt: base.Format, options: VerifyOptions) -> tuple[Blob, Provenance]:
    """The RNN of a runtime's file, read back as a weight space (for the checks and the diagnosis; its source is
    the one the file records), and where it is in the file (what the format's `run` is given)."""
    # a quantized file (rnnconv's --quantize, or another's) read as its dequantized weights, run as it is
    read = ReadOptions(layer=options.layer, hash_source=False, take_all=True, dequantize=True)
    with fmt.read(path, read) as found:
        (rnn,) = pick_named(found.rnns, options.layer, path, or_else=", or verify them all with --all")
        return registry.weight_spaces().in_memory(rnn, path, next(iter(fmt.info.kinds))), rnn.source


def open_streaming_file(path: Path, options: VerifyOptions) -> tuple[Blob, StreamRun]:
    """A streaming model loaded in its runtime, and the weight space of the source it records (a streaming file is
    checked by running it: its ops are not read back as an RNN)."""
    streamed = StreamRun(registry.detect(path), path, options.stream_runtime)
    source = streamed.stream.source
    if source is None:
        raise BadInput(
            f"{path.name} records no source, so rnnconv did not write it: verify --streaming checks the "
            f"streaming models rnnconv writes"
        )
    source_path, why = (options.against, "") if options.against is not None else find_source(path, source)
    if source_path is None:
        raise BadInput(f"no numerical comparison is possible: {why} (give it with --against)")
    fmt = _source_format(source_path, source, options.against is not None)
    if options.against is not None:
        source = fmt.resolve(options.against, source, options.layer)
    with fmt.read(source_path, fmt.source_options(source)) as found:
        blob = registry.weight_spaces().in_memory(found.rnns[0], path, next(iter(registry.detect(path).info.kinds)))
    blob.sidecar = blob.sidecar.model_copy(update={"source": source}) if blob.sidecar is not None else None
    return blob, streamed


def rnn_names(path: Path, options: VerifyOptions) -> list[str]:
    """The names of the RNNs a blob or a runtime's file holds (verify --all)."""
    runtime = runtime_format(path, options)
    if runtime is None:
        return [b.name for b in registry.weight_spaces().blobs(path, options.raw_spec)]
    with runtime.read(path, ReadOptions(hash_source=False, take_all=True, dequantize=True)) as found:
        return [rnn.name for rnn in found.rnns]


class FileRun:
    """A runtime's file run as it is, by its format's `run` in that runtime: what `verify FILE` compares."""

    def __init__(self, fmt: base.Format, path: Path, where: Provenance, engine: base.RuntimeEngine):
        self.fmt, self.path, self.where, self.engine = fmt, path, where, engine
        self.name = engine.name
        self.notes: list[str] = []
        self.how = ""

    def run(self, blob: Blob, inputs: Inputs) -> Outputs:
        got, self.how = self.engine.run_file(self.path, self.where, blob.spec, inputs)
        return got

    def describe(self) -> BackendInfo:
        ran = f"{self.how}, " if self.how else ""
        return BackendInfo(name=self.name, detail=f"{ran}{self.path.name} run as written")

    def versions(self) -> dict[str, str]:
        return self.engine.versions()


def structural_checks(blob: Blob) -> tuple[list[Check], list[str]]:
    """What can be checked without a source: size (checked on opening), values, description."""
    checks = [
        Check(check="size", ok=True, detail=f"{blob.words.size * blob.etype.itemsize} bytes = the spec's weight space")
    ]
    problems = []
    nonfinite = 0
    chunk = 1 << 22
    for start in range(0, blob.words.size, chunk):
        values = blob.decoded(start, start + chunk)
        nonfinite += count_non_finite(values)
    checks.append(
        Check(
            check="finite values",
            ok=nonfinite == 0,
            detail=f"{nonfinite} NaN or Inf values" if nonfinite else "all finite",
        )
    )
    if nonfinite:
        problems.append(f"the blob holds {nonfinite} NaN or Inf values")
    sidecar = blob.sidecar
    if sidecar is None:
        return checks, problems
    if sidecar.layout.name == REPORTED_LAYOUT_NAME:
        checks.append(Check(check="tensor table", ok=True, detail="offsets a GPU's cuDNN reported"))
    else:
        ok = sidecar.tensors == [r.entry(blob.etype.itemsize) for r in regions(blob.spec)]
        checks.append(
            Check(
                check="tensor table",
                ok=ok,
                detail="matches the layout" if ok else "differs from the layout this rnnconv computes",
            )
        )
        if not ok:
            problems.append("the sidecar's tensor offsets differ from the layout rnnconv computes for its spec")
    cudnn = sidecar.cudnn
    if cudnn is not None:
        spec = blob.spec
        ok = (
            cudnn.cudnnRNNMode_t == CUDNN_MODES[spec.mode][1]
            and cudnn.hiddenSize == spec.hidden_size
            and cudnn.inputSize == spec.input_size
            and cudnn.numLayers == spec.num_layers
            and cudnn.cudnnDirectionMode_t == DIRECTION[spec.bidirectional]
            and cudnn.cudnnDataType_t == blob.etype.cudnn
        )
        checks.append(
            Check(check="cuDNN settings", ok=ok, detail="agree with the spec" if ok else "contradict the spec")
        )
        if not ok:
            problems.append("the sidecar's cuDNN settings contradict its spec")
    if isinstance(blob.words, FileArray):  # a blob on disk: are its bytes those it was written with?
        checks.append(written_digest(blob.words, sidecar))
    return checks, problems


WRITTEN_DIGEST = "written digest"


def written_digest(words: FileArray, sidecar: Sidecar) -> Check:
    """The weight space's bytes against the digest its sidecar recorded when it was written: a blob changed since
    (a flipped bit that still computes within the tolerance) is said, whatever the verdict."""
    recorded = sidecar.weight_space.digest
    if recorded is None:
        return Check(
            check=WRITTEN_DIGEST,
            ok=True,
            detail=f"none recorded (a schema {sidecar.schema_version} sidecar, from an rnnconv before 0.4): a change "
            "since it was written cannot be told",
        )
    algorithm = recorded.partition(":")[0]
    differs = digest_differs(words.path, recorded, words.offset, words.nbytes)
    if differs is None:
        return Check(check=WRITTEN_DIGEST, ok=True, detail=f"{cut(algorithm)}, which this installation cannot compute")
    if differs:
        return Check(
            check=WRITTEN_DIGEST,
            ok=False,
            detail=f"the blob changed since it was written: its {algorithm} differs from the one its sidecar recorded",
        )
    return Check(check=WRITTEN_DIGEST, ok=True, detail=f"the bytes it was written with ({algorithm})")


def _source_format(path: Path, source: Provenance, against: bool, raw_spec: RNNSpec | None = None) -> base.Format:
    """The format of the source: a raw cuDNN blob (no format's file, nor a blob with a sidecar) where the raw-blob
    flags describe it (`raw_spec`), else what its content says (--against) or what the file records of it."""
    if raw_spec is not None and registry.sniffed(Probe(path)) is None:
        return registry.weight_spaces().described(raw_spec)
    return registry.detect(path) if against or not source.format else registry.for_kind(source.format)


SAME_RNN = ("input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")


def as_held(spec: RNNSpec, held: RNNSpec) -> RNNSpec:
    """`spec`, the RNN a file holds, as its source runs it: with the source's biases (a target may hold zero ones) and
    the source's reset placement (a deployed GRU may apply its reset gate before the product where the source's does
    not: what the audit diagnoses)."""
    return dataclasses.replace(spec, bias=held.bias, reset_after=held.reset_after)


def check_same_rnn(spec: RNNSpec, held: RNNSpec, path: Path, source: Path, against: bool) -> None:
    """Refuse a source whose RNN is not the one the file holds, in one sentence saying what each holds. Biases
    and the element type may differ: a target may hold zero biases, or another type, where its source does not."""
    if held.cell == spec.cell and all(getattr(held, f) == getattr(spec, f) for f in SAME_RNN):
        return
    ending = f"it is not the source of {path.name}" if against else f"{path.name} was not made from it as it is now"
    raise BadInput(
        f"{path.name} holds an RNN ({spec.describe()}), but {source.name} holds another ({held.describe()}): {ending}"
    )


def source_parts(source: Provenance, path: Path) -> list[Path]:
    """The other files of the source at `path` that its digest covers (`Format.source_parts` of its kind's format)."""
    if source.format is None:
        return []
    try:
        fmt = registry.for_kind(source.format)
    except Unsupported:  # a kind no format of this installation reads: its file alone
        return []
    return fmt.source_parts(path)


def source_changed(source: Provenance, path: Path) -> list[str]:
    """Warnings when the source named by the blob changed since it was converted, or when that cannot be told."""
    recorded = source.digest or (f"sha256:{source.sha256}" if source.sha256 else None)
    if recorded is None and source.format in registry.weight_spaces().info.kinds:
        return [f"a conversion from a cuDNN blob records no digest of it, so a change to {path} since cannot be told"]
    if recorded is None:
        return [f"the blob records no digest of {path} (converted with --no-hash), so a change since cannot be told"]
    parts = source_parts(source, path)
    differs = digest_differs(path, recorded, parts=parts)
    algorithm = recorded.partition(":")[0]
    if differs is None:
        return [
            f"the blob records a {algorithm} digest of {path}, which this installation cannot compute "
            "(pip install blake3)"
        ]
    if differs:
        what = f"{path} or a file read with it ({listing([part.name for part in parts])})" if parts else str(path)
        return [f"{what} changed since the blob was made ({algorithm} differs); comparing with the file as it is now"]
    return []


def find_source(blob: Path, source: Provenance) -> tuple[Path | None, str]:
    """The source a blob names: where it was, else beside the blob (as it was then, or by name).

    Returns the path and a sentence saying how it was found (empty when where it was), or None and
    why not. A path that names something other than a regular file is refused.
    """
    if not source.path:
        return None, "the blob names no source"
    recorded = Path(source.path)
    candidates = [(recorded, "")]
    for relative in (source.relative_path, recorded.name):
        if relative:
            beside = blob.parent / relative
            candidates.append(
                (beside, f"the source {recorded} is not there any more; using {beside}, found beside the blob")
            )
    for candidate, how in candidates:
        if os.path.lexists(candidate):
            regular_file(candidate, "the blob's source")
            return candidate, how
    return None, f"its source {recorded} is not here, nor beside the blob"
