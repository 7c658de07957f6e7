"""Every format package's `Plugin`, found by looking: what the command line, `doctor`, the registry and the tests
list formats by.

Importing a package's `__init__.py` costs nothing (plain data): `rnnconv --help` builds every command from here
without importing numpy or a format's code.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from typing import Final

from rnnconv.formats.plugin import FormatInfo, Plugin

OWN_ENGINES: Final = ("auto", "cudnn", "numpy")  # rnnconv's own: cuDNN when it can run, cuDNN, its numpy reference


@functools.cache
def plugins() -> tuple[Plugin, ...]:
    """Each format package's plugin (a package under rnnconv/formats whose name has no leading _), as listed."""
    found = []
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg and not module.name.startswith("_"):
            plugin = importlib.import_module(f"{__package__}.{module.name}").PLUGIN
            if not isinstance(plugin, Plugin):
                raise RuntimeError(f"{__package__}.{module.name}.PLUGIN is no Plugin")
            found.append(plugin)
    return tuple(sorted(found, key=lambda p: p.listed))


def in_sniffing_order() -> list[Plugin]:
    """Every plugin in the order their `wire.sniff` is asked (a specific format before a general one)."""
    return sorted(plugins(), key=lambda p: (p.sniff_order, p.info.name))


FORMAT_INFO: Final[dict[str, FormatInfo]] = {plugin.info.name: plugin.info for plugin in plugins()}
# The format whose files are cuDNN's weight space (verify's blobs, the default target), as its plugin says.
(WEIGHT_SPACE,) = (plugin.info.name for plugin in plugins() if plugin.weight_space)
# Where verify runs a blob: auto = cuDNN when it can run, else numpy; cudnn; numpy = cuDNN's equations in numpy; and
# each format's engine, the blob written as that format and run in its runtime.
ENGINES: Final = OWN_ENGINES + tuple(
    engine.name
    for engine in sorted(
        (e for p in plugins() for e in (p.engine, *p.more_engines) if e is not None), key=lambda e: e.listed
    )
)
