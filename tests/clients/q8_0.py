"""What the converter's Q8_0 GGUF holds for each matmul weight of the main model, in Hugging Face layout.

`convert_hf_to_gguf.py --outtype q8_0` stores every 2-D weight as Q8_0 (the
embedding and LM head included; norms, `A_log`, `dt_bias` and the conv kernel
stay F32). Before quantizing it reorders some of them: value heads go from
grouped (by key head) to tiled order, on the rows of `in_proj_qkv` (value part),
`in_proj_z`, `in_proj_a` and `in_proj_b`, and on the columns of `out_proj`.
Q8_0 scales blocks of 32 along a row, so a column reorder changes what is
rounded together: the rounding has to be done in the converter's layout.

`q8_0_weights` does exactly that, independently of mtpc's GGUF reader: it puts
each original weight in the converter's layout (from reading its
`_LinearAttentionVReorderBase`), quantizes it with gguf-py, requires the bytes
to be the very bytes the GGUF stores, and returns the dequantized values back
in HF layout. The result is the model the Q8_0 file holds, as transformers
takes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize

from mtpc.ir import Architecture, LayerKind

Q8_0 = GGMLQuantizationType.Q8_0
TEXT = "model.language_model."


def _matmul_weights(arch: Architecture) -> Iterator[tuple[str, str, int, np.ndarray | None]]:
    """(HF name, GGUF name, axis, permutation of that axis into the converter's layout or None)."""
    la = arch.linear_attention
    nk, r = la.num_key_heads, la.num_value_heads // la.num_key_heads

    def tiled(head_dim: int) -> np.ndarray:
        return np.arange(nk * r * head_dim).reshape(nk, r, head_dim).transpose(1, 0, 2).reshape(-1)

    key_rows = 2 * nk * la.key_head_dim
    yield TEXT + "embed_tokens.weight", "token_embd.weight", 0, None
    yield "lm_head.weight", "output.weight", 0, None
    for i, kind in enumerate(arch.layer_kinds):
        hf, blk = f"{TEXT}layers.{i}.", f"blk.{i}."
        for ours, theirs in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            yield f"{hf}mlp.{ours}.weight", f"{blk}{theirs}.weight", 0, None
        if kind is LayerKind.FULL_ATTENTION:
            for ours, theirs in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output")):
                yield f"{hf}self_attn.{ours}_proj.weight", f"{blk}attn_{theirs}.weight", 0, None
        else:
            la_ = f"{hf}linear_attn."
            yield la_ + "in_proj_qkv.weight", blk + "attn_qkv.weight", 0, np.concatenate(
                [np.arange(key_rows), key_rows + tiled(la.value_head_dim)]
            )
            yield la_ + "in_proj_z.weight", blk + "attn_gate.weight", 0, tiled(la.value_head_dim)
            yield la_ + "in_proj_b.weight", blk + "ssm_beta.weight", 0, tiled(1)
            yield la_ + "in_proj_a.weight", blk + "ssm_alpha.weight", 0, tiled(1)
            yield la_ + "out_proj.weight", blk + "ssm_out.weight", 1, tiled(la.value_head_dim)


def q8_0_weights(raw: dict[str, np.ndarray], arch: Architecture, gguf_path: Path) -> dict[str, np.ndarray]:
    """`raw` (HF names) with each main-model matmul weight replaced by what the Q8_0 GGUF stores for it."""
    stored = {t.name: t for t in GGUFReader(gguf_path).tensors}
    out = dict(raw)
    covered = set()
    for hf_name, gguf_name, axis, perm in _matmul_weights(arch):
        tensor = stored[gguf_name]
        assert tensor.tensor_type == Q8_0, (gguf_name, tensor.tensor_type.name)
        original = raw[hf_name].astype(np.float32)
        layout = original if perm is None else np.take(original, perm, axis=axis)
        blocks = quantize(layout, Q8_0)
        assert np.array_equal(np.asarray(tensor.data).reshape(-1), blocks.reshape(-1)), (
            f"{gguf_name} is not Q8_0 of {hf_name} in the layout expected"
        )
        values = dequantize(blocks, Q8_0).reshape(layout.shape)
        out[hf_name] = values if perm is None else np.take(values, np.argsort(perm), axis=axis)
        covered.add(gguf_name)
    head_blocks = tuple(f"blk.{i}." for i in range(arch.num_layers, arch.num_layers + arch.mtp_num_layers))
    main_q8_0 = {n for n, t in stored.items() if t.tensor_type == Q8_0 and not n.startswith(head_blocks)}
    assert main_q8_0 == covered, f"Q8_0 tensors not accounted for: {sorted(main_q8_0 ^ covered)}"
    return out
