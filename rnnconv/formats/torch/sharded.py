"""Hugging Face's sharded checkpoints, read as one state_dict: the index (`model.safetensors.index.json`, its
`weight_map` naming each tensor's shard) and the safetensors shards beside it, each shard checked to exist and to
hold exactly the tensors the index gives it; a shard read alone, beside an index naming others, is refused naming
that index (it holds part of the checkpoint, which would read as a smaller model).

The index is untrusted: a shard's name must be a plain file name beside it (save_pretrained writes nothing else),
and the index's size and JSON are bounded. Its `metadata` (a `total_size`) is not needed and not trusted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rnnconv.errors import BadInput, cut, listing
from rnnconv.formats import _safetensors
from rnnconv.formats.probe import Probe
from rnnconv.formats.torch.wire import FOLDER_CHECKPOINTS, INDEX_ENDING, SHARD_NAME, WEIGHT_MAP, is_shard_index
from rnnconv.safeio.inputs import add_guard, json_document, regular_file, unchanged

INDEX_LIMIT = 16 << 20  # bytes: an index is names only (huggingface_hub refuses one over 10 MB)
Header = tuple[dict[str, Any], int]  # a shard's safetensors header, and where its data starts


def is_index(path: Path) -> bool:
    return is_shard_index(Probe(path))


def weight_map(index: Path) -> dict[str, Path]:
    """Each tensor's shard, as the index names it: a file beside the index."""
    size = regular_file(index)
    if size > INDEX_LIMIT:
        raise BadInput(f"{index} is {size:,} bytes, more than the index of a sharded checkpoint (names only) can be")
    with open(index, "rb") as f:
        document = json_document(f.read(INDEX_LIMIT + 1), f"{index}: the index of a sharded checkpoint")
    mapping = document.get(WEIGHT_MAP) if isinstance(document, dict) else None
    if not isinstance(mapping, dict) or not all(isinstance(shard, str) for shard in mapping.values()):
        raise BadInput(f"{index} is no index of a sharded checkpoint: its {WEIGHT_MAP} does not map names to shards")
    if not mapping:
        raise BadInput(f"{index} names no tensors (its {WEIGHT_MAP} is empty)")
    shards = {name: _beside(index, name) for name in set(mapping.values())}
    return {key: shards[name] for key, name in mapping.items()}


def _beside(index: Path, name: str) -> Path:
    """A shard's path: a plain file name in the index's folder, as save_pretrained writes it."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or ":" in name:
        raise BadInput(f"{index} names shard {cut(name)!r}, which is no plain file name: shards lie beside their index")
    return index.parent / name


def read_shards(index: Path, read: Callable[[Path, Header], dict[str, Any]]) -> dict[str, Any]:
    """Every tensor of a sharded checkpoint, each read from its shard by `read` (given the shard's checked header),
    once every shard is found to hold exactly the tensors the index gives it."""
    mapping = weight_map(index)
    given: dict[Path, set[str]] = {}
    for key, shard in mapping.items():
        given.setdefault(shard, set()).add(key)
    tensors: dict[str, Any] = {}
    for shard in sorted(given):
        if not os.path.lexists(shard):
            raise BadInput(f"{index} names shard {shard.name}, which is not beside it (the checkpoint is incomplete)")
        if Probe(shard).safetensors_metadata is None:
            raise BadInput(
                f"{index} names shard {shard.name}, which is no safetensors file: rnnconv reads sharded safetensors "
                f"checkpoints (shards torch.save wrote, older transformers' pytorch_model-*.bin, it does not: load "
                f"the model and save_pretrained it again)"
            )
        header, start = _safetensors.read_header(shard)
        add_guard(unchanged(shard))  # part of the source: one that changes while it is read commits nothing
        held = set(header) - {"__metadata__"}
        missing, foreign = sorted(given[shard] - held), sorted(held - given[shard])
        if missing:
            raise BadInput(
                f"{index} gives {shard.name} tensors it does not hold ({listing(missing)}): the index and its shards "
                f"disagree"
            )
        if foreign:
            elsewhere = [key for key in foreign if key in mapping]
            said = (
                f"which the index gives {mapping[elsewhere[0]].name}" if elsewhere else "which the index does not name"
            )
            raise BadInput(f"{shard.name} holds {listing(foreign)}, {said}: the index {index} and its shards disagree")
        tensors.update(read(shard, (header, start)))
    return tensors


def check_alone(path: Path) -> None:
    """A shard read alone is refused: it holds part of a checkpoint, whose other parts its index (beside it) names, or
    which its name says has other shards."""
    for index in sorted(path.parent.glob(f"*{INDEX_ENDING}")):
        try:
            shards = {shard.name for shard in weight_map(index).values()} if is_index(index) else set()
        except BadInput:
            continue  # a damaged index beside it: not this shard's, as far as it tells
        if path.name in shards and len(shards) > 1:
            raise BadInput(
                f"{path} is one of the {len(shards)} shards of the checkpoint {index}, and holds only part of it: "
                f"convert {index} or its folder instead"
            )
    named = SHARD_NAME.match(path.name)
    if named and int(named["count"]) > 1:
        raise BadInput(
            f"{path} is, by its name, shard {int(named['number'])} of {int(named['count'])} of a sharded checkpoint, "
            f"and no index beside it names it: give the folder with the checkpoint's index "
            f"({FOLDER_CHECKPOINTS[0]}) and every shard"
        )


def in_folder(folder: Path) -> Path | None:
    """The checkpoint a save_pretrained folder holds: its index (or its one safetensors file), else None."""
    if not folder.is_dir():
        return None
    for name in FOLDER_CHECKPOINTS:
        if os.path.lexists(folder / name):
            return folder / name
    indexes = sorted(p for p in folder.glob(f"*{INDEX_ENDING}") if p.is_file() and is_index(p))
    if len(indexes) > 1:
        raise BadInput(
            f"{folder} holds the indexes of {len(indexes)} sharded checkpoints ({listing(p.name for p in indexes)}): "
            f"give the one to convert"
        )
    return indexes[0] if indexes else None
