"""`rnnconv explain`: the layout table, printed from the same rows the converters use.

As text, one block per row (80 columns at most) with the recipe of every cuDNN tensor; as a picture
(`--from`, `--to`, `--mode`, a file, `--svg`, `--html`), where every stored element of one cell
lands (rnnconv.cli.picture). Frameworks are imported only to read a file that needs one.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement

from rnnconv.errors import BadInput, did_you_mean
from rnnconv.table.apply import recipe
from rnnconv.table.constants import CUDNN_GATES, CUDNN_TENSOR_NAMES, GATE_NAMES
from rnnconv.table.rows import FORMAT_ALIASES, FORMATS, TABLE, Row

WIDTH = 80  # the text's width at most, or the terminal's if narrower
DEFAULT_SIZES = (2, 3)  # input and hidden size of a picture without a file: seed 000's
MAX_EXPORT_WIDTH = 240
MONOSPACE = "'Fira Code', 'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', monospace"  # found locally


def row_title(row: Row) -> str:
    when = " ".join(f"{k}={v}" for k, v in row.when.items())
    return f"{row.format} {row.source_class}" + (f" ({when})" if when else "")


def resolve(word: str) -> tuple[str | None, str | None]:
    """A format or a layer class named on the command line (any case, `pytorch` for torch): (format, class)."""
    lower = word.lower()
    fmt = FORMAT_ALIASES.get(lower, lower)
    if fmt in FORMATS:
        return fmt, None
    classes = {r.source_class.lower(): r.source_class for r in TABLE}
    if lower in classes:
        return None, classes[lower]
    known = [*FORMATS, *FORMAT_ALIASES, *dict.fromkeys(classes.values())]
    raise BadInput(
        f"no format or layer class named {word!r}; {did_you_mean(word, known)}"
        f"formats: {', '.join(FORMATS)}; classes: {', '.join(dict.fromkeys(classes.values()))}"
    )


def format_named(word: str, option: str) -> str:
    fmt, _ = resolve(word)
    if fmt is None:
        raise BadInput(f"{option} takes a format ({', '.join(FORMATS)}), not the layer class {word!r}")
    return fmt


def table_rows(fmt: str | None, layer_class: str | None) -> list[Row]:
    rows = [
        r for r in TABLE if (fmt is None or r.format == fmt) and (layer_class is None or r.source_class == layer_class)
    ]
    if not rows:
        classes = ", ".join(dict.fromkeys(r.source_class for r in TABLE if r.format == fmt))
        raise BadInput(f"no layout row for {fmt} {layer_class}: {fmt}'s classes are {classes}")
    return rows


def explain(console: Console, words: list[str | None], **values: Any) -> None:
    """The command: text rows, or a picture when one is asked for (see the module's docstring)."""
    given = [w for w in words if w]
    source = Path(given.pop(0)) if given and _names_a_file(given[0]) else None
    fmt = layer_class = None
    for word in given:
        named_fmt, named_class = resolve(word)
        if (named_fmt and fmt) or (named_class and layer_class):
            raise BadInput(f"name one format and one layer class, not {' and '.join(given)}")
        fmt, layer_class = fmt or named_fmt, layer_class or named_class
    if values["from_format"]:
        chosen = format_named(values["from_format"], "--from")
        if fmt and fmt != chosen:
            raise BadInput(f"--from {chosen} and {fmt} name different formats; give one")
        fmt = chosen
    wants_picture = source or any(
        values[k] for k in ("from_format", "to", "mode", "svg", "html", "input_size", "hidden_size")
    )
    if not wants_picture:
        explain_rows(console, fmt, layer_class, values["bias_split"], values["json"], values["verbose"])
    elif source and (fmt or layer_class):
        raise BadInput("a file says its own format and class; name the file alone (and --layer)")
    else:
        draw(console, source, fmt, layer_class, **values)


def _names_a_file(word: str) -> bool:
    """A file, or a name that is no format or class but that a format finds its file for (a TF1 checkpoint's
    prefix, as every command takes it)."""
    if Path(word).is_file():
        return True
    lower = word.lower()
    if lower in FORMATS or lower in FORMAT_ALIASES or any(r.source_class.lower() == lower for r in TABLE):
        return False
    from rnnconv.formats.registry import source_file

    return source_file(Path(word)) != Path(word)


# --- text ------------------------------------------------------------------------------------------


def explain_rows(
    console: Console,
    fmt: str | None,
    layer_class: str | None,
    bias_split: str,
    as_json: bool = False,
    verbose: bool = False,
) -> None:
    rows = table_rows(fmt, layer_class)
    if as_json:
        print(json.dumps([_row_document(row, bias_split) for row in rows], indent=1))
        return
    order = "; ".join(f"{cell.upper()} {' '.join(gates)}" for cell, gates in CUDNN_GATES.items() if len(gates) > 1)
    _say(console, f"cuDNN's gate order: {order}. H = hidden size, I = input size.")
    with_recipe = verbose or len(rows) <= 4
    for row in rows:
        console.print()
        console.print(f"[bold]{escape(row_title(row))}[/]")
        names = GATE_NAMES[row.cell]
        stored = " ".join(row.gate_order)
        _say(console, f"gates as stored: {stored} ({', '.join(f'{g} {names[g]}' for g in row.gate_order)})", 2)
        _say(console, f"matrices: {row.matrix}, {row.matrix.description}", 2)
        _say(console, f"biases: {row.bias}", 2)
        modes = ", ".join(f"{a} -> {m}" for a, m in row.modes.items())
        _say(console, f"cuDNN modes: {modes or 'none'}", 2)
        if not row.reset_after and not row.refusal:
            _say(console, "reset gate: before the recurrent product (converts to the formats that hold that form)", 2)
        if row.refusal:
            _say(console, f"not convertible: {row.refusal}", 2)
        elif row.note:
            _say(console, f"note: {row.note}", 2)
        if with_recipe and not row.refusal:
            _say(console, "cuDNN tensor = stored tensors:", 2)
            for tensor, expr in recipe(row, bias_split):
                extra = "   (P x H, with a projection only)" if tensor == CUDNN_TENSOR_NAMES["projection"] else ""
                _say(console, f"{tensor:<6} = {expr}{extra}", 4)
    if not with_recipe:
        console.print()
        _say(console, "Name a format and a class (rnnconv explain keras GRU), or add -v, for the recipes.")


def _say(console: Console, line: str, indent: int = 0) -> None:
    """One line of text, wrapped at spaces to WIDTH columns or the terminal's (continuations indented two more)."""
    lead = " " * indent
    wrapped = textwrap.wrap(
        line,
        min(WIDTH, max(console.width, 20)),
        initial_indent=lead,
        subsequent_indent=lead + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    for text in wrapped:
        console.print(escape(text))


def _row_document(row: Row, bias_split: str) -> dict[str, Any]:
    return {
        "format": row.format,
        "class": row.source_class,
        "when": dict(row.when),
        "cell": row.cell,
        "gate_order": list(row.gate_order),
        "matrices": row.matrix,
        "biases": row.bias,
        "tensors": dict(row.tensors),
        "modes": dict(row.modes),
        "defaults": dict(row.defaults),
        "refusal": row.refusal,
        "note": row.note,
        "recipe": None if row.refusal else dict(recipe(row, bias_split)),
    }


# --- the picture -----------------------------------------------------------------------------------


def draw(console: Console, source: Path | None, fmt: str | None, layer_class: str | None, **values: Any) -> None:
    from rnnconv.cli.picture import layout_for, map_cell, mapping_document, picture
    from rnnconv.core.canonical import RNNSpec

    split = values["bias_split"]
    outputs = [Path(p) for p in (values["svg"], values["html"]) if p]
    plain = _plain(console) and not outputs  # an exported picture is always in colour
    target = format_named(values["to"], "--to") if values["to"] else "cudnn"
    if source is None:
        if fmt is None:
            raise BadInput("name the source format: --from FORMAT (or FORMAT first), or give a file")
        mode = values["mode"] or _first_mode(fmt, layer_class)
        input_size, hidden_size = values["input_size"] or DEFAULT_SIZES[0], values["hidden_size"] or DEFAULT_SIZES[1]
        if layer_class:
            table_rows(fmt, layer_class)  # a class the format does not have is said as in the text
        spec = RNNSpec(mode, input_size, hidden_size)
        mappings = [map_cell(layout_for(fmt, spec, split, layer_class), layout_for(target, spec, split))]
        drawn = picture(mappings, plain)
    else:
        if values["mode"] or values["input_size"] or values["hidden_size"]:
            raise BadInput("a file says its own mode and sizes; leave out --mode, --input-size and --hidden-size")
        cells = _file_mappings(source, values["layer"], target, split)
        mappings = [mapping for mapping, _ in cells]
        drawn = picture(mappings, plain, [numbers for _, numbers in cells])
    if values["json"]:
        print(json.dumps(mapping_document(mappings), indent=1))
        return
    if not outputs:
        console.print(drawn)
        return
    title = f"{source.name + ', ' if source else ''}{mappings[0].source.name} -> {mappings[0].target.name}"
    _export(drawn, values["svg"], values["html"], values["force"], title)
    if not values["quiet"]:
        console.print("wrote " + ", ".join(escape(str(p)) for p in outputs))


def _first_mode(fmt: str, layer_class: str | None) -> str:
    for row in table_rows(fmt, layer_class):
        if row.modes and not row.refusal:
            return next(iter(row.modes.values()))
    raise BadInput(f"{fmt} {layer_class or ''} has no layer cuDNN can run".replace("  ", " "))


def _plain(console: Console) -> bool:
    """No colours (NO_COLOR, or not a terminal): the cells carry their gate letters instead."""
    return console.no_color or console.color_system is None


def _file_mappings(source: Path, layer: str | None, target: str, split: str) -> list[tuple[Any, Any]]:
    """The mapping of each direction of a file's first layer and its numbers, read through the registry."""
    from rnnconv.cli.picture import layout_for, map_cell
    from rnnconv.conversion import open_source, source_format
    from rnnconv.formats.registry import source_file
    from rnnconv.formats.settings import ReadOptions

    fmt = source_format(source_file(source), ReadOptions()).name
    options = ReadOptions(layer=layer, bias_split=split, take_all=layer is None)
    with open_source(source, options) as read:
        names = [rnn.name for rnn in read.rnns] + [name for name, _ in read.skipped]
        if len(names) > 1:  # take_all read every one, to name them; a picture shows one
            raise BadInput(f"{source} holds {len(names)} RNNs ({', '.join(names)}); pick the one to draw with --layer")
        (rnn,) = read.rnns
        spec, cells = rnn.spec, []
        for direction in range(spec.num_directions):
            mapping = map_cell(
                layout_for(fmt, spec, split, rnn.source.layer_class, rnn.source.keras_config, direction),
                layout_for(target, spec, split, direction=direction),
            )
            canonical = {
                (key.kind, key.gate): np.asarray(rnn.param(key), dtype=np.float64)
                for key in spec.param_keys()
                if key.layer == 0 and key.direction == direction
            }
            numbers = (mapping.source.from_canonical(canonical), mapping.target.from_canonical(canonical))
            cells.append((mapping, numbers))
    return cells


def _export(drawn: Any, svg: Path | None, html: Path | None, force: bool, title: str) -> None:
    """The picture as SVG and/or HTML, recorded by rich; written atomically, never over a file without --force."""
    from rnnconv.safeio.outputs import atomic_outputs

    probe = Console(width=MAX_EXPORT_WIDTH, file=io.StringIO())
    width = min(max(Measurement.get(probe, probe.options, drawn).maximum, 60), MAX_EXPORT_WIDTH)
    record = Console(
        record=True, width=width, file=io.StringIO(), force_terminal=True, color_system="truecolor", highlight=False
    )
    record.print(drawn)
    paths = [p for p in (svg, html) if p]
    with atomic_outputs(paths, force) as temps:
        for path, temp in zip(paths, temps):
            if path == svg:
                record.save_svg(str(temp), title=f"rnnconv explain: {title}", clear=False, code_format=_offline_svg())
            else:
                record.save_html(str(temp), clear=False)


def _offline_svg() -> str:
    """rich's SVG template without its web fonts: a picture must render offline, in the fonts the machine has."""
    from rich.console import CONSOLE_SVG_FORMAT

    template = re.sub(r"\s*@font-face \{\{.*?\}\}", "", CONSOLE_SVG_FORMAT, flags=re.S)
    return template.replace("font-family: Fira Code, monospace", f"font-family: {MONOSPACE}")
