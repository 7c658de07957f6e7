"""torch.export programs (`torch.export.save`'s `.pt2` archives) read without torch.

The archive's graph (`models/model.json`, torch._export.serde's schema) is read as JSON within limits, every field
checked for its type before use; its graph signature says which placeholder is which parameter, buffer or constant
(`p_rnn_weight_ih_l0` -> `rnn.weight_ih_l0`), and its weights config where each one's raw bytes lie
(`data/weights/weight_<k>`: several tensors may view one file, by sizes, strides and storage offset). Each call of
an RNN op (`aten.lstm.input`, `aten.gru.input`, `aten.rnn_tanh.input`, `aten.rnn_relu.input`) is one RNN: its
`params` list gives every layer's and direction's tensors in the order the op takes them, which is what they are
(whatever their names), and its arguments what the module was (layers, directions, biases, batch_first, the
nonlinearity). The tensors are handed to the checkpoint reader as a state_dict under the module's path; nothing of
the archive is unpickled (its sample inputs, and any tensor pickled as a subclass, are never read).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.errors import BadInput, listing
from rnnconv.formats import _zip
from rnnconv.formats.torch.checkpoint import PickledTensor, Storage, StorageClass, ZipCheckpoint
from rnnconv.formats.torch.wire import (
    EXPORT_CONSTANTS,
    EXPORT_FLOATS,
    EXPORT_FORMAT,
    EXPORT_FORMAT_MEMBER,
    EXPORT_OLD_PROGRAM,
    EXPORT_PROGRAM,
    EXPORT_RNN_OPS,
    EXPORT_STRIDED,
    EXPORT_WEIGHTS,
    EXPORT_WEIGHTS_DIR,
    EXPORT_ZEROS,
)
from rnnconv.safeio.inputs import JSON_LIMIT, FileArray, json_document, regular_file
from rnnconv.table.apply import find_row
from rnnconv.table.constants import MAX_LAYERS, MAX_SIZE, TORCH_REVERSE_SUFFIX

MAX_NODES = 1_000_000  # graph nodes, inputs of a node, tensors of a config: beyond any exported model
SMALL_MEMBER = 64  # archive_format, byteorder
# Ops verify lets torch run when it loads a program (torch's deserializer resolves any torch.* name and compiles
# guards as Python): ATen kernels and the operator module's functions, nothing else.
RUNNABLE = re.compile(r"^(torch\.ops\.aten\.\w+\.\w+|_operator\.\w+)$")


@dataclass(frozen=True)
class ExportedRNN:
    """What a program's graph says of one RNN beyond its tensors."""

    node: str  # the graph node calling the op
    op: str  # its target, torch.ops.aten.lstm.input ...
    layer_class: str  # LSTM, GRU, RNN
    nonlinearity: str | None  # an nn.RNN's, as its op says
    batch_first: bool
    states: str  # where its initial states come from, in words
    dropout: float
    train: bool
    layers: int
    directions: int
    has_bias: bool


@dataclass
class Program:
    """A `.pt2` archive read: its RNNs' tensors as a state_dict (`found`), what the graph says of each RNN by
    module path, and why torch may not load it for verify (None when it may)."""

    found: ZipCheckpoint
    rnns: dict[str, ExportedRNN]
    unloadable: str | None
    members: dict[str, zipfile.ZipInfo]
    folder: str
    payloads: dict[str, Any]


class _Doc:
    """Typed access to an untrusted JSON document: a field of the wrong type is one sentence naming it."""

    def __init__(self, path: Path, member: str):
        self.path, self.member = path, member

    def bad(self, what: str) -> BadInput:
        return BadInput(f"{self.path} is not a readable torch.export program: {self.member}'s {what}")

    def get(self, obj: Any, key: str, kind: type | tuple[type, ...], what: str, default: Any = ...) -> Any:
        if not isinstance(obj, dict):
            raise self.bad(f"{what} is not an object")
        if key not in obj and default is not ...:
            return default
        value = obj.get(key)
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
            raise self.bad(f"{what}.{key} is missing or not a {_kind_name(kind)}")
        if isinstance(value, (list, dict)) and len(value) > MAX_NODES:
            raise self.bad(f"{what}.{key} holds {len(value)} entries, more than any program")
        return value

    def one(self, obj: Any, what: str) -> tuple[str, Any]:
        """A union's one member (its tag and value)."""
        if not isinstance(obj, dict) or len(obj) != 1:
            raise self.bad(f"{what} is not a union of one member")
        ((tag, value),) = obj.items()
        return tag, value

    def number(self, obj: Any, what: str) -> int:
        """A size, stride or offset (SymInt as_int); a symbolic one is no stored tensor's."""
        tag, value = self.one(obj, what)
        if tag != "as_int" or not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SIZE:
            raise self.bad(f"{what} is not a whole number of at most {MAX_SIZE}")
        return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "object", list: "list", str: "string", int: "number", float: "number", bool: "true or false"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in _kinds(kind)))


def _json(archive: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], name: str, path: Path, size: int) -> Any:
    info = infos.get(name)
    if info is None:
        raise BadInput(f"{path} is a torch.export archive without its {name}")
    _zip.check_member(path, info, size, "torch.export.save")
    if info.file_size > JSON_LIMIT:
        raise BadInput(f"{path}: its {name} is {info.file_size} bytes of JSON, more than any program needs")
    return json_document(_zip.read_member(archive, name, path), f"{path}: its {name}")


def read_program(path: Path) -> Program:
    """The archive's RNNs (their tensors still in the file), checked; nothing run from it."""
    size = regular_file(path)
    archive = _zip.open_archive(path)
    with archive:
        infos = {info.filename: info for info in archive.infolist()}
        folders = {name.split("/")[0] for name in infos if name.count("/") >= 1}
        marks = [n for n in infos if n.count("/") == 1 and n.endswith("/" + EXPORT_FORMAT_MEMBER)]
        if not marks and any(n.endswith("/" + EXPORT_OLD_PROGRAM) for n in infos):
            raise BadInput(
                f"{path} is a torch.export archive of the layout PyTorch 2.1 to 2.5 wrote, whose weights are a pickled "
                f"state_dict inside it: load it and save it again with torch.export.save of PyTorch 2.6 or later, or "
                f"convert the module's state_dict"
            )
        if len(marks) != 1 or len(folders) != 1:
            raise BadInput(f"{path} is not a torch.export archive (no single <name>/{EXPORT_FORMAT_MEMBER})")
        folder = marks[0][: -len(EXPORT_FORMAT_MEMBER)]
        mark = infos[marks[0]]
        _zip.check_member(path, mark, size, "torch.export.save")
        if mark.file_size > SMALL_MEMBER or _zip.read_member(archive, mark.filename, path).strip() != EXPORT_FORMAT:
            raise BadInput(f"{path}: its {EXPORT_FORMAT_MEMBER} does not say {EXPORT_FORMAT.decode()}")
        order = infos.get(folder + "byteorder")
        big = False
        if order is not None:
            _zip.check_member(path, order, size, "torch.export.save")
            big = order.file_size <= SMALL_MEMBER and _zip.read_member(archive, order.filename, path).strip() == b"big"
        program = _json(archive, infos, folder + EXPORT_PROGRAM, path, size)
        payloads: dict[str, Any] = {}
        for name in (EXPORT_WEIGHTS, EXPORT_CONSTANTS):
            if folder + name in infos:
                doc = _Doc(path, name)
                payloads.update(doc.get(_json(archive, infos, folder + name, path, size), "config", dict, "document"))
        reading = _Reading(path, archive, infos, folder, size, big, payloads)
        rnns, tensors, unloadable = reading.rnns(program)
        unloadable = unloadable or reading.misfit()
    return Program(ZipCheckpoint(path, tensors, reading.storages, folder), rnns, unloadable, infos, folder, payloads)


class _Reading:
    """One archive being read: its members, its payloads by fully qualified name, the storages read so far."""

    def __init__(
        self,
        path: Path,
        archive: zipfile.ZipFile,
        infos: dict[str, zipfile.ZipInfo],
        folder: str,
        size: int,
        big: bool,
        payloads: dict[str, Any],
    ):
        self.path, self.archive, self.infos, self.folder, self.size, self.big = path, archive, infos, folder, size, big
        self.payloads = payloads
        self.storages: dict[str, np.ndarray | FileArray] = {}
        self.doc = _Doc(path, EXPORT_PROGRAM)

    def rnns(self, program: Any) -> tuple[dict[str, ExportedRNN], dict[str, PickledTensor], str | None]:
        doc = self.doc
        module = doc.get(program, "graph_module", dict, "document")
        graph = doc.get(module, "graph", dict, "graph_module")
        nodes = doc.get(graph, "nodes", list, "graph")
        values = doc.get(graph, "tensor_values", dict, "graph", {})
        lifted = self._lifted(doc.get(doc.get(module, "signature", dict, "graph_module"), "input_specs", list, "sig"))
        inputs = self._user_inputs(doc.get(module, "signature", dict, "graph_module"))
        made = {}
        unloadable = None
        for index, node in enumerate(nodes):
            target = doc.get(node, "target", str, f"node {index}")
            name = doc.get(node, "name", str, f"node {index}")
            made[name] = target
            if unloadable is None and not RUNNABLE.match(target):
                unloadable = f"its graph calls {target[:80]!r}, which is no ATen op"
        if doc.get(program, "range_constraints", dict, "document", {}) and unloadable is None:
            unloadable = "its shapes are dynamic (range constraints), whose expressions torch's loader evaluates"
        found: dict[str, ExportedRNN] = {}
        tensors: dict[str, PickledTensor] = {}
        calls: dict[str, tuple[str, ...]] = {}
        for node in nodes:
            target = node["target"]
            if target not in EXPORT_RNN_OPS:
                continue
            what = f"node {node['name']!r}"
            args = {}
            for arg in doc.get(node, "inputs", list, what):
                args[doc.get(arg, "name", str, f"{what}'s input")] = doc.get(arg, "arg", dict, f"{what}'s input")
            rnn, params = self._rnn(node, args, made, inputs)
            prefix = self._prefix(node, params, lifted)
            if prefix in calls:
                if calls[prefix] == params:
                    continue  # the module called again: the same RNN
                prefix = node["name"] + "."
            calls[prefix] = params
            found[prefix] = rnn
            tensors.update(self._tensors(rnn, args, params, prefix, lifted, values))
        return found, tensors, unloadable

    def _lifted(self, specs: list[Any]) -> dict[str, str]:
        """Placeholder name -> the fully qualified name of the parameter, buffer or constant it stands for."""
        doc, out = self.doc, {}
        fields = {"parameter": "parameter_name", "buffer": "buffer_name", "tensor_constant": "tensor_constant_name"}
        for spec in specs:
            kind, value = doc.one(spec, "graph signature's input")
            if kind in fields:
                arg = doc.get(value, "arg", dict, f"{kind} input")
                out[doc.get(arg, "name", str, f"{kind} input")] = doc.get(value, fields[kind], str, f"{kind} input")
        return out

    def _user_inputs(self, signature: Any) -> list[str]:
        out = []
        for spec in self.doc.get(signature, "input_specs", list, "signature"):
            kind, value = self.doc.one(spec, "graph signature's input")
            if kind == "user_input":
                tag, arg = self.doc.one(self.doc.get(value, "arg", dict, "user input"), "user input")
                if tag == "as_tensor":
                    out.append(self.doc.get(arg, "name", str, "user input"))
        return out

    def _rnn(
        self, node: dict, args: dict[str, Any], made: dict[str, str], inputs: list[str]
    ) -> tuple[ExportedRNN, tuple[str, ...]]:
        doc, what = self.doc, f"node {node['name']!r}"

        def flag(name: str, tag: str, kind: type | tuple[type, ...]) -> Any:
            got, value = doc.one(args.get(name), f"{what}'s {name}")
            if got != tag or not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise doc.bad(f"{what}'s {name} is not {tag}")
            return value

        params = tuple(self._names(args.get("params"), f"{what}'s params"))
        got, hx = doc.one(args.get("hx"), f"{what}'s hx")
        states = self._names({got: hx}, f"{what}'s hx")
        cls, nonlinearity = EXPORT_RNN_OPS[node["target"]]
        if all(s in inputs for s in states):
            told = f"the program's inputs {', '.join(states)}"
        elif all(made.get(s) == EXPORT_ZEROS for s in states):
            told = "zeros the program makes (called without them)"
        else:
            told = "computed in the program's graph"
        layers = flag("num_layers", "as_int", int)
        if not 1 <= layers <= MAX_LAYERS:
            raise doc.bad(f"{what}'s num_layers is {layers}, not 1 to {MAX_LAYERS}")
        rnn = ExportedRNN(
            node["name"],
            node["target"],
            cls,
            nonlinearity,
            flag("batch_first", "as_bool", bool),
            told,
            float(flag("dropout", "as_float", (int, float))),
            flag("train", "as_bool", bool),
            layers,
            2 if flag("bidirectional", "as_bool", bool) else 1,
            flag("has_biases", "as_bool", bool),
        )
        return rnn, params

    def _names(self, arg: Any, what: str) -> list[str]:
        tag, value = self.doc.one(arg, what)
        if tag == "as_tensor":
            value = [value]
        elif tag != "as_tensors" or not isinstance(value, list):
            raise self.doc.bad(f"{what} is not a list of tensors")
        return [self.doc.get(v, "name", str, what) for v in value]

    def _prefix(self, node: dict, params: tuple[str, ...], lifted: dict[str, str]) -> str:
        """The module's path: the first parameter's name less `weight_ih_l0`, else the module stack's last entry."""
        first = find_row("torch", "LSTM").tensors["input_matrix"].format(layer=0, suffix="")
        qualified = lifted.get(params[0], "") if params else ""
        if qualified == first or qualified.endswith("." + first):
            return qualified[: -len(first)]
        stack = node.get("metadata", {}).get("nn_module_stack") if isinstance(node.get("metadata"), dict) else None
        if isinstance(stack, str) and stack.count(",") >= 2:
            path = stack.split(";")[-1].split(",")[1]
            if path and re.fullmatch(r"[\w.]+", path):
                return path + "."
        return node["name"] + "."

    def _tensors(
        self,
        rnn: ExportedRNN,
        args: dict[str, Any],
        params: tuple[str, ...],
        prefix: str,
        lifted: dict[str, str],
        values: dict[str, Any],
    ) -> dict[str, PickledTensor]:
        """Each of the op's params under the state_dict name its place gives."""
        layers, directions = rnn.layers, rnn.directions
        roles = ["input_matrix", "recurrent_matrix"] + (["input_bias", "recurrent_bias"] if rnn.has_bias else [])
        each, extra = divmod(len(params), layers * directions)
        if extra or each - len(roles) not in ((0, 1) if rnn.layer_class == "LSTM" else (0,)):
            raise BadInput(
                f"{self.path}: node {rnn.node!r} gives {len(params)} tensors, which fit no {rnn.layer_class} of "
                f"{layers} layers, {directions} direction(s) {'with' if rnn.has_bias else 'without'} biases"
            )
        if each > len(roles):
            roles.append("projection")
        names = find_row("torch", rnn.layer_class).tensors
        out = {}
        places = iter(params)
        for layer in range(layers):
            for direction in range(directions):
                for role in roles:
                    placeholder = next(places)
                    key = prefix + names[role].format(layer=layer, suffix=TORCH_REVERSE_SUFFIX if direction else "")
                    out[key] = self._tensor(placeholder, lifted, values)
        return out

    def _tensor(self, placeholder: str, lifted: dict[str, str], values: dict[str, Any]) -> PickledTensor:
        qualified = lifted.get(placeholder)
        payload = self.payloads.get(qualified) if qualified is not None else None
        if payload is None:
            return PickledTensor(None, 0, self._shape(values.get(placeholder)), (), "", "is computed in the graph")
        doc = _Doc(self.path, f"payload of {qualified!r}")
        meta = doc.get(payload, "tensor_meta", dict, "entry")
        shape = tuple(doc.number(n, "size") for n in doc.get(meta, "sizes", list, "tensor_meta"))
        stride = tuple(doc.number(n, "stride") for n in doc.get(meta, "strides", list, "tensor_meta"))
        offset = doc.number(doc.get(meta, "storage_offset", dict, "tensor_meta"), "storage_offset")
        if len(stride) != len(shape):
            raise doc.bad("strides do not match its sizes")
        storage_class = EXPORT_FLOATS.get(doc.get(meta, "dtype", int, "tensor_meta"))
        if doc.get(payload, "use_pickle", bool, "entry"):
            return PickledTensor(
                None, 0, shape, stride, "", "is pickled (a tensor subclass), and rnnconv unpickles none"
            )
        if doc.get(meta, "layout", int, "tensor_meta") != EXPORT_STRIDED:
            return PickledTensor(None, 0, shape, stride, "", "is not a dense (strided) tensor")
        if storage_class is None:
            return PickledTensor(None, 0, shape, stride, "", "is not a floating point tensor")
        file = doc.get(payload, "path_name", str, "entry")
        kind = StorageClass(storage_class)
        words = self._storage(file, kind.dtype)
        return PickledTensor(Storage(kind, file, len(words)), offset, shape, stride, kind.dtype)

    def misfit(self) -> str | None:
        """Why a stored tensor, of the RNNs or not, does not fit in its file (torch's loader checks that by raising
        what it likes), if one does not."""
        for qualified in self.payloads:
            try:
                tensor = self._tensor(qualified, {qualified: qualified}, {})
                if tensor.storage is not None:
                    ZipCheckpoint(self.path, None, self.storages).values(tensor)
            except BadInput as exc:
                return str(exc)
        return None

    def _shape(self, meta: Any) -> tuple[int, ...]:
        if not isinstance(meta, dict) or not isinstance(meta.get("sizes"), list):
            return ()
        return tuple(self.doc.number(n, "size") for n in meta["sizes"])

    def _storage(self, file: str, dtype_name: str) -> np.ndarray | FileArray:
        """A weight file's elements, still in the archive where it is stored."""
        if file in self.storages:
            return self.storages[file]
        if "/" in file or file in ("", ".", ".."):
            raise BadInput(f"{self.path}: a weight's path_name {file[:80]!r} is no file name")
        info = self.infos.get(self.folder + EXPORT_WEIGHTS_DIR + file)
        if info is None:
            raise BadInput(f"{self.path}: weight file {file!r} that its config names is not in the archive")
        _zip.check_member(self.path, info, self.size, "torch.export.save")
        dtype = np.dtype("<u2" if dtype_name == "bfloat16" else dtype_name)
        dtype = dtype.newbyteorder(">") if self.big else dtype
        if info.file_size % dtype.itemsize:
            raise BadInput(f"{self.path}: weight file {file!r} is no whole number of {dtype.itemsize}-byte elements")
        numel = info.file_size // dtype.itemsize
        words: np.ndarray | FileArray
        if info.compress_type == zipfile.ZIP_STORED:
            words = FileArray(self.path, _zip.stored_start(self.path, info, self.size), dtype, (numel,))
        else:
            words = np.frombuffer(_zip.read_member(self.archive, info.filename, self.path), dtype, numel)
        self.storages[file] = words
        return words


def explain_states(rnn: ExportedRNN, name: str) -> list[str]:
    """What inspect and a conversion say of the program's call: its form, its states, its dropout."""
    notes = [
        f"{name}: the program calls {rnn.op.removeprefix('torch.ops.')} (node {rnn.node!r}) "
        f"{'batch-first' if rnn.batch_first else 'sequence-first'}, its initial states {rnn.states}"
    ]
    if rnn.train and rnn.dropout:
        notes.append(f"{name}: exported in training mode with dropout {rnn.dropout} between layers, which is left out")
    return notes


def runnable(program: Program) -> None:
    """Refuse, before torch loads the archive for verify, what torch's loader would run of it: pickles (its loader
    unpickles them with weights_only=False), and ops or shapes it would resolve or evaluate as Python."""
    pickled = sorted(
        name
        for name, payload in program.payloads.items()
        if not isinstance(payload, Mapping) or payload.get("use_pickle") is not False
    )
    if pickled:
        raise BadInput(
            f"{program.found.path} keeps {listing(pickled)} pickled, which torch.export.load unpickles with "
            f"weights_only=False: verify does not load it (verify the conversion against the module's state_dict)"
        )
    if program.unloadable:
        raise BadInput(f"{program.found.path} is not loaded for verify: {program.unloadable}")
