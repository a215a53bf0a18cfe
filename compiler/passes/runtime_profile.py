"""Fit the IR to the onnxruntime-genai version it targets (see `mtpc.profiles`).

Checks the target's settings against what that runtime supports and applies its
quirks to the IR: today, the logits dtype (onnxruntime-genai 0.18.0 on CPU needs
float16 logits for MTP decoding). Quirks that only shape `genai_config.json`
(shared initializers, share-buffer flag) are read by the emitter from the same
profile. Without an onnxruntime_genai target the IR is left as it is.
"""

from __future__ import annotations

from dataclasses import replace

from ..diagnostics import Diagnostic, MtpcError
from ..ir import AttentionMode, GraphContract, ModelIR, OrtGenaiTarget, TensorSpec
from ..profiles import OrtGenaiProfile, ort_genai_profile
from . import PassResult

_TARGET = "targets.onnxruntime_genai"


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
    problems: list[Diagnostic] = []

    def refuse(key: str, message: str, hint: str | None = None) -> None:
        problems.append(Diagnostic(message, hint=hint, path=f"{_TARGET}.{key}"))

    runtime = f"onnxruntime-genai {profile.version}"
    if target.execution_provider not in profile.execution_providers:
        refuse(
            "execution_provider",
            f"execution provider {target.execution_provider!r} is not supported for {runtime}",
            f"use one of: {', '.join(sorted(profile.execution_providers))}",
        )
    if target.attention is AttentionMode.PAGED:
        if target.execution_provider not in profile.paged_execution_providers:
            refuse(
                "attention",
                f"paged attention needs the {'/'.join(sorted(profile.paged_execution_providers))} execution "
                f"provider in {runtime}, not {target.execution_provider!r}",
                "use attention: dense on this execution provider",
            )
        if io_dtype not in profile.paged_io_dtypes:
            refuse(
                "attention",
                f"paged attention in {runtime} needs {' or '.join(sorted(profile.paged_io_dtypes))} activations, "
                f"not {io_dtype}",
                "set precision.io_dtype accordingly, or use attention: dense",
            )
        if target.block_size < profile.min_block_size or target.block_size & (target.block_size - 1):
            refuse("block_size", f"block_size must be a power of two >= {profile.min_block_size}, got {target.block_size}")
        if not 1 <= target.max_batch_size <= profile.max_batch_size_limit:
            refuse("max_batch_size", f"max_batch_size must be in 1..{profile.max_batch_size_limit}, got {target.max_batch_size}")
        if target.num_blocks is not None and target.gpu_utilization_factor is not None:
            refuse("num_blocks", "give num_blocks or gpu_utilization_factor, not both")
        if target.num_blocks is not None and target.num_blocks <= 0:
            refuse("num_blocks", f"num_blocks must be positive, got {target.num_blocks}")
        factor = target.gpu_utilization_factor
        if factor is not None and not 0 < factor <= 1:
            refuse("gpu_utilization_factor", f"gpu_utilization_factor must be in (0, 1], got {factor}")
    if not profile.supports_kv_cache(target.attention, target.kv_cache):
        refuse(
            "kv_cache",
            f"a {target.kv_cache} KV cache with {target.attention.value} attention is not supported for {runtime}",
            "a static KV cache needs attention: dense",
        )
    low, high = profile.max_draft_tokens_range
    if not low <= target.max_draft_tokens <= high:
        refuse("max_draft_tokens", f"max_draft_tokens must be in {low}..{high}, got {target.max_draft_tokens}")
    if problems:
        raise MtpcError(problems)
