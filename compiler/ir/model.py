"""The typed intermediate representation every pass and emitter works on.

Everything here is a frozen dataclass: passes return new values with
`dataclasses.replace`, so a pipeline can show what each pass changed. Only
`mtpc.spec.lower` builds these from raw dicts; nothing downstream reads the spec.

Weights never live in the IR: the IR names tensors, a `WeightStore`
(`mtpc.weights`) reads them lazily.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Iterator

# How weights are stored lives in its own module; the IR's users import it from here.
from .weights import (  # noqa: F401
    QuantForm,
    QuantizationPlan,
    QuantOverride,
    QuantScheme,
    SourceTensor,
    WeightDecision,
    WeightRole,
)
from .moe import MoeDims, SwigluLimits  # noqa: F401  (the sparse FFN of MoE families, Step's SwiGLU clamps)
from .mla import MlaDims  # noqa: F401  (multi-head latent attention, the deepseek2 family)
from .rope import Rope, YarnScaling  # noqa: F401  (rotary embeddings, a layer kind's own among them)
from .attention import LayerAttention  # noqa: F401  (a layer kind's own heads, rope, window, sinks)
from .mamba import Mamba2Dims  # noqa: F401  (Mamba2 layers, the nemotron_h family)
from .linear_attention import LinearAttentionDims  # noqa: F401  (Gated DeltaNet layers)
from .enums import AttentionMode, LayerKind  # noqa: F401
from .fields import added
# The graphs' I/O and the decoders as runtimes see them live in their own module; re-exported here.
from .runtime import (  # noqa: F401
    DecoderConfig,
    Dim,
    GraphContract,
    SharedInitializer,
    SlidingWindow,
    StateGroup,
    TensorSpec,
)
from .mtp import DraftVocabulary, HeadPolicy, MtpSettings, SeedHidden  # noqa: F401  (the MTP head's settings)
from .vision import VisionModel, VisionPipeline  # noqa: F401  (a vision-language checkpoint's tower)


def hybrid_layer_kinds(num_layers: int, full_attention_interval: int) -> tuple[LayerKind, ...]:
    """Qwen3.5's layout: layer i is full attention iff (i + 1) % interval == 0, else linear attention."""
    return tuple(
        LayerKind.FULL_ATTENTION if (i + 1) % full_attention_interval == 0 else LayerKind.LINEAR_ATTENTION
        for i in range(num_layers)
    )


class HeadContract(str, enum.Enum):
    """The head graph's I/O contract, which differs per consuming runtime."""

    # input_ids + hidden_states -> logits + hidden_states_out; embedding and LM head inside.
    ORT_GENAI = "onnxruntime_genai"
    # inputs_embeds + hidden_states -> mtp_hidden; the runtime embeds and applies the LM head.
    ONNX_GENAI = "onnx_genai"


# ----------------------------------------------------------------------------- architecture


@dataclass(frozen=True)
class TokenIds:
    bos: int
    eos: tuple[int, ...]
    pad: int


class HeadLayout(str, enum.Enum):
    """Where a checkpoint keeps its MTP head (the graphs are the same either way; sources and reports differ)."""

    # Qwen3.5: `mtp.*` tensors beside the trunk (`mtp.fc`, `mtp.pre_fc_norm_*`, `mtp.layers.0.*`, `mtp.norm`).
    MTP_MODULE = "mtp_module"
    # DeepSeek-V3 / GLM-4.5: one more decoder layer after the trunk, `model.layers.{num_hidden_layers}.*`,
    # holding `eh_proj`, `enorm`, `hnorm`, `shared_head.norm` beside an ordinary decoder layer.
    TRAILING_LAYER = "trailing_layer"
    # Nemotron-H: `mtp.layers.0` (enorm, hnorm, eh_proj, an attention sub-block) and `mtp.layers.1` (a MoE sub-block,
    # final_layernorm), in order the canonical head block's two halves.
    SUB_BLOCKS = "sub_blocks"


@dataclass(frozen=True)
class UnusableHead:
    """An MTP head the source declares but mtpc cannot build, and why (`passes/head_detection.py` decides)."""

    reason: str
    # True when the weights are simply not there (transformers drops `mtp.*` when it re-saves a
    # model): `head: auto` builds text only, with a note. False when the head is broken (half
    # present, more than one block, unknown tensors): refused unless `head: off`.
    absent: bool


@dataclass(frozen=True)
class Architecture:
    """What the source checkpoint is, independent of how we build it."""

    family: str  # "qwen35" | "qwen35moe" | "glm4moe" | "qwen3next" | "deepseek2" | "nemotron_h"
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    layer_kinds: tuple[LayerKind, ...]
    rms_norm_eps: float
    rope: Rope
    context_length: int
    tokens: TokenIds
    linear_attention: LinearAttentionDims | None = None
    sliding_window: int | None = None
    tie_word_embeddings: bool = False
    # The sparse FFN that replaces every layer's MLP (the MTP block's too); None for dense models.
    moe: MoeDims | None = None
    # Number of usable MTP blocks the source ships (0 = none).
    mtp_num_layers: int = 0
    # Set when the source declares a head that cannot be built (then mtp_num_layers is 0).
    unusable_head: UnusableHead | None = None
    head_layout: HeadLayout = added(HeadLayout.MTP_MODULE)
    # Qwen3.5's gated attention: q_proj's rows are per head [query | output gate].
    attention_output_gate: bool = added(True)
    # q/k/v projections with a bias (GLM's `attention_bias`).
    attention_bias: bool = added(False)
    # A per-head RMSNorm of q and k before the rotation (Qwen3.5 always; GLM's `use_qk_norm`).
    qk_norm: bool = added(True)
    # A sigmoid gate per query head on the attention's output, from its own projection `self_attn.g_proj`
    # `[heads, hidden]` (Step-3.5's `use_head_wise_attn_gate`).
    attention_head_gate: bool = added(False)
    # Multi-head latent attention (`ir/mla.py`); then num_key_value_heads is 1 and head_dim the cached latent's width.
    mla: MlaDims | None = added(None)
    # How SLIDING_ATTENTION layers attend (`ir/attention.py`): their own heads, rope, window (equal to
    # `sliding_window`) and sinks; None: as the full layers, within `sliding_window`. The fields above are the
    # full-attention layers'.
    sliding_attention: LayerAttention | None = added(None)
    # Full-attention layers' value head width where it is not head_dim (MiMo-V2-Flash: 128 beside q/k 192).
    value_head_dim: int | None = added(None)
    # The kind of the MTP block's attention layer (Step's and MiMo's MTP layers slide).
    mtp_layer_kind: LayerKind = added(LayerKind.FULL_ATTENTION)
    # MTP layers the checkpoint chains (Step-3.5: 3, layer k drafting token k from layer k-1's output); 0: as many
    # as `mtp_num_layers`. The package builds the first: onnxruntime-genai runs one head graph, N times.
    mtp_chained_layers: int = added(0)
    # The MTP head scores with its own LM head (Step-3.5's `shared_head.output`), `mtp.lm_head.weight` as stored.
    mtp_own_lm_head: bool = added(False)
    # The hidden state the checkpoint's authors seed its head with, and the spec's default (`mtp.seed_hidden`).
    mtp_seed_hidden: SeedHidden = added(SeedHidden.POST_NORM)
    # Per-layer clamps of the SwiGLU (Step-3.5); None: no layer is clamped.
    swiglu_limits: SwigluLimits | None = added(None)
    # The sizes of the Mamba2 layers (`LayerKind.MAMBA2`, `ir/mamba.py`).
    mamba: Mamba2Dims | None = added(None)
    # Every layer is one residual sub-block: a token mixer, or the FFN alone (`LayerKind.FEED_FORWARD`), as
    # Nemotron-H's are. False: every layer is a mixer then an FFN, each behind its own norm.
    separate_ffn_layers: bool = added(False)
    attention_value_scale: float = added(1.0)  # values times it before the attention (MiMo-V2-Flash)
    # The vision tower of a vision-language checkpoint (`ir/vision.py`); None: text only.
    vision: VisionModel | None = added(None)

    def __post_init__(self):
        sliding = self.sliding_attention
        if sliding is not None and sliding.window != self.sliding_window:
            raise ValueError(f"sliding_window {self.sliding_window} and the sliding layers' window {sliding.window} differ")

    def layer_attention(self, kind: LayerKind) -> LayerAttention:
        """How a layer of `kind` attends (`ir/attention.py`; the MTP block's: `mtp_layer_kind`), cache heads included."""
        sliding, layer = kind is LayerKind.SLIDING_ATTENTION, self.sliding_attention
        if not sliding or layer is None:  # a sliding layer here attends as the full layers do, within the window
            if sliding and self.sliding_window is None:
                raise AssertionError(f"{self.family}: a sliding-window layer without a sliding_window")
            layer = LayerAttention(self.num_attention_heads, self.num_key_value_heads, self.head_dim, self.value_head_dim
                                   or self.head_dim, self.rope, window=self.sliding_window if sliding else None)
        # Every layer's cache holds the most KV heads any layer has (`LayerAttention.cached_kv_heads`).
        heads = max(self.num_key_value_heads, self.sliding_attention.num_key_value_heads if self.sliding_attention else 0)
        return replace(layer, cached_kv_heads=heads) if heads != layer.num_key_value_heads else layer

    def attention_at(self, layer: int | None) -> LayerAttention:
        """Trunk layer `layer`'s attention, or the MTP block's (None)."""
        return self.layer_attention(self.mtp_layer_kind if layer is None else self.layer_kinds[layer])

    @property
    def softmax_scale(self) -> float:
        """The attention's score scale: head_dim ** -0.5, or MLA's own (its cached width is not its q.k width)."""
        return self.mla.softmax_scale if self.mla is not None else self.head_dim**-0.5

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def has_mtp_head(self) -> bool:
        return self.mtp_num_layers > 0

    def is_sparse(self, layer: int | None) -> bool:
        """Whether trunk layer `layer` (None: the MTP block, `moe.sparse_mtp`) has the sparse FFN."""
        if self.moe is None:
            return False
        return self.moe.sparse_mtp if layer is None else layer >= self.moe.dense_layers

    def swiglu_limit(self, layer: int | None) -> tuple[float, float]:
        """(routed experts', shared expert's or dense MLP's) SwiGLU clamp of trunk layer `layer` (None: the MTP
        block); 0 = unclamped."""
        if self.swiglu_limits is None:
            return 0.0, 0.0
        return self.swiglu_limits.of(self.num_layers if layer is None else layer)

    def layers_of(self, kind: LayerKind) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.layer_kinds) if k is kind)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Layers that keep a KV cache."""
        return tuple(i for i, k in enumerate(self.layer_kinds) if k.has_kv_cache)

    @property
    def state_layers(self) -> tuple[int, ...]:
        """Layers that keep a conv and a recurrent state (Gated DeltaNet, Mamba2)."""
        return tuple(i for i, k in enumerate(self.layer_kinds) if k.has_recurrent_state)

    def state_shapes(self) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """(conv, recurrent) state shape of a state layer without batch (a model has one kind of them)."""
        dims = self.mamba if LayerKind.MAMBA2 in self.layer_kinds else self.linear_attention
        if dims is None:
            raise AssertionError("the architecture has no layer with a conv and a recurrent state")
        return dims.state_shapes()

    def attention_summary(self) -> str:
        """e.g. "gated attention, qk-norm" (Qwen3.5) or "grouped-query attention, q/k/v bias, qk-norm" (GLM-4.5)."""
        if self.mla is not None:
            return self.mla.summary()
        parts = ["gated attention" if self.attention_output_gate else "grouped-query attention"]
        if self.attention_head_gate:
            parts.append("a sigmoid gate per head")
        if self.attention_bias:
            parts.append("q/k/v bias")
        parts.append("qk-norm" if self.qk_norm else "no qk-norm")
        if self.rope.rotary_dim == 0:
            return ", ".join(parts) + ", no positional encoding"
        summary = ", ".join(parts) + f", rotary on {self.rope.rotary_dim} of {self.head_dim} channels"
        if LayerKind.SLIDING_ATTENTION in self.layer_kinds or self.mtp_layer_kind is LayerKind.SLIDING_ATTENTION:
            summary += f"; sliding layers: {self.layer_attention(LayerKind.SLIDING_ATTENTION).summary()}"
        return summary

    def head_summary(self) -> str:
        """Where the source keeps its MTP head, e.g. "1 block, a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)"."""
        if not self.has_mtp_head:
            return "none"
        where = {HeadLayout.MTP_MODULE: "`mtp.*` tensors (Qwen3.5 layout)",
                 HeadLayout.TRAILING_LAYER: "a trailing decoder layer (DeepSeek-V3 / GLM-4.5 layout)",
                 HeadLayout.SUB_BLOCKS: "`mtp.*` sub-blocks, attention then MoE (Nemotron-H layout)"}[self.head_layout]
        if self.mtp_chained_layers > self.mtp_num_layers:
            return (f"{self.mtp_num_layers} block (the first of {self.mtp_chained_layers} chained), {where}"
                    + ", its own layer slides" * (self.mtp_layer_kind is LayerKind.SLIDING_ATTENTION))
        return f"{self.mtp_num_layers} block, {where}"

    def layer_kind_summary(self, word_separator: str = " ") -> str:
        """How many layers of each kind, e.g. "2 full attention, 2 linear attention" (kinds in name order)."""
        counts: dict[str, int] = {}
        for kind in self.layer_kinds:
            counts[kind.value] = counts.get(kind.value, 0) + 1
        return ", ".join(f"{n} {kind.replace('_', word_separator)}" for kind, n in sorted(counts.items()))


@dataclass(frozen=True)
class SyntheticSpec:
    """What a synthetic source builds: its model and how the random weights are drawn."""

    architecture: Architecture
    # The setting `architecture.layer_kinds` was made from, kept so a finding can name it.
    full_attention_interval: int
    # Spread of the random offset-RMSNorm weights (see sources/random_weights.py).
    norm_weight_scale: float
    # The MTP head's weights: "random" (seeded, like the rest) or "fitted" to the main model's greedy
    # continuations of verify's and tune's default prompts (sources/fitted_head.py), so its drafts are accepted.
    mtp_head: str = added("random")


@dataclass(frozen=True)
class HubRef:
    """A checkpoint on the Hugging Face Hub, as the spec names it (`sources/hub/` resolves it).

    `repo` is `owner/name`; `revision` a branch, tag or commit (None: the repo's default branch). A GGUF repo's
    file is `file` when named, else chosen by its quant tag `quant` as llama.cpp's `-hf` chooses it (None: its
    defaults). `head` is the file of the repo holding that GGUF's MTP head (llama.cpp's `--mtp` output), paired
    from the repo's listing or named in the spec (None: the target alone)."""

    repo: str
    revision: str | None = None
    file: str | None = None
    quant: str | None = None
    head: str | None = added(None)

    @property
    def shown(self) -> str:
        """How messages name it: `owner/name`, with `@revision` and the file or `:quant` when given."""
        text = self.repo + (f":{self.quant}" if self.quant else "") + (f"@{self.revision}" if self.revision else "")
        return text + (f" ({self.file})" if self.file else "")


@dataclass(frozen=True)
class SourceRef:
    """Where the weights come from. `path` is absolute (resolved against the spec file); None for a `hub` one."""

    kind: str  # "synthetic" | "hf" | "gguf"
    path: str | None = None
    seed: int | None = None
    # The model a synthetic source builds (set for kind "synthetic" by lowering).
    synthetic: SyntheticSpec | None = None
    # A GGUF target's MTP head in a file of its own (llama.cpp's `--mtp` output), absolute; None: the target alone.
    head: str | None = added(None)
    # An hf or gguf checkpoint on the Hugging Face Hub rather than beside the spec.
    hub: HubRef | None = added(None)


# ----------------------------------------------------------------------------- build choices


# The float dtypes mtpc builds graphs in (precision.io_dtype). bfloat16 only for execution
# providers with bfloat16 kernels (the runtime profile says which; CPU has none).
IO_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Precision:
    io_dtype: str = "float32"
    # None = same as io_dtype. The CPU profile of onnxruntime-genai 0.18.0 forces float16 (see profiles/).
    logits_dtype: str | None = None

    @property
    def effective_logits_dtype(self) -> str:
        return self.logits_dtype or self.io_dtype


@dataclass(frozen=True)
class OrtGenaiTarget:
    version: str = "0.18.0"
    execution_provider: str = "cpu"
    attention: AttentionMode = AttentionMode.DENSE
    block_size: int = 256
    max_batch_size: int = 16
    num_blocks: int | None = None
    gpu_utilization_factor: float | None = None
    max_draft_tokens: int = 2
    # Paged only: the LM head runs on the rows the engine selects through `logits_indices` (each
    # sequence's last token, and every verified draft), not on every packed token.
    prune_lm_head: bool = False
    # "dynamic": past and present are separate tensors, present = past ++ new.
    # "static": one KV buffer per layer, allocated at max_length by the runtime and
    # written in place (onnxruntime-genai's search.past_present_share_buffer); dense only.
    kv_cache: str = "dynamic"
    # Per-token linear-attention state window of the dense main graph (onnxruntime-genai crops to an
    # accepted draft instead of replaying it): "auto", "off" or W (see passes/state_window.py).
    state_window: str | int = "auto"


@dataclass(frozen=True)
class OnnxGenaiTarget:
    # "flat" (the one onnx-genai loads with its MTP proposer); "workflow" is refused (mtpc.profiles.onnx_genai).
    layout: str = "flat"


@dataclass(frozen=True)
class Targets:
    onnxruntime_genai: OrtGenaiTarget | None = None
    onnx_genai: OnnxGenaiTarget | None = None


@dataclass(frozen=True)
class ModelIR:
    name: str
    spec_path: str | None
    source: SourceRef
    architecture: Architecture
    mtp: MtpSettings
    precision: Precision
    quantization: QuantizationPlan
    targets: Targets
    # The main decoder as runtimes see it (dense contract after lowering).
    main: DecoderConfig
    # Head decoder configs per head contract; filled by passes/mtp_projection.py.
    heads: tuple[tuple[HeadContract, DecoderConfig], ...] = ()
    # Informational notes from passes (shown by `compile`, kept out of artifacts).
    notes: tuple[str, ...] = ()
    # Every weight the source serves, as stored there (set by lowering).
    source_tensors: tuple[SourceTensor, ...] = ()
    # How each weight the package uses is stored; filled by passes/quantization.py.
    weights: tuple[WeightDecision, ...] = ()
    # onnx-genai's own main decoder when it cannot load `main` (`decoder.onnx`, which its loader prefers,
    # reading `main`'s data file): set by passes/state_window.py when `main`'s state is windowed.
    onnx_genai_main: DecoderConfig | None = added(None)
    # onnxruntime-genai's multimodal pipeline over the same weights (vision, embedding, a decoder taking
    # inputs_embeds): set by passes/vision.py when the source has a vision tower.
    vision: VisionPipeline | None = added(None)

    def head(self, contract: HeadContract) -> DecoderConfig | None:
        return dict(self.heads).get(contract)
