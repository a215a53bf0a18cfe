"""Fit the IR to the onnxruntime-genai version it targets (see `mtpc.profiles`).

Checks the target's settings against what that runtime supports and applies its
quirks to the IR: today, the logits dtype (onnxruntime-genai 0.18.0 on CPU needs
float16 logits for MTP decoding). Quirks that only shape `genai_config.json`
(shared initializers, share-buffer flag) are read by the emitter from the same
profile. Without an onnxruntime_genai target the IR is left as it is.
"""

from __future__ import annotations

from dataclasses import replace

from ..util.diagnostics import Diagnostic, MtpcError
from ..ir import GraphContract, ModelIR, OrtGenaiTarget, TensorSpec
from ..profiles import ort_genai_profile
from ..profiles.ort_genai import OrtGenaiProfile
from .pipeline import PassResult


class ApplyRuntimeProfile:
    name = "runtime-profile"

    def __call__(self, ir: ModelIR) -> PassResult:
        target = ir.targets.onnxruntime_genai
        if target is None:
            return PassResult(ir, False)
        if ir.mtp.emit_head is None:
            raise AssertionError("ApplyRuntimeProfile runs after HeadDetection")
        profile = ort_genai_profile(target.version)
        _check_target(target, ir.precision.io_dtype, profile)

        changes: list[str] = []
        new_ir = ir
        logits_dtype = profile.logits_dtype(target.execution_provider, ir.precision.io_dtype, ir.mtp.emit_head)
        if logits_dtype != ir.precision.effective_logits_dtype:
            new_ir = replace(
                new_ir,
                precision=replace(ir.precision, logits_dtype=logits_dtype),
                main=replace(ir.main, contract=_with_logits_dtype(ir.main, logits_dtype)),
                notes=ir.notes
                + (
                    f"logits are {logits_dtype}: onnxruntime-genai {profile.version} on "
                    f"{target.execution_provider} needs it for MTP decoding",
                ),
            )
            changes.append(
                f"logits dtype {ir.precision.effective_logits_dtype} -> {logits_dtype} "
                f"(onnxruntime-genai {profile.version} {target.execution_provider} profile)"
            )
        if new_ir.main.execution_provider != target.execution_provider:
            new_ir = replace(new_ir, main=replace(new_ir.main, execution_provider=target.execution_provider))
            changes.append(f"main decoder execution provider -> {target.execution_provider}")
        return PassResult(new_ir, bool(changes), tuple(changes))


def _with_logits_dtype(main, dtype: str) -> GraphContract:
    name = main.output_name("logits")
    outputs = tuple(TensorSpec(t.name, dtype, t.shape) if t.name == name else t for t in main.contract.outputs)
    return GraphContract(main.contract.inputs, outputs)


def _check_target(target: OrtGenaiTarget, io_dtype: str, profile: OrtGenaiProfile) -> None:
    # The same check spec lowering places at the spec's lines; here for IR built without a spec.
    problems = profile.target_problems(target, io_dtype)
    if problems:
        raise MtpcError([Diagnostic(p.message, hint=p.hint, path=p.path) for p in problems])
