"""Keras' own words beyond the variable names (the table's): the initializer arguments, the cell classes and
wrappers, the names recurrent layers have, and Bidirectional's groups and sub-layer prefixes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pathlib import Path

    from rnnconv.formats.probe import Probe

# The Keras layer arguments that initialize each variable (in the same order).
KERAS_INITIALIZERS: Final = ("kernel_initializer", "recurrent_initializer", "bias_initializer")
# Keras cell classes and the layer class each computes as (RNN(cell) wraps one).
KERAS_CELLS: Final[dict[str, str]] = {"LSTMCell": "LSTM", "GRUCell": "GRU", "SimpleRNNCell": "SimpleRNN"}
KERAS_WRAPPERS: Final = ("Bidirectional", "RNN")
# Class names of recurrent layers rnnconv lists without converting them (ConvLSTM2D, PeepholeLSTMCell,
# StackedRNNCells, a custom AttentionGRU): a file that holds one never reads as holding no recurrent layer.
KERAS_RECURRENT_NAMES: Final = r"LSTM|GRU|RNN"
# Bidirectional's sub-layer groups in a Keras 3 weights file, forward first.
KERAS_DIRECTION_GROUPS: Final = ("forward_layer", "backward_layer")
KERAS_DIRECTION_PREFIXES: Final = ("forward", "backward")  # and the names of its sub-layers: forward_{name}
# A SavedModel directory's files, and what a TF2 checkpoint's bundle holds beside its variables.
SAVED_MODEL: Final = "saved_model.pb"  # the graphs (never parsed: the variables and the metadata say it all)
SAVED_MODEL_HEAD: Final = b"\x08\x01\x12"  # SavedModel.saved_model_schema_version = 1, then its meta_graphs
KERAS_METADATA: Final = "keras_metadata.pb"  # tf-keras' SavedMetadata: each object's JSON, the model config
SAVED_MODEL_VARIABLES: Final = "variables/variables"  # the tensor bundle's prefix in the directory
OBJECT_GRAPH_KEY: Final = "_CHECKPOINTABLE_OBJECT_GRAPH"  # the bundle's TrackableObjectGraph
VALUE_ATTRIBUTE: Final = "VARIABLE_VALUE"  # the attribute of a variable's value in that graph


def sniff(probe: Probe) -> bool:
    """An HDF5 file (.h5), a zip archive with a config.json (.keras), a SavedModel's saved_model.pb, or a
    checkpoint's index (whether it holds a TF2 object graph is the format's `claims`)."""
    from rnnconv.formats.probe import HDF5_MAGIC
    from rnnconv.formats.tf1.wire import INDEX_SUFFIX

    if probe.head.startswith(HDF5_MAGIC):
        return True
    if probe.path.name == SAVED_MODEL:
        return probe.head.startswith(SAVED_MODEL_HEAD)
    if probe.path.name.endswith(INDEX_SUFFIX):
        return True
    names = probe.zip_names
    return names is not None and "config.json" in names


def is_object_file(path: Path) -> bool:
    """Whether `path` is read as a SavedModel's or a TF2 checkpoint's (its saved_model.pb, an index, a data file),
    not as a Keras file."""
    from rnnconv.formats.tf1.wire import DATA_SHARD, INDEX_SUFFIX

    return path.name == SAVED_MODEL or path.name.endswith(INDEX_SUFFIX) or bool(DATA_SHARD.search(path.name))


# The ops of a Keras 3 export's loop bodies that say a cell's activations (formats/keras/serving.py): an activation's
# op by its Keras name; Keras 3's hard_sigmoid, relu6(x + 3) / 6; and the ops of the cell's step around them.
SERVING_ACTIVATIONS: Final[dict[str, str]] = {
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Relu": "relu",
    "Relu6": "relu6",
    "Elu": "elu",
    "Selu": "selu",
    "Softplus": "softplus",
    "Softsign": "softsign",
}
SERVING_HARD_SIGMOID: Final = "hard_sigmoid"
SERVING_RELU6: Final = "Relu6"
SERVING_DIVIDE: Final = "RealDiv"
SERVING_ADD: Final = "AddV2"
SERVING_BIAS_ADD: Final = "BiasAdd"
SERVING_MATMUL: Final = "MatMul"
SERVING_MULTIPLY: Final = "Mul"
SERVING_SUBTRACT: Final = "Sub"
SERVING_SPLIT: Final = "Split"
SERVING_IDENTITY: Final = "Identity"

# The rescue of whole models (rescue.py): what Keras 3.15 reads. Each layer class it carries and the settings its
# config may have (3.15's get_config, and activity_regularizer, which every Keras 3 layer takes).
_BASE = ("name", "trainable", "dtype")
_RNN = (
    *_BASE,
    "units", "activation", "use_bias", "kernel_initializer", "recurrent_initializer", "bias_initializer",
    "kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
    "recurrent_constraint", "bias_constraint", "dropout", "recurrent_dropout", "seed", "return_sequences",
    "return_state", "go_backwards", "stateful", "unroll", "zero_output_for_mask",
)  # fmt: skip
KERAS3_LAYER_KEYS: Final[dict[str, frozenset[str]]] = {
    "InputLayer": frozenset({"batch_shape", "dtype", "name", "optional", "ragged", "sparse"}),
    "Dense": frozenset({
        *_BASE, "units", "activation", "use_bias", "kernel_initializer", "bias_initializer", "kernel_regularizer",
        "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint", "quantization_config",
    }),
    "Embedding": frozenset({
        *_BASE, "input_dim", "output_dim", "embeddings_initializer", "embeddings_regularizer", "activity_regularizer",
        "embeddings_constraint", "mask_zero", "quantization_config",
    }),
    "Dropout": frozenset({*_BASE, "rate", "noise_shape", "seed"}),
    "Activation": frozenset({*_BASE, "activation"}),
    "Flatten": frozenset({*_BASE, "data_format"}),
    "Masking": frozenset({*_BASE, "mask_value"}),
    "LSTM": frozenset({*_RNN, "recurrent_activation", "unit_forget_bias"}),
    "GRU": frozenset({*_RNN, "recurrent_activation", "reset_after"}),
    "SimpleRNN": frozenset(_RNN),
    "Bidirectional": frozenset({*_BASE, "layer", "backward_layer", "merge_mode"}),
}  # fmt: skip
# Activations by name that compute the same in tf.keras 2 and in Keras 3 (hard_sigmoid does not: 0.2x + 0.5 in
# tf.keras 2, x/6 + 0.5 in Keras 3; gelu's default approximation is not the same either), and Keras 3's own.
SAME_ACTIVATIONS: Final = frozenset({
    "linear", "tanh", "sigmoid", "relu", "softmax", "elu", "selu", "softplus", "softsign", "exponential", "swish",
    "silu", "mish",
})  # fmt: skip
KERAS3_ACTIVATIONS: Final = SAME_ACTIVATIONS | frozenset({
    "celu", "gelu", "glu", "hard_shrink", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh", "leaky_relu",
    "log_sigmoid", "log_softmax", "relu6", "soft_shrink", "sparse_plus", "sparse_sigmoid", "sparsemax",
    "squareplus", "tanh_shrink", "threshold",
})  # fmt: skip
# Keras' own initializers, regularizers and constraints, by the last word of the settings that take them.
KERAS3_OBJECTS: Final[dict[str, frozenset[str]]] = {
    "initializer": frozenset({
        "Constant", "GlorotNormal", "GlorotUniform", "HeNormal", "HeUniform", "Identity", "IdentityInitializer",
        "LecunNormal", "LecunUniform", "Ones", "Orthogonal", "OrthogonalInitializer", "RandomNormal",
        "RandomUniform", "TruncatedNormal", "VarianceScaling", "Zeros",
    }),
    "regularizer": frozenset({"L1", "L1L2", "L2", "OrthogonalRegularizer"}),
    "constraint": frozenset({"MaxNorm", "MinMaxNorm", "NonNeg", "UnitNorm"}),
}  # fmt: skip
# The Kerases whose .keras archives are rescued whole: tf.keras 2.13 to 2.15 (Keras 3.15 refuses theirs) and Keras 3
# before 3.3.3 (their own loader refused their Bidirectional RNNs; 3.3.3 made Bidirectional a plain layer). A later
# Keras' archive loads as it is, so its conversion to Keras is of its RNNs, as for any other source.
RESCUED_BEFORE: Final = (3, 3, 3)
# The modules a Functional model's class is saved under: tf.keras 2.13 to 2.15's (which Keras 3 cannot import) and
# Keras 3's.
RESCUE_FUNCTIONAL_MODULES: Final = (
    "keras.src.engine.functional",
    "keras.engine.functional",
    "keras.src.models.functional",
)
