"""IRs run in OpenVINO's CPU plugin: a file rnnconv wrote as it is, or a file's own sequence ops in rnnconv's graph."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rnnconv.core.canonical import RNNSpec
from rnnconv.core.compare import Inputs
from rnnconv.errors import BackendMissing, BadInput, Unsupported
from rnnconv.formats._cells import Reading
from rnnconv.formats._graph import Chain, reverse_sequences
from rnnconv.formats.openvino.builder import Graph, Layer, Parts, QuantizedTensor, Tensor, build
from rnnconv.formats.openvino.loops import Loop
from rnnconv.formats.openvino.reader import IRFile, SequenceOp
from rnnconv.formats.openvino.wire import (
    OPENVINO_C_N,
    OPENVINO_ELEMENT_TYPES,
    OPENVINO_F32,
    OPENVINO_H_N,
    OPENVINO_INITIAL_C,
    OPENVINO_INITIAL_H,
    OPENVINO_LENGTHS,
    OPENVINO_LOW_PRECISION_OFF,
    OPENVINO_LOW_PRECISIONS,
    OPENVINO_REVERSE,
    OPENVINO_X,
    OPENVINO_Y,
    SEQUENCE_OPS,
)
from rnnconv.safeio.inputs import FileArray
from rnnconv.table.constants import LSTM

if TYPE_CHECKING:
    from rnnconv.core.report_contracts import Check

# The own graph's inputs as the deployment check feeds them: its dynamic axes (batch and steps, whichever order the
# graph has them in) given these lengths, its values from this seed.
DEPLOYED_AXES, DEPLOYED_SEED = (3, 6), 0


def require_openvino() -> Any:
    try:
        import openvino
    except ImportError:
        raise BackendMissing(
            "running an OpenVINO IR needs openvino, which is not installed (pip install 'rnnconv[openvino]')"
        ) from None
    return openvino


def openvino_reason(exc: Exception) -> str:
    """What OpenVINO says is wrong: the last line of its message (the lines before it say where in OpenVINO's sources
    it was raised and checked: `Exception from src/...:84:`, `Check '...' failed at ...:`)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def run_ir(xml: Path, inputs: Inputs, lstm: bool, width: int) -> dict[str, np.ndarray | None]:
    """An IR of rnnconv's interface in OpenVINO's CPU plugin (float32, static shapes): y, h_n, c_n sequence-major;
    `width` is y's last axis (directions x hidden).

    Static shapes: with dynamic ones the CPU plugin of openvino 2026.4 ignores sequence_lens. Each output's shape is
    checked before the graph is compiled: OpenVINO's CPU plugin corrupts its heap running a graph whose glue reshapes
    to another shape than the interface's (the process dies, exit 134 or 139).
    """
    ov = require_openvino()
    x = np.ascontiguousarray(np.asarray(inputs["x"], np.float32).transpose(1, 0, 2))
    batch, steps = x.shape[:2]
    lengths = inputs.get("lengths")
    feeds = {
        OPENVINO_X: x,
        OPENVINO_INITIAL_H: np.asarray(inputs["h0"], np.float32),
        OPENVINO_LENGTHS: np.full(batch, steps, np.int32) if lengths is None else np.asarray(lengths, np.int32),
    }
    if lstm:
        feeds[OPENVINO_INITIAL_C] = np.asarray(inputs["c0"], np.float32)
    try:
        core = ov.Core()
        model = core.read_model(str(xml))
        model.reshape({name: list(value.shape) for name, value in feeds.items()})
        expected = {OPENVINO_Y: [batch, steps, width], OPENVINO_H_N: list(feeds[OPENVINO_INITIAL_H].shape)}
        if lstm:
            expected[OPENVINO_C_N] = list(feeds[OPENVINO_INITIAL_C].shape)
        _check_shapes(xml, model, expected)
        compiled = core.compile_model(model, "CPU", OPENVINO_F32)
        results = compiled(feeds)
        got = {output.get_any_name(): np.asarray(results[output]) for output in compiled.outputs}
    except RuntimeError as exc:  # OpenVINO's own errors: a graph it refuses to read or run
        raise BadInput(f"OpenVINO cannot run {xml}: {openvino_reason(exc)}") from None
    y = np.ascontiguousarray(got[OPENVINO_Y].transpose(1, 0, 2))
    return {"y": y, "h_n": got[OPENVINO_H_N], "c_n": got.get(OPENVINO_C_N)}


def _check_shapes(xml: Path, model: Any, expected: dict[str, list[int]]) -> None:
    """BadInput where an output the interface names would not have the shape it must for these inputs."""
    for output in model.outputs:
        name = output.get_any_name()
        shape = output.get_partial_shape()
        found = [d.get_length() if d.is_static else "?" for d in shape] if shape.rank.is_static else "?"
        if name in expected and found != expected[name]:
            raise BadInput(
                f"OpenVINO cannot run {xml}: its output {name} would have the shape {found} for these inputs, where "
                f"the interface it declares gives {expected[name]} (the graph around its sequence ops is damaged)"
            )


def _one(values: FileArray | np.ndarray) -> Parts:
    return lambda: iter([values])


def _stored(values: FileArray, etype: str) -> Tensor:
    return Tensor(etype, tuple(values.shape), _one(values))


def _own_layers(chain: list[SequenceOp]) -> list[Layer]:
    """A chain's ops with their weights and attributes as the file holds them (quantized ones as their integers and
    scales, and the FakeQuantize that rounds an op's input)."""
    layers = []
    for op in chain:
        attributes = dict(op.attributes)
        weights: dict[str, Tensor | QuantizedTensor] = {}
        for role, values in op.weights.items():
            stored = op.stored.get(role)
            if stored is None:
                etype = "f32" if op.stored else OPENVINO_ELEMENT_TYPES[op.dtype]  # a quantized op's B: f32 as stored
                weights[role] = Tensor(
                    etype, tuple(values.shape), _one(np.asarray(values, np.float32) if op.stored else values)
                )
                continue
            zero = None if stored.zero_points is None else _stored(*stored.zero_points)
            # f16 scales widened to f32, exactly: OpenVINO's CPU plugin computes an f16 decompression's products in f32
            scales = Tensor("f32", tuple(stored.scales.shape), _one(np.asarray(stored.scales, np.float32)))
            weights[role] = QuantizedTensor(_stored(stored.values, stored.etype), scales, zero)
        rounding = None
        if op.rounding is not None:
            rounding = (*op.rounding_range, op.rounding.levels)
        layers.append(Layer(op.op, attributes, weights, rounding))
    return layers


def _write_graph(graph: Graph, folder: Path) -> Path:
    xml = folder / "model.xml"
    with open(xml.with_suffix(".bin"), "wb") as f:
        graph.write_bin(f)
    xml.write_text(graph.xml(), encoding="utf-8")
    return xml


def run_ops(
    file: IRFile, chain: Chain[SequenceOp], spec: RNNSpec, inputs: dict[str, np.ndarray | None], layer: str | None
) -> tuple[dict[str, np.ndarray | None], str]:
    """The file's own graph (one rnnconv wrote), or a chain of its sequence ops with their own weights and
    attributes, run in OpenVINO's CPU plugin; and how it ran."""
    ops = chain.layers
    for op in ops:
        if op.refusal is not None:
            raise Unsupported(op.refusal)
    if chain.first.input_size != spec.input_size or len(ops) != spec.num_layers:
        raise BadInput(f"the OpenVINO ops {layer} are not the RNN the blob describes ({spec.describe()})")
    ov = require_openvino()
    lstm = SEQUENCE_OPS[chain.first.op] == LSTM
    if file.interface() and chain == file.chains[0] and chain.first.direction != OPENVINO_REVERSE:
        return run_ir(
            file.path, inputs, lstm, spec.num_directions * spec.hidden_size
        ), f"OpenVINO {ov.__version__} CPU plugin: the file's own graph"
    how = f"OpenVINO {ov.__version__} CPU plugin: the file's own {chain.first.op} op(s)"
    graph = build(_own_layers(ops), chain.first.input_size, "ops")
    reverse = chain.first.direction == OPENVINO_REVERSE
    given = dict(inputs)
    if reverse:  # cuDNN runs a reverse-only op as a forward one on each sequence reversed: compare it that way
        given["x"] = reverse_sequences(np.asarray(inputs["x"]), inputs.get("lengths"))
    with tempfile.TemporaryDirectory(prefix="rnnconv-openvino-") as folder:
        out = run_ir(_write_graph(graph, Path(folder)), given, lstm, spec.num_directions * spec.hidden_size)
    if reverse:
        out["y"] = reverse_sequences(np.asarray(out["y"]), inputs.get("lengths"))
        how += ", on the sequences reversed"
    return out, how


class CompiledCell:
    """One Loop's (or TensorIterator's) cell as OpenVINO runs it: the file's own body, read by OpenVINO, cut at the
    values rnnconv read as the step's input and carried state (each made a Parameter) and at the new state, compiled
    for the CPU plugin in f32; stepped by `_cells.run_loops` as the Loop steps it, a `SteppedLoop`."""

    reading: Reading | None
    reversed: bool
    batch: int | None

    def __init__(self, path: Path, model: Any, loop: Loop, core: Any):
        reading = loop.reading
        if reading is None or loop.refusal is not None:
            raise Unsupported(loop.refusal or f"the {loop.layer.kind} {loop.name!r} computes no cell rnnconv reads")
        self.reading, self.reversed, self.batch = reading, loop.reversed, loop.batch
        ov = require_openvino()
        found = [
            op
            for op in model.get_ordered_ops()
            if op.get_friendly_name() == loop.layer.name and op.get_type_name() == loop.layer.kind
        ]
        if len(found) != 1:
            raise Unsupported(f"OpenVINO reads {len(found)} {loop.layer.kind} ops named {loop.layer.name!r} in {path}")
        named: dict[str, list[Any]] = {}
        for op in found[0].get_function().get_ordered_ops():
            named.setdefault(op.get_friendly_name(), []).append(op)

        def output(value: str) -> Any:
            layer = loop.body.layers[value.split(":", maxsplit=1)[0]]
            ops = [op for op in named.get(layer.name, []) if op.get_type_name() == layer.kind]
            if len(ops) != 1:
                raise Unsupported(
                    f"OpenVINO reads {len(ops)} {layer.kind} layers named {layer.name!r} in the body of "
                    f"{loop.layer.kind} {loop.name!r}, so the cell rnnconv read there cannot be cut from it"
                )
            return ops[0].output(layer.outputs.index(value))

        sizes = {reading.x: reading.input_size, reading.h: reading.hidden, reading.c: reading.hidden}
        self._outputs, self._what = reading.outputs, f"{loop.layer.kind} {loop.name!r}"
        self._given = [v for v in (reading.x, reading.h, reading.c) if v is not None]
        parameters, self._types = [], []
        for value in self._given:
            cut = output(value)
            parameter = ov.opset13.parameter([loop.batch or -1, sizes[value]], cut.get_element_type(), name=value)
            for reader in list(cut.get_target_inputs()):
                reader.replace_source_output(parameter.output(0))
            parameters.append(parameter)
            self._types.append(cut.get_element_type().to_dtype())
        try:
            cell = ov.Model([output(v) for v in reading.outputs], parameters, f"{loop.name} cell")
            cell.validate_nodes_and_infer_types()
            self._compiled = core.compile_model(cell, "CPU", OPENVINO_F32)
        except RuntimeError as exc:  # OpenVINO's: the cell reads more than the step's input and state, or won't run
            raise Unsupported(
                f"OpenVINO cannot run the cell of {self._what} on its own: {openvino_reason(exc)}"
            ) from None

    def step(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self._compiled([np.asarray(feeds[v], t) for v, t in zip(self._given, self._types, strict=True)])
        except RuntimeError as exc:
            raise BadInput(f"OpenVINO cannot run the cell of {self._what}: {openvino_reason(exc)}") from None
        return {
            value: np.asarray(results[self._compiled.outputs[k]], np.float32) for k, value in enumerate(self._outputs)
        }


def compiled_cells(file: IRFile, chain: Chain[SequenceOp]) -> tuple[list[list[CompiledCell]], str]:
    """A chain of Loop layers' cells, each compiled by OpenVINO from the file's own body (`CompiledCell`); and how
    they run."""
    ov = require_openvino()
    try:
        core = ov.Core()
        model = core.read_model(str(file.path))
    except RuntimeError as exc:
        raise BadInput(f"OpenVINO cannot read {file.path}: {openvino_reason(exc)}") from None
    cells = [[CompiledCell(file.path, model, loop, core) for loop in op.loops] for op in chain.layers]
    version = ov.__version__.split("-")[0]
    return cells, f"OpenVINO {version} CPU plugin: the file's {chain.first.op} bodies' cells, stepped by rnnconv"


DEPLOY_OFF_THE_LOW_PRECISION_PATH = (
    f"deploy it compiled with {OPENVINO_LOW_PRECISION_OFF} (verify --runtime-config "
    f"'{json.dumps(OPENVINO_LOW_PRECISION_OFF)}' then checks it so)"
)


def as_deployed(xml: Path, input_size: int, bound: float, config: Mapping[str, Any]) -> Check | None:
    """The file's own graph compiled as it is deployed (`config`: compile_model's properties there; empty: the CPU
    plugin's defaults, with an f32 hint) against the same graph compiled with the plugin's low-precision
    transformations off, where the plugin runs a sequence op of it on its low-precision path (what verify runs
    computes the file's ops in f32): the check of their difference against `bound`, the bound the file's scales give
    a step. Where no sequence op runs in low precision: None, or with `config` the check saying so."""
    from rnnconv.core.report_contracts import Check

    ov = require_openvino()
    name = "as deployed in OpenVINO"
    compiled_as = f"compiled with {dict(config)}" if config else "compiled with the CPU plugin's defaults"
    version = ov.__version__.split("-")[0]
    try:
        core = ov.Core()
        model = core.read_model(str(xml))
        compiled = core.compile_model(model, "CPU", {**OPENVINO_F32, **config})
        low = [
            op.get_friendly_name()
            for op in compiled.get_runtime_model().get_ordered_ops()
            if op.get_rt_info()["layerType"].astype(str) == "RNNSeq"
            and op.get_rt_info()["runtimePrecision"].astype(str) in OPENVINO_LOW_PRECISIONS
        ]
        if not low:
            if not config:
                return None
            return Check(
                check=name,
                ok=True,
                detail=f"its own graph, {compiled_as} (OpenVINO {version}), runs no sequence op on the CPU "
                f"plugin's low-precision path: it computes its ops as verify ran them",
            )
        running = (
            f"runs {len(low)} sequence op(s) (as the plugin compiles them, one per direction) on the CPU plugin's "
            "low-precision path"
        )
        floating = {ov.Type.f32, ov.Type.f16}
        odd = [p for p in model.inputs if p.get_element_type() not in floating or p.get_partial_shape().rank.is_dynamic]
        if odd:
            return Check(
                check=name,
                ok=False,
                detail=f"its own graph, {compiled_as}, {running}, which computes another RNN than the file holds; "
                f"rnnconv feeds float inputs of a "
                f"known rank only (its input {odd[0].get_element_type().get_type_name()} "
                f"{odd[0].get_partial_shape()} is not one), so how far it is was not measured: deploy it compiled "
                f"with {OPENVINO_LOW_PRECISION_OFF}",
            )
        rng = np.random.default_rng(DEPLOYED_SEED)
        feeds = []
        for parameter in model.inputs:
            dims = list(parameter.get_partial_shape())
            lengths = iter(DEPLOYED_AXES)
            shape = [
                d.get_length() if d.is_static else input_size if k == len(dims) - 1 else next(lengths, 1)
                for k, d in enumerate(dims)
            ]
            feeds.append(rng.standard_normal(shape).astype(np.float32))
        float_run = core.compile_model(model, "CPU", {**OPENVINO_F32, **config, **OPENVINO_LOW_PRECISION_OFF})
        deployed, computed = compiled(feeds), float_run(feeds)
        off = max(
            float(
                np.max(np.abs(np.asarray(deployed[compiled.outputs[k]], np.float64) - computed[float_run.outputs[k]]))
            )
            for k in range(len(compiled.outputs))
        )
    except (RuntimeError, TypeError) as exc:  # OpenVINO's own errors; TypeError: a property of the wrong type
        return Check(
            check=name,
            ok=False,
            detail=f"its own graph, {compiled_as}, does not run in OpenVINO's CPU plugin: {openvino_reason(exc)}"
            + _compiles_off_the_low_precision_path(xml, config),
        )
    how = (
        f"its own graph, {compiled_as} (OpenVINO {version}, an f32 hint), {running}: its outputs are up to "
        f"{off:.3g} from the same graph compiled with {OPENVINO_LOW_PRECISION_OFF}, which computes the ops verify "
        "ran in f32"
    )
    if off <= bound:
        return Check(check=name, ok=True, detail=f"{how}, within the bound its scales give a step ({bound:.3g})")
    return Check(
        check=name,
        ok=False,
        detail=f"{how}, more than the bound its scales give a step ({bound:.3g}): that path does not compute the RNN "
        f"the file holds; {DEPLOY_OFF_THE_LOW_PRECISION_PATH}",
    )


def _compiles_off_the_low_precision_path(xml: Path, config: Mapping[str, Any]) -> str:
    """What to deploy instead where the plugin's low-precision transformations are what fail (nncf's GRUSequence:
    they leave its weights computed, where the plugin's GRU takes constants): the setting, if the file then compiles
    with the rest of `config`."""
    if all(config.get(k) == v for k, v in OPENVINO_LOW_PRECISION_OFF.items()):
        return ""
    ov = require_openvino()
    try:
        core = ov.Core()
        core.compile_model(core.read_model(str(xml)), "CPU", {**OPENVINO_F32, **config, **OPENVINO_LOW_PRECISION_OFF})
    except (RuntimeError, TypeError):
        return ""
    return f"; it runs with the plugin's low-precision path off: {DEPLOY_OFF_THE_LOW_PRECISION_PATH}"
