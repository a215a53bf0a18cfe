"""YaRN RoPE in a Hugging Face config (DeepSeek-V3's `rope_scaling` / `rope_parameters`, type `yarn`).

Read as transformers reads it: `modeling_rope_utils._compute_yarn_parameters` for the frequencies and the
cos/sin factor, `standardize_rope_params` for the defaults, and DeepSeek-V3's `yarn_apply_mscale` for the
softmax scale. The two factors come from different keys, a trap:

- cos and sin are multiplied by `attention_factor` when given, else by
  `mscale(factor, mscale) / mscale(factor, mscale_all_dim)` when both keys are set (non-zero), else by
  `mscale(factor)`, where `mscale(s, m) = 0.1 m ln(s) + 1` (1 for s <= 1);
- the softmax scale `qk_head_dim ** -0.5` is multiplied by `mscale(factor, mscale_all_dim) ** 2` when
  `mscale_all_dim` is set (non-zero), by nothing otherwise.

DeepSeek-V3 (factor 40, mscale = mscale_all_dim = 1): cos/sin x 1, softmax x 1.3689^2.
"""

from __future__ import annotations

import math

from ...ir import YarnScaling
from .config import Config

DEFAULT_BETA_FAST = 32.0
DEFAULT_BETA_SLOW = 1.0


def mscale(scale: float, m: float = 1.0) -> float:
    """YaRN's magnitude correction for a context stretched `scale` times (transformers' `get_mscale`)."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def read_yarn(cfg: Config, where: str, params: dict) -> tuple[YarnScaling, float]:
    """(the scaling, what the softmax scale is multiplied by) from the rope object at field `where`."""

    def number(key: str, default: float | None = None) -> float | None:
        value = params.get(key)
        return default if value is None else cfg.float(f"{where}.{key}", value)

    field, top_original = cfg.lookup("original_max_position_embeddings")
    if top_original is not None:  # transformers gives a top-level value priority (Phi-3 stores it there)
        original = top_original
    else:
        field = f"{where}.original_max_position_embeddings"
        original = params.get("original_max_position_embeddings", cfg.lookup("max_position_embeddings")[1])
    if isinstance(original, bool) or not isinstance(original, int) or original <= 0:
        raise cfg.fail(field, f"must be a positive integer, not {original!r}")
    factor = number("factor")
    if factor is None:  # transformers' rope validation requires it too
        raise cfg.fail(f"{where}.factor", "is missing (required for yarn)")
    if factor <= 0:
        raise cfg.fail(f"{where}.factor", f"must be positive, not {factor!r}")
    m, m_all = number("mscale"), number("mscale_all_dim")
    attention_factor = number("attention_factor")
    if attention_factor is None:
        attention_factor = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    # transformers reads `beta_fast or 32`: a 0 means the default too.
    beta_fast, beta_slow = number("beta_fast") or DEFAULT_BETA_FAST, number("beta_slow") or DEFAULT_BETA_SLOW
    truncate = params.get("truncate", True)
    if not isinstance(truncate, bool):
        raise cfg.fail(f"{where}.truncate", f"must be true or false, not {truncate!r}")
    softmax = mscale(factor, m_all) ** 2 if m_all else 1.0
    yarn = YarnScaling(factor=factor, original_max_position_embeddings=original, beta_fast=beta_fast,
                       beta_slow=beta_slow, attention_factor=attention_factor, truncate=truncate)
    return yarn, softmax
