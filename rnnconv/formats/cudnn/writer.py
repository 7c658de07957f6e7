"""cuDNN weight spaces written: every tensor in layout order (copied file to file where the source holds it as
stored), scanned for NaN and Inf on another core, and the sidecar that describes it; a blob laid out the way a GPU
reported."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rnnconv.core.blob import Blob
from rnnconv.core.canonical import CanonicalRNN, ParamKey, RNNSpec
from rnnconv.core.contracts import SIDECAR_FORMAT, CudnnSettings, LayoutInfo, Provenance, Sidecar, WeightSpaceInfo, dump
from rnnconv.core.dtypes import ElementType, count_non_finite, element_type, stored_words
from rnnconv.core.weightspace import LAYOUT, REPORTED_LAYOUT_NAME, Region, regions, weight_space_elements
from rnnconv.errors import BadInput, listing
from rnnconv.formats import _safetensors, sources, writing
from rnnconv.formats.cudnn.wire import sidecar_path
from rnnconv.formats.writing import columns_in_source, in_source
from rnnconv.safeio.digests import TrailingDigest, digest_of, digest_placeholder
from rnnconv.safeio.inputs import FileArray
from rnnconv.safeio.outputs import atomic_outputs, mapped_run, write_array
from rnnconv.table.constants import BIAS_MODE, CUDNN_MODES, DIRECTION, INPUT_MODE
from rnnconv.table.transpose import transpose_into
from rnnconv.version import __version__

ByteProgress = Callable[[int], None]  # called with a number of bytes written


def cudnn_settings(spec: RNNSpec, etype: ElementType) -> CudnnSettings:
    return CudnnSettings(
        cudnnRNNMode_t=CUDNN_MODES[spec.mode][1],
        cudnnRNNBiasMode_t=BIAS_MODE["double"],
        cudnnDirectionMode_t=DIRECTION[spec.bidirectional],
        cudnnRNNInputMode_t=INPUT_MODE["linear"],
        cudnnDataType_t=etype.cudnn,
        inputSize=spec.input_size,
        hiddenSize=spec.hidden_size,
        projSize=spec.output_size,
        numLayers=spec.num_layers,
    )


def describe(
    rnn: CanonicalRNN,
    etype: ElementType,
    warnings: list[str],
    output: Path,
    wait: bool = True,
    digest: str | None = None,
) -> Sidecar:
    """The sidecar document: everything a C/C++ user needs to hand this blob to cuDNN (written as `output`), with
    `digest`, the weight space's own as written."""
    spec = rnn.spec
    elements = weight_space_elements(spec)
    source = sources.recorded_source(rnn, output, wait)
    return Sidecar(
        format=SIDECAR_FORMAT,
        rnnconv_version=__version__,
        name=rnn.name,
        spec=spec.to_model(dtype=etype.name, bias_mode="double"),
        layout=LAYOUT,
        cudnn=cudnn_settings(spec, etype),
        weight_space=WeightSpaceInfo(elements=elements, bytes=elements * etype.itemsize, digest=digest),
        source=source,
        notes=list(rnn.notes),
        warnings=warnings,
        tensors=[r.entry(etype.itemsize) for r in regions(spec)],
    )


def write_weight_space(
    rnn: CanonicalRNN, f: BinaryIO, etype: ElementType, progress: ByteProgress | None = None
) -> list[str]:
    """Write every tensor of `rnn` at the file's position, in layout order (front to back); return warnings.

    Each block is scanned for NaN and Inf on another core while the next one is written; one scan at a time, so no
    more than two blocks are ever held. A block copied file to file is not read again where the source's own read
    (`CanonicalRNN.source_pass`, for its digest) found its values finite. A kind's gate blocks that the source holds
    as the columns of one matrix (a Keras kernel) are transposed straight into their place in the file, all at once
    (`_transposed_in_place`).
    """
    counts: list[tuple[Region, Callable[[], int]]] = []
    scanning: Future[int] | None = None
    spaces, gates = regions(rnn.spec), len(rnn.spec.gates)
    placed = 0  # regions after this one already written with it
    for index, region in enumerate(spaces):
        if placed:
            placed -= 1
            continue
        if region.key.gate == rnn.spec.gates[0] and (
            found := _transposed_in_place(rnn, spaces[index : index + gates], f, etype)
        ):
            counts += found
            placed = gates - 1
            if progress:
                progress(sum(r.size for r, _ in found) * etype.itemsize)
            continue
        in_file = in_source(rnn, region.key, etype)
        block = rnn.param(region.key) if in_file is None else in_file
        checked = None if in_file is None or rnn.source_pass is None else rnn.source_pass.finite(in_file)
        if in_file is not None and checked is not None:
            counts.append((region, functools.partial(_counted, checked, in_file)))
        else:
            if scanning is not None:
                scanning.result()
            scanning = _SCANNER.submit(count_non_finite, block)
            counts.append((region, scanning.result))
        write_array(f, stored_words(block, etype))
        if progress:
            progress(region.size * etype.itemsize)
    return [
        f"{rnn.name}: {region.key.label} holds {bad} NaN or Inf value(s)"
        for region, count in counts
        if (bad := count())
    ]


def _transposed_in_place(
    rnn: CanonicalRNN, kind: Sequence[Region], f: BinaryIO, etype: ElementType
) -> list[tuple[Region, Callable[[], int]]] | None:
    """The gate blocks of one kind (`kind`: their regions, one after another) written at the file's position as the
    transpose of the source's matrix whose columns they are, tile by tile straight into a map of their place: no
    copy of the matrix, transposed or not, is held in memory. Each block's NaN and Inf values: none where the sums of
    its bands, taken as the tiles copied them, were finite, else counted before the map goes; None (nothing written)
    where the source holds no such matrix or the file cannot be mapped."""
    first = kind[0].key
    found = columns_in_source(rnn, first.layer, first.direction, first.kind, etype)
    if found is None or [r.key.kind for r in kind] != [first.kind] * len(rnn.spec.gates):
        return None
    matrix, pieces = found
    rows, width = sum(r.shape[0] for r in kind), kind[0].shape[1]
    with mapped_run(f, rows * width * etype.itemsize) as place:
        if place is None:
            return None
        out = np.frombuffer(place, etype.storage, rows * width).reshape(rows, width)
        finite = transpose_into(matrix, out, pieces, sums=True)
        bad, at = [], 0
        for region, summed in zip(kind, finite):  # counted only where a band's sum was not finite
            bad.append(0 if summed else count_non_finite(out[at : at + region.shape[0]]))
            at += region.shape[0]
        del out  # before the map goes
    return [(region, functools.partial(int, n)) for region, n in zip(kind, bad)]


def _counted(finite: Future[bool], block: FileArray) -> int:
    """A block's NaN and Inf values: none where the source's read found them all finite, else counted."""
    return 0 if finite.result() else count_non_finite(block)


_SCANNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rnnconv-scan")  # numpy's sums release the GIL


DESCRIPTOR = (
    "cudnnSetRNNDescriptor_v8's settings: cudnnRNNMode_t, cudnnRNNBiasMode_t, cudnnDirectionMode_t, "
    "cudnnRNNInputMode_t, cudnnDataType_t, inputSize, hiddenSize, projSize, numLayers"
)


def loading_snippet(rnns: list[CanonicalRNN], path: Path, dtype: str) -> str:
    """How to load what was written: the weight space cudnnRNNForward takes, and its RNN descriptor's settings (a
    bfloat16 weight space as its 16-bit words from a .bin, as torch's bfloat16 from a .safetensors)."""
    etype, rnn = element_type(dtype), rnns[0]
    words = " (16-bit words)" if etype.name == "bfloat16" and path.suffix == ".bin" else ""
    what = (
        f"cuDNN's weight space as cudnnRNNForward takes it: {weight_space_elements(rnn.spec)} {dtype} values{words}, "
        "copied to the GPU as they are"
    )
    if path.suffix == ".bin":
        return (
            f"import json, numpy as np\nweight_space = np.fromfile({writing.literal(path)}, "
            f'"{etype.storage.str}")   # {what}\n'
            f'descriptor = json.load(open({writing.literal(sidecar_path(path))}))["cudnn"]   # {DESCRIPTOR}'
        )
    others = f" ({len(rnns) - 1} more: {listing(r.name for r in rnns[1:])})" if len(rnns) > 1 else ""
    framework = "pt" if etype.name == "bfloat16" else "np"  # numpy has no bfloat16
    return (
        f"import json\nfrom safetensors import safe_open\nwith safe_open({writing.literal(path)}, "
        f'"{framework}") as f:   # a weight space per RNN, by name{others}\n'
        f"    weight_space = f.get_tensor({json.dumps(rnn.name)})   # {what}\n"
        f'    descriptor = json.loads(f.metadata()[{json.dumps(rnn.name)}])["cudnn"]   # {DESCRIPTOR}'
    )


def write_bin(
    rnn: CanonicalRNN, path: Path, dtype: str, force: bool = False, progress: ByteProgress | None = None
) -> list[str]:
    etype = element_type(dtype)
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        # what verify knows it by later: its bytes read back from the page cache, hashed on the other core behind
        # the writer, a block at a time as each is written
        with open(blob_tmp, "w+b") as f, TrailingDigest(blob_tmp) as trailing:  # w+b: a kernel's map is read too

            def written(nbytes: int) -> None:
                f.flush()  # the block's bytes in the file, where the digest's reads see them
                trailing.written(f.tell())
                if progress:
                    progress(nbytes)

            warnings = write_weight_space(rnn, f, etype, written)
            f.flush()
            trailing.written(f.tell())
            written_digest = trailing.result()
        doc = describe(rnn, etype, warnings, path, digest=written_digest)
        if blob_tmp.stat().st_size != doc.weight_space.bytes:
            raise RuntimeError(f"wrote {blob_tmp.stat().st_size} bytes, the layout has {doc.weight_space.bytes}")
        side_tmp.write_text(json.dumps(dump(doc), indent=1) + "\n")
    return warnings


def write_safetensors(
    rnns: Iterable[CanonicalRNN], path: Path, dtype: str, force: bool = False, progress: ByteProgress | None = None
) -> list[str]:
    etype = element_type(dtype)
    rnns = list(rnns)
    entries = [
        _safetensors.Entry(r.name, etype, (weight_space_elements(r.spec),), _space_writer(r, etype, progress))
        for r in rnns
    ]
    calls: list[bool] = []

    def metadata(warnings: dict[str, list[str]], digests: dict[str, str]) -> dict[str, str]:
        final = bool(calls)  # the first call sizes the header (a digest's length) before the data exists
        calls.append(final)
        meta = {"format": SIDECAR_FORMAT, "rnnconv_version": __version__}
        for r in rnns:
            digest = digests.get(r.name, digest_placeholder())
            meta[r.name] = json.dumps(dump(describe(r, etype, warnings[r.name], path, final, digest)))
        return meta

    warnings = _safetensors.write(path, entries, metadata, force, digests=True)
    return [w for r in rnns for w in warnings[r.name]]


def _space_writer(rnn: CanonicalRNN, etype: ElementType, progress: ByteProgress | None) -> _safetensors.Writer:
    return lambda f: write_weight_space(rnn, f, etype, progress)


def in_memory_blob(rnn: CanonicalRNN, path: Path, kind: str) -> Blob:
    """The weight space of an RNN read from a file of another format (`path`, of file kind `kind`), in memory: what
    verify checks and diagnoses when it runs that file itself. Its source is the one the file records, if any."""
    etype = element_type(rnn.spec.dtype)
    buffer = io.BytesIO()
    write_weight_space(rnn, buffer, etype)
    words = np.frombuffer(buffer.getbuffer(), dtype=etype.storage)
    sidecar = describe(rnn, etype, [], path).model_copy(update={"source": rnn.origin or Provenance()})
    return Blob(rnn.name, rnn.spec, etype, words, sidecar, path, kind=kind, stored_as=rnn.stored_as)


def write_relayout(
    blob: Blob, placed: dict[ParamKey, int], total_bytes: int, path: Path, cudnn_version: str, force: bool = False
) -> None:
    """The blob rewritten with every tensor at the byte offset (`placed`) a GPU's cuDNN reported for it."""
    itemsize = blob.etype.itemsize
    missing = [r.key.label for r in blob.places.values() if r.key not in placed]
    if missing:
        raise BadInput(f"cuDNN reported no place for {missing[0]}, so the blob cannot be laid out its way")
    layout = LayoutInfo(
        name=REPORTED_LAYOUT_NAME,
        version=cudnn_version,
        verified_on_gpu=True,
        order=f"the offsets cudnnGetRNNWeightParams of cuDNN {cudnn_version} reported",
    )
    tensors = sorted((r.entry(itemsize, placed[r.key]) for r in blob.places.values()), key=lambda t: t.offset_bytes)
    doc = Sidecar(
        format=SIDECAR_FORMAT,
        rnnconv_version=__version__,
        name=blob.name,
        spec=blob.spec.to_model(bias_mode="double"),
        layout=layout,
        cudnn=cudnn_settings(blob.spec, blob.etype),
        weight_space=WeightSpaceInfo(elements=total_bytes // itemsize, bytes=total_bytes),
        source=blob.source,
        notes=blob.notes,
        tensors=tensors,
    )
    with atomic_outputs([path, sidecar_path(path)], force) as (blob_tmp, side_tmp):
        with open(blob_tmp, "wb") as f:  # written, not mapped: a full disk is an error, never SIGBUS
            f.truncate(total_bytes)
            for region in blob.places.values():
                f.seek(placed[region.key] // itemsize * itemsize)
                write_array(f, blob.words[region.offset : region.offset + region.size])
        doc.weight_space.digest = digest_of(blob_tmp)
        side_tmp.write_text(json.dumps(dump(doc), indent=1) + "\n")
