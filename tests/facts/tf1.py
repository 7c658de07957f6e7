"""TF1 checkpoints' test facts: read only (nothing written to run), the checkpoints the fuzz harness damages."""

from __future__ import annotations

# The fixtures the fuzz harness damages (tests/fuzz/seeds.py).
# tf.compat.v1's own cells come with their .meta graphs: the tf1 family damages the bundles, tf1_meta the graphs.
SEEDS = ["tf1/lstm2.ckpt", "tf1/gru_bi.ckpt", "tf1/rnn_tanh.ckpt", "tf1/seq2seq.ckpt"] + [
    f"tf1/{name}.ckpt"
    for name in ("basic_lstm", "lstm_proj", "multi2", "bidi", "gru", "gru_cell_multi2", "gru_cell_bidi")
]
