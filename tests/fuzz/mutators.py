"""Hostile inputs for every format rnnconv reads, made from real files.

Every mutator takes the bytes of a seed file and a random generator and returns the mutated bytes (or
several files, for a blob and its sidecar); each is named, so a case says how it was made. The seeds are
the shipped fixtures, blobs rnnconv converted from them, files with payloads that would create a marker
file if any code in them ran (made by Keras and PyTorch themselves), and odd but valid files (sparse,
meta or integer tensors, scalar kernels) that PyTorch writes.
"""

from __future__ import annotations

import ast
import copy
import io
import json
import math
import os
import pickle
import pickletools
import random
import re
import struct
import warnings
import zipfile
import zlib
from typing import Any

import h5py
import numpy as np

MARKER_ENV = "RNNCONV_FUZZ_MARKER"  # payloads create the file this names, if they ever run

# --- values a hostile file may hold where a field is expected ------------------------------------

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    -(2**31),
    2**31,
    2**63,
    2**64 + 5,
    1.5,
    -0.0,
    1e308,
    "",
    "x" * 5000,
    "lstm",
    "gru",
    "float32",
    "bfloat16",
    "../../etc/passwd",
    "/dev/zero",
    "\u00e9\u4e2d\u0000",
    [],
    {},
    [1, 2, 3],
    [[1, 2], [3]],
    {"class_name": "Lambda", "config": {}},
    {"a": {"b": {"c": None}}},
    ["tanh"],
    {"name": 3},
]
DEEP = "[" * 3000 + "]" * 3000  # deeper than Python's default recursion limit


def odd_value(rng: random.Random) -> Any:
    """One of ODD_VALUES, a copy: a later round may insert into a list or map (the shared one would grow a cycle)."""
    return copy.deepcopy(rng.choice(ODD_VALUES))


def _containers(node: Any, path: tuple = ()) -> list[tuple]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.append((*path, key))
            found += _containers(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.append((*path, index))
            found += _containers(value, (*path, index))
    return found


def mutate_json_text(text: str, rng: random.Random, rounds: int = 0) -> str:
    """A JSON document with one to three of its values replaced, removed or nested absurdly deep."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return mutate_bytes(text.encode("utf-8", "surrogatepass"), rng).decode("latin-1")
    for _ in range(rounds or rng.randint(1, 3)):
        paths = _containers(doc)
        if not paths:
            return rng.choice([DEEP, "null", "[]", '"text"', "{"])
        path = rng.choice(paths)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        op = rng.random()
        if op < 0.15 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.25:
            parent[key] = "__DEEP__"
        elif op < 0.35:  # another value from the document, of another field
            other = rng.choice(paths)
            source = doc
            for step in other:
                source = source[step]
            parent[key] = json.loads(json.dumps(source))
        else:
            parent[key] = odd_value(rng)
    return json.dumps(doc).replace('"__DEEP__"', DEEP)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Byte-level damage: flips, truncation, a zeroed or duplicated range, random bytes inserted."""
    out = bytearray(data)
    op = rng.random()
    if not out or op < 0.2:
        return bytes(out[: rng.randint(0, max(len(out) - 1, 0))])
    if op < 0.6:
        for _ in range(rng.randint(1, 16)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    elif op < 0.75:
        start = rng.randrange(len(out))
        out[start : start + rng.randint(1, 4096)] = bytes(min(4096, len(out) - start))
    elif op < 0.9:
        start = rng.randrange(len(out))
        out[start:start] = out[start : start + rng.randint(1, 512)]
    else:
        start = rng.randrange(len(out))
        out[start:start] = rng.randbytes(rng.randint(1, 64))
    return bytes(out)


# --- HDF5 -----------------------------------------------------------------------------------------


def _h5_objects(h5: h5py.File) -> tuple[list[str], list[str]]:
    groups, datasets = [], []

    def visit(name: str, obj: Any) -> None:
        (groups if isinstance(obj, h5py.Group) else datasets).append(name)

    h5.visititems(visit)
    return groups, datasets


def mutate_hdf5(data: bytes, rng: random.Random) -> bytes:
    """Structural damage to an HDF5 file through h5py: wrong kinds, types, shapes, attributes, link cycles."""
    buffer = io.BytesIO(data)
    try:
        with h5py.File(buffer, "r+") as h5:
            groups, datasets = _h5_objects(h5)
            op = rng.choice(
                [
                    "attr_json",
                    "attr_garbage",
                    "swap_kind",
                    "dtype",
                    "shape",
                    "soft_cycle",
                    "hard_cycle",
                    "external",
                    "delete",
                    "weight_names",
                    "huge",
                ]
            )
            target_ds = rng.choice(datasets) if datasets else None
            target_group = h5[rng.choice(groups)] if groups else h5
            if op == "attr_json" and "model_config" in h5.attrs:
                text = h5.attrs["model_config"]
                text = text.decode() if isinstance(text, bytes) else str(text)
                h5.attrs["model_config"] = mutate_json_text(text, rng)
            elif op == "attr_garbage":
                holder = rng.choice([h5, target_group] + ([h5[target_ds]] if target_ds else []))
                name = rng.choice(list(holder.attrs) or ["dtype"])
                holder.attrs[name] = rng.choice(
                    [np.array([b"\xff\xfe\x80"]), np.arange(5), 3.5, "x" * 70000, np.array([], dtype="S1"), b"\x00"]
                )
            elif op == "swap_kind" and target_ds:
                del h5[target_ds]
                h5.create_group(target_ds)
            elif op == "swap_kind" and groups:
                name = rng.choice(groups)
                del h5[name]
                h5[name] = np.arange(4.0)
            elif op == "dtype" and target_ds:
                shape = h5[target_ds].shape
                del h5[target_ds]
                kind = rng.choice(["S8", "bool", "complex64", "int32", "uint8", "float16"])
                h5.create_dataset(target_ds, shape=shape, dtype=kind)
            elif op == "shape" and target_ds:
                del h5[target_ds]
                h5[target_ds] = rng.choice(
                    [
                        np.float32(1.0),
                        np.zeros(3, np.float32),
                        np.zeros((2, 3, 4), np.float32),
                        np.zeros((0, 5), np.float32),
                        np.zeros((5, 0), np.float32),
                    ]
                )
            elif op == "huge" and target_ds:
                del h5[target_ds]
                h5.create_dataset(target_ds, shape=(2**31, 2**20), dtype="f4", chunks=(1, 1024))
            elif op == "soft_cycle":
                target_group[f"loop{rng.randrange(99)}"] = h5py.SoftLink(target_group.name)
                target_group["a_link"] = h5py.SoftLink(target_group.name + "/b_link")
                target_group["b_link"] = h5py.SoftLink(target_group.name + "/a_link")
            elif op == "hard_cycle":
                target_group[f"again{rng.randrange(99)}"] = target_group
            elif op == "external" and target_ds:
                del h5[target_ds]
                h5[target_ds] = h5py.ExternalLink(rng.choice(["/dev/zero", "/nonexistent.h5", "/proc/self/mem"]), "/x")
            elif op == "delete" and (datasets or groups):
                del h5[rng.choice(datasets + groups)]
            elif op == "weight_names":
                holder = target_group
                holder.attrs["weight_names"] = rng.choice(
                    [
                        np.array([b"kernel:0", b"\xff\xfe"]),
                        np.arange(3),
                        np.array([b"../" * 50]),
                        np.array([], dtype="S1"),
                    ]
                )
            else:
                h5.attrs["layer_names"] = np.array([b"\xc3\x28", b"model_weights"])
    except (OSError, ValueError, KeyError, RuntimeError, TypeError):
        return mutate_bytes(data, rng)
    return buffer.getvalue()


# --- Keras model configs: every level damaged, Sequential in its list and object forms ----------------------

# What a damaged config holds where Keras writes an object (a layer's config, a cell, a wrapped layer, a model's
# config): none of them is an object, nor a list of layer objects (the old Sequential form), nor null (absent).
NON_OBJECTS: list[Any] = [[1, 2], 7, -1.5, "lstm", True, [["tanh"]], [None], "", 0]


def _non_object(rng: random.Random) -> Any:
    return json.loads(json.dumps(rng.choice(NON_OBJECTS)))  # a copy: a later round may insert into it


def _keras_models_and_layers(model: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every model of a config (the top one and those nested, at any depth) and every layer entry in them."""
    models, layers, pending = [], [], [model]
    while pending:
        node = pending.pop()
        models.append(node)
        config = node.get("config")
        entries = config if isinstance(config, list) else config.get("layers", []) if isinstance(config, dict) else []
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            layers.append(entry)
            inner = entry.get("config")
            if isinstance(inner, list) or (isinstance(inner, dict) and isinstance(inner.get("layers"), list)):
                pending.append(entry)
    return models, layers


def _held_objects(cls: Any, config: Any) -> list[tuple[dict[str, Any], str]]:
    """(holder, key) of every object a layer's config holds that rnnconv reads: an RNN's cell, a Bidirectional's
    layers, and their configs, at any depth (an RNN inside a Bidirectional)."""
    found: list[tuple[dict[str, Any], str]] = []
    if not isinstance(config, dict):
        return found
    for key in _WRAPPED.get(str(cls), ()):
        held = config.get(key)
        if isinstance(held, dict):
            found.append((config, key))
            if isinstance(held.get("config"), dict):
                found.append((held, "config"))
                found += _held_objects(held.get("class_name"), held["config"])
    return found


_WRAPPED = {"RNN": ("cell",), "Bidirectional": ("layer", "backward_layer")}


def mutate_keras_config(config: dict[str, Any], rng: random.Random) -> bool:
    """Damage one level of a Keras model config in place, and say so (True: it must be refused); or turn a
    Sequential between its list form (Keras 1 to 2.1) and its object form (False: it reads as before)."""
    models, layers = _keras_models_and_layers(config)
    sequentials = [m for m in models if m.get("class_name") == "Sequential"]
    holders = [pair for entry in layers for pair in _held_objects(entry.get("class_name"), entry.get("config"))]
    entry_lists = [
        m["config"] if isinstance(m["config"], list) else m["config"]["layers"]
        for m in models
        if isinstance(m.get("config"), list)
        or (isinstance(m.get("config"), dict) and isinstance(m["config"].get("layers"), list))
    ]
    ops = ["model_config"] + ["layer_config"] * bool(layers) + ["layers", "entry"] * bool(entry_lists)
    ops += ["wrapped"] * 2 * bool(holders) + ["swap"] * 2 * bool(sequentials)
    op = rng.choice(ops)
    if op == "swap":
        model = rng.choice(sequentials)
        inner = model["config"]
        if isinstance(inner, list):
            model["config"] = {"name": str(model.get("name", "sequential_swapped")), "layers": inner}
        elif isinstance(inner, dict) and isinstance(inner.get("layers"), list):
            model["config"] = inner["layers"]
        return False
    if op == "wrapped":
        holder, key = rng.choice(holders)
        holder[key] = _non_object(rng)
    elif op == "layer_config":
        rng.choice(layers)["config"] = _non_object(rng)
    elif op == "layers":
        model = rng.choice([m for m in models if isinstance(m.get("config"), dict)] or [config])
        model["config"] = {"layers": None} if not isinstance(model.get("config"), dict) else model["config"]
        model["config"]["layers"] = rng.choice([7, "layers", {"class_name": "LSTM"}, {}])
    elif op == "entry":
        entries = rng.choice(entry_lists)
        named = [e for e in entries if isinstance(e, dict)]
        if named and rng.random() < 0.5:
            rng.choice(named)["class_name"] = rng.choice([None, 5, [], {"a": 1}])
        else:
            entries.insert(rng.randint(0, len(entries)), _non_object(rng))
    else:
        config["config"] = _non_object(rng)
    return True


def mutate_keras_config_file(name: str, data: bytes, rng: random.Random) -> tuple[bytes, bool]:
    """A Keras model (.h5 with a model_config, or .keras) with its config mutated by `mutate_keras_config` one to
    three times; True when the result must be refused."""

    def mutated(text: str) -> tuple[str, bool]:
        config = json.loads(text)
        refuse = False
        for _ in range(rng.choice([1, 1, 2, 3])):
            refuse = mutate_keras_config(config, rng) or refuse
        return json.dumps(config), refuse

    if name.endswith(".keras"):
        members = _members(data)
        refuse = False
        for index, (info, payload) in enumerate(members):
            if info.filename == "config.json":
                text, refuse = mutated(payload.decode())
                members[index] = (info, text.encode())
        return _rezip(members), refuse
    buffer = io.BytesIO(data)
    with h5py.File(buffer, "r+") as h5:
        text = h5.attrs["model_config"]
        text, refuse = mutated(text.decode() if isinstance(text, bytes) else str(text))
        h5.attrs["model_config"] = text
    return buffer.getvalue(), refuse


# --- zip archives (.keras, torch.save) -------------------------------------------------------------


def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info, archive.read(info)) for info in archive.infolist()]


def _rezip(members: list[tuple[zipfile.ZipInfo, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression) as archive:
        warnings.simplefilter("ignore")  # a name twice: what the mutator meant
        for info, payload in members:
            info.compress_type = compression
            archive.writestr(info, payload)
    return out.getvalue()


def _patch_headers(data: bytes, rng: random.Random) -> bytes:
    """Damage a zip's headers: compression method, CRC, sizes, or a name that is not UTF-8."""
    out = bytearray(data)
    local = [i for i in range(len(out) - 4) if out[i : i + 4] == b"PK\x03\x04"]
    central = [i for i in range(len(out) - 4) if out[i : i + 4] == b"PK\x01\x02"]
    field = rng.choice(["method", "crc", "size", "name", "flags"])
    for start, base in ([(rng.choice(local), 0)] if local else []) + ([(rng.choice(central), 2)] if central else []):
        if field == "method":
            struct.pack_into("<H", out, start + 8 + base, rng.choice([1, 12, 14, 93, 99, 0xFFFF]))
        elif field == "crc":
            struct.pack_into("<I", out, start + 14 + base, rng.getrandbits(32))
        elif field == "size":
            struct.pack_into("<I", out, start + 22 + base, rng.choice([0, 1, 2**31, 2**32 - 1]))
        elif field == "flags":
            struct.pack_into("<H", out, start + 6 + base, 0x0800 | rng.getrandbits(4))
        else:
            name_at = start + (30 if base == 0 else 46)
            if name_at < len(out):
                out[name_at] = 0xFF
    return bytes(out)


def mutate_keras_archive(data: bytes, rng: random.Random) -> bytes:
    members = _members(data)
    op = rng.choice(["config", "weights", "headers", "bomb", "deflated", "drop", "bytes"])
    if op == "config":
        members = [
            (
                i,
                mutate_json_text(p.decode(), rng).encode("utf-8", "surrogatepass")
                if i.filename == "config.json"
                else p,
            )
            for i, p in members
        ]
    elif op == "weights":
        members = [(i, mutate_hdf5(p, rng) if i.filename.endswith(".h5") else p) for i, p in members]
    elif op == "headers":
        return _patch_headers(data, rng)
    elif op == "bomb":  # a small member that declares itself huge once inflated
        bomb = zipfile.ZipInfo("model.weights.h5")
        members = [(i, p) for i, p in members if i.filename != "model.weights.h5"]
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for info, payload in members:
                archive.writestr(info, payload)
            with archive.open(bomb, "w", force_zip64=True) as sink:
                zeros = bytes(1 << 20)
                for _ in range(rng.choice([64, 256, 1024])):
                    sink.write(zeros)
        return out.getvalue()
    elif op == "deflated":
        return _rezip(members, zipfile.ZIP_DEFLATED)
    elif op == "drop":
        members.pop(rng.randrange(len(members)))
    else:
        return mutate_bytes(data, rng)
    return _rezip(members)


# --- the Keras rescue (archives of a Keras before 3.3.3, rescued whole) ----------------------------------------

RESCUE_VALUES = [None, -1, 0, 2**40, 1.5, "x", "", [], {}, [None], [[[[[[[[]]]]]]]], True, "hard_sigmoid", "gelu"]
RESCUE_KEYS = [
    "units", "activation", "recurrent_activation", "use_bias", "return_sequences", "go_backwards", "return_state",
    "stateful", "time_major", "reset_after", "unit_forget_bias", "dtype", "name", "merge_mode", "batch_shape",
    "batch_input_shape", "input_dim", "output_dim", "mask_zero", "rate", "kernel_initializer", "unroll", "lora_rank",
]  # fmt: skip
RESCUE_CLASSES = ["Dense", "LSTM", "GRU", "SimpleRNN", "Dropout", "Bidirectional", "Conv1D", "Lambda", "InputLayer"]
RESCUE_VERSIONS = ["3.15.1", "3.3.2", "3.3.3", "2.15.0-tf", "2.13.1", "1.2.2", "x", "", 7, None, "9" * 300]


def mutate_keras_rescue(data: bytes, rng: random.Random) -> bytes:
    """An old .keras archive damaged where its rescue reads it: its config's layers (classes, settings, nodes, the
    model's ends), its weights' variables (gone, reshaped, retyped, extra), its metadata's Keras version, or the
    zip itself (the archive mutator's)."""
    op = rng.choice(["config", "config", "config", "weights", "weights", "metadata", "archive"])
    if op == "archive":
        return mutate_keras_archive(data, rng)
    members = _members(data)
    for index, (info, payload) in enumerate(members):
        if op == "config" and info.filename == "config.json":
            config = json.loads(payload)
            for _ in range(rng.choice([1, 1, 2, 3])):
                _mutate_rescue_config(config, rng)
            members[index] = (info, json.dumps(config).encode())
        elif op == "weights" and info.filename == "model.weights.h5":
            members[index] = (info, _mutate_rescue_weights(payload, rng))
        elif op == "metadata" and info.filename == "metadata.json":
            members[index] = (info, json.dumps({"keras_version": rng.choice(RESCUE_VERSIONS)}).encode())
    return _rezip(members)


def _mutate_rescue_config(config: dict[str, Any], rng: random.Random) -> None:
    _, layers = _keras_models_and_layers(config)
    inner = [held for entry in layers for held, key in _held_objects(entry.get("class_name"), entry.get("config"))]
    entries = [e for e in layers + inner if isinstance(e, dict)]
    entry = rng.choice(entries) if entries else config
    cfg = entry.get("config") if isinstance(entry.get("config"), dict) else entry
    model = config.get("config") if isinstance(config.get("config"), dict) else config
    op = rng.choice(["set", "set", "set", "drop", "class", "module", "nodes", "ends", "order", "top"])
    if op == "set":
        cfg[rng.choice(RESCUE_KEYS)] = rng.choice(RESCUE_VALUES)
    elif op == "drop" and cfg:
        del cfg[rng.choice(sorted(cfg))]
    elif op == "class":
        entry["class_name"] = rng.choice(RESCUE_CLASSES)
    elif op == "module":
        entry[rng.choice(["module", "registered_name"])] = rng.choice(["keras.layers", "my.layers", None, "x>y", 3])
    elif op == "nodes":
        entry["inbound_nodes"] = rng.choice([[], [[["nowhere", 0, 0, {}]]], [[["input_2", 0, 0, {"mask": 1}]]], 5])
    elif op == "ends":
        model[rng.choice(["input_layers", "output_layers"])] = rng.choice([[], ["head", 0, 0], [["x", 0, 0]], "y"])
    elif op == "order" and isinstance(model.get("layers"), list) and len(model["layers"]) > 1:
        rng.shuffle(model["layers"])
    else:
        config[rng.choice(["class_name", "module", "compile_config", "build_config"])] = rng.choice(RESCUE_VALUES)


def _mutate_rescue_weights(data: bytes, rng: random.Random) -> bytes:
    buffer = io.BytesIO(data)
    with h5py.File(buffer, "r+") as h5:
        _, datasets = _h5_objects(h5)
        name = rng.choice([d for d in datasets if "/vars/" in d] or datasets)
        values = h5[name][...]
        op = rng.choice(["delete", "shape", "dtype", "extra", "nan", "structure"])
        if op == "structure":
            return mutate_hdf5(data, rng)
        del h5[name]
        if op == "shape":
            h5[name] = np.zeros(rng.choice([(), (1,), values.shape[::-1], (*values.shape, 1), (0, 3)]), np.float32)
        elif op == "dtype":
            h5[name] = values.astype(rng.choice([np.float16, np.float64, np.int32, np.uint8, np.complex64, "S4"]))
        elif op == "extra":
            h5[name] = values
            h5[name.rsplit("/", 1)[0] + "/" + rng.choice(["9", "x", "3"])] = values
        elif op == "nan":
            h5[name] = np.where(np.arange(values.size).reshape(values.shape) == 0, np.nan, values).astype(values.dtype)
    return buffer.getvalue()


def _pickle_ops(payload: bytes) -> list[tuple[int, int]]:
    """(start, end) byte spans of the opcodes of a pickle."""
    spans, previous = [], None
    try:
        for _, _, position in pickletools.genops(payload):
            if previous is not None:
                spans.append((previous, position))
            previous = position
    except Exception:
        pass
    if previous is not None:
        spans.append((previous, len(payload)))
    return spans


GLOBALS = [
    b"os\nsystem\n",
    b"builtins\neval\n",
    b"subprocess\nPopen\n",
    b"torch\nload\n",
    b"torch._utils\n_rebuild_parameter\n",
    b"collections\nOrderedDict\n",
    b"builtins\nsetattr\n",
]


def mutate_pickle(payload: bytes, rng: random.Random) -> bytes:
    """Opcode-level damage: an opcode dropped, repeated or cut off, a global renamed, a STOP moved."""
    spans = _pickle_ops(payload)
    if not spans:
        return mutate_bytes(payload, rng)
    start, end = rng.choice(spans)
    op = rng.random()
    if op < 0.25:
        return payload[:start] + payload[end:]
    if op < 0.4:
        return payload[:end] + payload[start:end] + payload[end:]
    if op < 0.5:
        return payload[:start]
    if op < 0.6:
        return payload[:start] + b"." + payload[end:]
    if op < 0.8:
        return payload[:start] + b"c" + rng.choice(GLOBALS) + payload[start:]
    return mutate_bytes(payload, rng)


class _WritesMarker:
    """Unpickling this creates the marker file: proof that a file's code ran."""

    def __init__(self, how: str):
        self.how = how

    def __reduce__(self) -> tuple:
        marker = os.environ.get(MARKER_ENV, "/tmp/rnnconv-fuzz-marker")
        if self.how == "open":
            return (open, (marker, "w"))
        if self.how == "system":
            return (os.system, (f"touch {marker}",))
        return (eval, (f"open({marker!r}, 'w')",))


def code_pickle(rng: random.Random, protocol: int | None = None) -> bytes:
    payload = {"weight_ih_l0": _WritesMarker(rng.choice(["open", "system", "eval"]))}
    return pickle.dumps(payload, protocol=protocol or rng.choice([0, 2, 4, 5]))


def mutate_torch_zip(data: bytes, rng: random.Random) -> bytes:
    members = _members(data)
    op = rng.choice(["pickle", "pickle", "payload", "storage", "headers", "bytes"])
    if op == "pickle":
        members = [(i, mutate_pickle(p, rng) if i.filename.endswith("data.pkl") else p) for i, p in members]
    elif op == "payload":
        members = [(i, code_pickle(rng) if i.filename.endswith("data.pkl") else p) for i, p in members]
    elif op == "storage":
        storages = [k for k, (i, _) in enumerate(members) if "/data/" in i.filename]
        if storages:
            k = rng.choice(storages)
            info, payload = members[k]
            members[k] = (
                info,
                payload[: rng.randrange(max(len(payload), 1))]
                if rng.random() < 0.7
                else payload + bytes(rng.randint(1, 99)),
            )
    elif op == "headers":
        return _patch_headers(data, rng)
    else:
        return mutate_bytes(data, rng)
    return _rezip(members)


# --- whole models: torch.save(model), TorchScript archives ----------------------------------------------------

_RNN_CLASSES = [b"LSTM", b"GRU", b"RNN", b"LSTMCell", b"GRUCell", b"RNNCell", b"Module", b"Linear"]
_SETTINGS = [b"hidden_size", b"input_size", b"num_layers", b"proj_size", b"bidirectional", b"bias", b"batch_first"]
_SETTINGS += [b"mode", b"nonlinearity", b"_parameters", b"_modules", b"weight_hh_l0", b"weight_ih_l1_reverse"]


def _mutate_module_pickle(payload: bytes, rng: random.Random) -> bytes:
    """A module tree's pickle changed where it says what a module is: a class renamed, a setting's value or key
    changed (kept the same length, so the pickle still reads), or the opcodes damaged."""
    op = rng.random()
    if op < 0.3:  # a class named by a GLOBAL opcode (protocol 2) or in TorchScript's __torch__ names
        old = rng.choice([c for c in _RNN_CLASSES if b"\n" + c + b"\n" in payload] or [b"LSTM"])
        return payload.replace(b"\n" + old + b"\n", b"\n" + rng.choice(_RNN_CLASSES) + b"\n", 1)
    if op < 0.7:
        key = rng.choice([k for k in _SETTINGS if k in payload] or _SETTINGS)
        at = payload.find(key)
        if at < 0:
            return mutate_pickle(payload, rng)
        end = at + len(key)
        if rng.random() < 0.3:  # the key itself: one letter changed
            spot = rng.randrange(at, end)
            return payload[:spot] + bytes([rng.randrange(97, 123)]) + payload[spot + 1 :]
        while end < len(payload) and payload[end : end + 1] in (b"q", b"\x94"):  # BINPUT x, MEMOIZE
            end += 2 if payload[end : end + 1] == b"q" else 1
        code = payload[end : end + 1]
        if code == b"K":  # BININT1: another small integer
            return payload[: end + 1] + bytes([rng.choice([0, 1, 2, 3, 7, 255])]) + payload[end + 2 :]
        if code in (b"\x88", b"\x89"):  # NEWTRUE / NEWFALSE: flipped
            return payload[:end] + (b"\x89" if code == b"\x88" else b"\x88") + payload[end + 1 :]
        if code == b"X":  # BINUNICODE: another text of the same length
            (length,) = struct.unpack("<I", payload[end + 1 : end + 5])
            text = bytes(rng.choice(b"LSTMGRUNtanhrelu_") for _ in range(min(length, 16)))
            return payload[: end + 5] + text + payload[end + 5 + len(text) :]
        return payload[:end] + rng.choice([b"N", b"K\x00", b"J\xff\xff\xff\x7f", b"\x88"]) + payload[end:]
    return mutate_pickle(payload, rng)


def mutate_torch_module(data: bytes, rng: random.Random) -> bytes:
    """torch.save(model) damaged: its module tree's pickle (_mutate_module_pickle), or as any torch zip."""
    if rng.random() < 0.3:
        return mutate_torch_zip(data, rng)
    members = _members(data)
    return _rezip([(i, _mutate_module_pickle(p, rng) if i.filename.endswith("/data.pkl") else p) for i, p in members])


_CODE_EDITS = [
    (rb"Final\[int\] = (\d+)", [b"Final[int] = 0", b"Final[int] = 7", b"Final[int] = -1", b"Final[int] = 99999999"]),
    (rb"Final\[bool\] = (True|False)", [b"Final[bool] = True", b"Final[bool] = False", b"Final[bool] = 2"]),
    (rb"Final\[str\] = \"\w+\"", [b'Final[str] = "GRU"', b'Final[str] = "RNN_TANH"', b"Final[str] = x"]),
    (
        rb"torch\.(lstm|gru|rnn_tanh|rnn_relu)\(",
        [b"torch.lstm(", b"torch.gru(", b"torch.rnn_tanh(", b"torch.rnn_relu("],
    ),
    (rb", (True|False|\d+)(, |\))", [b", 7, ", b", False, ", b", x, ", b")"]),
    (rb"^class \w+", [b"class Other", b"klass LSTM"]),
]


def _mutate_code(code: bytes, rng: random.Random) -> bytes:
    """TorchScript source changed where it says what an RNN is, or cut, or made no text."""
    op = rng.random()
    if op < 0.7:
        pattern, choices = rng.choice(_CODE_EDITS)
        spans = [m.span() for m in re.finditer(pattern, code, re.M)]
        if spans:
            start, end = rng.choice(spans)
            return code[:start] + rng.choice(choices) + code[end:]
    if op < 0.8:
        return code[: rng.randrange(len(code) + 1)]
    if op < 0.9:
        return code + b"\xff\xfe" * rng.randint(1, 50)
    return mutate_bytes(code, rng)


def mutate_torchscript(data: bytes, rng: random.Random) -> bytes:
    """A TorchScript archive damaged: its code (_mutate_code), its module tree's pickle, its constants, a member
    gone, or as any torch zip."""
    members = _members(data)
    op = rng.random()
    if op < 0.4:
        code = [k for k, (i, _) in enumerate(members) if i.filename.endswith(".py") and "/code/" in i.filename]
        if code:
            k = rng.choice(code)
            members[k] = (members[k][0], _mutate_code(members[k][1], rng))
            return _rezip(members)
    if op < 0.65:
        return _rezip(
            [(i, _mutate_module_pickle(p, rng) if i.filename.endswith("/data.pkl") else p) for i, p in members]
        )
    if op < 0.75:
        return _rezip([(i, mutate_pickle(p, rng) if i.filename.endswith("constants.pkl") else p) for i, p in members])
    if op < 0.85:
        del members[rng.randrange(len(members))]
        return _rezip(members)
    return mutate_torch_zip(data, rng)


def mutate_pt2(data: bytes, rng: random.Random) -> bytes:
    """A torch.export archive damaged: its graph's or a config's JSON (values replaced, removed, nested deep), a weight
    file cut or grown, a tensor marked pickled, its sample inputs or a weight made a code payload, headers, bytes."""
    members = _members(data)
    op = rng.choice(["graph", "graph", "config", "weight", "pickled", "payload", "headers", "bytes"])
    pick = {
        "graph": lambda n: n.endswith("/models/model.json"),
        "config": lambda n: n.endswith("_config.json"),
        "weight": lambda n: "/data/weights/weight_" in n,
        "pickled": lambda n: n.endswith("/model_weights_config.json"),
        "payload": lambda n: n.endswith("/data/sample_inputs/model.pt") or "/data/weights/weight_" in n,
    }
    if op == "headers":
        return _patch_headers(data, rng)
    if op == "bytes" or op not in pick:
        return mutate_bytes(data, rng)
    chosen = [k for k, (info, _) in enumerate(members) if pick[op](info.filename)]
    if not chosen:
        return mutate_bytes(data, rng)
    k = rng.choice(chosen)
    info, payload = members[k]
    if op in ("graph", "config"):
        payload = mutate_json_text(payload.decode("utf-8", "replace"), rng).encode("utf-8", "surrogatepass")
    elif op == "weight":
        cut = payload[: rng.randrange(max(len(payload), 1))]
        payload = cut if rng.random() < 0.7 else payload + bytes(rng.randint(1, 99))
    elif op == "pickled":
        config = json.loads(payload)
        for entry in config.get("config", {}).values():
            entry["use_pickle"] = entry["use_pickle"] or rng.random() < 0.5
        payload = json.dumps(config).encode()
    else:
        payload = code_pickle(rng)
    members[k] = (info, payload)
    return _rezip(members)


# --- safetensors, sidecars, blobs ---------------------------------------------------------------------


def mutate_safetensors(data: bytes, rng: random.Random) -> bytes:
    if len(data) < 8:
        return mutate_bytes(data, rng)
    (length,) = struct.unpack("<Q", data[:8])
    header, rest = data[8 : 8 + length], data[8 + length :]
    op = rng.random()
    if op < 0.6:
        text = header.decode("utf-8", "replace")
        if rng.random() < 0.5:  # the weight-space description inside the metadata
            try:
                doc = json.loads(text)
                meta = doc.get("__metadata__", {})
                keys = [k for k in meta if k not in ("format", "rnnconv_version")]
                if keys:
                    key = rng.choice(keys)
                    meta[key] = mutate_json_text(meta[key], rng)
                    text = json.dumps(doc)
            except (ValueError, AttributeError, TypeError, RecursionError):
                pass
        else:
            text = mutate_json_text(text, rng)
        header = text.encode("utf-8", "surrogatepass")
        return struct.pack("<Q", len(header)) + header + rest
    if op < 0.75:
        return struct.pack("<Q", rng.choice([0, 1, len(header) + 5, 2**40, 2**64 - 1])) + data[8:]
    return mutate_bytes(data, rng)


def mutate_sidecar(blob: bytes, sidecar: str, rng: random.Random, places: dict[str, str]) -> dict[str, bytes]:
    """A blob and its sidecar, one or both damaged; the sidecar's source may name a hostile file."""
    op = rng.random()
    if op < 0.5:
        sidecar = mutate_json_text(sidecar, rng)
    elif op < 0.7:
        doc = json.loads(sidecar)
        doc.setdefault("source", {})["path"] = rng.choice(list(places.values()))
        sidecar = json.dumps(doc)
    elif op < 0.8:
        doc = json.loads(sidecar)
        doc["layout"] = {"name": "cudnn-reported", "version": "9", "order": "x"}
        for entry in doc.get("tensors", []):
            if rng.random() < 0.5:
                entry["offset_bytes"] = rng.choice([0, 4, 2**40, entry.get("offset_bytes", 0) + 4])
        sidecar = json.dumps(doc)
    else:
        blob = mutate_bytes(blob, rng)
    return {"blob.bin": blob, "blob.bin.json": sidecar.encode("utf-8", "surrogatepass")}


# --- the catalogue -------------------------------------------------------------------------------------


def _onnx_damage(model: Any, rng: random.Random) -> None:
    """One structural change to a parsed ModelProto: what a hostile or broken exporter could write."""
    graph = model.graph
    tensors = list(graph.initializer) + [
        a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
    ]
    rnns = [n for n in graph.node if n.op_type in ("LSTM", "GRU", "RNN")] or list(graph.node)
    choice = rng.randrange(14)
    if choice == 12 and graph.initializer:  # a stored tensor renamed, everywhere it is read, to a long name
        old = rng.choice(graph.initializer).name
        new = long_name(rng)
        for tensor in graph.initializer:
            tensor.name = new if tensor.name == old else tensor.name
        for node in graph.node:
            node.input[:] = [new if name == old else name for name in node.input]
        return
    if choice == 13 and graph.initializer:  # thousands of stored tensors, none read
        from onnx import numpy_helper

        for number in range(rng.choice([100, 20_000])):
            graph.initializer.append(numpy_helper.from_array(np.zeros(1, np.float32), f"unused_{number}"))
        return
    if choice == 0 and tensors:
        tensor = rng.choice(tensors)
        if tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice([0, -1, 1, 3, 2**31, 2**40, 2**62])
        else:
            tensor.dims.append(rng.choice([0, 5, 2**40]))
    elif choice == 1 and tensors:
        rng.choice(tensors).data_type = rng.randrange(0, 27)
    elif choice == 2 and tensors:
        tensor = rng.choice(tensors)
        raw = tensor.raw_data
        tensor.raw_data = raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.6 else raw + os.urandom(13)
    elif choice == 3 and tensors:  # data moved outside the file, to places it must never read
        tensor = rng.choice(tensors)
        tensor.ClearField("raw_data")
        tensor.data_location = 1
        del tensor.external_data[:]
        place = rng.choice(["../outside.bin", "/etc/passwd", "/dev/zero", "missing.bin", "", ".", "a/../../b"])
        tensor.external_data.add(key="location", value=place)
        for key in rng.sample(["offset", "length", "checksum"], rng.randrange(3)):
            tensor.external_data.add(key=key, value=str(rng.choice([-5, 0, 4, 2**63, "x"])))
    elif choice == 4 and rnns:
        node = rng.choice(rnns)
        if node.attribute:
            attribute = rng.choice(node.attribute)
            attribute.type = rng.choice([1, 2, 3, 6, 7, 8])
            attribute.i = rng.choice([0, -1, 1, 2, 2**40])
            attribute.s = rng.choice([b"forward", b"reverse", b"bidirectional", b"sideways", b"\xff"])
            attribute.f = rng.choice([0.0, -1.0, float("nan"), 1e30])
            del attribute.strings[:]
            attribute.strings.extend(rng.sample([b"Sigmoid", b"Tanh", b"Relu", b"Elu", b"x"], rng.randrange(5)))
    elif choice == 5 and rnns:
        node = rng.choice(rnns)
        name = rng.choice(["hidden_size", "direction", "activations", "clip", "layout", "linear_before_reset"])
        from onnx import helper

        try:
            attribute = helper.make_attribute(name, odd_value(rng) if rng.random() < 0.5 else 2)
        except (ValueError, TypeError):  # a value no attribute type holds
            attribute = helper.make_attribute(name, -1)
        node.attribute.append(attribute)
    elif choice == 6 and rnns:  # inputs renamed, dropped or pointed at another node's output
        node = rng.choice(rnns)
        if node.input:
            index = rng.randrange(len(node.input))
            outputs = [o for n in graph.node for o in n.output] + ["", "nowhere"]
            node.input[index] = rng.choice(outputs)
    elif choice == 7 and graph.node:  # a loop: a node reads its own output
        node = rng.choice(graph.node)
        if node.input and node.output:
            node.input[0] = node.output[0]
    elif choice == 8 and rnns:
        node = rng.choice(rnns)
        node.op_type = rng.choice(["LSTM", "GRU", "RNN", "Scan"])
    elif choice == 9 and graph.initializer:
        del graph.initializer[rng.randrange(len(graph.initializer))]
    elif choice == 10 and rnns:  # many copies: chains and listings of thousands of nodes
        graph.node.extend([rng.choice(rnns)] * rng.choice([2, 50, 3000]))
    else:
        model.ir_version = rng.choice([0, 1, 3, 99, 2**40])
        if model.opset_import:
            model.opset_import[0].version = rng.choice([1, 6, 7, 14, 21, 999])


def mutate_onnx(data: bytes, rng: random.Random) -> bytes:
    """A protobuf model damaged in its structure (parsed and rewritten), or in its bytes."""
    import onnx

    if rng.random() < 0.25:
        return mutate_bytes(data, rng)
    model = onnx.ModelProto()
    model.ParseFromString(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        _onnx_damage(model, rng)
    return model.SerializeToString()


def _tflite_fields(data: bytes) -> list[tuple[int, int]]:
    """(position, width) of the fields of a .tflite's tables that its readers act on: every slot present in the
    model, subgraph, tensor, op, operator code, buffer and metadata tables and options, and their vectors' lengths."""
    from pathlib import Path as _Path

    from rnnconv.errors import RnnconvError
    from rnnconv.formats._flatbuffer import Flat

    found: list[tuple[int, int]] = []
    try:
        flat = Flat(_Path("seed"), len(data), data)
        model = flat.root()
        tables = [model, *model.tables(1), *model.tables(4), *model.tables(6)]
        for graph in model.tables(2):
            tables.append(graph)
            tables += graph.tables(0)
            for op in graph.tables(3):
                tables.append(op)
                options = op.table(4)
                if options is not None:
                    tables.append(options)
        for table in tables:
            for slot in range(16):
                pos = table._field(slot)
                if pos is not None:
                    found.append((pos, 4 if pos + 4 <= len(data) else 1))
                    target = pos + int.from_bytes(data[pos : pos + 4], "little")
                    if target + 4 <= len(data):
                        found.append((target, 4))  # a vector's length, when the field is an offset
    except (RnnconvError, IndexError, ValueError):
        pass
    return found


def mutate_tflite(data: bytes, rng: random.Random) -> bytes:
    """A .tflite damaged where its parser looks: a table field or a vector's length set to an odd value (0, -1,
    huge, a little off, another field's value, a float 0 that lifts a clip), the file cut, a region copied over, or
    an offset pointed at a string, vector or table of its own (`graft_tflite`)."""
    if rng.random() < 0.3:
        return graft_tflite(data, rng)
    return mutate_flatbuffer(data, _tflite_fields(data), rng)


def _pte_fields(data: bytes) -> list[tuple[int, int]]:
    """(position, width) of the fields of an ExecuTorch program that its reader acts on: the extended header's, and
    every slot present in the program, plan, value, tensor, operator, delegate and segment tables, and their vectors'
    lengths."""
    from pathlib import Path as _Path

    from rnnconv.errors import RnnconvError
    from rnnconv.formats._flatbuffer import Flat

    found: list[tuple[int, int]] = [(12, 4), (16, 8), (24, 8), (32, 8)]  # the extended header: length, sizes
    try:
        flat = Flat(_Path("seed"), len(data), data)
        program = flat.root()
        tables = [program, *program.tables(2), *program.tables(4)]
        if program.table(5) is not None:
            tables.append(program.table(5))
        for plan in program.tables(1):
            tables += [plan, *plan.tables(6), *plan.tables(7)]
            for value in plan.tables(2):
                tables.append(value)
                tensor = value.table(1) if value.scalar(0, "u8", 0) == 5 else None
                if tensor is not None:
                    tables += [tensor, *[t for t in (tensor.table(6), tensor.table(9)) if t is not None]]
        for table in tables:
            for slot in range(12):
                pos = table._field(slot)
                if pos is not None:
                    found.append((pos, 4 if pos + 4 <= len(data) else 1))
                    target = pos + int.from_bytes(data[pos : pos + 4], "little")
                    if target + 4 <= len(data):
                        found.append((target, 4))  # a vector's length, when the field is an offset
    except (RnnconvError, IndexError, ValueError):
        pass
    return found


def mutate_pte(data: bytes, rng: random.Random) -> bytes:
    """An ExecuTorch program damaged where its reader looks, as `mutate_tflite` damages a .tflite: its extended
    header, a table's field or a vector's length set to an odd value, the file cut, a region copied over."""
    return mutate_flatbuffer(data, _pte_fields(data), rng)


def mutate_flatbuffer(data: bytes, fields: list[tuple[int, int]], rng: random.Random) -> bytes:
    """A flatbuffer's `fields` (position, width) set to odd values, the file cut, or a region copied over."""
    out = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        choice = rng.random()
        if fields and choice < 0.75:
            pos, width = rng.choice(fields)
            current = int.from_bytes(out[pos : pos + width], "little")
            value = rng.choice(
                [
                    0,
                    1,
                    2**32 - 1,
                    2**31 - 1,
                    2**31,
                    current + rng.randint(-8, 8),
                    rng.getrandbits(32),
                    int.from_bytes(out[rng.choice(fields)[0] :][:4], "little"),
                    len(data) - pos,
                    len(data),
                ]
            ) % (1 << (8 * width))
            out[pos : pos + width] = value.to_bytes(width, "little")
        elif choice < 0.85:
            out = out[: rng.randint(0, len(out))]
        else:
            start, length = rng.randrange(len(out)), rng.randint(1, 64)
            source = rng.randrange(len(out))
            out[start : start + length] = out[source : source + length]
    return bytes(out)


def mutate_file(name: str, data: bytes, rng: random.Random) -> bytes:
    """A seed file damaged by the mutator of its kind (and now and then byte-level damage alone)."""
    if rng.random() < 0.15:
        return mutate_bytes(data, rng)
    if name.endswith(".keras"):
        return mutate_keras_archive(data, rng)
    if name.endswith((".h5", ".hdf5")):
        return mutate_hdf5(data, rng)
    if name.endswith(".safetensors"):
        return mutate_safetensors(data, rng)
    if name.endswith(".onnx"):
        return mutate_onnx(data, rng)
    if name.endswith(".tflite"):
        return mutate_tflite(data, rng)
    if name.endswith(".pte"):
        return mutate_pte(data, rng)
    if name.endswith(".pt2"):
        return mutate_pt2(data, rng)
    if data.startswith(b"PK\x03\x04") and "torch_kept" in name:  # a whole model: TorchScript, torch.save(model)
        return mutate_torchscript(data, rng) if "seq2seq" in name else mutate_torch_module(data, rng)
    if data.startswith(b"PK\x03\x04"):
        return mutate_torch_zip(data, rng)
    return mutate_pickle(data, rng)


def hash_seed(text: str) -> int:
    return zlib.crc32(text.encode())


# --- TF1 checkpoints (tensor bundles) -------------------------------------------------------------------


def _sstable_blocks(index: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every block of an unmutated SSTable: the data blocks the index block lists, the
    index block and the metaindex block."""

    def varint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = index[pos]
            value, pos, shift = value | (byte & 0x7F) << shift, pos + 1, shift + 7
            if byte < 0x80:
                return value, pos

    footer = len(index) - 48
    meta_offset, pos = varint(footer)
    meta_size, pos = varint(pos)
    index_offset, pos = varint(pos)
    index_size, _ = varint(pos)
    blocks = [(meta_offset, meta_size), (index_offset, index_size)]
    restarts = int.from_bytes(index[index_offset + index_size - 4 : index_offset + index_size], "little")
    pos, end = index_offset, index_offset + index_size - 4 - 4 * restarts
    while pos < end:  # index entries: shared, unshared, value length, key delta, value (a block handle)
        _, pos = varint(pos)
        unshared, pos = varint(pos)
        value_size, pos = varint(pos)
        value = pos + unshared
        offset, after = varint(value)
        size, _ = varint(after)
        blocks.append((offset, size))
        pos = value + value_size
    return blocks


def mutate_tensor_bundle(files: dict[str, bytes], rng: random.Random) -> dict[str, bytes]:
    """A TF1 checkpoint (X.index, X.data-...) damaged: a block of the index changed and its crc32c made right
    again (so the reader's later checks are reached), the footer or a trailer damaged, or the data file hit."""
    index_name = next(n for n in files if n.endswith(".index"))
    data_name = next(n for n in files if ".data-" in n)
    out = dict(files)
    choice = rng.random()
    if choice < 0.2:
        out[data_name] = mutate_bytes(files[data_name], rng)
        return out
    if choice < 0.35:
        out[index_name] = mutate_bytes(files[index_name], rng)
        return out
    index = bytearray(files[index_name])
    offset, size = rng.choice(_sstable_blocks(bytes(index)))
    for _ in range(rng.randint(1, 6)):  # same-length damage: the other blocks stay where the handles say
        where = offset + rng.randrange(max(size, 1))
        index[where] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    if rng.random() < 0.9:  # seal the block again, so the damage reaches the entries, not the checksum
        import google_crc32c

        crc = google_crc32c.value(bytes(index[offset : offset + size + 1]))
        masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        index[offset + size + 1 : offset + size + 5] = masked.to_bytes(4, "little")
    out[index_name] = bytes(index)
    return out


def mutate_meta_graph(files: dict[str, bytes], rng: random.Random) -> dict[str, bytes]:
    """A TF1 checkpoint's .meta graph damaged where the forget bias is read: the Const an LSTM cell adds to its f gate
    given another value (NaN and infinities among them), the Add or Split renamed or rewired to another output (same
    length: the protobuf stays well formed), bytes hit or cut, or the graph gone."""
    meta_name = next(n for n in files if n.endswith(".meta"))
    meta = bytearray(files[meta_name])
    out = dict(files)
    choice = rng.random()
    if choice < 0.1:
        del out[meta_name]
        return out
    if choice < 0.3:
        out[meta_name] = mutate_bytes(bytes(meta), rng)
        return out
    if choice < 0.65:  # a scalar float32 Const's value: float_val, field 5, packed, 4 bytes
        places = [m.start() + 2 for m in re.finditer(re.escape(b"\x2a\x04"), bytes(meta))]
        if places:
            value = rng.choice([0.0, -1.0, 3.5, 1e30, float("nan"), float("inf"), rng.uniform(-5, 5)])
            for where in rng.sample(places, min(len(places), rng.randint(1, 3))):
                meta[where : where + 4] = struct.pack("<f", value)
        out[meta_name] = bytes(meta)
        return out
    swaps = [(b"split:output:2", b"split:output:1"), (b"split:2", b"split:3"), (b"AddV2", b"MulV2"),
             (b"AddV2", b"Add\x00\x00"), (b"Split", b"Splat"), (b"While", b"Whale"), (b"Const", b"Konst")]  # fmt: skip
    old, new = rng.choice(swaps)
    places = [m.start() for m in re.finditer(re.escape(old), bytes(meta))]
    for where in rng.sample(places, min(len(places), rng.randint(1, 2))):
        meta[where : where + len(old)] = new
    out[meta_name] = bytes(meta)
    return out


# --- ONNX subgraphs, computed weights, quantized and unrolled RNNs ----------------------------------------

RNN_OP_TYPES = ("LSTM", "GRU", "RNN", "DynamicQuantizeLSTM")
HUGE_INTS = [-(2**63), -(2**31), -5, -1, 0, 1, 2, 3, 7, 2**31, 2**62, 10**6]


def _graphs(graph: Any, depth: int = 0) -> list[Any]:
    """A graph and its subgraphs (If branches, Loop and Scan bodies), a few levels deep."""
    found = [graph]
    if depth < 8:
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    found += _graphs(attribute.g, depth + 1)
                for body in attribute.graphs:
                    found += _graphs(body, depth + 1)
    return found


def _int64_constant(graph: Any, name: str, values: list[int]) -> str:
    from onnx import helper

    tensor = helper.make_tensor(f"{name}_value", 7, [len(values)], values)
    graph.node.insert(0, helper.make_node("Constant", [], [name], value=tensor))
    return name


def _weight_chain(graph: Any, source: str, rng: random.Random, tag: str) -> str:
    """Nodes computing a hostile value from `source`; returns the name of the result."""
    from onnx import helper

    kind = rng.randrange(9)
    nodes, current = [], source
    if kind == 0:  # doubling by Concat: 2**k copies
        for i in range(rng.choice([3, 20, 40, 62])):
            nodes.append(
                helper.make_node("Concat", [current, current], [f"{tag}_c{i}"], axis=rng.choice([0, 0, 1, -1]))
            )
            current = f"{tag}_c{i}"
    elif kind == 1:  # many copies at once
        count = rng.choice([2, 100, 5000])
        nodes.append(helper.make_node("Concat", [current] * count, [f"{tag}_many"], axis=0))
        current = f"{tag}_many"
    elif kind == 2:  # a deep chain of no-ops
        zero = _int64_constant(graph, f"{tag}_zero", [0])
        for i in range(rng.choice([50, 2000, 20000])):
            op = ("Identity", "Unsqueeze", "Squeeze")[i % 3]
            nodes.append(helper.make_node(op, [current] if op == "Identity" else [current, zero], [f"{tag}_d{i}"]))
            current = f"{tag}_d{i}"
    elif kind == 3:  # shapes out of reach
        dims = [rng.choice(HUGE_INTS) for _ in range(rng.choice([1, 3, 6, 40]))]
        shape = _int64_constant(graph, f"{tag}_shape", dims)
        nodes.append(helper.make_node("Reshape", [current, shape], [f"{tag}_r"], allowzero=rng.choice([0, 1])))
        current = f"{tag}_r"
    elif kind == 4:  # rank explosion
        axes = _int64_constant(graph, f"{tag}_axes", list(range(rng.choice([5, 60, 200]))))
        nodes.append(helper.make_node("Unsqueeze", [current, axes], [f"{tag}_u"]))
        current = f"{tag}_u"
    elif kind == 5:  # slices, gathers and splits of odd extents
        starts = _int64_constant(graph, f"{tag}_s", [rng.choice(HUGE_INTS)])
        ends = _int64_constant(graph, f"{tag}_e", [rng.choice(HUGE_INTS)])
        axes = _int64_constant(graph, f"{tag}_a", [rng.choice([-4, -1, 0, 1, 2, 3, 9])])
        steps = _int64_constant(graph, f"{tag}_st", [rng.choice([-2, -1, 0, 1, 2, 2**62])])
        nodes.append(helper.make_node("Slice", [current, starts, ends, axes, steps], [f"{tag}_sl"]))
        indices = _int64_constant(graph, f"{tag}_g", [rng.choice(HUGE_INTS) for _ in range(rng.choice([1, 3, 4096]))])
        nodes.append(helper.make_node("Gather", [f"{tag}_sl", indices], [f"{tag}_ga"], axis=rng.choice([0, 1, -1, 7])))
        split = _int64_constant(graph, f"{tag}_sp", [rng.choice(HUGE_INTS), rng.choice(HUGE_INTS)])
        nodes.append(helper.make_node("Split", [f"{tag}_ga", split], [f"{tag}_p0", f"{tag}_p1"], axis=0))
        current = f"{tag}_p{rng.randrange(2)}"
    elif kind == 6:  # casts to every type, and arithmetic across them
        to = rng.choice([0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 19, 21, 23, 99])
        nodes.append(helper.make_node("Cast", [current], [f"{tag}_cast"], to=to))
        divisor = _int64_constant(graph, f"{tag}_zero", [0])
        op = rng.choice(["Div", "Add", "Mul", "Sub"])
        nodes.append(helper.make_node(op, [f"{tag}_cast", divisor], [f"{tag}_ar"]))
        nodes.append(helper.make_node("Cast", [f"{tag}_ar"], [f"{tag}_back"], to=1))
        current = f"{tag}_back"
    elif kind == 7:  # an op off the list, or a foreign domain
        op = rng.choice(["Expand", "Tile", "Shape", "ConstantOfShape", "Range", "Pad", "Transpose"])
        domain = rng.choice(["", "", "com.evil"])
        extra = [_int64_constant(graph, f"{tag}_arg", [rng.choice([1, 2, 2**20, 2**40])] * 3)] if op != "Shape" else []
        nodes.append(helper.make_node(op, [current, *extra][:2], [f"{tag}_op"], domain=domain))
        current = f"{tag}_op"
    else:  # a cycle: the chain reads its own end
        nodes.append(helper.make_node("Add", [current, f"{tag}_loop"], [f"{tag}_sum"]))
        nodes.append(helper.make_node("Identity", [f"{tag}_sum"], [f"{tag}_loop"]))
        current = f"{tag}_loop"
    graph.node.extend(nodes)
    return current


def _nest(model: Any, rng: random.Random) -> None:
    """The main graph's nodes moved into If branches nested `depth` deep."""
    from onnx import helper

    graph = model.graph
    body = helper.make_graph(list(graph.node), "inner", [], list(graph.output))
    depth = rng.choice([2, 15, 17, 24, 90])
    other = helper.make_graph([], "other", [], list(graph.output))  # one branch nests, the other is small
    for level in range(depth):
        try:
            node = helper.make_node(
                "If", ["nest_cond"], [o.name for o in graph.output], then_branch=body, else_branch=other
            )
        except Exception:  # protobuf's own depth limit: as deep as a model can be written
            break
        body = helper.make_graph([node], f"level{level}", [], list(graph.output))
    del graph.node[:]
    graph.node.extend(body.node)
    graph.input.append(helper.make_tensor_value_info("nest_cond", 9, []))


def mutate_onnx_folding(data: bytes, rng: random.Random) -> bytes:
    """An RNN's weights computed by hostile chains (growth, depth, cycles, odd shapes, casts, ops off the list),
    subgraphs nested deep, Constant nodes of odd kinds; now and then the plain structural damage too."""
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(data)
    for round_ in range(rng.choice([1, 1, 2])):
        graphs = _graphs(model.graph)
        rnns = [(g, n) for g in graphs for n in g.node if n.op_type in RNN_OP_TYPES]
        choice = rng.randrange(10)
        if choice < 6 and rnns:
            graph, node = rng.choice(rnns)
            index = rng.choice([i for i in (1, 2, 3, 5) if i < len(node.input) and node.input[i]] or [1])
            source = node.input[index] if index < len(node.input) else "nowhere"
            while len(node.input) <= index:  # a node an earlier round cut down to its X
                node.input.append("")
            node.input[index] = _weight_chain(graph, source, rng, f"fz{round_}")
        elif choice == 6:
            _nest(model, rng)
        elif choice == 7:  # Constant nodes holding what is no tensor of numbers, or numbers out of range
            constants = [n for g in graphs for n in g.node if n.op_type == "Constant"]
            if constants:
                from onnx import helper

                node = rng.choice(constants)
                del node.attribute[:]
                name, value = rng.choice(
                    [
                        ("value_string", "x"),
                        ("value_strings", ["a", "b"]),
                        ("value_floats", [1.0, float("nan")]),
                        ("value_ints", [2**62, -(2**63)]),
                        ("value_int", 7),
                        ("value_float", 1e30),
                    ]
                )
                node.attribute.append(helper.make_attribute(name, value))
        elif choice == 8:  # int64 constants (slice bounds, axes, shapes) given other values
            constants = [n for g in graphs for n in g.node if n.op_type == "Constant"]
            for node in rng.sample(constants, min(len(constants), rng.choice([1, 3, 10]))):
                for attribute in node.attribute:
                    if attribute.name == "value" and attribute.t.data_type == 7:
                        from onnx import numpy_helper

                        values = [rng.choice(HUGE_INTS) for _ in range(rng.choice([0, 1, 1, 2, 5]))]
                        attribute.t.CopyFrom(numpy_helper.from_array(np.array(values, np.int64), attribute.t.name))
        else:
            _onnx_damage(model, rng)
    return model.SerializeToString()


def _stored_values(tensor) -> np.ndarray | None:
    """A stored tensor's values, or None where an earlier mutation left its bytes and its type at odds (that damage
    stays)."""
    from onnx import numpy_helper

    try:
        return numpy_helper.to_array(tensor).copy()
    except ValueError:
        return None


def mutate_onnx_quantized(data: bytes, rng: random.Random) -> bytes:
    """A quantized LSTM's int8 weights, scales and zero points (its own, or its QDQ DequantizeLinear nodes') of
    other types, shapes and values; a DequantizeLinear's axis anywhere."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    quantized = [n for n in graph.node if n.op_type in ("DynamicQuantizeLSTM", "DequantizeLinear")]
    stored = {t.name: t for t in graph.initializer}
    for _ in range(rng.choice([1, 1, 2, 3])):
        if not quantized:
            break
        node = rng.choice(quantized)
        choice = rng.randrange(8)
        qdq = node.op_type == "DequantizeLinear"
        names = [i for i in (node.input[:3] if qdq else [*node.input[8:], *node.input[1:3]]) if i in stored]
        if choice == 0 and names:  # values: NaN, inf, zero or huge scales; zero points anywhere
            tensor = stored[rng.choice(names)]
            values = _stored_values(tensor)
            if values is not None and values.size:
                special = (
                    [np.nan, np.inf, -np.inf, 0.0, 1e38, -1.0] if values.dtype.kind == "f" else [-128, 0, 127, 255]
                )
                values.reshape(-1)[rng.randrange(values.size)] = (
                    rng.choice(special)
                    if values.dtype.kind == "f"
                    else (np.array(rng.choice(special)).astype(values.dtype))
                )
                tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
        elif choice == 1 and names:  # another element type
            tensor = stored[rng.choice(names)]
            values = _stored_values(tensor)
            target = rng.choice([np.int8, np.uint8, np.int32, np.float16, np.float32, np.float64, np.int64, bool])
            if values is not None:
                tensor.CopyFrom(numpy_helper.from_array(values.astype(target), tensor.name))
        elif choice == 2 and names:  # another shape
            tensor = stored[rng.choice(names)]
            values = _stored_values(tensor)
            if values is not None:
                values = values.reshape(-1)
                shape = rng.choice([(values.size,), (1, values.size), (values.size, 1, 1), ()])
                if shape == () and values.size:
                    values, shape = values[:1], ()
                tensor.CopyFrom(numpy_helper.from_array(values.reshape(shape), tensor.name))
        elif choice == 3:  # inputs dropped, or added past the op's twelve
            if rng.random() < 0.5 and len(node.input) > 1:
                del node.input[rng.randrange(1, len(node.input)) :]
            else:
                node.input.extend(["", "extra"])
        elif choice == 4 and qdq:  # per channel along any axis, or none
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("axis", rng.choice([-4, -1, 0, 1, 2, 3, 7])))
        elif choice == 4:  # the domain or op of another runtime
            node.domain = rng.choice(["", "com.evil", "ai.onnx", "com.microsoft"])
        elif choice == 5:  # peepholes given
            peephole = f"{node.name}_P"
            if peephole not in stored:
                tensor = numpy_helper.from_array(np.ones((2, 18), np.float32), peephole)
                graph.initializer.append(tensor)
                stored[peephole] = tensor
            while len(node.input) < 8:
                node.input.append("")
            node.input[7] = peephole
        elif choice == 6:  # scales computed by a hostile chain
            index = rng.choice([0, 1, 2] if qdq else [8, 9, 10, 11])
            if index < len(node.input):
                node.input[index] = _weight_chain(graph, node.input[index], rng, f"q{index}")
        else:
            _onnx_damage(model, rng)
    return model.SerializeToString()


def mutate_onnx_unrolled(data: bytes, rng: random.Random) -> bytes:
    """An unrolled RNN's steps rewired: indices, operands, activations and weights changed, steps removed or
    made to read each other out of order."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    nodes = list(graph.node)
    outputs = [o for n in nodes for o in n.output]
    for _ in range(rng.choice([1, 1, 2, 3])):
        choice = rng.randrange(8)
        if choice == 0:  # a step reads another time, or another step's h
            node = rng.choice([n for n in nodes if n.op_type in ("Slice", "MatMul", "Add")] or nodes)
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(outputs)
        elif choice == 1:  # one step's activation changed
            acts = [n for n in nodes if n.op_type in ("Tanh", "Relu")]
            if acts:
                rng.choice(acts).op_type = rng.choice(["Relu", "Tanh", "Sigmoid", "Abs"])
        elif choice == 2:  # a step removed
            acts = [n for n in graph.node if n.op_type in ("Tanh", "Relu", "Add", "MatMul")]
            if acts:
                graph.node.remove(rng.choice(acts))
        elif choice == 3:  # the operands of an Add swapped, or a MatMul's
            adds = [n for n in nodes if n.op_type in ("Add", "MatMul") and len(n.input) == 2]
            if adds:
                node = rng.choice(adds)
                node.input[0], node.input[1] = node.input[1], node.input[0]
        elif choice == 4:  # weights of other shapes or values
            tensor = rng.choice(list(graph.initializer)) if graph.initializer else None
            values = _stored_values(tensor) if tensor is not None else None
            if tensor is not None and values is not None:
                if values.dtype.kind == "i" and values.size:
                    values = values.astype(np.int64)  # room for every huge value, whatever the stored width
                    values.reshape(-1)[0] = rng.choice(HUGE_INTS)
                elif rng.random() < 0.5:
                    values = values.reshape(-1)[: rng.randrange(values.size + 1)]
                else:
                    values = values.astype(rng.choice([np.float16, np.float64, np.int32]))
                tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
        elif choice == 5:  # a cycle through the steps
            acts = [n for n in nodes if n.op_type in ("Tanh", "Relu")]
            matmuls = [n for n in nodes if n.op_type == "MatMul"]
            if acts and matmuls:
                rng.choice(matmuls).input[0] = acts[-1].output[0]
        elif choice == 6:  # a step's weights computed by a hostile chain
            matmuls = [n for n in nodes if n.op_type == "MatMul" and len(n.input) == 2]
            if matmuls:
                node = rng.choice(matmuls)
                node.input[1] = _weight_chain(graph, node.input[1], rng, f"u{rng.randrange(1000)}")
        else:
            _onnx_damage(model, rng)
    return model.SerializeToString()


def mutate_onnx_cells(data: bytes, rng: random.Random) -> bytes:
    """Cells written as graphs mutated: gates swapped (the nodes reading the gates read each other's), a weight
    replaced by a computed tensor, ops changed so that the graph computes no cell, splits resized, steps rewired."""
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    nodes = list(graph.node)
    outputs = [o for n in nodes for o in n.output]
    gates = {n.output[0] for n in nodes if n.op_type in ("Sigmoid", "Tanh")}
    for _ in range(rng.choice([1, 1, 2, 3])):
        choice = rng.randrange(6)
        if choice == 0:  # two gates swapped where they are read
            reads = [(n, i) for n in nodes for i, name in enumerate(n.input) if name in gates]
            if len(reads) >= 2:
                (one, at), (other, other_at) = rng.sample(reads, 2)
                one.input[at], other.input[other_at] = other.input[other_at], one.input[at]
        elif choice == 1:  # a weight replaced by a computed tensor, or by a graph input
            products = [n for n in nodes if n.op_type in ("Gemm", "MatMul") and len(n.input) >= 2]
            if products:
                node = rng.choice(products)
                if rng.random() < 0.5:
                    node.input[1] = rng.choice(outputs)
                else:
                    name = f"w{rng.randrange(1000)}"
                    graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
                    node.input[1] = name
        elif choice == 2:  # no cell: another activation or arithmetic
            changed = [n for n in nodes if n.op_type in ("Sigmoid", "Tanh", "Mul", "Sub", "Add")]
            if changed:
                rng.choice(changed).op_type = rng.choice(["Relu", "Tanh", "Sigmoid", "Abs", "Add", "Sub", "Mul", "Div"])
        elif choice == 3:  # a split into other parts
            splits = [n for n in nodes if n.op_type == "Split"]
            if splits:
                node = rng.choice(splits)
                for attribute in node.attribute:
                    if attribute.name == "axis":
                        attribute.i = rng.choice([0, -1, 2, 5])
                    if attribute.name == "num_outputs":
                        attribute.i = rng.choice([0, 1, 2, 5])
        elif choice == 4:  # a step reads another step's values
            node = rng.choice([n for n in nodes if n.input] or nodes)
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(outputs)
        else:
            _onnx_damage(model, rng)
    return model.SerializeToString()


def mutate_onnx_loops(data: bytes, rng: random.Random) -> bytes:
    """RNNs written as ONNX Loops mutated inside and around their bodies: ops changed (the cell, the counter, the
    condition), a body's stored constants changed (its counter's step), values read in each other's places (gates
    swapped, a scan output or a carried value given out otherwise), a carried weight changed each step, the Loop's
    trip count, condition and starting values changed; now and then the plain structural damage too."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    loops = [n for n in graph.node if n.op_type == "Loop" and n.attribute and n.attribute[0].HasField("g")]
    if not loops:
        _onnx_damage(model, rng)
        return model.SerializeToString()
    for _ in range(rng.choice([1, 1, 2, 3])):
        loop = rng.choice(loops)
        body = loop.attribute[0].g
        values = [o for n in body.node for o in n.output] + [i.name for i in body.input]
        choice = rng.randrange(8)
        if choice == 0 and body.node:  # the cell, counter or condition computing something else
            node = rng.choice(body.node)
            node.op_type = rng.choice(["Tanh", "Sigmoid", "Relu", "Add", "Sub", "Mul", "Identity", "Less", "Greater"])
        elif choice == 1 and body.initializer:  # a stored constant changed: the counter's step, say
            tensor = rng.choice(body.initializer)
            stored = numpy_helper.to_array(tensor)
            changed = (stored + rng.choice([1, -1, 2])).astype(stored.dtype) if stored.dtype.kind in "iuf" else stored
            tensor.CopyFrom(numpy_helper.from_array(changed, tensor.name))
        elif choice == 2:  # a node reads another value in its place (two gates swapped, the state for the input)
            node = rng.choice(body.node)
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(values)
        elif choice == 3 and len(body.output) > 1:  # the body gives out another value (its scan output, a carry)
            rng.choice(body.output[1:]).name = rng.choice(values)
        elif choice == 4 and len(body.input) > 2:  # a carried value (a weight) changed each step
            place = rng.randrange(2, len(body.input))
            grown = f"grown_{place}"
            body.initializer.append(numpy_helper.from_array(np.float32(rng.choice([1.01, 0.0, -1.0])), f"{grown}_by"))
            body.node.append(helper.make_node("Mul", [body.input[place].name, f"{grown}_by"], [grown]))
            if place - 1 < len(body.output):
                body.output[place - 1].name = grown
        elif choice == 5:  # the Loop's trip count or first condition
            name = f"trip_{rng.randrange(1000)}"
            value = rng.choice([np.asarray(rng.choice([0, 1, 2, 5, -1, 2**40]), np.int64), np.asarray(False)])
            graph.initializer.append(numpy_helper.from_array(value, name))
            loop.input[0 if value.dtype.kind == "i" else 1] = name
        elif choice == 6 and len(loop.input) > 2:  # a carried value started from another of the graph's values
            outputs = [o for n in graph.node for o in n.output] + [t.name for t in graph.initializer]
            loop.input[rng.randrange(2, len(loop.input))] = rng.choice(outputs)
        else:
            _onnx_damage(model, rng)
    return model.SerializeToString()


# --- the formats read since the first round: each seed a set of files (the model, the files beside it, the source
# record rnnconv wrote), damaged in its structure (lengths, offsets, nesting, encodings, counts, names, sizes) ------

RECORD_SUFFIX = ".rnnconv.json"  # the source record rnnconv writes beside a model that has no metadata of its own
LONG_NAMES = ["x" * 300, "y" * 5000, "z" * 200_000, "\u00e9\u4e2d" * 3000, "a b, c;" * 2000]


def long_name(rng: random.Random) -> str:
    return rng.choice(LONG_NAMES)


def mutate_record(files: dict[str, bytes], rng: random.Random, places: dict[str, str]) -> None:
    """The source record beside a model damaged: its JSON, or the source it names (a FIFO, /dev/zero, a folder, a
    payload, a long name)."""
    records = [name for name in files if name.endswith(RECORD_SUFFIX)]
    if not records:
        return
    name = rng.choice(records)
    text = files[name].decode("utf-8", "replace")
    if rng.random() < 0.5:
        files[name] = mutate_json_text(text, rng).encode("utf-8", "surrogatepass")
        return
    try:
        doc = json.loads(text)
    except ValueError:
        return
    key = rng.choice(["path", "relative_path", "digest", "layer", "format", "class", "prefix", "dtype"])
    value = rng.choice([*places.values(), long_name(rng), "", "../" * 40 + "etc/passwd", 7, None])
    if isinstance(doc, dict):
        doc[key] = value
    files[name] = json.dumps(doc).encode()


# OpenVINO IR: .xml (parsed here by ElementTree: the seeds are trusted) and its .bin

XML_ENCODINGS = ["UTF-16", "UTF-16-LE", "UTF-16-BE", "UTF-32", "UTF-32-LE", "latin-1", "ascii", "cp1252"]
DECLARED_ENCODINGS = ["UTF-7", "UTF-16", "UTF-32", "EBCDIC-US", "ISO-2022-JP", "x-unknown", "", "utf-8", "latin-1"]
ODD_NUMBERS = ["", "-1", "0", "x", "1e3", "2147483648", "18446744073709551616", "-9223372036854775809", " 8", "1.5"]


def _integer(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _xml_text(root: Any, declaration: str) -> str:
    import xml.etree.ElementTree as ET

    return declaration + ET.tostring(root, encoding="unicode")


def mutate_openvino(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """An IR's .xml or .bin damaged in place; True where every reader must refuse it (a DTD)."""
    import xml.etree.ElementTree as ET

    bin_name = main[: -len(".xml")] + ".bin"
    root = ET.fromstring(files[main])
    layers = root.findall("./layers/layer")
    consts = [layer for layer in layers if layer.get("type") == "Const" and layer.find("data") is not None]
    sequences = [layer for layer in layers if str(layer.get("type")).endswith("Sequence")]
    edges = root.findall("./edges/edge")
    declaration, encoding = '<?xml version="1.0"?>\n', "utf-8"
    refuse, nest = False, 0
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(
            ["const", "const", "dims", "edge", "type", "attribute", "attribute", "names", "ids", "count", "nest"]
            + ["encoding", "declared", "dtd", "bin", "bin", "bytes"]
        )
        if op == "const" and consts:
            data = rng.choice(consts).find("data")
            assert data is not None
            key = rng.choice(["offset", "size", "element_type", "shape"])
            if key in ("offset", "size"):
                current = _integer(data.get(key))
                bin_size = len(files.get(bin_name, b""))
                value = rng.choice([*ODD_NUMBERS, str(current + rng.randint(-9, 9)), str(bin_size), str(bin_size - 4)])
            elif key == "element_type":
                value = rng.choice(["f64", "bf16", "f16", "u1", "i4", "string", "", "f32 ", "u64", "f8e4m3", "dynamic"])
            else:
                value = rng.choice(["", "-1", "2147483648,2147483648", "1," * 1000 + "1", "a", "0", "3,0", "?"])
            data.set(key, value)
        elif op == "dims":
            ports = root.findall(".//port")
            if ports:
                port = rng.choice(ports)
                dims = port.findall("dim")
                if dims and rng.random() < 0.6:
                    rng.choice(dims).text = rng.choice([*ODD_NUMBERS, "?", "1..5"])
                else:
                    for _ in range(rng.choice([1, 40, 3000])):
                        ET.SubElement(port, "dim").text = str(rng.choice([1, 7, 2**31]))
        elif op == "edge" and edges:
            edge = rng.choice(edges)
            ids = [layer.get("id", "0") for layer in layers]
            choice = rng.randrange(4)
            if choice == 0:
                edge.set(
                    rng.choice(["from-layer", "to-layer", "from-port", "to-port"]), rng.choice([*ODD_NUMBERS, *ids])
                )
            elif choice == 1:  # a cycle: the edge goes back to where it came from
                edge.set("to-layer", edge.get("from-layer", "0"))
            elif choice == 2:
                parent = root.find("edges")
                assert parent is not None
                for _ in range(rng.choice([2, 100, 5000])):
                    parent.append(ET.fromstring(ET.tostring(edge)))
            else:
                parent = root.find("edges")
                assert parent is not None
                parent.remove(edge)
        elif op == "type" and layers:
            layer = rng.choice(sequences or layers)
            if rng.random() < 0.7:
                layer.set(
                    "type", rng.choice(["LSTMSequence", "GRUSequence", "RNNSequence", "Loop", "Foo", "", "Const"])
                )
            else:
                layer.set("version", rng.choice(["opset99", "", "opset1", "extension"]))
        elif op == "attribute" and sequences:
            data = rng.choice(sequences).find("data")
            if data is not None:
                key = rng.choice(["hidden_size", "direction", "activations", "clip", "linear_before_reset"])
                data.set(
                    key,
                    rng.choice(
                        [
                            *ODD_NUMBERS,
                            "forward",
                            "reverse",
                            "bidirectional",
                            "sideways",
                            "relu," * rng.choice([2, 10_000]) + "relu",
                            "sigmoid,tanh,tanh",
                            "nan",
                            "inf",
                            "true",
                            long_name(rng),
                        ]
                    ),
                )
        elif op == "names" and layers:
            layer = rng.choice(layers)
            port = layer.find(".//port")
            target = layer if port is None or rng.random() < 0.5 else port
            target.set("name" if target is layer else "names", rng.choice([*LONG_NAMES, "", "a,b", "\t"]))
        elif op == "ids" and layers:
            layer = rng.choice(layers)
            layer.set("id", rng.choice([*ODD_NUMBERS, rng.choice(layers).get("id", "0")]))
        elif op == "count" and layers:
            parent = root.find("layers")
            assert parent is not None
            layer = rng.choice(sequences or layers)
            top = max((_integer(x.get("id")) for x in layers), default=0) + 1
            for number in range(rng.choice([2, 50, 3000])):
                copy = ET.fromstring(ET.tostring(layer))
                copy.set("id", str(top + number))
                parent.append(copy)
        elif op == "nest" and layers:  # elements nested 10 to 100,000 deep inside a layer
            nest = rng.choice([10, 200, 5000, 100_000])
            rng.choice(layers).append(ET.Element("__nest__"))
        elif op == "encoding":
            encoding = rng.choice(XML_ENCODINGS)
            declaration = f'<?xml version="1.0" encoding="{encoding}"?>\n' if rng.random() < 0.8 else ""
        elif op == "declared":
            declaration = f'<?xml version="1.0" encoding="{rng.choice(DECLARED_ENCODINGS)}"?>\n'
        elif op == "dtd":
            entity = rng.choice(['"x"', '"&b;&b;"', 'SYSTEM "file:///etc/passwd"', 'SYSTEM "/dev/zero"'])
            declaration += f'<!DOCTYPE net [<!ENTITY b "bb"><!ENTITY a {entity}>]>\n'
            encoding = rng.choice(["utf-8", "UTF-16", "UTF-32"])
            refuse = True
        elif op == "bin" and bin_name in files:
            blob = files[bin_name]
            choice = rng.randrange(4)
            if choice == 0:
                files[bin_name] = blob[: rng.randrange(len(blob) + 1)]
            elif choice == 1:
                files[bin_name] = blob + bytes(rng.choice([1, 4, 4096]))
            elif choice == 2:
                del files[bin_name]
            else:
                files[bin_name] = mutate_bytes(blob, rng)
    text = _xml_text(root, declaration).replace("<__nest__ />", "<body>" * nest + "</body>" * nest)
    if refuse:
        text = text.replace("<layers>", "<layers>&a;", 1)
    if rng.random() < 0.1 and not refuse:
        files[main] = mutate_bytes(text.encode(), rng)
        return False
    try:
        encoded = text.encode(encoding)
    except UnicodeEncodeError:
        encoded = text.encode(encoding, "xmlcharrefreplace")
    files[main] = encoded
    return refuse


# Flax linen and flax.nnx: a msgpack tree (maps of maps whose leaves are array extensions)


class Pairs(list):
    """A msgpack map as its (key, value) pairs, in order: a key may repeat."""


class RawText(bytes):
    """Bytes packed as a msgpack str (they need not be UTF-8)."""


def _ext_payload(ext: Any) -> list[Any] | None:
    import msgpack

    try:
        value = msgpack.unpackb(ext.data, raw=False, strict_map_key=False)
    except Exception:
        return None
    return value if isinstance(value, list) else None


class RawTree(bytes):
    """A value already packed (nested deeper than a packer recurses)."""


def _pack_tree(node: Any, wide: bool) -> bytes:
    """msgpack of a tree of Pairs, RawText, RawTree, ExtType and plain values; `wide`: every map, list and str with
    a 32-bit length (valid msgpack, a form Flax never writes)."""
    import msgpack

    if isinstance(node, RawTree):
        return bytes(node)
    if isinstance(node, Pairs):
        head = b"\xdf" + struct.pack(">I", len(node)) if wide else msgpack.Packer().pack_map_header(len(node))
        return head + b"".join(_pack_tree(k, wide) + _pack_tree(v, wide) for k, v in node)
    if isinstance(node, list):
        head = b"\xdd" + struct.pack(">I", len(node)) if wide else msgpack.Packer().pack_array_header(len(node))
        return head + b"".join(_pack_tree(v, wide) for v in node)
    if isinstance(node, (RawText, str)) and (wide or isinstance(node, RawText)):
        raw = node if isinstance(node, bytes) else node.encode()
        return b"\xdb" + struct.pack(">I", len(raw)) + raw
    return msgpack.packb(node, use_bin_type=True)


def _tree_places(node: Any, path: tuple = ()) -> list[tuple[Pairs, int]]:
    """(map, index) of every entry of every map of a tree."""
    found: list[tuple[Pairs, int]] = []
    if isinstance(node, Pairs):
        for index, (_, value) in enumerate(node):
            found.append((node, index))
            found += _tree_places(value)
    return found


def _array_ext(shape: Any, dtype: Any, data: bytes, code: int = 1) -> Any:
    import msgpack

    return msgpack.ExtType(code, msgpack.packb([shape, dtype, data], use_bin_type=True))


COUNT_BYTES = 16 << 20  # what the `count` op's repeats of one value may add to a case, at most
ODD_SHAPES: list[Any] = [[], [-1], [0, 7], [2**62, 2**62], [1] * 40, [3.5], ["7"], [[1]], None, [2**64 - 1], [28, 5, 1]]
ODD_DTYPES: list[Any] = ["float128", "object", "O", "<f4", "int32", "bfloat16", "float16", "", "x" * 5000, 7, None]


def mutate_msgpack_tree(data: bytes, rng: random.Random) -> bytes:
    """A Flax msgpack tree damaged in its structure: arrays' shapes, types and byte counts, extensions nested in
    extensions, maps nested deep, keys renamed, repeated, of other types or not UTF-8, maps grown to thousands of
    entries, values of other kinds, chunked arrays, other msgpack forms; now and then its bytes."""
    import msgpack

    if rng.random() < 0.12:
        return mutate_bytes(data, rng)
    tree = msgpack.unpackb(
        data, raw=False, strict_map_key=False, object_pairs_hook=Pairs, ext_hook=lambda c, d: msgpack.ExtType(c, d)
    )
    wide = False
    for _ in range(rng.choice([1, 1, 2, 3])):
        places = _tree_places(tree)
        arrays = [(m, i) for m, i in places if isinstance(m[i][1], msgpack.ExtType)]
        op = rng.choice(
            ["array", "array", "ext", "nest_ext", "depth", "key", "key", "count", "kind", "chunked", "wide"]
        )
        if op == "array" and arrays:
            holder, index = rng.choice(arrays)
            payload = _ext_payload(holder[index][1]) or [[1], "float32", b"\0" * 4]
            shape, dtype, raw = (payload + [None] * 3)[:3]
            field = rng.randrange(4)
            if field == 0:
                shape = rng.choice(ODD_SHAPES)
            elif field == 1:
                dtype = rng.choice(ODD_DTYPES)
            elif field == 2 and isinstance(raw, bytes):
                raw = rng.choice([raw[: rng.randrange(len(raw) + 1)], raw + bytes(rng.choice([1, 4, 4096])), b""])
            else:
                raw = rng.choice([None, "text", 7, [1, 2]])
            holder[index] = (holder[index][0], _array_ext(shape, dtype, raw, rng.choice([1, 1, 1, 3])))
        elif op == "ext" and arrays:
            holder, index = rng.choice(arrays)
            ext = holder[index][1]
            payload = rng.choice([ext.data + b"\xc0", ext.data[:-3], b"\xc1", b"", msgpack.packb([[1], "float32"])])
            code = rng.choice([ext.code, 2, 4, 99, 127, -1, -128])  # -1: msgpack's timestamp
            raw = b"\xc9" + struct.pack(">Ib", len(payload), code) + payload
            holder[index] = (holder[index][0], RawTree(raw))
        elif op == "nest_ext" and arrays:  # an array whose payload holds an array, 1 to 2,000 deep
            holder, index = rng.choice(arrays)
            ext = holder[index][1]
            raw = _pack_tree(ext, False)
            for _ in range(rng.choice([1, 3, 200, 2000])):
                inner = b"\x93\x91\x01\xa7float32" + raw
                raw = b"\xc9" + struct.pack(">I", len(inner)) + b"\x01" + inner
            holder[index] = (holder[index][0], RawTree(raw))
        elif op == "depth" and places:  # a value inside maps or lists nested 10 to 100,000 deep
            holder, index = rng.choice(places)
            depth = rng.choice([10, 63, 65, 1000, 100_000])
            value = _pack_tree(holder[index][1], False)
            wrap = b"\x81\xa1a" if rng.random() < 0.5 else b"\x91"
            holder[index] = (holder[index][0], RawTree(wrap * depth + value))
        elif op == "key" and places:
            holder, index = rng.choice(places)
            key = rng.choice(
                [long_name(rng), "", 7, -1, 2**40, 1.5, None, True, b"bytes", RawText(b"\xff\xfe"), "params", "0"]
            )
            if rng.random() < 0.3 and len(holder) > 1:  # the key of another entry of the same map
                key = holder[(index + 1) % len(holder)][0]
            holder[index] = (key, holder[index][1])
        elif op == "count" and places:
            holder = rng.choice(places)[0]
            kind = rng.randrange(3)
            times = rng.choice([2, 100, 10_000])
            # a copy of the first entry's value, packed now: shared, a later op inside it would be repeated as often,
            # and ops on ops multiplied a tree past the machine's memory (seed 95's case 1109: 9 GB and more)
            repeated = RawTree(_pack_tree(holder[0][1], False)) if kind == 0 else None
            if repeated is not None:
                times = min(times, max(2, COUNT_BYTES // max(1, len(repeated))))
            for number in range(times):
                value = repeated if kind == 0 else number if kind == 1 else Pairs()
                holder.append((f"layers_{number + 7}" if kind else f"extra{number}", value))
        elif op == "kind" and places:
            holder, index = rng.choice(places)
            holder[index] = (holder[index][0], rng.choice([[1, 2], 7, "kernel", None, True, b"\0" * 16, Pairs(), 1.5]))
        elif op == "chunked" and arrays:
            holder, index = rng.choice(arrays)
            chunks = Pairs([("0", holder[index][1])] * rng.choice([1, 2]))
            chunked = Pairs(
                [("__msgpack_chunked_array__", rng.choice([True, 1, None])), ("shape", rng.choice(ODD_SHAPES))]
            )
            chunked.append(("chunks", chunks))
            holder[index] = (holder[index][0], chunked)
        elif op == "wide":
            wide = True
    return _pack_tree(tree, wide)


# Equinox: .npy leaves one after another (eqx.tree_serialise_leaves)


def _npy_leaves(data: bytes) -> list[tuple[bytes, str, bytes]]:
    """(magic and version, header text, data) of each .npy leaf of a well-formed seed."""
    found, pos = [], 0
    while pos < len(data):
        version = data[pos + 6]
        width = 2 if version == 1 else 4
        (length,) = struct.unpack("<H" if width == 2 else "<I", data[pos + 8 : pos + 8 + width])
        header = data[pos + 8 + width : pos + 8 + width + length].decode("latin-1")
        start = pos + 8 + width + length
        meta = ast.literal_eval(header.strip())
        size = int(np.prod(meta["shape"], dtype=np.int64)) * np.dtype(meta["descr"]).itemsize
        found.append((data[pos : pos + 8], header, data[start : start + size]))
        pos = start + size
    return found


def _npy_leaf(magic: bytes, header: str, body: bytes, length: int | None = None) -> bytes:
    """A .npy of this magic and version, header (its length field `length`, else the header's) and data."""
    raw = header.encode("latin-1", "replace")
    count = len(raw) if length is None else length
    if magic[6:7] == b"\x01" and count > 0xFFFF:  # too long for 1.0's 16-bit length: 2.0, as np.save does
        magic = magic[:6] + b"\x02\x00"
    return magic + struct.pack("<H" if magic[6:7] == b"\x01" else "<I", count) + raw + body


NPY_DESCRS = ["'|O'", "'<i8'", "'>f4'", "'<c8'", "[('a', '<f4')]", "'<U5'", "'V8'", "'float32'", "'<f2'", "'<f8'"]
NPY_SHAPES = ["()", "(-1,)", "(4611686018427387904, 4611686018427387904)", "(1,) * 3", "(3.5,)", "'x'", "(0,)"]


def mutate_npy_header(header: str, rng: random.Random) -> str:
    """A .npy header dict with a field given another value, a key added or dropped, or its syntax broken."""
    choice = rng.randrange(8)
    if choice == 0:
        return re_field(header, "descr", rng.choice(NPY_DESCRS))
    if choice == 1:
        return re_field(header, "shape", rng.choice([*NPY_SHAPES, "(" + "1, " * 40 + ")", "(" * 500 + ")" * 500]))
    if choice == 2:
        return re_field(header, "fortran_order", rng.choice(["True", "'x'", "1", "None"]))
    if choice == 3:
        return header.replace(
            "{", "{'extra': " + rng.choice(["1", "__import__('os')", "[" * 2000 + "]" * 2000]) + ", ", 1
        )
    if choice == 4:
        return header.replace("'descr'", "'dtype'", 1)
    if choice == 5:
        return header.rstrip().rstrip("}") + rng.choice(["", "}}", ")"]) + "\n"
    if choice == 6:
        return header + " " * rng.choice([1, 7, 64, 70_000])
    return header.replace("\n", "") if rng.random() < 0.5 else "\u00e9" + header


def re_field(header: str, key: str, value: str) -> str:
    """The header with `key`'s value replaced (the text up to the next top-level comma)."""
    start = header.find(f"'{key}':")
    if start < 0:
        return header
    start += len(key) + 3
    depth, end = 0, start
    while end < len(header):
        c = header[end]
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0 or (depth == 0 and c == ","):
            break
        end += 1
    return header[:start] + " " + value + header[end:]


def mutate_eqx(data: bytes, rng: random.Random) -> bytes:
    """An .eqx's leaves damaged in their structure: a header's fields, length or version, a leaf's data cut or grown,
    leaves dropped, repeated, reordered or added (a pickled object among them); now and then its bytes."""
    try:
        leaves = _npy_leaves(data)
    except Exception:
        leaves = []
    if not leaves or rng.random() < 0.12:
        return mutate_bytes(data, rng)
    for _ in range(rng.choice([1, 1, 2])):
        index = rng.randrange(len(leaves))
        magic, header, body = leaves[index]
        choice = rng.randrange(8)
        if choice < 2:
            leaves[index] = (magic, mutate_npy_header(header, rng), body)
        elif choice == 2:  # the header's length field off, or its version
            version = rng.choice([0, 1, 2, 3, 255])
            leaves[index] = (magic[:6] + bytes([version, 0]), header, body)
            if rng.random() < 0.5:
                raw = _npy_leaf(magic, header, body, rng.choice([0, 1, len(header) - 3, len(header) + 8, 65535]))
                leaves[index] = (raw[:8], "", raw[8:])
        elif choice == 3:
            leaves[index] = (magic, header, body[: rng.randrange(len(body) + 1)] if body else b"\0" * 9)
        elif choice == 4:
            leaves[index] = (magic, header, body + bytes(rng.choice([1, 4, 4096])))
        elif choice == 5:
            del leaves[index]
        elif choice == 6:
            leaves[index:index] = [leaves[index]] * rng.choice([1, 2, 70])
        else:  # an object array: unpickling it would run the payload
            raw = _object_npy(rng)
            leaves.insert(index, (raw[:8], "", raw[8:]))
            if rng.random() < 0.5:
                rng.shuffle(leaves)
    out = b""
    for magic, header, body in leaves:
        out += magic + body if not header else _npy_leaf(magic, header, body)
    return out


# MLX: a .safetensors (structure) or an .npz (zip members of .npy)


def mutate_safetensors_structure(data: bytes, rng: random.Random) -> bytes:
    """A safetensors file damaged in its structure: a tensor's dtype, shape or data offsets, keys renamed (long,
    repeated), thousands of tensors added, the header's length, encoding or metadata; else `mutate_safetensors`."""
    if len(data) < 8 or rng.random() < 0.3:
        return mutate_safetensors(data, rng)
    (length,) = struct.unpack("<Q", data[:8])
    try:
        doc = json.loads(data[8 : 8 + length])
    except ValueError:
        return mutate_safetensors(data, rng)
    rest = data[8 + length :]
    names = [k for k in doc if k != "__metadata__"]
    raw_text = None
    choice = rng.randrange(8)
    if choice == 0 and names:
        entry = doc[rng.choice(names)]
        key = rng.choice(["dtype", "shape", "data_offsets"])
        entry[key] = rng.choice(
            {
                "dtype": ["F64", "BF16", "I8", "U8", "BOOL", "F8_E4M3", "C64", "", "F32 ", 7],
                "shape": [[], [-1], [0], [2**62, 2**62], [1] * 40, "x", [3.5]],
                "data_offsets": [[0, 0], [4, 0], [0, 2**63], [-4, 4], [len(rest), len(rest) + 4], [0], "x"],
            }[key]
        )
    elif choice == 1 and names:  # renamed: long, another tensor's name, a prefix no MLX module writes
        old = rng.choice(names)
        new = rng.choice([long_name(rng), rng.choice(names), "layers.7." + old, old.replace(".", "/"), "", "\u00e9"])
        doc[new] = doc.pop(old)
    elif choice == 2:  # thousands of tensors
        for number in range(rng.choice([2, 100, 20_000])):
            doc[f"t{number}"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    elif choice == 3 and names:  # a key twice in the JSON text
        text = json.dumps(doc)
        name = rng.choice(names)
        raw_text = text[:-1] + f", {json.dumps(name)}: {json.dumps(doc[name])}" + "}"
    elif choice == 4:
        doc["__metadata__"] = rng.choice([{"format": "mlx"}, {"format": 7}, "x", {"a" * 100_000: "b"}, [1]])
    elif choice == 5:  # the header in another encoding, or padded
        text = json.dumps(doc)
        raw = rng.choice(
            [text.encode("utf-16"), text.encode() + b" " * rng.choice([1, 7, 1 << 16]), b"\xef\xbb\xbf" + text.encode()]
        )
        return struct.pack("<Q", len(raw)) + raw + rest
    elif choice == 6:  # the data cut or grown
        rest = rest[: rng.randrange(len(rest) + 1)] if rng.random() < 0.6 else rest + bytes(rng.choice([1, 4, 1 << 16]))
    elif names:  # a tensor entry that is a deep structure
        doc[rng.choice(names)] = "__DEEP__"
    text = raw_text if raw_text is not None else json.dumps(doc).replace('"__DEEP__"', DEEP)
    header = text.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(header)) + header + rest


def mutate_npz(data: bytes, rng: random.Random) -> bytes:
    """An .npz damaged in its structure: a member's .npy header, its data cut, members renamed (long, outside the
    archive, repeated), dropped or multiplied by thousands, an object member, compressed, zip headers; else bytes."""
    try:
        members = _members(data)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return mutate_bytes(data, rng)
    if not members or rng.random() < 0.1:
        return mutate_bytes(data, rng)
    choice = rng.randrange(9)
    index = rng.randrange(len(members))
    info, payload = members[index]
    if choice == 0:
        try:
            ((magic, header, body),) = _npy_leaves(payload)
            members[index] = (info, _npy_leaf(magic, mutate_npy_header(header, rng), body))
        except Exception:
            members[index] = (info, mutate_bytes(payload, rng))
    elif choice == 1:
        members[index] = (info, payload[: rng.randrange(len(payload) + 1)])
    elif choice == 2:
        name = rng.choice([long_name(rng)[:60000] + ".npy", "../../x.npy", "/abs.npy", "a.txt", "dir/", ".npy", "x"])
        members[index] = (zipfile.ZipInfo(name), payload)
    elif choice == 3:
        members.append(members[index])
    elif choice == 4:
        del members[index]
    elif choice == 5:
        members += [(zipfile.ZipInfo(f"extra{n}.npy"), payload) for n in range(rng.choice([2, 100, 5000]))]
    elif choice == 6:
        members[index] = (info, _object_npy(rng))
    elif choice == 7:
        return _rezip(members, zipfile.ZIP_DEFLATED)
    else:
        return _patch_headers(data, rng)
    return _rezip(members)


def mutate_flax(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """`mutate_msgpack_tree`; now and then (True) instead a damage every reader refuses: the seed's tree inside 65 or
    more levels of lists, or a byte after it (after the seed: a byte after a tree cut short could complete it)."""
    if rng.random() < 0.15:
        files[main] = b"\x91" * rng.choice([65, 1000]) + files[main] if rng.random() < 0.5 else files[main] + b"\xc0"
        return True
    files[main] = mutate_msgpack_tree(files[main], rng)
    return False


def mutate_equinox(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """`mutate_eqx`; now and then (True) instead a leaf every reader refuses after the seed's: a pickled object, a .npy
    of version 0.0 or 3.0, or bytes that are no .npy (after the seed: after a leaf cut short they could complete it)."""
    if rng.random() < 0.15:
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(7, np.float32))
        leaf = buffer.getvalue()
        files[main] += rng.choice(
            [
                _object_npy(rng),
                leaf[:6] + rng.choice([b"\x00\x00", b"\x03\x00"]) + struct.pack("<I", len(leaf) - 10) + leaf[10:],
                b"\x00" * rng.choice([1, 64]),
            ]
        )
        return True
    files[main] = mutate_eqx(files[main], rng)
    return False


def _object_npy(rng: random.Random) -> bytes:
    """A .npy of objects: unpickling it would run the payload."""
    buffer = io.BytesIO()
    objects = np.empty(1, dtype=object)
    objects[0] = _WritesMarker(rng.choice(["open", "system", "eval"]))
    np.save(buffer, objects, allow_pickle=True)
    return buffer.getvalue()


def mutate_mlx(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    files[main] = (mutate_npz if main.endswith(".npz") else mutate_safetensors_structure)(files[main], rng)
    return False


# ncnn: a text .param and its .bin


def mutate_ncnn(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """An ncnn model damaged: the .param's magic, counts, layer lines (types, names, bottom and top counts and
    names, key=value params and arrays), lines repeated thousands of times or dropped, other text encodings; the .bin
    cut, grown or given other blob tags."""
    bin_name = main[: -len(".param")] + ".bin"
    lines = files[main].decode("utf-8").split("\n")
    layer_lines = [i for i in range(2, len(lines)) if lines[i].strip()]
    encoding, newline = "utf-8", "\n"
    refuse = False
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(
            ["magic", "counts", "layer", "layer", "layer", "params", "params", "lines", "encoding", "bin", "bin"]
        )
        if op == "magic":
            lines[0] = rng.choice(["0", "7767516", "x", "", "7767517 1", "\ufeff7767517", "07767517"])
            refuse = True  # no .param without its magic number first
        elif op == "counts":
            words = [*lines[1].split(), "0", "0"]
            n_layers, n_blobs = _integer(words[0]), _integer(words[1])
            lines[1] = rng.choice(
                [
                    f"{n_layers + 1} {n_blobs}",
                    f"{n_layers} {n_blobs - 1}",
                    "0 0",
                    "-1 4",
                    f"{2**31} {2**31}",
                    "3",
                    "a b",
                ]
            )
        elif op == "layer" and layer_lines:
            i = rng.choice(layer_lines)
            tokens = lines[i].split()
            if len(tokens) < 4:
                continue
            field = rng.randrange(6)
            if field == 0:
                tokens[0] = rng.choice(
                    ["LSTM", "GRU", "RNN", "Foo", "InnerProduct", "MemoryData", "Input", "Convolution"]
                )
            elif field == 1:
                tokens[1] = rng.choice([*LONG_NAMES, "dup", tokens[1] + "x"]).replace(" ", "_")
            elif field == 2:
                tokens[rng.choice([2, 3])] = rng.choice(["0", "9", "-1", "x", str(2**40)])
            elif field == 3 and len(tokens) > 4:  # a bottom or top renamed: a cycle, a blob nowhere, a long name
                j = rng.randrange(4, len(tokens))
                if "=" not in tokens[j]:
                    tokens[j] = rng.choice(["in0", "out0", "nowhere", "y" * 100_000, tokens[4]])
            elif field == 4:
                tokens.insert(4, rng.choice(["in0", "x"]))
            elif len(tokens) > 4:
                del tokens[rng.randrange(4, len(tokens))]
            lines[i] = " ".join(tokens)
        elif op == "params" and layer_lines:
            i = rng.choice(layer_lines)
            tokens = lines[i].split()
            keyed = [j for j, t in enumerate(tokens) if "=" in t]
            value = rng.choice(
                ["0", "-1", "1", "2", "3", str(2**31), str(2**63), "1.5", "nan", "1e999", "x", "", "=", "7=7"]
            )
            choice = rng.randrange(5)
            if choice == 0 and keyed:
                j = rng.choice(keyed)
                tokens[j] = tokens[j].split("=")[0] + "=" + value
            elif choice == 1:
                tokens.append(f"{rng.choice([0, 1, 2, 3, 8, 31, 999999, -1, -23300, -23301])}={value}")
            elif choice == 2:  # an array: its count off, its values odd, thousands of them
                count = rng.choice([0, 3, 5, 2**31, -1])
                values = ",".join([value] * rng.choice([0, 3, 100_000]))
                tokens.append(f"-23303={count},{values}")
            elif choice == 3 and keyed:
                tokens.append(tokens[rng.choice(keyed)])  # a key twice
            else:
                tokens += [f"{k}=1" for k in range(rng.choice([10, 20_000]))]
            lines[i] = " ".join(tokens)
        elif op == "lines" and layer_lines:
            i = rng.choice(layer_lines)
            choice = rng.randrange(3)
            if choice == 0:
                lines[i:i] = [lines[i]] * rng.choice([1, 100, 5000])
            elif choice == 1:
                del lines[i]
            else:
                j = rng.choice(layer_lines)
                lines[i], lines[j] = lines[j], lines[i]
            layer_lines = [k for k in range(2, len(lines)) if lines[k].strip()]
        elif op == "encoding":
            choice = rng.randrange(6)
            if choice == 0:
                newline = "\r\n"
            elif choice == 1:
                encoding = rng.choice(["utf-16", "utf-32", "utf-8-sig"])
            elif choice == 2 and layer_lines:
                lines[rng.choice(layer_lines)] += " \udcff"
            elif choice == 3:
                lines = ["\t".join(line.split(" ")) for line in lines]
            elif choice == 4 and layer_lines:
                lines[rng.choice(layer_lines)] += "\x00"
            else:
                newline = rng.choice(["\r", " ", ""])
        elif op == "bin" and bin_name in files:
            blob = files[bin_name]
            choice = rng.randrange(5)
            if choice == 0:
                files[bin_name] = blob[: rng.randrange(len(blob) + 1) // 4 * 4]
            elif choice == 1:
                files[bin_name] = blob + bytes(rng.choice([4, 4096]))
            elif choice == 2 and len(blob) >= 4:  # another tag where a blob's tag is (the first is at 0)
                tag = rng.choice([0x01306B47, 0x000D4B38, 0x0002C056, 0xFFFFFFFF, 1])
                files[bin_name] = struct.pack("<I", tag) + blob[4:]
            elif choice == 3:
                del files[bin_name]
            else:
                files[bin_name] = mutate_bytes(blob, rng)
    files[main] = newline.join(lines).encode(encoding, "surrogateescape" if encoding == "utf-8" else "replace")
    return refuse


# TFLite: what a flatbuffer's offsets may point at, grafted at the file's end


def graft_tflite(data: bytes, rng: random.Random) -> bytes:
    """A .tflite with one of its offset fields pointed at something appended at the end: a string (a long name, not
    UTF-8), a vector (a shape of thousands of dims or huge ones, an operator list of thousands of entries), or a
    field that points at itself."""
    fields = _tflite_fields(data)
    if not fields:
        return mutate_bytes(data, rng)
    pos, _ = rng.choice([f for f in fields if f[1] == 4] or fields)
    out = bytearray(data)
    out += bytes((-len(out)) % 4)
    target = len(out)
    choice = rng.randrange(4)
    if choice == 3:  # the offset to the field itself: what it points at is where it points from
        struct.pack_into("<I", out, pos, 0)
        return bytes(out[: len(data)])
    if choice == 0:  # a string
        text = rng.choice([long_name(rng).encode(), b"\xff\xfe\xfd", b"", b"a\x00b"])
        out += struct.pack("<I", len(text)) + text + b"\0"
    elif choice == 1:  # a vector of ints
        values = rng.choice([[2**31 - 1] * 4, [-1, 5], [1] * rng.choice([40, 5000]), []])
        out += struct.pack(f"<I{len(values)}i", len(values), *values)
    else:  # a vector of offsets, all to one zeroed table after it (thousands of operators or tensors)
        count = rng.choice([2, 1000, 50_000])
        start = len(out) + 4
        end = start + 4 * count
        out += struct.pack(f"<I{count}I", count, *(end - (start + 4 * k) for k in range(count))) + bytes(64)
    if pos + 4 <= len(data):
        struct.pack_into("<I", out, pos, (target - pos) % 2**32)
    return bytes(out)


# identify's inputs: a headerless blob and a probe .npz


def mutate_probe(data: bytes, rng: random.Random) -> bytes:
    """A probe damaged in what it holds: an array of another shape, type or value (NaN, lengths out of range, a
    batch_first that is no flag), an array dropped, renamed or added; else its .npz structure (`mutate_npz`)."""
    if rng.random() < 0.35:
        return mutate_npz(data, rng)
    with np.load(io.BytesIO(data)) as npz:
        arrays = {name: npz[name] for name in npz.files}
    name = rng.choice(sorted(arrays))
    value = arrays[name]
    choice = rng.randrange(8)
    if choice == 0:
        arrays[name] = value.reshape(-1) if value.ndim > 1 else value.reshape(1, -1)
    elif choice == 1:
        arrays[name] = value.astype(rng.choice([np.float16, np.float64, np.int64, bool, np.complex64, np.uint8]))
    elif choice == 2 and value.size:
        flat = value.astype(np.float64).reshape(-1).copy()
        flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -1e300, -1, 0, 10**9])
        with np.errstate(all="ignore"):  # NaN and -1e300 cast to an integer or float32: whatever comes out
            arrays[name] = flat.reshape(value.shape).astype(value.dtype if value.dtype.kind == "f" else np.int64)
    elif choice == 3:
        del arrays[name]
    elif choice == 4:
        arrays[rng.choice(["X", "y ", "h_0", long_name(rng)[:200], "batch_first"])] = arrays.pop(name)
    elif choice == 5:
        for number in range(rng.choice([1, 50, 2000])):
            arrays[f"extra{number}"] = value
    elif choice == 6:
        arrays["lengths"] = np.array(rng.choice([[0], [-1, 3], [10**6, 1], [1.5], []]))
    else:
        arrays["batch_first"] = np.array(
            rng.choice([["yes"], [1, 0], 2.5, []]), dtype=object if rng.random() < 0.3 else None
        )
    buffer = io.BytesIO()
    _savez(buffer, arrays)
    return buffer.getvalue()


def _savez(buffer: io.BytesIO, arrays: dict[str, np.ndarray]) -> None:
    """np.savez, with object arrays pickled (as a careless writer would)."""
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")
        for name, value in arrays.items():
            member = io.BytesIO()
            np.save(member, value, allow_pickle=True)
            archive.writestr(name + ".npy", member.getvalue())


def mutate_blob_size(data: bytes, rng: random.Random) -> bytes:
    """A headerless blob a little short or long (a size that fits no layout, or another one), or damaged."""
    choice = rng.randrange(4)
    if choice == 0:
        return data[: len(data) - rng.choice([1, 2, 4, 8, 28, len(data) // 2])]
    if choice == 1:
        return data + bytes(rng.choice([1, 4, 28, 112, len(data)]))
    if choice == 2:
        return b""
    return mutate_bytes(data, rng)


def mutate_tflite_loops(data: bytes, rng: random.Random) -> bytes:
    """TensorFlow's converter's RNN loops mutated inside their bodies (parsed and rebuilt with LiteRT's schema
    module): gates swapped (the ops reading two gates read each other's), a weight replaced by a computed tensor or
    by a loop input, an op made another (no cell), a split into other parts, an op's input rewired, the body and
    condition exchanged, the loop's initial state or sequence replaced."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    for graph in model.subgraphs:  # the schema's arrays are read-only views of `data`
        graph.inputs, graph.outputs = [int(t) for t in graph.inputs], [int(t) for t in graph.outputs]
        for op in graph.operators:
            op.inputs, op.outputs = [int(t) for t in op.inputs], [int(t) for t in op.outputs]
    bodies = [g for g in model.subgraphs[1:] if g.operators and len(g.operators) > 6]
    if not bodies:
        return data
    codes = [c.builtinCode for c in model.operatorCodes]
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    for _ in range(rng.choice([1, 1, 2, 3])):
        body = rng.choice(bodies)
        ops = list(body.operators)
        computed = [int(t) for op in ops for t in op.outputs]
        choice = rng.randrange(8)
        if choice == 0:  # two gates swapped where they are read
            gates = {int(op.outputs[0]) for op in ops if names.get(codes[op.opcodeIndex]) in ("LOGISTIC", "TANH")}
            reads = [(op, i) for op in ops for i, t in enumerate(op.inputs) if int(t) in gates]
            if len(reads) >= 2:
                (one, at), (other, other_at) = rng.sample(reads, 2)
                one.inputs[at], other.inputs[other_at] = other.inputs[other_at], one.inputs[at]
        elif choice == 1:  # a weight replaced by a computed tensor, or by one of the body's inputs
            products = [  # an op an earlier change made a FULLY_CONNECTED may have fewer inputs
                op for op in ops if names.get(codes[op.opcodeIndex]) == "FULLY_CONNECTED" and len(op.inputs) > 1
            ]
            if products:
                pool = computed if rng.random() < 0.5 else [int(t) for t in body.inputs]
                rng.choice(products).inputs[1] = rng.choice(pool)
        elif choice == 2:  # an op made another: no cell
            op = rng.choice(ops)
            op.opcodeIndex = rng.randrange(len(codes))
        elif choice == 3:  # a split into other parts, or a slice's bounds moved
            splits = [op for op in ops if names.get(codes[op.opcodeIndex]) in ("SPLIT", "STRIDED_SLICE")]
            if splits:
                op = rng.choice(splits)
                if op.builtinOptions is not None and hasattr(op.builtinOptions, "numSplits"):
                    op.builtinOptions.numSplits = rng.choice([0, 1, 2, 5, -1])
                elif len(op.inputs) > 1:
                    op.inputs[1] = rng.choice(computed + [int(t) for t in op.inputs])
        elif choice == 4:  # an op's input rewired to another value of the body
            op = rng.choice(ops)
            if len(op.inputs):
                op.inputs[rng.randrange(len(op.inputs))] = rng.choice(computed + [int(t) for t in body.inputs])
        elif choice == 5:  # the body and the condition of a loop exchanged, or pointed elsewhere
            loops = [op for op in model.subgraphs[0].operators if codes[op.opcodeIndex] == schema.BuiltinOperator.WHILE]
            if loops:
                options = rng.choice(loops).builtinOptions
                body_index = options.bodySubgraphIndex
                options.bodySubgraphIndex, options.condSubgraphIndex = options.condSubgraphIndex, body_index
                if rng.random() < 0.3:
                    options.bodySubgraphIndex = rng.choice([0, len(model.subgraphs), -1, 2**31 - 1])
        elif choice == 6:  # a loop's input (its initial state, its sequence, a counter) replaced by another tensor
            loops = [op for op in model.subgraphs[0].operators if codes[op.opcodeIndex] == schema.BuiltinOperator.WHILE]
            if loops:
                op = rng.choice(loops)
                op.inputs[rng.randrange(len(op.inputs))] = rng.randrange(len(model.subgraphs[0].tensors))
        else:  # a body's output (a carried value) taken from elsewhere
            body.outputs[rng.randrange(len(body.outputs))] = rng.choice(computed + [int(t) for t in body.inputs])
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


# TensorFlow.js layers models: model.json (topology and weightsManifest) and the shards it names

TFJS_BAD_PATHS = ["../x.bin", "/etc/passwd", "missing.bin", "", "a\0b", "..\\x.bin", "C:\\x.bin", "sub/../../x.bin"]
TFJS_BAD_DTYPES = ["float64", "string", "float16", None, 3, "", "FLOAT32"]


def mutate_tfjs(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """A layers model damaged: its shards' paths (escaping, absolute, missing), weights' dtypes, shapes, names and
    quantizations, the topology's layers and settings, the JSON itself (cut, nested deep, not UTF-8), the shards cut,
    grown or flipped."""
    doc = json.loads(files[main])
    groups = doc.get("weightsManifest") or []
    weights = [w for g in groups for w in g.get("weights", [])]
    shards = [p for g in groups for p in g.get("paths", []) if p in files]
    held = sum(len(files[p]) for p in shards)  # the seeds' shards hold their weights' bytes, no more
    refuse = cut = resized = False
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(
            ["paths", "dtype", "shape", "name", "quant", "topology", "layer", "shard", "shard", "json", "calls"]
        )
        if op == "paths" and groups:
            group = rng.choice(groups)
            group["paths"] = [rng.choice(TFJS_BAD_PATHS)] if rng.random() < 0.7 else rng.choice(ODD_VALUES)
            refuse = True  # no shard outside the folder, none missing, a paths list always
        elif op == "dtype" and weights:
            rng.choice(weights)["dtype"] = rng.choice(TFJS_BAD_DTYPES)
            refuse = True  # a dtype no layers model's manifest holds
        elif op == "shape" and weights:
            resized = True
            rng.choice(weights)["shape"] = rng.choice(
                [[-1], [2**31], [1.5], "x", [], [0], [1] * 40, [2**30, 2**30], [3, 16], None]
            )
        elif op == "name" and weights:
            weight = rng.choice(weights)
            parts = weight["name"].split("/")
            weight["name"] = rng.choice(
                ["/".join(parts[:-2] + parts[-1:]), "/".join([*parts[:-1], "cell", parts[-1]]), weights[0]["name"]]
                + [long_name(rng), ""]
            )
        elif op == "quant" and weights:
            resized = True
            rng.choice(weights)["quantization"] = rng.choice(
                [
                    {"dtype": "uint8", "scale": 0.01, "min": -1},
                    {"dtype": "float16"},
                    {"dtype": "uint16", "scale": 1e300},
                ]
                + [{"dtype": "int4"}, {"dtype": "uint8", "scale": float("nan"), "min": 0}, "x", None]
            )
        elif op == "topology":
            choice = rng.random()
            if choice < 0.3:
                doc.pop(rng.choice(["modelTopology", "weightsManifest"]), None)
                refuse = True
            elif choice < 0.5:
                doc["modelTopology"] = json.loads("[" * 50 + "]" * 50) if rng.random() < 0.5 else rng.choice(ODD_VALUES)
                refuse = True
            else:
                doc["format"] = rng.choice(["graph-model", "", 3, None, "layers-model"])
                refuse = doc["format"] != "layers-model"
        elif op == "layer":
            topology = doc.get("modelTopology")
            model = topology.get("config") if isinstance(topology, dict) else None
            layers = model.get("layers") if isinstance(model, dict) else None
            if isinstance(layers, list) and layers:
                entry = rng.choice(layers)
                config = entry.get("config") if isinstance(entry, dict) else None
                wrapped = config.get("layer") if isinstance(config, dict) else None
                inner = wrapped.get("config") if isinstance(wrapped, dict) else config
                key = rng.choice(["units", "activation", "recurrent_activation", "use_bias", "name", "go_backwards"])
                value = rng.choice([*ODD_VALUES, "hard_sigmoid", "relu", 0, 2**40, "", long_name(rng)])
                if isinstance(inner, dict):
                    inner[key] = value
                if rng.random() < 0.2 and isinstance(entry, dict):
                    entry["class_name"] = rng.choice(["GRU", "ConvLSTM2D", "Dense", "", 3, "Bidirectional"])
        elif op == "calls":  # a functional model's layer calls (a streaming model's): on what, which call, cycles
            topology = doc.get("modelTopology")
            model = topology.get("config") if isinstance(topology, dict) else None
            layers = model.get("layers") if isinstance(model, dict) else None
            called = [e for e in layers if isinstance(e, dict) and e.get("inbound_nodes")] if layers else []
            if called:
                entry = rng.choice(called)
                node = entry["inbound_nodes"][0]
                names = [e.get("name") for e in layers if isinstance(e, dict)]
                tensor = [rng.choice([*names, "nowhere", entry.get("name")]), rng.choice([0, 0, 1, 7, -1, "0"]), 0, {}]
                how = rng.random()
                if how < 0.6 and node:
                    node[rng.randrange(len(node))] = tensor
                elif how < 0.8:
                    node.append(tensor)  # one more initial state, or a constant
                else:
                    entry["inbound_nodes"] = rng.choice([[], [[]], [node, node], ODD_VALUES[0], [[tensor[0]]]])
        elif op == "shard" and shards:
            name = rng.choice(shards)
            data = bytearray(files[name])
            how = rng.random()
            if how < 0.4 and data:
                files[name] = bytes(data[: rng.randrange(len(data))])
                cut = True
            elif how < 0.7:
                files[name] = bytes(data) + os.urandom(rng.choice([1, 4, 1000]))
            else:
                for _ in range(rng.choice([1, 8, 64])):
                    if data:
                        data[rng.randrange(len(data))] = rng.randrange(256)
                files[name] = bytes(data)
    # shards that hold fewer bytes than the weights take (more is what TensorFlow.js reads too), where no weight's size
    # was changed
    refuse = refuse or (cut and not resized and sum(len(files[p]) for p in shards) < held)
    text = json.dumps(doc)
    if rng.random() < 0.1:
        choice = rng.random()
        if choice < 0.4:
            text = text[: rng.randrange(len(text))]
        elif choice < 0.7:
            text = '{"modelTopology": ' + "[" * 200000 + "]" * 200000 + "}"
        else:
            files[main] = text.encode("utf-8")[:20] + b"\xff\xfe" + text.encode("utf-8")[20:]
            return True
        refuse = True
    files[main] = text.encode("utf-8")
    return refuse


def mutate_openvino_loops(data: bytes, rng: random.Random) -> bytes:
    """OpenVINO's TensorFlow frontend's RNN Loops mutated inside their bodies and wiring: gates swapped (the layers
    reading two gates read each other's), a matrix replaced by a computed value or a body parameter, a layer made
    another kind (no cell), a split into other parts or a slice's masks changed, an edge rewired, a back edge or port
    map entry pointed elsewhere, a Loop's input (its initial state, its sequence, its trip count) fed by another
    layer, a port map's slicing over the iterations changed (its axis, start, end, stride or part_size; added or
    taken away), a weight's storage changed (a Const's element type, shape or offset; a Convert's destination, as
    `ov.save_model`'s f16 compression writes them)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(data)
    loops = [layer for layer in root.findall("./layers/layer") if layer.get("type") in ("Loop", "TensorIterator")]
    if not loops:
        return data
    kinds = ["Sigmoid", "Tanh", "Relu", "Add", "Multiply", "Subtract", "MatMul", "Split", "Concat", "Gather"]
    for _ in range(rng.choice([1, 1, 2, 3])):
        loop = rng.choice(loops)
        body = loop.find("body")
        if body is None:
            return data
        layers = body.findall("./layers/layer")
        edges = body.findall("./edges/edge")
        computed = [(layer.get("id"), port.get("id")) for layer in layers for port in layer.iterfind("output/port")]
        kind_of = {layer.get("id"): layer.get("type") for layer in layers}
        choice = rng.randrange(11)
        if choice == 10:  # a weight's storage: a Const's element type, shape or offset, a Convert's destination
            stored = [la.find("data") for la in layers if la.get("type") in ("Const", "Convert")]
            found = [d for d in stored if d is not None]
            if found:
                element = rng.choice(found)
                key = rng.choice(sorted(element.attrib) or ["element_type"])
                element.set(key, rng.choice(["f16", "f32", "bf16", "f64", "i8", "u8", "boolean", "0", "1, 16", "x"]))
        elif choice >= 8:  # a port map's slicing changed, added or taken away
            entries = [e for e in loop.findall("./port_map/*") if e.get("purpose") is None]
            if entries:
                entry = rng.choice(entries)
                if "axis" in entry.attrib and rng.random() < 0.2:
                    for key in ("axis", "start", "end", "stride", "part_size"):
                        entry.attrib.pop(key, None)
                else:
                    key = rng.choice(["axis", "start", "end", "stride", "part_size"])
                    entry.set(key, rng.choice(["0", "1", "-1", "2", "-2", "5", "x"]))
        elif choice == 0:  # two gates swapped where they are read
            reads = [e for e in edges if kind_of.get(e.get("from-layer")) in ("Sigmoid", "Tanh")]
            if len(reads) >= 2:
                one, other = rng.sample(reads, 2)
                for key in ("from-layer", "from-port"):
                    swapped = one.get(key, ""), other.get(key, "")
                    one.set(key, swapped[1])
                    other.set(key, swapped[0])
        elif choice == 1:  # a matrix replaced by a computed value or a parameter
            products = {layer.get("id") for layer in layers if layer.get("type") == "MatMul"}
            weights = [e for e in edges if e.get("to-layer") in products and e.get("to-port") == "1"]
            if weights and computed:
                edge = rng.choice(weights)
                source = rng.choice(computed)
                edge.set("from-layer", str(source[0]))
                edge.set("from-port", str(source[1]))
        elif choice == 2:  # a layer made another kind
            layer = rng.choice(
                [la for la in layers if la.get("type") not in ("Parameter", "Result", "Const")] or layers
            )
            layer.set("type", rng.choice(kinds))
        elif choice == 3:  # a split into other parts, or a slice's masks changed
            data_elements = [la.find("data") for la in layers if la.get("type") in ("Split", "StridedSlice", "Gather")]
            found = [d for d in data_elements if d is not None]
            if found:
                element = rng.choice(found)
                key = rng.choice(sorted(element.attrib) or ["num_splits"])
                element.set(key, rng.choice(["0", "1", "2", "5", "-1", "1, 1", "0, 1, 0", "x"]))
        elif choice == 4:  # an edge rewired to another value of the body
            if edges and computed:
                edge = rng.choice(edges)
                source = rng.choice(computed)
                edge.set("from-layer", str(source[0]))
                edge.set("from-port", str(source[1]))
        elif choice == 5:  # a back edge or a port map entry pointed elsewhere
            entries = loop.findall("./back_edges/edge") + loop.findall("./port_map/*")
            if entries:
                entry = rng.choice(entries)
                key = rng.choice([k for k in ("from-layer", "to-layer", "internal_layer_id") if k in entry.attrib])
                entry.set(key, str(rng.choice([la.get("id") for la in layers] + ["999", "-1"])))
        elif choice == 6:  # a Loop's input fed by another layer of the main graph
            main = [e for e in root.findall("./edges/edge") if e.get("to-layer") == loop.get("id")]
            others = [la for la in root.findall("./layers/layer") if la.find("output/port") is not None]
            if main and others:
                edge, layer = rng.choice(main), rng.choice(others)
                port = rng.choice(layer.findall("output/port"))
                edge.set("from-layer", str(layer.get("id")))
                edge.set("from-port", str(port.get("id")))
        else:  # a Result of the body taken from elsewhere
            results = {la.get("id") for la in layers if la.get("type") == "Result"}
            feeding = [e for e in edges if e.get("to-layer") in results]
            if feeding and computed:
                edge, source = rng.choice(feeding), rng.choice(computed)
                edge.set("from-layer", str(source[0]))
                edge.set("from-port", str(source[1]))
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def mutate_openvino_quantized(xml: bytes, weights: bytes, rng: random.Random) -> tuple[bytes, bytes]:
    """An nncf-quantized IR (its .xml and .bin) damaged where its quantization is, in its graph or a Loop's body: a
    scale (one value or all, f32 or f16) 0, negative, NaN, infinite, huge or subnormal; a FakeQuantize's range or
    levels that lie; an integer constant's type, shape (per-row lengths that lie), offset or size; a zero point's
    bytes, or its Const made i32 of values outside the weight's range; a Convert's destination; a decompression
    layer made another kind or fed from elsewhere; the .bin cut short; now and then bytes flipped."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    graphs = [root, *root.iter("body")]  # the IR's own graph and each Loop's body, each its layers and edges
    layers: list[ET.Element] = []
    edges_of: dict[int, list[ET.Element]] = {}  # a layer (by id()) -> the edges of its graph
    consts, integers, scales, ranges, zero_points = [], [], [], [], []
    for graph in graphs:
        own = graph.findall("./layers/layer")
        edges = graph.findall("./edges/edge")
        by_id = {layer.get("id"): layer for layer in own}
        feeding: dict[str, list[tuple[str, str]]] = {}  # a layer's id -> the kinds of the layers it feeds, and ports
        for edge in edges:
            fed = by_id.get(edge.get("to-layer"), ET.Element("x")).get("type", "")
            feeding.setdefault(edge.get("from-layer", ""), []).append((fed, edge.get("to-port", "")))
        for layer in own:
            edges_of[id(layer)] = edges
            layers.append(layer)
            element = layer.find("data")
            if layer.get("type") != "Const" or element is None:
                continue
            consts.append(layer)
            kinds = [kind for kind, _ in feeding.get(layer.get("id", ""), [])]
            etype = element.get("element_type")
            if etype in ("i8", "u8"):
                integers.append(layer)
                converts = [e.get("to-layer") for e in edges if e.get("from-layer") == layer.get("id")]
                if any(
                    kind == "Subtract" and port == "1"
                    for convert in converts
                    if by_id.get(convert, ET.Element("x")).get("type") == "Convert"
                    for kind, port in feeding.get(convert or "", [])
                ):
                    zero_points.append(layer)
            if etype in ("f32", "f16") and "Multiply" in kinds:
                scales.append(layer)
            if "FakeQuantize" in kinds:
                ranges.append(layer)
    quantizing = [la for la in layers if la.get("type") in ("Convert", "Multiply", "Subtract", "FakeQuantize")]
    data = bytearray(weights)

    def placed(layer: ET.Element) -> tuple[int, int] | None:
        element = layer.find("data")
        try:
            offset, size = int(element.get("offset", "")), int(element.get("size", ""))  # type: ignore[union-attr]
        except ValueError:
            return None
        return (offset, size) if offset >= 0 and offset + size <= len(data) else None

    for _ in range(rng.choice([1, 1, 1, 2])):
        choice = rng.choices(range(11), weights=[5, 3, 3, 3, 2, 2, 2, 2, 1, 1, 2])[0]
        if choice == 0 and scales:  # a scale, or every scale of a tensor
            layer = rng.choice(scales)
            where = placed(layer)
            width, form = (2, "<e") if layer.find("data").get("element_type") == "f16" else (4, "<f")  # type: ignore[union-attr]
            if where is not None and where[1] >= width:
                special = rng.choice(
                    [0.0, -0.0, -0.01, -1.0, float("nan"), float("inf"), -float("inf"), 3e38, 6e4, 1e3, 1e-45, 1e-7]
                )
                try:
                    packed = struct.pack(form, special)
                except OverflowError:  # beyond f16: its infinity
                    packed = struct.pack(form, float("inf") if special > 0 else -float("inf"))
                count = where[1] // width
                first = rng.randrange(count) if rng.random() < 0.7 else 0
                for k in range(first, first + 1 if rng.random() < 0.7 else count):
                    data[where[0] + width * k : where[0] + width * k + width] = packed
        elif choice == 1 and ranges:  # a FakeQuantize's range: swapped, empty, NaN, infinite
            where = placed(rng.choice(ranges))
            if where is not None and where[1] >= 4:
                value = rng.choice([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 1e-40])
                data[where[0] : where[0] + 4] = struct.pack("<f", value)
        elif choice == 2:  # a FakeQuantize's levels
            fqs = [la.find("data") for la in layers if la.get("type") == "FakeQuantize"]
            found = [d for d in fqs if d is not None]
            if found:
                rng.choice(found).set(
                    "levels", rng.choice(["0", "1", "2", "3", "255", "65536", "65537", "-1", "x", "1e9"])
                )
        elif choice == 3 and integers:  # an integer constant's type or shape (per-row lengths that lie)
            element = rng.choice(integers).find("data")
            assert element is not None
            if rng.random() < 0.5:
                element.set(
                    "element_type", rng.choice(["u8", "i8", "i16", "u16", "i4", "u4", "f16", "f32", "boolean", "x"])
                )
            else:
                element.set("shape", rng.choice(OPENVINO_LYING_SHAPES))
        elif choice == 4 and (scales or integers):  # a scale's or an integer's shape, offset or size
            element = rng.choice(scales + integers).find("data")
            assert element is not None
            key = rng.choice(["shape", "offset", "size"])
            was = element.get(key, "")
            element.set(
                key,
                rng.choice(
                    [
                        *OPENVINO_LYING_SHAPES[:6],
                        "0",
                        "-4",
                        str(len(data)),
                        str(len(data) - 2),
                        "99999999999",
                        was + "0",
                    ]
                ),
            )
        elif choice == 5 and integers:  # a zero point's or an integer weight's bytes
            where = placed(rng.choice(zero_points if zero_points and rng.random() < 0.5 else integers))
            if where is not None and where[1]:
                at = where[0] + rng.randrange(where[1])
                data[at] = rng.choice([0, 1, 127, 128, 255])
        elif choice == 6:  # a Convert's destination
            converts = [la.find("data") for la in layers if la.get("type") == "Convert"]
            found = [d for d in converts if d is not None]
            if found:
                rng.choice(found).set(
                    "destination_type", rng.choice(["f16", "f32", "bf16", "f64", "i32", "i8", "u8", "x"])
                )
        elif choice == 7 and quantizing:  # a decompression or rounding layer made another kind
            rng.choice(quantizing).set(
                "type", rng.choice(["Add", "Subtract", "Multiply", "Divide", "Convert", "FakeQuantize", "Relu"])
            )
        elif choice == 8 and quantizing:  # a decompression or rounding layer fed from elsewhere in its graph
            layer = rng.choice(quantizing)
            edges = edges_of[id(layer)]
            into = [e for e in edges if e.get("to-layer") == layer.get("id")]
            ends = {e.get("from-layer") for e in edges} | {e.get("to-layer") for e in edges}
            sources = [
                (la.get("id"), port.get("id"))
                for la in layers
                if edges_of[id(la)] is edges and la.get("id") in ends
                for port in la.iterfind("output/port")
            ]
            if into and sources:
                edge, (layer_id, port_id) = rng.choice(into), rng.choice(sources)
                edge.set("from-layer", str(layer_id))
                edge.set("from-port", str(port_id))
        elif choice == 9:  # the .bin cut short, or its bytes flipped
            data = bytearray(mutate_bytes(bytes(data), rng))
        elif choice == 10 and zero_points:  # a zero point's Const made i32, its values outside the weight's range
            element = rng.choice(zero_points).find("data")
            assert element is not None
            count = math.prod(int(n) for n in element.get("shape", "").split(",") if n.strip().isdigit())
            values = [rng.choice([0, 1, 128, 255, 256, 300, -1, -129, 2**31 - 1]) for _ in range(count)]
            element.set("element_type", "i32")
            element.set("offset", str(len(data)))
            element.set("size", str(4 * count))
            data += struct.pack(f"<{count}i", *values)
    out = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    if rng.random() < 0.05:
        out = mutate_bytes(out, rng)
    return out, bytes(data)


# Shapes a quantized weight's integers or scales may claim: per-row and per-column lengths that lie, other ranks.
OPENVINO_LYING_SHAPES = [
    "1, 27, 5",
    "1, 29, 5",
    "16, 1",
    "1, 16",
    "15, 3",
    "20, 5",
    "1, 28",
    "28",
    "",
    "0",
    "1, 28, 5, 1",
    "1, 2147483647, 5",
    "-1",
    "1, 28, x",
]


# Hugging Face sharded checkpoints: model.safetensors.index.json (its weight_map) and the shards it names

HF_BAD_SHARDS = [*TFJS_BAD_PATHS, ".", "sub/model.safetensors", "model.safetensors:x", "C:model.safetensors"]


def mutate_hf_index(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """A sharded checkpoint damaged: its weight_map's shards (escaping, absolute, missing, another shard's), tensors
    left out or added, the index's JSON (cut, nested deep, not UTF-8, not a map), its metadata; a shard's structure
    damaged, a shard removed or renamed."""
    doc = json.loads(files[main])
    mapping = doc["weight_map"]
    shards = sorted(set(mapping.values()))
    # the JSON no index, or an index and shards that disagree (unless a shard's structure was changed, which may
    # agree again: a tensor it lost that the index no longer names, the RNN it was part of listed as incomplete)
    refuse = shard_changed = False
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(["path", "moved", "dropped", "added", "metadata", "shard", "shard", "gone", "json"])
        key = rng.choice(sorted(mapping))
        if op == "path":
            mapping[key] = rng.choice(HF_BAD_SHARDS)
        elif op == "moved" and len(shards) > 1:  # the index gives a shard a tensor it does not hold
            mapping[key] = rng.choice([s for s in shards if s != mapping[key]])
        elif op == "dropped":  # its shard holds a tensor the index does not name
            del mapping[key]
            if not mapping:
                break
        elif op == "added":
            mapping[rng.choice([long_name(rng), key + ".x", "rnn.weight_ih_l7"])] = rng.choice(shards)
        elif op == "metadata":
            doc["metadata"] = rng.choice([*ODD_VALUES, {"total_size": -1}, {"total_size": 2**70}])
        elif op == "shard" and not shard_changed and (present := [s for s in shards if s in files]):
            name = rng.choice(present)  # once: its header may no longer be one the mutator can parse
            files[name] = mutate_safetensors_structure(files[name], rng)
            shard_changed = True
        elif op == "gone" and (present := [s for s in shards if s in files]):
            name = rng.choice(present)
            data = files.pop(name)
            if rng.random() < 0.3:
                files[name.replace("-0000", "-1000")] = data
        elif op == "json":
            choice = rng.random()
            if choice < 0.4:
                doc = {"weight_map": rng.choice(ODD_VALUES)} if rng.random() < 0.5 else rng.choice(ODD_VALUES)
            elif choice < 0.7:
                files[main] = json.dumps(doc).encode()[: rng.randrange(8, 200)]
                return True
            else:
                files[main] = b'{"weight_map": ' + b"[" * 200000 + b"]" * 200000 + b"}"
                return True
            refuse = True
            break
    files[main] = json.dumps(doc, indent=2).encode("utf-8")
    return refuse or (not shard_changed and not _shards_agree(files, mapping))


def _shards_agree(files: dict[str, bytes], mapping: dict[str, str]) -> bool:
    """Whether every shard a weight_map names is there and holds exactly the tensors it gives that shard."""
    for shard in set(mapping.values()):
        if shard not in files:
            return False
        (length,) = struct.unpack("<Q", files[shard][:8])
        held = set(json.loads(files[shard][8 : 8 + length])) - {"__metadata__"}
        if held != {key for key, named in mapping.items() if named == shard}:
            return False
    return bool(mapping)


def mutate_tflite_quantized(data: bytes, rng: random.Random) -> bytes:
    """A quantized .tflite's int8 weights given other quantization parameters (parsed and rebuilt with LiteRT's
    schema module): scales 0, negative, NaN, infinite or huge; as many scales as the tensor has channels along
    another axis, or a count that fits none; zero points out of the type's range, or fewer than the scales; the
    axis out of the tensor's rank; no quantization at all; the tensor of another type (int16, uint8) or its buffer
    cut short; a weight's scales moved to another tensor."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    specials = [0.0, -0.01, float("nan"), float("inf"), 1e38, 1e-45, 3.4e38]
    for _ in range(rng.choice([1, 1, 2, 3])):
        # the tensors that still have scales (an earlier change may have taken a tensor's away), in any subgraph: a
        # fused op's in the main one, a WHILE loop's in its body
        quantized = [
            t
            for graph in model.subgraphs
            for t in graph.tensors
            if t.quantization is not None and t.quantization.scale is not None
        ]
        if not quantized:
            break
        tensor = rng.choice(quantized)
        quant = tensor.quantization
        shape = [int(d) for d in tensor.shape]
        choice = rng.randrange(9)
        if choice == 0:  # a special scale
            quant.scale = [rng.choice(specials)] * max(1, len(quant.scale))
        elif choice == 1:  # per channel along an axis (its count right, or off by one), with matching zero points
            axis = rng.randrange(len(shape) + 1)
            count = (shape[axis] if axis < len(shape) else 2) + rng.choice([0, 0, 1, -1])
            quant.scale = [rng.uniform(1e-4, 1e-2) for _ in range(max(0, count))]
            quant.zeroPoint = [0] * max(0, count)
            quant.quantizedDimension = axis
        elif choice == 2:  # zero points out of range, or of another count
            quant.zeroPoint = [rng.choice([-129, 128, 255, 300, -(2**40), 2**62])] * rng.choice([1, 2, 0])
        elif choice == 3:  # the axis beyond the rank
            quant.quantizedDimension = rng.choice([-1, len(shape), 2**31 - 1])
        elif choice == 4:  # no quantization parameters, or empty ones
            tensor.quantization = None if rng.random() < 0.5 else schema.QuantizationParametersT()
        elif choice == 5:  # another integer type
            tensor.type = rng.choice([schema.TensorType.INT16, schema.TensorType.UINT8, schema.TensorType.INT32])
        elif choice == 6:  # the buffer cut short or emptied
            buffer = model.buffers[tensor.buffer]
            if buffer.data is not None:
                buffer.data = bytes(buffer.data)[: rng.randrange(len(buffer.data))]
        elif choice == 7:  # one tensor's parameters on another
            other = rng.choice(quantized)
            tensor.quantization, other.quantization = other.quantization, tensor.quantization
        else:  # a shape that the scales no longer fit
            tensor.shape = [d + rng.choice([1, -1]) if d > 1 else d for d in shape]
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def mutate_torch_quantized(data: bytes, rng: random.Random) -> bytes:
    """A quantize_dynamic state_dict's quantizers and cell params damaged in its pickle (opcodes found by
    pickletools, each replaced by one that means something else): scales 0, negative, NaN, infinite, huge or
    subnormal; zero points out of int8's range; a weight's shape, stride or offset that reaches past its storage, a
    storage's size that lies; a qscheme, cell-params kind, class or reduce_range that is not quantize_dynamic's; a
    storage member cut short; now and then bytes flipped anywhere in the pickle."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = {info.filename: source.read(info) for info in source.infolist()}
    (name,) = [n for n in members if n.endswith("/data.pkl")]
    pkl = members[name]
    for _ in range(rng.choice([1, 1, 1, 2])):
        ops = list(pickletools.genops(pkl))
        ends = [pos for _, _, pos in ops[1:]] + [len(pkl)]
        spans = [(op.name, arg, pos, end) for (op, arg, pos), end in zip(ops, ends)]
        floats = [(pos, end) for op, _, pos, end in spans if op == "BINFLOAT"]
        ints = [(pos, end, arg) for op, arg, pos, end in spans if op in ("BININT1", "BININT2", "BININT")]
        texts = [(pos, end, arg) for op, arg, pos, end in spans if op == "BINUNICODE"]
        globals_ = [(pos, end, arg) for op, arg, pos, end in spans if op == "GLOBAL"]
        choice = rng.choices(range(8), weights=[5, 4, 3, 2, 2, 2, 1, 1])[0]
        replacement = None
        if choice == 0 and floats:  # a scale
            pos, end = rng.choice(floats)
            special = rng.choice([0.0, -0.01, float("nan"), float("inf"), -float("inf"), 1e300, 1e-300, 5e-324])
            replacement = (pos, end, b"G" + struct.pack(">d", special))
        elif choice in (1, 2) and ints:  # a zero point, a size, a stride, an offset, a storage's length, a long
            pos, end, was = rng.choice(ints)
            value = rng.choice([-129, 128, 255, 300, -1, 0, 1, 2**31 - 1, -(2**31), was + 1, was - 1, was * 2])
            replacement = (pos, end, b"J" + struct.pack("<i", value))
        elif choice == 3 and texts:  # the kind, a class name, a storage key
            pos, end, _ = rng.choice(texts)
            text = rng.choice(["quantized", "quantized_fp16", "quantized_dynamic", "", "x" * 300, "0", "99"])
            text += rng.choice(["", "__torch__.torch.classes.rnn.CellParamsBase"[: rng.randrange(40)]])
            replacement = (pos, end, b"X" + struct.pack("<I", len(text.encode())) + text.encode())
        elif choice == 4 and globals_:  # a qscheme, a storage class, a rebuild named otherwise
            pos, end, _ = rng.choice(globals_)
            named = rng.choice(
                [
                    "torch per_tensor_symmetric",
                    "torch per_channel_affine",
                    "torch per_tensor_affine",
                    "torch QUInt8Storage",
                    "torch QInt32Storage",
                    "torch FloatStorage",
                    "torch ScriptObject",
                    "torch._utils _rebuild_qtensor",
                    "torch._utils _rebuild_tensor_v2",
                    "os system",
                ]
            )
            module, _, attr = named.partition(" ")
            replacement = (pos, end, b"c" + module.encode() + b"\n" + attr.encode() + b"\n")
        elif choice == 5:  # a storage member cut short
            stored = [n for n in members if "/data/" in n]
            if stored:
                cut = rng.choice(stored)
                members[cut] = members[cut][: rng.randrange(len(members[cut]) + 1)]
        elif choice == 6:  # an opcode dropped
            pos, end = rng.choice([(pos, end) for _, _, pos, end in spans[1:-1]])
            replacement = (pos, end, b"")
        else:
            pkl = mutate_bytes(pkl, rng)
        if replacement is not None:
            pos, end, made = replacement
            pkl = pkl[:pos] + made + pkl[end:]
        try:
            list(pickletools.genops(pkl))
        except Exception:  # a pickle no longer parsed: damaged enough
            break
    members[name] = pkl
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for member, contents in members.items():
            archive.writestr(member, contents)
    return out.getvalue()


# --- SavedModels and TF2 checkpoints: the object graph, keras_metadata.pb ------------------------------------

OBJECT_GRAPH_KEY = b"_CHECKPOINTABLE_OBJECT_GRAPH"


def _pb_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value, pos, shift = value | (byte & 0x7F) << shift, pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _pb_varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _pb_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """A well-formed message's fields (number, wire type, value) in order: varints and length-delimited only."""
    fields: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _pb_varint(data, pos)
        if key & 7 == 0:
            value, pos = _pb_varint(data, pos)
            fields.append((key >> 3, 0, value))
        elif key & 7 == 2:
            length, pos = _pb_varint(data, pos)
            fields.append((key >> 3, 2, data[pos : pos + length]))
            pos += length
        elif key & 7 == 5:
            fields.append((key >> 3, 5, data[pos : pos + 4]))
            pos += 4
        else:
            raise ValueError(f"wire type {key & 7}")
    return fields


def _pb_encode(fields: list[tuple[int, int, int | bytes]]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _pb_varint_bytes(number << 3 | wire)
        if wire == 0:
            assert isinstance(value, int)
            out += _pb_varint_bytes(value)
        elif wire == 2:
            assert isinstance(value, bytes)
            out += _pb_varint_bytes(len(value)) + value
        else:
            assert isinstance(value, bytes)
            out += value
    return bytes(out)


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def reseal_object_graph(files: dict[str, bytes], change: Any) -> bool:
    """A TF2 checkpoint's object graph (a string tensor in its data file) given `change(graph) -> graph` of the same
    length, its crc32c in the index and the index block's made right again, so the damage reaches the graph's
    reader. False where the index does not show the graph's entry plainly (then nothing is changed)."""
    import google_crc32c

    index_name = next(n for n in files if n.endswith(".index"))
    data_name = next(n for n in files if n.startswith(index_name[: -len(".index")]) and ".data-" in n)
    index = bytearray(files[index_name])
    at = index.find(OBJECT_GRAPH_KEY)
    if at < 0:
        return False
    pos, where = at + len(OBJECT_GRAPH_KEY), {}
    while 6 not in where and pos < len(index):  # the BundleEntryProto: dtype, shape, shard, offset, size, crc32c
        key, pos = _pb_varint(index, pos)
        if key & 7 == 0:
            where[key >> 3], pos = _pb_varint(index, pos)
        elif key & 7 == 2:
            length, pos = _pb_varint(index, pos)
            pos += length
        elif key & 7 == 5:
            where[key >> 3], pos = pos, pos + 4
        else:
            return False
    if not {4, 5, 6} <= set(where) and not {5, 6} <= set(where):
        return False
    offset, size, crc_at = where.get(4, 0), where[5], where[6]
    data = bytearray(files[data_name])
    length, start = _pb_varint(data, offset)
    graph = bytes(data[offset + (start - offset) + 4 : offset + size])
    new = change(graph)
    assert len(new) == len(graph)
    data[offset + (start - offset) + 4 : offset + size] = new
    sized = length.to_bytes(4, "little")
    crc = google_crc32c.extend(google_crc32c.value(sized), bytes(data[start : start + 4]))
    index[crc_at : crc_at + 4] = _masked(google_crc32c.extend(crc, new)).to_bytes(4, "little")
    for block, block_size in _sstable_blocks(bytes(index)):
        if block <= crc_at < block + block_size:
            crc = google_crc32c.value(bytes(index[block : block + block_size + 1]))
            index[block + block_size + 1 : block + block_size + 5] = _masked(crc).to_bytes(4, "little")
    files[index_name], files[data_name] = bytes(index), bytes(data)
    return True


def _damage_graph(graph: bytes, rng: random.Random) -> bytes:
    """The object graph's bytes damaged in place: a node's field numbers, lengths or names changed."""
    out = bytearray(graph)
    for _ in range(rng.randint(1, 8)):
        where = rng.randrange(len(out))
        out[where] = rng.choice([0, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x1A, 0x2F, rng.randrange(256)])
    return bytes(out)


def mutate_keras_metadata(data: bytes, rng: random.Random) -> bytes:
    """keras_metadata.pb damaged: its bytes, or one object's JSON metadata (the root's model config among them)
    through the Keras config mutator, the proto encoded again."""
    if rng.random() < 0.3:
        return mutate_bytes(data, rng)
    nodes = [value for number, _, value in _pb_fields(data) if number == 1]
    index = rng.randrange(len(nodes))
    node = _pb_fields(nodes[index])  # type: ignore[arg-type]
    changed = []
    for number, wire, value in node:
        if number == 5 and isinstance(value, bytes):
            config = json.loads(value)
            if isinstance(config, dict) and "config" in config and rng.random() < 0.7:
                mutate_keras_config(config, rng)
                value = json.dumps(config).encode()
            else:
                value = mutate_json_text(value.decode(), rng).encode()
        elif number == 3 and rng.random() < 0.2:
            value = rng.choice([b"root", b"root.layer-0", b"", long_name(rng).encode()[:300]])
        changed.append((number, wire, value))
    nodes[index] = _pb_encode(changed)
    if rng.random() < 0.1:
        nodes = nodes[: rng.randrange(len(nodes) + 1)]
    return _pb_encode([(1, 2, node) for node in nodes])


# The ops a loop body's node is given in place of its own: activations, and the arithmetic of a cell's step.
UNARY_OPS = [b"Sigmoid", b"Tanh", b"Relu", b"Relu6", b"Elu", b"Selu", b"Softplus", b"Softsign", b"Identity", b"Neg"]
BINARY_OPS = [b"AddV2", b"Sub", b"Mul", b"RealDiv", b"BiasAdd", b"MatMul"]


def _damage_node(node: bytes, names: list[bytes], rng: random.Random) -> bytes | None:
    """A FunctionDef's NodeDef changed as a graph that still parses: its op swapped for a like one, an input made
    another node's output, dropped or repeated, its name changed, a constant's value changed; None: the node removed."""
    fields = _pb_fields(node)
    op = next((value for number, _, value in fields if number == 2), b"")
    inputs = [k for k, (number, _, _) in enumerate(fields) if number == 3]
    kind = rng.choice(["op", "op", "op", "input", "input", "name", "const", "const", "drop"])
    if not names or kind == "drop":
        return None
    if kind == "op" and op in UNARY_OPS + BINARY_OPS:
        swapped = rng.choice(UNARY_OPS if op in UNARY_OPS else BINARY_OPS)
        fields = [(n, w, swapped if n == 2 else v) for n, w, v in fields]
    elif kind == "input" and inputs:
        at = rng.choice(inputs)
        choice = rng.random()
        if choice < 0.5:
            ref = rng.choice(names) + rng.choice([b"", b":z:0", b":y:0", b":output:1", b":output:0"])
            fields[at] = (3, 2, ref)
        elif choice < 0.7:
            del fields[at]
        elif choice < 0.85:
            fields.insert(at, fields[at])
        elif len(inputs) > 1:  # operands swapped: x - y made y - x
            first, second = inputs[:2]
            fields[first], fields[second] = fields[second], fields[first]
    elif kind == "name":
        fields = [(n, w, rng.choice(names) if n == 1 else v) for n, w, v in fields]
    elif kind == "const" and op == b"Const":
        fields = [(n, w, _damage_attr_value(v, rng) if n == 5 else v) for n, w, v in fields]
    else:
        return mutate_bytes(node, rng)
    return _pb_encode(fields)


def _damage_attr_value(entry: Any, rng: random.Random) -> Any:
    """A Const's `value` attribute (a map entry: key, AttrValue of a TensorProto) holding other numbers."""
    fields = _pb_fields(entry)
    if (1, 2, b"value") not in fields:
        return entry
    number = rng.choice([0.0, 1.0, 2.0, 3.0, 6.0, -3.0, 0.5, float("nan"), float("inf"), 1e38])
    out = []
    for n, w, v in fields:
        if n == 2 and isinstance(v, bytes):
            attr = _pb_fields(v)
            tensor = next((t for m, _, t in attr if m == 8), None)
            if isinstance(tensor, bytes):
                changed = []
                for m, wire, t in _pb_fields(tensor):
                    if m == 5 and isinstance(t, bytes):  # float_val, packed or not
                        t = struct.pack("<f", number) * max(len(t) // 4, 1)
                    elif m == 4 and isinstance(t, bytes) and len(t) % 4 == 0:  # tensor_content
                        t = struct.pack("<f", number) * (len(t) // 4)
                    changed.append((m, wire, t))
                v = _pb_encode([(m, wire, _pb_encode(changed) if m == 8 else t) for m, wire, t in attr])
        out.append((n, w, v))
    return _pb_encode(out)


def mutate_serving(data: bytes, rng: random.Random) -> bytes:
    """A SavedModel's saved_model.pb with its serving graph's functions damaged (the While loop bodies most often,
    where a Keras 3 export's activations are read): nodes changed as `_damage_node` does, the proto encoded again,
    so the graph still parses; or its bytes damaged."""
    try:
        model = _pb_fields(data)
        meta_at = next(k for k, (n, _, _) in enumerate(model) if n == 2)
        meta = _pb_fields(model[meta_at][2])  # type: ignore[arg-type]
        graph_at = next(k for k, (n, _, _) in enumerate(meta) if n == 2)
        graph = _pb_fields(meta[graph_at][2])  # type: ignore[arg-type]
        library_at = next(k for k, (n, _, _) in enumerate(graph) if n == 2)
        library = _pb_fields(graph[library_at][2])  # type: ignore[arg-type]
    except (ValueError, StopIteration, IndexError):
        return mutate_bytes(data, rng)
    functions = [k for k, (n, _, _) in enumerate(library) if n == 1]
    bodies = [k for k in functions if b"while_body" in library[k][2][:300]]  # type: ignore[index]
    if not functions or rng.random() < 0.1:
        return mutate_bytes(data, rng)
    at = rng.choice(bodies if bodies and rng.random() < 0.85 else functions)
    try:
        function = _pb_fields(library[at][2])  # type: ignore[arg-type]
        nodes = [k for k, (n, _, _) in enumerate(function) if n == 3]
        names = [v for k in nodes for n, _, v in _pb_fields(function[k][2]) if n == 1]  # type: ignore[arg-type]
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            if not nodes:
                break
            k = rng.choice(nodes)
            damaged = _damage_node(function[k][2], names, rng)  # type: ignore[arg-type]
            function[k] = (3, 2, damaged if damaged is not None else b"")
    except (ValueError, IndexError):  # a field of a wire type the re-encoder does not write, a node damaged twice
        return mutate_bytes(data, rng)
    function = [(n, w, v) for n, w, v in function if not (n == 3 and v == b"")]
    library[at] = (1, 2, _pb_encode(function))
    graph[library_at] = (2, 2, _pb_encode(library))
    meta[graph_at] = (2, 2, _pb_encode(graph))
    model[meta_at] = (2, 2, _pb_encode(meta))
    return _pb_encode(model)


def mutate_saved(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """A SavedModel directory or a TF2 checkpoint damaged: its object graph (resealed, so its reader is reached), its
    keras_metadata.pb, its tensor bundle, a file removed (a Keras 3 export's serving graph: `mutate_serving`). True
    where every reader must refuse the result."""
    metadata = next((n for n in files if n.endswith("keras_metadata.pb")), None)
    op = rng.choice(["graph", "graph", "metadata", "metadata", "bundle", "gone"] if metadata else ["graph", "bundle"])
    bundle = {n: d for n, d in files.items() if n.endswith(".index") or ".data-" in n}
    if op == "graph":
        if not reseal_object_graph(files, lambda graph: _damage_graph(graph, rng)):
            files.update(mutate_tensor_bundle(bundle, rng))
    elif op == "metadata" and metadata:
        files[metadata] = mutate_keras_metadata(files[metadata], rng)
    elif op == "bundle":
        files.update(mutate_tensor_bundle(bundle, rng))
    else:
        name = rng.choice(sorted(files))
        del files[name]
        return not name.endswith(("keras_metadata.pb", "/checkpoint"))  # the rest is read
    return False


# PaddlePaddle: a .pdparams, a pickle of a dict of numpy arrays


def _paddle_state(data: bytes) -> dict | None:
    """A seed's state_dict as Python's pickle reads it (the seeds are fixtures and files rnnconv wrote: trusted)."""
    try:
        state = pickle.loads(data)
    except Exception:
        return None
    return state if isinstance(state, dict) else None


def _odd_array(array: np.ndarray, rng: random.Random) -> Any:
    """An array of another shape, type, order or size, or no array at all."""
    return rng.choice(
        [
            lambda: array.reshape(-1),
            lambda: array.T.copy() if array.ndim == 2 else array[:, None],
            lambda: array[: max(len(array) - 1, 0)],
            lambda: np.concatenate([array, array]),
            lambda: array.astype(rng.choice([np.int32, np.uint16, np.float16, np.float64, np.complex64, bool])),
            lambda: array.astype(array.dtype.newbyteorder(">")),
            lambda: np.asfortranarray(array),
            lambda: np.zeros((0,) * array.ndim, array.dtype),
            lambda: np.full(array.shape, rng.choice([np.nan, np.inf, 1e38]), array.dtype),
            lambda: (f"name_{rng.randrange(9)}", array),  # a nested save's (name, array)
            lambda: odd_value(rng),
        ]
    )()


def mutate_pdparams(data: bytes, rng: random.Random) -> tuple[bytes, bool]:
    """A .pdparams damaged: keys dropped, renamed (a layer, a cell attribute, an alias), repeated under another
    prefix or nested, arrays reshaped, retyped or given other values, the name table and rnnconv's records changed,
    a payload in place of an array (must refuse: True), re-pickled with another protocol; or its opcodes damaged."""
    state = _paddle_state(data)
    if state is None or rng.random() < 0.3:
        return mutate_pickle(data, rng), False
    keys = [k for k, v in state.items() if isinstance(v, np.ndarray)]
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(["drop", "rename", "array", "array", "nest", "extra", "table", "record"])
        key = rng.choice(keys) if keys else None
        if op == "drop" and key in state:
            del state[key]
        elif op == "rename" and key in state:
            renamed = rng.choice(
                [
                    key.replace("cell_fw", "cell"),
                    key.replace("cell.", "cell_bw."),
                    re.sub(r"\d+", lambda m: str(int(m.group()) + rng.choice([1, 7, 1023, 10**6])), key, count=1),
                    key.replace("weight_ih", "weight_ho"),
                    key.replace("_reverse", ""),
                    "." + key,
                    key + ".",
                    long_name(rng),
                ]
            )
            state[renamed] = state.pop(key)
        elif op == "array" and key in state:
            state[key] = _odd_array(state[key], rng)
        elif op == "nest":
            state = {rng.choice(["model", "state_dict", "0", ""]): state, "epoch": rng.randrange(9)}
        elif op == "extra" and key is not None and isinstance(state.get(key), np.ndarray):
            state[rng.choice(["enc.", "a.b.", "0."]) + key] = state[key]
        elif op == "table":
            state["StructuredToParameterName@@"] = rng.choice([odd_value(rng), {k: long_name(rng) for k in keys}])
        elif op == "record":
            state[rng.choice(["rnnconv.source", "rnnconv.nonlinearity"])] = rng.choice(
                ["", "{}", "[]", '{"": "relu"}', '{"": 1}', "x" * rng.choice([10, 2 << 20]), odd_value(rng)]
            )
    refuse = rng.random() < 0.15  # a payload in the state_dict, last: nothing after takes it out
    if refuse:
        state[rng.choice(keys) if keys else "0.cell.weight_ih"] = _WritesMarker(rng.choice(["open", "system", "eval"]))
    try:
        return pickle.dumps(state, protocol=rng.choice([2, 3, 4, 5])), refuse
    except Exception:
        return mutate_pickle(data, rng), False


def mutate_paddle(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    files[main], refuse = mutate_pdparams(files[main], rng)
    return refuse


# Orbax: a checkpoint's folder (its _METADATA, each array's zarr metadata, OCDBT's manifests and data files)


def _orbax_metadata(document: Any, rng: random.Random) -> bool:
    """A _METADATA's tree damaged where its reader looks: a leaf's keys, shape or type, the storage flags. True
    where every reader must refuse it."""
    tree = document.get("tree_metadata") if isinstance(document, dict) else None
    if not isinstance(tree, dict) or not tree:
        return False
    name = rng.choice(sorted(tree))
    leaf = tree[name]
    op = rng.choice(["shape", "key", "type", "drop", "copy", "flag", "zarr3"])
    if op == "shape":
        leaf["value_metadata"]["write_shape"] = rng.choice(
            [[], [0], [7, 7, 7], [2**40], [-1], [2**31, 2**31], "7", [1.5], [True]]
        )
    elif op == "key":
        leaf["key_metadata"][rng.randrange(len(leaf["key_metadata"]))]["key"] = rng.choice(
            ["", "..", "a/b", "x\0", "d", "manifest.ocdbt", long_name(rng)[:2000], 7, None]
        )
    elif op == "type":
        leaf["value_metadata"][rng.choice(["value_type", "skip_deserialize"])] = rng.choice(
            ["scalar", "np.ndarray", "string", True, None, 3]
        )
    elif op == "drop":
        del tree[name]
    elif op == "copy":  # a leaf twice, or one under another
        other = json.loads(json.dumps(leaf))
        other["key_metadata"] = other["key_metadata"] + ([{"key": "x", "key_type": 2}] if rng.random() < 0.5 else [])
        tree[name + "'"] = other
    elif op == "flag":
        document["use_ocdbt"] = rng.choice([not document.get("use_ocdbt", True), None, "yes"])
    else:
        document["use_zarr3"] = True
        return True
    return False


def mutate_orbax(files: dict[str, bytes], main: str, rng: random.Random) -> bool:
    """An Orbax checkpoint's folder damaged: its _METADATA (its tree, or as JSON text), a .zarray, an OCDBT manifest,
    data or chunk file, a file removed or emptied. True where every reader must refuse the result."""
    metadata = next(n for n in files if n.endswith("_METADATA") and not n.endswith("_CHECKPOINT_METADATA"))
    zarrays = [n for n in files if n.endswith(".zarray")]
    stored = [n for n in files if "/d/" in n or n.endswith("manifest.ocdbt") or n.rsplit("/", 1)[-1][:1].isdigit()]
    op = rng.choice(["tree", "tree", "json", "zarray", "stored", "stored", "gone", "empty"])
    if op == "tree":
        document = json.loads(files[metadata])
        must_refuse = _orbax_metadata(document, rng)
        files[metadata] = json.dumps(document).encode()
        return must_refuse
    if op == "json":
        files[metadata] = mutate_json_text(files[metadata].decode(), rng).encode("utf-8", "surrogatepass")
    elif op == "zarray" and zarrays:
        name = rng.choice(zarrays)
        document = json.loads(files[name])
        field = rng.choice(["shape", "chunks", "dtype", "compressor", "filters", "order", "zarr_format", "text"])
        if field == "text":
            files[name] = mutate_json_text(files[name].decode(), rng).encode("utf-8", "surrogatepass")
            return False
        document[field] = rng.choice(
            [[2**40, 2**40], [1] * 40, [0], [7, 7, 7], "<i4", ">f4", "|O", "bfloat16", "<f8", {"id": "blosc"}, None,
             "F", 3, [], {"id": "zstd", "level": 99}]
        )  # fmt: skip
        files[name] = json.dumps(document).encode()
    elif op in ("stored", "zarray"):
        name = rng.choice(stored)
        files[name] = mutate_bytes(files[name], rng)
    elif op == "gone":
        name = rng.choice(sorted(files))
        del files[name]
        folder, _, chunk = name.rpartition("/")
        return chunk[:1].isdigit() and folder + "/" + ".zarray" in files  # a zarr chunk: never read as its fill value
    else:
        files[rng.choice(sorted(files))] = b""
    return False
