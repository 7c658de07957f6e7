"""rnnconv's cuDNN layout against what cuDNN itself reported on a GPU (fixtures/cudnn_layout.json).

`rnnconv gpu-battery` on a GPU (bench/gpu_day.sh runs it) writes every offset, dims and strides
cudnnGetRNNWeightParams reported for every configuration; committed as fixtures/cudnn_layout.json,
it holds rnnconv's layout to cuDNN's answers in CI, where no GPU is. Until a GPU run is committed,
the test that reads it skips, saying so; the checks it applies are tested here on made-up answers.
"""

from __future__ import annotations

import copy
import json

import pytest
from conftest import FIXTURES

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.dtypes import element_type
from rnnconv.core.weightspace import region_map, regions, weight_space_elements
from rnnconv.gpu.backend import Placement
from rnnconv.gpu.battery import FORMAT, _placement_record, fixture_problems

FIXTURE = FIXTURES / "cudnn_layout.json"


@pytest.mark.skipif(
    not FIXTURE.exists(),
    reason="fixtures/cudnn_layout.json is absent: no GPU run of `rnnconv gpu-battery` (bench/gpu_day.sh) is committed",
)
def test_rnnconv_lays_out_every_configuration_as_cudnn_reported():
    report = json.loads(FIXTURE.read_text())
    problems = fixture_problems(report)
    assert not problems, f"{len(problems)} problems, first: {problems[:5]}"
    assert len(report["configurations"]) == report["configurations_planned"]


def answers(spec: RNNSpec) -> dict:
    """A battery entry as if cuDNN had answered with rnnconv's own layout (to test the checks, not the layout)."""
    itemsize = element_type(spec.dtype).itemsize
    ours = region_map(spec)
    placed = []
    for region in regions(spec):
        rows, cols = (*region.shape, 1)[:2]
        p = Placement(
            region.key,
            region.pseudo_layer,
            region.lin_layer_id,
            region.offset * itemsize,
            [1, rows, cols],
            [rows * cols, cols, 1],
        )
        placed.append(_placement_record(p, ours, itemsize))
    return {
        "spec": spec.to_dict(),
        "cudnn_weight_space_bytes": weight_space_elements(spec) * itemsize,
        "placements": placed,
    }


def report_of(*entries: dict) -> dict:
    return {"format": FORMAT, "complete": True, "configurations": list(entries), "configurations_planned": len(entries)}


SPEC = RNNSpec("lstm", 5, 7, 2, True, 3, "float16")


def test_the_checks_pass_a_layout_that_agrees():
    assert fixture_problems(report_of(answers(SPEC), answers(RNNSpec("gru", 37, 61, 1, False, 0, "float64")))) == []


def test_the_checks_name_each_kind_of_difference():
    entry = answers(SPEC)
    moved, transposed, dropped = copy.deepcopy(entry), copy.deepcopy(entry), copy.deepcopy(entry)
    moved["placements"][3]["offset_bytes"] += 16  # alignment padding before one tensor
    moved["cudnn_weight_space_bytes"] += 16
    transposed["placements"][0]["dims"] = [1, 5, 7]
    transposed["placements"][0]["strides"] = [35, 7, 1]
    dropped["placements"] = [p for p in dropped["placements"] if p["kind"] != "P"]
    problems = fixture_problems(report_of(moved, transposed, dropped))
    name = SPEC.describe()
    tensor = entry["placements"][3]["tensor"]
    assert f"{name}: weight space differs in size" in problems
    assert f"{name}: {tensor} differs in offset" in problems
    assert f"{name}: {entry['placements'][0]['tensor']} differs in dims and strides" in problems
    assert f"{name}: layer0.fwd.P cuDNN holds no such tensor" in problems


def test_an_unfinished_or_foreign_file_is_a_problem():
    unfinished = dict(report_of(answers(SPEC)), complete=False, stopped="interrupted")
    assert fixture_problems(unfinished) == ["the battery did not finish (interrupted): rerun it to the end"]
    failed = {"spec": SPEC.to_dict(), "error": "CudnnError: cudnnRNNForward failed"}
    assert fixture_problems(report_of(failed)) == [
        f"{SPEC.describe()}: cuDNN reported no layout (CudnnError: cudnnRNNForward failed)"
    ]
    assert "not a battery's JSON" in fixture_problems({"format": "something else"})[0]
