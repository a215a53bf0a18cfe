"""Qwen3-Next GGUFs (llama.cpp's `qwen3next`, conversion/qwen.py `Qwen3NextModel`): where its tensors are.

Qwen3.5-MoE's blocks and keys (`metadata.architecture` reads them), except that the converter splits
`in_proj_qkvz` into `attn_qkv` ([q_all | k_all | v_all]) and `attn_gate` but leaves the value heads grouped
(it is not `_LinearAttentionVReorderBase`), stores `in_proj_ba` fused as `ssm_ba`, and writes no RoPE
sections (one position per token).
"""

from __future__ import annotations

from dataclasses import replace

from .names import QWEN35, QWEN35MOE, Rule, Transform

NAMES = replace(
    QWEN35MOE,
    family="qwen3next",
    linear_attention=tuple(r for r in QWEN35.linear_attention if r.gguf not in ("ssm_beta.weight", "ssm_alpha.weight"))
    + (
        Rule("ssm_ba.weight", "linear_attn.in_proj_b.weight", ("HV2", "H"), Transform.BETA_ROWS),
        Rule("ssm_ba.weight", "linear_attn.in_proj_a.weight", ("HV2", "H"), Transform.ALPHA_ROWS),
    ),
    tiled_value_heads=False,
    position_rows=False,
)
