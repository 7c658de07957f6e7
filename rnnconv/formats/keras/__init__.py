"""Keras: legacy HDF5 (Keras 2, tf-keras, Keras 3), Keras 3 `.weights.h5` and `.keras` archives.

Reading (`reader`) needs h5py alone; writing (`writer`) produces Keras 3 files
without Keras; running a source for verify (`runner`) needs Keras 3 or tf-keras.
Each is imported only when its verb is used.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime, SettingField

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "keras",
        "Keras",
        {
            "keras-h5": "Keras legacy HDF5",
            "keras-weights-h5": "Keras 3 .weights.h5",
            "keras-archive": "Keras 3 .keras archive",
            "keras-savedmodel": "SavedModel directory (tf-keras model.save, Keras 3 export)",
            "tf2-checkpoint": "TensorFlow 2 object-based checkpoint",
        },
        read_help="legacy .h5 (Keras 2, tf-keras, Keras 3), .weights.h5, .keras, a SavedModel directory or a TF2 "
        "checkpoint (its prefix or X.index)",
        write_help="model.keras (keras.models.load_model opens it) or model.weights.h5",
        read_note="Read with h5py alone (SavedModels and TF2 checkpoints without it: their tensor bundle and object "
        "graph read by rnnconv): TensorFlow and Keras need not be installed. A SavedModel without Keras' metadata "
        "and a TF2 checkpoint keep no layer config: --activation and --recurrent-activation must say what the "
        "shapes do not show.",
        write_note="A Keras 3 Sequential, one LSTM / GRU(reset_after=True) / SimpleRNN layer per cuDNN layer "
        "(Bidirectional for two directions), all returning sequences, written without Keras; an "
        "LSTM's two biases are summed into Keras' one.",
        read_suffixes=(".weights.h5", ".h5", ".hdf5", ".keras"),
        write_suffixes=(".keras", ".weights.h5"),
        default_for=(".keras", ".weights.h5"),
        source_options=("bias_split", "activation", "recurrent_activation"),
        layer="a layer name (a,b,c stacks consecutive layers into one RNN)",
        example="model.h5",
        examples=("model.keras --layer encoder --dtype float16", "model.h5 --layer lstm_1,lstm_2,lstm_3"),
        extra="keras",
        writes_into=True,
    ),
    listed=10,
    runtimes=(
        Runtime("keras3", (("keras", "keras"),), "Keras 3 files in Keras' own layers", major="3"),
        Runtime("tf-keras", (("tf-keras", "tf_keras"),), "Keras 2 files in tf-keras", "pip install --no-deps tf-keras"),
    ),
    engine=EngineInfo("keras", ".keras", "Keras layers (CPU) running the blob, float32", (("keras", "keras"),), 100),
    frameworks=("tensorflow", "keras", "tf_keras"),
    # What a weights file without a model config does not store, stated by the user (None: assumed and said so).
    read_settings={
        "activation": SettingField(
            str | None,
            None,
            ("--activation",),
            "A Keras layer's activation, for a weights file without a model config [default: tanh, recorded as an "
            "assumption].",
        ),
        "recurrent_activation": SettingField(
            str | None,
            None,
            ("--recurrent-activation",),
            "A Keras LSTM/GRU's recurrent_activation, for a weights file without a model config [default: sigmoid, "
            "recorded as an assumption; refused for Keras versions whose default was hard_sigmoid].",
        ),
    },
)
