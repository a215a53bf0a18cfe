"""A module imported on first attribute access, for verbs whose parser every `mtpc` run builds.

`mtpc --help` builds every verb's parser, so a verb module's top-level imports are paid by
every run; numpy alone is about a tenth of a second. `np = lazy_module("numpy")` keeps the
module's code unchanged (`np.asarray(...)`) and imports numpy when the verb first uses it.
"""

from __future__ import annotations

import importlib
import types


class _LazyModule(types.ModuleType):
    def __getattr__(self, attr: str):
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)  # later lookups are plain attribute reads
        return getattr(module, attr)


def lazy_module(name: str) -> types.ModuleType:
    return _LazyModule(name)
