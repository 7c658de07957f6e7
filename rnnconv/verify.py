"""`rnnconv verify`: does the blob compute what its source model computes?

The source runs in its own framework (Keras or PyTorch, on the CPU); the blob runs
through cuDNN or, without a GPU, through the numpy reference of cuDNN's equations,
which reads every weight from the blob itself through the layout table. Both get
the same seeded inputs and non-zero initial states; outputs, final h and final c
are compared overall, per time step and per layer and direction. On a mismatch,
`diagnose` tries the usual mistakes on the blob and names the one that explains it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv import __version__
from rnnconv.canonical import RNNSpec
from rnnconv.errors import BadInput, Mismatch
from rnnconv.formats.cudnn import Blob, open_bin, open_safetensors
from rnnconv.fsutil import sha256_of
from rnnconv.weightspace import REPORTED_LAYOUT_NAME, regions

# (atol, rtol) by backend and the blob's element type, when the blob is as precise as its source.
TOLERANCES = {
    ("numpy", "float64"): (5e-5, 1e-4), ("numpy", "float32"): (5e-5, 1e-4),
    ("numpy", "float16"): (5e-5, 1e-4), ("numpy", "bfloat16"): (5e-5, 1e-4),
    ("cudnn", "float64"): (5e-5, 1e-4), ("cudnn", "float32"): (2e-4, 1e-3),
    ("cudnn", "float16"): (2e-2, 2e-2), ("cudnn", "bfloat16"): (6e-2, 6e-2),
}
# When the blob or its source is in half precision, that rounding dominates.
NARROWED = {"float16": (2e-2, 2e-2), "bfloat16": (6e-2, 6e-2)}
PRECISION = {"float64": 3, "float32": 2, "float16": 1, "bfloat16": 0}


@dataclass
class VerifyOptions:
    against: Path | None = None
    backend: str = "auto"
    seq_len: int = 8
    batch: int = 3
    seed: int = 0
    ragged: bool = False
    atol: float | None = None
    rtol: float | None = None
    layer: str | None = None
    raw_spec: RNNSpec | None = None
    require_source: bool = False
    diagnose: bool = True
    relayout: Path | None = None  # where to write the blob in cuDNN's layout when they differ
    force: bool = False


@dataclass
class Report:
    data: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return self.data["verdict"]

    @property
    def exit_code(self) -> int:
        return Mismatch.exit_code if self.verdict == "mismatch" else 0


def open_blob(path: Path, options: VerifyOptions) -> Blob:
    if options.raw_spec is not None:
        return open_bin(path, options.raw_spec)
    from rnnconv.detect import CUDNN_BIN, CUDNN_SAFETENSORS, detect

    kind = detect(path)
    if kind == CUDNN_BIN:
        return open_bin(path)
    if kind != CUDNN_SAFETENSORS:
        raise BadInput(f"{path} is not a cuDNN blob (a .bin with its sidecar, or an rnnconv .safetensors); "
                       f"verify checks what rnnconv wrote")
    blobs = open_safetensors(path)
    if options.layer:
        chosen = [b for b in blobs if b.name == options.layer]
        if not chosen:
            raise BadInput(f"{path} has no RNN named {options.layer!r}; it holds {', '.join(b.name for b in blobs)}")
        return chosen[0]
    if len(blobs) > 1:
        raise BadInput(f"{path} holds {len(blobs)} RNNs ({', '.join(b.name for b in blobs)}); pick one with --layer")
    return blobs[0]


def structural_checks(blob: Blob) -> tuple[list[dict[str, Any]], list[str]]:
    """What can be checked without a source: size (checked on opening), values, description."""
    checks = [{"check": "size", "ok": True,
               "detail": f"{blob.words.size * blob.etype.itemsize} bytes = the spec's weight space"}]
    problems = []
    nonfinite = 0
    chunk = 1 << 22
    for start in range(0, blob.words.size, chunk):
        values = blob.decoded(start, start + chunk)
        nonfinite += int(values.size - np.count_nonzero(np.isfinite(values)))
    checks.append({"check": "finite values", "ok": nonfinite == 0,
                   "detail": f"{nonfinite} NaN or Inf values" if nonfinite else "all finite"})
    if nonfinite:
        problems.append(f"the blob holds {nonfinite} NaN or Inf values")
    described = blob.doc.get("tensors")
    if described is not None and blob.doc.get("layout", {}).get("name") == REPORTED_LAYOUT_NAME:
        checks.append({"check": "tensor table", "ok": True, "detail": "offsets a GPU's cuDNN reported"})
    elif described is not None:
        expected = [r.to_dict(blob.etype.itemsize) for r in regions(blob.spec)]
        ok = described == expected
        checks.append({"check": "tensor table", "ok": ok,
                       "detail": "matches the layout" if ok else "differs from the layout this rnnconv computes"})
        if not ok:
            problems.append("the sidecar's tensor offsets differ from the layout rnnconv computes for its spec")
    cudnn = blob.doc.get("cudnn")
    if cudnn is not None:
        from rnnconv.layouts import CUDNN_MODES

        ok = (cudnn.get("cudnnRNNMode_t") == CUDNN_MODES[blob.spec.mode][1]
              and cudnn.get("hiddenSize") == blob.spec.hidden_size and cudnn.get("inputSize") == blob.spec.input_size
              and cudnn.get("numLayers") == blob.spec.num_layers
              and cudnn.get("cudnnDirectionMode_t") == int(blob.spec.bidirectional)
              and cudnn.get("cudnnDataType_t") == blob.etype.cudnn)
        checks.append({"check": "cuDNN settings", "ok": ok, "detail": "agree with the spec" if ok else
                       "contradict the spec"})
        if not ok:
            problems.append("the sidecar's cuDNN settings contradict its spec")
    return checks, problems


def make_inputs(spec: RNNSpec, options: VerifyOptions) -> dict[str, np.ndarray | None]:
    """Seeded, non-saturating inputs, distinct per batch item, with non-zero initial states."""
    if options.seq_len < 2 or options.batch < 1:
        raise BadInput("verify needs --seq-len of at least 2 and --batch of at least 1")
    rng = np.random.default_rng(options.seed)
    pseudo = spec.num_layers * spec.num_directions
    x = rng.normal(0.0, 0.8, (options.seq_len, options.batch, spec.input_size)).astype(np.float32)
    h0 = rng.normal(0.0, 0.5, (pseudo, options.batch, spec.output_size)).astype(np.float32)
    c0 = rng.normal(0.0, 0.5, (pseudo, options.batch, spec.hidden_size)).astype(np.float32)
    lengths = None
    if options.ragged:
        lengths = rng.integers(1, options.seq_len + 1, options.batch)
        lengths[0] = options.seq_len
    return {"x": x, "h0": h0, "c0": c0 if spec.mode == "lstm" else None, "lengths": lengths}


def resolve_source(path: Path, recorded: dict[str, Any], select: str | None) -> dict[str, Any]:
    """What to run in a source given with --against: the recorded layer, else the one --layer or the file names."""
    from rnnconv.convert import SOURCE_KINDS
    from rnnconv.detect import detect

    kind = SOURCE_KINDS[detect(path)]
    source = dict(recorded)
    if kind == "keras":
        source.setdefault("format", "keras")
        if not source.get("layer") and not source.get("stacked"):
            from rnnconv.formats.keras import KerasFile

            with KerasFile(path) as keras_file:
                source["layer"] = keras_file.layer(select).name
    elif kind == "torch":
        source.setdefault("format", "torch")
        if "prefix" not in source:
            from rnnconv.formats.torch import find_rnns, load_state_dict, pick

            rnn = pick(find_rnns(load_state_dict(path)), select, path)
            source.update(prefix=rnn.prefix, layer=rnn.name)
    else:
        raise BadInput(f"--against {path} is a cuDNN blob; give the Keras or PyTorch model it came from")
    return source


def run_source(blob: Blob, source: dict[str, Any], path: Path, inputs: dict[str, Any]) -> tuple[dict, str]:
    """The source model's own y, h_n, c_n (sequence-major, cuDNN's shapes) and how it ran."""
    spec = blob.spec
    fmt = source.get("format", "")
    if fmt.startswith("keras"):
        from rnnconv.runners.keras_runner import load_source_layers, run_layer

        names = source.get("stacked") or [source.get("layer")]
        keras, layers, how = load_source_layers(path, names)
        dirs = spec.num_directions
        x = inputs["x"].transpose(1, 0, 2)
        hs, cs = [], []
        for k, layer in enumerate(layers):
            part = slice(k * dirs, (k + 1) * dirs)
            c0 = inputs["c0"][part] if inputs["c0"] is not None else None
            got = run_layer(keras, layer, x, inputs["h0"][part], c0, inputs["lengths"])
            x = got["y"]
            hs.append(got["h_n"])
            cs.append(got["c_n"])
        c_n = np.concatenate(cs) if cs[0] is not None else None
        return {"y": x.transpose(1, 0, 2), "h_n": np.concatenate(hs), "c_n": c_n}, how
    if fmt.startswith("torch"):
        from rnnconv.runners.torch_runner import load_source_module, run_module

        torch, module, is_cell, how = load_source_module(path, source.get("prefix", ""), spec)
        return run_module(torch, module, spec, is_cell, inputs["x"], inputs["h0"], inputs["c0"],
                          inputs["lengths"]), how
    raise BadInput(f"the blob's source format {fmt!r} cannot be run by verify (Keras and PyTorch sources can)")


def compare(spec: RNNSpec, got: dict[str, Any], want: dict[str, Any], atol: float, rtol: float,
            lengths: np.ndarray | None) -> dict[str, Any]:
    """Errors overall, per time step, per output direction and per layer and direction."""
    steps, batch = want["y"].shape[:2]
    valid = np.ones((steps, batch), bool) if lengths is None else np.arange(steps)[:, None] < lengths[None, :]
    out: dict[str, Any] = {}
    ok = True
    for name in ("y", "h_n", "c_n"):
        if want.get(name) is None:
            continue
        a, b = np.asarray(got[name], np.float64), np.asarray(want[name], np.float64)
        mask = valid[..., None] if name == "y" else np.ones_like(a, bool)
        diff = np.where(mask, np.abs(a - b), 0.0)
        rel = diff / np.maximum(np.abs(b), 1e-6)
        out[name] = {"max_abs": float(diff.max()), "max_rel": float(np.where(mask, rel, 0).max())}
        ok &= bool(np.all(diff <= atol + rtol * np.abs(b)))
        if name == "y":
            out["y_per_step"] = [float(diff[t].max()) for t in range(steps)]
            half = spec.output_size
            out["y_per_direction"] = [float(diff[..., d * half:(d + 1) * half].max())
                                      for d in range(spec.num_directions)]
        else:
            out[f"{name}_per_layer_direction"] = [
                {"layer": p // spec.num_directions, "direction": "fwd" if p % spec.num_directions == 0 else "rev",
                 "max_abs": float(diff[p].max())} for p in range(diff.shape[0])]
    out["match"] = ok
    return out


def tolerance(blob: Blob, backend: str, source: dict[str, Any], options: VerifyOptions) -> tuple[float, float]:
    """The table's tolerance, widened when either side holds or computes in half precision."""
    atol, rtol = TOLERANCES[(backend, blob.spec.dtype)]
    narrowest = min((blob.spec.dtype, source.get("dtype", blob.spec.dtype)), key=lambda d: PRECISION.get(d, 2))
    if narrowest in NARROWED:
        atol, rtol = max(atol, NARROWED[narrowest][0]), max(rtol, NARROWED[narrowest][1])
    return (options.atol if options.atol is not None else atol, options.rtol if options.rtol is not None else rtol)


def verify(path: Path, options: VerifyOptions) -> Report:
    from rnnconv.backends import select_backend

    blob = open_blob(path, options)
    report = Report()
    checks, problems = structural_checks(blob)
    source = dict(blob.doc.get("source") or {})
    data: dict[str, Any] = report.data
    data.update({"blob": str(path), "name": blob.name, "spec": blob.spec.to_dict(), "layout": blob.doc.get("layout"),
                 "checks": checks, "versions": {"rnnconv": __version__, "numpy": np.__version__,
                                                "python": platform.python_version()}})
    source_path = options.against or (Path(source["path"]) if source.get("path") else None)
    if options.against is not None and not options.against.exists():
        raise BadInput(f"--against {options.against} does not exist")
    if source_path is None or not source_path.exists():
        why = "the blob names no source" if source_path is None else f"its source {source_path} is not here"
        if options.require_source:
            raise BadInput(f"no numerical comparison is possible: {why} (give it with --against)")
        data.update(verdict="mismatch" if problems else "structure-only", source=None,
                    comparison=None, problems=problems,
                    summary=f"no numerical comparison was possible: {why}; give the source with --against. "
                            + ("Structure: " + "; ".join(problems) if problems else
                               "The structure checks passed."))
        return report
    if source.get("sha256") and options.against is None and sha256_of(source_path) != source["sha256"]:
        report.warnings.append(f"{source_path} changed since the blob was made (sha256 differs); comparing with "
                               f"the file as it is now")
    if options.against is not None:
        source = resolve_source(options.against, source, options.layer)
    backend = select_backend(options.backend)
    report.warnings += backend.notes
    inputs = make_inputs(blob.spec, options)
    want, how = run_source(blob, source, source_path, inputs)
    data.update(source={"path": str(source_path), "format": source.get("format"), "layer": source.get("layer"),
                        "run": how}, backend=backend.describe(), problems=problems)
    try:
        got = backend.run(blob, inputs["x"], inputs["h0"], inputs["c0"], inputs["lengths"])
    except Mismatch as exc:  # cuDNN itself places the tensors elsewhere: no forward run is meaningful
        findings = getattr(exc, "findings", None)
        if findings is None:
            raise
        data.update(verdict="mismatch", comparison=None, layout_findings=findings, summary=str(exc))
        if options.relayout:
            from rnnconv.formats.cudnn import write_relayout

            placed = {p.key: (p.offset_bytes, p.dims) for p in exc.placements}
            write_relayout(blob, placed, exc.weight_space_bytes, options.relayout,
                           backend.status.found.get("cudnn_version", "?"), options.force)
            data["relayout"] = str(options.relayout)
        return report
    atol, rtol = tolerance(blob, backend.name, source, options)
    comparison = compare(blob.spec, got, want, atol, rtol, inputs["lengths"])
    data.update(
        backend=backend.describe(), tolerance={"atol": atol, "rtol": rtol},
        inputs={"seed": options.seed, "seq_len": options.seq_len, "batch": options.batch,
                "lengths": None if inputs["lengths"] is None else [int(v) for v in inputs["lengths"]],
                "x": "normal(0, 0.8)", "h0, c0": "normal(0, 0.5)"},
        comparison=comparison, problems=problems)
    data["versions"].update(backend.versions())
    data["versions"]["source framework"] = how.split(":")[0]
    matched = comparison["match"] and not problems
    data["verdict"] = "match" if matched else "mismatch"
    if not comparison["match"] and options.diagnose:
        from rnnconv.diagnose import diagnose

        data["diagnosis"] = diagnose(blob, inputs, want, atol, rtol)
    data["summary"] = _summary(data)
    return report


def _summary(data: dict[str, Any]) -> str:
    comparison = data["comparison"]
    worst = max(v["max_abs"] for k, v in comparison.items() if k in ("y", "h_n", "c_n"))
    if data["verdict"] == "match":
        return (f"the blob computes what {Path(data['source']['path']).name} computes: largest difference "
                f"{worst:.3g} (tolerance {data['tolerance']['atol']:g} + {data['tolerance']['rtol']:g}*|x|)")
    text = f"MISMATCH: largest difference {worst:.3g}"
    if data.get("problems"):
        text += "; " + "; ".join(data["problems"])
    diagnosis = data.get("diagnosis")
    if diagnosis:
        text += ". " + diagnosis["message"]
    return text
