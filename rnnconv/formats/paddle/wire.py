"""PaddlePaddle's own words: how a `.pdparams` begins, the name table `paddle.save` adds, the classes of
paddle.nn's RNNs, and the names `RNNBase` gives its cells' parameters a second time (`flat_names`)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Final

from rnnconv.table.constants import (
    GRU,
    LSTM,
    PADDLE_ALIASED,
    PADDLE_PARAMETERS,
    RNN,
    TORCH_LAYER_NAME,
    TORCH_PARAMETERS,
    TORCH_REVERSE_SUFFIX,
)

if TYPE_CHECKING:
    from rnnconv.formats.probe import Probe

KIND: Final = "paddle"  # the file kind a source records
# paddle.save adds to a state_dict the name of each tensor (structured name -> parameter name): no weights.
NAME_TABLE: Final = "StructuredToParameterName@@"
PROTOCOLS: Final = range(2, 6)  # paddle.save writes pickle protocols 2 to 4 (4 by default); 5 is Python's newest
PADDLE_CLASSES: Final[dict[str, str]] = {LSTM: "LSTM", GRU: "GRU", RNN: "SimpleRNN"}  # paddle.nn's class per family
BIDIRECTIONAL: Final = "bidirect"  # what RNNBase's `direction` is for two directions (also "bidirectional")
# A tensor paddle.save wrote inside a container other than the state_dict itself: (name, array), pickled as a
# call of builtins.tuple (Paddle 2.1 and later).
NESTED_TENSOR: Final = ("builtins", "tuple")


def flat_names(num_layers: int, directions: int, biases: tuple[bool, bool], projection: bool) -> dict[str, tuple]:
    """The names RNNBase gives its cells' parameters beside their own, each with the (layer, direction, role) it
    falls on: for every layer and direction PyTorch's weight_ih_l{k}, weight_hh_l{k} and, where that bias is on,
    bias_ih_l{k}, bias_hh_l{k} (`_reverse` for the backward direction), zipped in order with the cells' parameters,
    four each or five with a projection (Paddle's `zip(param_names, self.parameters())`, python/paddle/nn/layer/
    rnn.py): where a cell has its projection, or the names leave a bias out, later names fall on other parameters."""
    roles = (*PADDLE_ALIASED, "projection") if projection else PADDLE_ALIASED
    parameters = list(itertools.product(range(num_layers), range(directions), roles))
    named = [role for role, on in zip(PADDLE_ALIASED, (True, True, *biases)) if on]
    names = [
        TORCH_LAYER_NAME.format(name=TORCH_PARAMETERS[role], layer=layer, suffix=TORCH_REVERSE_SUFFIX if d else "")
        for layer in range(num_layers)
        for d in range(directions)
        for role in named
    ]
    return dict(zip(names, parameters))


FLAT_ROLES: Final = {TORCH_PARAMETERS[role]: role for role in PADDLE_ALIASED}
CELL_ROLES: Final = {name: role for role, name in PADDLE_PARAMETERS.items()}


def sniff(probe: Probe) -> bool:
    """A pickle (torch.save's legacy checkpoints, pickles too, are asked first): Format.claims reads whether it holds
    Paddle's RNNs."""
    head = probe.head
    return len(head) >= 2 and head[0] == 0x80 and head[1] in PROTOCOLS
