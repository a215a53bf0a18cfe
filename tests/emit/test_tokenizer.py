"""Tokenizer files: copied from the source, built from GGUF metadata, or synthesised; loaded by onnxruntime-genai."""

import json
from dataclasses import replace

import onnxruntime_genai as og
import pytest

from mtpc.ir.contracts import main_decoder_config
from mtpc.emit.artifact import EmitContext
from mtpc.emit.tokenizer import emit_tokenizer
from mtpc.ir import ModelIR, MtpSettings, Precision, QuantizationPlan, SourceRef, Targets
from mtpc.sources.info import SourceInfo
from mtpc.sources.gguf import reader as gguf_source
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import fixture_vocab, write_gguf


def _ir(arch, kind: str) -> ModelIR:
    main = main_decoder_config(arch, Precision())
    return ModelIR(
        "t", None, SourceRef(kind, seed=0), arch, MtpSettings(), Precision(), QuantizationPlan(), Targets(), main
    )


def _ctx(info: SourceInfo) -> EmitContext:
    def no_weights():
        raise AssertionError("the tokenizer emitter must not read weights")

    return EmitContext(info, no_weights)


def _load(tmp_path, artifacts, arch) -> og.Tokenizer:
    """og.Tokenizer(dir) reads genai_config.json for the token ids, then the tokenizer files."""
    for art in artifacts:
        (tmp_path / art.relpath).write_bytes(art.read())
    config = {
        "model": {
            "bos_token_id": arch.tokens.bos, "eos_token_id": arch.tokens.eos[0], "pad_token_id": arch.tokens.pad,
            "context_length": arch.context_length, "vocab_size": arch.vocab_size, "type": "qwen3_5_text",
            "decoder": {
                "filename": "model.onnx", "head_size": arch.head_dim, "hidden_size": arch.hidden_size,
                "num_attention_heads": arch.num_attention_heads, "num_hidden_layers": arch.num_layers,
                "num_key_value_heads": arch.num_key_value_heads,
                "inputs": {"input_ids": "input_ids"}, "outputs": {"logits": "logits"},
            },
        },
        "search": {"max_length": 64},
    }
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    return og.Tokenizer(str(tmp_path))


@pytest.mark.parametrize("vocab_size", [256, 300])
def test_synthetic_tokenizer_encodes_text_with_onnxruntime_genai(tmp_path, vocab_size):
    arch = tiny_arch(vocab_size=vocab_size)
    artifacts = emit_tokenizer(_ir(arch, "synthetic"), _ctx(SourceInfo(arch)))
    assert [a.relpath for a in artifacts] == ["tokenizer.json", "tokenizer_config.json"]
    tokenizer = _load(tmp_path, artifacts, arch)
    text = "Hello, world!\n"
    ids = [int(i) for i in tokenizer.encode(text)]
    assert len(ids) == len(text.encode()) and all(0 <= i < vocab_size for i in ids)
    assert len(set(ids)) == len(set(text))  # one id per distinct byte, no merges
    assert tokenizer.decode(ids) == text
    assert [int(i) for i in tokenizer.encode("<|endoftext|>")] == [arch.tokens.eos[0]]


def test_synthetic_tokenizer_is_deterministic():
    arch = tiny_arch()
    first = [a.read() for a in emit_tokenizer(_ir(arch, "synthetic"), _ctx(SourceInfo(arch)))]
    second = [a.read() for a in emit_tokenizer(_ir(arch, "synthetic"), _ctx(SourceInfo(arch)))]
    assert first == second


def test_source_tokenizer_files_are_copied_as_is():
    arch = tiny_arch()
    files = (("tokenizer_config.json", b'{"tokenizer_class": "Qwen2Tokenizer"}'), ("tokenizer.json", b"{ }"))
    artifacts = emit_tokenizer(_ir(arch, "hf"), _ctx(SourceInfo(arch, tokenizer=files)))
    assert {a.relpath: a.read() for a in artifacts} == dict(files)


def test_source_without_tokenizer_files_emits_none():
    arch = tiny_arch()
    assert emit_tokenizer(_ir(arch, "hf"), _ctx(SourceInfo(arch))) == []


@pytest.fixture(scope="module")
def gguf_with_tokenizer(tmp_path_factory):
    arch = tiny_arch(vocab_size=300)
    return arch, write_gguf(tmp_path_factory.mktemp("tok") / "tok.gguf", arch, seed=1, tokenizer=True)


def test_gguf_bpe_tokenizer_loads_and_merges_like_the_vocab_says(tmp_path, gguf_with_tokenizer):
    arch, path = gguf_with_tokenizer
    info = gguf_source.describe(SourceRef("gguf", str(path)))
    artifacts = emit_tokenizer(_ir(info.architecture, "gguf"), _ctx(info))
    tokenizer = _load(tmp_path, artifacts, arch)
    tokens = fixture_vocab(arch)[0]
    # merges h+e, l+l, he+ll, Ġ+w, o+r (in rank order): "hello" -> hell|o, " world" -> Ġw|or|l|d
    expected = [tokens.index(t) for t in ("hell", "o", "Ġw", "or", "l", "d")]
    assert [int(i) for i in tokenizer.encode("hello world")] == expected
    assert tokenizer.decode(expected) == "hello world"
    assert [int(i) for i in tokenizer.encode("<|endoftext|>")] == [arch.tokens.eos[0]]


def test_gguf_tokenizer_config_names_tokens_from_the_metadata(gguf_with_tokenizer):
    arch, path = gguf_with_tokenizer
    files = dict(gguf_source.describe(SourceRef("gguf", str(path))).tokenizer_files)
    config = json.loads(files["tokenizer_config.json"])
    assert config["tokenizer_class"] == "Qwen2Tokenizer"
    assert (config["eos_token"], config["pad_token"], config["bos_token"]) == ("<|endoftext|>", "<|pad|>", "<|im_start|>")
    added = {t["id"]: t["content"] for t in json.loads(files["tokenizer.json"])["added_tokens"] if t["special"]}
    assert added == {0: "<|pad|>", 1: "<|im_start|>", 2: "<|endoftext|>"}


def test_gguf_without_tokenizer_metadata_has_no_files(tmp_path):
    arch = tiny_arch()
    path = write_gguf(tmp_path / "bare.gguf", arch, seed=1)
    assert gguf_source.describe(SourceRef("gguf", str(path))).tokenizer_files == ()


def test_unsupported_tokenizer_class_is_rejected_by_the_runtime(tmp_path):
    # guards the test above: onnxruntime-genai really checks tokenizer_config.json
    arch = tiny_arch()
    artifacts = emit_tokenizer(_ir(arch, "synthetic"), _ctx(SourceInfo(arch)))
    config = replace(artifacts[1], content=b'{"tokenizer_class": "NoSuchTokenizer"}')
    with pytest.raises(RuntimeError, match="NoSuchTokenizer"):
        _load(tmp_path, [artifacts[0], config], arch)


def test_gguf_describe_defers_building_the_tokenizer(gguf_with_tokenizer, monkeypatch):
    """`describe` (and so `inspect`) names the tokenizer files without converting the vocabulary."""
    from mtpc.sources.gguf import tokenizer as gguf_tokenizer

    arch, path = gguf_with_tokenizer

    def not_now(*args, **kwargs):
        raise AssertionError("the vocabulary was converted")

    monkeypatch.setattr(gguf_tokenizer, "_byte_level_bpe", not_now)
    info = gguf_source.describe(SourceRef("gguf", str(path)))
    assert info.tokenizer_names == ("tokenizer.json", "tokenizer_config.json")
    with pytest.raises(AssertionError, match="converted"):
        info.tokenizer_files
