"""onnxruntime-genai 0.17.1: the 0.18.0 profile's keys and quirks, under its own version.

Measured with the 0.17.1 wheel (`og.Config(dir)` on configs, the same probes as for 0.18.0, and
the strings of `libonnxruntime-genai.so` compared with 0.18.0's): every key of the 0.18.0 table
loads, the same sections refuse unknown keys with the same message, the open sections, root
scalars, value types and ranges (max_draft_tokens 1..16, state_update_capacity 0..8) are the
same, both know the `qwen3_5_text` / `qwen3_5_moe_text` model types (and `llama`, which GLM-4.5's
packages name: tests/test_runtime_releases.py decodes them under 0.17.1 too), `og.MtpGenerator` has the
same Python API, and the quirks below the 0.18.0 table (float16 logits for MTP on CPU, no
`shared_initializers` on CPU, the share-buffer choices, no prefix caching with a head) hold
alike. So the table is shared, not copied: tests/profiles/test_ort_genai_parser.py re-checks it
against whichever release is installed, and the test run does so against both.

What 0.18.0 added is outside the table, so no profile lists it: `NEWER_KEYS` are the genai_config
keys 0.18.0 parses and 0.17.1 refuses ("Unknown value"); mtpc emits neither. (0.18.0 also adds
the `gemma4_unified` model type, which mtpc never writes.) Older releases are not supported:
0.16.0 refuses `model.mtp.enabled` and `engine.dynamic_batching.prefix_caching`, which every
package with a head carries.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from . import ort_genai_0_18

# The multimodal pipeline was not measured on 0.17.1: a vision-language source compiles text only for it.
PROFILE = replace(ort_genai_0_18.PROFILE, version="0.17.1", vision_model_types=MappingProxyType({}))

# Section -> keys only 0.18.0's parser accepts, with a value it takes (tests/profiles load them).
NEWER_KEYS = {
    "engine.dynamic_batching": {"dflash2_max_snapshots": 2},
    "model.dflash2": {"sampled_proposal": "greedy_path"},
}
