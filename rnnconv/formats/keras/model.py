"""A whole Keras model computed in numpy from rnnconv's reading of its file, and verify's check of a rescued
archive against the file it was rescued from (`rescue`).

The old archive cannot run in Keras 3.15 (that is why it was rescued), so what it computes comes from what rnnconv
reads of it: every RNN layer through the cuDNN equations (`core.reference`) from its canonical form, the layers
around them (Dense, Embedding, Dropout, Activation, Flatten, InputLayer) by what they compute at inference. The
rescued file runs in Keras 3.15, loaded only after rnnconv's own translation has accepted its config (Keras'
built-in layers alone) and with Keras' safe mode on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rnnconv.core.contracts import Provenance
from rnnconv.core.reference import forward, sigmoid
from rnnconv.core.report_contracts import WHOLE_MODEL, Check, Report, SourceRun
from rnnconv.errors import Unsupported, cut
from rnnconv.formats.keras.reader import KerasFile, to_canonical
from rnnconv.formats.keras.rescue import RECURRENT, Rescued, rescue


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x,
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "softmax": _softmax,
    "softplus": lambda x: np.logaddexp(x, 0),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "exponential": np.exp,
    "swish": lambda x: x * sigmoid(x),
    "silu": lambda x: x * sigmoid(x),
}
MERGES: dict[Any, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "concat": lambda a, b: np.concatenate([a, b], -1),
    "sum": np.add,
    "mul": np.multiply,
    "ave": lambda a, b: (a + b) / 2,
}


class Computed:
    """The model of a Keras file, computed in numpy: its translated config, its variables as stored, and each RNN
    layer's canonical form."""

    def __init__(self, keras_file: KerasFile, rescued: Rescued) -> None:
        self.file, self.rescued = keras_file, rescued
        self.config = rescued.config["config"]
        self.functional = rescued.config["class_name"] == "Functional"
        self.groups = rescued.groups

    def inputs(self, batch: int, steps: int, seed: int) -> np.ndarray:
        """Seeded inputs of the model's shape (any free size `steps`): token ids where an Embedding takes them."""
        first = self.config["layers"][0]["config"]
        shape = [batch] + [steps if n is None else n for n in first["batch_shape"][1:]]
        rng = np.random.default_rng(seed)
        embedding = next((e for e in self.config["layers"] if e["class_name"] == "Embedding"), None)
        if embedding is not None and "int" in str(first.get("dtype")):
            return rng.integers(0, embedding["config"]["input_dim"], shape).astype(np.int32)
        return rng.standard_normal(shape).astype(np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        values: dict[str, np.ndarray] = {}
        previous = x
        for index, entry in enumerate(self.config["layers"]):
            name = entry["config"]["name"]
            if self.functional and entry["class_name"] != "InputLayer":
                called = self.inbound(entry)
                if called not in values:
                    raise Unsupported(f"layer {name!r} is called on {called!r}, which no layer before it gives")
                previous = values[called]
            values[name] = previous = self.layer(entry, self.groups[index], previous)
        if not self.functional:
            return previous
        output = self.config["output_layers"]
        if not isinstance(output[0], str):
            raise Unsupported(f"{self.file.path}: its model has several outputs, which verify does not compute")
        return values[output[0]]

    def inbound(self, entry: dict[str, Any]) -> str:
        nodes = entry.get("inbound_nodes", [])
        if len(nodes) != 1:
            raise Unsupported(
                f"layer {entry['config']['name']!r} is called {len(nodes)} times; verify computes one call"
            )
        node = nodes[0]
        try:  # Keras 3's node ({"args": [a tensor's config], ...}) or tf.keras' ([[layer, node, tensor, kwargs]])
            calls = [a["config"]["keras_history"] for a in node["args"]] if isinstance(node, dict) else node
            if len(calls) != 1:
                raise Unsupported(f"layer {entry['config']['name']!r} takes {len(calls)} inputs; verify computes one")
            return str(calls[0][0])
        except (KeyError, TypeError, IndexError):
            raise Unsupported(f"layer {entry['config']['name']!r} has an inbound node verify does not read") from None

    def layer(self, entry: dict[str, Any], group: str | None, x: np.ndarray) -> np.ndarray:
        cls, cfg = entry["class_name"], entry["config"]
        if cls in ("InputLayer", "Dropout"):  # dropout is off at inference
            return x
        if cls == "Flatten":
            return x.reshape(len(x), -1)
        if cls == "Activation":
            return _activation(cfg, cfg.get("activation"))(x)
        variables = [np.asarray(self.rescued.variables[v][...], np.float64) for v in self._of(group)]
        if cls == "Embedding":
            if cfg.get("mask_zero"):
                raise Unsupported(f"layer {cfg['name']!r} masks steps, which verify does not compute")
            table = variables[0]
            if x.dtype.kind not in "iu" or x.min() < 0 or x.max() >= len(table):
                raise Unsupported(f"layer {cfg['name']!r} is given inputs that are not token ids")
            return table[x]
        if cls == "Dense":
            y = x @ variables[0] + (variables[1] if len(variables) > 1 else 0)
            return _activation(cfg, cfg.get("activation", "linear"))(y)
        if cls in RECURRENT or cls == "Bidirectional":
            return self.recurrent(entry, x)
        raise Unsupported(f"layer {cfg['name']!r} is a {cls}, which verify does not compute")

    def _of(self, group: str | None) -> list[str]:
        names = sorted(v for v in self.rescued.variables if group and v.startswith(f"{group}/vars/"))
        return sorted(names, key=lambda v: int(v.rsplit("/", 1)[-1]))

    def recurrent(self, entry: dict[str, Any], x: np.ndarray) -> np.ndarray:
        cfg = entry["config"]
        inner = cfg["layer"]["config"] if entry["class_name"] == "Bidirectional" else cfg
        name = cfg["name"]
        if inner.get("return_state") or inner.get("go_backwards") or inner.get("stateful"):
            raise Unsupported(f"layer {name!r} returns its states, runs backwards or keeps state: verify computes none")
        layer = next((held for held in self.file.layers if held.name == name), None)
        if layer is None:
            raise Unsupported(f"layer {name!r} is not among the recurrent layers rnnconv read of {self.file.path}")
        rnn = to_canonical(layer, Provenance(), reader=self.file.reader)
        spec = rnn.spec
        sequence = np.ascontiguousarray(np.asarray(x, np.float64).transpose(1, 0, 2))  # cuDNN's time-major input
        zeros = np.zeros((spec.num_directions, len(x), spec.hidden_size))
        y, h_n, _ = forward(spec, rnn.param, sequence, zeros, zeros if "LSTM" in layer.source_class else None)
        parts = (
            [y[:, :, d * spec.hidden_size : (d + 1) * spec.hidden_size].transpose(1, 0, 2) for d in range(2)]
            if inner.get("return_sequences")
            else list(h_n)
        )
        if entry["class_name"] != "Bidirectional":
            return parts[0]
        merge = cfg.get("merge_mode", "concat")
        if merge not in MERGES:
            raise Unsupported(f"layer {name!r} merges its directions by {merge!r}, which verify does not compute")
        return MERGES[merge](*parts[:2])


def _activation(cfg: dict[str, Any], name: Any) -> Callable[[np.ndarray], np.ndarray]:
    if name not in ACTIVATIONS:
        raise Unsupported(f"layer {cfg['name']!r} has activation {name!r}, which verify does not compute")
    return ACTIVATIONS[name]


def check_rescued(path: Path, against: Path, batch: int, steps: int, seed: int, tol: float) -> Report:
    """Whether `path` is `against` rescued: the same model and variables, and, loaded in Keras 3.15, computing what
    rnnconv computes of `against` on seeded inputs."""
    from rnnconv.formats.keras.runner import import_keras

    checks: list[Check] = []
    with KerasFile(against) as old, KerasFile(path) as new:
        expected, written = rescue(old), rescue(new)  # the written file's config accepted: Keras' own layers alone
        same_config = json.dumps(expected.config, sort_keys=True) == json.dumps(written.config, sort_keys=True)
        checks.append(Check(check="model config", ok=same_config, detail="the translation of the source's config"))
        differing = sorted(
            name
            for name in expected.variables.keys() | written.variables.keys()
            if name not in expected.variables
            or name not in written.variables
            or not np.array_equal(expected.variables[name][...], written.variables[name][...])
        )
        detail = "every variable as the source stores it" if not differing else f"differ: {', '.join(differing[:3])}"
        checks.append(Check(check="variables", ok=not differing, detail=detail))
        computed = Computed(old, expected)
        x = computed.inputs(batch, steps, seed)
        want = computed(x)
    keras = import_keras("3")
    try:  # Keras on a file rnnconv's translation has accepted: what Keras makes of it is the check's to say
        got = np.asarray(keras.saving.load_model(path, compile=False, safe_mode=True)(x), np.float64)
    except Exception as exc:
        raise Unsupported(f"Keras {keras.__version__} does not run {path}: {cut(str(exc), 200)}") from None
    worst = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    checks.append(Check(check="outputs", ok=worst <= tol, detail=f"largest difference {worst:.3g} (tolerance {tol:g})"))
    ok = all(c.ok for c in checks)
    summary = (
        f"{path.name} loads in Keras {keras.__version__} and computes what {against.name} computes (the whole model, "
        f"its RNNs by the cuDNN equations from rnnconv's reading): largest difference {worst:.3g}"
        if ok
        else f"{path.name} is not {against.name} rescued: "
        + "; ".join(f"{c.check}: {c.detail}" for c in checks if not c.ok)
    )
    return Report(
        verdict="match" if ok else "mismatch",
        summary=summary,
        blob=str(path),
        name=WHOLE_MODEL,
        checks=checks,
        source=SourceRun(path=str(against), format="keras-archive", run="numpy, from rnnconv's reading"),
        versions={"keras": keras.__version__},
    )
