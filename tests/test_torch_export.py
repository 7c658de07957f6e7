"""torch.export programs (`.pt2`, fixtures by torch.export.save of PyTorch 2.13): read without torch, each RNN named by
its module path with what the graph says of it, converted, computing what torch computes from the same inputs and
non-zero states, verified in torch.export.load(...).module(); hostile archives never run their pickles or guards."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, LARGEST_ERRORS, assert_clean_failure, run_cli

import rnnconv
from rnnconv.core import reference
from rnnconv.formats.cudnn.reader import open_bin
from rnnconv.formats.torch.wire import is_export_archive

PROGRAMS = FIXTURES / "torch_export"
# program -> (module path, spec, call form and states as inspect's note tells them)
LISTED = {
    "lstm_states.pt2": (
        "rnn",
        ("lstm", 3, 6, 4, 2, False),
        "sequence-first, its initial states the program's inputs states_0, states_1",
    ),
    "gru_head.pt2": ("gru", ("gru", 3, 5, 0, 2, True), "batch-first, its initial states zeros the program makes"),
    "rnn_relu.pt2": (
        "rnn",
        ("rnn_relu", 4, 3, 0, 1, False),
        "sequence-first, its initial states the program's inputs states_0",
    ),
}


def test_inspect_names_each_rnn_by_its_module_path_with_what_the_graph_says():
    for name, (layer, spec, call) in LISTED.items():
        report = rnnconv.inspect(PROGRAMS / name)
        assert report.format == "torch-export"
        (entry,) = report.rnns
        assert (entry.name, entry.converts) == (layer, True)
        got = entry.spec
        assert got is not None
        assert (got.mode, got.input_size, got.hidden_size, got.proj_size, got.num_layers, got.bidirectional) == spec
        assert any(call in note for note in entry.notes), entry.notes
        assert not any("assumed" in note for note in entry.notes)  # relu is the program's word, not a default
    assert rnnconv.inspect(FIXTURES / "torch" / "rnn_tanh.pt").format == "torch"  # a torch.save zip stays a checkpoint
    with zipfile.ZipFile(FIXTURES / "torch" / "rnn_tanh.pt") as saved:
        assert not is_export_archive(saved.namelist())
    torchscript = ["m/data.pkl", "m/code/__torch__.py", "m/constants.pkl", "m/version", "m/.data/version"]
    assert not is_export_archive(torchscript)  # torch.jit.save's members: no archive_format


def _states(spec, batch: int, rng) -> tuple[np.ndarray, np.ndarray]:
    pseudo = spec.num_layers * spec.num_directions
    h0 = rng.normal(0, 0.5, (pseudo, batch, spec.proj_size or spec.hidden_size)).astype(np.float32)
    return h0, rng.normal(0, 0.5, (pseudo, batch, spec.hidden_size)).astype(np.float32)


def test_programs_convert_and_compute_what_torch_computes(tmp_path):
    """Each conversion, run through cuDNN's equations, against torch: the program itself on its own inputs and states
    (the GRU's under its Linear head, from the zeros the program starts it from), and the module its parameters load
    into (torch.export.load's own state_dict) from non-zero states."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(46)
    for name, (layer, _, _) in LISTED.items():
        out = tmp_path / f"{name}.bin"
        result = run_cli("convert", PROGRAMS / name, out, "--layer", layer)
        assert result.returncode == 0, result.stderr
        blob = open_bin(out)
        spec = blob.spec
        program = torch.export.load(PROGRAMS / name)
        module = program.module()
        batch_first = name == "gru_head.pt2"
        x = rng.normal(0, 0.8, (2, 5, 3) if batch_first else (5, 2, spec.input_size)).astype(np.float32)
        steps_first = x.transpose(1, 0, 2) if batch_first else x
        h0, c0 = _states(spec, steps_first.shape[1], rng)
        lstm = spec.mode == "lstm"
        with torch.no_grad():
            if batch_first:
                zeros = np.zeros_like(h0)
                y = reference.forward(spec, blob.param, steps_first, zeros)[0].transpose(1, 0, 2)
                head = program.state_dict
                pairs = [
                    (module(torch.from_numpy(x)).numpy(), y @ head["head.weight"].numpy().T + head["head.bias"].numpy())
                ]
            else:
                states = (h0, c0) if lstm else (h0,)
                expected = module(torch.from_numpy(x), *map(torch.from_numpy, states))
                got = reference.forward(spec, blob.param, x, h0, c0 if lstm else None)
                pairs = [(e.numpy(), g) for e, g in zip(expected, got)]
            kwargs = {"num_layers": spec.num_layers, "bidirectional": spec.bidirectional, "batch_first": batch_first}
            if spec.proj_size:
                kwargs["proj_size"] = spec.proj_size
            if spec.mode.startswith("rnn"):
                kwargs["nonlinearity"] = spec.mode[4:]
            cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(spec.mode, torch.nn.RNN)
            rnn = cls(spec.input_size, spec.hidden_size, **kwargs)
            rnn.load_state_dict(
                {k[len(layer) + 1 :]: v for k, v in program.state_dict.items() if k.startswith(layer + ".")}
            )
            state = (torch.from_numpy(h0), torch.from_numpy(c0)) if lstm else torch.from_numpy(h0)
            y, final = rnn(torch.from_numpy(x), state)
            got = reference.forward(spec, blob.param, steps_first, h0, c0 if lstm else None)
            pairs.append((y.numpy().transpose(1, 0, 2) if batch_first else y.numpy(), got[0]))
            pairs.append(((final[0] if lstm else final).numpy(), got[1]))
        worst = max(float(np.abs(e - g).max()) for e, g in pairs)
        LARGEST_ERRORS[f"torch.export {name}"] = worst
        assert worst <= 1e-5, (name, worst)


@pytest.mark.needs("torch")
def test_verify_runs_the_program_in_torch_export_load(tmp_path):
    for name in LISTED:
        out = tmp_path / f"{name}.pt"
        assert run_cli("convert", PROGRAMS / name, out).returncode == 0
        result = run_cli("verify", out, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["verdict"] == "match" and report["source"]["format"] == "torch-export"


def _rewritten(source: Path, target: Path, change: dict[str, Callable[[bytes], bytes]]) -> Path:
    """A copy of an archive with the members `change` names (by their name inside the archive's folder) changed."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            inner = info.filename.split("/", 1)[1]
            data = src.read(info)
            dst.writestr(info, change[inner](data) if inner in change else data)
    return target


def _graph(edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def change(data: bytes) -> bytes:
        document = json.loads(data)
        edit(document)
        return json.dumps(document).encode()

    return change


def _reduce_payload(marker: Path) -> bytes:
    import pickle

    class Runs:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    return pickle.dumps((Runs(), {}), protocol=2)


def _pickled_weight(data: bytes) -> bytes:
    document = json.loads(data)
    document["config"]["rnn.weight_ih_l0"]["use_pickle"] = True
    return json.dumps(document).encode()


@pytest.mark.needs("torch")
def test_pickles_and_guards_in_a_program_never_run(tmp_path):
    """Sample inputs that are a __reduce__ payload, guards that are Python and a weight marked pickled whose bytes are
    a payload: torch.export.load would run each; rnnconv reads none, and verify loads none."""
    marker = tmp_path / "RAN"
    guard = f"__import__('builtins').open({str(marker)!r}, 'w') is not None"
    source = PROGRAMS / "rnn_relu.pt2"
    inert = _rewritten(
        source,
        tmp_path / "inert.pt2",
        {
            "data/sample_inputs/model.pt": lambda _: _reduce_payload(marker),
            "models/model.json": _graph(lambda d: d.update(guards_code=[guard])),
        },
    )
    pickled = _rewritten(
        source,
        tmp_path / "pickled.pt2",
        {
            "data/weights/model_weights_config.json": _pickled_weight,
            "data/weights/weight_0": lambda _: _reduce_payload(marker),
        },
    )
    blob = tmp_path / "rnn.bin"
    assert run_cli("convert", inert, blob).returncode == 0
    result = run_cli("verify", blob, "--against", inert)
    assert result.returncode == 0, result.stderr
    (entry,) = rnnconv.inspect(pickled).rnns
    assert not entry.converts and "is pickled" in entry.reason
    assert_clean_failure(run_cli("convert", pickled, tmp_path / "x.bin"), 2, "rnn.weight_ih_l0 is pickled")
    assert_clean_failure(run_cli("verify", blob, "--against", pickled), 2)
    assert not marker.exists()


def test_damaged_programs_are_one_sentence(tmp_path):
    source = PROGRAMS / "lstm_states.pt2"

    def lstm(document: dict) -> dict:
        return next(n for n in document["graph_module"]["graph"]["nodes"] if n["name"] == "lstm")

    def drop_param(document: dict) -> None:
        lstm(document)["inputs"][2]["arg"]["as_tensors"].pop()

    def escape(data: bytes) -> bytes:
        document = json.loads(data)
        document["config"]["rnn.weight_hh_l0"]["path_name"] = "../../weight_1"
        return json.dumps(document).encode()

    def deep(_: bytes) -> bytes:
        return b"[" * 200_000 + b"]" * 200_000

    cases = {
        "fit no LSTM of 2 layers": {"models/model.json": _graph(drop_param)},
        "is no file name": {"data/weights/model_weights_config.json": escape},
        "reaches past its storage": {"data/weights/weight_1": lambda data: data[:8]},
        "nests too deep": {"models/model.json": deep},
    }
    for index, (phrase, change) in enumerate(cases.items()):
        damaged = _rewritten(source, tmp_path / f"damaged{index}.pt2", change)
        assert_clean_failure(run_cli("convert", damaged, tmp_path / f"out{index}.bin"), 2, phrase)
    old = tmp_path / "old.pt2"  # the layout of PyTorch 2.1 to 2.5: its weights a pickled state_dict
    with zipfile.ZipFile(old, "w") as archive:
        for member in ("serialized_exported_program.json", "serialized_state_dict.pt", "version"):
            archive.writestr(f"old/{member}", b"{}")
    assert_clean_failure(run_cli("inspect", old), 2, "the layout PyTorch 2.1 to 2.5 wrote")
    assert not list(tmp_path.glob("out*"))
