"""`rnnconv identify`: blobs written by rnnconv and by other tools are named, ambiguity is said, bad input refused.

Every blob here is the tensors of a file a real writer made (rnnconv's cuDNN, PyTorch, Keras and ONNX writers,
jax.experimental.rnn, TensorFlow's CudnnLSTM restore path), laid end to end as that file orders them; every probe
is computed by a framework (PyTorch, jax, TensorFlow), never by rnnconv's reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core.canonical import RNNSpec
from rnnconv.table.packings import PACKINGS
from rnnconv.table.rows import TABLE
from rnnconv.verification.identify import layouts

I, H, P, L, T, B = 5, 7, 3, 2, 6, 3  # noqa: E741 (the sizes' names in every paper)
IDENTIFY = FIXTURES / "identify"
TORCH_CLASSES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}


def torch_model(mode: str, proj: int = 0, bidirectional: bool = True) -> torch.nn.Module:
    torch.manual_seed(11)
    extra = {"proj_size": proj} if proj else {}
    model = TORCH_CLASSES[mode](I, H, L, bidirectional=bidirectional, **extra)
    with torch.no_grad():
        for parameter in model.parameters():  # distinct per gate, layer and direction; biases non-zero
            parameter.normal_(0.0, 0.4)
    return model


def write_probe(model: torch.nn.Module, path: Path) -> Path:
    """One input, non-zero initial states and ragged lengths, with what PyTorch computes for them."""
    dirs = 2 if model.bidirectional else 1
    out = model.proj_size or H if isinstance(model, torch.nn.LSTM) else H
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(T, B, I, generator=generator)
    h0 = torch.randn(model.num_layers * dirs, B, out, generator=generator) * 0.5
    c0 = torch.randn(model.num_layers * dirs, B, H, generator=generator) * 0.5
    lengths = torch.tensor([T, T - 2, T - 1])
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    with torch.no_grad():
        if isinstance(model, torch.nn.LSTM):
            y, (h_n, c_n) = model(packed, (h0, c0))
            states = {"c0": c0.numpy(), "c_n": c_n.numpy()}
        else:
            y, h_n = model(packed, h0)
            states = {}
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)
    arrays = {"x": x.numpy(), "h0": h0.numpy(), "lengths": lengths.numpy(), "y": y.numpy(), "h_n": h_n.numpy()}
    np.savez(path, **arrays, **states)
    return path


def spec_flags(mode: str, proj: int = 0, bidirectional: bool = True) -> list[str]:
    flags = ["--mode", mode, "--input-size", str(I), "--hidden-size", str(H), "--num-layers", str(L)]
    return flags + (["--bidirectional"] if bidirectional else []) + (["--proj-size", str(proj)] if proj else [])


# --- each writer's file, its tensors laid end to end as the file orders them -----------------------------------


def flat_torch(path: Path) -> np.ndarray:
    state = torch.load(path, weights_only=True)
    return np.concatenate([tensor.numpy().ravel() for tensor in state.values()])


def flat_keras(path: Path) -> np.ndarray:
    """A .weights.h5's variables: layer after layer, forward before backward, vars 0, 1, 2."""
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visit(lambda name: names.append(name) if isinstance(f[name], h5py.Dataset) else None)
        layer_of = {name: name.split("/")[1] for name in names}
        order = sorted(set(layer_of.values()), key=lambda n: (len(n), n))  # bidirectional, bidirectional_1

        def rank(name: str) -> tuple[int, int, str]:
            return (order.index(layer_of[name]), "backward_layer" in name, name)

        return np.concatenate([np.asarray(f[name]).ravel() for name in sorted(names, key=rank)])


def flat_onnx(path: Path) -> np.ndarray:
    """Each RNN node's W, R and B initializers, node after node."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    parts = []
    for node in model.graph.node:
        if node.op_type in ("LSTM", "GRU", "RNN"):
            parts += [initializers[name].ravel() for name in node.input[1:4] if name in initializers]
    return np.concatenate(parts)


WRITERS = {  # target -> (output suffix, flattener, the row and packing identify must name)
    "cudnn": (".bin", lambda p: np.fromfile(p, "<f4"), "cudnn", "matrices-then-biases"),
    "torch": (".pt", flat_torch, "torch", "per-pseudo-layer"),
    "keras": (".weights.h5", flat_keras, "keras", "per-pseudo-layer"),
    "onnx": (".onnx", flat_onnx, "onnx", "per-layer"),
}
CASES = [
    ("cudnn", "lstm", P),
    ("cudnn", "gru", 0),
    ("cudnn", "rnn_tanh", 0),
    ("torch", "lstm", P),
    ("torch", "gru", 0),
    ("keras", "lstm", 0),
    ("keras", "gru", 0),
    ("keras", "rnn_tanh", 0),
    ("onnx", "lstm", 0),
    ("onnx", "gru", 0),
]


@pytest.mark.parametrize(("target", "mode", "proj"), CASES, ids=[f"{t}-{m}{'-proj' if p else ''}" for t, m, p in CASES])
def test_blobs_rnnconv_writes_are_identified_by_a_probe(target, mode, proj, tmp_path):
    model = torch_model(mode, proj)
    torch.save(model.state_dict(), tmp_path / "source.pt")
    probe = write_probe(model, tmp_path / "probe.npz")
    suffix, flatten, fmt, packing = WRITERS[target]
    written = tmp_path / f"written{suffix}"
    rnnconv.convert(tmp_path / "source.pt", written, to=target)
    blob = tmp_path / "weights.raw"
    flatten(written).astype("<f4").tofile(blob)
    found = rnnconv.identify(
        blob, mode=mode, input_size=I, hidden_size=H, num_layers=L, bidirectional=True, proj_size=proj, probe=probe
    )
    assert found.verdict == "identified", found.summary
    chosen = found.identified
    assert chosen is not None and chosen.reproduces and chosen.dtype == "float32"
    assert any(row.startswith(f"{fmt} ") for row in chosen.rows), chosen.rows
    expected_packing = "per-pseudo-layer-projection-last" if (target == "torch" and proj) else packing
    assert chosen.packing == expected_packing
    assert chosen.max_abs_error is not None and chosen.max_abs_error < 1e-5
    wrong = [c for c in found.candidates if not c.reproduces]
    assert wrong and all(c.max_abs_error is None or c.max_abs_error > 1e-2 for c in wrong)  # the probe tells


def test_jax_flat_vector_is_identified_and_converts_to_torch(tmp_path):
    out = tmp_path / "from_jax.pt"
    flags = ["--mode", "lstm", "--input-size", "5", "--hidden-size", "7", "--num-layers", "2", "--bidirectional"]
    result = run_cli("identify", IDENTIFY / "jax_lstm.bin", *flags, "--probe", IDENTIFY / "jax_lstm_probe.npz")
    assert result.returncode == 0, result.stderr
    assert "identified" in result.stdout and "matrices-then-biases" in result.stdout
    assert "rnnconv convert" in result.stdout  # rnnconv's own weight space: convert reads it with the raw flags
    found = json.loads(
        run_cli(
            "identify",
            IDENTIFY / "jax_lstm.bin",
            *flags,
            "--probe",
            IDENTIFY / "jax_lstm_probe.npz",
            "-o",
            out,
            "--json",
        ).stdout
    )
    assert found["identified"]["id"] == "cudnn-lstm/matrices-then-biases/float32"
    assert found["outputs"] == [str(out)]
    # the written checkpoint, loaded by PyTorch, computes what jax's lstm_ref computed
    probe = np.load(IDENTIFY / "jax_lstm_probe.npz")
    model = torch.nn.LSTM(5, 7, 2, bidirectional=True, batch_first=True)
    model.load_state_dict(torch.load(out, weights_only=True))
    with torch.no_grad():
        y, _ = model(torch.from_numpy(probe["x"]), (torch.from_numpy(probe["h0"]), torch.from_numpy(probe["c0"])))
    full = probe["lengths"] == probe["x"].shape[1]  # jax's ragged sequences: compare the full one
    np.testing.assert_allclose(y.numpy()[full], probe["y"][full], atol=1e-5)


def test_tf1_opaque_buffer_is_identified_and_holds_the_checkpoints_weights(tmp_path):
    out = tmp_path / "tf1.bin"
    flags = ["--mode", "lstm", "--input-size", "5", "--hidden-size", "4", "--num-layers", "2", "--dtype", "float32"]
    blob = IDENTIFY / "tf1_lstm2.bin"
    result = run_cli("identify", blob, *flags, "--probe", IDENTIFY / "tf1_lstm2_probe.npz", "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["verdict"] == "identified" and found["identified"]["packing"] == "matrices-then-biases"
    assert found["identified"]["gate_order"] == ["i", "f", "c", "o"]
    with rnnconv.load(out) as (written,), rnnconv.load(FIXTURES / "tf1" / "lstm2.ckpt", bias_split="half") as (tf1,):
        mine, theirs = written.arrays(), tf1.arrays()
        assert mine.keys() == theirs.keys()
        for key in mine:
            np.testing.assert_array_equal(mine[key], theirs[key])


def test_sizes_alone_are_ambiguous_and_the_candidates_are_listed(tmp_path):
    model = torch_model("lstm")
    torch.save(model.state_dict(), tmp_path / "source.pt")
    blob = tmp_path / "w.bin"
    rnnconv.convert(tmp_path / "source.pt", blob)
    result = run_cli("identify", blob, *spec_flags("lstm"), "--dtype", "float32")
    assert result.returncode == 1, result.stderr
    assert "ambiguous" in result.stdout and "give --probe" in result.stdout
    for expected in ("cudnn-lstm/matrices-then-biases/float32", "onnx-lstm/per-layer/float32", "miopen-lstm"):
        assert expected in result.stdout
    found = rnnconv.identify(blob, mode="lstm", input_size=I, hidden_size=H, num_layers=L, bidirectional=True)
    assert found.verdict == "ambiguous" and found.identified is None and len(found.candidates) > 1
    assert all(c.reproduces is None for c in found.candidates)
    written = tmp_path / "out.pt"  # nothing is written for an ambiguous blob; a chosen candidate is
    assert_clean_failure(run_cli("identify", blob, *spec_flags("lstm"), "-o", written), 2, "nothing written")
    assert not written.exists()
    chosen = "cudnn-lstm/matrices-then-biases/float32"
    result = run_cli("identify", blob, *spec_flags("lstm"), "--candidate", chosen, "-o", written)
    assert result.returncode == 0, result.stderr
    model_back = torch.nn.LSTM(I, H, L, bidirectional=True)
    model_back.load_state_dict(torch.load(written, weights_only=True))
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(model_back.state_dict()[name], tensor, rtol=0, atol=0)


def test_sizes_one_layout_per_packing_has_and_a_probe_for_the_rest(tmp_path):
    model = torch_model("rnn_tanh", bidirectional=False)
    torch.save(model.state_dict(), tmp_path / "source.pt")
    written = tmp_path / "k.weights.h5"
    rnnconv.convert(tmp_path / "source.pt", written, to="keras")
    blob = tmp_path / "k.raw"
    flat_keras(written).astype("<f4").tofile(blob)
    found = rnnconv.identify(blob, mode="rnn_tanh", input_size=I, hidden_size=H, num_layers=L, dtype="float32")
    assert found.verdict == "ambiguous"  # two packings of two layers: the size cannot tell them apart
    one_layer = torch.nn.RNN(I, H)
    with torch.no_grad():
        for parameter in one_layer.parameters():
            parameter.normal_(0.0, 0.4)
    torch.save(one_layer.state_dict(), tmp_path / "one.pt")
    rnnconv.convert(tmp_path / "one.pt", written, to="keras", force=True)
    flat_keras(written).astype("<f4").tofile(blob)
    found = rnnconv.identify(blob, mode="rnn_tanh", input_size=I, hidden_size=H, dtype="float32")
    # one bias per unit: Keras' SimpleRNN (columns) or the runtimes' simple RNNs (rows), which a probe tells apart
    assert found.verdict == "ambiguous", found.summary
    single_bias = {"keras", "tf1", "openvino", "tflite", "flax", "flax-nnx", "mlx", "ncnn", "tfjs"}
    assert {row.split()[0] for c in found.candidates for row in c.rows} == single_bias
    probe = write_probe(one_layer, tmp_path / "probe.npz")
    found = rnnconv.identify(blob, mode="rnn_tanh", input_size=I, hidden_size=H, dtype="float32", probe=probe)
    assert found.verdict == "identified", found.summary
    assert found.identified is not None and "keras SimpleRNN" in found.identified.rows
    assert found.identified.bias == "single" and found.identified.matrix == "columns"


def test_hostile_sizes_are_searched_in_bounded_time(tmp_path):
    blob = IDENTIFY / "tf1_lstm2.bin"
    huge = ["--input-size", "2147483647", "--hidden-size", "2147483647", "--num-layers", "1024", "--bidirectional"]
    result = run_cli("identify", blob, "--mode", "lstm", *huge, "--proj-size", "2147483646", "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["verdict"] == "unidentified"
    biggest = RNNSpec("lstm", 2**31 - 1, 2**31 - 1, 1024, True)
    assert len(layouts(biggest)) <= len(TABLE) * 2 * len(PACKINGS)  # rows x biases x packings, whatever the sizes


def bad_probe(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / f"bad{len(list(tmp_path.glob('bad*.npz')))}.npz"
    np.savez(path, **arrays)
    return path


def test_bad_input_is_one_sentence(tmp_path):
    blob = IDENTIFY / "tf1_lstm2.bin"
    flags = ["--mode", "lstm", "--input-size", "5", "--hidden-size", "4", "--num-layers", "2"]
    x = np.zeros((3, 2, 5), np.float32)
    y = np.zeros((3, 2, 4), np.float32)
    text = tmp_path / "probe.npz"
    text.write_text("not a zip")
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object), y=y)
    cases = [
        ((tmp_path / "missing.bin", *flags), "does not exist"),
        ((tmp_path, *flags), "is a directory"),
        ((blob, "--input-size", "5", "--hidden-size", "4"), "needs --mode as well"),
        ((blob, "--mode", "lstm", "--input-size", "5"), "needs --hidden-size as well"),
        ((blob, *flags, "--proj-size", "4"), "must be smaller than hidden_size"),
        ((blob, "--mode", "gru", "--input-size", "5", "--hidden-size", "4", "--proj-size", "2"), "only for LSTMs"),
        ((blob, *flags, "--probe", text), "is not an .npz file"),
        ((blob, *flags, "--probe", pickled), "cannot read probe"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, x=x)), "no expected output"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, y=y)), "has no x"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, x=x, y=y, extra=y)), "'extra', which is none of"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, x=x[..., :3], y=y)), "x has shape (3, 2, 3)"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, x=x, y=y[..., :2])), "y has shape (3, 2, 2)"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, x=x * np.nan, y=y)), "NaN or infinite"),
        ((blob, *flags, "--probe", bad_probe(tmp_path, x=x, y=y, lengths=np.array([0, 3]))), "lengths must lie"),
        ((blob, *flags, "--candidate", "nope"), "no layout has the id 'nope'"),
        ((blob, *flags, "-o", tmp_path / "x.unknown"), "cannot tell what to write"),
        ((blob, *flags, "--probe", text, "-o", text, "--force"), "is an input of identify"),
    ]
    for args, phrase in cases:
        assert_clean_failure(run_cli("identify", *args), 2, phrase)
    gru_probe = bad_probe(tmp_path, x=x, y=y, c0=np.zeros((2, 2, 4), np.float32))
    gru = ["--mode", "gru", "--input-size", "5", "--hidden-size", "4", "--num-layers", "2"]
    assert_clean_failure(run_cli("identify", blob, *gru, "--probe", gru_probe), 2, "has no cell state")


def batch_major_probe(path: Path, model: torch.nn.Module, states: bool) -> Path:
    """What a Keras or JAX user has: x and y (B, T, ...), no batch_first key; zero initial states or given ones."""
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(B, T, I, generator=generator)
    h0 = torch.randn(L * 2, B, H, generator=generator) * 0.5
    with torch.no_grad():
        y, h_n = model(x.transpose(0, 1), h0 if states else None)
    arrays = {"x": x.numpy(), "y": y.transpose(0, 1).numpy()}
    np.savez(path, **arrays, **({"h0": h0.numpy(), "h_n": h_n.numpy()} if states else {}))
    return path


@pytest.mark.parametrize("states", [False, True], ids=["x-and-y", "with-states"])
def test_a_batch_major_probe_is_read_by_its_shapes(states, tmp_path):
    """A batch-major probe (what Keras gives) was "unidentified ... probe wrong" (x and y alone) or refused for its
    h0's shape; it worked only with a batch_first=True key inside the .npz."""
    model = torch_model("gru")
    torch.save(model.state_dict(), tmp_path / "source.pt")
    blob = tmp_path / "w.bin"
    rnnconv.convert(tmp_path / "source.pt", blob)
    probe = batch_major_probe(tmp_path / "probe.npz", model, states)
    flags = {"mode": "gru", "input_size": I, "hidden_size": H, "num_layers": L, "bidirectional": True}
    found = rnnconv.identify(blob, probe=probe, **flags)
    assert found.verdict == "identified", found.summary
    assert found.identified is not None and found.identified.id == "cudnn-gru/matrices-then-biases/float32"
    assert "read batch-major" in found.summary


def test_what_identify_o_writes_verifies_against_its_probe(tmp_path):
    """identify -o printed a stray "convert with" line, and what it wrote verified as structure only: the probe that
    identified it was not recorded."""
    out = tmp_path / "identified.pt"
    flags = ["--mode", "lstm", "--input-size", "5", "--hidden-size", "7", "--num-layers", "2", "--bidirectional"]
    probe = tmp_path / "probe.npz"
    probe.write_bytes((IDENTIFY / "jax_lstm_probe.npz").read_bytes())
    result = run_cli("identify", IDENTIFY / "jax_lstm.bin", *flags, "--probe", probe, "-o", out)
    assert result.returncode == 0 and "convert with" not in result.stdout, result.stdout
    report = json.loads(run_cli("verify", out, "--json").stdout)
    assert report["verdict"] == "match" and report["source"]["path"] == str(probe), report["summary"]
    assert report["inputs"]["seq_len"] == T and report["inputs"]["batch"] == B  # the probe's own input
    held = dict(np.load(probe))
    np.savez(probe, **{**held, "y": held["y"] + 0.5})  # the probe changed since: the comparison says so
    result = run_cli("verify", out, "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["verdict"] == "mismatch"
    assert any("changed since the blob was made" in w for w in report["warnings"]), report["warnings"]


def test_a_big_endian_probe_reads_alike(tmp_path):
    probe = np.load(IDENTIFY / "tf1_lstm2_probe.npz")
    swapped = bad_probe(tmp_path, **{k: v.astype(v.dtype.newbyteorder(">")) for k, v in probe.items()})
    flags = {"mode": "lstm", "input_size": 5, "hidden_size": 4, "num_layers": 2, "dtype": "float32"}
    found = rnnconv.identify(IDENTIFY / "tf1_lstm2.bin", probe=swapped, **flags)
    assert found.verdict == "identified" and found.identified is not None
    assert found.identified.id == "cudnn-lstm/matrices-then-biases/float32"


def test_a_probe_no_layout_reproduces_is_unidentified(tmp_path):
    probe = np.load(IDENTIFY / "tf1_lstm2_probe.npz")
    wrong = bad_probe(tmp_path, **{**probe, "y": probe["y"] + 0.5})
    flags = ["--mode", "lstm", "--input-size", "5", "--hidden-size", "4", "--num-layers", "2", "--dtype", "float32"]
    result = run_cli("identify", IDENTIFY / "tf1_lstm2.bin", *flags, "--probe", wrong, "-o", tmp_path / "x.bin")
    assert_clean_failure(result, 2, "nothing written", "none of the 12 layouts")
    assert not (tmp_path / "x.bin").exists()
