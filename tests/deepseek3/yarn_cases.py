"""YaRN rope objects the tests read both ways: through mtpc and through transformers' own functions.

Each case is (rope_parameters, max_position_embeddings, qk_rope_head_dim). DeepSeek-V3's release first;
then a non-1 `mscale` / `mscale_all_dim` pair (cos/sin and softmax factors both differ from 1), YaRN
without mscale keys (cos/sin x `0.1 ln(factor) + 1`, softmax unscaled), `truncate: false` and an explicit
`attention_factor`.
"""

from __future__ import annotations

from transformers import DeepseekV3Config

CASES = {
    "deepseek_v3": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}, 163840, 64),
    "mscale_pair": ({"rope_type": "yarn", "rope_theta": 50000.0, "factor": 16.0, "original_max_position_embeddings": 2048,
                     "beta_fast": 24, "beta_slow": 2, "mscale": 0.9, "mscale_all_dim": 0.6}, 32768, 16),
    "no_mscale": ({"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 8192},
                  32768, 32),
    "untruncated": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 1024,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0, "truncate": False}, 8192, 16),
    "attention_factor": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "attention_factor": 0.8,
                          "original_max_position_embeddings": 512}, 4096, 16),
}


def transformers_config(name: str) -> DeepseekV3Config:
    params, context, rope_dim = CASES[name]
    return DeepseekV3Config(hidden_size=64, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16,
                            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=rope_dim, v_head_dim=8,
                            max_position_embeddings=context, rope_parameters=dict(params))


def config_json(name: str) -> dict:
    """The same as a config.json would state it (rope_scaling, as DeepSeek-V3's release does)."""
    params, context, rope_dim = CASES[name]
    params = dict(params)
    theta = params.pop("rope_theta")
    params["type"] = params.pop("rope_type")
    return {"architectures": ["DeepseekV3ForCausalLM"], "max_position_embeddings": context, "rope_theta": theta,
            "qk_rope_head_dim": rope_dim, "rope_scaling": params}
