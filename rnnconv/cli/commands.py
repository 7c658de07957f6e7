"""The `rnnconv` command line: declarations and rendering only; the work is the library's (`rnnconv.api`).

One option set: every command takes the same name for the same thing (`--layer`
picks an RNN in any file, `--json` prints the result as JSON, `-q`, `-v`). The X-to-Y
commands are made from the table's format rows, some hidden (rnnconv.cli.aliases). Imports stay
lazy: `rnnconv --help` loads typer and the table's data, and no command imports a
framework it does not need.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from rnnconv.cli.aliases import ALIASES_HELP, Command, Commands, direction_doc, is_alias
from rnnconv.cli.options import (
    ALL_SOURCE_OPTIONS,
    COMMON,
    CONVERSION_TAIL,
    IDENTIFY_HELP,
    INSPECT_HELP,
    RAW,
    VERIFY_CHANGED_HELP,
    VERIFY_HELP,
    direction_options,
    identify_parameters,
    inspect_parameters,
    parameter,
    pick,
    sources_and_output,
    verify_changed_parameters,
    verify_parameters,
)
from rnnconv.cli.streams import standalone
from rnnconv.formats.catalog import FORMAT_INFO
from rnnconv.table.rows import ADAPTER_FORMATS, FORMATS, TABLE
from rnnconv.version import __version__

EXIT_CODES = (
    "Exit codes: 0 done, 1 verification mismatch, 2 bad or unsupported input, 3 a needed backend is "
    "missing, 4 internal error (a bug: rerun with RNNCONV_DEBUG=1 and report it)."
)
app = typer.Typer(
    name="rnnconv",
    cls=Commands,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Convert recurrent-network weights (GRU, LSTM, simple RNN) between NVIDIA cuDNN's flat weight space and "
    + ", ".join(i.title for n, i in FORMAT_INFO.items() if n != "cudnn")
    + ", and prove the result right.\n\n"
    + ALIASES_HELP
    + EXIT_CODES,
)


def command(name: str, doc: str, params: list[inspect.Parameter]) -> Callable[..., None]:
    """Register `run(**values)` as a command with these parameters, its click command made when it is named (typer
    would make every command's for any one); every failure becomes one sentence."""

    def register(run: Callable[..., int | None]) -> None:
        @functools.wraps(run)
        def handler(**values: Any) -> None:
            values = {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}
            from rnnconv.cli.render import guarded

            code = guarded(run, values, name)
            raise typer.Exit(code or 0)

        handler.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        handler.__annotations__ = {p.name: p.annotation for p in params}
        handler.__doc__ = doc
        del handler.__wrapped__  # typer must read the signature above, not run's

        def make() -> Any:
            alone = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
            alone.command(name, hidden=is_alias(name), cls=Command)(handler)
            return typer.main.get_command(alone)

        Commands.makers[name] = make

    return register


def raw_spec(values: dict[str, Any]) -> Any:
    from rnnconv.api import raw_spec as spec_of

    return spec_of(**{k: values.pop(k, None) for k in RAW}, dtype=values.get("dtype"))


def run_conversion(values: dict[str, Any], to: str | None, source_format: str | None) -> int:
    from rnnconv import api
    from rnnconv.cli import render
    from rnnconv.formats.settings import conversion_names

    sources, output = sources_and_output(values.pop("sources"), values.pop("output"), source_format, to or "cudnn")
    quiet, as_json, verbose, spec = values["quiet"], values["json"], values["verbose"], raw_spec(values)
    layer, taken = pick(values), conversion_names()
    settings = {name: value for name, value in values.items() if name in taken}
    settings.update(to=to, layer=layer, spec=spec, hash_source=not values["no_hash"], source_format=source_format)
    if spec is not None:
        settings["dtype"] = None  # the raw blob's, not the output's
    if len(sources) > 1 or api.is_directory_name(output):
        shown = functools.partial(render.batch_entry, quiet=quiet)
        results = api.convert_many(sources, output, jobs=values["jobs"], on_result=shown, **settings)
        render.batch(results, as_json, quiet)
        return max(item.exit_code for item in results.root)
    with render.progress_bar(enabled=not (quiet or as_json)) as progress:
        result = api.convert(sources[0], output, progress=progress, **settings)
    render.conversion(result, as_json, quiet, verbose)
    return 0


def add_direction(source: str, target: str) -> None:
    suffixes = ", ".join(FORMAT_INFO[target].write_suffixes)
    params = [
        parameter(
            "sources",
            argument=True,
            annotation=list[str],  # made paths by `sources_and_output`, as convert's are
            metavar="SOURCE",
            help=f"{FORMAT_INFO[source].title} files: {FORMAT_INFO[source].read_help}.",
        ),
        parameter(
            "output",
            help=f"{suffixes}, or a directory for several sources (DIR/ is created) [default: the source's name "
            f"with {FORMAT_INFO[target].default_for[0]}, beside it].",
        ),
        parameter("layer"),
        parameter("prefix"),
        *map(parameter, direction_options(source, target)),
    ]
    command(f"{source}-to-{target}", direction_doc(source, target), params)(
        lambda **values: run_conversion(values, target, source)
    )


def hidden_direction(source: str, target: str) -> Any:
    """The click command of a hidden SOURCE-to-TARGET name, made when it is named (its parameters too)."""
    add_direction(source, target)  # in place of this maker, the command's own
    return Commands.makers[f"{source}-to-{target}"]()


# Conversions to cuDNN first: they are what rnnconv is for.
for _target in sorted(ADAPTER_FORMATS, key=lambda name: name != "cudnn"):
    for _source in (name for name in ADAPTER_FORMATS if name != _target and FORMAT_INFO[_target].writes):
        if is_alias(_name := f"{_source}-to-{_target}"):
            Commands.makers[_name] = functools.partial(hidden_direction, _source, _target)
        else:
            add_direction(_source, _target)


@command(
    "convert",
    "Convert between any two formats; the source's format comes from its content, the target's "
    "from the output's name or --to.\n\nExamples:\n\n  rnnconv convert model.h5 model.bin\n\n"
    "  rnnconv convert ckpt.pt encoder.onnx --layer encoder.rnn\n\n"
    "  rnnconv convert model.bin state.safetensors --to torch",
    [
        parameter("sources", argument=True, annotation=list[str], metavar="SOURCE", help="Any files rnnconv reads."),
        parameter(
            "output",
            help="The output: "
            + ", ".join(f"{'/'.join(i.default_for)} ({i.title})" for i in FORMAT_INFO.values() if i.default_for)
            + "; a directory for several sources (DIR/ is created; the target is --to's, cuDNN by default). Given "
            "with -o, every argument is a source; without, the last one is the output.",
        ),
        *map(
            parameter,
            ("to", "layer", "prefix", *ALL_SOURCE_OPTIONS, "into", "streaming", "chunk", "quantize", *CONVERSION_TAIL),
        ),
    ],
)
def convert(**values: Any) -> int:
    return run_conversion(values, values.pop("to"), None)


@command(
    "verify",
    VERIFY_HELP,
    [
        parameter(
            "blob",
            argument=True,
            help="cuDNN blob: X.bin with its sidecar, an rnnconv .safetensors, or a "
            "raw blob (with the raw-blob flags); or a file rnnconv wrote for a runtime (.onnx, ...).",
        ),
        *verify_parameters(),
        parameter("dtype", help="Raw blob: its element type."),
        *map(parameter, COMMON),
    ],
)
def verify(**values: Any) -> int:
    from rnnconv import api
    from rnnconv.cli import render

    blob, layers, spec = values.pop("blob"), values.pop("layer") or [], raw_spec(values)
    as_json, quiet, verbose = values.pop("json"), values.pop("quiet"), values.pop("verbose")
    values.pop("dtype")
    stage = render.stage_printer(enabled=not (quiet or as_json))
    if api.audits(blob, values["against"], layers, spec is not None):
        reports = api.audit(blob, pairs=layers, raw_spec=spec, stage=stage, **values)
    elif values.pop("all"):
        reports = api.verify_all(blob, layer=api.one_layer(layers), raw_spec=spec, stage=stage, **values)
    else:
        report = api.verify(blob, layer=api.one_layer(layers), raw_spec=spec, stage=stage, **values)
        render.verification(report, as_json, quiet, verbose)
        return report.exit_code
    render.verifications(reports, as_json, quiet)
    return max(report.exit_code for report in reports.root)


@command("verify-changed", VERIFY_CHANGED_HELP, verify_changed_parameters())
def verify_changed(files: list[Path], json: bool, quiet: bool, verbose: bool, **values: Any) -> int:
    from rnnconv import api
    from rnnconv.cli import render

    reports = api.verify_changed(files, stage=render.stage_printer(enabled=not (quiet or json)), **values)
    return render.changed(reports, len(files), json, quiet)


@command("inspect", INSPECT_HELP, inspect_parameters())
def inspect_file(source: Path, **values: Any) -> int:
    from rnnconv import api
    from rnnconv.cli import render

    return render.inspection(api.inspect(source, values.pop("profile"), values.pop("to")), **values)


@command("identify", IDENTIFY_HELP, identify_parameters())
def identify(blob: Path, json: bool, quiet: bool, verbose: bool, **values: Any) -> int:
    from rnnconv import api
    from rnnconv.cli import render

    result = api.identify(blob, **values)
    render.identification(result, json, quiet, verbose)
    return result.exit_code


@command(
    "explain",
    "Show the gate-layout table: how each format stores a cell, and how each cuDNN tensor is taken from it; "
    "or, as a picture, where every stored number lands (cells coloured by gate, light input side, dark "
    "recurrent side; gate letters without colour).\n\nExamples:\n\n  rnnconv explain keras GRU\n\n"
    "  rnnconv explain --from keras --to cudnn --mode gru --input-size 2 --hidden-size 3\n\n"
    "  rnnconv explain model.h5 --layer encoder --svg encoder.svg",
    [
        parameter(
            "fmt",
            argument=True,
            metavar="FORMAT|CLASS|FILE",
            default=None,
            annotation=str | None,
            help=f"A format ({', '.join(FORMATS)}), a layer class, or a file to draw; all rows when left out.",
        ),
        parameter(
            "layer_class",
            argument=True,
            metavar="CLASS",
            default=None,
            annotation=str | None,
            help=f"One of {', '.join(dict.fromkeys(row.source_class for row in TABLE))} (any case).",
        ),
        parameter("from_format"),
        parameter("to", annotation=str | None, help="Picture: the target format [default: cudnn]."),
        parameter("mode", help="Picture: the cuDNN mode [default: the class's]."),
        parameter("input_size", help="Picture: input size [default: 2]."),
        parameter("hidden_size", help="Picture: hidden size [default: 3]."),
        parameter("layer"),
        parameter("bias_split", help="Split shown for single biases."),
        *map(parameter, ("svg", "html", "force", *COMMON)),
    ],
)
def explain(fmt: str | None, layer_class: str | None, **values: Any) -> None:
    from rnnconv.cli import render
    from rnnconv.cli.explain import explain as run

    render.shown(run)(render.out(), [fmt, layer_class], **values)


@command(
    "schema",
    "Print the JSON schema of a document rnnconv writes: sidecar (X.bin.json and rnnconv safetensors "
    "metadata), report (verify --report/--json), reports (verify --all's), inspect (inspect --json), conversion "
    "(--json of a conversion), batch (of several), identify (identify --json) or error (--json of any failure)."
    "\n\nExample:\n\n  rnnconv schema sidecar > sidecar.schema.json",
    [parameter("name", argument=True, annotation=str, help="One of the documents named above.")],
)
def schema(name: str) -> None:
    from rnnconv import api
    from rnnconv.cli.render import print_json

    print_json(api.schema(name))


@command(
    "doctor",
    "Show what this machine has for each verify backend (numpy, cuDNN) and each source framework."
    "\n\nExample:\n\n  rnnconv doctor",
    list(map(parameter, COMMON)),
)
def doctor(**values: Any) -> None:
    from rnnconv.cli import render
    from rnnconv.cli.doctor import examine

    render.doctor(examine(), values["json"], values["quiet"], values["verbose"])


@command(
    "gpu-battery",
    "On a GPU: check rnnconv's layout against cuDNN for 215 configurations (--quick: 16), writing every offset, dims "
    "and strides cuDNN reported as it goes.\n\nExample (needs a GPU):\n\n  rnnconv gpu-battery -o cudnn_layout.json",
    [
        parameter("output", default=Path("cudnn_layout.json"), annotation=Path, help="Where to write them (JSON)."),
        *map(parameter, ("quick", "force", *COMMON)),
    ],
)
def gpu_battery(output: Path, quick: bool, force: bool, **values: Any) -> int:
    from rnnconv.cli import render
    from rnnconv.gpu.battery import run_battery

    quiet = values["quiet"] or values["json"]
    report = run_battery(output, force, quick, say=(lambda line: None) if quiet else render.out().print)
    render.battery(report, output, values["json"], values["quiet"])
    return 0 if report["all_match"] else 1


def _version(value: bool) -> None:
    if value:
        print(f"rnnconv {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


main = standalone(app)  # the `rnnconv` command: its streams and terminal size made usable first
