"""A fuzzing harness for rnnconv: hostile and malformed inputs through every command that reads them.

    python -m tests.fuzz --budget 600            # ten minutes, every format
    python -m tests.fuzz --cases 200 --seed 1    # a fixed, repeatable set (what CI runs)
    python -m tests.fuzz --replay DIR            # run one saved case again

Structure-aware mutators (`mutators.py`) start from the shipped fixtures and from files the real frameworks
make (payloads that would write a marker file if any code in them ran), and mutate HDF5 trees and
attributes, zip members and headers, pickle opcode streams, safetensors headers, sidecar JSON and raw blob
sizes, plus bytes at random. Each case runs in a worker process (`worker.py`) under a time and memory
watch; the harness counts internal errors, tracebacks, hangs, memory blow-ups, partial or clobbered
outputs and code executions. Failing cases are kept for replay.

Two families run their own way: `changing_source` (changing.py) changes a large source of every format while a
command reads it, and `odd_environment` (odd_env.py) runs commands in fresh processes under odd terminal
variables and standard streams (`--families changing_source,odd_environment` runs them alone).
"""
