"""SavedModel directories and TF2 object-based checkpoints (fixtures/make_savedmodel_fixtures.py): every RNN of each
converts and computes what TensorFlow computed on the file (the SavedModels through their serving signature, the
checkpoints restored into their model), from the oracle the fixture script recorded; inspect, --layer, the
settings a checkpoint does not keep, verify, the way out to a .keras, and damaged files."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURES, FRAMEWORKS, LARGEST_ERRORS, assert_clean_failure, run_cli
from facts.keras import SAVED_ACTIVATIONS, SAVED_RUNS, saved_run

import rnnconv
from rnnconv.formats.cudnn.reader import open_bin

SAVED = FIXTURES / "savedmodel"
STATED = {"activation": "tanh", "recurrent_activation": "sigmoid"}
# Each source by another of its names: its directory (with or without /), its saved_model.pb, a prefix, an index.
NAMES = {
    "tfk_lstm_state": "tfk_lstm_state",
    "tfk_bigru": "tfk_bigru/saved_model.pb",
    "k3_export": "k3_export/",
    "tfk_ckpt": "tfk_ckpt/ckpt-1.index",
    "k3_ckpt": "k3_ckpt/ckpt",
    "k3_export_activations": "k3_export_activations",
}


def test_every_rnn_computes_what_tensorflow_computed(tmp_path):
    oracle = np.load(SAVED / "oracle.npz")
    for seed, runs in SAVED_RUNS.items():
        values = {key.split("/", 1)[1]: oracle[key] for key in oracle if key.startswith(seed + "/")}
        for layer in runs:
            stated = SAVED_ACTIVATIONS.get(layer, STATED) if "ckpt" in seed else {}  # an export's graph says them
            out = tmp_path / f"{seed}-{layer}.bin"
            rnnconv.convert(
                SAVED / NAMES[seed], out, layer=layer if len(runs) > 1 or "export" in seed else None, **stated
            )
            blob = open_bin(out)
            pairs = saved_run(layer, blob.spec, blob.param, values, seed)
            worst = max(float(np.abs(got - expected).max()) for got, expected in pairs)
            LARGEST_ERRORS[f"tensorflow savedmodel {seed} {layer}"] = worst
            assert worst < 1e-5, (seed, layer)
            assert (len(pairs) == 3) == (layer == "encoder")  # the LSTM fed non-zero h0 and c0 by the model


def test_inspect_lists_each_rnn_with_its_sizes():
    seen = {}
    sources = (
        "tfk_lstm_state",
        "tfk_bigru",
        "k3_export",
        "tfk_ckpt/ckpt-1",
        "k3_ckpt/ckpt.index",
        "k3_export_activations",
    )
    for source in sources:
        report = rnnconv.inspect(SAVED / source)
        for rnn in report.rnns:
            assert rnn.sizes is not None
            sizes = rnn.sizes
            seen[f"{source}:{rnn.name}"] = (rnn.layer_class, sizes.input_size, sizes.hidden_size, sizes.bidirectional)
    assert seen == {
        "tfk_lstm_state:encoder": ("LSTM", 4, 6, False),
        "tfk_lstm_state:relu_rnn": ("SimpleRNN", 6, 3, False),
        "tfk_bigru:bidi": ("Bidirectional(GRU)", 3, 5, True),
        "tfk_bigru:backwards": ("GRU", 5, 4, False),
        "k3_export:gru": ("GRU", 3, 5, False),
        "k3_export:lstm": ("LSTM", 5, 4, False),
        "tfk_ckpt/ckpt-1:encoder": ("LSTM", 4, 6, False),
        "tfk_ckpt/ckpt-1:relu_rnn": ("SimpleRNN", 6, 3, False),
        "k3_ckpt/ckpt.index:bidi_lstm": ("Bidirectional(LSTM)", 3, 4, True),
        "k3_export_activations:bidi_relu": ("Bidirectional(SimpleRNN)", 3, 4, True),
        "k3_export_activations:hard_gru": ("GRU", 8, 5, False),
    }


def test_a_checkpoint_without_config_is_refused_naming_what_to_state(tmp_path):
    result = run_cli("convert", SAVED / "k3_ckpt" / "ckpt", tmp_path / "out.bin")
    assert_clean_failure(result, 2, "keeps no layer configs", "--activation X --recurrent-activation X", "assumes none")
    assert not (tmp_path / "out.bin").exists()
    result = run_cli("convert", SAVED / "tfk_bigru", tmp_path / "out.bin")  # two RNNs: --layer picks one
    assert_clean_failure(result, 2, "2 recurrent layers (bidi, backwards)", "--layer")


def test_an_exports_activations_are_read_from_its_serving_graph(tmp_path):
    """A Keras 3 export keeps no config: its loop bodies say the activations (relu converts and computes what
    serve(x) computed; hard_sigmoid is refused by its name); a stated one the graph contradicts is refused."""
    result = run_cli("convert", SAVED / "k3_export_activations", tmp_path / "gru.bin", "--layer", "hard_gru")
    assert_clean_failure(result, 2, "recurrent_activation='hard_sigmoid'", "computes sigmoid only")
    out = tmp_path / "relu.bin"
    result = run_cli("convert", SAVED / "k3_export_activations", out, "--layer", "bidi_relu", "--activation", "tanh")
    assert_clean_failure(result, 2, "activation tanh was stated, but the SavedModel's serving graph applies relu")
    assert not out.exists()
    with rnnconv.load(SAVED / "k3_export_activations", layer="bidi_relu") as (rnn,):
        assert rnn.spec.mode == "rnn_relu"
        assert any("activation=relu read from its serving graph's loop bodies" in note for note in rnn.notes)
    with rnnconv.load(SAVED / "k3_export", layer="lstm") as (exported,):  # the defaults, read alike: none stated
        assert any("recurrent_activation=sigmoid read from its serving graph" in note for note in exported.notes)


def test_a_graph_that_does_not_settle_them_still_asks(tmp_path):
    """A loop body whose activation is no op rnnconv knows (here a Sigmoid made a Tanh's unknown neighbour) settles
    nothing: the layers are refused naming --activation, as without a graph."""
    source = tmp_path / "export"
    shutil.copytree(SAVED / "k3_export", source)
    graph = source / "saved_model.pb"
    data = graph.read_bytes()
    assert data.count(b"\x12\x04Tanh") >= 2  # NodeDef.op = "Tanh", in the bodies and the traced call
    graph.write_bytes(data.replace(b"\x12\x04Tanh", b"\x12\x04Tanx"))
    result = run_cli("convert", source, tmp_path / "out.bin", "--layer", "lstm")
    assert_clean_failure(result, 2, "keeps no layer configs", "--activation X")


def test_a_loop_body_whose_inputs_run_in_a_cycle_settles_nothing(tmp_path):
    """A damaged loop body whose GRU bias is added to itself (found by the fuzz family savedmodel_serving: the walk to
    the product recursed without end): that body says nothing, so the GRU asks for its activations; the LSTM's body,
    untouched, still says its own."""
    source = tmp_path / "export"
    shutil.copytree(SAVED / "k3_export", source)
    graph = source / "saved_model.pb"
    data = graph.read_bytes()
    product, itself = b"while/gru_cell_1/MatMul:product:0", b"while/gru_cell_1/BiasAdd:output:0"  # of one length
    assert product in data
    graph.write_bytes(data.replace(product, itself))
    result = run_cli("convert", source, tmp_path / "gru.bin", "--layer", "gru")
    assert_clean_failure(result, 2, "keeps no layer configs", "--activation X")
    result = run_cli("convert", source, tmp_path / "lstm.bin", "--layer", "lstm")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_verify_runs_the_restored_layers_and_the_way_out_to_a_keras_file(tmp_path):
    blob = tmp_path / "enc.bin"
    rnnconv.convert(SAVED / "tfk_ckpt" / "ckpt-1", blob, layer="encoder", **STATED)
    report = rnnconv.verify(blob, backend="numpy")
    assert report.verdict == "match", report.summary
    assert report.source is not None and "layers built by rnnconv" in report.source.run
    # a Keras 2 SavedModel, which Keras 3 cannot load, written as a .keras that Keras 3 loads and verify runs
    result = run_cli("convert", SAVED / "tfk_bigru/", tmp_path / "bidi.keras", "--layer", "bidi")
    assert result.returncode == 0, result.stderr
    result = run_cli("verify", tmp_path / "bidi.keras")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout
    code = (
        "import sys, rnnconv\n"
        "rnnconv.convert(sys.argv[1], sys.argv[2], layer='encoder')\n"
        f"found = set({list(FRAMEWORKS)!r}) & set(sys.modules)\n"
        "assert not found, f'{found} imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code, SAVED / "tfk_lstm_state", tmp_path / "e.keras"], text=True)
    assert done.returncode == 0  # reading a SavedModel and writing a .keras import no framework


def _damaged_graph(folder):
    """The Keras 3 checkpoint with a name in its object graph cut short (the same bytes, a length byte changed), its
    crc32c and the index block's made right again: the damage reaches the graph's reader."""
    from tests.fuzz.mutators import reseal_object_graph

    shutil.copytree(SAVED / "k3_ckpt", folder)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert reseal_object_graph(files, lambda graph: graph[:1] + b"\xff" + graph[2:])  # the first node's length
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder / "ckpt"


@pytest.mark.parametrize(
    "damage, phrase",
    [
        ("graph", "its object graph (_CHECKPOINTABLE_OBJECT_GRAPH) is damaged"),
        ("metadata", "keras_metadata.pb is damaged"),
        ("variables", "is a SavedModel without variables"),
    ],
)
def test_damaged_files_give_one_sentence(damage, phrase, tmp_path):
    source = tmp_path / "saved"
    if damage == "graph":
        source = _damaged_graph(tmp_path / "ckpt")
    else:
        shutil.copytree(SAVED / "tfk_bigru", source)
        metadata = source / "keras_metadata.pb"
        if damage == "metadata":
            metadata.write_bytes(metadata.read_bytes()[:-9])
        else:
            shutil.rmtree(source / "variables")
    result = run_cli("inspect", source)
    assert_clean_failure(result, 2, phrase)


@pytest.mark.needs("tensorflow", "tf_keras")
def test_the_source_digest_covers_every_file_read(tmp_path):
    """A SavedModel's, a TF2 checkpoint's and a TF1 checkpoint's digest covers their data files (and the SavedModel's
    saved_model.pb and keras_metadata.pb, the TF1 checkpoint's .meta graph): a change to one alone
    is seen by verify and by verify-changed."""
    from rnnconv.core.contracts import Sidecar
    from rnnconv.verification.changed import made_from

    shutil.copytree(SAVED / "tfk_lstm_state", tmp_path / "saved")
    shutil.copytree(SAVED / "k3_ckpt", tmp_path / "ckpt")
    shutil.copytree(SAVED / "k3_export_activations", tmp_path / "export")
    for part in (FIXTURES / "tf1").glob("basic_lstm.ckpt.*"):
        shutil.copy(part, tmp_path / part.name)
    sources = {
        "saved": (tmp_path / "saved", {"layer": "encoder"}, "variables/variables.data-00000-of-00001"),
        "tf2": (tmp_path / "ckpt" / "ckpt", STATED, "ckpt/ckpt.data-00000-of-00001"),
        "tf1": (tmp_path / "basic_lstm.ckpt", {}, "basic_lstm.ckpt.data-00000-of-00001"),
        "metadata": (tmp_path / "saved", {"layer": "encoder"}, "saved/keras_metadata.pb"),
        "graph": (tmp_path / "export", {"layer": "bidi_relu"}, "export/saved_model.pb"),  # its activations' source
        "meta": (tmp_path / "basic_lstm.ckpt", {}, "basic_lstm.ckpt.meta"),
    }
    for name, (source, stated, part) in sources.items():
        blob = tmp_path / f"{name}.bin"
        rnnconv.convert(source, blob, **stated)
        changed = (tmp_path / "saved" / part) if name == "saved" else tmp_path / part
        recorded = Sidecar.model_validate_json((tmp_path / f"{name}.bin.json").read_text()).source
        assert not made_from(blob, [recorded], [tmp_path / "saved" / "fingerprint.none"])
        assert made_from(blob, [recorded], [changed]), name  # verify-changed verifies what was made from it
        assert not [w for w in rnnconv.verify(blob, backend="numpy").warnings if "changed since" in w]
        original = changed.read_bytes()
        changed.write_bytes(original + b"\x78\x00")  # a field no reader reads: only the digest tells
        report = rnnconv.verify(blob, backend="numpy")
        assert report.verdict == "match", report.summary
        assert [w for w in report.warnings if "or a file read with it" in w and "changed since" in w], name
        changed.write_bytes(original)
