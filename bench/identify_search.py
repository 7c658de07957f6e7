"""How `rnnconv identify`'s search grows with the stated sizes: it must not (a ratio near 1 is the target).

    python bench/identify_search.py [--repeat 5]

Times, in this process, the size search alone (no probe: nothing is read) on the jax fixture for a small spec
and for the most hostile one the flags allow (1024 bidirectional layers, sizes 2**31 - 1), and the
probe run of the jax fixture (18 candidates, each read and run through the numpy reference). Prints the best
of --repeat runs, the candidates searched, and the hostile search's time as a ratio to the small one's.
A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import rnnconv

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "identify"
SMALL = {"mode": "lstm", "input_size": 5, "hidden_size": 7, "num_layers": 2, "bidirectional": True}
HOSTILE = {**SMALL, "input_size": 2**31 - 1, "hidden_size": 2**31 - 1, "num_layers": 1024}


def best(repeat: int, **arguments: object) -> tuple[float, int]:
    times, searched = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        searched = rnnconv.identify(FIXTURE / "jax_lstm.bin", **arguments).searched  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return min(times), searched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    best(1, **SMALL)  # imports and first-use costs out of the way
    small, small_searched = best(repeat, **SMALL)
    hostile, hostile_searched = best(repeat, **HOSTILE)
    probed, _ = best(repeat, **SMALL, probe=FIXTURE / "jax_lstm_probe.npz")
    print(f"size search, small spec:   {small * 1e3:8.1f} ms  ({small_searched} candidates)")
    print(f"size search, hostile spec: {hostile * 1e3:8.1f} ms  ({hostile_searched} candidates)")
    print(f"hostile / small:           {hostile / small:8.2f}x  (target: about 1)")
    print(f"probe run (jax fixture):   {probed * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
