"""Which form of MLA attention decodes fastest on CPU: one token against a prefilled cache of 1k / 4k tokens.

    python bench/mla_forms.py [--contexts 1024,4096] [--threads 1,2] [--runs 30] [--layers 2] [--out DIR]

A GLM-4.7-Flash-shaped mid-size checkpoint (hidden 2048, 20 heads, q LoRA 768, kv LoRA 512, per head nope 192
+ rope 64, v 256; `--layers` layers, the first dense and small, the rest 4 small experts; vocabulary 256),
seeded random weights through tests/fixtures/deepseek2_checkpoints.py, compiled twice by mtpc for the CPU
target, float32:

- `gqa`: the absorbed form in com.microsoft GroupQueryAttention (num_heads 20, kv_num_heads 1, head 576);
- `plain`: the absorbed form in basic ops, heads folded into GEMM rows (`graphs/latent_attention.py`).

Both keep onnxruntime-genai's dense cache contract ([B, 1, T, 576] past/present key and value). The main
graph runs in onnxruntime directly (what onnxruntime-genai calls each step, without its bookkeeping), fed one
token, a cache of T random latents and a mask of T + 1 ones; the forms alternate run by run so a neighbour's
load hits both alike, and the median of `--runs` steps is kept.

The decompressed form (per-head K/V cache, head size max(qk_head_dim, v_head_dim) = 256, 20 KV heads) has no
graph in mtpc (it would need its own builder and cache contract); its attention is timed alone, a
GroupQueryAttention node with 20 KV heads of 256 over the same T, beside the absorbed forms' attention alone
(`attention only` rows: the same node / ops cut out of the graphs), so the three compare on the part that
differs. The projections around it differ little per decoded token (decompressing one token's keys costs
about as many MACs as absorbing its queries).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median
from unittest import mock

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.mla_micro import attention_only, decompressed_attention  # noqa: E402

HEADS, NOPE, ROPE, V, KV_LORA, Q_LORA, HIDDEN = 20, 192, 64, 256, 512, 768, 2048
LATENT = ROPE + KV_LORA


def mid_arch(layers: int):
    from mtpc.ir import LayerKind, MlaDims
    from tests.fixtures.deepseek2_checkpoints import tiny_mla_arch

    base = tiny_mla_arch()
    mla = MlaDims(kv_lora_rank=KV_LORA, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V,
                  softmax_scale=(NOPE + ROPE) ** -0.5, q_lora_rank=Q_LORA, source_rope_interleaved=True)
    moe = replace(base.moe, num_experts=4, top_k=2, num_groups=1, top_k_groups=1, expert_intermediate_size=256,
                  shared_expert_intermediate_size=256, dense_layers=1)
    return replace(base, hidden_size=HIDDEN, intermediate_size=1024, num_attention_heads=HEADS, head_dim=LATENT,
                   layer_kinds=(LayerKind.FULL_ATTENTION,) * layers, moe=moe, mla=mla, context_length=8192)


def compile_forms(folder: Path, layers: int) -> dict[str, Path]:
    """The two absorbed packages: `gqa` and `plain` (the CPU kernel table patched to each choice)."""
    from mtpc.profiles import kernels
    from tests.fixtures.deepseek2_checkpoints import raw_mla_tensors, write_mla_checkpoint
    from tests.runtime.conftest import compile_spec, write_spec

    arch = mid_arch(layers)
    write_mla_checkpoint(folder / "release", arch, tensors=raw_mla_tensors(arch, 0))
    out = {}
    for form, gqa in (("gqa", True), ("plain", False)):
        chosen = replace(kernels.fused_kernels("cpu"), mla_group_query_attention=gqa)
        with mock.patch("mtpc.emit.onnx_graphs.fused_kernels", lambda *a, **k: chosen):
            spec = write_spec(folder / f"{form}.yaml", f"mla-{form}", "{hf: release}", "mtp: {head: off}\n")
            out[form] = compile_spec(spec, folder / form)
    return out


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def decode_feeds(sess, context: int, seed: int = 0) -> dict:
    """One new token after `context` cached latents (random: the values do not change the work)."""
    gen = np.random.default_rng(seed)
    feeds = {"input_ids": np.asarray([[7]], np.int64), "attention_mask": np.ones((1, context + 1), np.int64),
             "position_ids": np.asarray([[context]], np.int64)}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            feeds[i.name] = gen.standard_normal((1, 1, context, LATENT)).astype(np.float32)
    return feeds


def time_alternating(runners: dict, runs: int) -> dict[str, float]:
    """Median seconds per call of each runner, the runners interleaved call by call."""
    for run in runners.values():
        run()  # warm-up: allocations, the first FusedMatMul packing
    times = {name: [] for name in runners}
    for _ in range(runs):
        for name, run in runners.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: median(t) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="keep the packages here (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        packages = compile_forms(folder, args.layers)
        cached = {"gqa": 2 * LATENT * 4, "plain": 2 * LATENT * 4, "decompressed": HEADS * 2 * max(NOPE + ROPE, V) * 4}
        print(f"{args.layers} layers, float32; cache bytes per token per layer: gqa {cached['gqa']}, "
              f"plain {cached['plain']}, decompressed {cached['decompressed']}")
        print(f"{'threads':>7} {'context':>7} {'what':<16} {'gqa tok/s':>10} {'plain tok/s':>11} {'plain/gqa':>9}"
              f" {'decomp tok/s':>12} {'decomp/gqa':>10}")
        for threads in (int(t) for t in args.threads.split(",")):
            sessions = {form: session(packages[form] / "model.onnx", threads) for form in packages}
            for context in (int(c) for c in args.contexts.split(",")):
                feeds = {form: decode_feeds(s, context) for form, s in sessions.items()}
                step = time_alternating({form: (lambda s=s, f=feeds[form]: s.run(None, f))
                                         for form, s in sessions.items()}, args.runs)
                _row(threads, context, "decode step", step)
                alone = {form: attention_only(form, context, threads, HEADS, LATENT) for form in packages}
                alone["decompressed"] = decompressed_attention(context, threads, HEADS, max(NOPE + ROPE, V))
                _row(threads, context, "attention only", time_alternating(alone, args.runs))
    return 0


def _row(threads: int, context: int, what: str, seconds: dict[str, float]) -> None:
    g, p = 1 / seconds["gqa"], 1 / seconds["plain"]
    d = f"{1 / seconds['decompressed']:12.1f} {seconds['gqa'] / seconds['decompressed']:9.2f}x" \
        if "decompressed" in seconds else f"{'-':>12} {'-':>10}"
    print(f"{threads:>7} {context:>7} {what:<16} {g:10.1f} {p:11.1f} {p / g:8.2f}x {d}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
