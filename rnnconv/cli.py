"""The `rnnconv` command line.

Imports stay lazy: `rnnconv --help` and a converter run load only what they use,
and no command imports a framework it does not need.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console

from rnnconv import __version__
from rnnconv.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, RnnconvError

EXIT_CODES_HELP = (
    "Exit codes: 0 done, 1 verification mismatch, 2 bad or unsupported input, "
    "3 a needed backend is missing, 4 internal error (a bug: rerun with RNNCONV_DEBUG=1 and report it)."
)

app = typer.Typer(
    name="rnnconv",
    help="Convert recurrent-network weights (GRU, LSTM, simple RNN) between Keras, PyTorch and NVIDIA cuDNN's "
         "flat weight space, and prove the result right.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)
err = Console(stderr=True, highlight=False)
out = Console(highlight=False)


class DType(str, Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float64 = "float64"


class BiasSplit(str, Enum):
    recurrent = "recurrent"
    input = "input"
    half = "half"


def handles_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every failure into one sentence on stderr and a documented exit code."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        except RnnconvError as exc:
            err.print(f"[bold red]error:[/] {_escape(str(exc))}")
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:
            where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
            err.print(f"[bold red]error:[/] cannot read or write{where}: {_escape(exc.strerror or str(exc))}")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except MemoryError:
            err.print("[bold red]error:[/] out of memory")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:
            err.print("interrupted; no output was left behind")
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 -- a bug must still not print a traceback
            if os.environ.get("RNNCONV_DEBUG"):
                raise
            err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {_escape(str(exc))} "
                      "(a bug in rnnconv; rerun with RNNCONV_DEBUG=1 for the traceback and report it)")
            raise typer.Exit(EXIT_INTERNAL) from None

    return run


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _version(value: bool) -> None:
    if value:
        out.print(f"rnnconv {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass


def _report_conversion(result: Any, as_json: bool, quiet: bool) -> None:
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    for name, why in result.skipped:
        err.print(f"[yellow]skipped[/] {_escape(name)}: {_escape(why)}")
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {_escape(warning)}")
    if quiet:
        return
    for rnn in result.rnns:
        for note in rnn.notes:
            err.print(f"[dim]note:[/] {_escape(note)}")
        out.print(f"{_escape(rnn.name)}: {_escape(rnn.spec.describe().replace(rnn.spec.dtype, result.dtype))}")
    out.print("wrote " + ", ".join(_escape(str(p)) for p in result.outputs))
    if result.usage:
        out.print(_escape(result.usage), soft_wrap=True)  # code to copy: never wrapped


class Mode(str, Enum):
    lstm = "lstm"
    gru = "gru"
    rnn_tanh = "rnn_tanh"
    rnn_relu = "rnn_relu"


class Nonlinearity(str, Enum):
    tanh = "tanh"
    relu = "relu"


class Target(str, Enum):
    cudnn = "cudnn"
    torch = "torch"
    keras = "keras"


SOURCE_HELP = "Keras file (.h5, .weights.h5, .keras), PyTorch checkpoint (.pt, .pth, .bin, .safetensors) or cuDNN blob."
OUTPUT_OPTION = typer.Option(None, "-o", "--output", help="Output file; its name says the format (see the examples).")
LAYER_OPTION = typer.Option(None, "--layer", help="The RNN to convert when the file has several: a Keras layer name "
                                                  "(or consecutive ones, a,b,c, stacked into one multi-layer RNN), "
                                                  "a PyTorch module prefix, or a key of an rnnconv .safetensors.")
PREFIX_OPTION = typer.Option(None, "--prefix", help="The RNN's module prefix in the state_dict (encoder.rnn) when "
                                                    "there are several.")
DTYPE_OPTION = typer.Option(None, "--dtype", help="Element type of the output [default: the source's]; for a raw blob "
                                                  "without sidecar, the blob's (and the output's).")
BIAS_SPLIT_OPTION = typer.Option(BiasSplit.recurrent, "--bias-split",
                                 help="How a single Keras bias (LSTM, SimpleRNN) becomes cuDNN's two: recurrent = "
                                      "what Keras' TF backend hands cuDNN (input side zero); input; half.")
NONLINEARITY_OPTION = typer.Option(Nonlinearity.tanh, "--nonlinearity",
                                   help="nn.RNN's nonlinearity, which a state_dict does not store.")
FORCE_OPTION = typer.Option(False, "--force", help="Replace existing output files.")
JSON_OPTION = typer.Option(False, "--json", help="Print the result as JSON on stdout.")
QUIET_OPTION = typer.Option(False, "--quiet", "-q", help="Print only warnings and errors.")
MODE_OPTION = typer.Option(None, "--mode", help="Raw blob without sidecar: the RNN mode.", rich_help_panel="Raw blob")
INPUT_OPTION = typer.Option(None, "--input-size", help="Raw blob: input size.", rich_help_panel="Raw blob")
HIDDEN_OPTION = typer.Option(None, "--hidden-size", help="Raw blob: hidden size.", rich_help_panel="Raw blob")
LAYERS_OPTION = typer.Option(1, "--num-layers", help="Raw blob: number of layers.", rich_help_panel="Raw blob")
BIDI_OPTION = typer.Option(False, "--bidirectional", help="Raw blob: two directions.", rich_help_panel="Raw blob")
PROJ_OPTION = typer.Option(0, "--proj-size", help="Raw blob: LSTM projection size (0 = none).",
                           rich_help_panel="Raw blob")


def _raw_spec(mode: Optional[Mode], input_size: Optional[int], hidden_size: Optional[int], num_layers: int,
              bidirectional: bool, proj_size: int, dtype: Optional[DType]) -> Any:
    """The spec a raw blob's flags state, or None when no flag was given (the sidecar then says)."""
    if mode is None and input_size is None and hidden_size is None:
        return None
    from rnnconv.canonical import RNNSpec
    from rnnconv.errors import BadInput

    missing = [flag for flag, value in (("--mode", mode), ("--input-size", input_size),
                                         ("--hidden-size", hidden_size)) if value is None]
    if missing:
        raise BadInput(f"a raw blob needs {', '.join(missing)} as well")
    return RNNSpec(mode.value, input_size, hidden_size, num_layers, bidirectional, proj_size,
                   dtype.value if dtype else "float32")


def _convert(source: Path, output: Optional[Path], to: Optional[str], expect: Optional[str], select: Optional[str],
             dtype: Optional[DType], force: bool, as_json: bool, quiet: bool, bias_split: BiasSplit = BiasSplit.recurrent,
             nonlinearity: Nonlinearity = Nonlinearity.tanh, raw_spec: Any = None) -> None:
    from rnnconv.convert import SourceOptions, convert

    options = SourceOptions(select, bias_split.value, nonlinearity.value, raw_spec)
    with _progress_bar(enabled=not (quiet or as_json)) as progress:
        result = convert(source, output, to, options,
                         None if raw_spec is not None else (dtype.value if dtype else None), force, expect, progress)
    _report_conversion(result, as_json, quiet)


PROGRESS_FROM_BYTES = 64 << 20  # smaller weight spaces are written before a bar could help


@contextlib.contextmanager
def _progress_bar(enabled: bool) -> Any:
    """A progress callback (bytes written, total) that shows a bar on a terminal for large weight spaces."""
    if not (enabled and err.is_terminal):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress("writing", BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                   console=err, transient=True)
    task = None

    def advance(nbytes: int, total: int) -> None:
        nonlocal task
        if total < PROGRESS_FROM_BYTES:
            return
        if task is None:
            bar.start()
            task = bar.add_task("write", total=total)
        bar.advance(task, nbytes)

    try:
        yield advance
    finally:
        if task is not None:
            bar.stop()


@app.command("keras-to-cudnn")
@handles_errors
def keras_to_cudnn(
    source: Path = typer.Argument(..., help="Keras file: legacy .h5 (Keras 2, tf-keras, Keras 3), "
                                            ".weights.h5 or .keras."),
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="X.bin (raw weight space + X.bin.json sidecar) or X.safetensors. "
                                               "Default: the source's name with .bin, beside it."),
    layer: Optional[str] = typer.Option(None, "--layer", help="Name of the recurrent layer to convert (needed when "
                                                               "the file has several); a,b,c stacks consecutive "
                                                               "layers into one multi-layer cuDNN RNN."),
    dtype: Optional[DType] = typer.Option(None, "--dtype", help="Element type of the weight space "
                                                                 "[default: the source's]."),
    bias_split: BiasSplit = BIAS_SPLIT_OPTION,
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Convert a Keras recurrent layer to cuDNN's flat weight space.

    Reads the file with h5py alone: TensorFlow and Keras need not be installed.

    Examples:

      rnnconv keras-to-cudnn model.h5 -o model.bin

      rnnconv keras-to-cudnn model.keras --layer encoder_gru -o enc.bin --dtype float16

      rnnconv keras-to-cudnn model.h5 -o all_rnns.safetensors

      rnnconv keras-to-cudnn model.h5 --layer lstm_1,lstm_2,lstm_3 -o stacked.bin
    """
    _convert(source, output, "cudnn", "keras", layer, dtype, force, as_json, quiet, bias_split=bias_split)


@app.command("torch-to-cudnn")
@handles_errors
def torch_to_cudnn(
    source: Path = typer.Argument(..., help="PyTorch checkpoint: .pt/.pth/.bin from torch.save, or a .safetensors "
                                            "state_dict."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="X.bin (+ X.bin.json) or X.safetensors. "
                                                                       "Default: the source's name with .bin."),
    prefix: Optional[str] = PREFIX_OPTION,
    nonlinearity: Nonlinearity = NONLINEARITY_OPTION,
    dtype: Optional[DType] = typer.Option(None, "--dtype", help="Element type of the weight space "
                                                                 "[default: the source's]."),
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Convert an nn.LSTM / nn.GRU / nn.RNN (or cell) from a PyTorch checkpoint to cuDNN's flat weight space.

    Checkpoints load with torch.load(weights_only=True): nothing but tensors is ever unpickled. The RNN is found
    by its parameter names (weight_ih_l0, ...); mode, sizes, layers, directions and projection come from the
    names and shapes.

    Examples:

      rnnconv torch-to-cudnn ckpt.pt -o lstm.bin

      rnnconv torch-to-cudnn ckpt.pt --prefix encoder.rnn -o enc.bin

      rnnconv torch-to-cudnn rnn.pt --nonlinearity relu -o rnn.bin
    """
    _convert(source, output, "cudnn", "torch", prefix, dtype, force, as_json, quiet, nonlinearity=nonlinearity)


@app.command("cudnn-to-torch")
@handles_errors
def cudnn_to_torch(
    source: Path = typer.Argument(..., help="cuDNN blob: X.bin with its X.bin.json sidecar, an rnnconv .safetensors, "
                                            "or a raw blob described by the flags below."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="ckpt.pt, ckpt.pth or ckpt.safetensors "
                                                                       "(a state_dict). Default: the source's name "
                                                                       "with .pt."),
    layer: Optional[str] = LAYER_OPTION,
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
    mode: Optional[Mode] = MODE_OPTION,
    input_size: Optional[int] = INPUT_OPTION,
    hidden_size: Optional[int] = HIDDEN_OPTION,
    num_layers: int = LAYERS_OPTION,
    bidirectional: bool = BIDI_OPTION,
    proj_size: int = PROJ_OPTION,
    dtype: Optional[DType] = DTYPE_OPTION,
) -> None:
    """Turn a cuDNN weight space into a PyTorch state_dict, and print the nn module it loads into.

    Examples:

      rnnconv cudnn-to-torch model.bin -o model.pt

      rnnconv cudnn-to-torch weights.raw --mode lstm --input-size 80 --hidden-size 512 --num-layers 2
      --bidirectional -o lstm.pt
    """
    raw = _raw_spec(mode, input_size, hidden_size, num_layers, bidirectional, proj_size, dtype)
    _convert(source, output, "torch", "cudnn", layer, dtype, force, as_json, quiet, raw_spec=raw)


@app.command("cudnn-to-keras")
@handles_errors
def cudnn_to_keras(
    source: Path = typer.Argument(..., help="cuDNN blob: X.bin with sidecar, an rnnconv .safetensors, or a raw blob "
                                            "described by the flags below."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="model.keras (loads with "
                                                                       "keras.models.load_model) or "
                                                                       "model.weights.h5. Default: the source's name "
                                                                       "with .keras."),
    layer: Optional[str] = LAYER_OPTION,
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
    mode: Optional[Mode] = MODE_OPTION,
    input_size: Optional[int] = INPUT_OPTION,
    hidden_size: Optional[int] = HIDDEN_OPTION,
    num_layers: int = LAYERS_OPTION,
    bidirectional: bool = BIDI_OPTION,
    proj_size: int = PROJ_OPTION,
    dtype: Optional[DType] = DTYPE_OPTION,
) -> None:
    """Turn a cuDNN weight space into a Keras 3 model that predicts what the blob computes.

    A Sequential of LSTM / GRU(reset_after=True) / SimpleRNN layers (Bidirectional for two directions, one Keras
    layer per cuDNN layer), all returning sequences. An LSTM's two biases are summed into Keras' one. Written
    without Keras; needs no TensorFlow.

    Examples:

      rnnconv cudnn-to-keras model.bin -o model.keras

      rnnconv cudnn-to-keras model.bin -o model.weights.h5
    """
    raw = _raw_spec(mode, input_size, hidden_size, num_layers, bidirectional, proj_size, dtype)
    _convert(source, output, "keras", "cudnn", layer, dtype, force, as_json, quiet, raw_spec=raw)


@app.command("keras-to-torch")
@handles_errors
def keras_to_torch(
    source: Path = typer.Argument(..., help="Keras file (.h5, .weights.h5, .keras)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="ckpt.pt, .pth or .safetensors."),
    layer: Optional[str] = LAYER_OPTION,
    dtype: Optional[DType] = typer.Option(None, "--dtype", help="Element type [default: the source's]."),
    bias_split: BiasSplit = BIAS_SPLIT_OPTION,
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Convert a Keras recurrent layer to a PyTorch state_dict (through cuDNN's convention).

    Example:

      rnnconv keras-to-torch model.h5 --layer encoder -o encoder.pt
    """
    _convert(source, output, "torch", "keras", layer, dtype, force, as_json, quiet, bias_split=bias_split)


@app.command("torch-to-keras")
@handles_errors
def torch_to_keras(
    source: Path = typer.Argument(..., help="PyTorch checkpoint (.pt, .pth, .bin, .safetensors)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="model.keras or model.weights.h5."),
    prefix: Optional[str] = PREFIX_OPTION,
    nonlinearity: Nonlinearity = NONLINEARITY_OPTION,
    dtype: Optional[DType] = typer.Option(None, "--dtype", help="Element type [default: the source's]."),
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Convert an nn.LSTM / GRU / RNN from a PyTorch checkpoint to a Keras 3 model.

    Example:

      rnnconv torch-to-keras ckpt.pt --prefix decoder.rnn -o decoder.keras
    """
    _convert(source, output, "keras", "torch", prefix, dtype, force, as_json, quiet, nonlinearity=nonlinearity)


@app.command("convert")
@handles_errors
def convert(
    source: Path = typer.Argument(..., help=SOURCE_HELP),
    output: Path = typer.Argument(..., help=".bin/.safetensors (cuDNN), .pt/.pth (PyTorch), .keras/.weights.h5 "
                                            "(Keras); --to for a PyTorch .safetensors."),
    to: Optional[Target] = typer.Option(None, "--to", help="What to write, when the output's name does not say."),
    layer: Optional[str] = LAYER_OPTION,
    bias_split: BiasSplit = BIAS_SPLIT_OPTION,
    nonlinearity: Nonlinearity = NONLINEARITY_OPTION,
    force: bool = FORCE_OPTION,
    as_json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
    mode: Optional[Mode] = MODE_OPTION,
    input_size: Optional[int] = INPUT_OPTION,
    hidden_size: Optional[int] = HIDDEN_OPTION,
    num_layers: int = LAYERS_OPTION,
    bidirectional: bool = BIDI_OPTION,
    proj_size: int = PROJ_OPTION,
    dtype: Optional[DType] = DTYPE_OPTION,
) -> None:
    """Convert between any two of Keras, PyTorch and cuDNN; the source format comes from its content.

    Examples:

      rnnconv convert model.h5 model.bin

      rnnconv convert ckpt.pt model.keras --layer encoder.rnn

      rnnconv convert model.bin state.safetensors --to torch
    """
    raw = _raw_spec(mode, input_size, hidden_size, num_layers, bidirectional, proj_size, dtype)
    _convert(source, output, to.value if to else None, None, layer, dtype, force, as_json, quiet, bias_split,
             nonlinearity, raw)


class Backend(str, Enum):
    auto = "auto"
    cudnn = "cudnn"
    numpy = "numpy"


@app.command("verify")
@handles_errors
def verify(
    blob: Path = typer.Argument(..., help="cuDNN blob: X.bin with its sidecar, an rnnconv .safetensors, or a raw blob "
                                          "(with the raw-blob flags)."),
    against: Optional[Path] = typer.Option(None, "--against", help="The source model (Keras file or PyTorch "
                                                                   "checkpoint) [default: the one the blob names]."),
    backend: Backend = typer.Option(Backend.auto, "--backend", help="auto: cuDNN when a GPU and the gpu extra are "
                                                                    "present, else numpy."),
    seq_len: int = typer.Option(8, "--seq-len", help="Time steps of the test input."),
    batch: int = typer.Option(3, "--batch", help="Batch size of the test input."),
    seed: int = typer.Option(0, "--seed", help="Seed of the test input and initial states."),
    ragged: bool = typer.Option(False, "--ragged", help="Give the batch items different lengths (right padding)."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance [default: by dtype and backend]."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance [default: by dtype and backend]."),
    json_report: Optional[Path] = typer.Option(None, "--json", help="Also write the report as JSON to this file."),
    layer: Optional[str] = typer.Option(None, "--layer", help="The RNN to check in an rnnconv .safetensors."),
    require_source: bool = typer.Option(False, "--require-source", help="Fail (exit 2) when no source is there to "
                                                                        "compare with, instead of checking "
                                                                        "structure only."),
    diagnose: bool = typer.Option(True, "--diagnose/--no-diagnose", help="On a mismatch, look for the mistake."),
    relayout: Optional[Path] = typer.Option(None, "--relayout", help="With --backend cudnn: when cuDNN places "
                                                                     "tensors elsewhere, write the blob in cuDNN's "
                                                                     "layout here."),
    force: bool = FORCE_OPTION,
    mode: Optional[Mode] = MODE_OPTION,
    input_size: Optional[int] = INPUT_OPTION,
    hidden_size: Optional[int] = HIDDEN_OPTION,
    num_layers: int = LAYERS_OPTION,
    bidirectional: bool = BIDI_OPTION,
    proj_size: int = PROJ_OPTION,
    dtype: Optional[DType] = typer.Option(None, "--dtype", help="Raw blob: its element type.",
                                          rich_help_panel="Raw blob"),
) -> None:
    """Prove a converted blob computes what its source model computes: a verdict, a report and an exit code.

    The source runs in its own framework on the CPU (Keras or PyTorch); the blob runs through cuDNN, or without a GPU
    through a numpy reference of cuDNN's equations that reads every weight from the blob. Outputs, final h and c
    are compared overall, per time step and per layer and direction; on a mismatch the likely mistake is named.

    Exit codes: 0 match (or structure-only, when there is no source), 1 mismatch, 2 bad input, 3 the requested
    backend is unavailable.

    Examples:

      rnnconv verify model.bin

      rnnconv verify model.bin --against model.h5 --json verify-report.json

      rnnconv verify model.bin --backend cudnn --seq-len 16 --batch 4 --ragged
    """
    from rnnconv.verify import VerifyOptions, verify as run_verify

    raw = _raw_spec(mode, input_size, hidden_size, num_layers, bidirectional, proj_size, dtype)
    options = VerifyOptions(against, backend.value, seq_len, batch, seed, ragged, atol, rtol, layer, raw,
                            require_source, diagnose, relayout, force)
    report = run_verify(blob, options)
    for warning in report.warnings:
        err.print(f"[yellow]warning:[/] {_escape(warning)}")
    if json_report is not None:
        from rnnconv.fsutil import atomic_outputs

        with atomic_outputs([json_report], force=True) as (tmp,):
            tmp.write_text(json.dumps({**report.data, "warnings": report.warnings}, indent=1) + "\n")
    _print_verify(report.data)
    raise typer.Exit(report.exit_code)


def _print_verify(data: dict) -> None:
    from rich.table import Table

    out.print(f"[bold]verify[/] {_escape(data['blob'])}: {_escape(data['name'])}, {_spec_cell(data['spec'])}")
    if data.get("source"):
        source = data["source"]
        out.print(f"  source:  {_escape(source['path'])} ({source['format']}, {_escape(str(source['layer']))}), "
                  f"run by {_escape(source['run'])}")
        out.print(f"  backend: {_escape(data['backend']['detail'])}")
    if data.get("inputs"):
        inputs = data["inputs"]
        out.print(f"  inputs:  seed {inputs['seed']}, {inputs['seq_len']} steps, batch {inputs['batch']}"
                  + (f", lengths {inputs['lengths']}" if inputs["lengths"] else "") + ", non-zero h0 and c0")
    table = Table(show_header=True)
    for column in ("check", "result", "ok"):
        table.add_column(column)
    for check in data["checks"]:
        table.add_row(check["check"], _escape(check["detail"]), "[green]yes[/]" if check["ok"] else "[red]no[/]")
    comparison = data.get("comparison")
    if comparison:
        tol = data["tolerance"]
        for name in ("y", "h_n", "c_n"):
            if name in comparison:
                table.add_row(f"{name} vs source", f"max abs {comparison[name]['max_abs']:.3g}, "
                              f"max rel {comparison[name]['max_rel']:.3g}", "")
        for index, error in enumerate(comparison.get("y_per_direction", [])):
            table.add_row(f"y, direction {index}", f"max abs {error:.3g}", "")
        for item in comparison.get("h_n_per_layer_direction", []):
            table.add_row(f"h_n layer {item['layer']} {item['direction']}", f"max abs {item['max_abs']:.3g}", "")
        table.add_row("tolerance", f"{tol['atol']:g} + {tol['rtol']:g} x |source|",
                      "[green]yes[/]" if comparison["match"] else "[red]no[/]")
    out.print(table)
    for finding in data.get("layout_findings", [])[:5]:
        out.print(f"  layout: {_escape(json.dumps(finding))}")
    if data.get("relayout"):
        out.print(f"  wrote the blob in cuDNN's layout to {_escape(data['relayout'])}")
    colour = {"match": "green", "structure-only": "yellow"}.get(data["verdict"], "red")
    out.print(f"[bold {colour}]{data['verdict'].upper()}[/]: {_escape(data['summary'])}", soft_wrap=True)


@app.command("doctor")
@handles_errors
def doctor(as_json: bool = JSON_OPTION) -> None:
    """Show what this machine has for each verify backend (numpy, cuDNN) and each source framework.

    Example:

      rnnconv doctor
    """
    from rich.table import Table

    from rnnconv.doctor import examine

    report = examine()
    if as_json:
        print(json.dumps(report, indent=1))
        return
    out.print(f"rnnconv {report['rnnconv']} on Python {report['python']}")
    table = Table(title="what verify can use here")
    for column in ("part", "available", "detail"):
        table.add_column(column, overflow="fold")
    for group in ("backends", "sources"):
        for name, item in report[group].items():
            table.add_row(f"{group[:-1]}: {name}", "[green]yes[/]" if item["available"] else "[red]no[/]",
                          _escape(item["detail"]))
    for name, value in report["torch_cuda"].items():
        table.add_row(f"torch {name}", "", _escape(str(value)))
    out.print(table)
    out.print("packages: " + ", ".join(f"{k} {v}" for k, v in report["packages"].items() if v))


@app.command("gpu-battery")
@handles_errors
def gpu_battery(
    output: Path = typer.Option(Path("cudnn_layout.json"), "-o", "--output", help="Where to write the offsets cuDNN "
                                                                                  "reported (JSON)."),
    force: bool = FORCE_OPTION,
) -> None:
    """On a GPU: check rnnconv's layout table against cuDNN itself for every mode, 1-2 layers, both directions,
    projection, float32 and float16, and write the offsets cuDNN reported.

    Example (needs a GPU, the CUDA driver and pip install 'rnnconv[gpu]'):

      rnnconv gpu-battery -o fixtures/cudnn_layout.json
    """
    from rnnconv.cudnn.battery import run_battery

    report = run_battery(output, force, say=lambda line: out.print(_escape(line)))
    verdict = "every configuration matches rnnconv's layout table" if report["all_match"] else \
        "some configurations DIFFER from rnnconv's layout table (see the JSON)"
    out.print(f"{verdict}; wrote {_escape(str(output))}")
    if not report["all_match"]:
        raise typer.Exit(1)


@app.command("inspect")
@handles_errors
def inspect(
    source: Path = typer.Argument(..., help="A Keras file, or a cuDNN blob (.bin with sidecar, .safetensors)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List every recurrent network in a file: its spec, its class, and whether it converts to cuDNN (why not).

    Examples:

      rnnconv inspect model.h5

      rnnconv inspect model.bin --json
    """
    from rnnconv.inspection import inspect_file

    report = inspect_file(source)
    if as_json:
        print(json.dumps(report, indent=1))
        return
    from rich.table import Table

    table = Table(title=f"{_escape(str(source))} ({report['format']}"
                        + "".join(f", {k} {v}" for k, v in report["versions"].items()) + ")")
    for column in ("name", "class", "cuDNN spec", "converts"):
        table.add_column(column, overflow="fold")
    for rnn in report["rnns"]:
        verdict = "[green]yes[/]" if rnn["converts"] else "[red]no[/], see below"
        table.add_row(_escape(rnn["name"]), _escape(rnn["class"]), _spec_cell(rnn["spec"]), verdict)
    out.print(table)
    if not report["rnns"]:
        out.print("no recurrent layers found")
    for rnn in report["rnns"]:
        if not rnn["converts"]:
            out.print(f"[red]{_escape(rnn['name'])} does not convert:[/] {_escape(rnn['reason'])}")
    for note in report["notes"] + [n for r in report["rnns"] for n in r["notes"]]:
        out.print(f"[dim]note:[/] {_escape(note)}")


def _spec_cell(spec: dict | None) -> str:
    if not spec:
        return "-"
    text = f"{spec['mode']} in {spec['input_size']} hidden {spec['hidden_size']}"
    if spec.get("proj_size"):
        text += f" proj {spec['proj_size']}"
    if spec["num_layers"] > 1:
        text += f" x{spec['num_layers']} layers"
    return text + (" bidirectional" if spec["bidirectional"] else "") + f" {spec['dtype']}"


@app.command("explain")
@handles_errors
def explain(
    fmt: Optional[str] = typer.Argument(None, metavar="[FORMAT]", help="keras, torch, cudnn, onnx, miopen or "
                                                                      "tensorrt; all when left out."),
    layer_class: Optional[str] = typer.Argument(None, metavar="[CLASS]", help="LSTM, GRU, SimpleRNN, CuDNNLSTM, "
                                                                              "..."),
    bias_split: BiasSplit = typer.Option(BiasSplit.recurrent, "--bias-split", help="Split shown for single biases."),
) -> None:
    """Show the gate-layout table: how each format stores a cell, and how each cuDNN tensor is taken from it.

    Examples:

      rnnconv explain

      rnnconv explain keras GRU
    """
    from rnnconv.explain import explain_rows

    explain_rows(out, fmt, layer_class, bias_split.value)


def main() -> None:
    app()
