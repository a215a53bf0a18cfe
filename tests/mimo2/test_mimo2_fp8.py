"""A MiMo-V2-Flash release in FP8 blocks, dequantized on read (`sources/hf/fp8.py`, DeepSeek-V3's reader).

MiMo-V2-Flash stores its projections `float8_e4m3fn` with `weight_scale_inv` block scales, q/k/v apart (vLLM's
`mimo_v2_mtp.py`: "Flash: separate q_proj, k_proj, v_proj"; the fused, tensor-parallel-sharded `qkv_proj` that
llama.cpp's `_tp_aware_qkv_dequant` handles is MiMo-V2.5's and V2.5-Pro's). The tiny release rewritten with every
projection but the fitted `eh_proj` in 16 x 16 blocks (the 24-row k and v projections end in partial blocks):
onnxruntime-genai decodes as transformers does on the weights the release means, and drafts as greedy decodes."""

from __future__ import annotations

from tests.clients import hf_transformers
from tests.fixtures.fp8_blocks import write_fp8_checkpoint
from tests.fixtures.mimo2_checkpoints import PROMPTS, fitted_mimo_tensors, load_transformers_mimo, write_mimo_checkpoint
from tests.runtime import decoding
from tests.runtime.conftest import STEPS

from .conftest import compile_mimo

BLOCK = (16, 16)


def test_an_fp8_release_decodes_as_transformers_on_the_weights_it_means(mimo_dir, arch):
    folder = write_mimo_checkpoint(mimo_dir / "fp8", arch)
    chosen = lambda name, value: value.ndim == 2 and name.endswith("_proj.weight") and "eh_proj" not in name  # noqa: E731
    meant = write_fp8_checkpoint(folder, fitted_mimo_tensors(arch), BLOCK, chosen)
    package = compile_mimo(mimo_dir, "fp8", source="fp8")
    main, head = decoding.load(package), decoding.load(package / "mtp")
    prompt = list(PROMPTS[0])
    expected = hf_transformers.greedy(load_transformers_mimo(arch, meant), prompt, STEPS)
    assert decoding.greedy(main, prompt, STEPS) == expected
    run = decoding.speculative(main, head, prompt, STEPS, 2)
    assert run.tokens == expected and 0 < run.accepted < run.proposed

