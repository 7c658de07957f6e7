"""`rnnconv explain`: the pictures agree with real conversions, the text fits 80 columns, every recipe is right."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, assert_clean_failure, run_cli

from rnnconv.cli.explain import row_title
from rnnconv.table.apply import gate_loaders, recipe, stored_shapes
from rnnconv.table.rows import BIAS_SPLITS, TABLE

SEED_GRU = FIXTURES / "keras3" / "seed000_gru.h5"
PICTURE = ("explain", "--from", "keras", "--to", "cudnn", "--mode", "gru", "--input-size", "2", "--hidden-size", "3")
PLAIN = {"NO_COLOR": "1", "COLUMNS": "100"}


@pytest.fixture
def keras_gru(tmp_path):
    """Seed 000's Keras GRU file with every weight replaced by a distinct number, and its stored tensors."""
    path = tmp_path / "gru.h5"
    shutil.copy(SEED_GRU, path)
    stored, start = {}, 1.0
    with h5py.File(path, "r+") as f:
        cell = f["model_weights/gru/gru/gru_cell"]
        for name in cell:
            values = start + np.arange(cell[name].size, dtype=np.float32).reshape(cell[name].shape)
            cell[name][...] = values
            stored[name] = values
            start += cell[name].size
    return path, stored


@pytest.mark.slow
def test_the_picture_shows_where_a_real_conversion_puts_each_element(tmp_path, keras_gru):
    source, stored = keras_gru
    blob = tmp_path / "gru.bin"
    assert run_cli("keras-to-cudnn", source, "-o", blob).returncode == 0
    flat = np.fromfile(blob, dtype=np.float32)
    mapping = json.loads(run_cli(*PICTURE, "--json").stdout)
    assert sorted(t["name"] for t in mapping["source_tensors"]) == sorted(stored)
    placed = 0
    for tensor in mapping["target_tensors"]:
        for i, cell in enumerate(tensor["cells"]):
            ((element,),) = [cell["from"]]
            assert cell["factor"] == 1
            assert flat[tensor["offset"] + i] == stored[element["tensor"]][tuple(element["index"])]
            placed += 1
    assert placed == flat.size == sum(v.size for v in stored.values())
    # the text says the same: each weight-space line is an offset, maybe a block, then gate:element cells
    tags = {t["tag"]: t["name"] for t in mapping["source_tensors"]}
    text = run_cli(*PICTURE, env=PLAIN).stdout
    lines = [line.split() for line in text.split("cuDNN weight space")[1].splitlines()[1:] if line.strip()]
    checked = 0
    for words in lines:
        if not words[0].isdigit():
            break
        cells = [w for w in words[1:] if ":" in w]
        for k, cell in enumerate(cells):
            tag, index = re.fullmatch(r"\w:(\w+)\[([\d,]+)\]", cell).groups()
            value = stored[tags[tag]][tuple(int(i) for i in index.split(","))]
            assert flat[int(words[0]) + k] == value, (words, cell)
            checked += 1
    assert checked == flat.size


@pytest.mark.slow
def test_a_file_is_drawn_with_its_numbers(tmp_path, keras_gru):
    source, stored = keras_gru
    text = run_cli("explain", source, env=PLAIN).stdout
    assert "keras GRU (reset_after=True), as stored" in text and "cuDNN weight space" in text
    # seed 000: cuDNN's weight space starts with the reset gate's input weights, kernel column H
    first = text.split("cuDNN weight space")[1].splitlines()[1].split()
    assert first[:4] == ["0", "W_r", f"r:{stored['kernel'][0, 3]:.3f}", f"r:{stored['kernel'][1, 3]:.3f}"]
    assert_clean_failure(run_cli("explain", source, "--mode", "lstm"), 2, "a file says its own mode")


@pytest.mark.slow
def test_no_color_output_has_gate_letters_and_no_escapes():
    for env in (PLAIN, {**PLAIN, "FORCE_COLOR": "1"}):
        result = run_cli(*PICTURE, env=env)
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout
        assert "r:k[0,3]" in result.stdout and "z:rk[2,0]" in result.stdout and "h:b[1,8]" in result.stdout
    coloured = run_cli(*PICTURE, env={"FORCE_COLOR": "1", "COLUMNS": "200"}).stdout
    assert "\x1b[" in coloured and "r:k[0,3]" not in coloured and "k[0,3]" in coloured


@pytest.mark.slow
def test_svg_and_html_are_written_safely(tmp_path):
    svg, html = tmp_path / "gru.svg", tmp_path / "gru.html"
    result = run_cli(*PICTURE, "--svg", svg, "--html", html)
    assert result.returncode == 0, result.stderr
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and "k[0,3]" in svg.read_text().replace("&#160;", " ")
    assert "<html" in html.read_text().lower()
    before = svg.read_bytes()
    assert_clean_failure(run_cli(*PICTURE, "--svg", svg), 2, "already exists", "--force")
    assert svg.read_bytes() == before
    assert run_cli(*PICTURE, "--mode", "lstm", "--svg", svg, "--force").returncode == 0
    assert svg.read_bytes() != before


@pytest.mark.slow
def test_every_pair_and_mode_draws():
    for source, target, mode in (("onnx", "cudnn", "lstm"), ("torch", "keras", "lstm"), ("cudnn", "tf1", "gru")):
        result = run_cli("explain", "--from", source, "--to", target, "--mode", mode, env=PLAIN)
        assert result.returncode == 0, result.stderr
    joined = run_cli("explain", "--from", "torch", "--to", "keras", "--mode", "lstm", env=PLAIN).stdout
    assert "i:bih[0]+bhh[0]" in joined  # two biases joined into Keras' one
    halved = run_cli("explain", "--from", "keras", "--mode", "rnn_relu", "--bias-split", "half", env=PLAIN).stdout
    assert "h:b[0]*0.5" in halved
    assert_clean_failure(run_cli("explain", "--from", "keras", "--to", "tensorrt", "--mode", "rnn_tanh"), 2, "no layer")


@pytest.mark.slow
def test_the_picture_imports_no_framework():
    code = (
        "import sys; from typer.testing import CliRunner; from rnnconv.cli.commands import app; "
        "r = CliRunner().invoke(app, ['explain', '--from', 'onnx', '--to', 'torch', '--mode', 'gru']); "
        "print(r.exit_code, sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'tensorflow', 'onnx', 'keras'}))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split() == ["0", "[]"]


@pytest.mark.slow
def test_text_fits_80_columns_one_block_per_row():
    text = run_cli("explain", "-v", env={"COLUMNS": "200"}).stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    titles = [line for line in text.splitlines() if line and not line.startswith(" ")]
    assert [row_title(row) for row in TABLE] == titles[1:]


@pytest.mark.slow
def test_names_any_case_aliases_and_did_you_mean():
    assert run_cli("explain", "pytorch", "lstm").stdout == run_cli("explain", "torch", "LSTM").stdout
    gru = run_cli("explain", "GRU").stdout
    titles = [line for line in gru.splitlines() if line and not line.startswith(" ")][1:-1]
    assert titles == [row_title(r) for r in TABLE if r.source_class == "GRU"]
    assert run_cli("explain", "gru").stdout == gru
    assert_clean_failure(run_cli("explain", "kerass"), 2, "no format or layer class named 'kerass'", "'keras'")
    assert_clean_failure(run_cli("explain", "GRUcel"), 2, "did you mean 'GRUCell'")
    assert_clean_failure(run_cli("explain", "--from", "torch", "--to", "kears"), 2, "'keras'")
    assert_clean_failure(run_cli("explain", "torch", "SimpleRNN"), 2, "torch's classes are LSTM, GRU, RNN")
    assert_clean_failure(run_cli("explain", "--from", "GRU"), 2, "--from takes a format")


@pytest.mark.parametrize("split", BIAS_SPLITS)
def test_every_printed_recipe_gives_what_the_mechanics_give(split):
    """Evaluate each printed slice on random stored tensors, against gate_loaders, for every row."""
    text = run_cli("explain", "-v", "--bias-split", split).stdout
    rows = {row_title(row): row for row in TABLE}
    rng = np.random.default_rng(0)
    hidden, n_in, evaluated = 3, 5, 0
    row = None
    for line in text.splitlines():
        if line in rows:
            row = rows[line]
            proj = 2 if "projection" in row.tensors else 0
            shapes = stored_shapes(row, hidden, n_in, proj or hidden, proj)
            stored = {role: rng.normal(size=shape) for role, shape in shapes.items()}
            expected = gate_loaders(row, hidden, stored.__getitem__, True, split, proj)
            continue
        found = re.fullmatch(r" {4}(\w+) += (.+?)( {3}\(.*\))?", line)
        if not found:
            continue
        tensor, expr = found.group(1), found.group(2)
        names = sorted(row.tensors.items(), key=lambda item: -len(item[1]))
        for k, (_, name) in enumerate(names):  # a name inside a longer one (bias in bias_n) is replaced once
            expr = expr.replace(name, f"\0{k}\0")
        for k, (role, _) in enumerate(names):
            expr = expr.replace(f"\0{k}\0", f"S[{role!r}]")
        expr = re.sub(r"(\d)H", r"\1*H", expr)
        value = eval(expr, {"S": stored, "H": hidden, "I": n_in, "np": np})
        kind, _, gate = tensor.partition("_")
        want = expected[("P" if tensor == "Wproj" else kind, gate)]()
        np.testing.assert_array_equal(np.broadcast_to(value, want.shape), want, err_msg=f"{row_title(row)} {line}")
        evaluated += 1
    assert evaluated == sum(len(recipe(r, split)) for r in TABLE if not r.refusal)


# --- a file's layers as a user has them, and a terminal's width ----------------------------------------

MIXED = FIXTURES / "keras3" / "mixed.h5"
SEED_LSTM = FIXTURES / "keras3" / "seed000_lstm.h5"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LARGE = ("explain", "--from", "torch", "--to", "keras", "--mode", "lstm", "--input-size", "40", "--hidden-size", "30")


@pytest.fixture
def keras_bidirectional(tmp_path):
    """mixed.h5 with every weight of its Bidirectional(LSTM) a distinct number, the two directions apart."""
    path = tmp_path / "mixed.h5"
    shutil.copy(MIXED, path)
    stored, start = {}, 1.0
    with h5py.File(path, "r+") as f:
        layer = f["model_weights/bidi_lstm/bidi_lstm"]
        for direction, group in (("fwd", "forward_lstm/lstm_cell"), ("rev", "backward_lstm/lstm_cell")):
            for name, data in layer[group].items():
                values = start + np.arange(data.size, dtype=np.float32).reshape(data.shape)
                data[...] = values
                stored[(direction, name)] = values
                start += data.size
    return path, stored


def test_a_keras_bidirectional_layer_is_drawn_with_both_directions(tmp_path, keras_bidirectional):
    source, stored = keras_bidirectional
    blob = tmp_path / "bidi.bin"
    assert run_cli("convert", source, blob, "--layer", "bidi_lstm").returncode == 0
    flat = np.fromfile(blob, dtype=np.float32)
    result = run_cli("explain", source, "--layer", "bidi_lstm", "--json")
    assert result.returncode == 0, result.stderr
    mapping = json.loads(result.stdout)
    assert {(t["direction"], t["name"]) for t in mapping["source_tensors"]} == set(stored)
    placed = 0
    for tensor in mapping["target_tensors"]:
        for i, cell in enumerate(tensor["cells"]):
            parts = cell["from"] if cell else []
            held = sum(float(stored[(p["direction"], p["tensor"])][tuple(p["index"])]) for p in parts)
            assert all(part["direction"] == tensor["direction"] for part in parts)
            held *= cell["factor"] if cell else 0
            assert flat[tensor["offset"] + i] == held, (tensor["name"], tensor["direction"], i)
            placed += 1
    assert placed == flat.size  # every element of the weight space, both directions
    text = run_cli("explain", source, "--layer", "bidi_lstm", env=PLAIN).stdout
    assert "keras LSTM, forward direction, as stored" in text and "keras LSTM, reverse direction, as stored" in text
    for layer in ("bidi_gru", "rnn_lstmcell"):  # Bidirectional(GRU) and RNN(LSTMCell), as inspect lists them
        drawn = run_cli("explain", source, "--layer", layer, env=PLAIN)
        assert drawn.returncode == 0 and "cuDNN weight space" in drawn.stdout, drawn.stderr
    # a TF1 checkpoint named by its prefix, as every command takes it: a bidirectional GRU
    drawn = run_cli("explain", FIXTURES / "tf1" / "gru_bi.ckpt", env=PLAIN)
    assert drawn.returncode == 0, drawn.stderr
    assert "tf1 CudnnGRU, forward direction" in drawn.stdout and "tf1 CudnnGRU, reverse direction" in drawn.stdout


def test_a_file_with_several_rnns_asks_which_one_to_draw():
    result = run_cli("explain", MIXED)
    assert_clean_failure(result, 2, "10 RNNs", "gru_a", "bidi_lstm", "--layer")
    assert ".safetensors" not in result.stderr  # advice for conversions, not for a picture


def cells_of(text: str) -> list[str]:
    """The position cells of a picture (k[0,3], rk[2,0], b[1,8]), with or without their gate letters."""
    return re.findall(r"(?<![\w\[])(?:[a-z]:)?((?:k|rk|b)\[\d+,\d+\])", text)


@pytest.mark.slow
@pytest.mark.parametrize("columns", [60, 80, 120])
def test_the_picture_fits_the_terminal_and_never_splits_a_cell(columns, keras_bidirectional):
    source, _ = keras_bidirectional
    for env in ({"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}):
        env = {**env, "COLUMNS": str(columns)}
        picture = ANSI.sub("", run_cli(*PICTURE, env=env).stdout)
        numbers = ANSI.sub("", run_cli("explain", SEED_LSTM, env=env).stdout)
        bidirectional = ANSI.sub("", run_cli("explain", source, "--layer", "bidi_lstm", env=env).stdout)
        rows = run_cli("explain", "-v", env=env).stdout  # the table as text: 80 columns, or the terminal's if fewer
        large = ANSI.sub("", run_cli(*LARGE, env=env).stdout)  # tensors cut to 12 x 12, offsets of 4 digits
        assert "large tensors are cut" in " ".join(large.split())
        for text in (picture, numbers, bidirectional, rows, large):
            assert max(map(len, text.splitlines())) <= columns, text
        # every element of seed 000's GRU appears whole, once as stored and once where cuDNN has it
        found = cells_of(picture)
        assert len(found) == 2 * (2 * 9 + 3 * 9 + 2 * 9) and all(found.count(cell) == 2 for cell in found)
        # every number drawn whole: the LSTM's 2x12, 3x12 and 12 stored values, its 84 weight-space elements
        assert len(re.findall(r"(?<![\w.])-?\d+\.\d{3}(?![\d])", numbers)) == 24 + 36 + 12 + 84
        # both directions of the bidirectional LSTM (input 7, hidden 6): the first 12 columns of its kernels and
        # its bias as stored, every element of its weight space
        stored, weight_space = 7 * 12 + 6 * 12 + 24, 4 * 6 * (7 + 6 + 2)
        assert len(re.findall(r"(?<![\w.])-?\d+\.\d{3}(?![\d])", bidirectional)) == 2 * (stored + weight_space)
    # on a terminal of a normal width, the README's example has its two sides next to each other
    if columns >= 80:
        text = ANSI.sub("", run_cli(*PICTURE, env={"FORCE_COLOR": "1", "COLUMNS": str(columns)}).stdout)
        first = text.splitlines()[0]
        assert "keras GRU (reset_after=True), as stored" in first and "cuDNN weight space" in first, text


def test_svg_and_html_render_offline(tmp_path):
    svg, html = tmp_path / "gru.svg", tmp_path / "gru.html"
    assert run_cli(*PICTURE, "--svg", svg, "--html", html).returncode == 0
    for path in (svg, html):
        text = re.sub(r"<!--.*?-->", "", path.read_text(), flags=re.S)
        assert not re.findall(r"url\((?!#)", text) and "@import" not in text and "@font-face" not in text  # #: its own
        assert not re.findall(r"https?://(?!www\.w3\.org/2000/svg)", text), path
