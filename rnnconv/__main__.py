"""The `rnnconv` command (and `python -m rnnconv`): the command line run with the cyclic collector off until its
libraries are imported.

Nothing numpy, pydantic and typer make as they are imported is garbage, yet the collector's passes over it took
0.017 s of a small conversion; `streams.collecting` freezes it and turns the collector on once the command starts
its own work, and the objects left at the end are left to the process's end.
"""

from __future__ import annotations

import gc


def main() -> None:
    gc.disable()
    from rnnconv.cli.commands import main as command

    try:
        command()
    finally:
        gc.freeze()  # the command is done (its outputs committed, its streams flushed): no collection on the way out


if __name__ == "__main__":
    main()
