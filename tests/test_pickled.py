"""The inert unpickler (rnnconv/formats/_pickled.py): numpy's arrays as every pickle protocol writes them read as
arrays, every other global recorded by name and never imported or called, damage and excess refused in a sentence."""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict

import numpy as np
import pytest

from rnnconv.errors import BadInput
from rnnconv.formats import _pickled


class _Runs:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_arrays_read_and_other_globals_are_only_recorded(tmp_path):
    marker = tmp_path / "RAN"
    arrays = [
        np.arange(24, dtype="<f4").reshape(2, 3, 4),
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        np.zeros((0, 3), ">i2"),
        np.ones(3, bool),
        np.float16(2.5),
    ]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(OrderedDict(a=arrays, hook=_Runs(marker), d=np.dtype("<c8")), protocol=protocol)
        root = _pickled.load(data, "x.pkl")
        for got, want in zip(root["a"], arrays, strict=True):
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want), protocol
        assert root["d"] == np.dtype("<c8")
        hook = root["hook"]
        assert type(hook).qualified() == f"{os.system.__module__}.system" and hook.args == (f"touch {marker}",)
        assert _pickled.globals_named(root) == [type(hook).qualified()]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (pickle.dumps(np.array([1, "a"], object)), "not a numeric one"),
        (pickle.dumps(np.zeros(4, "f4"), protocol=2).replace(b"K\x04", b"K\x05", 1), "is given 16 bytes, not 20"),
        (pickle.dumps(np.zeros(2, [("a", "f4")])), "not a numeric one"),
        (b"(" * 30 + b".", "truncated or corrupt"),
        (b"\x80\x02" + b"]" * 1001 + b".", "more than 1,000 objects"),  # MAX_OPCODES made 1,000,
        (b"\x80\x02" + b"]" * 300 + b"a" * 299 + b".", "nests objects more than 200 deep"),
        (b"\x80\x02]r\xff\xff\xff\x7f.", "memo slot 2147483647"),  # a 16 GiB memo, were it put
    ],
)
def test_damaged_or_excessive_pickles_are_refused(data, phrase, monkeypatch):
    monkeypatch.setattr(_pickled, "MAX_OPCODES", 1000)
    with pytest.raises(BadInput, match=r"^x\.pkl") as caught:
        _pickled.load(data, "x.pkl")
    assert phrase in str(caught.value)
