"""A GLM-4.7-Flash-shaped `deepseek2` GGUF as a sparse file: every key and tensor info written, no weight bytes.

The tensors and keys are those llama.cpp's converter writes for GLM-4.7-Flash (conversion/glm.py
`Glm4MoeLiteModel` over conversion/deepseek.py `DeepseekV2Model`), listed here from the issue's config facts
and not from mtpc's name table: 47 trunk blocks and the nextn block 47 (its own `nextn.embed_tokens` and
`nextn.shared_head_head`, as the release stores them), kv_b split into `attn_k_b` / `attn_v_b`, no
`expert_gating_func` (the release's config.json has no `scoring_func`), a 154,880-token byte-level BPE
vocabulary with merges. Matrices are Q8_0, norms, routers and biases F32. The data region is a hole
(`truncate`): the file claims ~33 GB and occupies a few megabytes.
"""

from __future__ import annotations

from pathlib import Path

from gguf import GGMLQuantizationType as QT, GGUFWriter, TokenType

from bench.sparse_source import add_tensor_info, finish_sparse, vocabulary
from tests.fixtures.deepseek2_checkpoints import FLASH

H, LAYERS, HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V = 2048, 47, 20, 768, 512, 192, 64, 256
EXPERTS, USED, EXPERT_FF, FF, VOCAB = 64, 4, 1536, 10240, 154880
EOS, BOS, EOT, EOM = 154820, 154822, 154827, 154829  # <|endoftext|>, [gMASK], <|user|>, <|observation|>


def tensors() -> dict[str, tuple[tuple[int, ...], QT]]:
    """name -> (numpy shape, i.e. ggml ne reversed; type)."""
    out = {"token_embd.weight": ((VOCAB, H), QT.Q8_0), "output.weight": ((VOCAB, H), QT.Q8_0),
           "output_norm.weight": ((H,), QT.F32)}
    for i in range(LAYERS + 1):
        b = f"blk.{i}."
        out.update({
            b + "attn_norm.weight": ((H,), QT.F32), b + "ffn_norm.weight": ((H,), QT.F32),
            b + "attn_q_a.weight": ((Q_LORA, H), QT.Q8_0), b + "attn_q_a_norm.weight": ((Q_LORA,), QT.F32),
            b + "attn_q_b.weight": ((HEADS * (NOPE + ROPE), Q_LORA), QT.Q8_0),
            b + "attn_kv_a_mqa.weight": ((KV_LORA + ROPE, H), QT.Q8_0), b + "attn_kv_a_norm.weight": ((KV_LORA,), QT.F32),
            b + "attn_k_b.weight": ((HEADS, KV_LORA, NOPE), QT.Q8_0), b + "attn_v_b.weight": ((HEADS, V, KV_LORA), QT.Q8_0),
            b + "attn_output.weight": ((H, HEADS * V), QT.Q8_0),
        })
        if i == 0:  # leading_dense_block_count 1
            out.update({b + "ffn_gate.weight": ((FF, H), QT.Q8_0), b + "ffn_up.weight": ((FF, H), QT.Q8_0),
                        b + "ffn_down.weight": ((H, FF), QT.Q8_0)})
            continue
        out.update({
            b + "ffn_gate_inp.weight": ((EXPERTS, H), QT.F32), b + "exp_probs_b.bias": ((EXPERTS,), QT.F32),
            b + "ffn_gate_exps.weight": ((EXPERTS, EXPERT_FF, H), QT.Q8_0),
            b + "ffn_up_exps.weight": ((EXPERTS, EXPERT_FF, H), QT.Q8_0),
            b + "ffn_down_exps.weight": ((EXPERTS, H, EXPERT_FF), QT.Q8_0),
            b + "ffn_gate_shexp.weight": ((EXPERT_FF, H), QT.Q8_0), b + "ffn_up_shexp.weight": ((EXPERT_FF, H), QT.Q8_0),
            b + "ffn_down_shexp.weight": ((H, EXPERT_FF), QT.Q8_0),
        })
    n = f"blk.{LAYERS}.nextn."
    out.update({n + "eh_proj.weight": ((H, 2 * H), QT.Q8_0), n + "enorm.weight": ((H,), QT.F32),
                n + "hnorm.weight": ((H,), QT.F32), n + "shared_head_norm.weight": ((H,), QT.F32),
                n + "embed_tokens.weight": ((VOCAB, H), QT.Q8_0), n + "shared_head_head.weight": ((VOCAB, H), QT.Q8_0)})
    return out


def _metadata(w: GGUFWriter, *, nextn: bool) -> None:
    w.add_block_count(LAYERS + int(nextn))
    w.add_context_length(202752)
    w.add_embedding_length(H)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_expert_group_count(1)
    w.add_expert_group_used_count(1)
    w.add_file_type(7)  # MOSTLY_Q8_0
    w.add_leading_dense_block_count(1)
    w.add_vocab_size(VOCAB)
    w.add_q_lora_rank(Q_LORA)
    w.add_kv_lora_rank(KV_LORA)
    w.add_key_length(KV_LORA + ROPE)
    w.add_value_length(KV_LORA)
    w.add_key_length_mla(NOPE + ROPE)
    w.add_value_length_mla(V)
    w.add_expert_feed_forward_length(EXPERT_FF)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.8)
    w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(ROPE)
    if nextn:
        w.add_nextn_predict_layers(1)
    tokens, types, merges = vocabulary(FLASH)
    for token_id, text in ((EOS, "<|endoftext|>"), (BOS, "[gMASK]"), (EOT, "<|user|>"), (EOM, "<|observation|>")):
        tokens[token_id], types[token_id] = text, int(TokenType.CONTROL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_eot_token_id(EOT)
    w.add_eom_token_id(EOM)
    w.add_pad_token_id(EOS)


def write(path: Path, *, nextn: bool = True) -> Path:
    """The file (without `nextn`: an older GGUF of the release, block_count 47 and no nextn block)."""
    w = GGUFWriter(str(path), arch="deepseek2")
    _metadata(w, nextn=nextn)
    for name, (shape, qtype) in tensors().items():
        if not nextn and name.startswith(f"blk.{LAYERS}."):
            continue
        add_tensor_info(w, name, shape, qtype)
    return finish_sparse(w, path)
