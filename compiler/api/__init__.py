"""The Python API: `mtpc.compile` (`compiling`), `mtpc.check` (`checking`), `mtpc.diff`
(`comparing`), `mtpc.tune` (`mtpc.tuning`) and `mtpc.verify` (`mtpc.verification`), each returning a frozen result object; the verbs of
the same names are these plus rendering. `import mtpc` loads this package on first use, and this
package loads each module on first use (a verb imports its own alone).

May import every layer below it (`verification`, `pipeline`, `output`, `diffing`, `checks`, ...; only `cli` imports it.
"""

import importlib

_MODULES = {
    "CheckedTarget": ".checking", "CheckResult": ".checking", "check": ".checking",
    "DiffResult": ".comparing", "diff": ".comparing",
    "CompileResult": ".compiling", "PackageFile": ".compiling", "compile": ".compiling",
    "TuneResult": "..tuning", "tune": "..tuning",  # `mtpc.tune`: the measuring is imported when it runs
    "VerifyResult": "..verification", "verify": "..verification",  # `mtpc.verify`: likewise
}
__all__ = sorted(_MODULES)


def __getattr__(name: str):
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
