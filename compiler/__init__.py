"""mtpc: compile checkpoints that ship a multi-token-prediction head into runtime packages.

The Python API (see `mtpc.api`): `mtpc.compile(spec, output)`, `mtpc.check(*targets)` and
`mtpc.diff(old, new)`, each returning a frozen result object. They are imported on first
use, so `import mtpc` stays instant.
"""

__version__ = "0.1.0"

_API = ("compile", "check", "diff", "CompileResult", "CheckResult", "DiffResult", "PackageFile", "CheckedTarget")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
