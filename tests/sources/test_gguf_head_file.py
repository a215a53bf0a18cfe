"""A GGUF target and its MTP head's own file (sources/gguf/head_file.py, siblings.py): read as the one-file GGUF,
paired from beside the target as llama.cpp pairs one, and each way a head file is not its target's refused,
naming both files. llama.cpp's converter's own two files are compiled in tests/conformance/test_llama_cpp_two_files.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mtpc.ir import SourceRef
from mtpc.sources.gguf import reader as gguf
from mtpc.sources.gguf.head_file import check_shared_values, open_source
from mtpc.sources.gguf.siblings import auto_pair, quant_bits, unread_siblings
from mtpc.util.diagnostics import SourceError
from tests.fixtures.arch import tiny_arch
from tests.fixtures.gguf_writer import write_gguf
from tests.fixtures.two_file_gguf import split


@pytest.fixture(scope="module")
def one_file(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("one") / "Tiny-F32.gguf", tiny_arch(), seed=0, recurrent_layers=True,
                      tokenizer=True)


def _split(one_file: Path, folder: Path, target="Tiny-298K-F32.gguf", head="mtp-Tiny-F32.gguf", **changes):
    folder.mkdir(parents=True, exist_ok=True)
    return split(one_file, folder / target, folder / head, **changes)


def test_the_two_files_read_as_the_one_file(one_file, tmp_path):
    target, head = _split(one_file, tmp_path)
    one, two = SourceRef("gguf", str(one_file)), SourceRef("gguf", str(target), head=str(head))
    one_info, two_info = gguf.describe(one), gguf.describe(two)
    assert two_info.architecture == one_info.architecture and two_info.architecture.mtp_num_layers == 1
    assert two_info.tensors == one_info.tensors
    one_store, two_store = gguf.open_weights(one, one_info), gguf.open_weights(two, two_info)
    for name in one_store.names():
        np.testing.assert_array_equal(two_store.read_float(name), one_store.read_float(name), err_msg=name)
    assert dict(two_info.facts)["mtp_head_file"] == head.name
    two_info.weight_checks()  # the copies are the target's


def test_the_target_alone_says_the_head_file_would_add_mtp(one_file, tmp_path):
    target, _ = _split(one_file, tmp_path)
    info = gguf.describe(SourceRef("gguf", str(target)))
    assert info.architecture.mtp_num_layers == 0 and info.architecture.unusable_head.absent
    assert "which would add MTP" in info.architecture.unusable_head.reason


@pytest.mark.parametrize("name,bits", [("Hf-265K-F32.gguf", 32), ("mtp-Hf-F32.gguf", 32), ("Qwen3.5-27B-Q4_K_M.gguf", 4),
                                       ("m-BF16.gguf", 16), ("m.Q8_0.gguf", 8), ("m-IQ2_XXS.gguf", 2),
                                       ("m-Q6_K-00001-of-00003.gguf", 6), ("model.gguf", 0), ("m-F.gguf", 0)])
def test_quant_bits_reads_the_tag_as_llama_cpp_does(name, bits):
    assert quant_bits(name) == bits


def test_the_sibling_nearest_the_targets_quantization_is_paired_the_first_on_a_tie(one_file, tmp_path):
    target, head = _split(one_file, tmp_path, target="Tiny-Q4_K_M.gguf", head="mtp-Tiny-F16.gguf")
    for name in ("mtp-Tiny-Q8_0.gguf", "mtp-Tiny-Q6_K.gguf", "mtp-Other-Q6_K.gguf"):
        (tmp_path / name).write_bytes(head.read_bytes())
    pairing = auto_pair(str(target))
    assert pairing.head == str(tmp_path / "mtp-Other-Q6_K.gguf")  # |6 - 4| beats |8 - 4|; of two Q6_K, the first name
    assert "chosen over mtp-Tiny-F16.gguf, mtp-Tiny-Q6_K.gguf, mtp-Tiny-Q8_0.gguf" in pairing.notes[0]


def test_another_models_head_file_beside_the_target_is_passed_over_with_a_note(one_file, tmp_path):
    target, head = _split(one_file, tmp_path)
    (tmp_path / "other").mkdir()
    split(one_file, tmp_path / "other" / "Wide.gguf", tmp_path / "mtp-Wide-F32.gguf",
          head_fields={"qwen35.embedding_length": 128})
    pairing = auto_pair(str(target))
    assert pairing.head == str(head)
    assert any("mtp-Wide-F32.gguf beside the target is not its MTP head (qwen35.embedding_length is 128 there, 64 in "
               "the target): not paired" in n for n in pairing.notes), pairing.notes
    assert unread_siblings(str(target)) == (f"source.head is 'off': {head.name} beside the target holds its MTP head "
                                            "and is not read",)


def test_a_target_with_its_own_head_pairs_nothing(one_file, tmp_path):
    _split(one_file, tmp_path)
    own = tmp_path / "Tiny-with-head.gguf"
    own.write_bytes(one_file.read_bytes())
    assert auto_pair(str(own)).head is None and unread_siblings(str(own)) == ()


def _refusal(target: Path, head: Path) -> str:
    with pytest.raises(SourceError) as refused:
        open_source(str(target), str(head))
    message = refused.value.diagnostics[0].message
    assert message.startswith(f"{head} is not the MTP head of {target}: "), message
    return message.split(": ", 1)[1]


@pytest.mark.parametrize("changes,reason", [
    ({"head_fields": {"qwen35.embedding_length": 65}}, "qwen35.embedding_length is 65 there, 64 in the target"),
    ({"head_fields": {"qwen35.rope.freq_base": 5e5}}, "qwen35.rope.freq_base is 500000.0 there, 10000.0 in the target"),
    ({"head_fields": {"qwen35.nextn_predict_layers": 0}}, "it holds no MTP head (qwen35.nextn_predict_layers is absent or 0)"),
    ({"target_fields": {"qwen35.block_count": 3}}, "its head block is blk.4, after a 4-block trunk, and the target's "
                                                   "trunk has 3 blocks (qwen35.block_count)"),
    ({"head_fields": {"qwen35.attention.recurrent_layers": [False, True, True, False, False]}},
     "qwen35.attention.recurrent_layers is [False, True, True, False] there, [True, False, True, False] in the target"),
    ({"head_omit": ("output.weight",)}, "only the target holds output.weight (the other ties its LM head to the embedding)"),
    ({"head_fields": {"tokenizer.ggml.tokens": [f"t{i}" for i in range(256)]}},
     "tokenizer.ggml.tokens differs at entry 0: 't0' there, '<|pad|>' in the target"),
])
def test_a_head_file_of_another_model_is_refused_naming_both_files(one_file, tmp_path, changes, reason):
    target, head = _split(one_file, tmp_path, **changes)
    assert _refusal(target, head) == reason


def test_a_head_file_of_another_architecture_is_refused(one_file, tmp_path):
    target, _ = _split(one_file, tmp_path)
    moe = write_gguf(tmp_path / "moe.gguf", tiny_arch(), seed=0, gguf_arch="qwen3next")
    _, head = split(moe, tmp_path / "moe-target.gguf", tmp_path / "mtp-Moe-F32.gguf")
    assert _refusal(target, head) == "it is a 'qwen3next' model, the target a 'qwen35' one"


def test_a_whole_model_or_a_target_with_its_own_head_is_refused(one_file, tmp_path):
    target, head = _split(one_file, tmp_path)
    assert _refusal(target, one_file) == ("it holds a whole model, not only an MTP head (blk.0.attn_norm.weight and the "
                                          "other trunk blocks are there)")
    assert _refusal(one_file, head) == ("the target holds its own MTP head (qwen35.nextn_predict_layers is 1): compile "
                                        "it alone, without `head:`")


def test_a_copy_of_another_shape_is_refused_from_the_header(one_file, tmp_path):
    target, head = _split(one_file, tmp_path, head_edit={"output_norm.weight": lambda w: np.concatenate([w, w])})
    assert _refusal(target, head) == "its output_norm.weight has shape [128], the target's [64]"


@pytest.mark.parametrize("edit,refused", [(lambda w: w, False), (lambda w: w + np.float32(1e-3), True),
                                          (lambda w: w[::-1], True)])
def test_copies_stored_alike_are_held_to_the_targets_bytes(one_file, tmp_path, edit, refused):
    target, head = _split(one_file, tmp_path, head_edit={"token_embd.weight": edit})
    pair = open_source(str(target), str(head))  # the headers agree
    if not refused:
        check_shared_values(pair)
        return
    with pytest.raises(SourceError, match="its token_embd.weight holds other values than the target's, so it belongs "
                                          "to another model"):
        check_shared_values(pair)


@pytest.mark.parametrize("edit,refused", [(lambda w: w, False), (lambda w: w[::-1], True)])
def test_copies_stored_otherwise_are_compared_by_correlation_and_named(one_file, tmp_path, edit, refused):
    from gguf import GGMLQuantizationType as QT

    from tests.fixtures.gguf_requantize import requantize

    target, head = _split(one_file, tmp_path, head_edit={"token_embd.weight": edit})
    quantized = requantize(head, tmp_path / "mtp-Tiny-Q8_0.gguf", ("token_embd.weight", "output.weight"), QT.Q8_0)
    info = gguf.describe(SourceRef("gguf", str(target), head=str(quantized)))
    assert any("token_embd.weight is F32 in the target, Q8_0 in the head file" in n for n in info.notes), info.notes
    if not refused:
        info.weight_checks()
        return
    with pytest.raises(SourceError, match=r"holds other values than the target's \(correlation -?0\.\d+ of their "
                                          r"values, F32 and Q8_0\)"):
        info.weight_checks()


def test_a_head_only_file_named_as_the_model_says_how_to_compile_it(one_file, tmp_path):
    _, head = _split(one_file, tmp_path)
    with pytest.raises(SourceError, match=r"a GGUF holding only an MTP head \(llama.cpp's `--mtp` output: blk.4 and "
                                          r"copies of the tensors it shares with a 4-block trunk\), not a model: name its "
                                          r"target as `gguf:` and this file as `head:`"):
        gguf.describe(SourceRef("gguf", str(head)))
