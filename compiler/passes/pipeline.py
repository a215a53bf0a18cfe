"""What a pass is (`Pass`, `PassResult`) and the pipeline that runs passes in order and names the one that fails."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

from ..util.diagnostics import MtpcError
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
