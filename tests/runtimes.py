"""Each written format run as a user runs it, in its own framework or runtime: the conformance suite's run adapters.

`RUNTIMES[format].run(path, spec, x, h0, c0)` loads a file rnnconv wrote the way the format's documentation says
and gives its outputs as cuDNN gives them: y (T, B, D*out), h_n (L*D, B, out), c_n (L*D, B, H) or None for a cell
without one, from sequence-major x (T, B, I) and initial states in cuDNN's order. A framework that is not installed
skips the test (pytest.importorskip): nothing here imports one before it is asked to run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

Outputs = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]


@dataclass(frozen=True)
class Way:
    """One way of running a written file from given states: `ragged` where it takes sequence lengths (then it is held
    against the source run on packed sequences too)."""

    label: str
    run: Callable[..., Outputs]
    ragged: bool = False
    # the runtime's own limit, not rnnconv's: why it cannot run a file of this spec (None: it runs every one)
    cannot: Callable[[RNNSpec], str | None] = lambda spec: None


@dataclass(frozen=True)
class Runtime:
    """How one format's written files run: each way from given states (cuDNN's order), and, where the documented
    module starts from its own zero states only, `documented` (batch-major x -> batch-major y)."""

    files: tuple[str, ...]  # what a conversion to model{files[0]} writes, and nothing else
    tolerance: float
    ways: tuple[Way, ...] = ()
    documented: Callable[[Path, RNNSpec, np.ndarray], np.ndarray] | None = None
    # a bfloat16 source's file is run in 16 bits by its runtime (OpenVINO, MLX), or holds 16-bit sums of the source's
    # biases (Flax linen's GRU has one bias where PyTorch has two: b_ir + b_hr is stored in the source's bfloat16)
    rounds_to_16_bits: bool = False
    beside: tuple[str, ...] = ()  # files written beside model{files[0]} under names of their own

    @property
    def ending(self) -> str:
        return self.files[0]


# --- ONNX in onnxruntime ------------------------------------------------------------------------------------------


def ort_session(path):
    onnxruntime = pytest.importorskip("onnxruntime")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_run(path, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None) -> list[np.ndarray]:
    """A written .onnx in onnxruntime, its graph's inputs X, initial_h and (an LSTM's) initial_c fed."""
    feeds = {"X": x, "initial_h": h0} | ({"initial_c": c0} if c0 is not None else {})
    return ort_session(path).run(None, feeds)


def _onnx(path, spec, x, h0, c0, lengths=None) -> Outputs:
    y, h_n, *c_n = ort_run(path, x, h0, c0)
    return y, h_n, c_n[0] if c_n else None


def _mnn(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """A written .onnx converted by MNN's own converter and run by its CPU runtime (pip `mnn`), fed as onnxruntime."""
    from rnnconv.formats.onnx.mnn import mnn_version, run_in_mnn

    if mnn_version() is None:
        pytest.skip("mnn is not installed")
    names = ["Y", "Y_h", "Y_c"][: 2 + (c0 is not None)]
    feeds = {"X": x, "initial_h": h0} | ({"initial_c": c0} if c0 is not None else {})
    got = run_in_mnn(Path(path).read_bytes(), feeds, names)
    return got["Y"], got["Y_h"], got.get("Y_c")


def _mnn_cannot(spec: RNNSpec) -> str | None:
    """MNN computes tanh for ONNX's RNN op whatever its activations (--profile mnn names it; test_onnx_consumers)."""
    return "MNN computes tanh for an RNN with Relu" if spec.mode == "rnn_relu" else None


# --- OpenVINO IR in OpenVINO's CPU plugin -------------------------------------------------------------------------


def ov_run(xml, x, h0, c0=None, lengths=None) -> dict[str, np.ndarray]:
    """The IR in OpenVINO's CPU plugin, as a user runs it: x batch-first, float32 inference, static shapes (the CPU
    plugin ignores sequence_lens when the shapes are dynamic)."""
    ov = pytest.importorskip("openvino")
    core = ov.Core()
    model = core.read_model(str(xml))
    feeds = {"x": x, "initial_h": h0, "sequence_lens": np.full(x.shape[0], x.shape[1], np.int32)}
    if lengths is not None:
        feeds["sequence_lens"] = lengths.astype(np.int32)
    if c0 is not None:
        feeds["initial_c"] = c0
    model.reshape({name: list(value.shape) for name, value in feeds.items()})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = compiled(feeds)
    return {out.get_any_name(): results[out] for out in compiled.outputs}


def _openvino(path, spec, x, h0, c0, lengths=None) -> Outputs:
    ov = pytest.importorskip("openvino")
    model = ov.Core().read_model(str(path))  # the inputs and outputs the docs name, and the source recorded
    names = [i.get_any_name() for i in model.inputs], [o.get_any_name() for o in model.outputs]
    lstm = spec.mode == "lstm"
    states = ["initial_h", "initial_c"] if lstm else ["initial_h"]
    assert names == (["x", *states, "sequence_lens"], ["y", "h_n", "c_n"][: 2 + lstm])
    assert '"format":' in model.get_rt_info(["rnnconv.source"]).astype(str)
    got = ov_run(path, np.ascontiguousarray(x.transpose(1, 0, 2)), h0, c0, lengths)
    return got["y"].transpose(1, 0, 2), got["h_n"], got.get("c_n")


# --- TFLite in LiteRT -----------------------------------------------------------------------------------------------


def litert_run(path, x, h0=None, c0=None):
    """The written file in LiteRT as a user runs it (docs/formats/tflite.md's contract): x (T, B, I) and states
    (L*D, B, n) in cuDNN's order; x resized, the state tensors h_l0, c_l0, h_l0_reverse, ... resized and set; y, h_n,
    c_n out."""
    interpreter_module = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = interpreter_module.Interpreter(model_path=str(path))
    tensors = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    (given,), (result,) = interpreter.get_input_details(), interpreter.get_output_details()
    assert (given["name"], result["name"]) == ("x", "y")
    assert list(given["shape_signature"]) == [-1, -1, x.shape[2]]
    steps, batch, _ = x.shape
    layers = sum(1 for name in tensors if re.fullmatch(r"h_l\d+", name))
    suffixes = ["", "_reverse"] if "h_l0_reverse" in tensors else [""]
    order = [(layer, suffix) for layer in range(layers) for suffix in suffixes]
    interpreter.resize_tensor_input(given["index"], [batch, steps, x.shape[2]])
    starts = {"h": h0, "c": c0}
    for state, values in starts.items():
        for layer, suffix in order:
            if values is not None:
                interpreter.resize_tensor_input(tensors[f"{state}_l{layer}{suffix}"], [batch, values.shape[2]])
    interpreter.allocate_tensors()
    for state, values in starts.items():
        for k, (layer, suffix) in enumerate(order):
            if values is not None:
                interpreter.set_tensor(
                    tensors[f"{state}_l{layer}{suffix}"], np.ascontiguousarray(values[k], np.float32)
                )
    interpreter.set_tensor(given["index"], np.ascontiguousarray(x.transpose(1, 0, 2), np.float32))
    interpreter.invoke()
    y = interpreter.get_tensor(result["index"]).transpose(1, 0, 2)
    finals = {
        state: np.stack([interpreter.get_tensor(tensors[f"{state}_l{layer}{suffix}"]) for layer, suffix in order])
        for state, values in starts.items()
        if values is not None
    }
    return y, finals["h"], finals.get("c")


def _tflite(path, spec, x, h0, c0, lengths=None) -> Outputs:
    return litert_run(path, x, h0, c0)


# --- Flax linen and flax.nnx ----------------------------------------------------------------------------------------


def linen_module(mode: str, hidden: int, layers: int, bidirectional: bool):
    """The module the docs give a written file: nn.RNN, nn.Bidirectional, nn.Sequential of them."""
    nn = pytest.importorskip("flax.linen")
    cells = {"lstm": nn.LSTMCell, "gru": nn.GRUCell, "rnn_tanh": nn.SimpleCell, "rnn_relu": nn.SimpleCell}
    kwargs = {"activation_fn": nn.relu} if mode == "rnn_relu" else {}

    def one():
        return nn.RNN(cells[mode](hidden, **kwargs))

    layer = (lambda: nn.Bidirectional(one(), one())) if bidirectional else one
    return layer() if layers == 1 else nn.Sequential([layer() for _ in range(layers)])


def nnx_module(mode: str, input_size: int, hidden: int, layers: int, bidirectional: bool):
    nnx = pytest.importorskip("flax.nnx")
    cells = {"lstm": nnx.LSTMCell, "gru": nnx.GRUCell, "rnn_tanh": nnx.SimpleCell, "rnn_relu": nnx.SimpleCell}
    kwargs = {"activation_fn": nnx.relu} if mode == "rnn_relu" else {}
    rngs = nnx.Rngs(0)

    def one(n_in: int):
        return nnx.RNN(cells[mode](n_in, hidden, rngs=rngs, **kwargs))

    def layer(k: int):
        n_in = input_size if k == 0 else hidden * (2 if bidirectional else 1)
        return nnx.Bidirectional(one(n_in), one(n_in)) if bidirectional else one(n_in)

    return layer(0) if layers == 1 else nnx.Sequential(*[layer(k) for k in range(layers)])


def load_documented(target: str, path, spec: RNNSpec):
    """The written file loaded as the docs say, into the documented module: a function of batch-major x (the
    module's own zero initial states). The file is the very bytes Flax writes for that tree."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    serialization = pytest.importorskip("flax.serialization")
    data = Path(path).read_bytes()
    shape = (spec.mode, spec.hidden_size, spec.num_layers, spec.bidirectional)
    if target == "flax":
        module = linen_module(*shape)
        variables = module.init(jax.random.key(0), jnp.zeros((1, 1, spec.input_size)))
        variables = serialization.from_bytes(variables, data)
        assert serialization.to_bytes(variables) == data
        return lambda x: module.apply(variables, x)
    nnx = pytest.importorskip("flax.nnx")
    model = nnx_module(spec.mode, spec.input_size, *shape[1:])
    params = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params, serialization.msgpack_restore(data))
    nnx.update(model, params)
    assert serialization.msgpack_serialize(nnx.to_pure_dict(nnx.state(model, nnx.Param))) == data
    return model


def _flax_documented(target: str) -> Callable[[Path, RNNSpec, np.ndarray], np.ndarray]:
    def documented(path, spec, x_batch_major):
        jnp = pytest.importorskip("jax.numpy")
        return np.asarray(load_documented(target, path, spec)(jnp.asarray(x_batch_major)))

    return documented


def _engine(target: str) -> Callable[..., Outputs]:
    """rnnconv's own runner of the format (Flax's and Equinox's cells from given states, every layer and direction:
    the documented modules take none)."""

    def run(path, spec, x, h0, c0, lengths=None) -> Outputs:
        pytest.importorskip("jax")
        from rnnconv.core.contracts import Provenance
        from rnnconv.formats import registry

        inputs = {"x": x, "h0": h0, "c0": c0, "lengths": lengths}
        got, _ = registry.get(target).run(path, Provenance(), spec, inputs)
        return got["y"], got["h_n"], got["c_n"]

    return run


# --- Equinox --------------------------------------------------------------------------------------------------------


def step_through(cell, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None):
    """The cell over a sequence-major batch, as the Equinox docs step it (lax.scan), vmapped over the batch."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")

    def step(state, x_t):
        state = jax.vmap(cell)(x_t, state)
        return state, state[0] if c0 is not None else state

    state = (jnp.asarray(h0), jnp.asarray(c0)) if c0 is not None else jnp.asarray(h0)
    final, y = jax.lax.scan(step, state, jnp.asarray(x))
    return np.asarray(y), final


def _equinox(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """The file loaded with eqx.tree_deserialise_leaves into the cell the docs name (and written again by Equinox,
    byte for byte), stepped with lax.scan from the given states."""
    eqx = pytest.importorskip("equinox")
    jax = pytest.importorskip("jax")
    cells = {"lstm": eqx.nn.LSTMCell, "gru": eqx.nn.GRUCell}
    like = cells[spec.mode](spec.input_size, spec.hidden_size, use_bias=spec.bias, key=jax.random.key(1))
    cell = eqx.tree_deserialise_leaves(path, like)
    again = Path(path).with_name(Path(path).name + ".again")
    eqx.tree_serialise_leaves(again, cell)
    assert again.read_bytes() == Path(path).read_bytes()  # the very bytes Equinox writes for that cell
    again.unlink()
    lstm = spec.mode == "lstm"
    y, final = step_through(cell, x, h0[0], c0[0] if lstm else None)
    return y, np.asarray(final[0] if lstm else final)[None], np.asarray(final[1])[None] if lstm else None


# --- MLX --------------------------------------------------------------------------------------------------------


def documented_stack():
    """The Stack module docs/formats/mlx.md shows, as printed."""
    from conftest import doc_code

    scope: dict = {}
    exec(doc_code("docs/formats/mlx.md"), scope)
    return scope["Stack"]


def mlx_model(spec: RNNSpec, path):
    """The module the file is for, built as docs/formats/mlx.md says, loaded by MLX's own load_weights."""
    nn = pytest.importorskip("mlx.nn")
    kwargs = {"bias": spec.bias}
    if spec.mode == "rnn_relu":
        kwargs["nonlinearity"] = nn.relu
    cls = {"lstm": nn.LSTM, "gru": nn.GRU}.get(spec.mode, nn.RNN)
    layers = []
    for k in range(spec.num_layers):
        width = spec.input_size if k == 0 else spec.num_directions * spec.hidden_size
        pair = [cls(width, spec.hidden_size, **kwargs) for _ in range(spec.num_directions)]
        layers.append(pair if spec.bidirectional else pair[0])
    model = layers[0] if len(layers) == 1 and not spec.bidirectional else documented_stack()(layers)
    model.load_weights(str(path))  # strict: every parameter, its shape, nothing more
    return model


def mlx_run(model, spec: RNNSpec, x, h0, c0):
    """Run in MLX (batch-major), sequence-major outputs as cuDNN's."""
    mx = pytest.importorskip("mlx.core")
    nn = pytest.importorskip("mlx.nn")
    xb = mx.array(np.ascontiguousarray(np.asarray(x).transpose(1, 0, 2)))
    lstm = spec.mode == "lstm"
    if isinstance(model, (nn.LSTM, nn.GRU, nn.RNN)):
        out = model(xb, hidden=mx.array(h0[0]), cell=mx.array(c0[0])) if lstm else model(xb, hidden=mx.array(h0[0]))
        y, c = out if lstm else (out, None)
        hs, cs = [y[:, -1]], [c[:, -1]] if lstm else []
    else:
        y, hs, cs = model(xb, hidden=[mx.array(h) for h in h0], cell=[mx.array(c) for c in c0] if lstm else None)
    c_n = np.stack([np.array(c) for c in cs]) if lstm else None
    return np.array(y).transpose(1, 0, 2), np.stack([np.array(h) for h in hs]), c_n


def _mlx(path, spec, x, h0, c0, lengths=None) -> Outputs:
    return mlx_run(mlx_model(spec, path), spec, x, h0, c0)


# --- ncnn -----------------------------------------------------------------------------------------------------------


def ncnn_run(param, spec: RNNSpec, x, h0, c0, feed_states: bool = True) -> Outputs:
    """The written model in ncnn's Net, as the README says: each batch item alone, in0 (T, I), h0_k / c0_k
    (directions, H) fed per layer; out0, hn_k, cn_k extracted. Sequence-major results, as cuDNN's."""
    ncnn = pytest.importorskip("ncnn")
    param = Path(param)
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    assert net.load_param(str(param)) == 0 and net.load_model(str(param.with_suffix(".bin"))) == 0
    dirs, layers = spec.num_directions, spec.num_layers
    ys, hs, cs = [], [], []
    for b in range(x.shape[1]):
        ex = net.create_extractor()
        keep = [np.ascontiguousarray(x[:, b], np.float32)]
        ex.input("in0", ncnn.Mat(keep[-1]))
        for k in range(layers if feed_states else 0):
            keep.append(np.ascontiguousarray(h0[k * dirs : (k + 1) * dirs, b], np.float32))
            ex.input(f"h0_{k}", ncnn.Mat(keep[-1]))
            if spec.mode == "lstm":
                keep.append(np.ascontiguousarray(c0[k * dirs : (k + 1) * dirs, b], np.float32))
                ex.input(f"c0_{k}", ncnn.Mat(keep[-1]))
        ys.append(np.array(ex.extract("out0")[1]))
        hs.append(np.concatenate([np.array(ex.extract(f"hn_{k}")[1]) for k in range(layers)]))
        if spec.mode == "lstm":
            cs.append(np.concatenate([np.array(ex.extract(f"cn_{k}")[1]) for k in range(layers)]))
    return np.stack(ys, 1), np.stack(hs, 1), np.stack(cs, 1) if cs else None


def _ncnn(path, spec, x, h0, c0, lengths=None) -> Outputs:
    return ncnn_run(path, spec, x, h0, c0)


# --- PyTorch and Keras: the file loaded into the framework's own module ------------------------------------------


def torch_module_for(spec: RNNSpec):
    torch = pytest.importorskip("torch")
    kwargs = {"num_layers": spec.num_layers, "bidirectional": spec.bidirectional, "bias": spec.bias}
    if spec.proj_size:
        kwargs["proj_size"] = spec.proj_size
    if spec.mode.startswith("rnn"):
        kwargs["nonlinearity"] = spec.mode[4:]
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(spec.mode, torch.nn.RNN)
    return cls(spec.input_size, spec.hidden_size, **kwargs)


def torch_outputs(module, spec: RNNSpec, x, h0, c0, lengths=None) -> Outputs:
    """The module's outputs from given states (numpy in, numpy out), packed sequences where lengths are given."""
    torch = pytest.importorskip("torch")
    x, h0 = torch.from_numpy(np.asarray(x, np.float32)), torch.from_numpy(np.asarray(h0, np.float32))
    state = (h0, torch.from_numpy(np.asarray(c0, np.float32))) if spec.mode == "lstm" else h0
    if lengths is not None:
        x = torch.nn.utils.rnn.pack_padded_sequence(x, torch.as_tensor(lengths), enforce_sorted=False)
    with torch.no_grad():
        y, final = module(x, state)
    if lengths is not None:
        y = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=len(x.batch_sizes))[0]
    if spec.mode == "lstm":
        return y.numpy(), final[0].numpy(), final[1].numpy()
    return y.numpy(), final.numpy(), None


def _torch(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """The state_dict loaded (strictly) into the nn.LSTM / GRU / RNN it is for."""
    torch = pytest.importorskip("torch")
    module = torch_module_for(spec)
    module.load_state_dict(torch.load(path, weights_only=True))
    return torch_outputs(module, spec, x, h0, c0, lengths)


def _keras_documented(path, spec, x_batch_major) -> np.ndarray:
    """keras.models.load_model opens the file, and the model predicts (from zero initial states)."""
    keras = pytest.importorskip("keras")
    return np.asarray(keras.models.load_model(path)(x_batch_major))


# --- TensorFlow.js under Node.js -----------------------------------------------------------------------------------


def _tfjs(path, spec, x, h0, c0, lengths=None) -> Outputs:
    """model.json loaded by TensorFlow.js's own tf.loadLayersModel (Node.js, CPU backend), its layers run from the
    given states by the script rnnconv ships for verify."""
    from rnnconv.errors import BackendMissing
    from rnnconv.formats.tfjs.reader import TfjsFile
    from rnnconv.formats.tfjs.runner import require_tfjs, run_layers

    try:
        require_tfjs()
    except BackendMissing as exc:
        pytest.skip(str(exc))
    (chain,) = TfjsFile.load(Path(path)).chains
    out = run_layers(Path(path), chain, {"x": x, "h0": h0, "c0": c0, "lengths": lengths})
    return out["y"], out["h_n"], out["c_n"]


# --- cuDNN: the blob through the reference of cuDNN's equations (held against cuDNN itself on a GPU) -------------


def _cudnn(path, spec, x, h0, c0, lengths=None) -> Outputs:
    from rnnconv.core import reference
    from rnnconv.formats.cudnn.reader import open_bin

    blob = open_bin(path)
    return reference.forward(blob.spec, blob.param, x, h0, c0)


FLAX_ENGINE, NNX_ENGINE, EQUINOX_ENGINE = (
    Way("rnnconv's runner", _engine(name), ragged=True) for name in ("flax", "flax-nnx", "equinox")
)
RUNTIMES = {
    "cudnn": Runtime((".bin", ".bin.json"), 2e-5, (Way("the reference of cuDNN's equations", _cudnn),)),
    "onnx": Runtime((".onnx",), 1e-5, (Way("onnxruntime", _onnx), Way("MNN", _mnn, cannot=_mnn_cannot))),
    "openvino": Runtime((".xml", ".bin"), 1e-5, (Way("OpenVINO's CPU plugin", _openvino, True),), None, True),
    "tflite": Runtime((".tflite",), 2e-5, (Way("LiteRT", _tflite),)),
    "flax": Runtime((".msgpack", ".msgpack.rnnconv.json"), 2e-6, (FLAX_ENGINE,), _flax_documented("flax"), True),
    "flax-nnx": Runtime(
        (".nnx.msgpack", ".nnx.msgpack.rnnconv.json"), 2e-6, (NNX_ENGINE,), _flax_documented("flax-nnx")
    ),
    "equinox": Runtime(
        (".eqx", ".eqx.rnnconv.json"),
        2e-6,
        (Way("eqx.tree_deserialise_leaves and lax.scan", _equinox), EQUINOX_ENGINE),
    ),
    "mlx": Runtime((".mlx.safetensors",), 1e-5, (Way("mlx.nn", _mlx),), None, True),
    "ncnn": Runtime((".param", ".bin", ".param.rnnconv.json"), 1e-5, (Way("ncnn's Net", _ncnn),)),
    "torch": Runtime((".pt",), 2e-5, (Way("torch.nn", _torch, True),)),
    "keras": Runtime((".keras",), 2e-5, (), _keras_documented),
    "tfjs": Runtime((".json",), 1e-5, (Way("TensorFlow.js", _tfjs),), beside=("group1-shard1of1.bin",)),
}
