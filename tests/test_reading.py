"""The reader skeleton every format's to_canonical hands over to, and the settings the library and the CLI share."""

from __future__ import annotations

import numpy as np
import pytest
import typer
from conftest import FIXTURES
from test_layouts import OneTensorPerGate

import rnnconv
from rnnconv.cli.commands import app
from rnnconv.core.canonical import ParamKey, RNNSpec
from rnnconv.core.contracts import Provenance
from rnnconv.errors import BadInput, Unsupported
from rnnconv.formats.reading import ASSUMED, STATED, Found, StoredCell, read, settle, settle_nonlinearity
from rnnconv.formats.setting_fields import READ_FIELDS, TARGET_FIELDS, WRITE_FIELDS
from rnnconv.formats.settings import ReadOptions, TargetOptions, WriteOptions, conversion_names
from rnnconv.table.apply import find_row
from rnnconv.table.layouts import BIAS_SINGLE
from rnnconv.table.rows import Row

NAMES = {"input_matrix": "Wx_{gate}", "recurrent_matrix": "Wh_{gate}", "bias": "b"}
GATES = ("i", "f", "c", "o")


def new_format_row() -> Row:
    """A format the table has no row for: one summed bias, one (in, H) tensor per gate, activations unstored."""
    return Row(
        "new", "LSTM", "lstm", GATES, OneTensorPerGate(), BIAS_SINGLE, NAMES, {"tanh": "lstm"}, {"activation": "tanh"},
        unstored=("activation",),
    )  # fmt: skip


def stored_cells(num_layers: int, directions: int, n_in: int, hidden: int, seed: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    cells = {}
    for layer in range(num_layers):
        width = n_in if layer == 0 else directions * hidden
        for direction in range(directions):
            cell = {f"input_matrix/{g}": rng.normal(size=(width, hidden)).astype(np.float32) for g in GATES}
            cell |= {f"recurrent_matrix/{g}": rng.normal(size=(hidden, hidden)).astype(np.float32) for g in GATES}
            cell["bias"] = rng.normal(size=(4 * hidden,)).astype(np.float32)
            cells[(layer, direction)] = cell
    return cells


def found_of(row: Row, cells: dict, **fields) -> Found:
    """What the reader of the imagined format would find: its sizes, and each cell's tensors."""

    def cell(layer: int, direction: int, spec: RNNSpec) -> StoredCell:
        tensors = cells[(layer, direction)]
        return StoredCell(
            tensors.__getitem__,
            {role: t.shape for role, t in tensors.items()},
            {role: f"cell{layer}.{direction}/{role}" for role in tensors},
            f"layer {layer}",
        )

    settled = settle(row, {}, "rnn", fields.pop("stated", None))
    first = cells[(0, 0)]
    directions = 1 + max(d for _, d in cells)
    return Found(
        "rnn",
        row,
        settled,
        input_size=first["input_matrix/i"].shape[0],
        hidden=first["recurrent_matrix/i"].shape[0],
        dtype="float32",
        cell=cell,
        layer_class="NewLSTM",
        num_layers=1 + max(k for k, _ in cells),
        bidirectional=directions == 2,
        without_bias="bias=False",
        **fields,
    )


def test_a_new_format_reads_through_the_skeleton():
    """A new format's reader is its discovery: the skeleton checks, loads, notes and records the rest."""
    row, hidden = new_format_row(), 3
    cells = stored_cells(2, 2, 5, hidden)
    rnn = read(found_of(row, cells, bias_split="input"), Provenance(path="x.new"))
    assert (rnn.spec.mode, rnn.spec.num_layers, rnn.spec.bidirectional, rnn.spec.layer_input_size(1)) == (
        "lstm",
        2,
        True,
        2 * hidden,
    )
    for (layer, direction), tensors in cells.items():
        for k, gate in enumerate(GATES):
            np.testing.assert_array_equal(
                rnn.param(ParamKey(layer, direction, "W", gate)), tensors[f"input_matrix/{gate}"].T
            )
            np.testing.assert_array_equal(
                rnn.param(ParamKey(layer, direction, "R", gate)), tensors[f"recurrent_matrix/{gate}"].T
            )
            bias = tensors["bias"][k * hidden : (k + 1) * hidden]
            np.testing.assert_array_equal(rnn.param(ParamKey(layer, direction, "bW", gate)), bias)  # split "input"
            assert not rnn.param(ParamKey(layer, direction, "bR", gate)).any()
    info = rnn.provenance()
    assert (info.layer, info.layer_class, info.bias_split, info.assumptions) == (
        "rnn",
        "NewLSTM",
        "input",
        ["rnn: activation=tanh"],
    )


def test_the_skeleton_names_the_tensor_whose_shape_is_wrong_in_any_cell():
    row = new_format_row()
    cells = stored_cells(2, 1, 5, 3)
    cells[(1, 0)]["recurrent_matrix/c"] = np.zeros((3, 4), np.float32)
    with pytest.raises(BadInput, match=r"layer 1: tensor 'cell1.0/recurrent_matrix/c' has shape \(3, 4\), but a LSTM"):
        read(found_of(row, cells), Provenance())


def test_without_bias_every_slot_is_zero_and_the_note_says_why_in_the_formats_words():
    row = new_format_row()
    cells = stored_cells(1, 1, 5, 3)
    for tensors in cells.values():
        del tensors["bias"]
    rnn = read(found_of(row, cells, has_bias=False, later_notes=["rnn: after"]), Provenance())
    assert rnn.notes == ["rnn: bias=False, so every bias slot is zero", "rnn: after"]
    assert not rnn.param(ParamKey(0, 0, "bR", "f")).any()
    assert rnn.provenance().bias_split is None


def test_what_a_file_does_not_store_is_stated_assumed_or_refused_in_one_place():
    row = new_format_row()
    stated = settle(row, {}, "rnn", {"activation": "tanh"})
    assert (stated.how, stated.assumptions, stated.mode) == ({"activation": STATED}, [], "lstm")
    assumed = settle(row, {}, "rnn", None, labels={"activation": "nonlinearity"}, assumed=["rnn: earlier=1"])
    assert (assumed.how, assumed.assumptions) == ({"activation": ASSUMED}, ["rnn: earlier=1", "rnn: nonlinearity=tanh"])
    with pytest.raises(Unsupported, match=r"^the default is wrong here$"):
        settle(row, {}, "rnn", None, refusals={"activation": "the default is wrong here"})
    with pytest.raises(Unsupported, match=r"can only compute tanh here; Keras 1\.0 said so$"):
        settle(row, {}, "rnn", {"activation": "relu"}, context=["Keras 1.0 said so"])
    assert settle(row, {}, "rnn", None, unstored=()).how == {}  # a file that stores them: nothing to settle


def test_a_nonlinearity_is_checked_before_it_is_settled():
    rnn_row, lstm_row = find_row("torch", "RNN"), find_row("torch", "LSTM")
    assert settle_nonlinearity(rnn_row, "relu", "r", "never").mode == "rnn_relu"
    assert settle_nonlinearity(rnn_row, None, "r", "never").assumptions == ["r: nonlinearity=tanh"]
    with pytest.raises(BadInput, match="unknown nonlinearity 'gelu'"):
        settle_nonlinearity(rnn_row, "gelu", "r", "never")
    with pytest.raises(BadInput, match=r"^an LSTM has none$"):
        settle_nonlinearity(lstm_row, "relu", "r", "an LSTM has none")


# --- the settings: declared once, taken by the library and offered by the command line ------------------------

CLI_ONLY = {"sources", "output", "jobs", "json", "quiet", "verbose", "no_hash", "prefix"}
RAW_FLAGS = {"mode", "input_size", "hidden_size", "num_layers", "bidirectional", "proj_size"}


def test_every_option_of_convert_is_a_field_the_library_takes_with_the_same_help():
    command = typer.main.get_command(app)
    fields = {**ReadOptions.model_fields, **WriteOptions.model_fields, **TargetOptions.model_fields}
    types = {**ReadOptions.field_types(), **WriteOptions.field_types(), **TargetOptions.field_types()}
    declared = {**READ_FIELDS, **WRITE_FIELDS, **TARGET_FIELDS}
    offered = [p for p in command.commands["convert"].params if p.name not in CLI_ONLY | RAW_FLAGS]
    assert {p.name for p in offered} == set(declared)
    for param in offered:
        assert param.name in conversion_names()
        assert param.help == fields[param.name].description == declared[param.name].help, param.name
        # the plain declaration the command line reads is the library's field: its type and its default
        assert types[param.name] == declared[param.name].annotation, param.name
        assert fields[param.name].default == declared[param.name].default, param.name


def test_the_library_refuses_what_the_command_line_refuses(tmp_path):
    source = FIXTURES / "torch" / "rnn_tanh.pt"
    with pytest.raises(BadInput, match=r"^--into writes one patched model: give one source$"):
        rnnconv.convert_many([source, source], tmp_path / "out/", into=source)
    with pytest.raises(BadInput, match=r"^--plot draws one RNN's errors: with --all, leave it out"):
        rnnconv.verify_all(tmp_path / "x.safetensors", plot=tmp_path / "p.svg")
    assert not list(tmp_path.iterdir())


def test_a_keyword_no_setting_has_is_a_type_error_and_a_wrong_value_one_sentence(tmp_path):
    source = FIXTURES / "torch" / "rnn_tanh.pt"
    with pytest.raises(TypeError, match=r"convert\(\) got an unexpected keyword argument 'lyer'"):
        rnnconv.convert(source, tmp_path / "x.bin", lyer="rnn")
    with pytest.raises(TypeError, match=r"convert_many\(\) got an unexpected keyword argument 'lyer'"):
        rnnconv.convert_many([source], tmp_path, lyer="rnn")
    with pytest.raises(BadInput, match=r"^load: layer: Input should be a valid string$"):
        rnnconv.load(source, layer=3)
    assert not list(tmp_path.iterdir())
