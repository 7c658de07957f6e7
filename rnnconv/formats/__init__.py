"""One adapter per file format: each reads into or writes from the canonical form.

Importing this package sets its name on `rnnconv`, over the public function `rnnconv.formats()` (the names of the
formats): so the package answers that call itself, as `api.formats` does.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator


class _Package(types.ModuleType):
    def __call__(self) -> Iterator[str]:
        from rnnconv.formats.catalog import in_sniffing_order

        return (plugin.info.name for plugin in in_sniffing_order())


sys.modules[__name__].__class__ = _Package
