"""Which fused onnxruntime kernels the graphs use, per execution provider, and why.

A fusion replaces a spelled-out sequence of basic ops by one kernel computing the
same function; each is listed for a provider only where its kernel was run there
against a numpy reference (../shared/reference/onnxruntime-ops.md and the tests in
tests/graphs, which build the fused graphs and hold them to the same bounds as
before). A provider not listed gets no fusion: the basic-op graph runs anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class FusedKernels:
    # Residual Add + RMSNorm -> com.microsoft SkipSimplifiedLayerNormalization (its 4th output is the
    # sum, which carries the residual stream on). The sum is exact (an Add), the norm within 1e-6
    # of RMSNormalization-23. A norm with nothing to add (q/k norms, the first layer's, the gated
    # norm) stays RMSNormalization-23: ai.onnx-domain SimplifiedLayerNormalization has no ONNX schema
    # and fails onnx.checker's full check (DESIGN.md 6b).
    skip_norm: bool = False
    # The NeoX half-split rotation of the first rotary_dim channels -> ai.onnx-23 RotaryEmbedding
    # fed per-token cos/sin `[B, S, rotary_dim/2]` (its 3-D cache form, no position_ids). The graph
    # still computes cos/sin itself from the three MRoPE position rows, so partial interleaved MRoPE
    # is expressed exactly; GroupQueryAttention's do_rotary and com.microsoft RotaryEmbedding index
    # one position per token and cannot. Dense `[B, S, X]` activations only (the op wants 3-D).
    rotary: bool = False
    # x * sigmoid(x) -> com.microsoft QuickGelu with alpha 1.0 (bit-identical to Sigmoid + Mul on CPU).
    silu: bool = False
    # Projections reading the same activations with the same stored form (q/k/v, gate/up, the linear
    # attention's qkv/z/b/a) -> one MatMul / MatMulNBits over the weights concatenated along N, then a
    # Split. Each output column is the same dot product as before; one kernel call instead of 2-4.
    packed_projections: bool = False
    # GatedDeltaNet's q/k L2 norm x / sqrt(sum(x^2) + eps) (ReduceSumSquare, Add, Sqrt, Div) -> one
    # RMSNormalization-23 with epsilon eps/d and scale 1/sqrt(d), the same function (3.6e-8 from a
    # float64 reference where the spelled-out form gives 7.7e-8). Float32 graphs only: 1/sqrt(d) in
    # a float16 scale is off by up to 2^-11 for d = 128.
    l2_norm: bool = False
    # decay = decay_scale * softplus(a + dt_bias), beta = sigmoid(b) (Add, Softplus, Mul, Sigmoid) ->
    # one com.microsoft LinearAttentionGate, float32 inside as the spelled-out chain is. Its outputs
    # take a's dtype, and the recurrence ops are handed float32 gates, so the graph feeds it float32 a
    # and b (the casts it had already).
    linear_gate: bool = False
    # A windowed state (`state_window`) as CausalConvWithState's and LinearAttention's own `state_window`
    # attribute, as the 0.18.0 builder emits it (`builders/base.py`): the kernels write the W per-token states
    # themselves. onnxruntime 1.32 implements it in its CUDA kernels only (the CPU ones refuse it); elsewhere
    # the graph builds the window from ops every provider runs (`graphs/state_window.py`).
    state_window: bool = False
    # MLA's absorbed attention (one latent_dim-wide KV head shared by every query head, `graphs/deepseek2.py`)
    # in com.microsoft GroupQueryAttention, as other families' attention runs. Off: the same attention in
    # basic ops with the heads folded into GEMM rows (`graphs/latent_attention.py`), dense graphs only (paged
    # ones run PagedAttention either way). Measurements and the choice: _BY_PROVIDER below.
    mla_group_query_attention: bool = False
    # A sliding-window layer (`ir.LayerAttention.window`) in GroupQueryAttention's `local_window_size`. Off: dense
    # graphs score only the last W + S - 1 cached tokens in plain ops (`graphs/attention.py`). Measured below.
    window_group_query_attention: bool = False


NO_FUSION = FusedKernels()

# Measured (decode in onnxruntime-genai 0.18.0, 512-wide 8-layer Qwen3.5 package, 1 thread, tokens per
# CPU-second, fused / basic ops, interleaved runs on the shared 2-core machine, noise about +-5%):
# everything on: float32 1.01x, int4 (accuracy_level 4) 1.11-1.36x; alone, each within the noise but
# the L2 norm (1.08x int4). Main graph nodes of the 16-layer shape the issue measured: 721 -> 444
# (the 0.18.0 builder: 449). onnxruntime's own optimizer already turns x * sigmoid(x) into QuickGelu,
# so that one only shrinks the file; it does not fuse Add + RMSNormalization-23.
#
# Re-measured against the 0.18.0 builder's graphs of the same 156M checkpoint (bench/vs_builder.py
# --size medium: 6 layers, 5 of them GatedDeltaNet), 1 thread, onnxruntime's profiler, per-node medians
# over 127 decode steps: the kernels add up to 7.1 ms (mtpc int4) vs 7.3 ms (builder int4) and 23.3 vs
# 23.3 ms (fp32); MatMulNBits / MatMul are 74 % (int4) and 92 % (fp32) of it, and the LM head alone
# 1.6 ms (int4) and 6.4 ms (fp32), the same kernel and stored form as the builder's. One session.run of a
# decode step, CPU time, interleaved, 300 runs: mtpc / builder 0.93-1.02 (int4). What is left outside
# the matmuls is the recurrence (LinearAttention, ~60 us a layer: it reads and writes the 512 KiB
# state), the causal conv and the norms; a node costs onnxruntime 0.3-1 us without the profiler
# (a chain of 41 Reshape / Sigmoid / Split+Concat on [1, 1, 1024]: +14 / +26 / +41 us), so the 15 nodes
# mtpc has beyond the builder's (Reshape and Split around packed projections) cost ~10 us a step.
# Not used, measured: com.microsoft GatedRMSNorm (the builder's rms_norm(o) * w * silu(z) in one
# kernel; its groups are len(w) wide, 1.3e-6 from float64) took 33 us a call in the builder's profile,
# as long as the RMSNormalization + QuickGelu + Mul it would replace here (~20-25 us together).
# Packing gate/up is a wash at decode (one 292 us MatMulNBits + Split vs the builder's 156 + 145 us),
# and pays in prefill, where one kernel call reads the activations once.

# MLA on CPU (deepseek2, dense graphs): GroupQueryAttention off. Its CPU kernel runs the 20 query heads over the
# one 576-wide latent head one by one, a matrix-vector product per head that reads the whole cache each time;
# the plain-op form folds the heads into the rows of one MatMul (onnxruntime fuses its Transpose: FusedMatMul,
# transB) and reads the cache once. bench/mla_forms.py, GLM-4.7-Flash-shaped 2 layers (hidden 2048, 20 heads,
# q LoRA 768, kv LoRA 512, nope 192 + rope 64, v 256), float32, onnxruntime 1.32, one decoded token after a
# prefilled cache, medians of 31 interleaved steps on the shared 2-core machine: plain / GQA decode tok/s
# 1.22x at 1k and 1.90x at 4k (24.3 vs 12.8 tok/s), 1 thread; 1.22x / 1.43x with 2; the attention alone 2.1-3.5x.
# Same cache contract and bytes ([B, 1, T, 576] key and value). The decompressed per-head form (20 KV heads of
# 256) is slower still: its attention alone 0.23-0.37x GQA's, with a cache 8.9x larger. CUDA keeps GQA (its
# kernels batch heads; not measurable here); paged graphs run PagedAttention whatever this says.
# Sliding layers on CPU (dense graphs): GroupQueryAttention off. Its CPU kernel scores every cached token and masks
# the window afterwards, so a decode step costs as much as full attention (and more with a head_sink: 1.3-2x);
# the plain-op form slices the last W + S - 1 tokens and scores those alone. bench/sliding_attention.py, Step-3.5-
# Flash's sliding layer (96 heads, 8 KV heads of 128, window 512), float32, one decoded token over T cached tokens:
# plain / GQA numbers in bench/README.md. Paged graphs run PagedAttention whatever this says; CUDA keeps GQA.
_BY_PROVIDER = {
    # Every kernel above has a CPU implementation in float32 and float16 (verified, onnxruntime 1.32).
    "cpu": FusedKernels(skip_norm=True, rotary=True, silu=True, packed_projections=True, l2_norm=True,
                        linear_gate=True, mla_group_query_attention=False),
    # The CUDA graphs cannot run here, so only what is known to run there: SkipSimplifiedLayerNormalization
    # is what the 0.18.0 builder's CUDA exports use; QuickGelu has CUDA kernels; packing and the L2 norm
    # are a MatMul / RMSNormalization-23 like the graphs' others. RotaryEmbedding-23 on CUDA (and on the
    # packed [N, X] layout of paged graphs) and LinearAttentionGate next to paged GatedDeltaNet were not
    # run, so those stay spelled out.
    # The fused state window is the builder's CUDA form; tests/lowering/ hold it to the numpy reference on CPU.
    "cuda": FusedKernels(skip_norm=True, rotary=False, silu=True, packed_projections=True, l2_norm=True,
                         state_window=True, mla_group_query_attention=True, window_group_query_attention=True),
}


# onnxruntime's CPU provider runs a float16 graph mostly in float32: it casts around the ops it has no
# float16 kernel for (MatMul, CausalConvWithState, ...) and removes the casts that then cancel, so many
# intermediates are never rounded to float16. SkipSimplifiedLayerNormalization, RotaryEmbedding and the
# Split after a packed MatMul have float16 kernels and force that rounding at their boundaries: on the
# fitted tiny model's float16 package the logits' max error against the numpy reference went from
# 0.0080 (basic ops) to 0.0158, and MTP decoding parted from greedy on a near tie. QuickGelu and
# LinearAttentionGate (fed float32 gates) left the error at 0.0080, so they stay.
_CPU_FLOAT16_OFF = {"skip_norm": False, "rotary": False, "packed_projections": False}


def fused_kernels(execution_provider: str, *, packed_tokens: bool = False, io_dtype: str = "float32"
                  ) -> FusedKernels:
    """The fusions for graphs run on `execution_provider` with `io_dtype` activations; `packed_tokens`
    for `[N, X]` (paged) graphs."""
    kernels = _BY_PROVIDER.get(execution_provider, NO_FUSION)
    if packed_tokens:
        kernels = replace(kernels, rotary=False)
    if execution_provider == "cpu" and io_dtype == "float16":
        kernels = replace(kernels, **_CPU_FLOAT16_OFF)
    return kernels
