"""`rnnconv gpu-battery`: settle the layout questions on a real GPU, in one command.

For every configuration (CONFIGURATIONS: every mode, 1-3 layers, both directions, LSTM
projections, float32/float16/bfloat16/float64, sizes that are odd and not multiples of 8,
one large), it asks cuDNN where it puts every tensor (cudnnGetRNNWeightSpaceSize, and
cudnnGetRNNWeightParams for every pseudo-layer and linLayerID: offset, dims, strides),
compares that with rnnconv's layout, and runs a random blob through cudnnRNNForward with
a ragged and a full-length batch against the numpy reference (and, for the full-length
one, torch._cudnn_rnn where PyTorch has CUDA). The JSON it writes records everything cuDNN
reported; committed as fixtures/cudnn_layout.json it is what tests/test_cudnn_layout_fixture.py
holds rnnconv's layout to. It is rewritten as the battery goes, so an interrupted or failing
run still leaves what it found.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import platform
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.compare import compare, tolerance
from rnnconv.core.contracts import dump
from rnnconv.core.dtypes import decode, element_type, encode
from rnnconv.core.reference import forward
from rnnconv.core.weightspace import LAYOUT_NAME, LAYOUT_VERSION, region_map, weight_space_elements
from rnnconv.errors import BackendMissing, RnnconvError
from rnnconv.formats import registry
from rnnconv.formats.settings import WriteOptions
from rnnconv.gpu.api import CudnnError
from rnnconv.gpu.backend import (
    CudnnBackend,
    LayoutMismatch,
    Placement,
    expected_dims,
    gpu_session,
    layout_findings,
    placements,
    probe,
)
from rnnconv.gpu.descriptors import Descriptors, rnn_settings
from rnnconv.safeio.outputs import atomic_outputs, check_writable
from rnnconv.table.constants import LSTM
from rnnconv.version import __version__

FORMAT = "rnnconv-cudnn-layout/1"
DTYPES = ("float32", "float16", "bfloat16", "float64")
# (input, hidden, LSTM projection): small, odd and not multiples of 8 (where alignment padding would show),
# square, and one large (with a projection under a large hidden size).
SMALL, ODD, SQUARE, LARGE = (5, 7, 3), (37, 61, 29), (143, 143, 67), (1024, 2048, 512)
VARIANTS = (("lstm", False), ("lstm", True), ("gru", False), ("rnn_tanh", False), ("rnn_relu", False))
STEPS, BATCH, RAGGED = 6, 3, (6, 4, 2)


@dataclass(frozen=True)
class Configuration:
    """One battery run: the RNN, which group of the battery it belongs to, and whether --quick runs it."""

    spec: RNNSpec
    group: str
    quick: bool = False


def _spec(variant: tuple[str, bool], sizes: tuple[int, int, int], layers: int, bi: bool, dtype: str) -> RNNSpec:
    (mode, projected), (n_in, hidden, proj) = variant, sizes
    return RNNSpec(mode, n_in, hidden, layers, bi, proj if projected else 0, dtype)


def configurations(quick: bool = False) -> list[Configuration]:
    """The battery, in the order it runs: the grid, the odd sizes, the large size (--quick: its marked subset)."""
    found = []
    for variant, layers, bi, dtype in itertools.product(VARIANTS, (1, 2, 3), (False, True), DTYPES):
        marked = (layers == 2 and bi and dtype == "float32") or (
            (layers, bi) == (1, False) and dtype != "float32" and variant in (("lstm", True), ("gru", False))
        )
        found.append(Configuration(_spec(variant, SMALL, layers, bi, dtype), "grid", marked))
    for sizes, variant, (layers, bi), dtype in itertools.product(
        (ODD, SQUARE), VARIANTS, ((1, False), (2, True)), DTYPES
    ):
        marked = (layers, bi) == (2, True) and dtype == "float16" and variant in (("lstm", True), ("gru", False))
        found.append(Configuration(_spec(variant, sizes, layers, bi, dtype), "odd sizes", marked))
    for variant, dtype in itertools.product(VARIANTS, ("float32", "float16", "bfloat16")):
        marked = variant == ("lstm", True) and dtype == "float32"
        found.append(Configuration(_spec(variant, LARGE, 1, True, dtype), "large", marked))
    return [c for c in found if c.quick] if quick else found


def random_rnn(spec: RNNSpec, seed: int) -> CanonicalRNN:
    """Random weights at PyTorch's initial scale. Larger ones make a test ill-conditioned, not stricter: with
    N(0, 0.3) weights at hidden 2048, one float32 rounding of the weights moves the outputs by 23x verify's
    tolerance (measured), so any two correct engines would disagree."""
    rng = np.random.default_rng(seed)
    # U(-k, k), k = 1/sqrt(H), as PyTorch initialises RNNs: a large RNN's gates stay out of saturation, and
    # uniform float32 draws are several times faster than normal ones for the 50M weights of the large ones
    scale = np.float32(2 / np.sqrt(spec.hidden_size))
    arrays = {key: (rng.random(spec.param_shape(key), dtype=np.float32) - 0.5) * scale for key in spec.param_keys()}
    return CanonicalRNN.from_arrays("battery", spec, arrays)


class Recorder:
    """The battery's JSON, rewritten (atomically) as configurations finish, and once more at the end."""

    def __init__(self, output: Path, force: bool, head: dict[str, Any]):
        self.output, self.force, self.head = output, force, head
        self.entries: list[dict[str, Any]] = []
        self.written_at = 0.0

    def add(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)
        if time.monotonic() - self.written_at > 1.0:  # at most a second of work lost to a kill
            self.write(complete=False)

    def write(self, complete: bool, stopped: str | None = None) -> dict[str, Any]:
        report = {
            **self.head,
            "complete": complete,
            "stopped": stopped,
            "configurations_run": len(self.entries),
            "all_match": complete and all(_passed(e) for e in self.entries),
            "configurations": self.entries,
        }
        with atomic_outputs([self.output], self.force) as (temp,):
            temp.write_text(render_json(report))
        self.force = True  # from now on the file is this run's own
        self.written_at = time.monotonic()
        return report


def render_json(report: dict[str, Any]) -> str:
    """JSON with one line per configuration field and one per placement: readable, and diffs stay small."""
    lines = ["{"]
    head = [(k, v) for k, v in report.items() if k != "configurations"]
    lines += [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head]
    lines.append(' "configurations": [')
    for index, entry in enumerate(report["configurations"]):
        fields = [(k, v) for k, v in entry.items() if k != "placements"]
        body = [f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in fields]
        if "placements" in entry:
            rows = ",\n".join(f"    {json.dumps(p)}" for p in entry["placements"])
            body.append('   "placements": [\n' + rows + "\n   ]" if rows else '   "placements": []')
        end = "," if index < len(report["configurations"]) - 1 else ""
        lines.append("  {\n" + ",\n".join(body) + "\n  }" + end)
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"


def run_battery(
    output: Path, force: bool = False, quick: bool = False, say: Callable[[str], None] = print
) -> dict[str, Any]:
    check_writable([output], force)
    status = probe()
    if not status.ok:
        raise BackendMissing(f"the GPU battery needs cuDNN on a GPU: {status.reason}")
    backend = CudnnBackend(status)
    chosen = configurations(quick)
    head: dict[str, Any] = {
        "format": FORMAT,
        "rnnconv": __version__,
        "rnnconv_layout": f"{LAYOUT_NAME} v{LAYOUT_VERSION}",
        "python": platform.python_version(),
        "cudnn": status.found,
        "quick": quick,
        "configurations_planned": len(chosen),
    }
    recorder = Recorder(output, force, head)
    stopped: str | None = "interrupted"
    started = time.monotonic()
    with gpu_session(backend.cudnn) as session, tempfile.TemporaryDirectory() as tmp:
        backend.session = session
        head.update(gpu=session.device_name(), compute_capability=".".join(map(str, session.compute_capability())))
        head["cuda_session"] = session.describe()
        head["nvidia_driver"] = nvidia_driver()
        say(f"{len(chosen)} configurations on {head['gpu']} (cuDNN {status.found.get('cudnn_version')})")
        try:
            for index, configuration in enumerate(chosen):
                entry = run_configuration(backend, configuration, index, Path(tmp))
                recorder.add(entry)
                say(f"[{index + 1}/{len(chosen)}] {configuration.spec.describe():64s} {_verdict(entry)}")
            stopped = None
        finally:
            head["seconds"] = round(time.monotonic() - started, 1)
            report = recorder.write(complete=stopped is None, stopped=stopped)
    return report


def nvidia_driver(path: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The NVIDIA kernel driver's version (e.g. 580.159.04), from the file the driver keeps; None without one."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"Kernel Module(?:\s+for\s+\w+)?\s+(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else None


def run_configuration(backend: CudnnBackend, configuration: Configuration, index: int, tmp: Path) -> dict[str, Any]:
    """One configuration's entry: what cuDNN reported, how it compares, and the forward runs."""
    spec = configuration.spec
    entry: dict[str, Any] = {
        "index": index,
        "group": configuration.group,
        "quick": configuration.quick,
        "spec": spec.to_dict(),
        "settings": asdict(rnn_settings(spec)),
    }
    started = time.monotonic()
    try:
        entry.update(reported_layout(backend, spec))
        path = tmp / "battery.bin"
        weight_spaces = registry.weight_spaces()
        weight_spaces.write([random_rnn(spec, index)], path, WriteOptions(dtype=spec.dtype, force=True))
        (blob,) = weight_spaces.blobs(path)
        entry["forward_runs"] = {}
        for batch in ("ragged", "full"):
            try:
                entry["forward_runs"][batch] = check_forward(backend, blob, index, ragged=batch == "ragged")
            except LayoutMismatch:  # the layout's findings are already in the entry; no forward is meaningful
                entry["forward_runs"][batch] = {"ran": False, "why": "rnnconv's layout differs from cuDNN's"}
                break
        del blob
    except (RnnconvError, MemoryError) as exc:  # one configuration cuDNN refuses must not end the battery
        entry["error"] = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, CudnnError):
            entry["cudnn_status"] = exc.status
    entry["seconds"] = round(time.monotonic() - started, 3)
    return entry


def reported_layout(backend: CudnnBackend, spec: RNNSpec) -> dict[str, Any]:
    """The weight-space size and every tensor's place as cuDNN reports them, next to rnnconv's."""
    session = backend.session
    assert session is not None
    itemsize = element_type(spec.dtype).itemsize
    cudnn = backend.cudnn
    ours = region_map(spec)
    with session.scope(), Descriptors(cudnn, spec, 1, 1, np.ones(1, np.int32), session.handle) as desc:
        size = ctypes.c_size_t()
        cudnn.call("cudnnGetRNNWeightSpaceSize", session.handle, desc.rnn, ctypes.byref(size))
        base = session.alloc(size.value)
        found = placements(cudnn, session.handle, desc, spec, int(base), size.value)
    rnnconv_bytes = weight_space_elements(spec) * itemsize
    findings = layout_findings(spec, ours, found, size.value, rnnconv_bytes)
    return {
        "cudnn_weight_space_bytes": size.value,
        "rnnconv_weight_space_bytes": rnnconv_bytes,
        "layout_matches": not findings,
        "layout_differences": [dump(f) for f in findings],
        "placements": [_placement_record(p, ours, itemsize) for p in found],
    }


def _placement_record(placed: Placement, ours: dict[ParamKey, Any], itemsize: int) -> dict[str, Any]:
    region = ours.get(placed.key)
    record = {
        "tensor": placed.key.label,
        "kind": placed.key.kind,
        "gate": placed.key.gate,
        "pseudo_layer": placed.pseudo_layer,
        "lin_layer_id": placed.lin_layer_id,
        "offset_bytes": placed.offset_bytes,
        "dims": placed.dims,
        "strides": placed.strides,
    }
    if region is not None:
        record["rnnconv_offset_bytes"] = region.offset * itemsize
        record["rnnconv_dims"], record["rnnconv_strides"] = expected_dims(region.shape)
    return record


def placements_from_record(entry: dict[str, Any]) -> list[Placement]:
    """The placements of one configuration of the JSON, as cuDNN reported them (what the fixture test reads)."""
    directions = 2 if entry["spec"]["bidirectional"] else 1
    found = []
    for p in entry["placements"]:
        layer, direction = divmod(p["pseudo_layer"], directions)
        key = ParamKey(layer, direction, p["kind"], p["gate"])
        found.append(Placement(key, p["pseudo_layer"], p["lin_layer_id"], p["offset_bytes"], p["dims"], p["strides"]))
    return found


def check_forward(backend: CudnnBackend, blob: Blob, seed: int, ragged: bool) -> dict[str, Any]:
    """cudnnRNNForward (after its layout check) against the numpy reference, compared as verify compares:
    |cuDNN - reference| <= atol + rtol * |reference|, the reference given the inputs rounded to the blob's type."""
    spec = blob.spec
    etype = element_type(spec.dtype)
    rng = np.random.default_rng(seed)
    pseudo = spec.num_layers * spec.num_directions

    def rounded(shape: tuple[int, ...], scale: float) -> np.ndarray:
        return decode(encode(rng.normal(0, scale, shape).astype(np.float32), etype), etype).astype(np.float64)

    x = rounded((STEPS, BATCH, spec.input_size), 0.8)
    h0 = rounded((pseudo, BATCH, spec.output_size), 0.5)
    c0 = rounded((pseudo, BATCH, spec.hidden_size), 0.5) if spec.mode == LSTM else None
    lengths = np.array(RAGGED if ragged else (STEPS,) * BATCH)
    backend.details.pop("torch_cudnn_rnn", None)
    got = backend.run(blob, {"x": x, "h0": h0, "c0": c0, "lengths": lengths})
    y, h_n, c_n = forward(spec, blob.param, x, h0, c0, lengths)
    tol = tolerance("cudnn", spec.dtype, spec.dtype)
    comparison = compare(spec, got, {"y": y, "h_n": h_n, "c_n": c_n}, tol, lengths)
    return {
        "ran": True,
        "lengths": [int(v) for v in lengths],
        "math_type": backend.details.get("math_type"),
        "math_type_refused": backend.details.get("math_type_refused"),
        "max_abs_vs_numpy": comparison.worst,
        "atol": tol.atol,
        "rtol": tol.rtol,
        "matches": comparison.match,
        "torch_cudnn_rnn": backend.details.get("torch_cudnn_rnn"),
    }


def _passed(entry: dict[str, Any]) -> bool:
    runs = entry.get("forward_runs", {}).values()
    return bool(entry.get("layout_matches")) and bool(runs) and all(r.get("matches") for r in runs)


def _verdict(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return f"ERROR {entry['error']}"
    if not entry["layout_matches"]:
        return f"layout DIFFERS ({len(entry['layout_differences'])} differences)"
    runs = entry["forward_runs"]
    worst = max(r["max_abs_vs_numpy"] for r in runs.values())
    math = runs["ragged"]["math_type"]
    torch_ran = any((r.get("torch_cudnn_rnn") or {}).get("ran") for r in runs.values())
    return (
        f"layout matches, forward max |cuDNN - numpy| {worst:.2e} "
        + ("ok" if all(r["matches"] for r in runs.values()) else "TOO LARGE")
        + f" ({math}{', torch cross-check' if torch_ran else ''}, {entry['seconds']:.2f} s)"
    )


def fixture_problems(report: dict[str, Any]) -> list[str]:
    """What in a battery's JSON (fixtures/cudnn_layout.json) disagrees with rnnconv's layout, one sentence each:
    an incomplete run, a configuration that did not run, and every difference between the offsets, dims,
    strides and sizes cuDNN reported and rnnconv's."""
    problems = []
    if report.get("format") != FORMAT:
        return [f"not a battery's JSON (format {report.get('format')!r}, expected {FORMAT!r})"]
    if not report.get("complete"):
        problems.append(f"the battery did not finish ({report.get('stopped')}): rerun it to the end")
    for entry in report["configurations"]:
        spec = RNNSpec(**entry["spec"])
        if "placements" not in entry:
            problems.append(f"{spec.describe()}: cuDNN reported no layout ({entry.get('error', 'no error recorded')})")
            continue
        size = weight_space_elements(spec) * element_type(spec.dtype).itemsize
        found = placements_from_record(entry)
        for finding in layout_findings(spec, region_map(spec), found, entry["cudnn_weight_space_bytes"], size):
            what = (
                "cuDNN holds no such tensor"
                if "missing" in finding.differs
                else "differs in " + (" and ".join(finding.differs))
            )
            problems.append(f"{spec.describe()}: {finding.tensor} {what}")
    return problems
