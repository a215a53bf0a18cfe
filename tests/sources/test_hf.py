"""The Hugging Face source: config.json -> Architecture, safetensors -> canonical memory-mapped weights."""

from __future__ import annotations

import json
import re
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mtpc.util.diagnostics import ExitCode, SourceError
from mtpc.emit.tokenizer import synthetic_tokenizer_files
from mtpc.ir import LayerKind, SourceRef
from mtpc.sources import describe, open_weights
from mtpc.sources.hf import reader as hf
from mtpc.sources.random_weights import raw_hf_tensors, seeded_store
from tests.fixtures.checkpoints import tiny_arch, write_hf_checkpoint
from tests.fixtures.safetensors_writer import write_safetensors

ARCH = tiny_arch()
TEXT = "model.language_model."


def ref(path) -> SourceRef:
    return SourceRef("hf", str(path))


def open_store(path):
    return open_weights(ref(path), describe(ref(path)))


def edit_config(directory: Path, edit) -> None:
    path = directory / "config.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("single"), ARCH, seed=5)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("sharded"), ARCH, seed=5, sharded=True)


@pytest.mark.parametrize("which", ["checkpoint", "sharded"])
def test_describe_recovers_the_architecture(which, request):
    info = describe(ref(request.getfixturevalue(which)))
    assert info.architecture == ARCH
    assert info.has_mtp_head
    facts = dict(info.facts)
    assert facts["mtp_tensors"] == 15
    assert facts["safetensors_files"] == (2 if which == "sharded" else 1)
    assert dict(info.storage)["self_attn.q_proj.weight"] == "F32"


@pytest.mark.parametrize("which", ["checkpoint", "sharded"])
def test_weights_are_the_seeded_model_in_canonical_form(which, request):
    # seeded_store derives the canonical form on its own (not through hf.py's converter), so this
    # checks the HF source's names, offset norms, decay scale and tying against an independent derivation.
    store = open_store(request.getfixturevalue(which))
    expected = seeded_store(ARCH, 5)
    assert list(store.names()) == list(expected.names())
    for name in expected.names():
        got, want = store.read(name), expected.read(name)
        assert got.dtype == want.dtype and store.info(name) == expected.info(name), name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_conventions_are_converted_once(checkpoint):
    store = open_store(checkpoint)
    raw = raw_hf_tensors(ARCH, 5)
    np.testing.assert_array_equal(store.read("norm.weight"), raw[TEXT + "norm.weight"] + np.float32(1))
    np.testing.assert_array_equal(
        store.read("layers.3.self_attn.q_norm.weight"), raw[TEXT + "layers.3.self_attn.q_norm.weight"] + np.float32(1)
    )
    np.testing.assert_array_equal(
        store.read("mtp.pre_fc_norm_embedding.weight"), raw["mtp.pre_fc_norm_embedding.weight"] + np.float32(1)
    )
    np.testing.assert_array_equal(
        store.read("layers.0.linear_attn.norm.weight"), raw[TEXT + "layers.0.linear_attn.norm.weight"]
    )
    np.testing.assert_allclose(
        store.read("layers.0.linear_attn.decay_scale"), -np.exp(raw[TEXT + "layers.0.linear_attn.A_log"]), rtol=1e-6
    )
    assert store.read("layers.0.linear_attn.decay_scale").max() < 0
    # reading again does not add the offset again
    np.testing.assert_array_equal(store.read("norm.weight"), raw[TEXT + "norm.weight"] + np.float32(1))
    assert "layers.0.linear_attn.A_log" not in set(store.names())


def test_plain_weights_are_memory_mapped(sharded):
    store = open_store(sharded)
    for name in ("layers.0.linear_attn.in_proj_qkv.weight", "mtp.fc.weight", "embed_tokens.weight"):
        value = store.read(name)
        assert isinstance(value, np.memmap), name
        assert not value.flags.writeable
        assert store.info(name).dtype == "float32"


def test_float16_and_bfloat16_checkpoints(tmp_path):
    raw = raw_hf_tensors(ARCH, 5)
    half = open_store(write_hf_checkpoint(tmp_path / "f16", ARCH, seed=5, float_dtype="F16"))
    value = half.read("layers.1.self_attn.k_proj.weight")
    assert isinstance(value, np.memmap) and value.dtype == np.float16
    assert half.info("layers.1.self_attn.k_proj.weight").dtype == "float16"
    assert half.read_float("layers.1.self_attn.k_proj.weight").dtype == np.float32
    # offset norms are widened to float32 before the +1 (the norm of a float16 store is float32)
    assert half.read("norm.weight").dtype == np.float32
    np.testing.assert_array_equal(
        half.read("norm.weight"), raw[TEXT + "norm.weight"].astype(np.float16).astype(np.float32) + 1
    )
    brain = open_store(write_hf_checkpoint(tmp_path / "bf16", ARCH, seed=5, float_dtype="BF16"))
    k = raw[TEXT + "layers.1.self_attn.k_proj.weight"]
    np.testing.assert_allclose(brain.read_float("layers.1.self_attn.k_proj.weight"), k, rtol=2**-8)
    assert dict(describe(ref(tmp_path / "bf16")).storage)["self_attn.k_proj.weight"] == "BF16"


def test_tied_embeddings_serve_the_embedding_as_lm_head(tmp_path):
    arch = replace(ARCH, tie_word_embeddings=True)
    directory = write_hf_checkpoint(tmp_path, arch, seed=2)
    info = describe(ref(directory))
    assert info.architecture.tie_word_embeddings
    store = open_weights(ref(directory), info)
    np.testing.assert_array_equal(store.read("lm_head.weight"), store.read("embed_tokens.weight"))
    assert "lm_head.weight" in set(store.names())


def tie_flags(top: bool | None, nested: bool | None):
    """A config edit setting (True/False) or removing (None) the top-level and text_config tie flags."""

    def edit(doc):
        for where, value in ((doc, top), (doc["text_config"], nested)):
            where.pop("tie_word_embeddings", None)
            if value is not None:
                where["tie_word_embeddings"] = value

    return edit


# Qwen3_5ForConditionalGeneration's config is the composite Qwen3_5Config, which declares its own
# `tie_word_embeddings` (transformers models/qwen3_5/configuration_qwen3_5.py), and transformers 5 decides
# tying from the model's own config (`PreTrainedModel.get_expanded_tied_weights_keys` reads
# `self.config.tie_word_embeddings`): the top-level flag. hf.py follows that when the flags disagree, and
# falls back to text_config's flag only when the top level has none (the flat Qwen3_5ForCausalLM layout
# keeps every field at the top, so a lone nested flag is the only one the export wrote).
@pytest.mark.parametrize(
    "top, nested, tied",
    [
        (False, True, False),  # disagree: top level wins
        (True, False, True),  # disagree: top level wins
        (None, True, True),  # only nested
        (None, False, False),
        (True, None, True),  # only top level
        (False, None, False),
        (None, None, False),  # neither: transformers' default is untied
    ],
)
def test_tie_word_embeddings_top_level_wins(tmp_path, top, nested, tied):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=2)  # untied: holds its own lm_head.weight
    edit_config(directory, tie_flags(top, nested))
    info = describe(ref(directory))
    assert info.architecture.tie_word_embeddings is tied
    store = open_weights(ref(directory), info)
    raw = raw_hf_tensors(ARCH, 2)
    want = raw[TEXT + "embed_tokens.weight"] if tied else raw["lm_head.weight"]
    np.testing.assert_array_equal(store.read("lm_head.weight"), want)


def test_tie_flag_must_be_a_boolean(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)
    edit_config(directory, tie_flags("yes", False))
    with pytest.raises(SourceError, match="field tie_word_embeddings must be true or false, not 'yes'"):
        describe(ref(directory))


def test_partial_rotary_factor_defaults_to_a_quarter(tmp_path):
    # transformers' Qwen3_5TextConfig sets partial_rotary_factor 0.25 when a config names none
    # (configuration_qwen3_5.py, `kwargs.setdefault("partial_rotary_factor", 0.25)`).
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)

    def edit(doc):
        params = doc["text_config"]["rope_parameters"]
        del params["partial_rotary_factor"], params["mrope_section"]
        assert "partial_rotary_factor" not in doc and "partial_rotary_factor" not in doc["text_config"]

    edit_config(directory, edit)
    rope = describe(ref(directory)).architecture.rope
    assert ARCH.head_dim == 64
    assert rope.partial_rotary_factor == 0.25 and rope.rotary_dim == 16


def test_checkpoint_without_mtp(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=1, with_mtp=False)
    info = describe(ref(directory))
    assert not info.has_mtp_head
    assert not [n for n in open_weights(ref(directory), info).names() if n.startswith("mtp.")]


def test_config_declaring_a_head_the_weights_lack(tmp_path):
    # What transformers' save_pretrained leaves behind: it drops mtp.* but keeps mtp_num_hidden_layers.
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=1, with_mtp=False)
    edit_config(directory, lambda d: d["text_config"].update(mtp_num_hidden_layers=1))
    info = describe(ref(directory))
    assert not info.has_mtp_head
    assert "the weights hold none of the head's tensors" in dict(info.facts)["mtp_note"]


def test_flat_causal_lm_checkpoint_with_model_prefix(tmp_path):
    raw = raw_hf_tensors(ARCH, 4)
    renamed = {("model." + n[len(TEXT) :] if n.startswith(TEXT) else n): v for n, v in raw.items()}
    renamed["model.visual.blocks.0.attn.qkv.weight"] = np.zeros((3, 3), np.float32)  # ignored
    write_safetensors(tmp_path / "model.safetensors", renamed)
    nested = json.loads((write_hf_checkpoint(tmp_path / "tmp", ARCH, seed=4) / "config.json").read_text())
    flat = {**nested["text_config"], "architectures": ["Qwen3_5ForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(flat))
    info = describe(ref(tmp_path))
    assert info.architecture == replace(ARCH, tokens=replace(ARCH.tokens, bos=2, pad=2))  # eos stands in
    store = open_weights(ref(tmp_path), info)
    expected = seeded_store(ARCH, 4)
    assert list(store.names()) == list(expected.names())
    np.testing.assert_array_equal(store.read_float("norm.weight"), expected.read_float("norm.weight"))


def test_full_attention_interval_and_top_level_fields(tmp_path):
    arch = tiny_arch(num_layers=8)
    directory = write_hf_checkpoint(tmp_path, arch, seed=0)

    def edit(doc):
        text = doc["text_config"]
        del text["layer_types"]
        text["full_attention_interval"] = 4
        doc["mtp_num_hidden_layers"] = text.pop("mtp_num_hidden_layers")
        params = text.pop("rope_parameters")
        text["rope_theta"] = params["rope_theta"]
        text["partial_rotary_factor"] = params["partial_rotary_factor"]

    edit_config(directory, edit)
    got = describe(ref(directory)).architecture
    assert got.layers_of(LayerKind.FULL_ATTENTION) == (3, 7)
    assert got.mtp_num_layers == 1
    assert got.rope.theta == arch.rope.theta and got.rope.rotary_dim == 16 and got.rope.mrope_section == ()


def test_token_ids_prefer_generation_config(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)
    edit_config(directory, lambda d: d.update(bos_token_id=9, eos_token_id=9, pad_token_id=9))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    tokens = describe(ref(directory)).architecture.tokens
    assert (tokens.bos, tokens.eos, tokens.pad) == (9, (7, 8), 9)


def test_tokenizer_files_are_carried(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)
    tokenizer = dict(synthetic_tokenizer_files(ARCH))["tokenizer.json"]
    (directory / "tokenizer.json").write_bytes(tokenizer)
    (directory / "tokenizer_config.json").write_bytes(b"{}")
    (directory / "notes.txt").write_bytes(b"not a tokenizer file")
    files = dict(describe(ref(directory)).tokenizer_files)
    assert files == {"tokenizer.json": tokenizer, "tokenizer_config.json": b"{}"}


def set_text(**fields):
    return lambda doc: doc["text_config"].update(fields)


def drop_text(field):
    return lambda doc: doc["text_config"].pop(field)


def set_rope(**fields):
    return lambda doc: doc["text_config"]["rope_parameters"].update(fields)


MALFORMED = [
    (lambda d: d.update(architectures=["LlamaForCausalLM"]), "architectures ['LlamaForCausalLM'] is not supported"),
    (lambda d: d.pop("architectures"), "field architectures is missing"),
    (lambda d: d.update(text_config=[1]), "field text_config must be an object"),
    (drop_text("hidden_size"), "field text_config.hidden_size is missing"),
    (set_text(num_key_value_heads=3), "field text_config.num_key_value_heads (3) must divide"),
    (set_text(vocab_size="big"), "field text_config.vocab_size must be a non-negative integer"),
    (set_text(layer_types=["linear_attention"]), "field text_config.layer_types must list one type per layer"),
    (set_text(layer_types=["mamba"] * 4), "unsupported layer type 'mamba'"),
    (drop_text("linear_key_head_dim"), "field text_config.linear_key_head_dim is missing"),
    (drop_text("max_position_embeddings"), "field text_config.max_position_embeddings is missing"),
    (set_text(attn_output_gate=False), "only gated attention"),
    (lambda d: d["text_config"]["rope_parameters"].pop("rope_theta"), "rope_theta is missing"),
    (set_rope(rope_type="yarn"), "'yarn' is not supported"),
    (set_rope(mrope_section=[4, 4, 4]), "sums to 12, not rotary_dim / 2 = 8"),
    (set_rope(partial_rotary_factor=2.0), "gives rotary dim 128 for head_dim 64"),
]


@pytest.mark.parametrize("edit, message", MALFORMED)
def test_malformed_configs_name_file_and_field(tmp_path, edit, message):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)
    edit_config(directory, edit)
    with pytest.raises(SourceError) as caught:
        describe(ref(directory))
    text = str(caught.value)
    assert message in text
    assert str(directory / "config.json") in text
    assert "\n" not in text
    assert caught.value.exit_code is ExitCode.USAGE


def test_missing_eos_names_both_files(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)
    edit_config(directory, lambda d: d["text_config"].pop("eos_token_id"))
    (directory / "generation_config.json").write_text("{}")
    with pytest.raises(SourceError, match="eos_token_id is missing.*generation_config.json"):
        describe(ref(directory))


def test_unreadable_checkpoints(tmp_path):
    with pytest.raises(SourceError, match="not a checkpoint directory"):
        describe(ref(tmp_path / "absent"))
    with pytest.raises(SourceError, match="no config.json"):
        describe(ref(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(SourceError, match="config.json: not valid JSON"):
        describe(ref(tmp_path))
    directory = write_hf_checkpoint(tmp_path / "ckpt", ARCH, seed=0)
    (directory / "model.safetensors").unlink()
    with pytest.raises(SourceError, match="no model.safetensors or model.safetensors.index.json"):
        describe(ref(directory))


def test_index_naming_a_missing_shard(tmp_path):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0, sharded=True)
    (directory / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(SourceError, match="model-00002-of-00002.safetensors: missing"):
        describe(ref(directory))


def first_tensor_past(path: Path, size: int) -> tuple[str, int]:
    """From the raw header: the tensor (in data order) that a file cut to `size` bytes loses first, and its end."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    ends = sorted((8 + n + e["data_offsets"][1], name) for name, e in header.items() if name != "__metadata__")
    return next((name, end) for end, name in ends if end > size)


@pytest.mark.parametrize("sharded, cut", [(False, "model.safetensors"), (True, "model-00002-of-00002.safetensors")])
def test_describe_reports_a_truncated_safetensors_file(tmp_path, sharded, cut):
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0, sharded=sharded)
    path = directory / cut
    size = path.stat().st_size // 2
    name, end = first_tensor_past(path, size)
    path.write_bytes(path.read_bytes()[:size])
    message = f"{path}: truncated: tensor {name!r} ends at byte {end}, the file has {size}"
    with pytest.raises(SourceError, match=re.escape(message) + "$"):
        describe(ref(directory))


def test_missing_or_misshapen_tensors(tmp_path):
    raw = raw_hf_tensors(ARCH, 0)
    directory = write_hf_checkpoint(tmp_path, ARCH, seed=0)
    info = describe(ref(directory))
    del raw[TEXT + "layers.2.linear_attn.dt_bias"]
    write_safetensors(directory / "model.safetensors", raw)
    with pytest.raises(SourceError, match="no tensor for layers.2.linear_attn.dt_bias"):
        open_weights(ref(directory), info)
    raw[TEXT + "layers.2.linear_attn.dt_bias"] = np.zeros(5, np.float32)
    write_safetensors(directory / "model.safetensors", raw)
    with pytest.raises(SourceError, match=r"layers.2.linear_attn.dt_bias has shape \[5\], config.json implies \[4\]"):
        open_weights(ref(directory), info)


def test_canonical_name_mapping():
    assert hf.canonical_name("model.language_model.layers.0.linear_attn.A_log") == "layers.0.linear_attn.decay_scale"
    assert hf.canonical_name("model.layers.1.mlp.up_proj.weight") == "layers.1.mlp.up_proj.weight"
    assert hf.canonical_name("mtp.layers.0.self_attn.q_norm.weight") == "mtp.layers.0.self_attn.q_norm.weight"
    assert hf.canonical_name("lm_head.weight") == "lm_head.weight"
    # the vision tower keeps its names under `visual.`; whether it is read is the reader's choice (arch.vision)
    assert hf.canonical_name("model.visual.blocks.0.norm1.weight") == "visual.blocks.0.norm1.weight"
    assert hf.canonical_name("something_else") is None


def test_checkpoint_writer_is_deterministic(tmp_path):
    a = write_hf_checkpoint(tmp_path / "a", ARCH, seed=3, sharded=True)
    b = write_hf_checkpoint(tmp_path / "b", ARCH, seed=3, sharded=True)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_reference_on_the_hf_store_is_the_seeded_model(checkpoint):
    from mtpc.reference.forward import Qwen35Reference

    ids = np.array([[3, 1, 4, 1, 5]])
    got = Qwen35Reference(ARCH, open_store(checkpoint)).forward(ids)[0]
    want = Qwen35Reference(ARCH, seeded_store(ARCH, 5)).forward(ids)[0]
    np.testing.assert_array_equal(got, want)


def test_read_rows_reads_stacked_and_fused_experts_whole(tmp_path):
    """`read_rows` is asked for every linear weight; a MoE layer's experts are stacked from several
    tensors (or half of a fused one), not one (file, name) entry, and come back as `read` gives them."""
    from mtpc.sources.hf import reader as hf_source
    from tests.fixtures.moe_checkpoints import tiny_moe_arch, write_moe_release_checkpoint

    directory = write_moe_release_checkpoint(tmp_path / "moe", tiny_moe_arch())
    ref = SourceRef("hf", str(directory))
    store = hf_source.open_weights(ref, hf_source.describe(ref))
    experts = [n for n in store.names() if ".mlp.experts." in n]
    assert any(n.startswith("mtp.") for n in experts) and any(n.startswith("layers.") for n in experts)
    for name in experts:
        assert np.array_equal(np.asarray(store.read_rows(name)), store.read(name)), name
    store.close()
