"""The weight-store interface: how emitters read tensors without the IR holding them.

Every store speaks *canonical* names and value conventions, so graph builders
never care where a tensor came from:

- names are Hugging Face Qwen3.5 text-model names without the
  `model.language_model.` / `model.` prefix: `embed_tokens.weight`,
  `layers.3.self_attn.q_proj.weight`, `norm.weight`, `lm_head.weight`,
  `mtp.fc.weight`, `mtp.layers.0.mlp.up_proj.weight`, ...
- linear weights are `[out_features, in_features]` (nn.Linear layout);
- offset-RMSNorm weights hold the *effective* scale `1 + w` (GGUF already bakes
  this in; the HF store adds 1 in float32). The GatedDeltaNet gated norm
  `linear_attn.norm.weight` is not offset-form and is passed through;
- `linear_attn.A_log` is exposed as `linear_attn.decay_scale = -exp(A_log)`
  (what GGUF `ssm_a` stores and what LinearAttentionGate consumes);
- value heads are in *grouped* order (value head j uses key head j // (Hv/Hk)).

`lm_head.weight` is always present (a tied source returns the embedding).

A MoE layer (`Architecture.moe`) has, in place of `mlp.{gate,up,down}_proj.weight`:
`mlp.gate.weight` `[E, H]` (the router), the routed experts stacked per projection
`mlp.experts.{gate,up}_proj.weight` `[E, I, H]` and `mlp.experts.down_proj.weight` `[E, H, I]`
(each expert's slice in nn.Linear layout), the shared expert
`mlp.shared_expert.{gate,up,down}_proj.weight` and its gate `mlp.shared_expert_gate.weight` `[1, H]`
(Qwen3.5-MoE; GLM's shared expert has no gate, GLM's `shared_experts` are named `shared_expert` here).
GLM-4.5 adds `mlp.gate.e_score_correction_bias` `[E]` (the selection bias), q/k/v biases
`self_attn.{q,k,v}_proj.bias`, and has plain q_proj rows (no output gate); its RMSNorm weights are
plain scales, so its sources pass them through. Its MTP head (a trailing decoder layer in the
checkpoint) has the same canonical names as Qwen3.5's: `eh_proj` is `mtp.fc`, `enorm` / `hnorm`
are `mtp.pre_fc_norm_embedding` / `mtp.pre_fc_norm_hidden`, `shared_head.norm` is `mtp.norm` and
the decoder layer is `mtp.layers.0.*`.

Multi-head latent attention (`Architecture.mla`, the `deepseek2` family) keeps transformers' names,
`self_attn.{q_a_proj, q_a_layernorm, q_b_proj | q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
o_proj}`, with the rope channels of `q_b_proj` (per head) and `kv_a_proj_with_mqa` in half-split (NeoX)
order: a source whose rope is interleaved permutes those rows on read (`ir/mla.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol, Union

from ..ir import Architecture, LayerAttention, LayerKind, MlaDims, MoeDims, SourceTensor
from ..ir.moe import RELU2
from ..util.lazy_import import lazy_module

from .nemotron_h import mamba2_shapes, relu2_moe_shapes

# Imported when a weight is first touched: lowering and the metadata verbs use only the shapes here.
np = lazy_module("numpy")


@dataclass(frozen=True)
class QuantizedTensor:
    """A linear weight `[N, K]` already in onnxruntime MatMulNBits layout.

    `data` uint8 `[N, k_blocks, block_size * bits / 8]`; `scales` float `[N, k_blocks]`;
    `zero_points` uint8 packed `[N, ceil(k_blocks * bits / 8)]`, or float `[N, k_blocks]`
    (MatMulNBits takes those at 2 and 4 bits only; GatherBlockQuantized never), or None (the
    op's default `2**(bits-1)`). `block_offsets` float `[N, k_blocks]`, when set, is added to
    every weight of its block: neither op can, so the graph adds it (`sources/gguf/quant.py` says how).
    """

    bits: int
    block_size: int
    shape: tuple[int, int]  # (N, K)
    data: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None = None
    source_type: str = ""  # e.g. "Q4_0", for messages and `inspect`
    block_offsets: np.ndarray | None = None

    def dequantize(self) -> np.ndarray:
        """The weight onnxruntime's CPU kernels compute, float32 `[N, K]`."""
        n, k = self.shape
        q = unpack_codes(self.data, self.bits).reshape(n, -1, self.block_size).astype(np.float32)
        scales = self.scales.astype(np.float32)[..., None]
        if self.zero_points is None:
            w = (q - np.float32(2 ** (self.bits - 1))) * scales
        elif self.zero_points.dtype.kind == "f":
            # MatMulNBits' CPU kernel rounds both products, then subtracts (measured, onnxruntime 1.32 x86-64).
            w = q * scales - self.zero_points.astype(np.float32)[..., None] * scales
        else:
            zp = unpack_codes(self.zero_points, self.bits)[:, : q.shape[1]].astype(np.float32)
            w = (q - zp[..., None]) * scales
        if self.block_offsets is not None:
            w = w + self.block_offsets.astype(np.float32)[..., None]
        return w.reshape(n, -1)[:, :k]

    def rows(self, start: int, stop: int) -> "QuantizedTensor":
        """Output rows `start:stop` (views): every array of the layout is per row, so they slice alike."""
        stop = min(stop, self.shape[0])
        return QuantizedTensor(
            self.bits, self.block_size, (stop - start, self.shape[1]), self.data[start:stop],
            self.scales[start:stop], None if self.zero_points is None else self.zero_points[start:stop],
            self.source_type, None if self.block_offsets is None else self.block_offsets[start:stop],
        )


class QuantizedRows:
    """A block-quantized `[N, K]` weight made a few rows at a time (`chunk(start, stop)` is a
    `QuantizedTensor` of those rows), so re-quantizing or widening it never holds it whole in float32.

    Indexing rows (`w[a:b]`) gives their float32 dequantization, which is how `quant.quantize_linear`
    and `arrays.transposed` read a float weight: every step is per row, so the bytes are those of
    `whole().dequantize()` sliced.
    """

    ndim = 2

    @property
    def dtype(self):
        return np.dtype(np.float32)

    def __init__(self, bits: int, block_size: int, shape: tuple[int, int], chunk, source_type: str = ""):
        self.bits, self.block_size, self.shape, self.source_type = bits, block_size, tuple(shape), source_type
        self._chunk = chunk

    @classmethod
    def of(cls, q: QuantizedTensor) -> "QuantizedRows":
        return cls(q.bits, q.block_size, q.shape, q.rows, q.source_type)

    def __len__(self) -> int:
        return self.shape[0]

    def chunk(self, start: int, stop: int) -> QuantizedTensor:
        return self._chunk(start, min(stop, self.shape[0]))

    def chunks(self, rows: int):
        """Consecutive `QuantizedTensor`s of `rows` rows (the last one shorter), each converted a few
        rows at a time into its arrays (a small conversion stays in cache; any split gives the same bytes)."""
        for start in range(0, self.shape[0], rows):
            yield self.assembled(start, min(start + rows, self.shape[0]))

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError("QuantizedRows takes a slice of rows")
        start, stop, _ = rows.indices(self.shape[0])
        return self.chunk(start, max(start, stop)).dequantize()

    def whole(self) -> QuantizedTensor:
        return self.assembled(0, self.shape[0])

    def assembled(self, begin: int, end: int) -> QuantizedTensor:
        """Rows `begin:end`, each array allocated once and filled by small conversions (no parts to join)."""
        step = max(1, _CONVERT_ELEMENTS // max(1, self.shape[1]))
        if end - begin <= step:
            return self.chunk(begin, end)
        arrays: list | None = None
        for start in range(begin, end, step):
            q = self.chunk(start, min(start + step, end))
            parts = (q.data, q.scales, q.zero_points, q.block_offsets)
            if arrays is None:
                arrays = [None if a is None else np.empty((end - begin, *a.shape[1:]), a.dtype) for a in parts]
            for full, a in zip(arrays, parts):
                if a is not None:
                    full[start - begin : start - begin + a.shape[0]] = a
        assert arrays is not None
        data, scales, zero_points, block_offsets = arrays
        return QuantizedTensor(self.bits, self.block_size, (end - begin, self.shape[1]), data, scales, zero_points,
                               self.source_type, block_offsets)

    def dequantize(self) -> np.ndarray:
        return self.whole().dequantize()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        full = self.dequantize()
        return full if dtype is None else full.astype(dtype, copy=False)


# Elements converted at a time when `QuantizedRows` assembles rows: its temporaries (int16 codes,
# float32 parameters) stay within the CPU cache.
_CONVERT_ELEMENTS = 1 << 18


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """Rows of codes packed low bits first (element `per*i + j` in bits `j*bits..` of byte i)."""
    flat = packed.reshape(packed.shape[0], -1)
    if bits == 8:
        return flat
    if bits not in (2, 4):
        raise ValueError(f"unsupported bit width {bits}")
    per = 8 // bits
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    out = (flat[:, :, None] >> shifts) & np.uint8(2**bits - 1)
    return out.reshape(flat.shape[0], flat.shape[1] * per)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes `[..., L]` -> `[..., ceil(L*bits/8)]`, element `per*i + j` in bits `j*bits` of byte i."""
    if bits == 8:
        return np.ascontiguousarray(codes, dtype=np.uint8)
    per = 8 // bits
    pad = (-codes.shape[-1]) % per
    if pad:
        codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], pad), np.uint8)], axis=-1)
    grouped = codes.reshape(*codes.shape[:-1], -1, per).astype(np.uint8)
    out = np.zeros(grouped.shape[:-1], np.uint8)
    for j in range(per):
        out |= grouped[..., j] << np.uint8(j * bits)
    return out


Weight = Union["np.ndarray", QuantizedTensor]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name of the float value, or the quant type ("Q4_0")
    quantized: bool = False  # `read` returns a QuantizedTensor
    # The encoding `read` returns for a quantized tensor, known without reading it.
    bits: int | None = None
    block_size: int | None = None
    has_zero_points: bool = False
    float_zero_points: bool = False
    block_offsets: bool = False


def described_info(t: SourceTensor) -> TensorInfo:
    """A weight's `TensorInfo` as a store of its source gives it, from the source's description alone."""
    form = t.carried
    if form is None:
        return TensorInfo(t.name, t.shape, t.encoding)
    return TensorInfo(
        t.name, t.shape, t.encoding, quantized=True, bits=form.bits, block_size=form.block_size,
        has_zero_points=form.has_zero_points, float_zero_points=form.float_zero_points,
        block_offsets=form.block_offsets,
    )


class WeightStore(Protocol):
    """Lazy, read-only access to a checkpoint's tensors under canonical names."""

    def names(self) -> Iterable[str]: ...

    def info(self, name: str) -> TensorInfo: ...

    def read(self, name: str) -> Weight:
        """The tensor's value: float ndarray, or a QuantizedTensor where the source stores one."""
        ...

    def read_float(self, name: str) -> np.ndarray:
        """The tensor dequantized to float32 where needed."""
        ...

    def close(self) -> None: ...


class ArrayWeightStore:
    """A WeightStore over arrays already in memory (synthetic weights, tests)."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self._tensors = dict(tensors)

    def names(self) -> Iterable[str]:
        return sorted(self._tensors)

    def info(self, name: str) -> TensorInfo:
        t = self._tensors[name]
        return TensorInfo(name, tuple(t.shape), t.dtype.name)

    def read(self, name: str) -> Weight:
        return self._tensors[name]

    def read_float(self, name: str) -> np.ndarray:
        return np.asarray(self._tensors[name], dtype=np.float32)

    def close(self) -> None:
        pass


def canonical_shapes(arch: Architecture) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor `arch` needs, with its shape."""
    h, v, inter = arch.hidden_size, arch.vocab_size, arch.intermediate_size
    nh, kvh, hd = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (v, h), "lm_head.weight": (v, h), "norm.weight": (h,)}

    def attention(p: str, layer: LayerAttention) -> None:
        if arch.mla is not None:
            shapes.update(mla_shapes(p, h, nh, arch.mla))
            return
        nh_, kvh_, hd_, vd_ = layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim, layer.value_head_dim
        q_rows = (2 if arch.attention_output_gate else 1) * nh_ * hd_  # gated: per head [query | gate]
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (q_rows, h),
                p + "self_attn.k_proj.weight": (kvh_ * hd_, h),
                p + "self_attn.v_proj.weight": (kvh_ * vd_, h),
                p + "self_attn.o_proj.weight": (h, nh_ * vd_),
            }
        )
        if arch.attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (nh_ * hd_,), p + "self_attn.k_proj.bias": (kvh_ * hd_,),
                           p + "self_attn.v_proj.bias": (kvh_ * vd_,)})
        if arch.qk_norm:
            shapes.update({p + "self_attn.q_norm.weight": (hd_,), p + "self_attn.k_norm.weight": (hd_,)})
        if arch.attention_head_gate:
            shapes[p + "self_attn.g_proj.weight"] = (nh_, h)
        if layer.sinks:
            shapes[p + "self_attn.sinks"] = (nh_,)

    def mlp_and_norms(p: str, layer: int | None) -> None:
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)})
        ffn(p, layer)

    def ffn(p: str, layer: int | None) -> None:
        if arch.moe is not None and arch.is_sparse(layer):
            shapes.update(moe_shapes(p, h, arch.moe))
            return
        shapes.update(
            {
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )

    la = arch.linear_attention
    for i, kind in enumerate(arch.layer_kinds):
        p = f"layers.{i}."
        if kind is LayerKind.MAMBA2 and arch.mamba is not None:
            shapes.update(mamba2_shapes(p, h, arch.mamba))
        elif kind is LayerKind.FEED_FORWARD:
            ffn(p, i)
        elif kind is not LayerKind.LINEAR_ATTENTION:
            attention(p, arch.layer_attention(kind))
        elif la is not None:
            q = p + "linear_attn."
            shapes.update(
                {
                    q + "in_proj_qkv.weight": (la.conv_dim, h),
                    q + "in_proj_z.weight": (la.value_dim, h),
                    q + "in_proj_b.weight": (la.num_value_heads, h),
                    q + "in_proj_a.weight": (la.num_value_heads, h),
                    q + "conv1d.weight": (la.conv_dim, 1, la.conv_kernel),
                    q + "dt_bias": (la.num_value_heads,),
                    q + "decay_scale": (la.num_value_heads,),
                    q + "norm.weight": (la.value_head_dim,),
                    q + "out_proj.weight": (h, la.value_dim),
                }
            )
        if arch.separate_ffn_layers:  # one sub-block a layer: its mixer or its FFN, behind one norm
            shapes[p + "input_layernorm.weight"] = (h,)
        else:
            mlp_and_norms(p, i)
    for j in range(arch.mtp_num_layers):
        attention(f"mtp.layers.{j}.", arch.attention_at(None))
        mlp_and_norms(f"mtp.layers.{j}.", None)
    if arch.mtp_num_layers:
        shapes["mtp.fc.weight"] = (h, 2 * h)
        for norm in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"):
            shapes[norm] = (h,)
        if arch.mtp_own_lm_head:  # the head's own LM head as the checkpoint stores it (Step-3.5's shared_head.output)
            shapes["mtp.lm_head.weight"] = (v, h)
    return shapes


def mla_shapes(prefix: str, hidden: int, heads: int, mla: MlaDims) -> dict[str, tuple[int, ...]]:
    """The canonical tensors of one multi-head latent attention block under `prefix` (`ir/mla.py`)."""
    p = prefix + "self_attn."
    q_rows = heads * mla.qk_head_dim
    shapes: dict[str, tuple[int, ...]] = {
        p + "kv_a_proj_with_mqa.weight": (mla.kv_lora_rank + mla.qk_rope_head_dim, hidden),
        p + "kv_a_layernorm.weight": (mla.kv_lora_rank,),
        p + "kv_b_proj.weight": (heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank),
        p + "o_proj.weight": (hidden, heads * mla.v_head_dim),
    }
    if mla.q_lora_rank is None:
        shapes[p + "q_proj.weight"] = (q_rows, hidden)
    else:
        shapes.update({p + "q_a_proj.weight": (mla.q_lora_rank, hidden), p + "q_a_layernorm.weight": (mla.q_lora_rank,),
                       p + "q_b_proj.weight": (q_rows, mla.q_lora_rank)})
    return shapes


def moe_shapes(prefix: str, hidden: int, moe: MoeDims) -> dict[str, tuple[int, ...]]:
    """The canonical tensors of one sparse MoE FFN under `prefix` (a layer's, ending in ".")."""
    e, i, s = moe.num_experts, moe.expert_intermediate_size, moe.shared_expert_intermediate_size
    p = prefix + "mlp."
    if moe.expert_activation == RELU2:
        return relu2_moe_shapes(p, hidden, moe)
    shapes = {
        p + "gate.weight": (e, hidden),
        p + "experts.gate_proj.weight": (e, i, hidden),
        p + "experts.up_proj.weight": (e, i, hidden),
        p + "experts.down_proj.weight": (e, hidden, i),
        p + "shared_expert.gate_proj.weight": (s, hidden),
        p + "shared_expert.up_proj.weight": (s, hidden),
        p + "shared_expert.down_proj.weight": (hidden, s),
    }
    if moe.selection_bias:
        shapes[p + "gate.e_score_correction_bias"] = (e,)
    if moe.shared_expert_sigmoid_gate:
        shapes[p + "shared_expert_gate.weight"] = (1, hidden)
    return shapes

