"""transformers' Qwen3.5 text model with its MTP head, as the release names and wires it.

The trunk is `Qwen3_5ForCausalLM` unchanged. transformers has no MTP head (it drops `mtp.*` on
load), so `MtpHead` builds one from transformers' own Qwen3.5 modules in the release's layout
(docs: /work/shared/reference/qwen35-mtp-architecture.md §8):

    x = mtp.fc([mtp.pre_fc_norm_embedding(embed(t+1)) | mtp.pre_fc_norm_hidden(h_t)])
    x = mtp.layers.0(x)           # one full-attention Qwen3.5 decoder layer (gated attention, q/k norm)
    n = mtp.norm(x);  logits = lm_head(n)   # predicts token t+2; n seeds the next chained draft

`h_t` is the trunk's hidden state after its final norm (mtpc's default `seed_hidden: post_norm`,
what onnxruntime-genai feeds the head). The head's parameter names are the release's `mtp.*`.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

# The model the recipe trains: Qwen3.5's layout at a size this machine trains in under an hour.
SIZES = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,  # layers 0-2 Gated DeltaNet, layer 3 full attention (the release's 3 : 1)
    "full_attention_interval": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 64,
    "linear_num_value_heads": 4,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "attn_output_gate": True,
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
}
ROPE = {
    "rope_type": "default",
    "rope_theta": 10_000_000.0,
    "partial_rotary_factor": 0.25,  # rotary width 16 of head_dim 64
    "mrope_section": [3, 3, 2],  # the release's [11, 11, 10] scaled to 16 / 2 slots
    "mrope_interleaved": True,
}


def text_config(vocab_size: int, eos: int):
    from transformers import Qwen3_5TextConfig

    sizes = dict(SIZES, vocab_size=vocab_size)
    interval = sizes.pop("full_attention_interval")
    sizes["layer_types"] = [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(sizes["num_hidden_layers"])
    ]
    extra = {k: sizes.pop(k) for k in ("attn_output_gate", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings")}
    config = Qwen3_5TextConfig(**sizes, rope_parameters=dict(ROPE), eos_token_id=eos, bos_token_id=None,
                               pad_token_id=eos)
    for key, value in extra.items():
        setattr(config, key, value)  # kept in config.json as the release has them; transformers ignores them
    config.architectures = ["Qwen3_5ForCausalLM"]
    config._attn_implementation = "sdpa"
    return config


class MtpHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm

        head_config = copy.deepcopy(config)
        head_config.num_hidden_layers = 1
        head_config.layer_types = ["full_attention"]
        h = config.hidden_size
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(h, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(h, eps=config.rms_norm_eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = nn.ModuleList([Qwen3_5DecoderLayer(head_config, 0)])
        self.norm = Qwen3_5RMSNorm(h, eps=config.rms_norm_eps)

    def forward(self, embeds: torch.Tensor, seed: torch.Tensor, position_embeddings) -> torch.Tensor:
        """embeds, seed `[B, S, H]` -> the head's hidden state after `mtp.norm` `[B, S, H]` (causal over S)."""
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(embeds), self.pre_fc_norm_hidden(seed)], dim=-1))
        x = self.layers[0](x, position_embeddings=position_embeddings, attention_mask=None)
        return self.norm(x)


class TrunkWithHead(nn.Module):
    """`model` (a Qwen3_5ForCausalLM) and `mtp` (its head), trained together."""

    def __init__(self, config):
        super().__init__()
        from transformers import Qwen3_5ForCausalLM

        self.model = Qwen3_5ForCausalLM(config)
        self.mtp = MtpHead(config)
        init_head(self.mtp, config.initializer_range)

    def losses(
        self, ids: torch.Tensor, chain: int, chain_rows: int | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """Cross-entropy of the trunk (next token) and of the head at chained depths 1..1+chain.

        Depth d (1-based) predicts token t+1+d from the embedding of t+d and, as seed, the trunk's
        hidden state at t (d = 1) or the head's own output of depth d-1 (how a runtime chains
        drafts); the chained depths run on the first `chain_rows` sequences only (they cost a head
        pass each, and depth 1 is what every draft starts from). Also returns each depth's argmax agreement with the trunk's own argmax at the same
        target position (what a runtime accepts), for logging.
        """
        lm = self.model
        out = lm.model(input_ids=ids, use_cache=False)
        hidden = out.last_hidden_state  # after the final norm
        logits = lm.lm_head(hidden)
        main = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        trunk_pick = logits.argmax(-1)
        embed = lm.model.embed_tokens(ids)
        b, t = ids.shape
        head_losses, agreement = [], []
        seed = hidden
        for depth in range(1, 2 + chain):
            span = t - 1 - depth  # positions t with a target at t+1+depth
            if span <= 0:
                break
            if depth == 2 and chain_rows is not None:
                ids, embed, seed, trunk_pick = (x[:chain_rows] for x in (ids, embed, seed, trunk_pick))
                b = ids.shape[0]
            positions = torch.arange(depth, depth + span, device=ids.device).expand(b, -1)
            rope = lm.model.rotary_emb(hidden, positions)
            n = self.mtp(embed[:, depth : depth + span], seed[:, :span], rope)
            head_logits = lm.lm_head(n)
            target = ids[:, 1 + depth : 1 + depth + span]
            head_losses.append(nn.functional.cross_entropy(head_logits.flatten(0, 1), target.flatten()))
            with torch.no_grad():
                agreement.append((head_logits.argmax(-1) == trunk_pick[:, depth : depth + span]).float().mean())
            seed = n
        return main, head_losses, agreement


def init_head(head: MtpHead, std: float) -> None:
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
    for name, p in head.named_parameters():
        if name.endswith("norm.weight"):
            nn.init.zeros_(p)  # offset RMSNorm: effective scale 1 + w


def mtp_state_dict(model: TrunkWithHead) -> dict[str, torch.Tensor]:
    return {"mtp." + k: v for k, v in model.mtp.state_dict().items()}
