"""Flax linen and flax.nnx: what rnnconv writes loads into the documented modules (nn.RNN, nn.Bidirectional,
nn.Sequential and their nnx twins) and computes what PyTorch and Keras compute; files Flax itself wrote convert to
what PyTorch runs the same; round trips are exact; what nnx cannot hold and damaged files are refused in a sentence."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
torch = pytest.importorskip("torch")
nn = pytest.importorskip("flax.linen")
nnx = pytest.importorskip("flax.nnx")
flax_serialization = pytest.importorskip("flax.serialization")

from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, assert_no_framework_imported, run_cli
from facts import flax as flax_facts
from test_torch import torch_run

import rnnconv
import rnnconv.core.report_contracts
from rnnconv.core.canonical import RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.formats import registry

IN, H, T, B = 3, 4, 5, 2
TORCH = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN, "rnn_relu": torch.nn.RNN}
FAST = [("gru", 1, False), ("rnn_tanh", 1, False)]  # the others compile more of JAX: slow (CI runs them)


def marked(cases: list) -> list:
    return [case if case in FAST else pytest.param(case, marks=pytest.mark.slow) for case in cases]


SUFFIX = {"flax": ".msgpack", "flax-nnx": ".nnx.msgpack"}


def case_id(case) -> str:
    mode, layers, bidirectional = case
    return f"{mode}-x{layers}" + ("-bi" if bidirectional else "")


def torch_module(mode: str, layers: int, bidirectional: bool, seed: int, zero_b_hn: bool = False) -> torch.nn.Module:
    """A PyTorch RNN with distinct random weights, biases included."""
    torch.manual_seed(seed)
    kwargs = {"nonlinearity": mode[4:]} if mode.startswith("rnn") else {}
    module = TORCH[mode](IN, H, num_layers=layers, bidirectional=bidirectional, **kwargs)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.normal_(0, 0.5)
            if zero_b_hn and name.startswith("bias_hh"):
                p[2 * H :] = 0
    return module


def inputs(layers: int, bidirectional: bool, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    pseudo = layers * (2 if bidirectional else 1)
    return (
        torch.randn(T, B, IN, generator=g) * 0.8,
        torch.randn(pseudo, B, H, generator=g) * 0.5,
        torch.randn(pseudo, B, H, generator=g) * 0.5,
    )


def spec_of(mode: str, layers: int, bidirectional: bool) -> RNNSpec:
    return RNNSpec(mode, IN, H, layers, bidirectional)


def linen_module(mode: str, layers: int, bidirectional: bool):
    return flax_facts.linen_module(mode, H, layers, bidirectional)


def nnx_module(mode: str, layers: int, bidirectional: bool):
    return flax_facts.nnx_module(mode, IN, H, layers, bidirectional)


def worst(got: dict, expected) -> float:
    pairs = zip((got["y"], got["h_n"], got["c_n"]), expected)
    return max(float(np.abs(np.asarray(g) - np.asarray(e)).max()) for g, e in pairs if e is not None)


@pytest.mark.parametrize("target", ["flax", "flax-nnx"])
@pytest.mark.parametrize("case", marked([("lstm", 2, True), ("gru", 1, False), ("rnn_tanh", 1, True)]), ids=case_id)
def test_files_flax_wrote_convert_to_what_torch_runs_the_same(target, case, tmp_path):
    """A file Flax itself wrote (random init) → a PyTorch checkpoint: torch computes what Flax's cells compute."""
    mode, layers, bidirectional = case
    source = tmp_path / f"made{SUFFIX[target]}"
    if target == "flax":
        module = linen_module(mode, layers, bidirectional)
        variables = module.init(jax.random.key(len(case_id(case))), jnp.zeros((1, 1, IN)))
        variables = jax.tree_util.tree_map(lambda a: a + 0.1, variables)  # non-zero biases
        source.write_bytes(flax_serialization.to_bytes(variables))
    else:
        model = nnx_module(mode, layers, bidirectional)
        pure = jax.tree_util.tree_map(lambda a: np.asarray(a) + 0.1, nnx.to_pure_dict(nnx.state(model, nnx.Param)))
        source.write_bytes(flax_serialization.msgpack_serialize(pure))
    out = tmp_path / "rnn.pt"
    rnnconv.convert(source, out)
    module = torch_module(mode, layers, bidirectional, seed=0)
    module.load_state_dict(torch.load(out, weights_only=True))
    spec = spec_of(mode, layers, bidirectional)
    x, h0, c0 = inputs(layers, bidirectional)
    got, _ = registry.get(target).run(source, Provenance(), spec, {"x": x.numpy(), "h0": h0.numpy(),
                                                                    "c0": c0.numpy(), "lengths": None})  # fmt: skip
    error = worst(got, torch_run(module, spec, x, h0, c0))
    LARGEST_ERRORS[f"torch from {target} {case_id(case)}"] = error
    assert error < 2e-6
    # and back: the same values under the same names (the maps' order is the writer's: tree_map sorted the source's)
    again = tmp_path / f"again{SUFFIX[target]}"
    rnnconv.convert(out, again, to=target)
    restored = [flax_serialization.msgpack_restore(p.read_bytes()) for p in (source, again)]
    assert jax.tree_util.tree_structure(restored[0]) == jax.tree_util.tree_structure(restored[1])
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(*map(jax.tree_util.tree_leaves, restored)))


def test_the_runner_is_flaxs_own_rnn_compiled_once_per_shape(tmp_path):
    """rnnconv's linen runner applies Flax's own nn.RNN of the file's cell class under jax.jit: a second run of the
    same RNN (and every layer after the first, of the same input size) reuses the compiled scan instead of tracing
    it again, and computes the same outputs."""
    from rnnconv.formats.flax.runner import compiled_rnn

    module = torch_module("lstm", 3, True, seed=6)
    source = tmp_path / "rnn.pt"
    torch.save(module.state_dict(), source)
    written = tmp_path / "rnn.msgpack"
    rnnconv.convert(source, written, to="flax")
    spec = RNNSpec("lstm", IN, H, 3, True)
    x, h0, c0 = inputs(3, True)
    feed = {"x": x.numpy(), "h0": h0.numpy(), "c0": c0.numpy(), "lengths": None}
    compiled_rnn.cache_clear()
    first, _ = registry.get("flax").run(written, Provenance(), spec, feed)
    again, _ = registry.get("flax").run(written, Provenance(), spec, feed)
    assert compiled_rnn.cache_info().currsize == 2  # one per direction
    for reverse in (False, True):
        applied = compiled_rnn("LSTMCell", H, None, reverse)
        engine = applied.__wrapped__.func.__self__
        assert type(engine) is nn.RNN and type(engine.cell) is nn.LSTMCell, engine
        assert applied._cache_size() == 2  # layer 0 (input size IN) and layers 1-2 (2 H): not one per run or layer
    assert all(np.array_equal(first[k], again[k]) for k in ("y", "h_n", "c_n"))
    assert worst(first, torch_run(module, spec, x, h0, c0)) < 2e-6


@pytest.mark.parametrize("target", ["flax", "flax-nnx"])
def test_round_trips_are_exact(target, tmp_path):
    module = torch_module("lstm", 2, True, seed=4)
    source = tmp_path / "rnn.pt"
    torch.save(module.state_dict(), source)
    first, back, again = tmp_path / f"a{SUFFIX[target]}", tmp_path / "b.bin", tmp_path / f"c{SUFFIX[target]}"
    rnnconv.convert(source, first, to=target)
    rnnconv.convert(first, back)
    rnnconv.convert(back, again, to=target)
    assert first.read_bytes() == again.read_bytes()
    blob = tmp_path / "direct.bin"
    rnnconv.convert(source, blob)
    rnnconv.convert(first, tmp_path / "via.bin")  # an LSTM's summed bias goes back as bR (--bias-split recurrent)
    with rnnconv.load(blob) as (direct,), rnnconv.load(tmp_path / "via.bin") as (via,):
        for key, value in direct.arrays().items():
            if key.kind in ("W", "R"):
                assert np.array_equal(value, via.param(key)), key


def test_nnx_refuses_a_gru_with_b_hn_and_takes_one_without(tmp_path):
    source = tmp_path / "gru.pt"
    torch.save(torch_module("gru", 1, False, seed=2).state_dict(), source)
    result = run_cli("convert", source, tmp_path / "gru.nnx.msgpack")
    assert_clean_failure(result, 2, "flax.nnx's GRUCell has no b_hn", "the source's b_hn is non-zero")
    assert not (tmp_path / "gru.nnx.msgpack").exists()
    lossy = run_cli("convert", source, tmp_path / "gru.nnx.msgpack", "--allow-lossy")
    assert lossy.returncode == 0 and "--allow-lossy" in lossy.stdout + lossy.stderr, lossy.stderr
    with rnnconv.load(tmp_path / "gru.nnx.msgpack") as (written,):
        assert not any(np.any(written.param(k)) for k in written.spec.param_keys() if k.kind == "bR" and k.gate == "h")
    (tmp_path / "gru.nnx.msgpack").unlink()
    (tmp_path / "gru.nnx.msgpack.rnnconv.json").unlink()
    torch.save(torch_module("gru", 1, False, seed=2, zero_b_hn=True).state_dict(), source)
    assert run_cli("convert", source, tmp_path / "gru.nnx.msgpack").returncode == 0


def test_cli_writes_the_sidecar_and_prints_the_loading_lines(tmp_path):
    source = tmp_path / "lstm.pt"
    torch.save(torch_module("lstm", 2, False, seed=1).state_dict(), source)
    out = tmp_path / "lstm.msgpack"
    result = run_cli("convert", source, out)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "nn.Sequential([nn.RNN(nn.LSTMCell(4)), nn.RNN(nn.LSTMCell(4))])" in text
    assert "flax.serialization.from_bytes" in text
    recorded = json.loads((tmp_path / "lstm.msgpack.rnnconv.json").read_text())["rnnconv.source"]
    assert recorded["path"] == str(source.resolve()) and recorded["format"] == "torch"
    with rnnconv.load(out) as (rnn,):
        assert rnn.origin is not None and rnn.origin.path == str(source.resolve())
    assert_clean_failure(run_cli("convert", source, out), 2, "exists")  # never over a file without --force
    assert_no_framework_imported(out, tmp_path / "back.pt")


def test_inspect_names_every_rnn_of_a_model_with_several(tmp_path):
    class Model(nn.Module):  # modules made in setup keep their trees (in a compact method, cells are the caller's)
        def setup(self):
            self.encoder = nn.RNN(nn.GRUCell(H))
            self.decoder = nn.Bidirectional(nn.RNN(nn.LSTMCell(H)), nn.RNN(nn.LSTMCell(H)))

        def __call__(self, x):
            return self.decoder(self.encoder(x))

    path = tmp_path / "model.msgpack"
    path.write_bytes(flax_serialization.to_bytes(Model().init(jax.random.key(0), jnp.zeros((1, 1, IN)))))
    report = rnnconv.inspect(path)
    assert sorted((r.name, r.layer_class, r.converts) for r in report.rnns) == [
        ("decoder", "LSTMCell", True),
        ("encoder", "GRUCell", True),
    ]
    assert_clean_failure(run_cli("convert", path, tmp_path / "x.bin"), 2, "holds 2 RNNs", "--layer")
    with rnnconv.load(path, layer="decoder") as (rnn,):
        assert rnn.spec.bidirectional and rnn.spec.mode == "lstm"


@pytest.mark.slow
def test_verify_runs_a_flax_source_and_the_flax_engine(tmp_path):
    made = tmp_path / "made.msgpack"
    variables = linen_module("gru", 2, True).init(jax.random.key(5), jnp.zeros((1, 1, IN)))
    made.write_bytes(flax_serialization.to_bytes(jax.tree_util.tree_map(lambda a: a + 0.1, variables)))
    blob = tmp_path / "blob.bin"
    rnnconv.convert(made, blob)
    result = run_cli("verify", blob, "--backend", "flax", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "match", report
    # a corrupted blob (two gates swapped) is a mismatch
    data = bytearray(blob.read_bytes())
    n = H * IN * 4
    data[:n], data[n : 2 * n] = data[n : 2 * n], data[:n]
    blob.write_bytes(bytes(data))
    assert run_cli("verify", blob, "--backend", "numpy").returncode == 1


HOSTILE = {
    "truncated": lambda good: good[: len(good) // 2],
    "trailing bytes": lambda good: good + b"\x00",
    "wrong byte count": lambda good: good.replace(b"\xa7float32\xc4\x40", b"\xa7float32\xc4\x3c", 1),
    "unknown dtype": lambda good: good.replace(b"float32", b"object_", 1),
    "deep nesting": lambda good: b"\x81\xa6params" + b"\x81\xa1a" * 100 + b"\xc0",
    "huge map": lambda good: b"\x81\xa6params\xdf" + struct.pack(">I", 2**31) + b"\xa1a",
    "no params": lambda good: b"\x81\xa6params\x81\xa1a\x01",
}


@pytest.mark.parametrize("damage", sorted(HOSTILE))
def test_damaged_files_get_one_sentence(damage, tmp_path):
    module = torch_module("lstm", 1, False, seed=1)
    source, good = tmp_path / "rnn.pt", tmp_path / "good.msgpack"
    torch.save(module.state_dict(), source)
    rnnconv.convert(source, good)
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(HOSTILE[damage](good.read_bytes()))
    assert bad.read_bytes() != good.read_bytes()
    assert_clean_failure(run_cli("convert", bad, tmp_path / "out.bin"), 2)


# --- verify a written file: the file itself, run in its library, against its recorded source --------------------

SWAPPED = {"flax": (("ii", "if"), ("hi", "hf")), "flax-nnx": (("ii", "if_"), ("hi", "hf"))}


def swap_first_two_gates(path, target: str) -> None:
    """The written LSTM's first two gates (i and f) swapped in every Dense of its first cell, as Flax reads it."""
    tree = flax_serialization.msgpack_restore(path.read_bytes())
    node = tree["params"] if target == "flax" else tree
    while "cell" not in node:
        node = node[sorted(node, key=str)[0]]
    cell = node["cell"]
    for first, second in SWAPPED[target]:
        cell[first], cell[second] = cell[second], cell[first]
    path.write_bytes(flax_serialization.msgpack_serialize(tree))


@pytest.mark.slow
@pytest.mark.parametrize("target", ["flax", "flax-nnx"])
def test_verify_runs_a_written_file_and_catches_two_gates_swapped(target, tmp_path):
    source, out = tmp_path / "rnn.pt", tmp_path / f"rnn{SUFFIX[target]}"
    torch.save(torch_module("lstm", 2, True, seed=8).state_dict(), source)
    rnnconv.convert(source, out, to=target)
    result = run_cli("verify", out, "--ragged", "--report", tmp_path / "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"MATCH: {out.name} computes what rnn.pt computes" in " ".join(result.stdout.split())
    report = rnnconv.core.report_contracts.Report.model_validate_json((tmp_path / "r.json").read_text())
    assert report.backend.name == target and f"{out.name} run as written" in report.backend.detail
    swap_first_two_gates(out, target)
    result = run_cli("verify", out, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = rnnconv.core.report_contracts.Report.model_validate_json(result.stdout)
    assert report.verdict == "mismatch" and report.diagnosis is not None and report.diagnosis.found
    assert "look swapped" in report.diagnosis.message


@pytest.mark.parametrize("record", ["{", '{"rnnconv.source": {"path": 5}}', "[1, 2]", '{"other": 1}'])
def test_a_garbled_source_record_is_refused_in_a_sentence(record, tmp_path):
    source, out = tmp_path / "rnn.pt", tmp_path / "rnn.msgpack"
    torch.save(torch_module("gru", 1, False, seed=8).state_dict(), source)
    rnnconv.convert(source, out)
    (tmp_path / "rnn.msgpack.rnnconv.json").write_text(record)
    assert_clean_failure(run_cli("verify", out), 2, "rnn.msgpack.rnnconv.json")


def test_a_bfloat16_gru_whose_summed_biases_bfloat16_cannot_hold_is_refused_naming_both_ways_out(tmp_path):
    source = FIXTURES / "torch" / "gru_bf16.pt"
    out = tmp_path / "gru.msgpack"
    refused = run_cli("convert", source, out)
    assert_clean_failure(refused, 2, "bfloat16 has no exact value for the biases it stores summed", "--allow-lossy")
    assert "--dtype float32 holds them exactly" in " ".join(refused.stderr.split())
    assert not out.exists()
    state = torch.load(source)
    for flag, dtype in (("--allow-lossy", "bfloat16"), ("--dtype=float32", "float32")):
        assert run_cli("convert", source, out, flag, "--force").returncode == 0
        cell = flax_serialization.msgpack_restore(out.read_bytes())["params"]["forward_rnn"]["cell"]
        summed = (state["bias_ih_l0"].float() + state["bias_hh_l0"].float())[: 2 * 4]  # r, z: Flax adds them
        kept = summed.to(torch.bfloat16).float() if dtype == "bfloat16" else summed
        stored = np.concatenate([np.asarray(cell[k]["bias"], np.float32) for k in ("ir", "iz")])
        assert np.array_equal(stored, kept.numpy()), flag
        verified = run_cli("verify", out)
        assert verified.returncode == 0, verified.stdout + verified.stderr
