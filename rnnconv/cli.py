"""The `rnnconv` command line.

Imports stay lazy: `rnnconv --help` and a converter run load only what they use,
and no command imports a framework it does not need.
"""

from __future__ import annotations

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


@app.command("keras-to-cudnn")
@handles_errors
def keras_to_cudnn(
    source: Path = typer.Argument(..., help="Keras file: legacy .h5 (Keras 2, tf-keras, Keras 3), "
                                            ".weights.h5 or .keras."),
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="X.bin (raw weight space + X.bin.json sidecar) or X.safetensors. "
                                               "Default: the source's name with .bin, beside it."),
    layer: Optional[str] = typer.Option(None, "--layer", help="Name of the recurrent layer to convert "
                                                               "(needed when the file has several)."),
    dtype: Optional[DType] = typer.Option(None, "--dtype", help="Element type of the weight space "
                                                                 "[default: the source's]."),
    bias_split: BiasSplit = typer.Option(BiasSplit.recurrent, "--bias-split",
                                         help="How a single Keras bias (LSTM, SimpleRNN) becomes cuDNN's two: "
                                              "recurrent = what Keras' TF backend hands cuDNN (input side zero); "
                                              "input; half."),
    force: bool = typer.Option(False, "--force", help="Replace existing output files."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only warnings and errors."),
) -> None:
    """Convert a Keras recurrent layer to cuDNN's flat weight space.

    Reads the file with h5py alone: TensorFlow and Keras need not be installed.

    Examples:

      rnnconv keras-to-cudnn model.h5 -o model.bin

      rnnconv keras-to-cudnn model.keras --layer encoder_gru -o enc.bin --dtype float16

      rnnconv keras-to-cudnn model.h5 -o all_rnns.safetensors
    """
    from rnnconv.convert import keras_to_cudnn as convert

    result = convert(source, output, layer, dtype.value if dtype else None, bias_split.value, force)
    _report_conversion(result, as_json, quiet)


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
