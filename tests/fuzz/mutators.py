"""Hostile inputs for every format rnnconv reads, made from real files.

Every mutator takes the bytes of a seed file and a random generator and returns the mutated bytes (or
several files, for a blob and its sidecar); each is named, so a case says how it was made. The seeds are
the shipped fixtures, blobs rnnconv converted from them, files with payloads that would create a marker
file if any code in them ran (made by Keras and PyTorch themselves), and odd but valid files (sparse,
meta or integer tensors, scalar kernels) that PyTorch writes.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import random
import struct
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
    return rng.choice(ODD_VALUES)


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
    with zipfile.ZipFile(out, "w", compression) as archive:
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
    choice = rng.randrange(12)
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
    from rnnconv.formats.tflite.flat import Flat

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
    huge, a little off, another field's value, a float 0 that lifts a clip), the file cut, or a region copied over."""
    out = bytearray(data)
    fields = _tflite_fields(data)
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
    """A quantized LSTM's int8 weights, scales and zero points of other types, shapes and values."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    quantized = [n for n in graph.node if n.op_type == "DynamicQuantizeLSTM"]
    stored = {t.name: t for t in graph.initializer}
    for _ in range(rng.choice([1, 1, 2, 3])):
        if not quantized:
            break
        node = rng.choice(quantized)
        choice = rng.randrange(8)
        names = [i for i in node.input[8:] if i in stored] + [i for i in node.input[1:3] if i in stored]
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
            index = rng.choice([8, 9, 10, 11])
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
