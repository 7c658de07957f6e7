"""The documents rnnconv writes are records (`rnnconv.core.record`): built by plain checks, with pydantic (the model
generated from the same declaration) deciding whatever those checks do not keep as it is. These tests hold the
checks to pydantic: on thousands of values per document, right and wrong, a value the plain checks keep is one
pydantic accepts and gives back unchanged, and a record's plain dump is pydantic's dump of it."""

from __future__ import annotations

import math
import random
import struct
import subprocess
import sys
import typing
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import numpy as np
import pytest

from rnnconv.core import contracts
from rnnconv.core.canonical import RNNSpec
from rnnconv.core.dtypes import DTYPES
from rnnconv.core.record import REQUIRED, Record, _Rejected, float_text
from rnnconv.formats import settings
from rnnconv.table.constants import CUDNN_MODES, KINDS

RECORDS = sorted(
    {
        value
        for module in (contracts, settings)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, Record) and value not in (Record, settings.Settings)
    },
    key=lambda record: record.__name__,
)
# the words the documents' own checks take (modes, dtypes, tensor kinds), and others
WORDS = ["", "i", "ε", "a" * 300, *CUDNN_MODES, *DTYPES, *KINDS] * 2 + ["lstm", "float32"] * 3
ROOT = Path(__file__).resolve().parents[1]
TORCH = ROOT / "fixtures" / "torch"
KERAS = ROOT / "fixtures" / "keras3"


def odd_values(rng: random.Random) -> list[Any]:
    """Values of the wrong kind for nearly any field: what a careless caller or a damaged document gives."""
    return [
        None,
        True,
        0,
        -1,
        1 << 70,
        0.5,
        -0.0,
        math.nan,
        math.inf,
        "",
        "lstm",
        b"lstm",
        [],
        ["a", 1],
        {},
        {"a": [1, None]},
        np.int64(3),
        np.float32(0.25),
        Path("x"),
        (1, 2),
        rng.choice(["float32", "gru", "W", "x", "double", "little", "class"]),
    ]


def value_of(annotation: Any, rng: random.Random, depth: int = 0, odd: float = 0.12) -> Any:
    """A value of `annotation`: mostly right (of its type, sometimes out of its field's bounds), sometimes (`odd`)
    not."""
    if annotation is Any:
        return rng.choice([1, "a", None, [1]])  # what JSON holds: anything else a field of Any keeps is not dumped
    if rng.random() < odd:
        return rng.choice(odd_values(rng))
    origin, arguments = get_origin(annotation), get_args(annotation)
    if annotation is type(None) or annotation is None:
        return None
    if annotation is bool:
        return rng.random() < 0.5
    if annotation is int:
        return rng.choice([0, 1, 1, 1, 2, 3, 7] if not odd else [1, 2, 3, 7, 40, 1, 2, 0, -1, 1 << 20, 1 << 40])
    if annotation is float:
        return rng.choice([1e-7, 0.5, 3.0] if not odd else [0.0, 1e-7, 0.5, 3.0, -2.5, 1e300, math.nan, math.inf, 2])
    if annotation is str:
        return rng.choice(WORDS)
    if origin in (Union, UnionType):
        return value_of(rng.choice(arguments), rng, depth, odd)
    if origin is Literal:
        return rng.choice(arguments)
    if origin is list:
        return [value_of(arguments[0], rng, depth + 1, odd) for _ in range(rng.randrange(4))]
    if origin is dict:
        return {f"k{i}": value_of(arguments[1], rng, depth + 1, odd) for i in range(rng.randrange(3))}
    if isinstance(annotation, type) and issubclass(annotation, Record):
        if depth > 2:
            return None
        for _ in range(1 if odd else 20):  # a right document's records are right
            made = fields_of(annotation, rng, depth + 1, odd)
            try:
                return annotation(**made)
            except ValueError:
                pass
        return made  # a document's nested dict, as JSON gives it
    if annotation is RNNSpec:
        return RNNSpec("lstm", 3, 4)
    if annotation is Path:
        return rng.choice([Path("/tmp/x"), "/tmp/x"])
    if origin is not None and getattr(origin, "__name__", "") == "Callable":
        return rng.choice([print, lambda done, total: None])
    return object()


def fields_of(record: type[Record], rng: random.Random, depth: int = 0, odd: float = 0.12) -> dict[str, Any]:
    hints = typing.get_type_hints(record)
    given: dict[str, Any] = {}
    for name, field in record.model_fields.items():
        defaulted = field.default is not REQUIRED or field.default_factory is not None
        if rng.random() < (0.3 if defaulted else 0.02):
            continue  # left to its default (a required field left out now and then too)
        key = field.alias if field.alias and rng.random() < 0.5 else name
        given[key] = value_of(hints[name], rng, depth, odd)
    if rng.random() < 0.03:
        given["not_a_field"] = 1
    return given


@pytest.mark.parametrize("record", RECORDS, ids=lambda record: record.__name__)
def test_what_the_plain_checks_keep_pydantic_accepts_unchanged(record):
    """1,000 field sets per document: each the plain checks keep, pydantic's model of the same declaration accepts,
    giving back the same fields; each pydantic refuses, the plain checks do not keep (so pydantic refuses it, with
    its own error, when the record is built). And a record's dump is pydantic's dump of it, in both modes."""
    model = record.pydantic_model()
    rng = random.Random(record.__name__)
    kept = refused = 0
    for _ in range(1000):
        given = fields_of(record, rng, odd=rng.choice([0.0, 0.02, 0.12]))
        try:
            plain = record._plainly(given)
        except _Rejected:
            plain = None
        try:
            validated = record.type_adapter().validate_python(given)
        except ValueError:
            assert plain is None, f"{record.__name__}: the plain checks kept {given!r}, which pydantic refuses"
            refused += 1
            continue
        if plain is None:
            continue  # pydantic accepts what the plain checks leave to it: it builds the record then
        kept += 1
        made = record._of(plain)
        assert repr(vars(made)) == repr(vars(validated)), f"{record.__name__}: {given!r}"  # repr: nan is nan
        if issubclass(record, settings.Settings):
            continue  # never dumped (a callable, a spec)
        as_model = model.model_validate(made.model_dump(by_alias=True))
        for options in ({}, {"mode": "json", "by_alias": True, "exclude_none": True}):
            assert repr(made.model_dump(**options)) == repr(as_model.model_dump(**options)), (record.__name__, options)
        for options in ({}, {"by_alias": True, "exclude_none": True}):
            assert made.model_dump_json(**options) == as_model.model_dump_json(**options), (record.__name__, options)
    assert kept > 25 and refused > 25, (record.__name__, kept, refused)  # both sides of the checks were walked


def test_floats_are_written_as_pydantic_writes_them():
    """The JSON text of a record's floats is pydantic's, digit for digit, over 300,000 floats: random bit
    patterns, random magnitudes from 1e-12 to 1e25, short decimals from 1e-30 to 1e30, every power of ten and the
    extremes."""
    from pydantic import TypeAdapter

    rng = random.Random(1)
    floats = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(100_000)]
    floats += [rng.uniform(-1, 1) * 10 ** rng.uniform(-12, 25) for _ in range(100_000)]
    floats += [float(f"{rng.randint(1, 99999)}e{rng.randint(-30, 30)}") for _ in range(100_000)]
    floats += [float(f"1e{e}") for e in range(-323, 309)] + [
        5e-324,
        -5e-324,
        2.2250738585072014e-308,
        1.7976931348623157e308,
    ]
    floats = [value for value in floats if math.isfinite(value)]
    written = TypeAdapter(list[float]).dump_json(floats).decode()
    assert "[" + ",".join(map(float_text, floats)) + "]" == written


def test_a_record_refused_is_refused_by_pydantic_with_its_sentence():
    """A value out of its field's range, of the wrong type, or failing a field's own check: pydantic's error, as the
    pydantic models gave it, and `parse`'s sentence naming the field."""
    with pytest.raises(ValueError, match="input_size"):
        contracts.SpecModel(mode="lstm", input_size=0, hidden_size=2)
    with pytest.raises(ValueError, match="unknown RNN mode 'lsmt'"):
        contracts.SpecModel(mode="lsmt", input_size=1, hidden_size=2)
    with pytest.raises(contracts.BadInput, match=r"^the sidecar: hidden_size: Input should be a valid integer"):
        contracts.parse(contracts.SpecModel, {"mode": "gru", "input_size": 1, "hidden_size": "2"}, "the sidecar")
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        contracts.Provenance(path="a", not_a_field=1)


def test_nested_records_survive_pydantic_documents():
    """A record inside one of verify's pydantic documents validates into the record, and dumps as the record does."""
    from rnnconv.core.report_contracts import Report, Reports

    loss = contracts.RecordedLoss(dropped=["cell_clip"], difference=0.25, seed=1, steps=3, batch=2)
    source = contracts.Provenance(path="m.pt", layer_class="LSTM", loss=loss)
    back = contracts.Provenance.model_validate_json(source.model_dump_json(by_alias=True, exclude_none=True))
    assert back == source and isinstance(back.loss, contracts.RecordedLoss)
    assert contracts.dump(back) == {"path": "m.pt", "class": "LSTM", "loss": contracts.dump(loss)}
    spec = contracts.SpecModel(mode="gru", input_size=3, hidden_size=4, reset_after=False)
    report = Report.model_validate({"verdict": "match", "summary": "", "blob": "m.bin", "spec": dump_of(spec)})
    assert report.spec == spec and isinstance(report.spec, contracts.SpecModel)
    assert contracts.dump(report)["spec"] == contracts.dump(spec)
    assert Report(verdict="match", summary="", blob="m.bin", spec=spec).spec is spec
    assert Reports.model_json_schema()["$defs"]["SpecModel"]["properties"]["reset_after"]


def dump_of(record: Record) -> dict[str, Any]:
    return contracts.dump(record)


def test_a_small_conversion_imports_no_pydantic(tmp_path):
    """A conversion builds its documents (the settings, the source's record, the sidecar, the result it prints) as
    records: pydantic is not imported by the command line's conversions of a `.pt` and an `.h5` (their results
    printed as JSON too) nor by the library's. (bench/bench.py's small rows time it.)"""
    code = (
        "import sys\n"
        "from rnnconv.cli.commands import main\n"
        "for source, output, *more in ((sys.argv[1], sys.argv[3], '-q'), (sys.argv[2], sys.argv[4], '--json')):\n"
        "    sys.argv = ['rnnconv', 'convert', source, output, *more]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as done:\n"
        "        assert not done.code, done.code\n"
        "import rnnconv\n"
        "rnnconv.convert(source, output + '.2.bin', layer=None)\n"
        "print('pydantic' in sys.modules)\n"
    )
    paths = [str(TORCH / "rnn_tanh.pt"), str(KERAS / "lstm.h5"), str(tmp_path / "a.bin"), str(tmp_path / "b.bin")]
    result = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("False"), result.stdout[-300:]


def test_a_state_dict_is_read_without_the_reader_of_torch_export_programs():
    """Whether a zip checkpoint is a torch.export program is asked of every `.pt`; the programs' reader is imported
    only for one (a small conversion's start: bench/bench.py's small rows)."""
    code = (
        "import sys, rnnconv\n"
        "with rnnconv.load(sys.argv[1]) as rnns: pass\n"
        "print('rnnconv.formats.torch.exported' in sys.modules)\n"
        "with rnnconv.load(sys.argv[2]) as rnns: pass\n"
        "print('rnnconv.formats.torch.exported' in sys.modules)\n"
    )
    program = ROOT / "fixtures" / "torch_export" / "rnn_relu.pt2"
    result = subprocess.run(
        [sys.executable, "-c", code, TORCH / "rnn_tanh.pt", program], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"], result.stdout
