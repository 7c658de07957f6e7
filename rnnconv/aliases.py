"""The commands `rnnconv --help` lists, and the SOURCE-to-TARGET names it does not.

Conversions to cuDNN and back are listed by name; every other direction is `convert --to TARGET`. Its
SOURCE-to-TARGET command from earlier versions still works: hidden from `--help`, completed by the shell
when no listed command starts with what was typed.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

from rnnconv.table.formats import FORMAT_INFO

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


class Commands(TyperGroup):
    """rnnconv's command group: a hidden name still completes in the shell when no listed command does."""

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        hidden = [c for n, c in self.commands.items() if c.hidden and n.startswith(incomplete)]
        listed = [n for n, c in self.commands.items() if not c.hidden and n.startswith(incomplete)]
        if not (incomplete and hidden and not listed):
            return super().shell_complete(ctx, incomplete)
        for found in hidden:  # shown for this one answer: completion lists only commands that are not hidden
            found.hidden = False
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            for found in hidden:
                found.hidden = True
