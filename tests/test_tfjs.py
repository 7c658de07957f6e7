"""TensorFlow.js: what rnnconv writes loads in TensorFlow.js itself (Node.js, @tensorflow/tfjs's CPU backend) and
computes what the source framework computes, from non-zero initial states; files TensorFlow.js saved read back
exactly; what TensorFlow.js cannot hold is refused in a sentence; hostile model.json files are refused in one.

Each verify starts one Node.js process. Where Node.js or the npm package is absent (no `npm ci`), the tests that run
TensorFlow.js skip; the reader's and writer's tests run everywhere."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from conftest import (
    FIXTURES,
    LARGEST_ERRORS,
    ROOT,
    assert_clean_failure,
    assert_no_framework_imported,
    needs_tfjs,
    run_cli,
)

import rnnconv
from rnnconv.formats import _node
from rnnconv.table.apply import find_row

TFJS = FIXTURES / "tfjs"


def _torch_source(tmp_path, module, name):
    torch = pytest.importorskip("torch")
    torch.manual_seed(len(name))
    with torch.no_grad():
        for key, p in module.named_parameters():
            if key.startswith("bias"):
                p.uniform_(-0.5, 0.5)  # distinct biases on both sides: a lost or doubled one shows
    path = tmp_path / f"{name}.pt"
    torch.save(module.state_dict(), path)
    return path


def _verified(out, label):
    report = rnnconv.verify(out)
    assert report.verdict == "match", report.model_dump_json()[:2000]
    assert report.backend.detail.startswith("@tensorflow/tfjs"), report.backend
    LARGEST_ERRORS[f"tfjs {label}"] = report.comparison.worst
    assert report.comparison.worst <= 1e-5, report.comparison.worst
    return report


@needs_tfjs
@pytest.mark.parametrize(
    "make, options",
    [
        pytest.param(lambda t: t.nn.LSTM(5, 7, num_layers=2, bidirectional=True), {}, id="torch-lstm-x2-bi"),
        pytest.param(lambda t: t.nn.RNN(4, 6, nonlinearity="relu"), {"nonlinearity": "relu"}, id="torch-rnn_relu-x1"),
        pytest.param(lambda t: t.nn.RNN(3, 5, num_layers=2, bidirectional=True), {}, id="torch-rnn_tanh-x2-bi"),
    ],
)
def test_pytorch_sources_written_run_in_tensorflow_js(make, options, tmp_path, request):
    """`rnnconv verify model.json` runs the written layers model in TensorFlow.js from non-zero states against the
    PyTorch module the file records."""
    torch = pytest.importorskip("torch")
    source = _torch_source(tmp_path, make(torch), request.node.callspec.id)
    out = tmp_path / "model.json"
    result = rnnconv.convert(source, out, **options)
    assert result.outputs == [str(out), str(tmp_path / "group1-shard1of1.bin")]
    report = _verified(out, request.node.callspec.id)
    assert report.source.run.startswith("torch")


@needs_tfjs
@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streaming"])
def test_the_usage_line_runs_in_node(streaming, tmp_path):
    """The streaming model's line was prose pointing at docs/streaming.md, which an installed rnnconv does not have:
    each is JavaScript that loads the model and calls it, run here as written on x (one chunk of a stream)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(5, 7, num_layers=2)
    torch.save(lstm.state_dict(), tmp_path / "lstm.pt")
    usage = rnnconv.convert(tmp_path / "lstm.pt", tmp_path / "model.json", streaming=streaming).usage
    assert "docs/" not in usage
    x = np.random.default_rng(0).normal(0, 0.8, (2, 4, 5)).astype(np.float32)  # batch-major, as the line takes it
    script = (  # the line as written, in an async function (it awaits the model), x given, y printed
        f"(async () => {{\nconst x = require('@tensorflow/tfjs').tensor({json.dumps(x.tolist())});\n{{\n{usage}\n"
        "console.log(JSON.stringify(y.arraySync()));\n}\n})();\n"
    )
    (tmp_path / "usage.cjs").write_text(script)
    env = {**os.environ, "NODE_PATH": str(_node.node_modules())}  # where require finds @tensorflow/tfjs
    done = subprocess.run(
        [_node.node(), "usage.cjs"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        want = lstm(torch.from_numpy(x.transpose(1, 0, 2)))[0].numpy().transpose(1, 0, 2)
    assert np.abs(np.array(json.loads(done.stdout)) - want).max() < 1e-5


@needs_tfjs
@pytest.mark.parametrize("layer", ["bidi_lstm", "srnn_relu"])
def test_keras_sources_written_run_in_tensorflow_js(layer, tmp_path):
    """Keras 3 layers (an LSTM with Keras' sigmoid, which TensorFlow.js would default to hardSigmoid) written as
    TensorFlow.js models match Keras itself."""
    pytest.importorskip("keras")
    out = tmp_path / "model.json"
    rnnconv.convert(FIXTURES / "keras3" / "mixed.keras", out, layer=layer, to="tfjs")
    document = json.loads(out.read_text())
    for entry in document["modelTopology"]["config"]["layers"]:
        config = entry["config"]["layer"]["config"] if entry["class_name"] == "Bidirectional" else entry["config"]
        assert "activation" in config and (entry["class_name"] == "SimpleRNN" or "recurrent_activation" in config)
    report = _verified(out, f"keras {layer}")
    assert report.source.run.startswith("keras")


@needs_tfjs
def test_two_gates_swapped_in_the_shard_is_a_mismatch(tmp_path):
    torch = pytest.importorskip("torch")
    source = _torch_source(tmp_path, torch.nn.LSTM(3, 4), "swap")
    out = tmp_path / "model.json"
    rnnconv.convert(source, out)
    shard = tmp_path / "group1-shard1of1.bin"
    words = np.fromfile(shard, "<f4")
    kernel = words[: 3 * 16].reshape(3, 16)  # rnn/kernel (in, 4H), gates i, f, c, o
    kernel[:, [*range(4, 8), *range(4)]] = kernel[:, :8].copy()
    words[: 3 * 16] = kernel.ravel()
    words.tofile(shard)
    result = run_cli("verify", out)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


def test_reset_after_gru_is_refused_in_one_sentence(tmp_path):
    torch = pytest.importorskip("torch")
    source = _torch_source(tmp_path, torch.nn.GRU(3, 4), "gru")
    result = run_cli("convert", source, tmp_path / "model.json")
    assert_clean_failure(result, 2, "reset_after=True")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not any(tmp_path.glob("*.json")) and not any(tmp_path.glob("*.bin"))


def test_files_tensorflow_js_saved_read_back_exactly():
    """fixtures/tfjs (made by TensorFlow.js: fixtures/make_tfjs_fixtures.cjs): every weight of the layers rnnconv
    reads comes back bit for bit as TensorFlow.js held it, from its own file (no cell in the names) and from the
    converter's (the cell named, two shards split inside a tensor); the GRU and the hardSigmoid LSTM are refused."""
    values = json.loads((TFJS / "values.json").read_text())
    for folder in ("saved", "converted"):
        path = TFJS / folder / "model.json"
        report = rnnconv.inspect(path)
        refused = {e.name: e.reason for e in report.rnns if not e.converts}
        assert "reset_after=True" in refused["gru"] and "hard_sigmoid" in refused["hard"], refused
        for layer, prefixes in (("bidi_a,bidi_b", ("bidi_a", "bidi_b")), ("srnn", ("srnn",))):
            with rnnconv.load(path, layer=layer) as (rnn,):
                row = find_row("tfjs", "LSTM" if rnn.spec.mode == "lstm" else "SimpleRNN")
                for index, prefix in enumerate(prefixes):
                    for direction in range(rnn.spec.num_directions):
                        scope = [n for n in values if n.startswith(f"{prefix}/")]
                        if rnn.spec.bidirectional:
                            side = ("forward_", "backward_")[direction]
                            scope = [n for n in scope if n.split("/")[1].startswith(side)]
                        stored = rnn.stored(row, index, direction)
                        for role, variable in (("input_matrix", "kernel"), ("recurrent_matrix", "recurrent_kernel")):
                            (name,) = [n for n in scope if n.endswith(f"/{variable}")]
                            assert np.array_equal(stored[role].ravel(), np.float32(values[name])), (folder, name)
                        (bias,) = [n for n in scope if n.endswith("/bias")]
                        assert np.array_equal(stored["bias"], np.float32(values[bias])), (folder, bias)


@needs_tfjs
@pytest.mark.needs("torch")
def test_a_tensorflow_js_source_runs_in_tensorflow_js(tmp_path):
    """The converter-named, two-shard file converted to PyTorch: verify runs the source in TensorFlow.js (its 2-layer
    Bidirectional stack, from non-zero states) and PyTorch on the result."""
    out = tmp_path / "a.pt"
    rnnconv.convert(TFJS / "converted" / "model.json", out, layer="bidi_a,bidi_b")
    report = rnnconv.verify(out)
    assert report.verdict == "match" and report.source.run.startswith("@tensorflow/tfjs"), report.source
    LARGEST_ERRORS["tfjs converted source"] = report.comparison.worst


def test_reading_and_writing_import_no_framework(tmp_path):
    out = tmp_path / "model.json"
    rnnconv.convert(TFJS / "saved" / "model.json", tmp_path / "s.bin", layer="srnn")
    rnnconv.convert(tmp_path / "s.bin", out)
    assert_no_framework_imported(out)


def test_verify_without_tensorflow_js_says_how_to_install_it(tmp_path):
    rnnconv.convert(TFJS / "saved" / "model.json", tmp_path / "s.pt", layer="srnn")
    env = {**os.environ, _node.NODE_MODULES_VARIABLE: str(tmp_path / "nowhere")}
    result = run_cli("verify", tmp_path / "s.pt", env=env)
    # a pip install has no source tree to `npm ci` in: the way said is one it can take, with the tests' version
    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]["@tensorflow/tfjs"]
    way = f"npm install --ignore-scripts --prefix DIR @tensorflow/tfjs@{pinned}, then set RNNCONV_NODE_MODULES to"
    assert_clean_failure(result, 3, "@tensorflow/tfjs", way, "npm ci")
    assert "source tree" not in result.stderr
    doctor = json.loads(run_cli("doctor", "--json", env=env).stdout)
    for row in (doctor["sources"]["tfjs"], doctor["backends"]["tfjs"]):  # the engine's row says npm too
        assert way in row["detail"] and "source tree" not in row["detail"] and "rnnconv[None]" not in row["detail"]


def _hostile(tmp_path, change):
    """A copy of the saved fixture with model.json changed by `change(document, folder)`."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "weights.bin").write_bytes((TFJS / "saved" / "weights.bin").read_bytes())
    document = json.loads((TFJS / "saved" / "model.json").read_text())
    change(document, folder)
    (folder / "model.json").write_text(json.dumps(document))
    return folder / "model.json"


def _group(document):
    return document["weightsManifest"][0]


@pytest.mark.parametrize(
    "change, phrase",
    [
        (lambda d, f: _group(d).update(paths=["../weights.bin"]), "outside the model's folder"),
        (lambda d, f: _group(d).update(paths=["/etc/passwd"]), "absolute path"),
        (lambda d, f: _group(d).update(paths=["missing.bin"]), "does not exist"),
        (lambda d, f: (f / "weights.bin").write_bytes(b"\0" * 100), "a shard is missing or cut short"),
        (lambda d, f: _group(d)["weights"][0].update(dtype="float64"), "has dtype 'float64'"),
        (lambda d, f: _group(d)["weights"][0].update(shape=[3, -16]), "not a list of sizes"),
        (lambda d, f: _group(d)["weights"][0].update(shape=[2**30, 2**30]), "a shard is missing or cut short"),
        (lambda d, f: _group(d)["weights"][0].update(quantization={"dtype": "int4"}), "quantizes to"),
        (lambda d, f: d.update(format="graph-model"), "not a layers model"),
        (lambda d, f: d.update(modelTopology={"config": {"layers": "x" * 5}}), "damaged"),
        (lambda d, f: d.update(modelTopology={"name": 3}), "has no model config"),  # the fuzzer's
    ],
    ids=[
        "escaping",
        "absolute",
        "missing",
        "short",
        "dtype",
        "negative",
        "huge",
        "quantization",
        "graph",
        "config",
        "no config",
    ],
)
def test_hostile_model_json_is_refused_in_one_sentence(change, phrase, tmp_path):
    path = _hostile(tmp_path, change)
    result = run_cli("inspect", path)
    assert_clean_failure(result, 2, phrase)


def test_a_setting_of_any_length_is_cut_in_the_message(tmp_path):
    """The fuzz found it: a layer skipped for an activation of 14,000 characters quoted it whole."""

    def long_activation(document, folder):
        layer = next(e for e in document["modelTopology"]["config"]["layers"] if "activation" in e["config"])
        layer["config"]["activation"] = "a b, c;" * 2000

    result = run_cli("inspect", _hostile(tmp_path, long_activation))
    assert "characters)" in result.stdout + result.stderr
    assert max(map(len, (result.stdout + result.stderr).splitlines())) < 1000


def test_deeply_nested_json_is_refused(tmp_path):
    path = tmp_path / "model.json"
    path.write_text('{"modelTopology": ' + "[" * 100000 + "]" * 100000 + "}")
    assert_clean_failure(run_cli("inspect", path), 2, "nests too deep")


@needs_tfjs
def test_what_tensorflow_js_refuses_is_said_in_its_words(tmp_path):
    """A weight TensorFlow.js cannot place (named ""): rnnconv reads the layers it knows, and verify says in one
    sentence that TensorFlow.js cannot run the file, TensorFlow.js's reason whole (no dangling colon)."""

    def extra(document, folder):
        _group(document)["weights"].append({"name": "", "shape": [1], "dtype": "float32"})
        with open(folder / "weights.bin", "ab") as f:
            f.write(b"\0" * 4)

    path = _hostile(tmp_path, extra)
    rnnconv.convert(path, tmp_path / "s.pt", layer="srnn")
    result = run_cli("verify", tmp_path / "s.pt")
    assert_clean_failure(result, 2, "TensorFlow.js cannot run", "no target variable")
    assert not result.stderr.rstrip().endswith(":"), result.stderr


@needs_tfjs
@pytest.mark.needs("torch")
def test_quantized_weights_read_as_tensorflow_js_dequantizes_them(tmp_path):
    """The saved fixture's weights quantized as the converter quantizes them (float16, and uint8 with scale and
    min): rnnconv reads the values TensorFlow.js loads, and a conversion of it matches TensorFlow.js running it."""
    document = json.loads((TFJS / "saved" / "model.json").read_text())
    words = np.fromfile(TFJS / "saved" / "weights.bin", "<f4")
    chunks, at = [], 0
    for index, weight in enumerate(_group(document)["weights"]):
        values = words[at : at + int(np.prod(weight["shape"]))]
        at += values.size
        if index % 2:
            weight["quantization"] = {"dtype": "float16"}
            chunks.append(values.astype("<f2").tobytes())
        else:
            low, scale = float(values.min()), float(values.max() - values.min()) / 255 or 1.0
            weight["quantization"] = {"dtype": "uint8", "scale": scale, "min": low}
            chunks.append(np.round((values - low) / scale).astype("u1").tobytes())
    (tmp_path / "weights.bin").write_bytes(b"".join(chunks))
    (tmp_path / "model.json").write_text(json.dumps(document))
    rnnconv.convert(tmp_path / "model.json", tmp_path / "a.pt", layer="bidi_a,bidi_b")
    report = rnnconv.verify(tmp_path / "a.pt")
    assert report.verdict == "match" and report.source.run.startswith("@tensorflow/tfjs"), report.source
    LARGEST_ERRORS["tfjs quantized source"] = report.comparison.worst


def _called_on(layer, tensor):
    """A change to a streaming model.json: `layer`'s first input replaced by `tensor` ([name, call, output, {}])."""

    def change(document):
        (entry,) = [e for e in document["modelTopology"]["config"]["layers"] if e["name"] == layer]
        entry["inbound_nodes"][0][0] = tensor

    return change


@needs_tfjs
@pytest.mark.parametrize(
    "change, phrase",
    [
        (
            _called_on("rnn_layer0", ["rnn_layer1", 0, 0, {}]),
            "layer 'rnn_layer0' is called on call 0 of layer 'rnn_layer1'",
        ),
        (_called_on("rnn_layer1", ["nowhere", 0, 0, {}]), "layer 'rnn_layer1' is called on call 0 of layer 'nowhere'"),
        (_called_on("rnn_layer1", ["rnn_layer0", 1, 0, {}]), "is called on call 1 of layer 'rnn_layer0'"),
        (_called_on("y", ["rnn_layer1", "0", 0, {}]), "layer 'y' is called on something that is no [layer, call"),
    ],
    ids=["cycle", "no such layer", "a call never made", "no call"],
)
def test_a_model_tensorflow_js_would_wait_on_forever_is_refused_not_run(change, phrase, tmp_path):
    """TensorFlow.js's loader puts back a layer call whose input does not exist yet and tries again, for ever where it
    never will: verify (whole sequences, and --streaming) refuses such a model before Node.js hangs on it."""
    torch = pytest.importorskip("torch")
    source = _torch_source(tmp_path, torch.nn.LSTM(3, 4, num_layers=2), "stack")
    out = tmp_path / "model.json"
    rnnconv.convert(source, out, streaming=True)
    document = json.loads(out.read_text())
    change(document)
    out.write_text(json.dumps(document))
    result = run_cli("verify", out, "--streaming")
    assert_clean_failure(result, 2, "TensorFlow.js cannot load", phrase, "would wait for it forever")
    rnnconv.convert(out, tmp_path / "layer.pt", layer="rnn_layer0")  # its weights read, as they are
    result = run_cli("verify", tmp_path / "layer.pt")  # model.json, the source, run in TensorFlow.js
    assert_clean_failure(result, 2, "TensorFlow.js cannot load", phrase, "would wait for it forever")
