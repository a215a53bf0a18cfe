"""GLM-4.7-Flash GGUFs as llama.cpp's own converter writes them (`deepseek2`): names, shapes, MLA's transforms.

- the keys and tensor names the pinned converter writes, and the f32 file read as the release: every canonical
  tensor equals transformers' tensor, the rope rows of q_b_proj (per head) and kv_a_proj_with_mqa put from
  interleaved pairs into half-split order as transformers' `apply_rotary_pos_emb_interleave` does to q and k;
- kv_b_proj from the split `attn_k_b` / `attn_v_b` and from a legacy file's one `attn_kv_b` (older converters)
  reads the same; a Q8_0 k_b / v_b reads as gguf-py's dequantization of the file's blocks, reassembled;
- q_b_proj and kv_a_proj_with_mqa in Q8_0 keep their exact block form with the rows moved.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader
from gguf.quants import dequantize

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from mtpc.util.diagnostics import SourceError
from mtpc.weights import QuantizedTensor
from tests.fixtures.gguf_requantize import requantize

from .conftest import CONFIG, LAYERS

HEADS, NOPE, ROPE, V, R = (CONFIG[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                                                "v_head_dim", "kv_lora_rank"))


def _open(path):
    ref = SourceRef("gguf", str(path))
    info = gguf.describe(ref)
    return info, gguf.open_weights(ref, info)


def _half_split(rows: np.ndarray) -> np.ndarray:
    """Interleaved rope rows -> half-split, as transformers' `apply_rotary_pos_emb_interleave` reorders q / k
    (`view(d // 2, 2).transpose`), applied to the rows that produce those channels."""
    d = rows.shape[0]
    return rows.reshape(d // 2, 2, *rows.shape[1:]).swapaxes(0, 1).reshape(rows.shape)


def _hf_name(canonical: str) -> str:
    head = {"mtp.fc.weight": "eh_proj.weight", "mtp.pre_fc_norm_embedding.weight": "enorm.weight",
            "mtp.pre_fc_norm_hidden.weight": "hnorm.weight", "mtp.norm.weight": "shared_head.norm.weight"}
    if canonical in head:
        return f"model.layers.{LAYERS}.{head[canonical]}"
    if canonical == "lm_head.weight":
        return canonical
    return "model." + canonical.replace("mtp.layers.0.", f"layers.{LAYERS}.").replace(".shared_expert.", ".shared_experts.")


def expected_canonical(tensors: dict[str, np.ndarray], canonical: str) -> np.ndarray:
    """The canonical value of `canonical`, derived from the release's tensors here, apart from mtpc's readers."""
    name = _hf_name(canonical)
    if ".mlp.experts." in name:
        owner, proj = name.split(".mlp.experts.")
        return np.stack([tensors[f"{owner}.mlp.experts.{e}.{proj}"] for e in range(CONFIG["n_routed_experts"])])
    value = tensors[name]
    if name.endswith("q_b_proj.weight"):
        heads = value.reshape(HEADS, NOPE + ROPE, -1)
        return np.concatenate([heads[:, :NOPE], np.stack([_half_split(h[NOPE:]) for h in heads])], 1).reshape(value.shape)
    if name.endswith("kv_a_proj_with_mqa.weight"):
        return np.concatenate([value[:R], _half_split(value[R:])])
    return value


def test_the_converter_writes_deepseek2_as_llama_cpp_loads_it(ds_ggufs):
    reader = GGUFReader(ds_ggufs["f32"])
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.")}
    key = lambda k: fields.get(f"deepseek2.{k}")  # noqa: E731
    assert fields["general.architecture"] == "deepseek2"
    assert (key("block_count"), key("nextn_predict_layers"), key("leading_dense_block_count")) == (3, 1, 1)
    assert (key("attention.head_count"), key("attention.head_count_kv")) == (4, 1)
    assert (key("attention.kv_lora_rank"), key("attention.q_lora_rank"), key("rope.dimension_count")) == (R, 96, ROPE)
    # the absorbed cache's sizes, and the per-head ones under *_mla
    assert (key("attention.key_length"), key("attention.value_length")) == (R + ROPE, R)
    assert (key("attention.key_length_mla"), key("attention.value_length_mla")) == (NOPE + ROPE, V)
    assert (key("expert_group_count"), key("expert_group_used_count"), key("expert_shared_count")) == (1, 1, 1)
    assert key("expert_weights_scale") == pytest.approx(1.8) and key("expert_weights_norm")
    assert key("expert_gating_func") is None  # no scoring_func in config.json: llama.cpp would guess
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in reader.tensors}
    assert shapes["blk.1.attn_k_b.weight"] == (HEADS, R, NOPE)  # k half transposed: ggml ne {NOPE, R, N}
    assert shapes["blk.1.attn_v_b.weight"] == (HEADS, V, R)
    assert shapes["blk.1.attn_q_b.weight"] == (HEADS * (NOPE + ROPE), 96)
    assert shapes["blk.1.attn_kv_a_mqa.weight"] == (R + ROPE, 64)
    assert {"blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight", "blk.2.nextn.hnorm.weight",
            "blk.2.nextn.shared_head_norm.weight", "blk.2.exp_probs_b.bias", "blk.2.attn_k_b.weight",
            "blk.0.ffn_gate.weight", "blk.1.ffn_norm.weight", "blk.1.ffn_gate_exps.weight"} <= set(shapes)
    assert not any("kv_b" in n and "attn_kv_b" in n for n in shapes)


def test_the_f32_gguf_reads_as_the_release(ds_ggufs, ds_tensors):
    info, store = _open(ds_ggufs["f32"])
    arch = info.architecture
    assert (arch.mla.kv_lora_rank, arch.mla.qk_nope_head_dim, arch.mla.qk_rope_head_dim, arch.mla.v_head_dim,
            arch.mla.q_lora_rank) == (R, NOPE, ROPE, V, 96)
    assert (arch.num_key_value_heads, arch.head_dim, arch.rope.rotary_dim, arch.mtp_num_layers) == (1, R + ROPE, ROPE, 1)
    assert arch.mla.softmax_scale == pytest.approx((NOPE + ROPE) ** -0.5)
    assert (arch.moe.scoring, arch.moe.selection_bias, arch.moe.dense_layers) == ("sigmoid", True, 1)
    names = sorted(store.names())
    assert "layers.1.self_attn.kv_b_proj.weight" in names and "mtp.layers.0.self_attn.q_b_proj.weight" in names
    for name in names:
        np.testing.assert_array_equal(store.read_float(name), expected_canonical(ds_tensors, name), err_msg=name)


def _legacy(f32, target):
    """The f32 file as llama.cpp's converter wrote it before it split kv_b: one `attn_kv_b` [N * (nope + v), R] per
    block, `key_length` / `value_length` the per-head sizes, no *_mla keys, head_count_kv the heads."""
    reader = GGUFReader(f32)
    tensors = {t.name: np.asarray(t.data, np.float32) for t in reader.tensors}
    blocks = sorted({n.split(".")[1] for n in tensors if n.endswith("attn_k_b.weight")})
    kv_b = {}
    for b in blocks:
        k_b, v_b = tensors[f"blk.{b}.attn_k_b.weight"], tensors[f"blk.{b}.attn_v_b.weight"]  # [N, R, nope], [N, v, R]
        kv_b[f"blk.{b}.attn_kv_b.weight"] = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(-1, R)
    omit = tuple(f"blk.{b}.attn_{p}_b.weight" for b in blocks for p in "kv")
    fields = {"deepseek2.attention.key_length": NOPE + ROPE, "deepseek2.attention.value_length": V,
              "deepseek2.attention.key_length_mla": None, "deepseek2.attention.value_length_mla": None,
              "deepseek2.attention.head_count_kv": HEADS}
    return requantize(f32, target, (), QT.F32, omit=omit, fields=fields, add=kv_b)


def test_the_legacy_attn_kv_b_reads_as_the_split_form(ds_workdir, ds_ggufs, ds_tensors):
    legacy = _legacy(ds_ggufs["f32"], ds_workdir / "ds-legacy.gguf")
    assert "blk.0.attn_kv_b.weight" in {t.name for t in GGUFReader(legacy).tensors}
    (info, store), (split_info, split) = _open(legacy), _open(ds_ggufs["f32"])
    assert info.architecture == split_info.architecture
    assert sorted(store.names()) == sorted(split.names())
    for name in store.names():
        np.testing.assert_array_equal(store.read_float(name), split.read_float(name), err_msg=name)
    np.testing.assert_array_equal(store.read_float("layers.0.self_attn.kv_b_proj.weight"),
                                  ds_tensors["model.layers.0.self_attn.kv_b_proj.weight"])


def test_q8_0_kv_b_reads_as_the_files_blocks_and_rope_rows_stay_exact_blocks(ds_ggufs, ds_tensors):
    tensors = {t.name: t for t in GGUFReader(ds_ggufs["q8_0"]).tensors}
    info, store = _open(ds_ggufs["q8_0"])

    def values(name):
        t = tensors[name]
        assert t.tensor_type == QT.Q8_0, name  # llama.cpp quantizes k_b / v_b, q_b, kv_a_mqa
        return dequantize(t.data, t.tensor_type)

    for block, prefix in ((0, "layers.0."), (LAYERS, "mtp.layers.0.")):
        k_b, v_b = values(f"blk.{block}.attn_k_b.weight"), values(f"blk.{block}.attn_v_b.weight")
        per_head = [np.concatenate([k_b[h].T, v_b[h]]) for h in range(HEADS)]  # [nope + v, R] each
        kv_b = store.read_float(prefix + "self_attn.kv_b_proj.weight")
        np.testing.assert_array_equal(kv_b, np.concatenate(per_head))
        encoding = {t.name: (t.encoding, t.carried) for t in info.tensors}[prefix + "self_attn.kv_b_proj.weight"]
        assert encoding == ("Q8_0", None)  # dequantized on read: k_b's blocks run along nope, not R
        for canonical, gguf_name in (("q_b_proj", "attn_q_b"), ("kv_a_proj_with_mqa", "attn_kv_a_mqa")):
            carried = store.read(f"{prefix}self_attn.{canonical}.weight")
            assert isinstance(carried, QuantizedTensor) and carried.bits == 8, canonical
            want = values(f"blk.{block}.{gguf_name}.weight")
            if canonical == "q_b_proj":
                heads = want.reshape(HEADS, NOPE + ROPE, -1)
                want = np.concatenate([heads[:, :NOPE], np.stack([_half_split(h[NOPE:]) for h in heads])], 1)
            else:
                want = np.concatenate([want[:R], _half_split(want[R:])])
            np.testing.assert_array_equal(carried.dequantize().reshape(-1), want.reshape(-1), err_msg=canonical)


def test_a_missing_v_b_is_refused_naming_it(ds_workdir, ds_ggufs):
    path = requantize(ds_ggufs["f32"], ds_workdir / "ds-no-v_b.gguf", (), QT.F32, omit=("blk.1.attn_v_b.weight",))
    with pytest.raises(SourceError, match=r"blk\.1\.attn_v_b\.weight is missing \(expected shape \[4, 32, 64\]\)"):
        gguf.describe(SourceRef("gguf", str(path)))
