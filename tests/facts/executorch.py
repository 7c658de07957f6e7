"""ExecuTorch's test facts: read only (its programs are listed, never converted: nothing written to run), the
programs the fuzz harness damages."""

from __future__ import annotations

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
SEEDS = [
    "executorch/lstm_portable.pte",
    "executorch/lstm_xnnpack.pte",
    "executorch/gru_portable.pte",
    "executorch/tagger_portable.pte",
]
