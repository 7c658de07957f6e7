"""Streaming models: an RNN that takes its input a chunk of steps at a time, with every layer's states explicit inputs
and outputs (no variable tensors, nothing kept between calls), as keyword spotting and voice activity detection run
one.

A streaming model's inputs are `x` (batch, chunk, input), then each layer's states in order, `h_l0`, `c_l0` (an LSTM),
`h_l1`, ..., each (batch, size); its outputs are `y` (batch, chunk, output), then the new states `h_l0_next`,
`c_l0_next`, ... in the same order. A format says in its plugin facts which runtimes run its streaming models
(`FormatInfo.streams`, the first its own); `verify --streaming` feeds a sequence through one in chunks of several
sizes, carrying the states (`verification/streaming.py`), and compares each run with the source's on the whole
sequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.errors import BadInput, Unsupported, listing
from rnnconv.formats.catalog import FORMAT_INFO
from rnnconv.formats.plugin import FormatInfo
from rnnconv.table.constants import LSTM, STATES

if TYPE_CHECKING:
    from rnnconv.core.compare import Inputs, Outputs
    from rnnconv.formats.base import Stream
    from rnnconv.formats.settings import WriteOptions

STREAM_INPUT, STREAM_OUTPUT = "x", "y"
STATE_INPUT = "{state}_l{layer}"  # h_l0, c_l0, h_l1, ...
STATE_OUTPUT = STATE_INPUT + "_next"
MAX_CHUNK = 1024  # steps a fixed-chunk model unrolls: beyond that, a graph of that many copies of the cell


@dataclass(frozen=True)
class State:
    """One state input of a streaming model and its output: which state (h or c), of which layer."""

    state: str
    layer: int

    @property
    def input(self) -> str:
        return STATE_INPUT.format(state=self.state, layer=self.layer)

    @property
    def output(self) -> str:
        return STATE_OUTPUT.format(state=self.state, layer=self.layer)


def states_of(spec: RNNSpec) -> list[State]:
    """A streaming model's states in order: each layer's h (batch, output size), then an LSTM's c (batch, hidden)."""
    held = STATES if spec.mode == LSTM else STATES[:1]
    return [State(state, layer) for layer in range(spec.num_layers) for state in held]


def streams(rnn: CanonicalRNN) -> bool:
    """Whether a streaming model can hold the RNN: not a bidirectional one, whose reverse direction reads the
    sequence from its end."""
    return not rnn.spec.bidirectional


def check_streamable(info: FormatInfo, rnns: list[CanonicalRNN], options: WriteOptions) -> None:
    """Refuse, in one sentence, a streaming model a target cannot write, or a --chunk where it takes none."""
    if not options.streaming:
        if options.chunk is not None:
            raise BadInput("--chunk sets a streaming model's chunk length: give it with --streaming")
        return
    if not info.streams:
        streaming = [other.title for other in FORMAT_INFO.values() if other.streams]
        raise Unsupported(
            f"{info.title} has no streaming form in rnnconv; --streaming writes {', '.join(streaming[:-1])} or "
            f"{streaming[-1]}"
        )
    if options.chunk is not None and not info.fixed_chunk:
        raise BadInput(f"a streaming {info.title} model takes chunks of any length: leave out --chunk")
    if options.chunk is not None and not 1 <= options.chunk <= MAX_CHUNK:
        raise BadInput(f"--chunk must be between 1 and {MAX_CHUNK} steps")
    for rnn in rnns:
        if not streams(rnn):
            raise Unsupported(
                f"{rnn.name} is bidirectional and cannot stream: its reverse direction reads the sequence from its "
                f"end, which a chunk does not hold"
            )


def run_in_chunks(stream: Stream, spec: RNNSpec, inputs: Inputs, chunk: int) -> Outputs:
    """The whole sequence fed `chunk` steps at a time (the last chunk shorter), each call's states fed to the next:
    y, h_n, c_n as cuDNN's."""
    x = np.asarray(inputs["x"], np.float32).transpose(1, 0, 2)  # batch-major, as a streaming model takes it
    states = states_of(spec)
    starts = dict(zip(STATES, (inputs["h0"], inputs.get("c0"))))
    carried = {s.input: np.ascontiguousarray(np.asarray(starts[s.state])[s.layer], np.float32) for s in states}
    ys = []
    for start in range(0, x.shape[1], chunk):
        given = np.ascontiguousarray(x[:, start : start + chunk])
        got = stream({STREAM_INPUT: given, **carried})
        _check_shapes(got, {STREAM_OUTPUT: given.shape[:2], **{s.output: carried[s.input].shape for s in states}})
        ys.append(got[STREAM_OUTPUT])
        carried = {s.input: got[s.output] for s in states}
    finals = {kind: [carried[s.input] for s in states if s.state == kind] for kind in STATES}
    return {
        "y": np.concatenate(ys, axis=1).transpose(1, 0, 2),
        "h_n": np.stack(finals["h"]),
        "c_n": np.stack(finals["c"]) if finals["c"] else None,
    }


def run_whole(stream: Stream, spec: RNNSpec, inputs: Inputs) -> Outputs:
    """A streaming model run as written on whole sequences (its states wired as the file wires them): each sequence
    in one call, or in the chunks it takes, from the given states."""
    x = np.asarray(inputs["x"])
    if inputs.get("lengths") is not None and np.any(np.asarray(inputs["lengths"]) != x.shape[0]):
        raise Unsupported("a streaming model runs every sequence all its steps: verify it without --ragged")
    return run_in_chunks(stream, spec, inputs, stream.chunk or x.shape[0])


def _check_shapes(got: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]]) -> None:
    """BadInput unless a call gave y (batch, steps, size) and each state of the shape it was given: a damaged model's
    outputs are neither carried nor compared."""
    for name, shape in expected.items():
        given = got[name].shape
        if given[: len(shape)] == shape and len(given) == len(shape) + (name == STREAM_OUTPUT):
            continue
        if name == STREAM_OUTPUT:
            batch, steps = shape
            raise BadInput(
                f"the streaming model gives {name} of shape {given} for {steps} step(s) of a batch of {batch}, not "
                f"({batch}, {steps}, size)"
            )
        raise BadInput(
            f"the streaming model gives {name} of shape {given}, not {shape}, the shape of the state it took"
        )


def stream_contract(spec: RNNSpec, chunk: int | str = "chunk") -> str:
    """What a written streaming model takes and gives, for its usage line's comment."""
    states = states_of(spec)
    return (
        f"a streaming model: x (batch, {chunk}, {spec.input_size}) and the states "
        f"{', '.join(s.input for s in states)} in, y (batch, {chunk}, {spec.output_size}) and "
        f"{', '.join(s.output for s in states)}, the next call's states, out"
    )


def is_streaming(inputs: list[str], outputs: list[str]) -> bool:
    """Whether a model's inputs and outputs are a streaming model's: x and states, y and the states' next values, in
    the same order."""
    states = inputs[1:]
    shaped = all(re.fullmatch(STATE_INPUT.format(state="[hc]", layer=r"\d+"), name) for name in states)
    return (
        inputs[:1] == [STREAM_INPUT]
        and bool(states)
        and shaped
        and outputs == [STREAM_OUTPUT, *(f"{s}_next" for s in states)]
    )


def check_stream_names(path: Path, inputs: list[str], outputs: list[str]) -> None:
    """BadInput (one sentence) unless a model's inputs and outputs are a streaming model's (`is_streaming`)."""
    if not is_streaming(inputs, outputs):
        raise BadInput(
            f"{path.name} is no streaming model (inputs {listing(inputs) or 'none named'}, outputs "
            f"{listing(outputs) or 'none named'}, where one takes "
            f"{STREAM_INPUT} and states h_l0, ... and gives {STREAM_OUTPUT} and h_l0_next, ...): verify it without "
            f"--streaming"
        )
