"""The Python API: `mtpc.compile` (`compiling`), `mtpc.check` (`checking`), `mtpc.diff`
(`comparing`) and `mtpc.tune` (`mtpc.tuning`), each returning a frozen result object; the verbs of
the same names are these plus rendering. `import mtpc` loads this package on first use.

May import every layer below it (`pipeline`, `output`, `diffing`, `checks`, ...; only `cli` imports it.
"""

from .checking import CheckedTarget, CheckResult, check  # noqa: F401
from .comparing import DiffResult, diff  # noqa: F401
from .compiling import CompileResult, PackageFile, compile  # noqa: F401
from ..tuning import TuneResult, tune  # noqa: F401  (`mtpc.tune`: the measuring is imported when it runs)
