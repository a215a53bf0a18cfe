"""The routed experts of DeepSeek-V3-style sparse blocks (GLM-4.5's `glm4moe`, `deepseek2`) from GGUF metadata:
expert groups, leading dense blocks, shared experts, the weights' norm and scale. How scores are made (the
gating function and the selection bias) is each family's rule, handed in."""

from __future__ import annotations

from ...util.diagnostics import SourceError
from ...ir import MoeDims
from .constants import Keys
from .metadata import Metadata, _float32

SIGMOID_GATING = 2  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID


def require_sigmoid_gating(meta: Metadata, family: str) -> None:
    """A family whose router scores by sigmoid refuses a file whose `expert_gating_func` says otherwise
    (absent means sigmoid)."""
    gating = int(meta.get(Keys.LLM.EXPERT_GATING_FUNC, SIGMOID_GATING, required=False))
    if gating != SIGMOID_GATING:
        raise SourceError(f"{meta.path}: GGUF metadata key {Keys.LLM.EXPERT_GATING_FUNC.format(arch=meta.arch)!r} is "
                          f"{gating}; {family} routes by sigmoid scores ({SIGMOID_GATING})")


def grouped_moe(meta: Metadata, n_main: int, *, scoring: str, selection_bias: bool, shared_default: int,
                block: str) -> MoeDims:
    """`block` names the sparse block in the message for a file without shared experts (which mtpc builds with)."""
    def key(k: str) -> str:
        return k.format(arch=meta.arch)

    experts = meta.positive(Keys.LLM.EXPERT_COUNT)
    top_k = meta.positive(Keys.LLM.EXPERT_USED_COUNT)
    groups = int(meta.get(Keys.LLM.EXPERT_GROUP_COUNT, 1, required=False)) or 1
    kept = int(meta.get(Keys.LLM.EXPERT_GROUP_USED_COUNT, 1, required=False)) or 1
    if experts % groups or kept > groups or (groups > 1 and experts // groups < 2):
        raise SourceError(f"{meta.path}: GGUF metadata keys {key(Keys.LLM.EXPERT_GROUP_COUNT)!r} ({groups}) and "
                          f"{key(Keys.LLM.EXPERT_GROUP_USED_COUNT)!r} ({kept}) do not group {experts} experts")
    if top_k > kept * (experts // groups):
        raise SourceError(f"{meta.path}: GGUF metadata key {key(Keys.LLM.EXPERT_USED_COUNT)!r} ({top_k}) is more than "
                          f"the experts of {kept} group(s)")
    dense = int(meta.get(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, 0, required=False))
    if dense > n_main:
        raise SourceError(f"{meta.path}: GGUF metadata key {key(Keys.LLM.LEADING_DENSE_BLOCK_COUNT)!r} ({dense}) is "
                          f"more than the {n_main} trunk blocks")
    expert_size = meta.positive(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH)
    shared = int(meta.get(Keys.LLM.EXPERT_SHARED_COUNT, shared_default, required=False))
    if shared == 0:
        missing = " or missing" if shared_default == 0 else ""
        raise SourceError(f"{meta.path}: GGUF metadata key {key(Keys.LLM.EXPERT_SHARED_COUNT)!r} is 0{missing}; mtpc "
                          f"builds {block}")
    return MoeDims(
        num_experts=experts, top_k=top_k, expert_intermediate_size=expert_size,
        shared_expert_intermediate_size=expert_size * shared,
        normalize_top_k=meta.get(Keys.LLM.EXPERT_WEIGHTS_NORM, False, required=False) not in (False, 0),
        shared_expert_sigmoid_gate=False, scoring=scoring, selection_bias=selection_bias, num_groups=groups,
        top_k_groups=kept, routed_scaling_factor=_float32(meta.get(Keys.LLM.EXPERT_WEIGHTS_SCALE, 1.0, required=False)),
        dense_layers=dense,
    )
