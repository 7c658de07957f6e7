"""Every format rnnconv writes, from every kind of source: the written file, run as a user runs it in its own
framework or runtime (its facts' RUNTIME, tests/facts), computes what the source computes in its own framework; or
the target refuses the source at convert time, in one sentence naming what it cannot hold, and writes nothing.

One grid of (format x source case). The sources are PyTorch modules of every structure (PyTorch's own random
weights, distinct biases, one to three layers, one and two directions, with and without biases, with projections),
the PyTorch checkpoints of fixtures/torch in each container, and every layer of fixtures/keras3/mixed.keras (Keras
itself run on them: tests/keras_oracle.py). Each source is saved, and run in its framework, once per session from
distinct non-zero initial states (and, where a way of running takes lengths, on ragged packed sequences); each
file is written once per session. Adding a format: its facts module's RUNTIME; what it refuses is what its
declarations say it cannot hold.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, declared_refusal, largest_difference
from facts import RUNTIMES
from facts.torch import torch_module_for, torch_outputs

import rnnconv
from rnnconv.core.canonical import RNNSpec
from rnnconv.errors import Unsupported
from rnnconv.formats.catalog import FORMAT_INFO

STEPS, BATCH = 6, 3
LENGTHS = np.array([6, 2, 4])  # ragged: each sequence ends where its length says, as PyTorch's packed sequences
RECORDED_FORMATS = {".pt": "torch", ".pth": "torch", ".safetensors": "torch-safetensors", ".keras": "keras-archive"}
HALF_TOLERANCE = 5e-3  # a bfloat16 source's file where its runtime or its summed biases round to 16 bits


@dataclasses.dataclass(frozen=True)
class Made:
    """A PyTorch module rnnconv reads from its state_dict: `zero_b_hn` for a GRU with no b_hn (as some hold)."""

    spec: RNNSpec
    zero_b_hn: bool = False


MADE = {
    "lstm-x2-bi": Made(RNNSpec("lstm", 5, 7, 2, True)),
    "lstm-x2": Made(RNNSpec("lstm", 5, 7, 2)),
    "lstm-x1": Made(RNNSpec("lstm", 5, 7)),
    "lstm-nobias-x1": Made(RNNSpec("lstm", 4, 6, bias=False)),
    "lstm-proj-x2": Made(RNNSpec("lstm", 5, 7, 2, proj_size=3)),
    "lstm-proj-x1-bi": Made(RNNSpec("lstm", 4, 6, 1, True, proj_size=4)),
    "gru-x1": Made(RNNSpec("gru", 5, 7)),
    "gru-nobias-x1": Made(RNNSpec("gru", 4, 6, bias=False)),
    "gru-x2-bi": Made(RNNSpec("gru", 5, 4, 2, True)),
    "gru-no-b_hn-x1": Made(RNNSpec("gru", 3, 4), zero_b_hn=True),
    "gru-no-b_hn-x2-bi": Made(RNNSpec("gru", 3, 4, 2, True), zero_b_hn=True),
    "gru-nobias-x2-bi": Made(RNNSpec("gru", 4, 6, 2, True, bias=False)),
    "gru-x3": Made(RNNSpec("gru", 5, 7, 3)),
    "rnn_tanh-x1": Made(RNNSpec("rnn_tanh", 5, 7)),
    "rnn_tanh-x3-bi": Made(RNNSpec("rnn_tanh", 3, 5, 3, True)),
    "rnn_relu-x1": Made(RNNSpec("rnn_relu", 5, 3)),
    "rnn_relu-x2-bi": Made(RNNSpec("rnn_relu", 5, 7, 2, True)),
}
# checkpoints in fixtures/torch, other containers and dtypes: (file, --layer, the key prefix of the RNN inside, the
# module it holds); a state_dict does not say a simple RNN's nonlinearity: --nonlinearity relu says it
CHECKPOINTS = {
    "seq2seq.pt-encoder": ("seq2seq.pt", "encoder.rnn", "state_dict.encoder.rnn.", RNNSpec("lstm", 6, 9, 2, True)),
    "seq2seq.pt-decoder": ("seq2seq.pt", "decoder.rnn", "state_dict.decoder.rnn.", RNNSpec("gru", 18, 7)),
    "rnn_relu.safetensors": ("rnn_relu.safetensors", None, "", RNNSpec("rnn_relu", 3, 5, 2)),
    "dataparallel_gru.pth": ("dataparallel_gru.pth", None, "module.", RNNSpec("gru", 4, 6, 3, bias=False)),
    "rnn_tanh.pt": ("rnn_tanh.pt", None, "", RNNSpec("rnn_tanh", 6, 4, 1, True)),
    "gru_bf16.pt": ("gru_bf16.pt", None, "", RNNSpec("gru", 5, 4, 1, True, dtype="bfloat16")),
}
KERAS_LAYERS = ["gru_a", "bidi_lstm", "srnn_relu", "srnn_tanh", "gru_nobias", "bidi_gru", "lstm_nobias", "rnn_lstmcell"]
CASES = [f"torch-{name}" for name in MADE] + [f"torch-{name}" for name in CHECKPOINTS]
CASES += [f"keras-{layer}" for layer in KERAS_LAYERS]


def refusal(target: str, source: Source) -> str | None:
    with rnnconv.load(source.path, layer=source.layer, **source.options) as (rnn,):
        return declared_refusal(target, rnn)


ROUNDED_SUMS = "has no exact value for the biases it stores summed"


@dataclasses.dataclass
class Source:
    """A source file and what its framework computes on it: from `h0`/`c0`, from zero states (`zero_y`) and on the
    ragged `LENGTHS` (`ragged`), where the framework was run so."""

    path: Path
    layer: str | None
    spec: RNNSpec
    x: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None
    expected: tuple
    zero_y: np.ndarray | None = None
    ragged: tuple | None = None
    zero_b_hn: bool = False
    options: dict = dataclasses.field(default_factory=dict)


def inputs(spec: RNNSpec, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Non-saturating inputs and distinct non-zero initial states (sequence-major, as cuDNN)."""
    rng = np.random.default_rng(seed)
    depth = spec.num_layers * spec.num_directions
    x = (rng.standard_normal((STEPS, BATCH, spec.input_size)) * 0.8).astype(np.float32)
    h0 = (rng.standard_normal((depth, BATCH, spec.output_size)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((depth, BATCH, spec.hidden_size)) * 0.5).astype(np.float32)
    return x, h0, c0 if spec.mode == "lstm" else None


def torch_source(path: Path, layer: str | None, spec: RNNSpec, module, zero_b_hn: bool = False) -> Source:
    """What the module computes; the file's RNN read by rnnconv is that module (a simple RNN's nonlinearity as
    stated)."""
    options = {"nonlinearity": "relu"} if spec.mode == "rnn_relu" else {}
    with rnnconv.load(path, layer=layer, **options) as (rnn,):
        assert rnn.spec == spec, (rnn.spec, spec)
    x, h0, c0 = inputs(spec, seed=len(path.name))
    zeros = np.zeros_like(h0), None if c0 is None else np.zeros_like(c0)
    return Source(
        path,
        layer,
        spec,
        x,
        h0,
        c0,
        torch_outputs(module, spec, x, h0, c0),
        torch_outputs(module, spec, x, *zeros)[0],
        torch_outputs(module, spec, x, h0, c0, LENGTHS),
        zero_b_hn,
        options,
    )


def made_source(name: str, folder: Path) -> Source:
    """The module saved as a state_dict, with PyTorch's own random weights and distinct biases on both sides (so a
    lost or doubled one shows)."""
    torch = pytest.importorskip("torch")
    made = MADE[name]
    torch.manual_seed(len(MADE) + list(MADE).index(name))
    module = torch_module_for(made.spec)
    with torch.no_grad():
        for key, p in module.named_parameters():
            if key.startswith("bias"):
                p.uniform_(-0.5, 0.5)
                if made.zero_b_hn and key.startswith("bias_hh"):
                    p[2 * made.spec.hidden_size :] = 0
    path = folder / f"{name}.pt"
    torch.save(module.state_dict(), path)
    return torch_source(path, None, made.spec, module, made.zero_b_hn)


def checkpoint_source(name: str) -> Source:
    """The module a fixture checkpoint holds, loaded by PyTorch itself (float32)."""
    torch = pytest.importorskip("torch")
    file, layer, prefix, spec = CHECKPOINTS[name]
    path = FIXTURES / "torch" / file
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(path)
    else:
        state = torch.load(path, weights_only=True)
    if prefix.startswith("state_dict."):
        state, prefix = state["state_dict"], prefix[len("state_dict.") :]
    module = torch_module_for(spec)
    module.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})  # strict
    return torch_source(path, layer, spec, module.float())


def keras_source(layer: str) -> Source:
    """What Keras computes running the layer of mixed.keras from non-zero states (sequence-major here)."""
    from keras_oracle import oracle

    pytest.importorskip("keras")
    path = FIXTURES / "keras3" / "mixed.keras"
    ran = oracle("keras3").run("mixed", layer)
    with rnnconv.load(path, layer=layer) as (rnn,):
        spec = rnn.spec
    x = np.ascontiguousarray(ran["x"].transpose(1, 0, 2))
    expected = (ran["y"].transpose(1, 0, 2), ran["h_n"], ran.get("c_n"))
    return Source(path, layer, spec, x, ran["h0"], ran.get("c0"), expected)


@pytest.fixture(scope="session")
def source(tmp_path_factory):
    """case -> Source, made once per session when first asked for."""
    folder = tmp_path_factory.mktemp("sources")

    @functools.cache
    def make(case: str) -> Source:
        kind, name = case.split("-", 1)
        if kind == "keras":
            return keras_source(name)
        return made_source(name, folder) if name in MADE else checkpoint_source(name)

    return make


def written_names(runtime) -> list[str]:
    return [f"model{ending}" for ending in runtime.files] + list(runtime.beside)


@pytest.fixture(scope="session")
def written(tmp_path_factory, source):
    """(format, case) -> the file rnnconv wrote, or the Unsupported it raised; written once per session."""
    folder = tmp_path_factory.mktemp("written")

    @functools.cache
    def write(target: str, case: str) -> tuple[Path, Path | Unsupported]:
        made = source(case)
        where = folder / target / case
        where.mkdir(parents=True)
        out = where / f"model{RUNTIMES[target].ending}"
        try:
            result = rnnconv.convert(made.path, out, layer=made.layer, to=target, **made.options)
        except Unsupported as exc:
            if ROUNDED_SUMS not in str(exc) or refusal(target, made) is not None:
                return where, exc
            # a half-precision source whose summed biases its type cannot hold (test_flax holds the refusal): the
            # file written with them rounded, as --allow-lossy writes it, still runs within the half tolerance
            result = rnnconv.convert(made.path, out, layer=made.layer, to=target, allow_lossy=True, **made.options)
        assert result.outputs == [str(where / name) for name in written_names(RUNTIMES[target])]
        return where, out

    return write


# JAX compiles each structure anew (seconds), Keras builds each model: beyond one case of each kind their rows run in
# CI (slow). Flax's rows take the structures and layers the documented modules were held on, not every checkpoint.
FAST = {
    "flax": {"torch-gru-x1", "torch-rnn_tanh-x1"},
    "flax-nnx": {"torch-gru-nobias-x1", "torch-rnn_tanh-x1"},
    "equinox": {"torch-lstm-x1", "torch-gru-nobias-x1"},
    "keras": {"torch-lstm-x2-bi", "keras-gru_a"},
    "tfjs": {"torch-lstm-x2-bi", "torch-rnn_relu-x1", "keras-bidi_lstm"},  # one Node.js process each
}
NOT_RUN = {  # a framework's own limit, not rnnconv's: what the row cannot run, and why
    ("keras", "torch-gru_bf16.pt"): "Keras on TensorFlow cannot build a bfloat16 GRU to load the weights into (its "
    "orthogonal initializer's QR has no bfloat16 kernel)",
}


def _case_param(target: str, case: str):
    marks = [pytest.mark.slow] if target in FAST and case not in FAST[target] else []
    if (target, case) in NOT_RUN:
        marks.append(pytest.mark.skip(reason=NOT_RUN[target, case]))
    return pytest.param(target, case, marks=marks, id=f"{target}-{case}")


@pytest.mark.parametrize("target, case", [_case_param(t, c) for t in RUNTIMES for c in CASES])
def test_the_written_file_computes_what_its_source_computes(target, case, source, written):
    made = source(case)
    where, out = written(target, case)
    refused = refusal(target, made)
    if refused is not None or isinstance(out, Unsupported):
        assert isinstance(out, Unsupported), f"{target} wrote {case}, which it should refuse ({refused})"
        message = str(out)
        assert out.exit_code == 2 and refused is not None and refused in message and "\n" not in message, message
        assert not any(where.iterdir())  # nothing written
        return
    runtime = RUNTIMES[target]
    assert sorted(p.name for p in where.iterdir()) == sorted(written_names(runtime))
    with rnnconv.load(out) as (back,):  # the source recorded, as verify finds it
        assert back.origin is not None and back.origin.path == str(made.path), back.origin
        assert back.origin.format == RECORDED_FORMATS[made.path.suffix], back.origin
        assert made.layer is None or back.origin.layer == made.layer, back.origin
    half = made.spec.dtype == "bfloat16" and runtime.rounds_to_16_bits
    tolerance = HALF_TOLERANCE if half else runtime.tolerance
    label = f"{target} from {case}"
    for way in runtime.ways:
        if way.cannot(made.spec) is not None:
            continue
        error = largest_difference(way.run(out, made.spec, made.x, made.h0, made.c0), made.expected)
        if way.ragged and made.ragged is not None:
            ragged = way.run(out, made.spec, made.x, made.h0, made.c0, LENGTHS)
            error = max(error, largest_difference(ragged, made.ragged))
        LARGEST_ERRORS[f"{label} ({way.label})"] = error
        assert error < tolerance, (way.label, error)
    if runtime.documented is not None and made.zero_y is not None:
        y = runtime.documented(out, made.spec, np.ascontiguousarray(made.x.transpose(1, 0, 2)))
        error = float(np.abs(y.transpose(1, 0, 2) - made.zero_y).max())
        LARGEST_ERRORS[f"{label} (the documented module)"] = error
        assert error < tolerance, ("the documented module, from zero states", error)


# --quantize int8: every format whose declarations say it holds int8 weights (its Holds), from a source of each cell
# (several layers, two directions): the file its runtime runs, proved by verify against its source in three terms
# (a kernel that computes in float with the dequantized weights, as the file's record says, off by float32's rounding
# alone), or the source refused as the format's declarations say (TFLite has no GRU op).
QUANTIZING = [name for name in RUNTIMES if "int8" in FORMAT_INFO[name].holds.quantizes]
QUANTIZED_CASES = ["torch-lstm-x2-bi", "torch-gru-x2-bi", "torch-rnn_tanh-x3-bi"]


@pytest.mark.parametrize("target, case", [(t, c) for t in QUANTIZING for c in QUANTIZED_CASES])
def test_the_int8_file_is_within_its_bound_of_its_source(target, case, source, tmp_path):
    made = source(case)
    out = tmp_path / f"model{RUNTIMES[target].ending}"
    refused = refusal(target, made)
    if refused is not None:
        with pytest.raises(Unsupported) as raised:
            rnnconv.convert(made.path, out, to=target, quantize="int8")
        assert refused in str(raised.value) and not any(tmp_path.iterdir())
        return
    rnnconv.convert(made.path, out, to=target, quantize="int8")
    report = rnnconv.verify(out)
    assert report.verdict == "within-bound" and report.quantization is not None, report.summary
    with rnnconv.load(out, dequantize=True) as (back,):
        record = back.origin.quantized
    assert record is not None and report.quantization.scheme == record.scheme
    if not record.inputs_quantized:
        assert report.quantization.kernel.measured < 1e-6
    end_to_end = report.quantization.end_to_end
    LARGEST_ERRORS[f"{target} --quantize int8 from {case}: end to end (bound {end_to_end.bound:.3g})"] = (
        end_to_end.measured
    )
