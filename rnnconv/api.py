"""rnnconv as a Python library: the functions the command line is built on.

Every function takes `str` or `os.PathLike` paths, prints nothing, and raises the
typed errors of `rnnconv.errors` (`BadInput`, `Unsupported`, `BackendMissing`;
each carries the exit code the CLI uses). A verification that ran and disagrees
is not an error: its `Report` says `verdict == "mismatch"`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rnnconv.canonical import CanonicalRNN, RNNSpec
from rnnconv.contracts import ConversionResult, InspectReport, Report
from rnnconv.conversion import convert as _convert
from rnnconv.conversion import open_source
from rnnconv.errors import BadInput, RnnconvError
from rnnconv.formats import registry
from rnnconv.formats.registry import Progress, ReadOptions, WriteOptions
from rnnconv.safeio import SIDECAR_SUFFIX, check_writable, reading
from rnnconv.table.rows import DEFAULT_BIAS_SPLIT

if TYPE_CHECKING:
    from rnnconv.verification import Stage

PathLike = str | os.PathLike[str]


class RNNs(list[CanonicalRNN]):
    """The RNNs `load` read: a list, and a context manager that closes the file they read from.

    Their tensors are read on demand (`rnn.param(key)`, `rnn.arrays()`) while the file is
    open; it closes on `close()`, at the end of a `with` block, or when the list is dropped.
    """

    def __init__(self, rnns: list[CanonicalRNN], stack: ExitStack):
        super().__init__(rnns)
        self._stack = stack

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> RNNs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(
    path: PathLike,
    *,
    layer: str | None = None,
    all_rnns: bool = False,
    bias_split: str = DEFAULT_BIAS_SPLIT,
    nonlinearity: str | None = None,
    activation: str | None = None,
    recurrent_activation: str | None = None,
    spec: RNNSpec | None = None,
) -> RNNs:
    """The RNNs of a Keras, PyTorch, ONNX or cuDNN file, in cuDNN's convention (`CanonicalRNN`).

    `layer` picks one RNN by name (a Keras layer, `a,b,c` to stack consecutive Keras
    layers, a PyTorch module prefix, an ONNX node or `a,b` chain, a key of an
    rnnconv `.safetensors`); with several in
    the file and no `layer`, `all_rnns=True` returns every one that converts. `spec`
    describes a raw cuDNN weight space that has no sidecar.

        >>> with rnnconv.load("model.h5", layer="encoder") as (rnn,):
        ...     w_input_gate = rnn.param(ParamKey(0, 0, "W", "i"))
    """
    options = ReadOptions(
        layer=layer,
        bias_split=bias_split,
        nonlinearity=nonlinearity,
        activation=activation,
        recurrent_activation=recurrent_activation,
        raw_spec=spec,
        take_all=all_rnns,
    )
    stack = ExitStack()
    try:
        source = stack.enter_context(open_source(Path(path), options))
    except BaseException:
        stack.close()
        raise
    return RNNs(source.rnns, stack)


def raw_spec(
    mode: str | None,
    input_size: int | None,
    hidden_size: int | None,
    num_layers: int | None = 1,
    bidirectional: bool | None = False,
    proj_size: int | None = 0,
    dtype: str | None = None,
) -> RNNSpec | None:
    """The spec of a raw weight space stated piece by piece (the CLI's flags), or None when nothing is stated."""
    if mode is None and input_size is None and hidden_size is None:
        return None
    missing = [
        flag
        for flag, value in (("--mode", mode), ("--input-size", input_size), ("--hidden-size", hidden_size))
        if value is None
    ]
    if missing or mode is None or input_size is None or hidden_size is None:
        raise BadInput(f"a raw blob needs {', '.join(missing)} as well")
    return RNNSpec(
        mode, input_size, hidden_size, num_layers or 1, bool(bidirectional), proj_size or 0, dtype or "float32"
    )


def convert(
    source: PathLike,
    output: PathLike | None = None,
    *,
    to: str | None = None,
    layer: str | None = None,
    dtype: str | None = None,
    force: bool = False,
    bias_split: str = DEFAULT_BIAS_SPLIT,
    nonlinearity: str | None = None,
    activation: str | None = None,
    recurrent_activation: str | None = None,
    require_stated: bool = False,
    hash_source: bool = True,
    spec: RNNSpec | None = None,
    source_format: str | None = None,
    progress: Progress | None = None,
) -> ConversionResult:
    """Convert `source` to `output` (a cuDNN `.bin` beside the source by default) and say what was written.

    The source's format comes from its content (`source_format` insists on one); the target
    from `to` ("cudnn", "torch", "keras") or the output's name. An existing output is
    replaced only with `force`. `dtype` converts the elements (default: the source's);
    `spec` describes a raw weight space without a sidecar. What a file does not store (an
    nn.RNN's `nonlinearity`, a bare Keras file's `activation` and `recurrent_activation`) is
    taken from these arguments, or assumed and recorded (`require_stated` refuses to assume).
    `hash_source=False` leaves the source's digest out of the output's description.
    """
    options = ReadOptions(
        layer=layer,
        bias_split=bias_split,
        nonlinearity=nonlinearity,
        activation=activation,
        recurrent_activation=recurrent_activation,
        require_stated=require_stated,
        raw_spec=spec,
        hash_source=hash_source,
    )
    return _convert(
        Path(source),
        None if output is None else Path(output),
        to,
        options,
        WriteOptions(dtype=dtype, force=force, progress=progress),
        expect=source_format,
    )


def verify(
    blob: PathLike,
    *,
    against: PathLike | None = None,
    report: PathLike | None = None,
    junit: PathLike | None = None,
    plot: PathLike | None = None,
    stage: Stage | None = None,
    **options: Any,
) -> Report:
    """Run a cuDNN blob and its source model on the same inputs and compare: the report holds the verdict.

    `options` are those of `VerifyOptions` (backend, seq_len, batch, seed, ragged, atol, rtol,
    layer, raw_spec, require_source, diagnose, relayout, force). With `report`, the report is
    also written there as JSON, with `junit` as JUnit XML (both also when verify cannot run), and
    with `plot` its per-step errors are drawn (.svg or .png; needs matplotlib). No file is replaced
    without `force`. `stage` is told what verify starts doing next.
    """
    from rnnconv.verification import VerifyOptions, failed_report, write_outputs, writers
    from rnnconv.verification import verify as _verify  # its engines and writers: not on a conversion's path

    settings = VerifyOptions(against=None if against is None else registry.source_file(Path(against)), **options)
    inputs_read = [Path(blob), *([settings.against] if settings.against else [])]
    report_path, junit_path, picture = (None if p is None else Path(p) for p in (report, junit, plot))
    written = False
    with ExitStack() as inputs:  # no output (report, relayout) may be written over the blob or the source
        try:
            for read in inputs_read:
                inputs.enter_context(reading(read))
            check_writable([p for p in (report_path, junit_path, picture) if p is not None], settings.force)
            if picture is not None:
                from rnnconv.plot import check_plot

                check_plot(picture)
            result = _verify(Path(blob), settings, stage)
            if picture is not None and result.comparison is None:
                result.warnings.append(f"nothing was compared step by step, so {picture} was not drawn")
                picture = None
            chosen = writers(result, report_path, junit_path, picture)
            if chosen:
                if result.source and os.path.lexists(result.source.path):
                    inputs.enter_context(reading(Path(result.source.path)))
                written = True
                write_outputs(chosen, settings.force)
        except Exception as exc:  # a CI step that asked for a report gets one, saying why verify could not run
            report_left, junit_left = (
                None if p is None or _names_an_input(p, inputs_read) else p for p in (report_path, junit_path)
            )
            if not written and (report_left or junit_left):
                with contextlib.suppress(RnnconvError):  # e.g. a report that exists, without --force: left as is
                    failed = failed_report(Path(blob), exc)
                    write_outputs(writers(failed, report_left, junit_left, None), settings.force)
            raise
    return result


def _names_an_input(path: Path, inputs: list[Path]) -> bool:
    """Whether `path` is an input or its sidecar (whether they exist or not: a failed read may not have
    registered them as sources)."""
    names = {p.resolve() for read in inputs for p in (read, read.with_name(read.name + SIDECAR_SUFFIX))}
    return path.resolve() in names


def inspect(path: PathLike) -> InspectReport:
    """Every RNN in a file: its spec, its class, and whether it converts (why not)."""
    path = registry.source_file(Path(path))
    return registry.detect(path).inspect(path)


def formats() -> Iterator[str]:
    """The names of the formats rnnconv reads and writes."""
    return (fmt.name for fmt in registry.formats())
