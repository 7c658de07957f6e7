"""TF1 cuDNN checkpoints' test facts: read only (nothing written to run), the checkpoints the fuzz harness damages."""

from __future__ import annotations

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
SEEDS = ["tf1/lstm2.ckpt", "tf1/gru_bi.ckpt", "tf1/rnn_tanh.ckpt", "tf1/seq2seq.ckpt"]
