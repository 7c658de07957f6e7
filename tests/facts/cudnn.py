"""cuDNN weight spaces' test facts: a blob run through the reference of cuDNN's equations (held against cuDNN itself on
a GPU)."""

from __future__ import annotations

from . import Outputs, Runtime, Way


def _cudnn(path, spec, x, h0, c0, lengths=None) -> Outputs:
    from rnnconv.core import reference
    from rnnconv.formats.cudnn.reader import open_bin

    blob = open_bin(path)
    return reference.forward(blob.spec, blob.param, x, h0, c0)


RUNTIME = Runtime((".bin", ".bin.json"), 2e-5, (Way("the reference of cuDNN's equations", _cudnn),))
