"""The GGUF source: metadata -> Architecture, canonical weights back from a converter-style file, errors."""

from dataclasses import replace

from collections.abc import Sequence

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, GGUFReader
from gguf.quants import dequantize, quantize

from mtpc.util.diagnostics import SourceError
from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf_source
from mtpc.sources.gguf import store as gguf_store
from mtpc.sources.random_weights import seeded_store
from mtpc.weights import QuantizedTensor
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import MIXED_TYPES, gguf_name, tile_value_heads, to_gguf_layout, write_gguf

ARCH = tiny_arch()
HEAD_BLOCK = f"blk.{ARCH.num_layers}"


def _ref(path) -> SourceRef:
    return SourceRef("gguf", str(path))


def _open(path):
    ref = _ref(path)
    return gguf_source.open_weights(ref, gguf_source.describe(ref))


@pytest.fixture(scope="module")
def float_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "f32.gguf", ARCH, seed=3)


@pytest.fixture(scope="module")
def mixed_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "mixed.gguf", ARCH, seed=3, types=MIXED_TYPES)


@pytest.fixture(scope="module")
def canonical():
    return seeded_store(ARCH, 3)


# ----------------------------------------------------------------------------- metadata


def test_describe_derives_the_architecture(float_gguf):
    info = gguf_source.describe(_ref(float_gguf))
    assert info.architecture == ARCH
    assert info.has_mtp_head
    facts = dict(info.facts)
    assert facts["trunk_layers"] == 4 and facts["mtp_block"] == HEAD_BLOCK and facts["format"] == "GGUF v3"


def test_describe_without_nextn_block(tmp_path):
    path = write_gguf(tmp_path / "plain.gguf", ARCH, seed=3, with_mtp=False)
    info = gguf_source.describe(_ref(path))
    assert info.architecture.mtp_num_layers == 0 and not info.has_mtp_head
    assert info.architecture.layer_kinds == ARCH.layer_kinds
    assert not [n for n in _open(path).names() if n.startswith("mtp.")]


def test_describe_reads_no_tensor_data(float_gguf, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("describe decoded tensor data")

    # Garbage in every tensor byte leaves what describe reports unchanged.
    data_start = min(t.data_offset for t in GGUFReader(str(float_gguf)).tensors)
    garbled = tmp_path / "garbled.gguf"
    content = bytearray(float_gguf.read_bytes())
    content[data_start:] = b"\xff" * (len(content) - data_start)
    garbled.write_bytes(bytes(content))
    monkeypatch.setattr("gguf.quants.dequantize", refuse)  # imported by the weight store where it dequantizes
    monkeypatch.setattr(gguf_store, "quantized_rows", refuse)
    info = gguf_source.describe(_ref(garbled))
    original = gguf_source.describe(_ref(float_gguf))
    assert (info.architecture, info.storage) == (original.architecture, original.storage)


def test_storage_lists_groups_and_types(mixed_gguf):
    storage = dict(gguf_source.describe(_ref(mixed_gguf)).storage)
    assert storage["nextn.eh_proj"] == "Q8_0"
    assert storage["attn_q"] == "Q4_0" and storage["ssm_conv1d"] == "F32" and storage["token_embd"] == "F32"


def test_tied_embedding_serves_the_lm_head(tmp_path):
    arch = replace(ARCH, tie_word_embeddings=True)
    store = _open(write_gguf(tmp_path / "tied.gguf", arch, seed=3))
    assert gguf_source.describe(_ref(tmp_path / "tied.gguf")).architecture.tie_word_embeddings
    np.testing.assert_array_equal(store.read_float("lm_head.weight"), store.read_float("embed_tokens.weight"))


# ----------------------------------------------------------------------------- weights


def test_float_store_round_trips_every_canonical_tensor(float_gguf, canonical):
    store = _open(float_gguf)
    assert sorted(store.names()) == sorted(canonical.names())
    for name in canonical.names():
        value = store.read(name)
        assert isinstance(value, np.ndarray) and value.dtype == np.float32, name
        assert store.info(name).shape == value.shape, name
        np.testing.assert_array_equal(value, canonical.read_float(name), err_msg=name)


@pytest.mark.parametrize(
    "name",
    [
        "layers.0.linear_attn.in_proj_qkv.weight",
        "layers.0.linear_attn.in_proj_z.weight",
        "layers.0.linear_attn.in_proj_a.weight",
        "layers.0.linear_attn.in_proj_b.weight",
        "layers.0.linear_attn.conv1d.weight",
        "layers.0.linear_attn.dt_bias",
        "layers.0.linear_attn.decay_scale",
        "layers.0.linear_attn.out_proj.weight",
    ],
)
def test_value_heads_come_back_grouped(float_gguf, canonical, name):
    stored = to_gguf_layout(name, canonical.read_float(name), ARCH)
    # the file really holds another order, so skipping the regrouping would fail the round trip
    assert not np.array_equal(stored.reshape(canonical.info(name).shape), canonical.read_float(name))
    np.testing.assert_array_equal(_open(float_gguf).read_float(name), canonical.read_float(name))


def test_converter_value_conventions_are_kept(float_gguf, canonical):
    store = _open(float_gguf)
    # decay_scale is -exp(A_log) < 0 and norms hold the effective scale near 1 (the +1 is not added twice)
    assert (store.read_float("layers.0.linear_attn.decay_scale") < 0).all()
    for name in ("norm.weight", "mtp.pre_fc_norm_embedding.weight", "layers.3.self_attn.q_norm.weight"):
        assert abs(store.read_float(name).mean() - 1.0) < 0.1, name
    assert store.read_float("layers.0.linear_attn.conv1d.weight").shape == (ARCH.linear_attention.conv_dim, 1, 4)


def test_head_tensors_map_to_mtp_names(float_gguf, canonical):
    store = _open(float_gguf)
    assert store.info("mtp.fc.weight").shape == (ARCH.hidden_size, 2 * ARCH.hidden_size)
    assert store.info("mtp.layers.0.self_attn.q_proj.weight").shape == (
        2 * ARCH.num_attention_heads * ARCH.head_dim, ARCH.hidden_size,
    )
    # the head shares the trunk's embedding and LM head when nextn.embed_tokens / shared_head_head are absent
    assert "mtp.embed_tokens.weight" not in store.names()
    facts = dict(gguf_source.describe(_ref(float_gguf)).facts)
    assert facts["mtp_shares"] == ("mtp.embed_tokens.weight", "mtp.lm_head.weight")


def test_head_own_embedding_is_exposed_when_present(tmp_path, canonical):
    embed = canonical.read_float("embed_tokens.weight") * 2
    path = write_gguf(tmp_path / "own.gguf", ARCH, seed=3, replace={f"{HEAD_BLOCK}.nextn.embed_tokens.weight": embed})
    np.testing.assert_array_equal(_open(path).read_float("mtp.embed_tokens.weight"), embed)


def _expected_after_quantization(name: str, value: np.ndarray, qtype: QT) -> np.ndarray:
    """What a quantized GGUF holds for `name`, back in canonical order (independent of the store)."""
    stored = to_gguf_layout(name, value, ARCH)
    roundtrip = dequantize(quantize(stored, qtype), qtype)
    if name.endswith("out_proj.weight"):
        la = ARCH.linear_attention
        order = tile_value_heads(np.arange(value.shape[1]), la.num_key_heads, la.num_value_heads)
        back = np.empty_like(roundtrip)
        back[:, order] = roundtrip
        return back
    if "linear_attn" in name:
        rows = to_gguf_layout(name, np.arange(value.shape[0])[:, None].astype(np.float32), ARCH)[:, 0].astype(int)
        back = np.empty_like(roundtrip)
        back[rows] = roundtrip
        return back
    return roundtrip


def test_mixed_store_carries_q4_0_and_q8_0_bit_exact(mixed_gguf, canonical):
    store = _open(mixed_gguf)
    cases = {
        "mtp.fc.weight": (QT.Q8_0, 8),
        "layers.3.self_attn.q_proj.weight": (QT.Q4_0, 4),
        "mtp.layers.0.mlp.down_proj.weight": (QT.Q4_0, 4),
        "layers.0.linear_attn.in_proj_qkv.weight": (QT.Q4_0, 4),  # value rows regrouped on quantized rows
        "layers.0.linear_attn.in_proj_a.weight": (QT.Q8_0, 8),
    }
    for name, (qtype, bits) in cases.items():
        info = store.info(name)
        assert (info.dtype, info.quantized) == (qtype.name, True), name
        weight = store.read(name)
        assert isinstance(weight, QuantizedTensor) and weight.bits == bits and weight.shape == info.shape, name
        expected = _expected_after_quantization(name, canonical.read_float(name), qtype)
        np.testing.assert_array_equal(weight.dequantize(), expected, err_msg=name)
        np.testing.assert_array_equal(store.read_float(name), expected, err_msg=name)


def test_quantized_embedding_and_lm_head(tmp_path, canonical):
    types = (("token_embd.weight", QT.Q8_0), ("output.weight", QT.Q4_0))
    store = _open(write_gguf(tmp_path / "qe.gguf", ARCH, seed=3, types=types))
    for name, qtype in (("embed_tokens.weight", QT.Q8_0), ("lm_head.weight", QT.Q4_0)):
        weight = store.read(name)
        assert isinstance(weight, QuantizedTensor) and weight.source_type == qtype.name, name
        expected = dequantize(quantize(canonical.read_float(name), qtype), qtype)
        np.testing.assert_array_equal(weight.dequantize(), expected, err_msg=name)


def test_quantized_columns_split_across_heads_fall_back_to_float(mixed_gguf, canonical):
    # value_head_dim 16 < block 32: regrouping out_proj columns cannot move whole blocks
    name = "layers.0.linear_attn.out_proj.weight"
    store = _open(mixed_gguf)
    assert (store.info(name).dtype, store.info(name).quantized) == ("Q4_0", False)
    value = store.read(name)
    assert isinstance(value, np.ndarray)
    np.testing.assert_array_equal(value, _expected_after_quantization(name, canonical.read_float(name), QT.Q4_0))


def test_quantized_columns_move_whole_blocks_when_heads_span_blocks(tmp_path):
    arch = replace(ARCH, linear_attention=replace(ARCH.linear_attention, value_head_dim=32))
    name = "layers.0.linear_attn.out_proj.weight"
    path = write_gguf(tmp_path / "dv32.gguf", arch, seed=5, types=(("blk.*.ssm_out.weight", QT.Q4_0),))
    weight = _open(path).read(name)
    assert isinstance(weight, QuantizedTensor)
    value = seeded_store(arch, 5).read_float(name)
    la = arch.linear_attention
    stored = dequantize(quantize(tile_value_heads(value, la.num_key_heads, la.num_value_heads, axis=1), QT.Q4_0), QT.Q4_0)
    order = tile_value_heads(np.arange(value.shape[1]), la.num_key_heads, la.num_value_heads)
    expected = np.empty_like(stored)
    expected[:, order] = stored
    np.testing.assert_array_equal(weight.dequantize(), expected)


def _q4_k_blocks(rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (rows, cols // 256, 144), dtype=np.uint8)
    blocks[..., 0:2] = np.full(blocks.shape[:2], 0.01, np.float16).view(np.uint8).reshape(*blocks.shape[:2], 2)
    blocks[..., 2:4] = np.full(blocks.shape[:2], 0.005, np.float16).view(np.uint8).reshape(*blocks.shape[:2], 2)
    return blocks.reshape(rows, -1)


def test_k_quants_are_carried_block_quantized(tmp_path):
    name = "blk.3.attn_output.weight"  # [64, 256]: one Q4_K super-block per row
    blocks = _q4_k_blocks(64, 256, 7)
    store = _open(write_gguf(tmp_path / "k.gguf", ARCH, seed=3, raw={name: (blocks, QT.Q4_K)}))
    info = store.info("layers.3.self_attn.o_proj.weight")
    assert (info.dtype, info.quantized, info.bits, info.block_size, info.float_zero_points) == ("Q4_K", True, 4, 32, True)
    value = store.read("layers.3.self_attn.o_proj.weight")
    assert isinstance(value, QuantizedTensor) and value.source_type == "Q4_K"
    # Float zero points: within float32 rounding of gguf-py's own dequantization (gguf_quant.error_bound).
    np.testing.assert_allclose(value.dequantize(), dequantize(blocks, QT.Q4_K), rtol=0, atol=1e-6)


def test_types_with_no_exact_form_read_as_dequantized_float(tmp_path):
    name = "blk.3.attn_output.weight"  # [64, 256] as IQ2_XXS (256 elements / 66 bytes)
    blocks = np.random.default_rng(7).integers(0, 256, (64, 66), dtype=np.uint8)
    blocks[:, 0:2] = np.full((64, 1), 0.01, np.float16).view(np.uint8)
    store = _open(write_gguf(tmp_path / "iq.gguf", ARCH, seed=3, raw={name: (blocks, QT.IQ2_XXS)}))
    info = store.info("layers.3.self_attn.o_proj.weight")
    assert (info.dtype, info.quantized) == ("IQ2_XXS", False)
    value = store.read("layers.3.self_attn.o_proj.weight")
    assert isinstance(value, np.ndarray)
    np.testing.assert_array_equal(value, dequantize(blocks, QT.IQ2_XXS))


def test_type_without_dequantizer_is_a_source_error(tmp_path):
    name = "blk.3.attn_k.weight"  # [128, 64] as Q8_1 blocks (32 elements / 40 bytes)
    blocks = np.random.default_rng(0).integers(0, 256, (128, 80), dtype=np.uint8)
    store = _open(write_gguf(tmp_path / "q81.gguf", ARCH, seed=3, raw={name: (blocks, QT.Q8_1)}))
    with pytest.raises(SourceError) as err:
        store.read("layers.3.self_attn.k_proj.weight")
    assert "blk.3.attn_k.weight" in str(err.value) and "Q8_1" in str(err.value)


def test_gguf_names_agree_with_the_fixture_table(float_gguf, canonical):
    store = _open(float_gguf)
    for name in canonical.names():
        if name != "lm_head.weight" or not ARCH.tie_word_embeddings:
            assert store._entry(name).gguf == gguf_name(name, ARCH.num_layers), name


# ----------------------------------------------------------------------------- errors


def _one_line_error(path) -> str:
    with pytest.raises(SourceError) as err:
        gguf_source.describe(_ref(path))
    text = str(err.value)
    assert "\n" not in text, text
    return text


def test_truncated_file(float_gguf, tmp_path):
    data = float_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    assert "truncated GGUF file: tensor " in _one_line_error(cut)


def test_file_truncated_inside_the_header(float_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(float_gguf.read_bytes()[:200])
    assert "truncated GGUF file (the header ends early)" in _one_line_error(cut)


@pytest.mark.parametrize("content", [b"", b"GGML" + bytes(60)], ids=["empty", "bad-magic"])
def test_not_a_gguf_file(tmp_path, content):
    path = tmp_path / "x.gguf"
    path.write_bytes(content)
    assert "not a GGUF file" in _one_line_error(path)


def test_header_reader_agrees_with_gguf_py(tmp_path):
    """Our header walk must see what gguf-py's own reader sees: every key's value, every tensor."""
    import gguf

    from mtpc.sources.gguf.header import GGUFHeader

    # Quantized tensors and a tokenizer (string and integer arrays) exercise every value kind we read.
    arch = tiny_arch(vocab_size=300)  # room for the fixture vocabulary
    path = str(write_gguf(tmp_path / "t.gguf", arch, seed=3, types=MIXED_TYPES, tokenizer=True))
    ours, theirs = GGUFHeader(path), gguf.GGUFReader(path)
    assert any(isinstance(v, Sequence) and not isinstance(v, str) and v and isinstance(v[0], str)
               for v in ours.metadata.values())
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        value = ours.metadata[key]
        expected = field.contents()
        assert (list(value) if not isinstance(value, (str, int, float)) else value) == expected, key
    assert set(ours.tensors) == {t.name for t in theirs.tensors}
    for t in theirs.tensors:
        mine = ours.tensors[t.name]
        assert mine.type == t.tensor_type and mine.offset == t.data_offset, t.name
        assert np.array_equal(ours.data(mine), t.data), t.name


def test_mis_shaped_head_tensor(tmp_path):
    bad = np.zeros((64, 64), np.float32)
    path = write_gguf(tmp_path / "s.gguf", ARCH, seed=3, replace={f"{HEAD_BLOCK}.nextn.eh_proj.weight": bad})
    text = _one_line_error(path)
    assert f"{HEAD_BLOCK}.nextn.eh_proj.weight has shape [64, 64], expected [64, 128]" in text


def test_unknown_architecture(tmp_path):
    path = write_gguf(tmp_path / "u.gguf", ARCH, seed=3, gguf_arch="llama")
    assert "architecture 'llama' is not supported" in _one_line_error(path)


def test_not_a_file(tmp_path):
    assert "no such GGUF file" in _one_line_error(tmp_path / "absent.gguf")
