"""`verify --streaming`'s engine: a streaming model rnnconv wrote, run as it is in a runtime, fed the sequence in
chunks of several sizes, its states carried from call to call (each size's outputs compared with the source's on
the whole sequence)."""

from __future__ import annotations

from pathlib import Path

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.compare import Inputs, Outputs
from rnnconv.core.contracts import BackendInfo
from rnnconv.errors import BadInput
from rnnconv.formats.base import Format
from rnnconv.formats.streaming import run_in_chunks

CHUNKS = (1, 3, 7)  # the chunk sizes verify feeds a model that takes any: one step, and sizes that split 8 unevenly


class StreamRun:
    """A streaming file run as it is in a runtime (verify --streaming's engine): fed the sequence in chunks of each
    size it takes, its states carried from call to call; `runs` holds each size's outputs."""

    def __init__(self, fmt: Format, path: Path, runtime: str | None):
        streams = fmt.info.streams
        if not streams:
            raise BadInput(f"{path} is a {fmt.title} file, which has no streaming form: verify it without --streaming")
        runtime = runtime or streams[0]
        if runtime not in streams:
            raise BadInput(
                f"a streaming {fmt.title} model runs in {' or '.join(streams)}, not {runtime!r} (--stream-runtime)"
            )
        self.path, self.name = path, runtime
        self.notes: list[str] = []
        self.stream = fmt.stream(path, runtime)
        self.runs: dict[int, Outputs] = {}

    @property
    def chunks(self) -> tuple[int, ...]:
        return CHUNKS if self.stream.chunk is None else (self.stream.chunk,)

    def steps(self, seq_len: int) -> int:
        """The test sequence's length: `seq_len`, or for a model of one chunk length, whole chunks (at least 2)."""
        chunk = self.stream.chunk
        return seq_len if chunk is None else chunk * max(2, -(-seq_len // chunk))

    def run(self, blob: object, inputs: Inputs) -> Outputs:
        spec: RNNSpec = blob.spec  # type: ignore[attr-defined]
        self.runs = {chunk: run_in_chunks(self.stream, spec, inputs, chunk) for chunk in self.chunks}
        return self.runs[self.chunks[0]]

    def describe(self) -> BackendInfo:
        sizes = ", ".join(map(str, self.chunks))
        return BackendInfo(
            name=self.name,
            detail=f"{self.stream.how}, {self.path.name} fed the sequence in chunks of {sizes} step(s), its states "
            f"carried from call to call",
        )

    def versions(self) -> dict[str, str]:
        return self.stream.versions
