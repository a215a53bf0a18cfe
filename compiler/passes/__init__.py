"""IR-to-IR passes. One pass per file, each with a test beside it in tests/passes/.

A pass is a callable object with a `name` and `__call__(ir) -> PassResult`.
`Pipeline` runs them in order, names the pass that failed, and can hand the IR
after each pass to an observer (`mtpc plan --print-ir-after-all`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

from ..diagnostics import MtpcError
from ..ir import ModelIR


@dataclass(frozen=True)
class PassResult:
    ir: ModelIR
    modified: bool
    # Human-readable lines describing what changed, for `plan` and `--print-ir-after-all`.
    changes: tuple[str, ...] = ()


class Pass(Protocol):
    name: str

    def __call__(self, ir: ModelIR) -> PassResult: ...


@dataclass
class Pipeline:
    passes: Sequence[Pass]
    observer: Callable[[str, PassResult], None] | None = None
    results: list[tuple[str, PassResult]] = field(default_factory=list)

    def run(self, ir: ModelIR) -> ModelIR:
        for p in self.passes:
            try:
                result = p(ir)
            except MtpcError as err:
                # Say which pass refused; every other part of each diagnostic stays as it is.
                named = [replace(d, message=f"[{p.name}] {d.message}") for d in err.diagnostics]
                raise MtpcError(named, err.exit_code) from err
            # "Modified" is what the IR says, not what the pass claims: `plan` prints "no change" for a
            # pass that returned an equal IR, and the lines of a pass that changed nothing are dropped.
            modified = result.ir != ir
            if modified != result.modified:
                result = replace(result, modified=modified, changes=result.changes if modified else ())
            self.results.append((p.name, result))
            if self.observer is not None:
                self.observer(p.name, result)
            ir = result.ir
        return ir


def default_pipeline(observer: Callable[[str, PassResult], None] | None = None) -> Pipeline:
    from .head_detection import HeadDetection
    from .runtime_profile import ApplyRuntimeProfile
    from .mtp_projection import MtpHeadProjection
    from .paged_io import PagedIoRewrite
    from .quantization import QuantizationPlanning

    return Pipeline(
        [HeadDetection(), ApplyRuntimeProfile(), QuantizationPlanning(), MtpHeadProjection(), PagedIoRewrite()], observer
    )
