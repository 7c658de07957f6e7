"""Hostile files for the formats added after the first fuzzing round (OpenVINO IR, TFLite, Flax linen, flax.nnx,
Equinox, MLX, ncnn, ONNX's unrolled RNNs): each is one sentence and exit 2 or 3, never an internal error, a
recursion, a time or a message that grows faster than the file.

The commands run in-process (`cli`), as the fuzz harness's worker runs them; the runtimes hidden behind a module
that fails to import run in a fresh interpreter too, as a user's would.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import struct
import sys
import zipfile
from pathlib import Path

import msgpack
import numpy as np
import pytest
from conftest import FIXTURES, fresh_cli, run_cli

import rnnconv
from rnnconv.errors import MESSAGE_LIMIT

# The files rnnconv writes for each runtime that runs them, and the modules that runtime imports.
RUNTIMES = {
    "tflite": (".tflite", ("ai_edge_litert",), "tflite"),
    "openvino": (".xml", ("openvino",), "openvino"),
    "flax": (".msgpack", ("flax",), "flax"),
    "flax-nnx": (".nnx.msgpack", ("jax", "flax"), "flax"),
    "equinox": (".eqx", ("equinox",), "equinox"),
    "mlx": (".mlx.safetensors", ("mlx",), "mlx"),
    "ncnn": (".param", ("ncnn",), "ncnn"),
}
PIP_NAMES = {"ai_edge_litert": "ai-edge-litert", "mlx": "mlx"}


def cli(*args: object) -> tuple[int, str, str]:
    """rnnconv's command line in this process: its exit code, stdout and stderr."""
    from rnnconv.cli.commands import app

    out, err = io.StringIO(), io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            app([str(a) for a in args], prog_name="rnnconv", standalone_mode=True)
        except SystemExit as exc:
            code = exc.code or 0
    return int(code) if isinstance(code, int) else 1, out.getvalue(), err.getvalue()


def one_sentence(result: tuple[int, str, str], expected: int, *phrases: str) -> None:
    """A failure (`cli`'s exit code, stdout, stderr) told in one line of at most MESSAGE_LIMIT characters (after its
    label), with the documented code."""
    code, _, err = result
    assert code == expected, (code, err[:3000])
    assert "Traceback" not in err and "internal error" not in err, err[:3000]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= MESSAGE_LIMIT + len("error: "), (len(lines), len(err), err[:3000])
    for phrase in phrases:
        assert phrase in err, (phrase, err[:3000])


@pytest.fixture(scope="module")
def lstm(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    torch.manual_seed(35)
    path = tmp_path_factory.mktemp("source") / "lstm.pt"
    torch.save(torch.nn.LSTM(5, 7).state_dict(), path)
    return path


@pytest.fixture(scope="module")
def written(lstm, tmp_path_factory) -> dict[str, Path]:
    """The LSTM written in each format a runtime runs (each in a folder of its own: .xml and .param keep an X.bin)."""
    files = {}
    for target, (suffix, _, _) in RUNTIMES.items():
        path = tmp_path_factory.mktemp(target) / f"lstm{suffix}"
        rnnconv.convert(lstm, path, to=target)
        files[target] = path
    return files


# --- 1. a runtime that is not installed: exit 3 naming its extra, not an internal error --------------------------


@pytest.mark.parametrize("target", sorted(RUNTIMES))
def test_verify_without_the_runtime_is_exit_3_naming_the_extra(target, written, monkeypatch):
    """The runtime as an uninstalled one looks: no module to import and no package metadata. Verify collected the
    runtime's version by importing it, unguarded: an internal error (exit 4) for each of these formats."""
    _, modules, extra = RUNTIMES[target]
    for name in list(sys.modules):
        if name.partition(".")[0] in modules:
            monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)
    real = importlib.metadata.version
    hidden = {PIP_NAMES.get(m, m) for m in modules} | set(modules)

    def version(name: str) -> str:
        if name in hidden:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    one_sentence(cli("verify", written[target]), 3, f"pip install 'rnnconv[{extra}]'", "not installed")


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(RUNTIMES))
def test_verify_with_the_runtime_shadowed_is_exit_3(target, written, tmp_path):
    """A package of the runtime's name that fails to import, first on the path (a user's own folder, a broken
    install), in a fresh interpreter."""
    _, modules, extra = RUNTIMES[target]
    for module in modules:
        shadow = tmp_path / "shadow" / module
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text(f"raise ImportError('No module named {module!r} (shadowed)')\n")
    result = run_cli("verify", written[target], env={"PYTHONPATH": f"{tmp_path / 'shadow'}:{Path.cwd()}"})
    one_sentence((result.returncode, result.stdout, result.stderr), 3, f"pip install 'rnnconv[{extra}]'")


# --- 2. msgpack: ext values nested in ext values -------------------------------------------------------------------


def _b32(data: bytes) -> bytes:
    return b"\xc6" + struct.pack(">I", len(data)) + data


def _ext(payload: bytes) -> bytes:
    return b"\xc9" + struct.pack(">I", len(payload)) + b"\x01" + payload


def nested_array(depth: int) -> bytes:
    """An array value (extension type 1) whose bytes are another array value, `depth` times (the issue's file)."""
    value = _ext(b"\x93\x92\x1c\x05\xa7float32" + _b32(b"\0" * 560))
    for _ in range(depth):
        value = _ext(b"\x93\x91\x01\xa7float32" + value)
    return value


@pytest.mark.parametrize("kind", ["flax", "flax-nnx"])
def test_array_values_nested_in_array_values_are_refused(kind, tmp_path):
    """A RecursionError (exit 4) before: each nested array's payload was decoded afresh, its depth starting again."""
    value = nested_array(1000)
    if kind == "flax":
        path, tree = tmp_path / "deep.msgpack", b"\x81\xa6params\x81\xa4cell\x81\xa2hf\x81\xa6kernel" + value
    else:
        path, tree = tmp_path / "deep.nnx.msgpack", b"\x81\xa4cell\x81\xa2hf\x81\xa6kernel" + value
    path.write_bytes(tree)
    for command in (["inspect", path], ["convert", path, tmp_path / "out.bin"]):
        one_sentence(cli(*command), 2, "nests a msgpack extension")
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def nested_lists(depth: int) -> list:
    tree: list = [0]
    for _ in range(depth - 1):
        tree = [tree]
    return tree


@pytest.mark.parametrize(
    "tree, phrase",
    [
        ({"params": {"a": 1, "b": 2}}, None),  # the duplicate put in below
        ({"params": nested_lists(65)}, "nests more than 64 levels"),
        ({"params": msgpack.Timestamp(1)}, "Timestamp"),
        ({"params": msgpack.ExtType(7, b"")}, "extension of type 7"),
        ({"params": {True: 1}}, "map key of type bool"),
    ],
    ids=["duplicate key", "65 levels", "timestamp", "other extension", "bool key"],
)
def test_msgpack_trees_flax_never_writes_are_refused(tree, phrase, tmp_path):
    data = msgpack.packb(tree)
    if phrase is None:
        data = data.replace(b"\xa1b", b"\xa1a")
        phrase = "repeats the key 'a' in one map"
    path = tmp_path / "odd.msgpack"
    path.write_bytes(data)
    one_sentence(cli("convert", path, tmp_path / "out.bin"), 2, phrase)


# --- 3. an .eqx leaf of a structured dtype ---------------------------------------------------------------------


def test_an_eqx_leaf_with_a_structured_descr_is_refused(lstm, tmp_path):
    """`'descr': [('a', '<f4')]` in a header of the same length: TypeError: unhashable type: 'list' (exit 4)."""
    good = tmp_path / "good.eqx"
    rnnconv.convert(lstm, good)
    data = good.read_bytes()
    length = int.from_bytes(data[8:10], "little")
    header = data[10 : 10 + length].decode("latin1").replace("'descr': '<f4'", "'descr': [('a', '<f4')]")
    header = header.rstrip()[: length - 1].ljust(length - 1) + "\n"
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(data[:10] + header.encode("latin1") + data[10 + length :])
    one_sentence(cli("convert", bad, tmp_path / "out.pt"), 2, "leaf 0 is of type")
    assert not (tmp_path / "out.pt").exists()


def test_a_eqx_header_numpy_cannot_read_is_refused(lstm, tmp_path):
    good = tmp_path / "good.eqx"
    rnnconv.convert(lstm, good)
    data = bytearray(good.read_bytes())
    data[10:20] = b"{'descr':X"
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(bytes(data))
    one_sentence(cli("inspect", bad), 2, "leaf 0 is not a .npy numpy reads")


# --- 4. OpenVINO XML: an encoding expat cannot read, a DTD in any encoding -----------------------------------------


def _ir_body(written: dict[str, Path]) -> tuple[str, bytes]:
    text = written["openvino"].read_text(encoding="utf-8")
    return text.split("?>", 1)[1] if text.startswith("<?xml") else text, written["openvino"].with_suffix(
        ".bin"
    ).read_bytes()


def _ir(tmp_path: Path, name: str, data: bytes, weights: bytes) -> Path:
    path = tmp_path / f"{name}.xml"
    path.write_bytes(data)
    path.with_suffix(".bin").write_bytes(weights)
    return path


def test_an_ir_declaring_utf7_is_refused(written, tmp_path):
    """ValueError: multi-byte encodings are not supported (exit 4) before."""
    body, weights = _ir_body(written)
    path = _ir(tmp_path, "u7", ('<?xml version="1.0" encoding="UTF-7"?>' + body).encode("ascii"), weights)
    one_sentence(cli("openvino-to-cudnn", path, "-o", tmp_path / "out.bin"), 2, "declares an encoding")
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16be", "utf-32"])
def test_a_dtd_is_refused_whatever_the_encoding(encoding, written, tmp_path):
    """A UTF-16 IR with a DOCTYPE and an entity passed the byte check for "<!DOCTYPE" and its entity was expanded
    (the IR converted, its op named by the entity); a UTF-32 one is no XML expat reads."""
    body, weights = _ir_body(written)
    body = body.replace('name="layer0/LSTMSequence"', 'name="&op;"', 1)
    document = f'<?xml version="1.0" encoding="{encoding.upper()}"?><!DOCTYPE net [<!ENTITY op "entity">]>{body}'
    data = document.encode("utf-16" if encoding == "utf-16" else encoding)
    path = _ir(tmp_path, "dtd", data, weights)
    for command in (["openvino-to-cudnn", path, "-o", tmp_path / "out.bin"], ["inspect", path]):
        result = cli(*command)
        one_sentence(result, 2)
        assert "entity" not in result[1]
    assert not (tmp_path / "out.bin").exists()
    if encoding.startswith("utf-16"):
        assert "declares a DOCTYPE" in cli("inspect", path)[2]


def test_an_ir_in_utf16_without_a_dtd_still_converts(written, tmp_path):
    body, weights = _ir_body(written)
    path = _ir(tmp_path, "u16", ('<?xml version="1.0" encoding="UTF-16"?>' + body).encode("utf-16"), weights)
    code, _, err = cli("openvino-to-cudnn", path, "-o", tmp_path / "out.bin")
    assert code == 0, err


# --- 5. a 10 MB name: inspect and every message linear in the file, names cut -------------------------------------


def test_a_10mb_ncnn_layer_name_is_shown_cut(written, tmp_path):
    """Inspect printed the whole name (in the table, the notes and the reasons): 10 MB to a terminal."""
    param = written["ncnn"].read_text().splitlines()
    lines = [" ".join([p[0], "n" * 10_000_000, *p[2:]]) if (p := line.split())[0] == "LSTM" else line for line in param]
    path = tmp_path / "long.param"
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".bin").write_bytes(written["ncnn"].with_suffix(".bin").read_bytes())
    code, out, err = cli("inspect", path)
    assert code == 0, err[:2000]
    assert "(10,000,000 characters)" in out and len(out) + len(err) < 5000
    one_sentence(cli("convert", path, tmp_path / "out.bin", "--layer", "x" * 10_000_000), 2, "(10,000,000 characters)")


# --- 6. messages that never end ----------------------------------------------------------------------------------


def _mlx_with(tmp_path: Path, extra: dict[str, np.ndarray]) -> Path:
    save_file = pytest.importorskip("safetensors.numpy").save_file

    tensors = {"Wx": np.zeros((16, 3), np.float32), "Wh": np.zeros((16, 4), np.float32)}
    path = tmp_path / "odd.safetensors"
    save_file({**tensors, "bias": np.zeros(16, np.float32), **extra}, str(path))
    return path


def test_100k_tensors_beside_a_module_are_counted(tmp_path):
    """788,943 characters naming every one."""
    path = _mlx_with(tmp_path, {f"t{i}": np.zeros(1, np.float32) for i in range(100_000)})
    one_sentence(cli("convert", path, tmp_path / "out.bin"), 2, "t0, t1, t10, t100, t1000 and 99,995 more")


def test_a_50mb_tensor_name_is_cut(tmp_path):
    """The name echoed whole: 52 MB of message."""
    path = _mlx_with(tmp_path, {"k" * 50_000_000: np.zeros(1, np.float32)})
    one_sentence(cli("convert", path, tmp_path / "out.bin"), 2, "(50,000,000 characters)")


def unrolled_rnn(steps: int, first: int) -> bytes:
    """An RNN unrolled into per-step operations as torch.onnx.export(dynamo=True) writes nn.RNN, its steps reading
    P at times first, first + 1, ..."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shapes = {"W_ihT": (2, 3), "b_ih": (3,), "W_hhT": (3, 3), "b_hh": (3,)}
    initializers = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in shapes.items()]
    nodes = [helper.make_node("MatMul", ["x", "W_ihT"], ["xw"]), helper.make_node("Add", ["xw", "b_ih"], ["P"])]
    h = "h0"
    for t in range(first, first + steps):
        initializers.append(numpy_helper.from_array(np.array(t, np.int64), f"i{t}"))
        nodes += [
            helper.make_node("Gather", ["P", f"i{t}"], [f"s{t}"], axis=0),
            helper.make_node("MatMul", [h, "W_hhT"], [f"m{t}"]),
            helper.make_node("Add", [f"m{t}", "b_hh"], [f"r{t}"]),
            helper.make_node("Add", [f"r{t}", f"s{t}"], [f"a{t}"]),
            helper.make_node("Tanh", [f"a{t}"], [f"h{t + 1}"]),
        ]
        h = f"h{t + 1}"
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, 2]),
        helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 3]),
    ]
    outputs = [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, 3])]
    graph = helper.make_graph(nodes, "unrolled", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_20k_step_unrolled_rnn_is_one_sentence(tmp_path):
    """129,033 characters listing every step's time."""
    path = tmp_path / "unrolled.onnx"
    path.write_bytes(unrolled_rnn(20_000, first=1))
    one_sentence(cli("convert", path, tmp_path / "out.bin"), 2, "at times 1, 2, 3, 4, 5 and 19,995 more")


def test_an_activations_list_of_10k_entries_is_counted(tmp_path):
    """The list echoed whole: 80 KB."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper

    path = tmp_path / "acts.onnx"
    model = onnx.load(str(FIXTURES / "onnx" / "rnn_relu_torchscript.onnx"))
    node = next(n for n in model.graph.node if n.op_type == "RNN")
    kept = [a for a in node.attribute if a.name != "activations"]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("activations", ["Tanh", "Relu"] * 5_000)])
    onnx.save(model, str(path))
    one_sentence(
        cli("convert", path, tmp_path / "out.bin", "--layer", "/RNN"), 2, "Tanh, Relu, Tanh, Relu, Tanh and 9,995 more"
    )


def test_an_ir_activations_attribute_of_10k_entries_is_counted(written, tmp_path):
    """activations="..." echoed whole: 80 KB."""
    body, weights = _ir_body(written)
    body = body.replace('activations="sigmoid, tanh, tanh"', f'activations="{", ".join(["tanh"] * 10_000)}"', 1)
    path = _ir(tmp_path, "acts", body.encode(), weights)
    one_sentence(cli("convert", path, tmp_path / "out.bin"), 2, "tanh, tanh, tanh, tanh, tanh and 9,995 more")


def test_every_message_is_held_to_the_limit():
    """The last line of defence, wherever a message is built: a long word cut, a long list counted, the whole cut."""
    from rnnconv.errors import BadInput, sentence

    assert len(str(BadInput("x " * 5_000))) <= MESSAGE_LIMIT
    assert str(BadInput("holds (" + ", ".join(f"n{i}" for i in range(1_000)) + ")")) == (
        "holds (n0, n1, n2, n3, n4 and 995 more)"
    )
    assert sentence("a " + "w" * 1_000) == "a " + "w" * 100 + "... (1,000 characters)"
    text = "word " * 1_000
    cut = sentence(text)
    assert len(cut) <= MESSAGE_LIMIT and cut.endswith("more characters)") and " wor " not in cut


# --- found by the fuzz families of these formats (tests/fuzz) ------------------------------------------------------


def test_an_eqx_leaf_of_a_npy_version_numpy_never_writes_is_refused(lstm, tmp_path):
    """A leaf of format version 0.0 (a 4-byte header length, as 2.0 has): numpy's header reader took it and the
    conversion went on, while np.load refuses it, so `verify` of the file met Equinox's TreePathError (exit 4)."""
    good = tmp_path / "good.eqx"
    rnnconv.convert(lstm, good)
    data = good.read_bytes()
    length = int.from_bytes(data[8:10], "little")
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(data[:6] + b"\0\0" + struct.pack("<I", length) + data[10:])
    for command in (["inspect", bad], ["convert", bad, tmp_path / "out.pt"]):
        one_sentence(cli(*command), 2, "leaf 0 is a .npy of format version 0.0")
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize(
    "old, new, reason",
    [
        ("<dim>-1</dim>", "<dim>18446744073709551616</dim>", "dimension (18446744073709551616)"),
        ('offset="0"', 'offset="1.5"', 'has attribute "offset" = "1.5" which is not an unsigned 64 bit integer'),
    ],
    ids=["a port's dim", "a Const's offset"],
)
def test_openvino_refusing_an_ir_is_told_with_its_reason(old, new, reason, written, tmp_path):
    """Where rnnconv reads no more than the sequence ops, OpenVINO may refuse what it does not read: its message
    starts with the places in its sources it passed through, and the sentence was only that (`OpenVINO cannot run
    x.xml: Exception from src/inference/src/cpp/core.cpp:84:`), saying nothing."""
    body, weights = _ir_body(written)
    path = _ir(tmp_path, "odd", body.replace(old, new, 1).encode(), weights)
    result = cli("verify", path)  # against the source its record names
    one_sentence(result, 2, "OpenVINO cannot run", reason)
    assert "Exception from" not in result[2] and "failed at" not in result[2], result[2]


def test_an_eqx_header_that_does_not_tokenize_is_refused(lstm, tmp_path):
    """`{...}}`: numpy tokenizes a header before it parses it, and tokenize's TokenError was no error rnnconv expected
    (exit 4)."""
    good = tmp_path / "good.eqx"
    rnnconv.convert(lstm, good)
    data = bytearray(good.read_bytes())
    length = int.from_bytes(data[8:10], "little")
    end = data.rindex(b"}", 10, 10 + length)
    data[end + 1] = ord("}")  # the padding's first space
    bad = tmp_path / "bad.eqx"
    bad.write_bytes(bytes(data))
    one_sentence(cli("inspect", bad), 2, "leaf 0 is not a .npy numpy reads")


@pytest.mark.needs("mlx.core")
def test_a_stored_npz_member_that_does_not_match_its_crc_is_refused(tmp_path):
    """MLX's .npz members are read in place, and no one checked their CRC-32: damaged weights converted (exit 0), and
    MLX's own load, meeting the CRC in verify --against, raised BadZipFile (exit 4)."""
    rng = np.random.default_rng(35)
    arrays = {"Wx": rng.normal(size=(16, 3)), "Wh": rng.normal(size=(16, 4)), "bias": rng.normal(size=16)}
    good = tmp_path / "good.npz"
    np.savez(good, **{name: value.astype(np.float32) for name, value in arrays.items()})
    blob = tmp_path / "good.bin"
    rnnconv.convert(good, blob)
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as archive:
        info = archive.getinfo("bias.npy")
    name_and_extra = int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little") + int.from_bytes(
        data[info.header_offset + 28 : info.header_offset + 30], "little"
    )
    data[info.header_offset + 30 + name_and_extra + 128 + 5] ^= 0x40  # a bit of the first value, past the header
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    one_sentence(cli("convert", bad, tmp_path / "out.safetensors"), 2, "bias.npy does not match its CRC-32")
    assert not (tmp_path / "out.safetensors").exists()
    one_sentence(cli("verify", blob, "--against", bad, "--backend", "numpy"), 2, "Bad CRC-32 for file 'bias.npy'")


def test_a_name_no_line_shows_is_listed_as_its_repr(written, tmp_path):
    """A sequence op named by a tab: `... it holds: ` and the tab, a sentence that names nothing (a newline in a name
    would have broken it over two lines)."""
    body, weights = _ir_body(written)
    path = _ir(tmp_path, "tab", body.replace('name="layer0/LSTMSequence"', 'name="&#9;"', 1).encode(), weights)
    one_sentence(cli("convert", path, tmp_path / "out.bin", "--layer", "lstm"), 2, "it holds: '\\t'")


def test_a_graph_of_many_rnns_names_a_few_and_counts_the_rest(tmp_path):
    """The graph layer's sentence for a file of several RNNs, and inspect's note for a chain, list a few names."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    nodes, initializers, outputs = [], [], []
    for i in range(12):
        for name, shape in ((f"W{i}", (1, 8, 3)), (f"R{i}", (1, 8, 2))):
            initializers.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        nodes.append(helper.make_node("LSTM", ["x", f"W{i}", f"R{i}"], [f"y{i}"], name=f"lstm_{i}", hidden_size=2))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 3])
    graph = helper.make_graph(nodes, "many", [x], outputs, initializers)
    path = tmp_path / "many.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]).SerializeToString())
    one_sentence(cli("convert", path, tmp_path / "out.bin"), 2, "holds 12 RNNs (", " and 7 more)")


def test_an_ir_whose_glue_reshapes_y_wrongly_is_refused_before_openvino_runs_it(tmp_path):
    """The fuzz found it: rnnconv's IR of a bidirectional GRU with its merge_directions Const pointed at other bytes
    ([0, 1, 0]); OpenVINO's CPU plugin corrupted its heap running it and the process died (exit 134 or 139), verify
    said nothing."""
    pytest.importorskip("openvino")
    written = tmp_path / "gru.xml"
    rnnconv.convert(FIXTURES / "torch" / "gru_bf16.pt", written, to="openvino", allow_lossy=True)  # sums rounded
    body = written.read_text(encoding="utf-8")
    data = body.index("offset=", body.index('name="merge_directions"'))
    written.write_text(body[:data] + 'offset="0"' + body[body.index(" ", data) :], encoding="utf-8")
    result = fresh_cli("verify", written)  # a fresh interpreter: the crash would end this one
    one_sentence((result.returncode, result.stdout, result.stderr), 2, "OpenVINO cannot run", "output y would have")


def test_a_probe_of_a_zip_version_zipfile_does_not_read_is_refused(tmp_path):
    """A probe whose central directory asks for zip version 19.1: zipfile's NotImplementedError was no error identify
    expected (exit 4)."""
    identify = FIXTURES / "identify"
    data = bytearray((identify / "jax_lstm_probe.npz").read_bytes())
    central = data.index(b"PK\x01\x02")
    data[central + 6] = 191  # version needed to extract
    probe = tmp_path / "probe.npz"
    probe.write_bytes(bytes(data))
    flags = ["--mode", "lstm", "--input-size", 5, "--hidden-size", 7, "--num-layers", 2, "--bidirectional"]
    result = cli("identify", identify / "jax_lstm.bin", *flags, "--probe", probe, "-o", tmp_path / "out.pt")
    one_sentence(result, 2, "is not an .npz file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.npz"]


REGRESSIONS = Path(__file__).parent / "fuzz" / "regressions"


@pytest.mark.needs("onnx")
def test_an_onnx_constant_whose_value_attribute_is_no_tensor_is_not_folded():
    """A Constant whose attribute named value is of another type (a list of floats) was taken for a tensor:
    AttributeError (exit 4). Now that chain is not folded, and the file is listed with what does not convert."""
    code, out, err = cli("inspect", REGRESSIONS / "onnx_constant_value_of_another_type.onnx")
    assert code == 0 and "internal error" not in err and "does not convert" in out, (code, err[:2000])


def test_a_tflite_input_matrix_of_rank_1_is_refused(tmp_path):
    """An LSTM whose input matrix tensor has shape [6]: ValueError unpacking it (exit 4)."""
    source = REGRESSIONS / "tflite_input_matrix_of_rank_1.tflite"
    one_sentence(cli("convert", source, tmp_path / "out.bin"), 2, "its input matrix has shape [6], not (hidden, input)")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("target", ["cudnn", "mlx"])
def test_a_recorded_source_dtype_rnnconv_does_not_know_is_refused(target, lstm, tmp_path):
    """The fuzz found it: an MLX file whose source record names the element type 'gru'; verify's tolerance looked it
    up (KeyError, exit 4). The record is the file's, so it is untrusted like the rest."""
    if target == "mlx":
        pytest.importorskip("mlx")
        pytest.importorskip("safetensors")
    written = tmp_path / ("lstm.bin" if target == "cudnn" else "lstm.mlx.safetensors")
    rnnconv.convert(lstm, written, to=target)
    if target == "cudnn":
        sidecar = written.with_name("lstm.bin.json")
        record = json.loads(sidecar.read_text())
        record["source"]["dtype"] = "gru"
        sidecar.write_text(json.dumps(record))
    else:
        from safetensors import safe_open
        from safetensors.numpy import load_file, save_file

        with safe_open(str(written), "np") as f:
            metadata = f.metadata()
        tensors = load_file(str(written))
        key = next(k for k, v in metadata.items() if '"dtype"' in v)
        record = json.loads(metadata[key])
        record["dtype"] = "gru"
        metadata[key] = json.dumps(record)
        save_file(tensors, str(written), metadata)
    one_sentence(cli("verify", written), 2, "records its source's element type as 'gru'")


@pytest.mark.needs("onnx")
def test_an_onnx_node_named_in_bytes_that_are_not_utf8_is_refused(tmp_path):
    """The streaming fuzz family found it: protobuf hands a name that is not UTF-8 over as bytes, and joining the
    names of a chain raised a TypeError (exit 4)."""
    data = (FIXTURES / "onnx" / "gru3_bi_torchscript.onnx").read_bytes()
    assert data.count(b"/GRU_1") >= 1
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(data.replace(b"/GRU_1", b"/G\x80U_1", 1))
    for command in ("inspect", "convert"):
        args = [damaged] if command == "inspect" else [damaged, tmp_path / "out.pt"]
        result = run_cli(command, *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert "not UTF-8 text" in result.stderr, result.stderr


def test_an_onnx_value_given_out_by_several_nodes_is_refused_at_once(tmp_path):
    """ONNX assigns each value once. A node copied with its outputs (the fuzz's `onnx` family put 3,000 copies of an
    unrolled LSTM cell's Split in a 0.6 MB file) was read as that many cells, each run on probe inputs: minutes."""
    onnx = pytest.importorskip("onnx")
    model = onnx.load(FIXTURES / "onnx" / "lstm_cell_loop2_dynamo.onnx")
    split = next(node for node in model.graph.node if node.op_type == "Split")
    model.graph.node.extend([split] * 3)
    path = tmp_path / "copied.onnx"
    onnx.save(model, path)
    for args in (["inspect", path], ["convert", path, tmp_path / "out.pt"]):
        one_sentence(cli(*args), 2, f"value {split.output[0]!r} is the output of more than one node", "assigns each")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copied.onnx"]
