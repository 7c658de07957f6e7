"""What a new user hits in the first hour (issue 33, items 6-8, 10 and 12): the output given the same ways to every
command, damaged files explained by what their names say, doctor listing every format, identify --candidate, and
the small sentences that said something wrong."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from conftest import FIXTURES, assert_clean_failure, run_cli

import rnnconv
from rnnconv.errors import RnnconvError
from rnnconv.formats import base, registry
from rnnconv.formats.catalog import FORMAT_INFO


@pytest.fixture
def lstm_source(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "bilstm.pt"
    torch.save(torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True).state_dict(), path)
    return path


# --- 6. one option vocabulary: the output positional (convert) or -o/--output (every command) ----------------


@pytest.mark.slow
def test_convert_takes_the_output_with_o_as_every_command_does(lstm_source, tmp_path):
    result = run_cli("convert", lstm_source, "-o", tmp_path / "a.xml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "a.xml").exists() and (tmp_path / "a.bin").exists()
    result = run_cli("convert", lstm_source, "--output", tmp_path / "b.onnx")
    assert result.returncode == 0 and (tmp_path / "b.onnx").exists(), result.stderr
    result = run_cli("convert", lstm_source, tmp_path / "c.onnx")  # positional, as before
    assert result.returncode == 0 and (tmp_path / "c.onnx").exists(), result.stderr
    assert_clean_failure(run_cli("convert", lstm_source), 2, "convert needs an output", "or -o OUTPUT")


@pytest.mark.slow
def test_an_output_given_as_a_source_asks_did_you_mean_o(lstm_source, tmp_path):
    """`torch-to-cudnn bilstm.pt t5/foo.bin` said "t5/foo.bin would be written to t5/foo.bin, which is a source"."""
    missing = tmp_path / "t5" / "foo.bin"
    result = run_cli("torch-to-cudnn", lstm_source, missing)
    assert_clean_failure(result, 2, f"{missing} does not exist", f"did you mean -o {missing}?")
    assert "which is a source" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bilstm.pt"]  # nothing written beside the source
    # a missing source named like the source format's files (a cuDNN blob's .bin, PyTorch's too) is just missing
    result = run_cli("cudnn-to-torch", tmp_path / "missing.bin")
    assert_clean_failure(result, 2, "missing.bin does not exist")
    assert "did you mean" not in result.stderr


# --- 7. a damaged file of a known kind: what its name says, and what is wrong with it -------------------------

EVERY_ENDING = sorted(
    {s for info in FORMAT_INFO.values() for s in (*info.read_suffixes, *info.default_for, *info.write_suffixes)}
    | {".ckpt.data-00000-of-00001"}  # a TF1 checkpoint's data, beside its .index
)


def other_titles_in(sentence: str, named: set[str]) -> set[str]:
    """The titles of formats other than `named` that a sentence names."""
    for title in sorted(named, key=len, reverse=True):  # "TF1 cuDNN checkpoint" holds "cuDNN"
        sentence = sentence.replace(title, "")
    return {info.title for info in FORMAT_INFO.values() if info.title in sentence}


@pytest.mark.parametrize("ending", EVERY_ENDING)
@pytest.mark.parametrize("content", ["empty", "foreign bytes"])
def test_a_damaged_file_is_told_by_what_its_name_says(ending, content, tmp_path):
    """One sentence naming the format(s) the name says and what is wrong: not the list of every format."""
    path = tmp_path / f"model{ending}"
    path.write_bytes(b"" if content == "empty" else bytes(range(7, 71)))
    with pytest.raises(RnnconvError) as caught:
        registry.detect(path)
    sentence = str(caught.value)
    named = {fmt.title for fmt in registry.named_by(path)}
    # the length without the path, which grows with pytest's temporary folder (and its workers' names)
    assert named and "\n" not in sentence and len(sentence.replace(str(path), "")) < 440, sentence
    if content == "empty":  # no format's file is empty: what its name says does not matter
        assert sentence == f"{path} is empty (0 bytes)"
        return
    assert "cannot tell" not in sentence and all(title in sentence for title in named), sentence
    assert not other_titles_in(sentence, named), sentence
    assert "is empty" not in sentence, sentence
    assert "safetensors" in ending or "not a safetensors file" not in sentence, sentence  # an .npz is a zip


WRITTEN = ["m.bin", "m.safetensors", "m.pt", "m.keras", "m.weights.h5", "m.onnx", "m.tflite", "m.xml", "m.msgpack"]
WRITTEN += ["m.nnx.msgpack", "m.mlx.safetensors", "m.param"]


@pytest.mark.parametrize("name", WRITTEN)
def test_a_truncated_file_is_one_sentence_about_that_file(name, tmp_path):
    """A file rnnconv wrote, cut in half: its reader's sentence (what the name says when the content no longer
    does), never the 2,300-character list of every format."""
    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(5, 7).state_dict(), tmp_path / "source.pt")
    path = tmp_path / name
    rnnconv.convert(tmp_path / "source.pt", path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RnnconvError) as caught, rnnconv.load(path) as rnns:
        [rnn.arrays() for rnn in rnns]
    sentence = str(caught.value)
    assert sentence.startswith(str(path)) and "\n" not in sentence and len(sentence) < 300, sentence
    assert "cannot tell" not in sentence


def test_a_file_nothing_hints_at_names_a_few_formats_and_counts_the_rest(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("a text file")
    with pytest.raises(RnnconvError, match=r"cannot tell what .*notes.txt is: .* and \d+ more") as caught:
        registry.detect(path)
    assert len(str(caught.value).replace(str(path), "")) < 240


@pytest.mark.slow
def test_the_issue_s_two_files_on_the_command_line(tmp_path):
    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(5, 7).state_dict(), tmp_path / "source.pt")
    mlx = tmp_path / "m.mlx.safetensors"
    rnnconv.convert(tmp_path / "source.pt", mlx)
    mlx.write_bytes(mlx.read_bytes()[:100])
    result = run_cli("convert", mlx, tmp_path / "x.bin")
    assert_clean_failure(result, 2, f"{mlx} (MLX by its name) is not a safetensors file")
    assert len(result.stderr) < 200
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert_clean_failure(run_cli("inspect", empty), 2, f"{empty} is empty (0 bytes)")


def _blob_of(path):
    rnnconv.convert(FIXTURES / "torch" / "rnn_tanh.pt", path)
    return path


DAMAGED = {  # a damaged file, and the format its name says (the X of X-to-Y)
    "empty.pt": (lambda path: path.write_bytes(b""), "torch", "is empty (0 bytes)"),
    "trunc.pt": (
        lambda path: path.write_bytes((FIXTURES / "torch" / "lstm_proj.pt").read_bytes()[:3000]),
        "torch",
        "looks like a zip archive but cannot be read (truncated or corrupt)",
    ),
    "trunc.keras": (
        lambda path: path.write_bytes((FIXTURES / "keras3" / "lstm.keras").read_bytes()[:5000]),
        "keras",
        "looks like a zip archive but cannot be read (truncated or corrupt)",
    ),
    "empty.bin": (lambda path: path.write_bytes(b""), "cudnn", "is empty (0 bytes)"),
    "empty_with_sidecar.bin": (lambda path: _blob_of(path).write_bytes(b""), "cudnn", "is empty (0 bytes)"),
    "trunc.safetensors": (  # MLX's: its reader's check told it as a PyTorch file
        lambda path: path.write_bytes((FIXTURES / "mlx" / "lstm.safetensors").read_bytes()[:-40]),
        "mlx",
        "does not fit the file (truncated or corrupt)",
    ),
}


@pytest.mark.parametrize("name", list(DAMAGED))
def test_a_damaged_file_is_told_in_one_sentence_by_every_command(name, tmp_path):
    """inspect said "truncated or corrupt" and torch-to-cudnn "(File is not a zip file)" of one file; inspect
    "empty (0 bytes)" and torch-to-cudnn "neither torch.save's zip format nor ..." of another; verify of an empty
    .bin never said empty."""
    damage, kind, phrase = DAMAGED[name]
    path = tmp_path / name
    damage(path)
    out = tmp_path / "out"
    out.mkdir()
    alias = f"{kind}-to-torch" if kind == "cudnn" else f"{kind}-to-cudnn"
    commands = [
        ("inspect", path),
        ("convert", path, out / "m.onnx"),
        (alias, path, "-o", out / ("m.pt" if kind == "cudnn" else "m.bin")),
        ("verify", path),
    ]
    if kind == "cudnn":
        commands += [
            ("verify", path, "--mode", "lstm", "--input-size", "3", "--hidden-size", "4"),
            ("identify", path, "--mode", "lstm", "--input-size", "3", "--hidden-size", "4"),
        ]
    said = {}
    for command in commands:
        result = run_cli(*command)
        assert_clean_failure(result, 2, phrase)
        said[" ".join(map(str, command))] = result.stderr
    assert len(set(said.values())) == 1, said
    assert list(out.iterdir()) == []


# --- 8. doctor comes from the registry: every format's engine and the frameworks that run its files ----------


def test_doctor_lists_every_format_of_the_registry():
    """Flax, flax.nnx and Equinox were missing: no backends, no jax/flax/equinox versions."""
    from rnnconv.cli.doctor import examine, version

    report = json.loads(json.dumps(examine()))  # as --json prints it
    for fmt in registry.formats():
        for engine in (fmt.engine, *fmt.plugin.more_engines):  # MNN, ONNX's second engine, was missing
            if engine is not None:
                row = report["backends"][engine.name]
                assert row["format"] == fmt.name
                assert row["versions"] == {p: version(p, m) for p, m in engine.modules}, engine.name
        if type(fmt).run is not base.Format.run:  # it runs its files as sources: a framework does
            rows = [row for row in report["sources"].values() if row["format"] == fmt.name]
            own = fmt.name == "cudnn" and report["backends"]["numpy"]["available"]  # a blob: the numpy reference
            assert rows or own, f"doctor does not list what runs {fmt.title} files"
    for engine, package in (("flax", "flax"), ("flax-nnx", "flax"), ("equinox", "equinox")):
        assert report["backends"][engine]["available"], engine
        assert report["packages"][package] and report["packages"]["jax"]
    assert {"flax", "flax-nnx", "equinox"} <= set(report["sources"])


def test_doctor_names_its_rows_as_the_command_line_does():
    """The backend row said flax-nnx and the source row flax_nnx (and tf_keras): one spelling, the command line's."""
    from rnnconv.cli.doctor import examine

    report = examine()
    rows = [*report["backends"], *report["sources"]]
    assert not [name for name in rows if "_" in name], rows
    assert "flax-nnx" in report["backends"] and "flax-nnx" in report["sources"] and "tf-keras" in report["sources"]


# --- 10. identify --candidate: the other layouts of the blob's size counted, and a next step that is one -------

JAX_LSTM = FIXTURES / "identify" / "jax_lstm.bin"
JAX_SPEC = {"mode": "lstm", "input_size": 5, "hidden_size": 7, "num_layers": 2, "bidirectional": True}


def test_a_chosen_candidate_is_not_the_only_layout_of_its_size(tmp_path):
    """18 layouts fit; --candidate said "no other known layout has its size"."""
    found = rnnconv.identify(JAX_LSTM, **JAX_SPEC, candidate="onnx-lstm/per-layer/float32")
    assert found.verdict == "identified"
    assert "no other known layout" not in found.summary
    assert "17 other known layouts have its size too (cudnn-lstm/matrices-then-biases/float32, " in found.summary
    assert "and 14 more)" in found.summary and "--probe" in found.summary
    assert found.convert is not None and found.convert.count("rnnconv ") == 1  # one step: identify -o OUTPUT
    assert found.convert.split("#")[0].rstrip().endswith("--candidate onnx-lstm/per-layer/float32 -o OUTPUT")


def test_identify_o_says_what_to_do_with_what_it_wrote_not_the_same_command(tmp_path):
    out = tmp_path / "j.pt"
    found = rnnconv.identify(JAX_LSTM, **JAX_SPEC, candidate="onnx-lstm/per-layer/float32", output=out)
    assert found.outputs == [str(out)] and found.convert is None  # what it wrote is the next step, not a command


# --- 12. the smaller ones ----------------------------------------------------------------------------------


def save(tmp_path, module: torch.nn.Module, name: str = "source.pt"):
    torch.save(module.state_dict(), tmp_path / name)
    return tmp_path / name


@pytest.mark.slow
def test_verify_of_a_gru_says_h0_not_c0(tmp_path):
    """A GRU or simple RNN has no c: "non-zero h0 and c0" was said of every RNN."""
    blob = tmp_path / "g.bin"
    rnnconv.convert(save(tmp_path, torch.nn.GRU(5, 7)), blob)
    result = run_cli("verify", blob)
    assert result.returncode == 0, result.stderr
    assert ", non-zero h0\n" in result.stdout and "c0" not in result.stdout
    assert rnnconv.verify(blob).inputs.state_distribution == "normal(0, 0.5), h0 non-zero"
    lstm = tmp_path / "l.bin"
    rnnconv.convert(save(tmp_path, torch.nn.LSTM(5, 7), "lstm.pt"), lstm)
    assert rnnconv.verify(lstm).inputs.state_distribution == "normal(0, 0.5), h0 and c0 non-zero"


def test_one_direction_is_singular(tmp_path):
    source = save(tmp_path, torch.nn.LSTM(5, 7, num_layers=2))
    with pytest.raises(RnnconvError, match=r"this RNN has 2 layers and 1 direction(;|$)"):
        rnnconv.convert(source, tmp_path / "x.eqx")


def test_ncnn_s_hint_gives_a_projection_s_h_its_size(tmp_path):
    """h0_k of a projection LSTM is (directions, P), c0_k (directions, H): the hint said (2, H) for both."""
    source = save(tmp_path, torch.nn.LSTM(5, 7, num_layers=2, bidirectional=True, proj_size=3))
    usage = rnnconv.convert(source, tmp_path / "m.param").usage
    assert "h0_0 (2, 3), c0_0 (2, 7)" in usage


def test_notes_do_not_speak_of_cudnn_when_the_target_is_another(tmp_path):
    """A Keras Bidirectional(merge_mode='sum') written as OpenVINO or TFLite said "cuDNN concatenates ..."."""
    import keras

    model = keras.Sequential([
        keras.Input((None, 5)),
        keras.layers.Bidirectional(keras.layers.LSTM(7, return_sequences=True), merge_mode="sum", name="summed"),
        keras.layers.LSTM(4, go_backwards=True, return_sequences=True, name="backwards"),
    ])  # fmt: skip
    model.save(tmp_path / "m.keras")
    for layer, ending in [(layer, ending) for layer in ("summed", "backwards") for ending in (".xml", ".tflite")]:
        notes = rnnconv.convert(tmp_path / "m.keras", tmp_path / f"{layer}{ending}", layer=layer).rnns[0].notes
        assert any("to match Keras" in note for note in notes), notes
        assert not any("cuDNN" in note for note in notes), notes


LONG_NAME = "model.encoder.bidirectional_sequence_encoder_block.recurrent_layer_with_a_long_name"


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["60", "100", "200"])
def test_inspect_never_wraps_a_name(columns, tmp_path):
    """The name column is what users copy into --layer: rich folded it mid-word in a narrow terminal."""
    state = {f"{LONG_NAME}.{k}": v for k, v in torch.nn.LSTM(5, 7, bidirectional=True).state_dict().items()}
    state |= {f"decoder.rnn.{k}": v for k, v in torch.nn.GRU(14, 4).state_dict().items()}
    torch.save(state, tmp_path / "long.pt")
    result = run_cli("inspect", tmp_path / "long.pt", env={"COLUMNS": columns})
    assert result.returncode == 0, result.stderr
    for name in (LONG_NAME, "decoder.rnn"):
        assert any(name in line for line in result.stdout.splitlines()), result.stdout
    assert "nn.LSTM" in result.stdout and "bidirectional" in result.stdout


def test_inspect_lists_a_chain_in_one_order_for_every_graph_format(tmp_path):
    """ONNX and OpenVINO listed the layers before their chain, ncnn after: every one now lists the chain first."""
    source = save(tmp_path, torch.nn.GRU(5, 7, num_layers=2))
    orders = {}
    for name in ("m.onnx", "m.xml", "n.param"):
        rnnconv.convert(source, tmp_path / name)
        orders[name] = [entry.spec.num_layers for entry in rnnconv.inspect(tmp_path / name).rnns]
    assert all(order == [2, 1, 1] for order in orders.values()), orders


def test_an_nnx_file_s_rnn_is_named_by_its_tree(tmp_path):
    """nnx.RNN's state is {cell: ...}: its RNN was named "params", a name nowhere in the file."""
    rnnconv.convert(save(tmp_path, torch.nn.LSTM(5, 7)), tmp_path / "m.nnx.msgpack")
    (entry,) = rnnconv.inspect(tmp_path / "m.nnx.msgpack").rnns
    assert entry.name == "cell"
    converted = rnnconv.convert(tmp_path / "m.nnx.msgpack", tmp_path / "m.bin", layer="cell")
    assert [rnn.name for rnn in converted.rnns] == ["cell"]
    rnnconv.convert(save(tmp_path, torch.nn.LSTM(5, 7, num_layers=2), "two.pt"), tmp_path / "two.nnx.msgpack")
    assert [e.name for e in rnnconv.inspect(tmp_path / "two.nnx.msgpack").rnns] == ["layers"]  # nnx.Sequential's


@pytest.mark.slow
def test_a_usage_error_s_json_document_names_its_command():
    result = run_cli("convert", "--no-such-option", "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["command"] == "convert" and "--no-such-option" in document["error"]


def test_several_rnns_for_a_target_that_holds_one_say_what_works(tmp_path):
    """Two RNNs to out.mlx.safetensors hinted "write them all to one .safetensors", which MLX's is not."""

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.LSTM(5, 7), torch.nn.GRU(7, 4)

    source = save(tmp_path, Two())
    with pytest.raises(RnnconvError) as caught:
        rnnconv.convert(source, tmp_path / "out.mlx.safetensors")
    assert "MLX files hold one RNN each: pick one with --layer" in str(caught.value)
    assert ".safetensors (rnnconv convert" not in str(caught.value)
    with pytest.raises(RnnconvError, match=r"write them all to one \.safetensors .*--to torch\)"):
        rnnconv.convert(source, tmp_path / "out.pt")  # PyTorch's .safetensors holds them all
    rnnconv.convert(source, tmp_path / "out.mlx.safetensors", layer="a")


@pytest.mark.slow
def test_verify_names_both_missing_frameworks(tmp_path):
    """The source's framework (torch) and the file's runtime (openvino) both missing: only torch was named."""
    from test_verify_ci import hide

    written = tmp_path / "m.xml"
    rnnconv.convert(save(tmp_path, torch.nn.LSTM(5, 7)), written)
    result = run_cli("verify", written, env=hide(tmp_path, "torch", "openvino"))
    assert_clean_failure(result, 3, "needs torch", "running m.xml needs openvino", "rnnconv[openvino]")


def test_an_ncnn_model_beside_an_ir_of_its_name_says_whose_bin_it_is(tmp_path):
    """`.param` beside an `.xml` of the same name failed on "m.bin already exists"."""
    source = save(tmp_path, torch.nn.LSTM(5, 7))
    rnnconv.convert(source, tmp_path / "m.xml")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RnnconvError) as caught:
        rnnconv.convert(source, tmp_path / "m.param")
    sentence = str(caught.value)
    assert f"{tmp_path / 'm.param'} keeps its weights in {tmp_path / 'm.bin'}" in sentence
    assert f"(the weights of {tmp_path / 'm.xml'})" in sentence and "-o " in sentence and "--force" in sentence
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    rnnconv.convert(source, tmp_path / "n.param")
    with pytest.raises(RnnconvError, match=r"\(the weights of .*n\.param\)"):
        rnnconv.convert(source, tmp_path / "n.xml")  # and the other way
