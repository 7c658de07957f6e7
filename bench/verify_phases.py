"""One `verify`, timed by phase, in this process: what bench.py's verify rows run.

    python bench/verify_phases.py FILE BACKEND FRAMEWORK[,FRAMEWORK...] [--against SOURCE]

Prints one JSON line: `import` (the frameworks the source and the written file run in, imported first, as verify
would import them), `read` (rnnconv, the written file and its source found and opened), `source` (the source loaded
and run in its framework), `written` (the written file run: the numpy reference of cuDNN's equations for a blob, the
runtime for a runtime's file), `compare` (the comparison, the verdict and the report), `total`, and the verdict. The
phases are verify's own stages (`rnnconv.verify(stage=...)`).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import time

PHASES = (("loading and running the source", "source"), ("running the blob", "written"), ("comparing", "compare"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("backend")
    parser.add_argument("frameworks")
    parser.add_argument("--against")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    start = time.perf_counter()
    for name in filter(None, args.frameworks.split(",")):
        importlib.import_module(name)
    marks = [("read", time.perf_counter())]

    def stage(what: str) -> None:
        phase = next((name for prefix, name in PHASES if what.startswith(prefix)), None)
        if phase is not None and phase not in dict(marks):
            marks.append((phase, time.perf_counter()))

    import rnnconv

    report = rnnconv.verify(args.file, against=args.against, backend=args.backend, stage=stage)
    marks.append(("end", time.perf_counter()))
    times = {"import": marks[0][1] - start}
    times.update({name: end - begin for (name, begin), (_, end) in itertools.pairwise(marks)})
    times["total"] = marks[-1][1] - start
    print(json.dumps({"verdict": report.verdict, **{k: round(v, 4) for k, v in times.items()}}))


if __name__ == "__main__":
    main()
