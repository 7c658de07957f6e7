"""Each format's test facts, one module per format package (named as its package: `facts/flax_nnx.py` for
`rnnconv/formats/flax_nnx`), found by looking, as `rnnconv/formats/catalog.py` finds the plugins: `RUNTIME`, how a
file rnnconv wrote runs as a user runs it in its own framework or runtime (the conformance grids' run adapter), and
`SEEDS`, the fixtures the fuzz harness damages (`tests/fuzz/seeds.py`). What a format refuses is what its
declarations say (`declared_refusal`, tests/conftest.py); what its tests need is its plugin's `frameworks`.

`RUNTIMES[format].run(path, spec, x, h0, c0)` loads a file rnnconv wrote the way the format's documentation says
and gives its outputs as cuDNN gives them: y (T, B, D*out), h_n (L*D, B, out), c_n (L*D, B, H) or None for a cell
without one, from sequence-major x (T, B, I) and initial states in cuDNN's order. A framework that is not installed
skips the test (pytest.importorskip): nothing here imports one before it is asked to run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec
from rnnconv.formats.catalog import plugins

Outputs = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]


@dataclass(frozen=True)
class Way:
    """One way of running a written file from given states: `ragged` where it takes sequence lengths (then it is held
    against the source run on packed sequences too)."""

    label: str
    run: Callable[..., Outputs]
    ragged: bool = False
    # the runtime's own limit, not rnnconv's: why it cannot run a file of this spec (None: it runs every one)
    cannot: Callable[[RNNSpec], str | None] = lambda spec: None


@dataclass(frozen=True)
class Runtime:
    """How one format's written files run: each way from given states (cuDNN's order), and, where the documented
    module starts from its own zero states only, `documented` (batch-major x -> batch-major y)."""

    files: tuple[str, ...]  # what a conversion to model{files[0]} writes, and nothing else
    tolerance: float
    ways: tuple[Way, ...] = ()
    documented: Callable[[Path, RNNSpec, np.ndarray], np.ndarray] | None = None
    # a bfloat16 source's file is run in 16 bits by its runtime (OpenVINO, MLX), or holds 16-bit sums of the source's
    # biases (Flax linen's GRU has one bias where PyTorch has two: b_ir + b_hr is stored in the source's bfloat16)
    rounds_to_16_bits: bool = False
    beside: tuple[str, ...] = ()  # files written beside model{files[0]} under names of their own

    @property
    def ending(self) -> str:
        return self.files[0]


def engine_way(target: str) -> Way:
    """rnnconv's own runner of the format (Flax's and Equinox's cells from given states, every layer and direction:
    the documented modules take none)."""

    def run(path, spec, x, h0, c0, lengths=None) -> Outputs:
        pytest.importorskip("jax")
        from rnnconv.core.contracts import Provenance
        from rnnconv.formats import registry

        inputs = {"x": x, "h0": h0, "c0": c0, "lengths": lengths}
        got, _ = registry.get(target).run(path, Provenance(), spec, inputs)
        return got["y"], got["h_n"], got["c_n"]

    return Way("rnnconv's runner", run, ragged=True)


def _facts() -> dict[str, ModuleType]:
    """Each format's facts module, by the format's name."""
    found = {}
    for plugin in plugins():
        module = plugin.package.rpartition(".")[2]
        if (Path(__file__).parent / f"{module}.py").exists():
            found[plugin.info.name] = importlib.import_module(f"{__name__}.{module}")
    return found


FACTS = _facts()
RUNTIMES: dict[str, Runtime] = {name: m.RUNTIME for name, m in FACTS.items() if hasattr(m, "RUNTIME")}
SEEDS: dict[str, list[str]] = {name: list(getattr(m, "SEEDS", [])) for name, m in FACTS.items()}
