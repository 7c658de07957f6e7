"""cuDNN weight spaces on disk: a raw `.bin` with a JSON sidecar, or an rnnconv `.safetensors`.

`.bin`: the weight space exactly as cuDNN takes it (little-endian, nothing else in
the file) and `<blob>.json` beside it: the `Sidecar` document (spec, cuDNN
settings, layout, every tensor's offset, the source). `.safetensors`: one 1-D
tensor per RNN, keyed by its name, with the same document in `__metadata__`
under that name. A raw blob without a sidecar is described by a spec instead.

Reading goes through the same layout (`weightspace.regions`) the writer used, so a
blob read back is exactly what was written. No framework is imported.
"""

from __future__ import annotations

from rnnconv.formats.plugin import FormatInfo, Plugin

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "cudnn",
        "cuDNN",
        {"cudnn-bin": "cuDNN weight space with its JSON sidecar", "cudnn-safetensors": "rnnconv .safetensors"},
        read_help="X.bin with its X.bin.json sidecar, an rnnconv .safetensors, or a raw blob described by the "
        "raw-blob flags",
        write_help="X.bin (the weight space exactly as cudnnRNNForward takes it, + the X.bin.json sidecar) or "
        "X.safetensors (several RNNs)",
        read_note="A raw blob without a sidecar is described with --mode, --input-size and --hidden-size; its "
        "size is checked against that spec before anything is read.",
        write_note="The sidecar gives the spec, the cuDNN enum values, the layout and every tensor's offset.",
        read_suffixes=(".bin", ".safetensors"),
        write_suffixes=(".bin", ".safetensors"),
        default_for=(".bin", ".safetensors"),
        source_options=("raw_spec",),
        layer="a key of an rnnconv .safetensors",
        example="model.bin",
        counts_non_finite=True,
        examples=("weights.raw --mode lstm --input-size 80 --hidden-size 512 --num-layers 2 --bidirectional",),
    ),
    listed=30,
    sniff_order=10,  # a blob with a sidecar may hold any bytes; rnnconv's safetensors before PyTorch's
    weight_space=True,
)
