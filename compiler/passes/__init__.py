"""IR-to-IR passes. One pass per file, each with a test beside it in tests/passes/.

A pass is a callable object with a `name` and `__call__(ir) -> PassResult`.
`Pipeline` runs them in order, names the pass that failed, and can hand the IR
after each pass to an observer (`mtpc plan --print-ir-after-all`).
"""

from __future__ import annotations

from typing import Callable

from .pipeline import Pipeline, PassResult


def default_pipeline(observer: Callable[[str, PassResult], None] | None = None) -> Pipeline:
    from .head_detection import HeadDetection
    from .runtime_profile import ApplyRuntimeProfile
    from .mtp_projection import MtpHeadProjection
    from .paged_io import PagedIoRewrite
    from .quantization import QuantizationPlanning
    from .state_window import StateWindow
    from .vision import VisionPipelineLowering

    return Pipeline(
        [HeadDetection(), ApplyRuntimeProfile(), QuantizationPlanning(), MtpHeadProjection(), PagedIoRewrite(),
         StateWindow(), VisionPipelineLowering()], observer
    )
