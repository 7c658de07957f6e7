"""Writing an OpenVINO IR next to `cp`: a PyTorch nn.LSTM state_dict converted to model.xml + model.bin.

    python bench/openvino_write.py [--gb 1.4] [--workdir /tmp/rnnconv-bench-openvino] [--repeat 3]

Makes (once) an nn.LSTM(2048, 4096, num_layers=N) state_dict of about --gb gigabytes (N chosen for it, float32)
saved with torch.save, then times fresh processes, best of --repeat, with the source in the page cache (after
`sync`): `cp` of the .pt, `rnnconv convert model.pt model.xml`, and the same conversion of a tiny nn.LSTM (the
floor: starting Python and importing rnnconv). It prints the times, the ratio (the issue's target: at most 3x cp),
the ratio without the floor, and the conversion's peak resident memory, which stays small (the matrices are copied
file to file, gate by gate, in the kernel). A benchmark, not a test: it judges nothing by exit code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INPUT, HIDDEN = 2048, 4096
TARGET = 3.0  # x cp
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def layers_for(gb: float) -> int:
    """The layer count whose float32 nn.LSTM comes nearest to `gb` gigabytes (at least one layer)."""
    first = 4 * HIDDEN * (INPUT + HIDDEN + 2) * 4
    later = 4 * HIDDEN * (2 * HIDDEN + 2) * 4
    return max(1, 1 + round((gb * 1e9 - first) / later))


def make_model(path: Path, layers: int) -> None:
    code = (
        "import sys, torch\n"
        "torch.manual_seed(0)\n"
        f"m = torch.nn.LSTM({INPUT}, {HIDDEN}, num_layers={layers})\n"
        "torch.save(m.state_dict(), sys.argv[1])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident memory (bytes) of one fresh process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed: {process.stderr.read().decode() if process.stderr else ''}")
    return elapsed, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.4, help="the source's size in gigabytes [default: 1.4]")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rnnconv-bench-openvino"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    layers = layers_for(args.gb)
    source = args.workdir / f"lstm_{INPUT}_{HIDDEN}_x{layers}.pt"
    if not source.exists():
        print(f"making {source} (nn.LSTM({INPUT}, {HIDDEN}, num_layers={layers}))", flush=True)
        make_model(source, layers)
    size = source.stat().st_size
    copy, xml = args.workdir / "copy.pt", args.workdir / "model.xml"
    tiny, tiny_xml = args.workdir / "tiny.pt", args.workdir / "tiny.xml"
    make_tiny = "import sys, torch; torch.save(torch.nn.LSTM(4, 4).state_dict(), sys.argv[1])"
    subprocess.run([sys.executable, "-c", make_tiny, str(tiny)], check=True)
    cp_times, convert_times, peaks, floors = [], [], [], []
    subprocess.run(["cat", str(source)], stdout=subprocess.DEVNULL, check=True)  # into the page cache
    for _ in range(args.repeat):
        for path in (copy, xml, xml.with_suffix(".bin"), tiny_xml, tiny_xml.with_suffix(".bin")):
            path.unlink(missing_ok=True)
        floors.append(timed([sys.executable, "-m", "rnnconv", "convert", str(tiny), str(tiny_xml)])[0])
        os.sync()
        cp_times.append(timed(["cp", str(source), str(copy)])[0])
        os.sync()
        elapsed, peak = timed([sys.executable, "-m", "rnnconv", "convert", str(source), str(xml)])
        convert_times.append(elapsed)
        peaks.append(peak)
    written = xml.with_suffix(".bin").stat().st_size
    best_cp, best_convert = min(cp_times), min(convert_times)
    ratio = best_convert / best_cp
    print(f"source   {source.name}: {size / 1e9:.2f} GB ({layers} layers); model.bin {written / 1e9:.2f} GB")
    print(f"cp       best {best_cp:.2f} s of {args.repeat}")
    print(f"convert  best {best_convert:.2f} s of {args.repeat} (peak RSS {max(peaks) / 1e9:.2f} GB)")
    floor = min(floors)
    print(f"floor    best {floor:.2f} s (a tiny nn.LSTM converted: Python and rnnconv's imports)")
    print(f"ratio    {ratio:.2f} x cp (target <= {TARGET:g}): {'met' if ratio <= TARGET else 'NOT met'}")
    print(f"         {(best_convert - floor) / best_cp:.2f} x cp without the floor")
    for path in (copy, xml, xml.with_suffix(".bin"), tiny, tiny_xml, tiny_xml.with_suffix(".bin")):
        path.unlink(missing_ok=True)
    if os.environ.get("RNNCONV_BENCH_KEEP") != "1" and shutil.disk_usage(args.workdir).free < 4 * size:
        source.unlink()


if __name__ == "__main__":
    main()
