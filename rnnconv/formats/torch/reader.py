"""Reading PyTorch state_dicts: find the RNNs in a checkpoint and read them.

Zip `.pt`/`.pth`/`.bin` checkpoints (torch.save's format since 1.6) are read without torch,
by rnnconv's inert unpickler (`checkpoint.py`, `_pickled`): whole models (torch.save(model), TorchScript
archives) give their modules' tensors by module path and their RNN modules' settings (`modules.py`); nothing of a
file is imported or run. Legacy (pre-zip) files are read by
`torch.load(weights_only=True)`. `.safetensors` state_dicts are read without torch at all, and so are
`torch.export` programs (`exported`), whose RNN ops' tensors come as a state_dict under each module's path.
RNNs are found by their parameter names (the torch rows' tensor names: `weight_ih_l0`,
`weight_hh_l0_reverse`, a cell's bare names); their mode, sizes, layers, directions and
projection come from names and shapes, through the torch rows of the layout table.
"""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec
from rnnconv.core.contracts import Provenance, RNNSizes
from rnnconv.core.dtypes import ELEMENT_TYPES, decode
from rnnconv.errors import BackendMissing, BadInput, Unsupported, listing
from rnnconv.formats import _pickled, _quantized, _safetensors
from rnnconv.formats.reading import (
    Found,
    Settled,
    StoredCell,
    held_grid,
    nonlinearity_note,
    read,
    settle,
    settle_nonlinearity,
)
from rnnconv.formats.sources import pick_by_prefix, recorded_by_prefix
from rnnconv.formats.torch import sharded
from rnnconv.formats.torch.checkpoint import (
    PickledTensor,
    ZipCheckpoint,
    is_zip_checkpoint,
    read_zip,
)
from rnnconv.formats.torch.modules import (
    MAX_MODULES,
    KeptRNN,
    check_settings,
    is_module,
    kept_rnn,
    module_entries,
)
from rnnconv.formats.torch.quantized import FP16, QuantizedRNN, is_cell_params, quantized_rnns
from rnnconv.formats.torch.wire import EXPORT_KIND, is_legacy_checkpoint, is_program
from rnnconv.safeio.inputs import FileArray
from rnnconv.table.apply import find_row, rows_for
from rnnconv.table.constants import (
    CUDNN_GATES,
    KIND_OF_ROLE,
    MAX_LAYERS,
    MAX_SIZE,
    TORCH_LAYER_NAME,
    TORCH_PARAMETERS,
    TORCH_REVERSE_SUFFIX,
)
from rnnconv.table.rows import Row

if TYPE_CHECKING:
    from rnnconv.formats.torch import exported

ROLE_OF = {name: role for role, name in TORCH_PARAMETERS.items()}
LAYER_SUFFIX = TORCH_LAYER_NAME.format(name="", layer=r"(?P<layer>\d+)", suffix=f"(?P<suffix>{TORCH_REVERSE_SUFFIX})?")
PARAM = re.compile(rf"^(?P<prefix>(?:.*\.)?)(?P<role>{'|'.join(ROLE_OF)})(?:{LAYER_SUFFIX})?$")
# The layer class of each gate count, from the table's torch rows.
CLASS_BY_GATES = {row.gates: row.source_class for row in rows_for("torch") if not row.source_class.endswith("Cell")}


def require_torch(purpose: str) -> Any:
    """torch, for what only torch can do; `purpose` completes "... needs torch"."""
    try:
        import torch
    except ImportError:
        raise BackendMissing(
            f"{purpose} needs torch, which is not installed (pip install 'rnnconv[torch]'); zip checkpoints "
            f"and .safetensors state_dicts are read without it"
        ) from None
    return torch


# --- tensors, whatever file they come from ---------------------------------------------------


class Tensor:
    """A lazily read tensor: shape, dtype name, and numpy slices (bfloat16 widened to float32).

    `problem` says why a tensor found in the file cannot be used (sparse, without data); it is
    raised only if an RNN needs that tensor.
    """

    def __init__(self, shape: tuple[int, ...], dtype: str, source: Any, widen: bool, problem: str | None = None):
        self.shape, self.dtype, self._source, self._widen = shape, dtype, source, widen
        self.problem = problem

    def __getitem__(self, index: Any) -> np.ndarray:
        part = self._source[index]
        if hasattr(part, "numpy"):  # a torch tensor (bfloat16 has no numpy type)
            return (part.float() if self._widen else part).numpy()
        return decode(np.asarray(part), ELEMENT_TYPES["bfloat16"]) if self._widen else np.asarray(part)

    def in_file(self) -> FileArray | None:
        """The whole tensor still in its file as stored, to be copied file to file (None when it is elsewhere,
        or widened on reading)."""
        whole = self._source.whole() if isinstance(self._source, _Values) else self._source
        return whole if isinstance(whole, FileArray) and not self._widen else None


TORCH_DTYPES = {f"torch.{etype.torch}": name for name, etype in ELEMENT_TYPES.items()}


def _torch_tensor(value: Any) -> Tensor | None:
    """A floating point tensor of a checkpoint, or None for other types; odd ones carry their problem."""
    dtype = TORCH_DTYPES.get(str(value.dtype))
    if dtype is None:
        return None
    problem = None
    if str(value.layout) != "torch.strided":
        problem = f"is a {str(value.layout).removeprefix('torch.')} tensor, not a dense one"
    elif value.is_meta:
        problem = "is a meta tensor: the file holds its shape but no values"
    return Tensor(tuple(value.shape), dtype, value.detach(), dtype == "bfloat16", problem)


def load_state_dict(path: Path) -> StateDict:
    """Every floating point tensor of a checkpoint (a sharded one's, through its index), keyed by its dotted path
    through wrappers."""
    if sharded.is_index(path):
        out = StateDict(sharded.read_shards(path, _safetensors_floats))
        out.kind = "torch-sharded"
        return out
    if is_safetensors(path):
        sharded.check_alone(path)
        header = _safetensors.read_header(path)
        out = StateDict(_safetensors_floats(path, header))
        out.records, out.kind = header[0].get("__metadata__", {}), "torch-safetensors"
        return out
    with open(path, "rb") as f:
        head = f.read(32)
    if is_zip_checkpoint(path, head[:4]) and is_program(path):
        from rnnconv.formats.torch import exported

        program = exported.read_program(path)
        tensors = _pickled_tensors(program.found)
        tensors.programs, tensors.kind = program.rnns, EXPORT_KIND
        return tensors
    if is_zip_checkpoint(path, head[:4]):
        return _zip_state_dict(path)
    if not is_legacy_checkpoint(head):
        raise BadInput(
            f"{path} is not a readable PyTorch checkpoint: it is neither torch.save's zip format nor its older "
            f"pickle format, and not a .safetensors state_dict"
        )
    torch = require_torch(f"{path} is a legacy (pre-zip) torch.save checkpoint: reading it")
    loaded = load_checkpoint(torch, path)
    tensors = StateDict()
    for key, value in flatten_checkpoint(loaded, ""):
        tensor = _torch_tensor(value) if hasattr(value, "dtype") and hasattr(value, "shape") else None
        if tensor:
            tensors[key] = tensor
    tensors.wrapped = _wraps(loaded)
    return tensors


FLOATS = {etype.safetensors for etype in ELEMENT_TYPES.values()}


def _safetensors_floats(path: Path, header: sharded.Header) -> dict[str, Tensor]:
    """The floating point tensors of a safetensors file (its header checked), still in the file."""
    found, start = header
    out = {}
    for key in found:
        if key != "__metadata__" and found[key]["dtype"] in FLOATS:
            words, etype = _safetensors.tensor_words(path, found, start, key)
            out[key] = Tensor(words.shape, etype.name, words, etype.name == "bfloat16")
    return out


FLOAT_STORAGES = {etype.storage.str if name != "bfloat16" else name: name for name, etype in ELEMENT_TYPES.items()}


def _zip_state_dict(path: Path) -> StateDict:
    """A zip checkpoint's float tensors, through rnnconv's own inert unpickler (no torch)."""
    return _pickled_tensors(read_zip(path))


def _pickled_tensors(found: ZipCheckpoint) -> StateDict:
    """The float tensors of a checkpoint's object tree, each read from its storage when first indexed: a state_dict's,
    or those of a whole model (torch.save(model), a TorchScript archive) keyed by module path, with the RNN modules
    it holds."""
    path = found.path
    tensors = StateDict()
    modules: list[str] = []
    kept: dict[str, KeptRNN] = {}

    def module(node: _pickled.Object, at: str) -> None:
        modules.append(at)
        if len(modules) > MAX_MODULES:
            raise BadInput(f"{path} holds more than {MAX_MODULES:,} modules, more than any model")
        rnn = kept_rnn(node, at, found.code)
        if rnn is not None:
            kept[at] = rnn

    tensors.kept = kept
    any_tensor = False
    cell_params: list[tuple[str, Any]] = []  # a quantized RNN's, one per layer and direction
    for key, value in flatten_checkpoint(found.root, "", module):
        if is_cell_params(value):
            cell_params.append((key, value))
        if not isinstance(value, PickledTensor):
            continue
        any_tensor = True
        dtype = FLOAT_STORAGES.get(value.dtype.replace(">", "<"))
        if dtype is not None or (value.problem and value.dtype == ""):
            tensors[key] = Tensor(
                value.shape, dtype or "float32", _Values(found, value), dtype == "bfloat16", value.problem
            )

    def add(key: str, values: np.ndarray, dtype: str) -> None:
        if key in tensors:
            raise BadInput(f"{path}: {key} is both a quantized RNN's weight and a tensor of its own")
        tensors[key] = Tensor(values.shape, dtype, values.astype(dtype, copy=False), False)

    tensors.quantized, tensors.checkpoint = quantized_rnns(found, cell_params, add), found
    any_tensor = any_tensor or bool(tensors.quantized)
    named = _pickled.globals_named(found.root)
    if not any_tensor and named:
        raise BadInput(
            f"{path} holds no tensors, only what its pickle would make of {listing(named)}; rnnconv read it without "
            f"importing or running any of it"
        )
    tensors.kind = "torch-script" if found.script is not None else "torch-module" if modules else "torch"
    tensors.wrapped = _wraps(found.root)
    tensors.records = found.records
    return tensors


class _Values:
    """A pickled tensor's values, read from its storage when first indexed."""

    def __init__(self, found: ZipCheckpoint, tensor: PickledTensor):
        self._found, self._tensor = found, tensor

    def __getitem__(self, index: Any) -> np.ndarray:
        return self._found.values(self._tensor)[index]

    def whole(self) -> np.ndarray | FileArray:
        return self._found.values(self._tensor)


def _wraps(loaded: Any) -> bool:
    """Whether the tensors sit inside a dict of other things ({'state_dict': ..., 'epoch': ...})."""
    return isinstance(loaded, Mapping) and not all(hasattr(v, "dtype") for v in loaded.values())


class StateDict(dict):
    """Tensors by dotted key; `wrapped` when the checkpoint held them inside a dict of other things; `records`: what
    rnnconv recorded beside them when it wrote the file (writer.records), by name."""

    wrapped = False
    records: Mapping[str, str | bytes] = {}
    kind = "torch"  # the file's kind (PLUGIN's kinds): a torch.save checkpoint, a whole model's, a TorchScript archive
    kept: Mapping[str, KeptRNN] = {}  # of a whole model: its RNN modules, by module path, with the settings it states
    programs: Mapping[str, exported.ExportedRNN] = {}  # a torch.export program's: what its graph says, by prefix
    quantized: Mapping[str, QuantizedRNN] = {}  # quantize_dynamic's RNNs, by prefix (their tensors are above)
    checkpoint: ZipCheckpoint | None = None  # a zip checkpoint's tree and storages, where they were read

    def recorded(self, path: Path) -> tuple[dict[str, Provenance], dict[str, str]]:
        """The source of each RNN and each nn.RNN's nonlinearity that the file records, by key prefix."""
        return recorded_by_prefix(self.records, path)


def load_checkpoint(torch: Any, path: Path) -> Any:
    """What `torch.save` wrote, unpickled with `weights_only=True`: read, never memory-mapped (a file cut short
    meanwhile must be an error, not SIGBUS in torch.save)."""
    try:
        with warnings.catch_warnings():  # torch's own (a pickle protocol other than 2): rnnconv speaks for itself
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
        with open(path, "rb") as f:
            protocol = f.read(2)[1:]
        if not found and protocol != b"\x02":
            raise BadInput(
                f"{path} is a legacy torch.save checkpoint written with pickle protocol {protocol[0]}, which "
                f"torch.load(weights_only=True) cannot read (only torch.save's default, 2); where you trust the file, "
                f"load it and save it again with torch.save (zip format)"
            ) from None
        if not found:
            raise BadInput(f"{path} is not a readable PyTorch checkpoint (not a pickle torch.save wrote)") from None
        raise BadInput(
            f"{path} was refused: it needs more than weights to load (it holds a {found.group(1)}), and "
            f"rnnconv never unpickles code; save model.state_dict() instead of the model object"
        ) from None
    except Exception as exc:  # torch.load raises anything at all on a damaged pickle or archive
        first = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
        raise BadInput(f"{path} is not a readable PyTorch checkpoint (truncated or corrupt: {first[:160]})") from None


def is_safetensors(path: Path) -> bool:
    """A safetensors file: an 8-byte header length, then the JSON header."""
    if path.suffix == ".safetensors":
        return True
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def flatten_checkpoint(
    obj: Any, prefix: str, module: Callable[[_pickled.Object, str], None] | None = None
) -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf) of a checkpoint: wrappers and containers become key prefixes; a whole model's modules
    (`modules.is_module`) give their tensors under their module paths, as their state_dict would, each module told
    to `module` with its path first; another record's attribute dict is walked as a dict.

    A pickle can share one container many times over (a list of itself, nested): the depth and the
    number of entries walked are bounded, so a small file cannot make the walk endless.
    """
    walked = 0

    def walk(node: Any, path: str, depth: int) -> Iterator[tuple[str, Any]]:
        nonlocal walked
        walked += 1
        if depth > MAX_NESTING:
            raise BadInput(f"the checkpoint nests containers more than {MAX_NESTING} deep, more than any state_dict")
        if walked > MAX_ENTRIES:
            raise BadInput(f"the checkpoint holds more than {MAX_ENTRIES} entries, more than any state_dict")
        if is_module(node):
            if module is not None:
                module(node, path[:-1])
            for key, value in module_entries(node):
                yield from walk(value, f"{path}{key}.", depth + 1)
        elif isinstance(node, _pickled.Object) and isinstance(node.state, Mapping):
            yield from walk(node.state, path, depth + 1)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                yield from walk(value, f"{path}{key}.", depth + 1)
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                yield from walk(value, f"{path}{i}.", depth + 1)
        else:
            yield path[:-1], node

    return walk(obj, prefix, 0)


MAX_NESTING = 64
MAX_ENTRIES = 1_000_000


# --- finding RNNs ---------------------------------------------------------------------------


@dataclass
class TorchRNN:
    """One nn.LSTM/GRU/RNN (or cell) found in a state_dict."""

    prefix: str  # "encoder.rnn." ("" for a bare module's state_dict), wrapper keys included
    tensors: dict[tuple[str, int | None, int], Tensor]  # (role, layer or None for cells, direction)
    keys: dict[tuple[str, int | None, int], str]
    wrapper: str = ""  # "state_dict." when the checkpoint wraps its state_dict in a dict
    program: exported.ExportedRNN | None = None  # what a torch.export program's graph says of it
    quantized: QuantizedRNN | None = None  # a dynamically quantized RNN's cells, as stored

    @property
    def name(self) -> str:
        return self.prefix[len(self.wrapper) :].rstrip(".") or "rnn"

    @property
    def is_cell(self) -> bool:
        return all(layer is None for _, layer, _ in self.tensors)


def find_rnns(tensors: Mapping[str, Tensor]) -> list[TorchRNN]:
    """RNNs by their parameter names; a wrapper key shared by all (`state_dict.`) is left out of their names."""
    found: dict[str, TorchRNN] = {}
    for key, tensor in tensors.items():
        match = PARAM.match(key)
        if not match:
            continue
        layer = int(match["layer"]) if match["layer"] is not None else None
        slot = (ROLE_OF[match["role"]], layer, 1 if match["suffix"] else 0)  # direction 1: the reverse suffix
        rnn = found.setdefault(match["prefix"], TorchRNN(match["prefix"], {}, {}))
        rnn.tensors[slot] = tensor
        rnn.keys[slot] = key
    # a layer's names (weight_ih_l1, ...) are nn.RNN modules' own: kept whatever they lack, to be refused as incomplete
    rnns = [r for r in found.values() if not r.is_cell or ("input_matrix", None, 0) in r.tensors]
    for rnn in rnns:
        rnn.program = getattr(tensors, "programs", {}).get(rnn.prefix)
        rnn.quantized = getattr(tensors, "quantized", {}).get(rnn.prefix)
    wrappers = {r.prefix.split(".")[0] for r in rnns}
    if len(wrappers) == 1 and getattr(tensors, "wrapped", False) and all("." in r.prefix for r in rnns):
        for rnn in rnns:
            rnn.wrapper = rnn.prefix.split(".")[0] + "."
    return rnns


def find_kept(state: StateDict, path: Path) -> list[TorchRNN]:
    """The RNNs of a checkpoint by their parameter names; of a whole model, each RNN module its classes name must be
    among them (one that holds no weights is refused, never passed over)."""
    rnns = find_rnns(state)
    found = {rnn.prefix[:-1] for rnn in rnns}
    for at, kept in state.kept.items():
        if at not in found:
            raise BadInput(f"{path}: its torch.nn.{kept.cls} module {at or '(the root)'!r} holds no weights")
    return rnns


def first_layer(rnn: TorchRNN) -> int | None:
    """Layer index of the first layer's tensors: 0, or None for a cell's unsuffixed names."""
    return None if rnn.is_cell else 0


def pick(rnns: list[TorchRNN], prefix: str | None, path: Path) -> TorchRNN:
    if not rnns:
        layer_row, cell_row = rows_for("torch", "LSTM")[0], rows_for("torch", "LSTMCell")[0]
        first = layer_row.tensors["input_matrix"].format(layer=0, suffix="")
        raise BadInput(f"{path} holds no PyTorch RNN weights (no {first} or cell {cell_row.tensors['input_matrix']})")
    return pick_by_prefix(rnns, prefix, path)


# --- to the canonical form -----------------------------------------------------------------


def to_canonical(
    rnn: TorchRNN,
    source: Provenance,
    nonlinearity: str | None = None,
    kept: KeptRNN | None = None,
    dequantize: bool = False,
) -> CanonicalRNN:
    """The canonical RNN of a state_dict's RNN; an nn.RNN's nonlinearity is `nonlinearity`, or assumed tanh. Of a
    whole model's RNN module (`kept`), the settings its file states: its nonlinearity, and every other checked
    against what its tensors give. A dynamically quantized RNN's int8 weights are read dequantized only with
    `dequantize`."""
    what = f"RNN {rnn.name!r}"
    quantized_provenance, quantized_notes = _quantized_reading(rnn, what, dequantize)
    t = rnn.tensors
    first = first_layer(rnn)
    layers: list[int | None] = [None]
    num_layers, bidirectional = 1, False
    if not rnn.is_cell:
        cell_names = sorted(rnn.keys[slot] for slot in t if slot[1] is None)
        if cell_names:
            raise BadInput(f"{what}: {listing(cell_names)} are a cell's names, beside a layer's")
        cells = {(layer, direction) for (_, layer, direction) in t if layer is not None}  # all of them, as said
        num_layers, bidirectional = held_grid(what, cells)
        layers = list(range(num_layers))
    for role in ("input_matrix", "recurrent_matrix"):
        if (role, first, 0) not in t:
            held = listing(sorted(rnn.keys[slot] for slot in t if slot[1:] == (first, 0)))
            raise BadInput(f"{what} is incomplete: its first cell has no {TORCH_PARAMETERS[role]} beside {held}")
    hh = t[("recurrent_matrix", first, 0)]
    for slot, tensor in t.items():
        if tensor.problem:
            raise BadInput(f"{what}: {rnn.keys[slot]} {tensor.problem}")
    ih = t[("input_matrix", first, 0)]
    if len(ih.shape) != 2:
        raise BadInput(f"{what}: {rnn.keys[('input_matrix', first, 0)]} has shape {tuple(ih.shape)}, not (G*H, I)")
    hr = t.get(("projection", first, 0))
    if hr is not None and len(hr.shape) != 2:
        raise BadInput(f"{what}: {rnn.keys[('projection', first, 0)]} has shape {tuple(hr.shape)}, not (P, H)")
    hidden = hr.shape[1] if hr is not None else (hh.shape[1] if len(hh.shape) == 2 else 0)
    if len(hh.shape) != 2 or hidden == 0 or hh.shape[0] % hidden or hh.shape[0] // hidden not in CLASS_BY_GATES:
        raise BadInput(
            f"{what}: {rnn.keys[('recurrent_matrix', first, 0)]} has shape {tuple(hh.shape)}, which is "
            f"no {', '.join(CLASS_BY_GATES.values())} {TORCH_PARAMETERS['recurrent_matrix']} (G*H, H) for G = "
            f"{', '.join(map(str, CLASS_BY_GATES))}"
        )
    cls = CLASS_BY_GATES[hh.shape[0] // hidden] + ("Cell" if rnn.is_cell else "")
    row = find_row("torch", cls)
    if kept is not None and kept.cls != cls:
        raise BadInput(f"{what} is a torch.nn.{kept.cls} by its class, but its tensors are those of an nn.{cls}")
    stored = kept.nonlinearity if kept is not None and "activation" in row.unstored else None
    program = rnn.program
    if program is not None:
        settled, notes = _settle_program(row, program, nonlinearity, what, rnn.name)
    elif kept is not None and stored is not None:
        if nonlinearity not in (None, stored):
            raise BadInput(f"{what} is an nn.{cls} with nonlinearity {stored} by {kept.told_by}, not {nonlinearity}")
        settled, notes = settle(row, {"activation": stored}, rnn.name, unstored=()), []
    else:
        settled = settle_nonlinearity(
            row, nonlinearity, rnn.name, f"{what} is an {cls}: --nonlinearity applies to nn.RNN only"
        )
        notes = nonlinearity_note(rnn.name, settled, row, "a state_dict")
    proj = hr.shape[0] if hr is not None else 0
    has_bias = ("input_bias", first, 0) in t

    def cell(index: int, direction: int, spec: RNNSpec) -> StoredCell:
        layer = layers[index]

        def check(expected: Mapping[str, tuple[int, ...]]) -> None:
            extra = {rnn.keys[s] for s in t if s[1] == layer and s[2] == direction and s[0] not in expected}
            if extra:
                raise BadInput(
                    f"{what}: {', '.join(sorted(extra))} does not fit a {cls} "
                    f"{'with' if has_bias else 'without'} biases{' and projection' if proj else ''}"
                )

        here = {role: tensor for (role, at, side), tensor in t.items() if (at, side) == (layer, direction)}
        return StoredCell(
            fetch=here.__getitem__,
            shapes={role: tuple(tensor.shape) for role, tensor in here.items()},
            names={role: _name(rnn, row, role, layer, direction) for role in row.tensors},
            where=f"{what} ({spec.describe()})",
            check=check,
        )

    role_of_kind = {kind: role for role, kind in KIND_OF_ROLE.items()}

    def stacked(index: int, direction: int, kind: str) -> FileArray | None:
        """A stored tensor holds one kind's gates stacked in cuDNN's order (PyTorch's own)."""
        tensor = t.get((role_of_kind[kind], layers[index], direction))
        return tensor.in_file() if tensor is not None and row.gate_order == CUDNN_GATES[row.cell] else None

    found = Found(
        rnn.name,
        row,
        settled,
        input_size=ih.shape[1],
        hidden=hidden,
        dtype=ih.dtype,
        cell=cell,
        layer_class=f"nn.{cls}",
        num_layers=num_layers,
        bidirectional=bidirectional,
        proj=proj,
        has_bias=has_bias,
        without_bias="bias=False",
        without_bias_aside=" (as PyTorch gives cuDNN)",
        notes=notes,
        later_notes=[f"{rnn.name}: an {cls} is a one-layer RNN run one step at a time"] * rnn.is_cell + quantized_notes,
        provenance={"prefix": rnn.prefix, **quantized_provenance},
        handover={"stacked": stacked},
    )
    canonical = read(found, source)
    if kept is not None:
        spec = canonical.spec
        told = {"mode": spec.mode.upper(), "input_size": spec.input_size, "hidden_size": spec.hidden_size}
        if not rnn.is_cell:
            told |= {"num_layers": spec.num_layers, "bidirectional": spec.bidirectional, "proj_size": spec.proj_size}
        check_settings(kept, told | {"bias": spec.bias}, what)
    return canonical


def _quantized_reading(rnn: TorchRNN, what: str, dequantize: bool) -> tuple[dict[str, Any], list[str]]:
    """What reading a dynamically quantized RNN records and notes; without `dequantize` its int8 weights are
    refused, in a sentence that says their scheme."""
    quantized = rnn.quantized
    if quantized is None:
        return {}, []
    if quantized.kind == FP16:
        return {}, [
            f"{rnn.name}: a float16 dynamically quantized RNN (quantize_dynamic, dtype=torch.float16): its weights are "
            f"float16 values, read as stored, which its kernel computes with in float32"
        ]
    rec = quantized.record
    assert rec is not None
    zero = "zero points 0" if rec.symmetric else "with zero points"
    count = len(rec.tensors)
    if not dequantize:
        raise Unsupported(
            f"{what} is dynamically quantized (quantize_dynamic): {count} int{rec.bits} weight tensors ({rec.scheme}, "
            f"{zero}, largest step {rec.largest_step:.3g}), which cuDNN does not compute with; --dequantize converts "
            f"the float model they approximate, scale * (q - zero_point)"
        )
    how = "torch's dynamic kernels also quantize each product's input to uint8 per tensor at run time"
    return {"dtype": "int8", "dequantized": rec}, [_quantized.note(rnn.name, rec, quantized.dtype, how)]


def _settle_program(
    row: Row, program: exported.ExportedRNN, nonlinearity: str | None, what: str, name: str
) -> tuple[Settled, list[str]]:
    """A program's RNN settled by its graph: the op says the class and an nn.RNN's nonlinearity (stored, never
    assumed); a --nonlinearity that contradicts it is refused."""
    if program.layer_class != row.source_class:
        raise BadInput(
            f"{what}: the program calls {program.op.removeprefix('torch.ops.')} on tensors shaped as an "
            f"nn.{row.source_class}'s"
        )
    if nonlinearity is not None and nonlinearity != program.nonlinearity:
        raise BadInput(
            f"{what}: --nonlinearity {nonlinearity} contradicts the program, which calls "
            f"{program.op.removeprefix('torch.ops.')}"
        )
    stored = {"activation": program.nonlinearity} if program.nonlinearity else {}
    from rnnconv.formats.torch import exported

    return settle(row, stored, name, unstored=()), exported.explain_states(program, name)


def rnn_sizes(rnn: TorchRNN) -> tuple[str, RNNSizes | None]:
    """The class (nn.LSTM, ...) and sizes an RNN's tensors give, also when it does not convert (what they
    cannot tell: nn.? and None)."""
    first = first_layer(rnn)
    ih, hh = rnn.tensors.get(("input_matrix", first, 0)), rnn.tensors.get(("recurrent_matrix", first, 0))
    if ih is None or hh is None or len(ih.shape) != 2 or len(hh.shape) != 2 or not hh.shape[1]:
        return "nn.?", None
    hr = rnn.tensors.get(("projection", first, 0))
    proj = hr.shape[0] if hr is not None and len(hr.shape) == 2 else 0
    hidden = hr.shape[1] if hr is not None and len(hr.shape) == 2 else hh.shape[1]
    gates = hh.shape[0] // hidden if hidden and not hh.shape[0] % hidden else 0
    if gates not in CLASS_BY_GATES:
        return "nn.?", None  # shapes that fit no class tell no sizes either
    sizes = RNNSizes(
        input_size=min(ih.shape[1], MAX_SIZE),
        hidden_size=min(hidden, MAX_SIZE),
        num_layers=min(max(1, len({layer for (_, layer, _) in rnn.tensors})), MAX_LAYERS),
        bidirectional=any(direction for (_, _, direction) in rnn.tensors),
        proj_size=min(proj, MAX_SIZE),
        dtype=f"int{rnn.quantized.record.bits}" if rnn.quantized and rnn.quantized.record else ih.dtype,  # as stored
        bias=("input_bias", first, 0) in rnn.tensors,
    )
    return f"nn.{CLASS_BY_GATES[gates]}{'Cell' if rnn.is_cell else ''}", sizes


def _name(rnn: TorchRNN, row: Row, role: str, layer: int | None, direction: int) -> str:
    return rnn.prefix + row.tensors[role].format(layer=layer, suffix=TORCH_REVERSE_SUFFIX if direction else "")
