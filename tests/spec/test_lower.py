"""Lowering a loaded spec to the typed IR."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mtpc.ir.contracts import main_decoder_config
from mtpc.util.diagnostics import ExitCode, MtpcError
from mtpc.ir import (
    IO_DTYPES,
    AttentionMode,
    HeadPolicy,
    LayerKind,
    OnnxGenaiTarget,
    OrtGenaiTarget,
    Precision,
    QuantScheme,
    SeedHidden,
    SourceRef,
    SyntheticSpec,
)
from mtpc.sources import synthetic
from mtpc.spec.loader import load_spec
from mtpc.spec.lower import lower
from mtpc.schema.validation import load_schema
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.fixtures.gguf_writer import write_gguf

HEADER = "mtpc: 1\nname: t\n"


def lowered(tmp_path: Path, body: str, source: str = "source:\n  synthetic: {}\n"):
    path = tmp_path / "spec.yaml"
    path.write_text(HEADER + source + body, encoding="utf-8")
    return lower(load_spec(path))


def failure(tmp_path: Path, body: str, source: str = "source:\n  synthetic: {}\n") -> MtpcError:
    with pytest.raises(MtpcError) as caught:
        lowered(tmp_path, body, source)
    return caught.value


# ----------------------------------------------------------------------------- synthetic source


def test_synthetic_defaults_are_the_tiny_model(tmp_path):
    ir, info = lowered(tmp_path, "")
    assert ir.architecture == tiny_arch()
    assert info.architecture == tiny_arch()
    assert ir.source.kind == "synthetic" and ir.source.seed == 0


def test_layer_kinds_follow_the_full_attention_interval(tmp_path):
    source = "source:\n  synthetic: {num_layers: 6, full_attention_interval: 3}\n"
    ir, _ = lowered(tmp_path, "", source)
    full, linear = LayerKind.FULL_ATTENTION, LayerKind.LINEAR_ATTENTION
    assert ir.architecture.layer_kinds == (linear, linear, full, linear, linear, full)


def test_synthetic_settings_reach_the_architecture(tmp_path):
    source = (
        "source:\n  synthetic:\n    seed: 9\n    mtp_num_layers: 0\n    tie_word_embeddings: true\n"
        "    rope: {theta: 1e6, partial_rotary_factor: 0.5, mrope_section: [6, 5, 5]}\n"
        "    tokens: {bos: 5, eos: [6, 7], pad: 8}\n"
    )
    ir, _ = lowered(tmp_path, "", source)
    arch = ir.architecture
    assert ir.source.seed == 9
    assert arch.mtp_num_layers == 0 and arch.tie_word_embeddings
    assert (arch.rope.theta, arch.rope.rotary_dim, arch.rope.mrope_section) == (1e6, 32, (6, 5, 5))
    assert (arch.tokens.bos, arch.tokens.eos, arch.tokens.pad) == (5, (6, 7), 8)


def test_the_synthetic_settings_are_lowered_to_a_typed_hashable_spec(tmp_path):
    ir, info = lowered(tmp_path, "", "source:\n  synthetic: {seed: 4, norm_weight_scale: 0.25}\n")
    assert ir.source == SourceRef(
        "synthetic", seed=4, synthetic=SyntheticSpec(tiny_arch(), full_attention_interval=2, norm_weight_scale=0.25)
    )
    assert len({ir.source, replace(ir.source)}) == 1  # frozen and hashable: plan diffs compare sources
    assert dict(info.facts) == {"seed": 4, "norm_weight_scale": 0.25}


def test_describe_refuses_impossible_sizes():
    arch = replace(tiny_arch(), num_key_value_heads=3)
    ref = SourceRef("synthetic", synthetic=SyntheticSpec(arch, full_attention_interval=2, norm_weight_scale=0.1))
    with pytest.raises(MtpcError) as caught:
        synthetic.describe(ref)
    (diag,) = caught.value.diagnostics
    assert diag.message == "num_key_value_heads (3) must divide num_attention_heads (4)"
    assert diag.path == "source.synthetic.num_key_value_heads"


def test_norm_weight_scale_reaches_the_weights(tmp_path):
    ir, info = lowered(tmp_path, "", "source:\n  synthetic: {norm_weight_scale: 0.0}\n")
    store = synthetic.open_weights(ir.source, info)
    # offset norms hold the effective scale 1 + w; with no spread w is 0
    np.testing.assert_array_equal(store.read_float("norm.weight"), np.ones(64, np.float32))
    ir, info = lowered(tmp_path, "", "source:\n  synthetic: {norm_weight_scale: 0.5}\n")
    spread = synthetic.open_weights(ir.source, info).read_float("norm.weight")
    assert np.abs(spread - 1).max() > 0.1


def test_the_seed_decides_the_weights(tmp_path):
    weights = []
    for seed in (1, 1, 2):
        ir, info = lowered(tmp_path, "", f"source:\n  synthetic: {{seed: {seed}}}\n")
        weights.append(synthetic.open_weights(ir.source, info).read_float("embed_tokens.weight"))
    np.testing.assert_array_equal(weights[0], weights[1])
    assert not np.array_equal(weights[0], weights[2])


# ----------------------------------------------------------------------------- hf / gguf sources


def test_hf_path_is_relative_to_the_spec_file(tmp_path, monkeypatch):
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch(), tokenizer=True)
    monkeypatch.chdir("/")
    ir, info = lowered(tmp_path, "", "source:\n  hf: ckpt\n")
    assert ir.source == SourceRef("hf", path=str((tmp_path / "ckpt").resolve()))
    assert ir.architecture == info.architecture
    assert ir.architecture.hidden_size == 64 and ir.architecture.mtp_num_layers == 1


def test_gguf_path_is_relative_to_the_spec_file(tmp_path):
    (tmp_path / "models").mkdir()
    write_gguf(tmp_path / "models" / "tiny.gguf", tiny_arch(), tokenizer=True)
    ir, _ = lowered(tmp_path, "", "source:\n  gguf: models/tiny.gguf\n")
    assert ir.source.kind == "gguf" and ir.source.path == str((tmp_path / "models" / "tiny.gguf").resolve())
    assert ir.architecture.layer_kinds == tiny_arch().layer_kinds


def test_missing_source_path_points_at_the_spec(tmp_path):
    err = failure(tmp_path, "", "source:\n  hf: nowhere\n")
    assert err.exit_code is ExitCode.USAGE
    (diag,) = err.diagnostics
    assert (diag.span.line, diag.span.col) == (4, 7)
    assert diag.message == "hf source 'nowhere' does not exist"


@pytest.mark.parametrize("kind", ["hf", "gguf"])
def test_a_source_name_no_file_system_holds_points_at_the_spec(tmp_path, kind):
    """A path component past NAME_MAX makes pathlib raise instead of answer no (found by tests/spec/test_fuzz_loader.py)."""
    name = "x" * 300
    err = failure(tmp_path, "", f"source:\n  {kind}: ./{name}/model\n")
    assert err.exit_code is ExitCode.USAGE
    (diag,) = err.diagnostics
    assert (diag.span.line, diag.span.col) == (4, 7 if kind == "hf" else 9)
    assert diag.message == f"{kind} source './{name}/model' cannot be a path: File name too long"


def test_a_file_is_not_an_hf_folder(tmp_path):
    (tmp_path / "config.txt").write_text("x")
    err = failure(tmp_path, "", "source:\n  hf: config.txt\n")
    assert err.diagnostics[0].message == "hf source 'config.txt' is not a folder"


def test_source_errors_are_anchored_at_the_source_node(tmp_path):
    (tmp_path / "empty").mkdir()
    err = failure(tmp_path, "", "source:\n  hf: empty\n")
    assert err.exit_code is ExitCode.USAGE
    (diag,) = err.diagnostics
    assert "config.json" in diag.message
    assert (diag.span.line, diag.span.col) == (4, 7)
    assert diag.render().splitlines()[1] == "   4 |   hf: empty"


# ----------------------------------------------------------------------------- choices


def test_defaults_when_sections_are_omitted(tmp_path):
    ir, _ = lowered(tmp_path, "")
    assert ir.targets.onnxruntime_genai == OrtGenaiTarget()
    assert ir.targets.onnx_genai == OnnxGenaiTarget(layout="flat")
    assert ir.precision == Precision(io_dtype="float32")
    assert ir.quantization.default == QuantScheme(bits=None, block_size=32)
    assert ir.quantization.overrides == ()
    assert (ir.mtp.head, ir.mtp.num_speculative_tokens, ir.mtp.seed_hidden) == (
        HeadPolicy.AUTO,
        1,
        SeedHidden.POST_NORM,
    )
    assert ir.mtp.emit_head is None
    assert ir.main == main_decoder_config(tiny_arch(), Precision(), execution_provider="cpu")


@pytest.mark.parametrize("release", ["0.17.1", "0.18.0"])
def test_each_supported_onnxruntime_genai_release_is_lowered_as_given(tmp_path, release):
    ir, _ = lowered(tmp_path, f'targets:\n  onnxruntime_genai: {{version: "{release}"}}\n')
    assert ir.targets.onnxruntime_genai == OrtGenaiTarget(version=release)


def test_an_unsupported_release_is_refused_at_the_value_with_the_supported_ones(tmp_path):
    error = failure(tmp_path, 'targets:\n  onnxruntime_genai: {version: "0.16.0"}\n')
    (diagnostic,) = error.diagnostics
    assert diagnostic.message == (
        "targets.onnxruntime_genai.version must be one of '0.17.1', '0.18.0', not the string '0.16.0'"
    )
    assert diagnostic.span is not None and diagnostic.span.line == 6


def test_listed_targets_only(tmp_path):
    ir, _ = lowered(tmp_path, "targets:\n  onnx_genai: {layout: flat}\n")
    assert ir.targets.onnxruntime_genai is None
    assert ir.targets.onnx_genai == OnnxGenaiTarget(layout="flat")


def test_paged_target(tmp_path):
    body = (
        "precision: {io_dtype: float16}\n"
        "targets:\n  onnxruntime_genai:\n    execution_provider: cuda\n    attention: paged\n"
        "    paged: {block_size: 32, max_batch_size: 8, num_blocks: 100}\n    max_draft_tokens: 3\n"
    )
    ir, _ = lowered(tmp_path, body)
    assert ir.targets.onnxruntime_genai == OrtGenaiTarget(
        execution_provider="cuda",
        attention=AttentionMode.PAGED,
        block_size=32,
        max_batch_size=8,
        num_blocks=100,
        gpu_utilization_factor=None,
        max_draft_tokens=3,
    )
    assert ir.main.execution_provider == "cuda"
    assert ir.main.contract.input("past.0.conv").dtype == "float16"


def test_paged_without_a_pool_size_uses_the_builder_share(tmp_path):
    body = (
        "precision: {io_dtype: float16}\n"
        "targets:\n  onnxruntime_genai: {execution_provider: cuda, attention: paged}\n"
    )
    ir, _ = lowered(tmp_path, body)
    target = ir.targets.onnxruntime_genai
    assert (target.block_size, target.num_blocks, target.gpu_utilization_factor) == (256, None, 0.6)


def test_paged_rules_are_reported_together(tmp_path):
    body = "targets:\n  onnxruntime_genai: {attention: paged, paged: {block_size: 8}}\n"
    err = failure(tmp_path, body)
    assert err.exit_code is ExitCode.FINDINGS
    assert [d.message.split(" ")[:3] for d in err.diagnostics] == [
        ["paged", "attention", "needs"],
        ["paged", "attention", "needs"],
        ["targets.onnxruntime_genai.paged.block_size", "must", "be"],
    ]


def test_the_runtime_profiles_limits_are_reported_at_the_value(tmp_path):
    body = (
        "precision: {io_dtype: float16}\n"
        "targets:\n  onnxruntime_genai:\n    execution_provider: cuda\n    attention: paged\n"
        "    paged: {gpu_utilization_factor: 1.5}\n"
    )
    (diag,) = failure(tmp_path, body).diagnostics
    assert diag.message == "gpu_utilization_factor must be in (0, 1], not 1.5"
    assert (diag.span.line, diag.span.col) == (10, 37)


def test_the_schema_offers_the_io_dtypes_mtpc_builds():
    enum = load_schema("spec")["properties"]["precision"]["properties"]["io_dtype"]["enum"]
    assert enum == ["float32", "float16", "bfloat16"] == list(IO_DTYPES)


def test_paged_settings_with_dense_attention_are_refused(tmp_path):
    err = failure(tmp_path, "targets:\n  onnxruntime_genai:\n    paged: {num_blocks: 4}\n")
    (diag,) = err.diagnostics
    assert diag.message == "paged settings are given but attention is 'dense'"
    assert (diag.span.line, diag.span.col) == (7, 5)


def test_kv_cache_defaults_to_dynamic_and_static_is_kept(tmp_path):
    ir, _ = lowered(tmp_path, "")
    assert ir.targets.onnxruntime_genai.kv_cache == "dynamic"
    ir, _ = lowered(tmp_path, "targets:\n  onnxruntime_genai: {kv_cache: static}\n")
    assert ir.targets.onnxruntime_genai == OrtGenaiTarget(kv_cache="static")


def test_static_kv_cache_with_paged_attention_is_refused_at_the_value(tmp_path):
    body = (
        "precision: {io_dtype: float16}\n"
        "targets:\n  onnxruntime_genai:\n    execution_provider: cuda\n    attention: paged\n    kv_cache: static\n"
    )
    (diag,) = failure(tmp_path, body).diagnostics
    assert diag.message == "kv_cache 'static' needs attention 'dense', not 'paged'"
    assert (diag.span.line, diag.span.col) == (10, 15)


def test_unknown_kv_cache_kind_is_a_schema_error(tmp_path):
    err = failure(tmp_path, "targets:\n  onnxruntime_genai: {kv_cache: fixed}\n")
    assert err.exit_code is ExitCode.FINDINGS
    assert "'fixed'" in str(err) and "static" in str(err)


def test_quantization_overrides_inherit_and_first_match_wins(tmp_path):
    body = (
        "quantization:\n  default: {bits: 4, block_size: 64, accuracy_level: 1}\n  overrides:\n"
        "    - {match: 'mtp.fc.weight', bits: null}\n"
        "    - {match: 'layers.*.mlp.*', bits: 8}\n"
        "    - {match: 'layers.0.*', keep: source}\n"
        "targets:\n  onnxruntime_genai: {}\n"  # an int4 LM head is refused next to onnx_genai
    )
    plan = lowered(tmp_path, body)[0].quantization
    assert plan.scheme_for("mtp.fc.weight") == QuantScheme(bits=None, block_size=64, accuracy_level=1)
    assert plan.scheme_for("layers.0.mlp.up_proj.weight") == QuantScheme(bits=8, block_size=64, accuracy_level=1)
    # keep: source leaves the encoding to the source; accuracy_level is inherited like any other field.
    assert plan.scheme_for("layers.0.self_attn.q_proj.weight") == QuantScheme(keep_source=True, accuracy_level=1)
    assert plan.scheme_for("lm_head.weight") == QuantScheme(bits=4, block_size=64, accuracy_level=1)


def test_keep_source_default_needs_bits_in_overrides_that_set_a_block_size(tmp_path):
    body = "quantization:\n  default: {keep: source}\n  overrides:\n    - {match: 'layers.*', block_size: 64}\n"
    err = failure(tmp_path, body)
    assert "sets block_size without 'bits'" in err.diagnostics[0].message


def test_keep_source_takes_an_accuracy_level_and_overrides_inherit_the_keep(tmp_path):
    body = (
        "quantization:\n  default: {keep: source, accuracy_level: 4}\n"
        "  overrides:\n    - {match: 'layers.*', accuracy_level: 0}\n"
    )
    plan = lowered(tmp_path, body)[0].quantization
    assert plan.default == QuantScheme(keep_source=True, accuracy_level=4)
    assert plan.scheme_for("layers.0.mlp.up_proj.weight") == QuantScheme(keep_source=True, accuracy_level=0)


def test_mtp_settings(tmp_path):
    ir, _ = lowered(tmp_path, "mtp: {head: off, num_speculative_tokens: 3, seed_hidden: pre_norm}\n")
    assert (ir.mtp.head, ir.mtp.num_speculative_tokens, ir.mtp.seed_hidden) == (
        HeadPolicy.OFF,
        3,
        SeedHidden.PRE_NORM,
    )


def test_architecture_overrides(tmp_path):
    ir, info = lowered(tmp_path, "architecture:\n  context_length: 64\n  tokens: {eos: [2, 9]}\n")
    assert ir.architecture.context_length == 64
    assert ir.architecture.tokens.eos == (2, 9) and ir.architecture.tokens.bos == 1
    assert info.architecture.context_length == 512  # what the source says stays as it is


def test_token_override_outside_the_vocabulary(tmp_path):
    err = failure(tmp_path, "architecture:\n  tokens: {pad: 256}\n")
    (diag,) = err.diagnostics
    assert diag.message == "token id 256 is outside the vocabulary (the source's vocab_size is 256)"
    assert (diag.span.line, diag.span.col) == (6, 17)


def test_spec_path_is_kept_as_given(tmp_path, monkeypatch):
    (tmp_path / "spec.yaml").write_text(HEADER + "source: {synthetic: {}}\n")
    monkeypatch.chdir(tmp_path)
    ir, _ = lower(load_spec("spec.yaml"))
    assert ir.spec_path == "spec.yaml"


# ----------------------------------------------------------------------------- checks that need the source


def test_quantized_lm_head_with_onnx_genai_is_borrowed_with_a_note(tmp_path):
    # targets omitted: both are built; the sidecar borrows the packed LM head under onnx-genai's names
    ir, _ = lowered(tmp_path, "quantization:\n  default: {bits: 4}\n")
    (note,) = [n for n in ir.notes if "LM head" in n]
    assert "4-bit LM head (lm_head.MatMul.weight with lm_head.MatMul.scales)" in note
    assert "native backend only" in note and "only backend that drafts with the sidecar" in note


def test_lm_head_blocks_that_do_not_divide_the_hidden_size_are_refused_at_the_block_size(tmp_path):
    # onnx-genai derives a borrowed LM head's block size as hidden_size / blocks per row (64 / 1 here, not 128)
    (diag,) = failure(tmp_path, "quantization:\n  default: {bits: 4, block_size: 128}\n").diagnostics
    assert diag.message.startswith("quantization.default stores lm_head.weight in 4-bit blocks of 128, which do not divide hidden_size 64")
    assert (diag.span.line, diag.span.col) == (6, 34)  # line 6 is "  default: {bits: 4, block_size: 128}"
    body = (
        "quantization:\n  default: {bits: 4}\n  overrides:\n"
        "    - {match: 'mtp.*', bits: null}\n"
        "    - {match: '*head*', block_size: 128}\n"
        "    - {match: 'lm_head.weight', bits: null}\n"
    )
    # the first override to match decides
    (diag,) = failure(tmp_path, body).diagnostics
    assert diag.message.startswith("the override '*head*' stores lm_head.weight in 4-bit blocks of 128")
    assert (diag.span.line, diag.span.col) == (9, 37)  # "    - {match: '*head*', block_size: 128}"
    assert "{match: lm_head.weight, bits: null}" in diag.hint


def test_quantized_lm_head_needs_no_note_without_a_head_or_the_onnx_genai_target(tmp_path):
    quantized = "quantization:\n  default: {bits: 4}\n"
    for body in (
        quantized + "mtp: {head: off}\n",
        quantized + "targets:\n  onnxruntime_genai: {}\n",
        quantized + "targets:\n  onnxruntime_genai: {kv_cache: static}\n  onnx_genai: {}\n",
        quantized + "  overrides:\n    - {match: lm_head.weight, bits: null}\n",
    ):
        ir, _ = lowered(tmp_path, body)
        assert ir.quantization.default.bits == 4
        assert not [n for n in ir.notes if "LM head" in n]
    ir, _ = lowered(tmp_path, quantized, "source:\n  synthetic: {mtp_num_layers: 0}\n")
    assert ir.quantization.scheme_for("lm_head.weight").bits == 4


@pytest.fixture(scope="module")
def q4_embedding_gguf(tmp_path_factory):
    from gguf import GGMLQuantizationType as QT

    path = tmp_path_factory.mktemp("q4emb") / "q4emb.gguf"
    return write_gguf(path, tiny_arch(), types=(("token_embd.weight", QT.Q4_0), ("output.weight", QT.Q8_0)), tokenizer=True)


@pytest.mark.parametrize(
    "quantization, at, what",
    [
        ("  default: {keep: source}\n", (6, 19), "quantization.default"),
        ("  default: {bits: 4, block_size: 32}\n", (6, 19), "quantization.default"),
        ("  default: {bits: null}\n  overrides:\n    - {match: 'embed_*', keep: source}\n", (8, 32), "the override 'embed_*'"),
    ],
)
def test_a_quantized_embedding_kept_for_onnx_genai_is_refused_at_the_field_that_keeps_it(tmp_path, q4_embedding_gguf, quantization, at, what):
    source = f"source:\n  gguf: {q4_embedding_gguf}\n"
    err = failure(tmp_path, "quantization:\n" + quantization + "targets: {onnx_genai: {}}\n", source)
    assert err.exit_code is ExitCode.FINDINGS
    (diag,) = err.diagnostics
    assert diag.message.startswith(f"{what} stores embed_tokens.weight quantized (the source's Q4_0, as int4 GatherBlockQuantized block 32)")
    assert (diag.span.line, diag.span.col) == at
    assert diag.hint.startswith("put {match: embed_tokens.weight, bits: null} first in quantization.overrides")


@pytest.mark.parametrize(
    "body",
    [
        "quantization:\n  default: {keep: source}\n  overrides:\n    - {match: embed_tokens.weight, bits: null}\n"
        "targets: {onnx_genai: {}}\n",
        "quantization:\n  default: {bits: 4, block_size: 32}\n  overrides:\n    - {match: embed_tokens.weight, bits: null}\n"
        "targets: {onnx_genai: {}}\n",
        "quantization:\n  default: {keep: source}\ntargets: {onnxruntime_genai: {}}\n",  # no sidecar to borrow it
        "quantization:\n  default: {keep: source}\nmtp: {head: off}\ntargets: {onnx_genai: {}}\n",
    ],
)
def test_a_quantized_embedding_is_fine_dequantized_or_unborrowed(tmp_path, q4_embedding_gguf, body):
    ir, _ = lowered(tmp_path, body, f"source:\n  gguf: {q4_embedding_gguf}\n")
    assert ir.architecture.vocab_size == 256


def test_an_override_matching_no_weight_is_an_error_with_a_guess(tmp_path):
    body = "quantization:\n  overrides:\n    - {match: mtp.fc.weights, bits: null}\n    - {match: 'layers.*', bits: 8}\n"
    (diag,) = failure(tmp_path, body + "targets: {onnxruntime_genai: {}}\n").diagnostics
    assert diag.message == "override 'mtp.fc.weights' matches no weight of this model"
    assert diag.hint == "did you mean 'mtp.fc.weight'?"
    assert (diag.span.line, diag.span.col) == (7, 15)  # "    - {match: mtp.fc.weights, bits: null}"


def test_mtp_overrides_match_nothing_when_the_source_has_no_head(tmp_path):
    body = "quantization:\n  overrides:\n    - {match: 'mtp.*', bits: null}\n"
    lowered(tmp_path, body)
    (diag,) = failure(tmp_path, body, "source:\n  synthetic: {mtp_num_layers: 0}\n").diagnostics
    assert diag.message == "override 'mtp.*' matches no weight of this model"
    assert "no mtp.* weights" in diag.hint


NO_TOKENIZER_NOTE = (
    "the source ships no tokenizer files: the package has none; onnxruntime-genai needs "
    "tokenizer.json to encode text (token ids still work)"
)


ORT_ONLY = "targets: {onnxruntime_genai: {}}\n"


def test_a_source_without_tokenizer_files_gets_a_note(tmp_path):
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch())
    assert not any((tmp_path / "ckpt").glob("tokenizer*"))
    ir, _ = lowered(tmp_path, ORT_ONLY, "source:\n  hf: ckpt\n")
    assert ir.notes == (NO_TOKENIZER_NOTE,)
    write_gguf(tmp_path / "bare.gguf", tiny_arch())
    assert lowered(tmp_path, ORT_ONLY, "source:\n  gguf: bare.gguf\n")[0].notes == (NO_TOKENIZER_NOTE,)


def test_a_source_with_tokenizer_files_or_a_synthetic_one_gets_no_note(tmp_path):
    write_gguf(tmp_path / "tok.gguf", tiny_arch(vocab_size=300), tokenizer=True)  # room for its vocabulary
    assert lowered(tmp_path, "", "source:\n  gguf: tok.gguf\n")[0].notes == ()
    write_hf_checkpoint(tmp_path / "ckpt", tiny_arch())
    (tmp_path / "ckpt" / "tokenizer_config.json").write_text("{}")
    (note,) = lowered(tmp_path, ORT_ONLY, "source:\n  hf: ckpt\n")[0].notes
    assert note.startswith("the source's tokenizer files (tokenizer_config.json) include no tokenizer.json")
    assert lowered(tmp_path, "")[0].notes == ()


@pytest.mark.parametrize("kind", ["hf", "gguf"])
def test_the_onnx_genai_target_needs_a_tokenizer_from_the_source(tmp_path, kind):
    """onnx-genai's Engine::from_dir refuses a folder without tokenizer.json; onnxruntime-genai runs on token ids."""
    if kind == "hf":
        write_hf_checkpoint(tmp_path / "bare", tiny_arch())
    else:
        write_gguf(tmp_path / "bare", tiny_arch())
    source = f"source:\n  {kind}: bare\n"
    (diag,) = failure(tmp_path, "", source).diagnostics  # targets omitted: both are built
    assert diag.message == ("the source gives mtpc no tokenizer.json, and onnx-genai's Engine::from_dir refuses a package "
                            "without one, and targets omitted builds the onnx_genai target too")
    assert (diag.span.line, diag.span.col) == (4, 3) and "list only onnxruntime_genai under targets" in diag.hint
    err = failure(tmp_path, "targets:\n  onnxruntime_genai: {}\n  onnx_genai: {}\n", source)
    assert err.exit_code is ExitCode.FINDINGS
    (diag,) = err.diagnostics
    assert diag.message.endswith("refuses a package without one: the onnx_genai target cannot be built")
    assert (diag.span.line, diag.span.col) == (7, 3)
    assert lowered(tmp_path, ORT_ONLY, source)[0].targets.onnx_genai is None
    with_tokenizer = tmp_path / "with"
    if kind == "hf":
        write_hf_checkpoint(with_tokenizer, tiny_arch(), tokenizer=True)
    else:
        write_gguf(with_tokenizer, tiny_arch(), tokenizer=True)
    assert lowered(tmp_path, "", f"source:\n  {kind}: with\n")[0].targets.onnx_genai is not None


def test_symmetric_false_is_inherited_by_overrides(tmp_path):
    body = "quantization:\n  default: {bits: 4, symmetric: false}\n  overrides:\n    - {match: 'mtp.*', bits: 8}\n"
    plan = lowered(tmp_path, body)[0].quantization
    assert plan.default.symmetric is False and plan.scheme_for("mtp.fc.weight").symmetric is False


def test_symmetric_cannot_be_set_with_keep_source(tmp_path):
    err = failure(tmp_path, "quantization:\n  default: {keep: source, symmetric: false}\n")
    assert err.diagnostics[0].message == "'symmetric' cannot be set together with 'keep: source'"


@pytest.mark.parametrize(
    "targets, line, message",
    [
        ("  onnxruntime_genai: {execution_provider: cpu}\n", 7,
         "precision.io_dtype 'bfloat16' needs execution provider cuda, not 'cpu': onnxruntime has no bfloat16 "
         "kernels for these graphs on cpu"),
        ("  onnx_genai: {}\n", 5, "precision.io_dtype 'bfloat16' needs an onnxruntime_genai target on cuda"),
        ("  onnxruntime_genai: {execution_provider: cuda}\n  onnx_genai: {}\n", 5,
         "precision.io_dtype 'bfloat16' cannot be built with an onnx_genai target: its execution provider is not "
         "chosen by the spec, and CPU has no bfloat16 kernels"),
    ],
)
def test_bfloat16_is_refused_where_no_kernel_takes_it(tmp_path, targets, line, message):
    (diag,) = failure(tmp_path, f"precision: {{io_dtype: bfloat16}}\ntargets:\n{targets}").diagnostics
    assert diag.message == message and diag.span.line == line  # spec lines: 5 precision, 7 the first target


def test_bfloat16_on_cuda_is_accepted(tmp_path):
    ir, _ = lowered(tmp_path, "precision: {io_dtype: bfloat16}\ntargets:\n  onnxruntime_genai: {execution_provider: cuda}\n")
    assert ir.precision.io_dtype == "bfloat16"

