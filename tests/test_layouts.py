"""The layout table, the weight-space layout and the element types, on their own."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.dtypes import decode, element_type, encode
from rnnconv.core.weightspace import lin_layer_tensors, regions, size_formula, weight_space_elements
from rnnconv.errors import BadInput
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.formats.cudnn.writer import write_bin, write_relayout
from rnnconv.table.apply import assemble_stored, find_row, gate_loaders, recipe, stored_shapes
from rnnconv.table.layouts import BIAS_SINGLE, MatrixLayout
from rnnconv.table.rows import TABLE, Row


@pytest.mark.parametrize(
    "row", [r for r in TABLE if r.adapter and not r.refusal], ids=lambda r: f"{r.format}-{r.source_class}"
)
def test_reading_and_writing_a_row_are_inverse(row):
    rng = np.random.default_rng(3)
    hidden, n_in = 3, 5
    shapes = stored_shapes(row, hidden, n_in, hidden)
    stored = {role: rng.normal(size=shape).astype(np.float32) for role, shape in shapes.items()}
    loaders = gate_loaders(row, hidden, stored.__getitem__, has_bias=True, bias_split="half")
    rebuilt = assemble_stored(row, hidden, n_in, hidden, lambda kind, gate: loaders[(kind, gate)]())
    for role in stored:
        np.testing.assert_allclose(rebuilt[role], stored[role], rtol=1e-6)


class OneTensorPerGate(MatrixLayout):
    """A layout the table has no row for yet: each gate's matrix its own (width, H) tensor, x @ kernel."""

    name = "per-gate"
    description = "one (in, H) tensor per gate"

    def shapes(self, role, order, hidden, width):
        return {f"{role}/{gate}": (width, hidden) for gate in order}

    def load(self, fetch, role, order, gate, hidden):
        return lambda: np.asarray(fetch(f"{role}/{gate}")).T

    def store(self, out, role, order, gate, hidden, block):
        out[f"{role}/{gate}"][...] = block.T

    def describe(self, names, role, order, gate):
        return f"{names[role].format(gate=gate)}.T"


def test_a_new_storage_layout_is_one_class():
    """What a new format with one summed bias and a tensor per gate adds to the table: a class and a row."""
    names = {"input_matrix": "Wx_{gate}", "recurrent_matrix": "Wh_{gate}", "bias": "b"}
    row = Row("new", "LSTM", "lstm", ("i", "f", "c", "o"), OneTensorPerGate(), BIAS_SINGLE, names, {"tanh": "lstm"}, {})
    rng = np.random.default_rng(4)
    hidden, n_in = 3, 5
    shapes = stored_shapes(row, hidden, n_in, hidden)
    assert shapes == {
        **{f"input_matrix/{g}": (n_in, hidden) for g in "ifco"},
        **{f"recurrent_matrix/{g}": (hidden, hidden) for g in "ifco"},
        "bias": (4 * hidden,),
    }
    stored = {role: rng.normal(size=shape) for role, shape in shapes.items()}
    loaders = gate_loaders(row, hidden, stored.__getitem__, has_bias=True, bias_split="input")
    np.testing.assert_array_equal(loaders[("W", "f")](), stored["input_matrix/f"].T)
    np.testing.assert_array_equal(loaders[("bW", "c")](), stored["bias"][2 * hidden : 3 * hidden])
    rebuilt = assemble_stored(row, hidden, n_in, hidden, lambda kind, gate: loaders[(kind, gate)](), dtype=np.float64)
    for role in stored:
        np.testing.assert_array_equal(rebuilt[role], stored[role])
    named = {
        names[role].format(gate=g): stored[f"{role}/{g}"]
        for role in ("input_matrix", "recurrent_matrix")
        for g in "ifco"
    }
    for tensor, expression in recipe(row, "input"):  # explain's recipe comes from the same class
        value = eval(re.sub(r"(\d)H", r"\1*H", expression), {**named, "b": stored["bias"], "H": hidden})
        kind, _, gate = tensor.partition("_")
        want = loaders[(kind, gate)]()
        np.testing.assert_array_equal(np.broadcast_to(value, want.shape), want, err_msg=tensor)


def test_keras_gru_row_picks_reset_after_variant():
    after, before = find_row("keras", "GRU", {"reset_after": True}), find_row("keras", "GRU", {"reset_after": False})
    assert (after.bias, after.reset_after) == ("stacked", True)  # (2, 3H): one bias each side, the reset after
    assert (before.bias, before.reset_after, before.refusal) == ("single", False, None)  # (3H,), the reset before


def test_layout_matches_jax_docstring_for_two_layer_bidirectional_lstm():
    """jax.experimental.rnn: (W_ih^0, W_hh^0, ..., W_hh^3, b_ih^0, b_hh^0, ..., b_hh^3), gates i, f, g, o."""
    spec = RNNSpec("lstm", input_size=5, hidden_size=7, num_layers=2, bidirectional=True)
    blocks = []
    for r in regions(spec):
        tag = (r.pseudo_layer, r.key.kind)
        if not blocks or blocks[-1][0] != tag:
            blocks.append([tag, 0, r.offset])
        blocks[-1][1] += r.size
    expected = [((p, k), 4 * 7 * n) for p, n_in in enumerate([5, 5, 14, 14]) for k, n in (("W", n_in), ("R", 7))]
    expected += [((p, k), 4 * 7) for p in range(4) for k in ("bW", "bR")]
    assert [(tag, size) for tag, size, _ in blocks] == expected
    gates = [r.key.gate for r in regions(spec) if r.pseudo_layer == 0 and r.key.kind == "W"]
    assert gates == ["i", "f", "c", "o"]


@pytest.mark.parametrize(
    "spec",
    [
        RNNSpec("gru", 3, 4),
        RNNSpec("rnn_relu", 2, 6, 3, True),
        RNNSpec("lstm", 5, 8, 2, True, 3),
        RNNSpec("lstm", 9, 4, 1, False, 2, "float16"),
    ],
)
def test_regions_tile_the_weight_space(spec):
    spans = [(r.offset, r.offset + r.size) for r in regions(spec)]
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] == weight_space_elements(spec)
    arithmetic = size_formula(spec).split("=")[0].replace("[", "(").replace("]", ")")
    assert eval(arithmetic) == weight_space_elements(spec)
    matrices = [r for r in regions(spec) if not r.is_bias]
    assert max(r.offset for r in matrices) < min(r.offset for r in regions(spec) if r.is_bias)


def test_projection_is_lin_layer_8_after_recurrent_matrices():
    spec = RNNSpec("lstm", 5, 8, 1, False, 3)
    kinds = [(r.key.kind, r.lin_layer_id) for r in regions(spec) if not r.is_bias]
    assert kinds[-1] == ("P", 8) and kinds[-2] == ("R", 7)
    assert spec.param_shape(ParamKey(0, 0, "R", "i")) == (8, 3)


LIN_LAYER_SPECS = [
    RNNSpec("lstm", 5, 8, 2, True, 3),
    RNNSpec("gru", 3, 4, 3, True),
    RNNSpec("rnn_relu", 2, 6, 2),
    RNNSpec("lstm", 4, 3),
]


def documented_lin_layer_id(spec: RNNSpec, kind: str, gate: str) -> int:
    """cudnnGetRNNWeightParams as cuDNN's API reference numbers it: the LSTM's ids 0-3 are the input gate, forget
    gate, new memory gate and output gate of the input side (W), 4-7 the same gates of the recurrent side (R), 8 the
    projection; the GRU's 0-2 reset, update and new gate with the input, 3-5 with the hidden state; a simple RNN's
    0 and 1. A bias has the id of its gate's matrix."""
    if kind == "P":
        return 8
    order = {"lstm": "ifco", "gru": "rzh", "rnn_relu": "h", "rnn_tanh": "h"}[spec.mode]
    return order.index(gate) + (len(order) if kind in ("R", "bR") else 0)


@pytest.mark.parametrize("spec", LIN_LAYER_SPECS, ids=lambda s: s.describe())
def test_lin_layer_ids_are_cudnns_both_ways(spec):
    for region in regions(spec):
        key = region.key
        assert region.lin_layer_id == documented_lin_layer_id(spec, key.kind, key.gate), key.label
        assert region.pseudo_layer == key.layer * spec.num_directions + key.direction, key.label
        matrix, bias = lin_layer_tensors(spec.gates, region.lin_layer_id)
        assert (key.kind, key.gate) == (bias if region.is_bias else matrix), key.label
        assert (matrix[0], bias and bias[0]) in (("W", "bW"), ("R", "bR"), ("P", None)), key.label
    with pytest.raises(ValueError, match="linLayerID 9"):
        lin_layer_tensors(spec.gates, 9)


@pytest.mark.parametrize("spec", LIN_LAYER_SPECS[:2], ids=lambda s: s.describe())
def test_the_sidecar_gives_every_tensor_cudnns_ids(spec, tmp_path):
    rng = np.random.default_rng(5)
    arrays = {key: rng.normal(size=spec.param_shape(key)).astype(np.float32) for key in spec.param_keys()}
    write_bin(CanonicalRNN.from_arrays("rnn", spec, arrays), tmp_path / "x.bin", "float32")
    entries = json.loads((tmp_path / "x.bin.json").read_text())["tensors"]
    assert len(entries) == len(arrays)
    flat = np.fromfile(tmp_path / "x.bin", dtype=np.float32)
    for entry in entries:
        key = ParamKey(entry["layer"], entry["direction"], entry["tensor"], entry["gate"])
        assert entry["lin_layer_id"] == documented_lin_layer_id(spec, key.kind, key.gate), entry["name"]
        assert entry["pseudo_layer"] == key.layer * spec.num_directions + key.direction, entry["name"]
        start = entry["offset_bytes"] // 4
        np.testing.assert_array_equal(flat[start : start + arrays[key].size], arrays[key].reshape(-1))


def test_a_sidecar_whose_ids_contradict_its_tensors_is_refused(tmp_path):
    spec = RNNSpec("gru", 3, 4, 1, True)
    rng = np.random.default_rng(6)
    arrays = {key: rng.normal(size=spec.param_shape(key)).astype(np.float32) for key in spec.param_keys()}
    write_bin(CanonicalRNN.from_arrays("rnn", spec, arrays), tmp_path / "x.bin", "float32")
    blob = open_bin(tmp_path / "x.bin")
    # the offsets a GPU reported, here cuDNN-flat's own, make a sidecar whose tensor table is read back
    placed = {region.key: region.offset * 4 for region in blob.places.values()}
    write_relayout(blob, placed, blob.words.nbytes, tmp_path / "r.bin", "9.0.0")
    side = tmp_path / "r.bin.json"
    doc = json.loads(side.read_text())
    entries = {entry["name"]: entry for entry in doc["tensors"]}
    assert open_bin(tmp_path / "r.bin").places[ParamKey(0, 1, "bW", "z")].lin_layer_id == 1
    a, b = entries["layer0.rev.bW_z"], entries["layer0.rev.bR_z"]
    a["lin_layer_id"], b["lin_layer_id"] = b["lin_layer_id"], a["lin_layer_id"]
    side.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"gives layer0.rev.bW_z pseudo-layer 1 and linLayerID 4, but cuDNN num"):
        open_bin(tmp_path / "r.bin")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"mode": "lstn"}, "unknown RNN mode"),
        ({"hidden_size": 0}, "hidden_size must be a positive"),
        ({"proj_size": 9}, "must be smaller"),
        ({"mode": "gru", "proj_size": 2}, "only for LSTMs"),
        ({"dtype": "int8"}, "unknown dtype"),
    ],
)
def test_spec_rejects_nonsense(kwargs, message):
    base = {"mode": "lstm", "input_size": 3, "hidden_size": 4}
    with pytest.raises(BadInput, match=message):
        RNNSpec(**{**base, **kwargs})


def test_bfloat16_rounds_to_nearest_even_like_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.normal(size=10000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 10000),
            np.array([0.0, -0.0, np.inf, -np.inf, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.4e38], dtype=np.float32),
        ]
    )
    etype = element_type("bfloat16")
    words = encode(values, etype)
    np.testing.assert_array_equal(words, values.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(decode(words, etype), values.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert np.isnan(decode(encode(np.array([np.nan], np.float32), etype), etype)).all()
