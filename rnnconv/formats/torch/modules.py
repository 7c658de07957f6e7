"""Whole models as PyTorch users keep them, read inertly: `torch.save(model)` and TorchScript archives.

Both are zip checkpoints whose pickle is read by the inert unpickler (`_pickled`): no class of the model is imported
and nothing of it runs.

- A pickled module (`torch.save(model)`) is the record of each module's class with its attribute dict: tensors in
  `_parameters` (and `_buffers`), submodules in `_modules`, and an nn.LSTM/GRU/RNN's own settings (`mode`,
  `hidden_size`, `num_layers`, `bidirectional`, `proj_size`, `batch_first`, `bias`, `nonlinearity`) beside them.
- A TorchScript archive (`torch.jit.save`) has `<name>/data.pkl`, the module tree as `__torch__.<class>` records whose
  state holds parameters and submodules as attributes, beside `<name>/code/`, the compiled classes as TorchScript
  source, and `constants.pkl`. The code is never run, only read where it says what an RNN is: a scripted RNN's
  settings are its `Final` class attributes (`hidden_size : Final[int] = 5`); a traced one keeps none, and its code's
  one call (`torch.lstm(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)`,
  `torch.gru`, `torch.rnn_tanh`, `torch.rnn_relu`, or a cell's) tells its mode, nonlinearity and literal settings.

Each module is named by its path from the root (`encoder.rnn`), its tensors keyed below it as in its state_dict.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rnnconv.errors import BadInput
from rnnconv.formats._pickled import Object

# The RNN modules of torch.nn, by the class name their pickles and archives record (TorchScript's mangling removed).
RNN_CLASSES = {
    f"torch.nn.modules.rnn.{name}": name for name in ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")
}
TORCHSCRIPT = "__torch__."  # the module TorchScript's classes live under
_MANGLED = re.compile(r"\.___torch_mangle_\d+")  # TorchScript's mark of a second class of one name (traced modules)
# An RNN module's own settings, as its pickled attribute dict or a scripted class's Final attributes holds them.
SETTINGS = ("mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "bidirectional", "proj_size")
# The aten call of a traced RNN: its mode (by nn.RNN's `mode` name) and where its literal settings stand.
CALLS = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN_TANH", "rnn_relu": "RNN_RELU"}
CELL_CALLS = {"lstm_cell": "LSTM", "gru_cell": "GRU", "rnn_tanh_cell": "RNN_TANH", "rnn_relu_cell": "RNN_RELU"}
CALL_SETTINGS = {3: "bias", 4: "num_layers", 7: "bidirectional", 8: "batch_first"}  # (input, hx, params, ...)
_CALL = re.compile(rf"torch\.({'|'.join([*CALLS, *CELL_CALLS])})\(([^\n]*)\)\n")
_FINAL = re.compile(r"^  (\w+) : Final\[(?:int|bool|str|float)\] = ([^\n]{1,200})$", re.M)
MAX_MODULES = 100_000  # modules in one model: more than any


@dataclass
class KeptRNN:
    """An nn.LSTM/GRU/RNN (or cell) a kept model holds: its path, class, and the settings the file states."""

    path: str  # "encoder.rnn" ("" for the root)
    cls: str  # "LSTM", "RNNCell", ...
    settings: dict[str, Any] = field(default_factory=dict)  # of SETTINGS, and "nonlinearity", as the file states
    told_by: str = "its attributes"  # where the settings were read

    @property
    def nonlinearity(self) -> str | None:
        stated = self.settings.get("nonlinearity")
        if isinstance(stated, str):
            return stated
        mode = self.settings.get("mode")
        return mode.removeprefix("RNN_").lower() if isinstance(mode, str) and mode.startswith("RNN_") else None


def class_of(node: Object) -> str:
    """A record's class as torch.nn names it: TorchScript's `__torch__.` and mangling taken off."""
    return _MANGLED.sub("", type(node).qualified().removeprefix(TORCHSCRIPT))


def is_module(node: Any) -> bool:
    """A pickled nn.Module (its attribute dict holds `_parameters` and `_modules`) or a TorchScript module."""
    if not isinstance(node, Object) or not isinstance(node.state, dict):
        return False
    return type(node).module.startswith(TORCHSCRIPT[:-1]) or (
        isinstance(node.state.get("_parameters"), dict) and isinstance(node.state.get("_modules"), dict)
    )


def module_entries(node: Object) -> Iterator[tuple[str, Any]]:
    """A module's tensors and submodules, by the name its state_dict gives them (what `flatten` walks)."""
    state = node.state
    if type(node).module.startswith(TORCHSCRIPT[:-1]):  # attributes: parameters and submodules among the rest
        for name, value in state.items():  # torch.jit's own records (its lists of tensors) are not attributes
            if isinstance(name, str) and (is_module(value) or not isinstance(value, Object)):
                yield name, value
        return
    for part in ("_parameters", "_buffers", "_modules"):
        entries = state.get(part)
        if isinstance(entries, dict):
            yield from ((str(name), value) for name, value in entries.items() if value is not None)


def kept_rnn(node: Object, path: str, code: Callable[[str], str | None]) -> KeptRNN | None:
    """The RNN a module is, with the settings its file states, or None for a module of another class."""
    cls = RNN_CLASSES.get(class_of(node))
    if cls is None:
        return None
    state = node.state
    settings = {k: state[k] for k in (*SETTINGS, "nonlinearity") if k in state and _plain(state[k])}
    if not type(node).module.startswith(TORCHSCRIPT[:-1]):
        return KeptRNN(path, cls, settings)
    text = code(type(node).module)
    if text is None:
        raise BadInput(f"its TorchScript module {path or 'at the root'!r} ({cls}) has no code in the archive")
    block = _class_block(text, type(node).name)
    finals = {name: _literal(value) for name, value in _FINAL.findall(block)}
    settings.update({k: v for k, v in finals.items() if k in SETTINGS and v is not None})
    told = "its TorchScript code's Final attributes" if finals else "its TorchScript code's call"
    calls = _CALL.findall(block)
    modes = {(CALLS | CELL_CALLS)[name] for name, _ in calls}
    if len(modes) > 1:
        raise BadInput(f"the TorchScript code of {path or 'its root'!r} calls {len(modes)} kinds of RNN")
    if modes:
        settings.setdefault("mode", modes.pop())
    if calls and not finals and calls[0][0] in CALLS:  # a traced RNN: its call's literal settings
        arguments = _arguments(calls[0][1])
        for index, name in CALL_SETTINGS.items():
            value = _literal(arguments[index]) if index < len(arguments) else None
            if isinstance(value, (bool, int)):
                settings.setdefault(name, value)
    return KeptRNN(path, cls, settings, told)


def _plain(value: Any) -> bool:
    return isinstance(value, (bool, int, str)) and len(str(value)) <= 40


def _class_block(text: str, name: str) -> str:
    start = re.search(rf"^class {re.escape(name)}\(", text, re.M)
    if start is None:
        return ""
    end = re.search(r"^class ", text[start.end() :], re.M)
    return text[start.start() : start.end() + end.start()] if end else text[start.start() :]


def _arguments(text: str) -> list[str]:
    """A call's arguments split at its top-level commas (lists in brackets kept whole)."""
    out: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char in "[(") - (char in "])")
        if char == "," and depth == 0:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    out.append("".join(current).strip())
    return out


def _literal(text: str) -> Any:
    """A literal of TorchScript's code (True, 2, 0., "LSTM"), or None for anything else (a name, an expression)."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if _plain(value) or isinstance(value, float) else None


def check_settings(rnn: KeptRNN, read: Mapping[str, Any], where: str) -> None:
    """The settings the file states agree with what its tensors give (`read`, by SETTINGS name), or it is refused."""
    for name, value in read.items():
        stated = rnn.settings.get(name)
        if stated is not None and stated != value and not (name == "proj_size" and stated == 0 and not value):
            raise BadInput(
                f"{where} is a torch.nn.{rnn.cls} whose {name} is {stated!r} by {rnn.told_by}, but its tensors "
                f"give {value!r}"
            )
