"""TensorFlow 1 checkpoints of `tf.contrib.cudnn_rnn` layers (CudnnLSTM, CudnnGRU, CudnnRNNTanh, CudnnRNNRelu) and of
tf.compat.v1's own cells (BasicLSTMCell, LSTMCell, GRUCell).

A checkpoint is `X.index` (a table of tensor names, dtypes, shapes and offsets) with its data in
`X.data-00000-of-00001`; either file or the prefix `X` names it. Saving such a layer writes, beside its
opaque cuDNN buffer `<scope>/opaque_kernel`, every layer's weights in TF's canonical form, under
`<scope>/rnn/multi_rnn_cell/cell_<k>/<cell>/...` (bidirectional:
`<scope>/stack_bidirectional_rnn/cell_<k>/bidirectional_rnn/{fw,bw}/<cell>/...`); those are what is read,
through the table's tf1 rows (docs/LAYOUTS.md section 9). The opaque buffer is never read: TF records no
spec for it and warns that its layout changes with the cuDNN version and the GPU, so a checkpoint that holds
only that buffer is refused. tf.compat.v1's cells keep their variables below their cell scope (`<scope>/lstm_cell/
kernel`, in a MultiRNNCell `<scope>/multi_rnn_cell/cell_<k>/...`, bidirectional `<scope>/{fw,bw}/...`); an LSTM cell's
forget_bias, which it adds when it runs, is read from the `.meta` graph beside the checkpoint (`meta_graph`) or stated
with --forget-bias.

Reading needs no TensorFlow: `_tensor_bundle` reads the index (every block's crc32c, every entry's dtype,
shape, data file, offset and size checked) and maps each tensor's values from its data file, its crc32c
checked on the other core. rnnconv writes no TF1 checkpoints. `verify` runs the
canonical weights in TensorFlow on the CPU: the LSTM through `LSTMBlockCell` (the kernel
CudnnCompatibleLSTMCell runs), the GRU and the simple RNN through their cells' equations in TF ops (TF 2 has
no CPU kernel of cuDNN's reset-after GRU).
"""

from __future__ import annotations

from rnnconv.formats.plugin import FormatInfo, Plugin, Runtime, SettingField

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "tf1",
        "TF1 checkpoint",
        {"tf1-checkpoint": "TensorFlow 1 checkpoint of tf.contrib.cudnn_rnn layers"},
        read_help="a TensorFlow 1 checkpoint of tf.contrib.cudnn_rnn CudnnLSTM/CudnnGRU/CudnnRNNTanh/CudnnRNNRelu "
        "layers or tf.compat.v1 BasicLSTMCell/LSTMCell cells: X.index (with X.data-00000-of-00001 beside it) or the "
        "prefix X",
        write_help="",
        read_note="Read without TensorFlow (the index decoded and checked, tensors mapped and their crc32c "
        "checked) from the canonical tensors TF "
        "saves beside each layer's opaque cuDNN buffer; --layer picks a layer by its variable scope. A checkpoint "
        "holding only the opaque buffer is refused: TF records no spec for it and its layout depends on the GPU. "
        "tf.compat.v1's LSTM cells: the forget_bias they add is read from the .meta graph beside the checkpoint "
        "(or --forget-bias) and joins the f gate's bias; a GRUCell is refused (its reset comes before the product).",
        write_note="",
        read_suffixes=(".index",),
        write_suffixes=(),
        default_for=(),
        source_options=("bias_split", "nonlinearity", "forget_bias"),
        layer="a layer's variable scope (encoder/cudnn_lstm)",
        example="model.ckpt.index",
        examples=("model.ckpt --layer encoder/cudnn_gru", "rnn.ckpt.index --nonlinearity relu"),
        extra="keras",
    ),
    listed=100,
    sniff_order=55,  # a checkpoint's index has no magic number at its start: after the formats that do
    runtimes=(Runtime("tf1", (("tensorflow", "tensorflow"),), "TF1 checkpoints' weights in TensorFlow's cells"),),
    frameworks=("tensorflow",),
    read_settings={
        "forget_bias": SettingField(
            float | None,
            None,
            ("--forget-bias",),
            "The forget_bias a TF1 BasicLSTMCell/LSTMCell checkpoint's cells add to their f gate, which the checkpoint "
            "does not store: taken from its .meta graph when that is beside it, else this (TensorFlow's default 1.0 "
            "is never assumed).",
        ),
    },
)
