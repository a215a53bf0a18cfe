"""The main decoder graph every family builds the same way, to the IR's main contract (dense or paged):
token embedding (or `inputs_embeds`, in the multimodal pipeline's decoder), one residual block per layer, the final norm, the LM head (over only the rows the
engine reads when the contract has `logits_indices`) and the hidden-state output the MTP head reads.

A family supplies only each layer's token mixer (`MixerFor`): Qwen3.5 its Gated DeltaNet and gated
attention, GLM-4.5 its plain grouped-query attention. The feed-forward (dense or MoE) is the IR's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import onnx_ir as oir

from ..ir import Architecture, DecoderConfig, LayerKind, ModelIR, SeedHidden, TensorSpec
from ..ir.contracts import EMBEDDING_INITIALIZER
from ..profiles.kernels import FusedKernels
from .blocks import Residual, Rotary, SequenceOps, add_norm, cast, embed, lm_head, residual_block, rotary
from .builder import ONNX_DTYPES, BuiltGraph, GraphBuilder, GraphData
from .moe import feed_forward
from .parameters import ParameterSource
from .roles import input_name, output_name
from .layouts import sequence_ops

Progress = Callable[[str], None]
Mixer = Callable[[oir.Value], oir.Value]


def has_position_rows(spec: TensorSpec) -> bool:
    """`[3, ...]` positions carry one row per MRoPE axis (T, H, W); otherwise a single row."""
    return len(spec.shape) >= 2 and spec.shape[0] == 3


@dataclass(frozen=True)
class LayerSite:
    """What a layer's mixer is built with: the graph under construction, its sequence ops and rotary
    tables, the model, and `outputs`, where the mixer puts the state it presents (KV, conv, recurrent)."""

    b: GraphBuilder
    ops: SequenceOps
    rot: Rotary
    arch: Architecture
    cfg: DecoderConfig
    outputs: dict[str, oir.Value]
    # Rotary tables of layer kinds with a rope of their own (`rotary_for`), built on first use.
    rotaries: dict = field(default_factory=dict)

    def rotary_for(self, kind: LayerKind) -> Rotary:
        """The rotary tables of a layer of `kind`: the model's, or the kind's own rope (a sliding layer's)."""
        rope = self.arch.layer_attention(kind).rope
        if rope == self.arch.rope:
            return self.rot
        if rope not in self.rotaries:
            positions = self.cfg.contract.input(input_name(self.cfg, "position_ids"))
            self.rotaries[rope] = rotary(self.b, rope, self.b.inputs[positions.name], has_position_rows(positions),
                                         scope=f"rotary_{kind.value}")
        return self.rotaries[rope]

    def input(self, role: str, layer: int) -> oir.Value:
        return self.b.inputs[input_name(self.cfg, role, layer)]

    def present(self, role: str, layer: int, value: oir.Value) -> None:
        self.outputs[output_name(self.cfg, role, layer)] = value


MixerFor = Callable[[LayerSite, int, LayerKind], Mixer]
# A family's full-attention block: `(b, ops, x, prefix, arch, rot, past_key, past_value)` -> (out, present key, value).
AttentionBlock = Callable[..., tuple[oir.Value, oir.Value, oir.Value]]


def full_attention(site: LayerSite, i: int, attention: AttentionBlock) -> Mixer:
    """Layer `i`'s mixer through the family's `attention`, its KV cache read and presented under the contract's names."""

    def full(h: oir.Value) -> oir.Value:
        out, key, value = attention(site.b, site.ops, h, f"layers.{i}.", site.arch, site.rot,
                                    site.input("past_key_names", i), site.input("past_value_names", i))
        site.present("present_key_names", i, key)
        site.present("present_value_names", i, value)
        return out

    return full


def attention_only(attention: AttentionBlock, family: str) -> MixerFor:
    """The mixers of a family whose every layer is full attention (GLM-4.5, deepseek2)."""

    def mixer_for(site: LayerSite, i: int, kind: LayerKind) -> Mixer:
        if kind is not LayerKind.FULL_ATTENTION:  # lowering accepts only full attention for such a family
            raise AssertionError(f"layer {i}: {kind.value} layers are not supported by the {family} graph builder")
        return full_attention(site, i, attention)

    return mixer_for


def build_decoder(ir: ModelIR, params: ParameterSource, data: GraphData, progress: Progress,
                  kernels: FusedKernels, mixer_for: MixerFor) -> BuiltGraph:
    arch, cfg = ir.architecture, ir.main
    contract = cfg.contract
    b = GraphBuilder("main", params, data, kernels)
    b.declare_inputs(contract)
    ops = sequence_ops(b, cfg)
    if cfg.input_name("inputs_embeds") is not None:  # the multimodal pipeline's decoder: the embedding graph embeds
        stream = Residual(b.inputs[input_name(cfg, "inputs_embeds")])
    else:
        stream = Residual(embed(b, b.inputs[input_name(cfg, "input_ids")],
                                params.embedding("embed_tokens.weight", EMBEDDING_INITIALIZER)))
    positions = contract.input(input_name(cfg, "position_ids"))
    rot = rotary(b, arch.rope, b.inputs[positions.name], has_position_rows(positions))
    outputs: dict[str, oir.Value] = {}
    site = LayerSite(b, ops, rot, arch, cfg, outputs)

    for i, kind in enumerate(arch.layer_kinds):
        progress(f"{cfg.filename}: layer {i} ({kind.value})")
        mixer = mixer_for(site, i, kind)
        with b.scope(f"layers.{i}"):
            stream = residual_block(b, stream, f"layers.{i}.", arch.rms_norm_eps, mixer, feed_forward(arch, i))

    normed, stream = add_norm(b, stream, "norm.weight", arch.rms_norm_eps, "norm")
    logits_name = output_name(cfg, "logits")
    head_rows = normed
    if cfg.input_name("logits_indices") is not None:
        # Pruned LM head: only the rows the engine samples or verifies; the hidden output keeps them all.
        head_rows = b.op("Gather", [normed, b.inputs[input_name(cfg, "logits_indices")]], {"axis": 0},
                         name="lm_head/selected_rows/Gather")
    outputs[logits_name] = cast(b, lm_head(b, head_rows), ONNX_DTYPES[contract.output(logits_name).dtype],
                                "logits/Cast", b.io_dtype)
    hidden_name = cfg.output_name("hidden_states")  # dropped when no head reads it
    if hidden_name is not None:
        outputs[hidden_name] = normed if ir.mtp.seed_hidden is SeedHidden.POST_NORM else stream.base
    return b.finish(contract, outputs)

