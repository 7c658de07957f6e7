"""A fuzzing harness for rnnconv: hostile and malformed inputs through every command that reads them.

    python -m tests.fuzz --budget 600            # ten minutes, every format
    python -m tests.fuzz --cases 200 --seed 1    # a fixed, repeatable set (what CI runs)
    python -m tests.fuzz --replay DIR            # run one saved case again
    python -m tests.fuzz --families new --cases 20000 --seed 35   # the readers added since the first round

Structure-aware mutators (`mutators.py`) start from the shipped fixtures and from files the real frameworks
make (payloads that would write a marker file if any code in them ran), and mutate HDF5 trees and
attributes, zip members and headers, pickle opcode streams, safetensors headers, sidecar JSON and raw blob
sizes, plus bytes at random. The readers added since (`NEW_FAMILIES`) start from models rnnconv itself writes
from PyTorch and Keras sources, with the files beside them and their source records, and have their structure
damaged: OpenVINO IR XML (attributes, edges, ids, names, counts, nesting, encodings, DTDs) and its .bin, TFLite
fields and grafted strings and vectors, Flax msgpack trees (shapes, types, byte counts, nested extensions, depth,
keys, counts, wide forms), .eqx and .npz .npy headers and leaves, MLX safetensors entries, ncnn .param lines and
.bin tags, ONNX subgraphs, folding chains, long names and thousands of tensors, and identify's blob sizes and
probes. Each case runs in a worker process (`worker.py`) under a time and memory
watch; the harness counts internal errors, tracebacks, hangs, memory blow-ups, partial or clobbered
outputs, code executions, damaged inputs accepted, and messages lost, cut before their cause or over 2,000
characters. Failing cases are kept for replay.

Two families run their own way: `changing_source` (changing.py) changes a large source of every format while a
command reads it, and `odd_environment` (odd_env.py) runs commands in fresh processes under odd terminal
variables and standard streams (`--families changing_source,odd_environment` runs them alone).
"""
