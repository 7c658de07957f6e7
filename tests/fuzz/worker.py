"""The fuzz harness's worker: runs rnnconv commands in-process, one JSON request per line on stdin.

A request is {"args": [...]}; the answer is {"code", "stderr", "stdout_tail", "seconds"}. Running in-process
makes thousands of inputs affordable; the harness watches the worker from outside (time, memory) and
starts a new one when a command hangs or is killed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
LABEL = re.compile(r"^[a-z][a-z ]{0,30}: ")  # what a message's line starts with: "error: ", "warning: ", ...


def run(args: list[str]) -> dict[str, object]:
    from rnnconv.cli.commands import app

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            app(args, prog_name="rnnconv", standalone_mode=True)
        except SystemExit as exc:
            code = exc.code if exc.code is not None else 0
        except BaseException as exc:
            import traceback

            err.write("Traceback (escaped the CLI)\n" + "".join(traceback.format_exception(exc)))
            code = 99
    lines = err.getvalue().splitlines()
    return {
        "code": code if isinstance(code, int) else 1,
        "longest_message": max((len(LABEL.sub("", line, count=1)) for line in lines), default=0),
        "stderr": err.getvalue()[-4000:],
        "stdout_tail": out.getvalue()[-400:],
        "seconds": time.monotonic() - start,
    }


def main() -> None:
    import rnnconv.cli.commands  # noqa: F401 -- warm up before the first timed request

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(run(request["args"])), flush=True)


if __name__ == "__main__":
    main()
