"""mtpc: compile checkpoints that ship a multi-token-prediction head into runtime packages.

The Python API (see `mtpc.api`): `mtpc.compile(spec, output)`, `mtpc.check(*targets)`,
`mtpc.diff(old, new)`, `mtpc.tune(package)` and `mtpc.verify(package, spec)`, each returning a frozen result object. They are imported on first
use, so `import mtpc` stays instant. `mtpc.diagnostics` (the `MtpcError` the API raises) and
`mtpc.progress` (`Console`, to report as the command does) are the two utilities a script needs.
docs/architecture.md shows how the packages below fit together.
"""

from .util.version import __version__

_API = ("compile", "check", "diff", "tune", "verify", "CompileResult", "CheckResult", "DiffResult", "PackageFile",
        "CheckedTarget", "TuneResult", "VerifyResult")
_UTILITIES = ("diagnostics", "progress")
__all__ = ["__version__", *_API, *_UTILITIES]


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _UTILITIES:
        import importlib

        return importlib.import_module(f"{__name__}.util.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API) | set(_UTILITIES))
