"""gguf-py's constants (GGML tensor types and their block sizes, metadata keys, token types), without gguf-py.

`import gguf` imports numpy and every gguf-py module (a fifth of a second), and reading a
header needs none of that: only the tables in gguf-py's `constants.py`, which is plain Python
(`enum`, `typing`). So the metadata verbs (`inspect`, `check SPEC`, `plan`, `diff SPEC SPEC`)
read that one file of the installed gguf package, and the values are gguf-py's own. Once
`gguf` has been imported (compile dequantizes with it), its own module is used.

The enums loaded before `gguf` was imported are not the classes `gguf` then defines, but they
are `IntEnum`s of the same values: they compare and hash as their integers, so they index
gguf-py's tables (`GGML_QUANT_SIZES[...]`) and pass to its functions all the same
(tests/sources/test_gguf_constants.py holds the two together).
"""

from __future__ import annotations

import importlib.util
import sys
import types


def _constants() -> types.ModuleType:
    loaded = sys.modules.get("gguf.constants")
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("gguf")  # finds the package without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("gguf (gguf-py) is not installed; mtpc reads GGUF files with its tables")
    for folder in package.submodule_search_locations:
        spec = importlib.util.spec_from_file_location(f"{__name__}._gguf_py", f"{folder}/constants.py")
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise ImportError("gguf-py's constants.py was not found beside its package")


_module = _constants()

GGMLQuantizationType = _module.GGMLQuantizationType
GGML_QUANT_SIZES = _module.GGML_QUANT_SIZES
Keys = _module.Keys
TokenType = _module.TokenType

