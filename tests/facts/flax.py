"""Flax linen's test facts: a written .msgpack loaded into the documented module, and rnnconv's runner from given states
(the modules, shared with flax.nnx's facts)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rnnconv.core.canonical import RNNSpec

from . import Runtime, engine_way


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
        return lambda x: jax.jit(module.apply)(variables, x)  # as Flax's examples run it: one compile
    nnx = pytest.importorskip("flax.nnx")
    model = nnx_module(spec.mode, spec.input_size, *shape[1:])
    params = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params, serialization.msgpack_restore(data))
    nnx.update(model, params)
    assert serialization.msgpack_serialize(nnx.to_pure_dict(nnx.state(model, nnx.Param))) == data
    call = nnx.jit(lambda m, x: m(x))
    return lambda x: call(model, x)


def flax_documented(target: str) -> Callable[[Path, RNNSpec, np.ndarray], np.ndarray]:
    def documented(path, spec, x_batch_major):
        jnp = pytest.importorskip("jax.numpy")
        return np.asarray(load_documented(target, path, spec)(jnp.asarray(x_batch_major)))

    return documented


RUNTIME = Runtime((".msgpack", ".msgpack.rnnconv.json"), 2e-6, (engine_way("flax"),), flax_documented("flax"), True)

# Orbax checkpoints' folders (fixtures/orbax): each one's files under its own name, damaged by the orbax family.
ORBAX_SEEDS = ["orbax/gru", "orbax/gru_zarr", "orbax/lstm_bi2", "orbax/nnx_manager/1"]
