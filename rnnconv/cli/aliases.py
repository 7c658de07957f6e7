"""The commands `rnnconv --help` lists, and the SOURCE-to-TARGET names it does not.

Conversions to cuDNN and back are listed by name; every other direction is `convert --to TARGET`. Its
SOURCE-to-TARGET command from earlier versions still works: hidden from `--help`, completed by the shell
when no listed command starts with what was typed, and made only when it is named (making all of them took
longer than the rest of `rnnconv --help`). A listed command too is made when it is named or listed: a conversion
makes its own command only.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

from rnnconv.formats.catalog import FORMAT_INFO

LISTED_DIRECTIONS = {("keras", "cudnn"), ("torch", "cudnn"), ("cudnn", "keras"), ("cudnn", "torch")}
ALIASES_HELP = (
    "Between any two formats: rnnconv convert SOURCE OUTPUT [--to FORMAT]. The SOURCE-to-TARGET commands of "
    "earlier versions (onnx-to-cudnn, tf1-to-torch, keras-to-onnx, ...) still work, as convert --to TARGET.\n\n"
)


def is_alias(command: str) -> bool:
    """A SOURCE-to-TARGET command that --help does not list."""
    source, to, target = command.partition("-to-")
    return bool(to) and (source, target) not in LISTED_DIRECTIONS


def direction_summary(source: str, target: str) -> str:
    """The first sentence of a SOURCE-to-TARGET command's help; a hidden one says what it is the same as."""
    summary = f"Convert {FORMAT_INFO[source].title} to {FORMAT_INFO[target].title}."
    return summary + (
        f" The same as: rnnconv convert SOURCE OUTPUT --to {target}." if is_alias(f"{source}-to-{target}") else ""
    )


def direction_doc(source: str, target: str) -> str:
    """The help of a SOURCE-to-TARGET command: what it reads and writes, and examples."""
    src, dst = FORMAT_INFO[source], FORMAT_INFO[target]
    name, out = f"{source}-to-{target}", f"out{dst.default_for[0]}"
    examples = [f"rnnconv {name} {src.example} -o {out}"] + [f"rnnconv {name} {ex} -o {out}" for ex in src.examples]
    examples.append(f"rnnconv {name} runs/*{Path(src.example).suffix} -o out/ -j 4   # several: out/<stem>{out[3:]}")
    return (
        f"{direction_summary(source, target)}\n\nReads {src.read_help}. {src.read_note}\n\nWrites "
        f"{dst.write_help}. {dst.write_note}\n\nExamples:\n\n" + "\n\n".join(f"  {e}" for e in examples)
    )


class Made(MutableMapping[str, Any]):
    """A command group's commands by name: those made, and the others, each made when it is first looked up.
    Iterating gives every name (a typo's suggestions come from them) and makes nothing."""

    def __init__(self, made: MutableMapping[str, Any], makers: dict[str, Callable[[], Any]]):
        self.made, self.makers = dict(made), makers

    def __getitem__(self, name: str) -> Any:
        if name not in self.made:
            self.made[name] = self.makers[name]()  # KeyError for a name that is not a command
        return self.made[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.made[name] = command

    def __delitem__(self, name: str) -> None:
        del self.made[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.made
        yield from (name for name in self.makers if name not in self.made)

    def __len__(self) -> int:
        return len(self.made) + sum(name not in self.made for name in self.makers)


_RETYPE = object()  # what `already_typed` gives for a value that only typer's own coercion may take


def already_typed(value: Any, descriptor: Any, many: bool, ctx: Any) -> Any:
    """`value` as typer's coercion gives it back, where that needs none of its pydantic adapters: a str for a str,
    strs for a list of them, an int or a float within its bounds, an enum's member or the value that names one
    (typer's own choice matching); `_RETYPE` for anything else (a path, a number as text, a wrong value: typer's
    adapters take it, with their own words for what is wrong)."""
    from typer._param_types import coerce_cli_choice, lenient_issubclass

    annotation, info = descriptor.annotation, descriptor.parameter_info
    if info.parser is not None or descriptor.file_annotation is not None:
        return _RETYPE
    if many:
        strings = annotation == list[str] and isinstance(value, (list, tuple))
        return list(value) if strings and all(type(item) is str for item in value) else _RETYPE
    if annotation is str and type(value) is str:
        return value
    if annotation in (int, float) and type(value) is annotation and not info.clamp:
        within = (info.min is None or value >= info.min) and (info.max is None or value <= info.max)
        return value if within else _RETYPE
    if lenient_issubclass(annotation, Enum) and isinstance(value, str):  # a str enum's member is a str too
        try:
            return coerce_cli_choice(value, choices=tuple(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
        except ValueError:
            return _RETYPE
    return _RETYPE


class Coerced:
    """typer's coercion of one parameter, its pydantic adapter built only for a value that needs it: typer (0.2x)
    builds one for every parameter a command takes before the command runs (pydantic's import, then about half a
    millisecond each), though an unset option, a word, a default are given back as they are (`already_typed`)."""

    def __init__(self, descriptor: Any) -> None:
        self.descriptor = descriptor
        self.adapted: Any = None  # typer's own coercion, made when a value first needs it

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        many = param.multiple or param.nargs == -1
        if value is None:  # as typer's own coercion begins
            return () if many else None
        kept = already_typed(value, self.descriptor, many, ctx)
        if kept is not _RETYPE:
            return kept
        if self.adapted is None:
            from typer._coercion import build_runtime_param

            self.adapted = build_runtime_param(self.descriptor)
        return self.adapted.coerce(value, param=param, ctx=ctx)


class Command(TyperCommand):
    """A command whose help names its arguments as click's usage lines do, `BLOB`, `SOURCE...`, `[NAME]` (typer
    writes `{BLOB}`, and a Python type after each argument's name: `SOURCE <list[Path]>`); its parameters coerced
    as typer coerces them, through pydantic only where a value needs it (`Coerced`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for param in self.get_params(ctx):
            if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
                setattr(param, "_runtime_param", Coerced(param.type_descriptor))  # noqa: B010 - typer's own slot
        parsed: list[str] = super().parse_args(ctx, args)
        return parsed

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        words = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                word = argument_word(param)
                words.append(word if param.required else f"[{word}]")
        return words

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name == "argument":
                arguments.append((argument_word(param), record[1]))
            elif record is not None:
                options.append(record)
        for title, records in (("Arguments", arguments), ("Options", options)):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def argument_word(argument: Any) -> str:
    """An argument as help names it: its name, with `...` when it may be repeated (a usage line brackets it too when
    it may be left out)."""
    return (argument.metavar or argument.name.upper()) + ("..." if argument.nargs != 1 else "")


class Commands(TyperGroup):
    """rnnconv's command group: a hidden name still completes in the shell when no listed command does, and a
    usage error (an unknown option, a value not among the choices) is a JSON error document too with --json."""

    # Each command's name -> what makes its click command, when it is first named (the command line adds them, the
    # listed ones in the order --help lists them).
    makers: ClassVar[dict[str, Callable[[], Any]]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = self.by_name = Made(self.commands, self.makers)

    def get_params(self, ctx: Any) -> list[Any]:
        """The group's options, its flags that typer leaves at None (--help, --install-completion,
        --show-completion) at False: typer coerces a value that is not a bool through pydantic, which made
        `rnnconv COMMAND --help` import it (0.08 s); unset, each of them is the same either way."""
        params: list[Any] = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.default is None:
                param.default = False
        return params

    def list_commands(self, ctx: Any) -> list[str]:
        """The listed commands (each made when it is shown) and the hidden ones made (to be completed): what help and
        completion show, without making a hidden one."""
        return [name for name in self.makers if not is_alias(name) or name in self.by_name.made]

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        words = sys.argv[1:] if args is None else list(args)
        run = functools.partial(super().main, words, prog_name, complete_var, False, windows_expand_args, **extra)
        if not standalone_mode:
            return run()
        code: Any
        try:
            code = run()
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            code = 1
        except Exception as exc:
            if not (hasattr(exc, "show") and hasattr(exc, "format_message")):  # only click's usage errors
                raise
            exc.show()  # what typer prints for it in standalone mode, then the document
            code = getattr(exc, "exit_code", 2)
            if "--json" in words:
                from rnnconv.cli.render import print_json
                from rnnconv.core.contracts import ErrorDocument

                failed_in = getattr(exc, "ctx", None)  # the command's context, once one was found
                command = failed_in.info_name if failed_in is not None and failed_in.parent is not None else None
                print_json(ErrorDocument(error=exc.format_message(), exit_code=code, command=command))
        sys.exit(code if isinstance(code, int) else 0)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        names = [name for name in self.commands if name.startswith(incomplete)]
        if not (incomplete and names and all(is_alias(name) for name in names)):
            return super().shell_complete(ctx, incomplete)
        hidden = [self.commands[name] for name in names]  # made now: completion lists the commands made
        for found in hidden:  # shown for this one answer: completion lists only commands that are not hidden
            found.hidden = False
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            for found in hidden:
                found.hidden = True
