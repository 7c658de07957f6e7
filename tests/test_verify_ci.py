"""verify as a CI step: per-step errors, JUnit XML, progress lines, the sparkline, the plot, the shell recipe."""

from __future__ import annotations

from test_verify import CORRUPTIONS, corrupted, to_blob

from rnnconv.verification import VerifyOptions, verify


def broken(tmp_path, case="two gates swapped in one cell"):
    """A blob with a deliberate mistake, and the good blob it was made from."""
    source, layer, change, _ = CORRUPTIONS[case]
    good = to_blob(source, layer, tmp_path / "good.bin")
    return corrupted(good, tmp_path / "bad.bin", change), good


def test_per_step_errors_are_kept_per_direction(tmp_path):
    """Gates swapped in layer 1's reverse direction only: the forward half of the output stays exact."""
    bad, _ = broken(tmp_path)
    report = verify(bad, VerifyOptions(backend="numpy", seq_len=6))
    comparison, tol = report.comparison, report.tolerance
    assert comparison is not None and tol is not None
    forward, reverse = comparison.y_per_direction_per_step
    assert len(forward) == len(reverse) == 6
    assert max(forward) <= tol.atol < min(reverse)
    assert comparison.y_per_step == [max(f, r) for f, r in zip(forward, reverse)]
    assert comparison.y_per_direction == [max(forward), max(reverse)]
    assert not comparison.y.match and not comparison.h_n.match
