"""The command line's one option set: every option's name, type, default and help, declared once.

Commands take their parameters from here (`parameter(name)`), so the same thing has
the same name and help everywhere; the choices come from the layout table and the formats' plugins.
"""

from __future__ import annotations

import inspect
import os
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from rnnconv.formats.catalog import ENGINES, FORMAT_INFO
from rnnconv.formats.setting_fields import READ_FIELDS, TARGET_FIELDS, WRITE_FIELDS
from rnnconv.table.constants import CUDNN_MODES, ELEMENT_TYPE_CODES, MAX_LAYERS, NONLINEARITIES
from rnnconv.table.rows import ADAPTER_FORMATS


def choices(name: str, values: Any) -> Any:
    return Enum(name, {value: value for value in values}, type=str)


DType, Mode = choices("DType", ELEMENT_TYPE_CODES), choices("Mode", CUDNN_MODES)
Nonlinearity, Target, Engine = (
    choices("Nonlinearity", NONLINEARITIES),
    choices("Target", [name for name in ADAPTER_FORMATS if FORMAT_INFO[name].writes]),
    choices("Engine", ENGINES),
)
# A source's and a target's options are the fields of the library's settings; their choices come from the table (or
# from the setting's own declaration: a bias split, an ONNX consumer).
CHOICES = {"nonlinearity": Nonlinearity, "dtype": DType, "to": Target}


def _declared() -> dict[str, tuple[Any, Any, tuple[str, ...], str, dict[str, Any]]]:
    options: dict[str, tuple[Any, Any, tuple[str, ...], str, dict[str, Any]]] = {}
    for name, setting in {**READ_FIELDS, **WRITE_FIELDS, **TARGET_FIELDS}.items():
        declared = choices(name.title().replace("_", ""), setting.choices) if setting.choices else None
        choice: Any = CHOICES.get(name, declared)
        annotation = setting.annotation if choice is None else choice
        if choice is not None and setting.default is None:
            annotation = choice | None
        options[name] = (annotation, setting.default, setting.flags, setting.help, {})
    return options


RAW = ("mode", "input_size", "hidden_size", "num_layers", "bidirectional", "proj_size")
COMMON = ("json", "quiet", "verbose")
# Every option, once: name -> (type, default, flags, help, extra typer settings).
OPTIONS: dict[str, tuple[Any, Any, tuple[str, ...], str, dict[str, Any]]] = {
    "output": (str | None, None, ("-o", "--output"), "Output file; its name says what to write.", {}),
    "jobs": (
        int,
        1,
        ("-j", "--jobs"),
        "With several sources: convert this many at once, each in a process of its own.",
        {"min": 1},
    ),
    "all": (bool, False, ("--all",), "Verify every RNN of an rnnconv .safetensors, one row each.", {}),
    "prefix": (str | None, None, ("--prefix",), "Old name of --layer.", {"hidden": True}),
    "mode": (Mode | None, None, ("--mode",), "Raw blob without sidecar: the RNN mode.", {}),
    "input_size": (int | None, None, ("--input-size",), "Raw blob: input size.", {"min": 1}),
    "hidden_size": (int | None, None, ("--hidden-size",), "Raw blob: hidden size.", {"min": 1}),
    "num_layers": (int, 1, ("--num-layers",), "Raw blob: number of layers.", {"min": 1, "max": MAX_LAYERS}),
    "bidirectional": (bool, False, ("--bidirectional",), "Raw blob: two directions.", {}),
    "proj_size": (int, 0, ("--proj-size",), "Raw blob: LSTM projection size (0: none).", {"min": 0}),
    "quick": (
        bool,
        False,
        ("--quick",),
        "gpu-battery: run the marked subset (a configuration of each kind; under a minute) instead of all.",
        {},
    ),
    "no_hash": (
        bool,
        False,
        ("--no-hash",),
        "Do not record the source's digest (blake3) in the output's description; verify then cannot tell "
        "whether the source changed since.",
        {},
    ),
    "from_format": (str | None, None, ("--from",), "Picture: the source format (or give FORMAT first).", {}),
    "svg": (Path | None, None, ("--svg",), "Picture: write it as SVG to this file (not to the terminal).", {}),
    "html": (Path | None, None, ("--html",), "Picture: write it as HTML to this file (not to the terminal).", {}),
    "json": (bool, False, ("--json",), "Print the result as JSON on stdout.", {}),
    "quiet": (bool, False, ("-q", "--quiet"), "Print only warnings and errors (and verify's verdict).", {}),
    "verbose": (bool, False, ("-v", "--verbose"), "Say more: where things came from, every step's error.", {}),
    "against": (
        Path | None,
        None,
        ("--against",),
        "The source model (a file of any format whose framework verify runs) [default: the one the blob names].",
        {},
    ),
    "backend": (
        Engine,
        "auto",
        ("--backend",),
        "Where the blob runs; auto: cuDNN when a GPU and the gpu extra are present, else the numpy reference.",
        {},
    ),
    "stream_runtime": (
        str | None,
        None,
        ("--stream-runtime",),
        "verify --streaming: the runtime that runs the streaming model: "
        + "; ".join(f"{' or '.join(info.streams)} ({info.title})" for info in FORMAT_INFO.values() if info.streams)
        + " [default: the format's own; rnnconv doctor says which are installed].",
        {},
    ),
    "seq_len": (int, 8, ("--seq-len",), "Time steps of the test input (at least 2).", {}),
    "batch": (int, 3, ("--batch",), "Batch size of the test input.", {}),
    "seed": (int, 0, ("--seed",), "Seed of the test input and initial states.", {"min": 0}),
    "ragged": (bool, False, ("--ragged",), "Give the batch items different lengths (right padding).", {}),
    "atol": (float | None, None, ("--atol",), "Absolute tolerance [default: by dtype and backend].", {"min": 0}),
    "rtol": (float | None, None, ("--rtol",), "Relative tolerance [default: by dtype and backend].", {"min": 0}),
    "report": (Path | None, None, ("--report",), "Also write the report as JSON to this file.", {}),
    "junit": (
        Path | None,
        None,
        ("--junit",),
        "Also write the result as JUnit XML to this file, for a CI's test report (written like --report, also "
        "when verify cannot run).",
        {},
    ),
    "summary": (
        Path | None,
        None,
        ("--summary",),
        "Also write the result as a markdown table to this file, one row per RNN (verdict, largest difference, "
        "diagnosis): a CI job's summary (written like --report, also when verify cannot run).",
        {},
    ),
    "plot": (
        Path | None,
        None,
        ("--plot",),
        "Draw the largest error at each time step (.svg or .png); needs pip install 'rnnconv[plot]'.",
        {},
    ),
    "allow_structure_only": (
        bool,
        False,
        ("--allow-structure-only",),
        "Accept a structure check alone (exit 0) when the blob's source is nowhere to be found; by default that "
        "fails (exit 2): a verdict without numbers proves nothing.",
        {},
    ),
    "accept_recorded_loss": (
        bool,
        False,
        ("--accept-recorded-loss",),
        "Accept (exit 0) a file written with --allow-lossy that differs from its source by what its record says was "
        "dropped, and by nothing more (verdict lossy-as-recorded); by default that fails (exit 1). A difference "
        "beyond the recorded loss is a mismatch either way.",
        {},
    ),
    "bound": (
        float | None,
        None,
        ("--bound",),
        "A file written with --quantize: the largest difference from its float source allowed end to end (the "
        "third of its proof's terms) [default: the bound derived from its weights' rounding and its kernel's, "
        "recorded in the report].",
        {},
    ),
    "runtime_config": (
        str | None,
        None,
        ("--runtime-config",),
        "How the deployed file's runtime is set up where it is deployed, as a JSON object (an OpenVINO IR: "
        "compile_model's properties, e.g. '{\"LP_TRANSFORMS_MODE\": false}'): the file's own graph is compiled so "
        'for the check "as deployed in OpenVINO" [default: the runtime\'s defaults].',
        {},
    ),
    "convert": (
        bool,
        False,
        ("--convert",),
        "First make the blob from the --against model (its RNN --layer), as convert would; a conversion that fails "
        "is reported like a verify that cannot run (--report, --junit): one call for a CI step.",
        {},
    ),
    "probe": (
        Path | None,
        None,
        ("--probe",),
        "identify: an .npz of one input and the outputs the blob's model gives for it (x, optional h0, c0, lengths; "
        "y, h_n and/or c_n; x and y sequence-major or batch-major, as Keras gives them: the shapes tell, else both "
        "are tried; a batch_first key says which); the layout that reproduces them is named, and -o records it.",
        {},
    ),
    "candidate": (
        str | None,
        None,
        ("--candidate",),
        "identify: keep only the layout with this id (as identify lists them), e.g. to write it with -o.",
        {},
    ),
    "require_source": (bool, False, ("--require-source",), "Old name of the default.", {"hidden": True}),
    "diagnose": (bool, True, ("--diagnose/--no-diagnose",), "On a mismatch, look for the mistake.", {}),
    "relayout": (
        Path | None,
        None,
        ("--relayout",),
        "With --backend cudnn: when cuDNN places tensors elsewhere, write the blob in cuDNN's layout to this file.",
        {},
    ),
    **_declared(),
}


# How --help shows an option's value where typer would show a Python type (<str>, <int range>, <list[str]>): what it
# is, by its name, else by its type. Choices and paths are typer's own (<lstm|gru|...>, <path>).
VALUE_WORDS = {
    "output": "<path>",
    "layer": "<name>",
    "prefix": "<name>",
    "activation": "<name>",
    "recurrent_activation": "<name>",
    "to": "<format>",
    "from_format": "<format>",
    "stream_runtime": "<runtime>",
    "runtime_config": "<json>",
    "candidate": "<id>",
}
TYPE_WORDS = {int: "<n>", float: "<number>", str: "<text>"}


def value_word(name: str, annotation: Any) -> str | None:
    """The word --help shows for an option's value (None: typer's own, for a choice, a path or a flag)."""
    bare = next((a for a in typing.get_args(annotation) if a is not type(None)), annotation)  # X | None, list[X]
    return VALUE_WORDS.get(name) or TYPE_WORDS.get(bare)


def parameter(name: str, **override: Any) -> inspect.Parameter:
    """A command parameter from OPTIONS (an Argument when `argument=True`), with per-command overrides."""
    annotation, default, flags, text, extra = OPTIONS.get(name, (Path, ..., (), "", {}))
    annotation = override.pop("annotation", annotation)
    if override.pop("argument", False):
        info = typer.Argument(
            override.pop("default", default),
            metavar=override.pop("metavar", name.upper()),
            show_default=False,
            help=override.pop("help", text),
            **override,
        )
    else:
        default = override.pop("default", default)
        info = typer.Option(
            default,
            *flags,
            help=override.pop("help", text),
            show_default=default is not None and default is not False,
            metavar=override.pop("metavar", value_word(name, annotation)),
            **{**extra, **override},
        )
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


def sources_and_output(
    named: list[Any], output: str | None, source_format: str | None, target: str
) -> tuple[list[Path], str | None]:
    """A conversion's sources and output as its command line gives them. `convert`'s last argument is its output
    unless -o gives it. A SOURCE-to-TARGET command takes its output with -o only: a source that does not exist,
    named as the target's outputs are and not as the source format's, is refused as that output without -o."""
    from rnnconv.errors import BadInput
    from rnnconv.formats import registry

    sources = [Path(name) for name in named]
    if source_format is None:  # convert
        if output is None and len(named) < 2:
            raise BadInput(f"convert needs an output: rnnconv convert {named[0]} OUTPUT, or -o OUTPUT")
        return (sources, output) if output is not None else (sources[:-1], str(named[-1]))  # DIR/ keeps its /
    for source in sources:
        like_output = source.name.endswith(FORMAT_INFO[target].default_for)
        own = source.name.endswith(FORMAT_INFO[source_format].default_for)
        if like_output and not own and not os.path.lexists(source) and registry.source_file(source) == source:
            raise BadInput(
                f"{source} does not exist, and its name is an output's: did you mean -o {source}? (the output "
                f"is given with -o/--output; the other arguments are sources)"
            )
    return sources, output


def source_options(fmt: str) -> list[str]:
    """The options that apply to a format's files as sources (the table's row names them)."""
    names: list[str] = []
    for option in FORMAT_INFO[fmt].source_options:
        names += [*RAW, "dtype"] if option == "raw_spec" else [option]
    return names


def direction_options(source: str, target: str) -> list[str]:
    """The options of a SOURCE-to-TARGET command after its sources, output and --layer/--prefix: the element type,
    the source format's, the target's (--into, --streaming), then every conversion's."""
    info = FORMAT_INFO[target]
    targets = (
        (["into"] if info.writes_into else [])
        + (["streaming", "chunk"] if info.streams else [])
        + (["quantize"] if info.holds.quantizes else [])
    )
    return ["dtype", *(o for o in source_options(source) if o != "dtype"), *targets, *CONVERSION_TAIL]


# What every conversion command ends with.
CONVERSION_TAIL = ["jobs", "force", "allow_lossy", "profile", "no_hash", "require_stated", *COMMON]
VERIFY_OPTIONS = [
    "against",
    "convert",
    "layer",
    "all",
    "backend",
    "seq_len",
    "batch",
    "seed",
    "ragged",
    "streaming",
    "stream_runtime",
    "atol",
    "rtol",
    "bound",
    "runtime_config",
    "report",
    "junit",
    "summary",
    "plot",
    "allow_structure_only",
    "accept_recorded_loss",
    "require_stated",
    "require_source",
    "diagnose",
    "relayout",
    "force",
    *RAW,
]
# verify-changed: verify's options that name no RNN and no source (each file verified names its own).
VERIFY_CHANGED_OPTIONS = [
    "backend",
    "seq_len",
    "batch",
    "seed",
    "ragged",
    "atol",
    "rtol",
    "report",
    "junit",
    "summary",
    "allow_structure_only",
    "accept_recorded_loss",
    "require_stated",
    "diagnose",
    "force",
]
VERIFY_CHANGED_HELP = (
    "Verify every file rnnconv wrote that a change to FILES touches, against the source it records: each of FILES "
    "rnnconv wrote (a blob, an .onnx, ...; or whose sidecar, weights or record beside it changed), and each file git "
    "tracks that was made from one of FILES. What the pre-commit hook runs; the exit code is the worst of the "
    "verdicts, 0 when nothing is to verify.\n\nExamples:\n\n  rnnconv verify-changed models/encoder.bin\n\n"
    "  rnnconv verify-changed train.pt --seq-len 16 --summary verify-summary.md"
)
VERIFY_HELP = (
    "Prove a converted blob computes what its source model computes: a verdict, a report and an exit code.\n\n"
    "The source runs in its own framework on the CPU; the blob runs through cuDNN, or without a GPU through a numpy "
    "reference of cuDNN's equations that reads every weight from the blob; a file written for a runtime (model.onnx, "
    "...) runs as written in that runtime. Outputs, final h and c are compared overall, per time step and per layer "
    "and direction; on a mismatch the likely mistake is named. A file written with --allow-lossy that loses what its "
    "record says and no more is lossy-as-recorded.\n\nExit codes: 0 match (or lossy-as-recorded with "
    "--accept-recorded-loss), 1 mismatch, lossy-as-recorded or (auditing) an RNN not found, 2 bad input or no source "
    "to compare with (unless --allow-structure-only), 3 the requested backend (or matplotlib, for --plot) is "
    "unavailable, 4 internal error (a bug: rerun with RNNCONV_DEBUG=1 and report it).\n\nExamples:\n\n"
    "  rnnconv verify model.bin\n\n"
    "  rnnconv verify model.bin --against model.h5 --report verify-report.json --junit verify-junit.xml\n\n"
    "  rnnconv verify model.bin --backend cudnn --seq-len 16 --batch 4 --ragged\n\n  rnnconv verify model.onnx\n\n"
    "Auditing a deployed model against its checkpoint (every RNN of either, paired by position and sizes or by "
    "--layer DEPLOYED=CHECKPOINT; one row each: match, mismatch with its likely cause, or not-found):\n\n"
    "  rnnconv verify model.onnx --against train.pt"
)
IDENTIFY_HELP = (
    "Name the layout of a headerless weight blob, from its size and (--probe) from what it computes.\n\n"
    "Every layout of the layout table (every format's gate orders, MIOpen's and TensorRT's among them: rnnconv "
    "explain; matrices as rows or transposed; separate, concatenated, folded or no biases), packed every known way "
    "(cuDNN's all matrices then all biases, cell by cell, ...), is sized for the stated spec, and those that fit the "
    "blob's size are listed. With --probe (one input and the outputs the "
    "blob's model gives for it) each runs through the numpy reference of cuDNN's equations and the one that "
    "reproduces the outputs is named. The result says how to convert from it; -o writes it (as convert does).\n\n"
    "The probe .npz holds x (T, B, I), optional h0 (L*D, B, H or P), c0 (L*D, B, H) and lengths (B,), and the "
    "expected y (T, B, D*H or D*P), h_n and/or c_n. x and y may be batch-major, (B, T, ...), as Keras and JAX give "
    "them: the shapes tell which way (both are tried where they fit either), or a key batch_first=True or False "
    "says it. A file -o writes records the probe: rnnconv verify compares it with the probe's outputs.\n\n"
    "Exit codes: 0 one layout identified, 1 several fit (ambiguous) or none does, 2 bad input, 3 a backend that -o "
    "needs is missing, 4 internal error (a bug: rerun with RNNCONV_DEBUG=1 and report it).\n\nExamples:\n\n"
    "  rnnconv identify weights.raw --mode lstm --input-size 80 --hidden-size 256 --num-layers 2 --bidirectional\n\n"
    "  rnnconv identify weights.raw --mode gru --input-size 40 --hidden-size 64 --probe probe.npz -o model.pt"
)


def verify_parameters() -> list[inspect.Parameter]:
    """verify's options: its --layer may be given several times, as pairs DEPLOYED=CHECKPOINT (the audit)."""
    layer = parameter(
        "layer",
        annotation=list[str] | None,
        help="The RNN to verify when the file holds several (its name as inspect lists it); or, auditing a deployed "
        "model against its checkpoint (--against), a pair DEPLOYED=CHECKPOINT of RNN names, as often as needed "
        "(the others are paired by position and sizes).",
    )
    streaming = parameter(
        "streaming",
        help="The file is a streaming model rnnconv wrote (convert --streaming): feed it the sequence in chunks of 1, "
        "3 and 7 steps (or of its --chunk), its states carried from call to call, and compare with the source run on "
        "the whole sequence.",
    )
    given = {"layer": layer, "streaming": streaming}
    return [given.get(name) or parameter(name) for name in VERIFY_OPTIONS]


INSPECT_HELP = (
    "List every recurrent network in a file: its class, its cuDNN spec, and whether it converts (why not; with --to, "
    "to that format's files).\n\nExamples:\n\n  rnnconv inspect model.h5\n\n  rnnconv inspect model.h5 --to tflite"
    "\n\n  rnnconv inspect model.onnx --profile tensorrt"
)


def inspect_parameters() -> list[inspect.Parameter]:
    source = parameter("source", argument=True, help="Any file rnnconv reads.")
    to = parameter("to", help="Say whether each RNN converts to this format, as a conversion to it would refuse it.")
    return [source, to, *map(parameter, ("profile", *COMMON))]


def pick(values: dict[str, Any]) -> str | None:
    """--layer, or its old name --prefix."""
    from rnnconv.errors import BadInput

    layer, prefix = values.pop("layer", None), values.pop("prefix", None)
    if layer is not None and prefix is not None and layer != prefix:
        raise BadInput("--layer and its old name --prefix name different RNNs; give one")
    return layer if layer is not None else prefix


def verify_changed_parameters() -> list[inspect.Parameter]:
    files = parameter(
        "files",
        argument=True,
        annotation=list[Path],
        metavar="FILE",
        help="Files a change touched (what pre-commit passes): written files, their parts, or their sources.",
    )
    return [files, *map(parameter, (*VERIFY_CHANGED_OPTIONS, *COMMON))]


def identify_parameters() -> list[inspect.Parameter]:
    blob = parameter("blob", argument=True, help="A flat blob of weights with no header (any name).")
    dtype = parameter("dtype", help="The blob's element type [default: every one is tried].")
    return [
        blob,
        *map(parameter, ["probe", "candidate", *RAW]),
        dtype,
        *map(parameter, ["output", "to", "force", *COMMON]),
    ]


ALL_SOURCE_OPTIONS = list(dict.fromkeys(o for f in ADAPTER_FORMATS for o in source_options(f)))
