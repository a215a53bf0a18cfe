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

from ..ir import SourceTensor
from ..util.lazy_import import lazy_module

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
