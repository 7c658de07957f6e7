"""PyTorch: `torch.save` checkpoints (`.pt`, `.pth`, `.bin`: state_dicts and whole models), TorchScript archives,
`.safetensors` state_dicts, Hugging Face's sharded safetensors (`model.safetensors.index.json` and its shards, or the
folder holding them), and `torch.export` programs (`.pt2`, read from their graph and raw weights: `exported`).

Reading (`reader`, `modules` for whole models) needs torch only for legacy (pre-zip) `torch.save` files (always
`weights_only`); zip checkpoints are read by the inert unpickler, and safetensors and programs need no torch either.
Writing (`writer`) and running a source for verify (`runner`) are imported when used.
"""

from __future__ import annotations

from rnnconv.formats.plugin import EngineInfo, FormatInfo, Plugin, Runtime

PLUGIN = Plugin(
    package=__name__,
    info=FormatInfo(
        "torch",
        "PyTorch",
        {
            "torch": "torch.save checkpoint",
            "torch-safetensors": "safetensors state_dict",
            "torch-sharded": "sharded safetensors checkpoint (its index)",
            "torch-module": "torch.save of a whole model, read inertly",
            "torch-script": "TorchScript archive (torch.jit.save), read inertly",
            "torch-export": "torch.export program (.pt2)",
        },
        read_help=".pt/.pth/.bin from torch.save (a state_dict or a whole model), a TorchScript archive "
        "(torch.jit.save), a .safetensors state_dict, a sharded checkpoint's model.safetensors.index.json (or the "
        "save_pretrained folder holding it), or a torch.export.save .pt2",
        write_help="ckpt.pt or ckpt.pth (torch.save), or a .safetensors state_dict (with --to torch)",
        read_note="Zip checkpoints, whole models (torch.save(model)) and TorchScript archives are read by rnnconv's "
        "inert unpickler, which imports and runs nothing of the file; legacy ones load with "
        "torch.load(weights_only=True). RNNs are found by their parameter names (of a whole model, by their "
        "classes, with the settings it states); mode, sizes, layers, directions and projection come from names "
        "and shapes; a torch.export program's from each RNN op its graph calls.",
        write_note="The state_dict of nn.LSTM / nn.GRU / nn.RNN; the module call whose load_state_dict "
        "takes it is printed.",
        read_suffixes=(".pt", ".pth", ".bin", ".safetensors", ".safetensors.index.json", ".pt2"),
        write_suffixes=(".pt", ".pth", ".bin", ".safetensors"),
        default_for=(".pt", ".pth"),
        source_options=("nonlinearity", "dequantize"),
        layer="a module prefix (encoder.rnn)",
        example="ckpt.pt",
        examples=("seq2seq.pt --layer encoder.rnn", "rnn.pt --nonlinearity relu"),
        extra="torch",
        writes_into=True,
    ),
    listed=20,
    sniff_order=40,
    runtimes=(Runtime("torch", (("torch", "torch"),), "PyTorch checkpoints in torch.nn modules"),),
    engine=EngineInfo(
        "torch", ".pt", "PyTorch's nn.LSTM/GRU/RNN (CPU) running the blob, float32", (("torch", "torch"),), 90
    ),
    frameworks=("torch",),
)
