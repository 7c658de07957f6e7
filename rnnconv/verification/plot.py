"""verify's errors drawn: the largest error at each time step, per direction, against the tolerance.

The output sequence is the last layer's, so it is the only one with an error per step; each
layer's final hidden state adds one point, at the step where its direction ends. matplotlib
comes with the `plot` extra and is imported only when a picture is asked for.
"""

from __future__ import annotations

from pathlib import Path

from rnnconv.core.report_contracts import Report
from rnnconv.errors import BackendMissing, BadInput
from rnnconv.table.constants import DIRECTIONS

PICTURE_FORMATS = ("svg", "png")
LAYER_MARKERS = "Ds^v<>ph"  # final states: the marker says the layer, the colour the direction


def check_plot(path: Path) -> None:
    """Before any work: a picture format matplotlib writes here (exit 2), and matplotlib itself (exit 3)."""
    if path.suffix[1:].lower() not in PICTURE_FORMATS:
        raise BadInput(f"--plot draws a .svg or .png picture; {path.name} names neither")
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise BackendMissing("--plot needs matplotlib, which is not installed: pip install 'rnnconv[plot]'") from None


def draw_errors(report: Report, path: Path, picture_format: str) -> None:
    """Max abs error against the time step on a log axis, one line per direction, the tolerance as a line."""
    from matplotlib.figure import Figure

    comparison, tol, spec = report.comparison, report.tolerance, report.spec
    assert comparison is not None and tol is not None and spec is not None  # verify compared before drawing
    steps = len(comparison.y_per_step)
    values = [*comparison.y_per_step, *(e.max_abs for e in comparison.h_n_per_layer_direction)]
    floor = min([v for v in values if v > 0] + [tol.at_unit]) / 10  # a log axis has no 0: exact steps sit here
    figure = Figure(figsize=(8, 4.5), layout="constrained")
    axes = figure.subplots()
    last = spec.num_layers - 1
    for direction, errors in enumerate(comparison.y_per_direction_per_step):
        axes.plot(
            range(steps),
            [max(e, floor) for e in errors],
            color=f"C{direction}",
            marker="o",
            label=f"output, layer {last} {DIRECTIONS[direction]}",
        )
    for cell in comparison.h_n_per_layer_direction:
        direction = DIRECTIONS.index(cell.direction)
        axes.scatter(
            [0 if direction else steps - 1],  # the step where that direction's final state is reached
            [max(cell.max_abs, floor)],
            s=80,
            marker=LAYER_MARKERS[cell.layer % len(LAYER_MARKERS)],
            facecolors="none",
            edgecolors=f"C{direction}",
            label=f"final h, layer {cell.layer} {cell.direction}",
        )
    axes.axhline(tol.at_unit, color="red", linestyle="--", label=f"tolerance at |x| = 1 ({tol.at_unit:.2g})")
    axes.set_yscale("log")
    axes.set_xlabel("time step")
    axes.set_ylabel("max abs error (blob vs source)")
    axes.set_title(f"{report.name}: {report.verdict}")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the plot: never over a line
    figure.savefig(path, format=picture_format)
