"""The draft vocabulary's ranking: what a tokenizer and a counts file say about which tokens are common."""

from __future__ import annotations

import json

from mtpc.sources.info import SourceInfo
from mtpc.sources.token_ranking import counts_ranking, tokenizer_ranking
from tests.fixtures.arch import tiny_arch


def _info(arch, tokenizer: dict | None) -> SourceInfo:
    files = () if tokenizer is None else (("tokenizer.json", json.dumps(tokenizer).encode()),)
    return SourceInfo(arch, tokenizer=files)


def test_specials_then_base_tokens_then_merges_in_merge_order_then_added_then_the_rest():
    arch = tiny_arch(vocab_size=12)  # bos 1, eos 2, pad 0
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "a": 3, "b": 4, "c": 5, "bc": 6, "ab": 7, "abc": 8}
    tokenizer = {
        "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", ["b", "c"], "ab c"]},
        "added_tokens": [{"id": 9, "content": "<|tool|>"}],
    }
    ranking, how = tokenizer_ranking(_info(arch, tokenizer), arch)
    # The merge list makes "ab" first, then "bc", then "abc"; specials as the architecture names them.
    assert ranking == [1, 2, 0, 3, 4, 5, 7, 6, 8, 9, 10, 11]
    assert "3 merges" in how


def test_without_a_tokenizer_ids_rank_in_order_after_the_specials():
    arch = tiny_arch(vocab_size=8)
    ranking, how = tokenizer_ranking(_info(arch, None), arch)
    assert ranking == [1, 2, 0, 3, 4, 5, 6, 7]
    assert "no tokenizer.json" in how


def test_a_tokenizer_larger_or_smaller_than_the_model_is_cut_or_completed():
    arch = tiny_arch(vocab_size=5)
    vocab = {"a": 4, "b": 3, "zz": 7}
    ranking, _ = tokenizer_ranking(_info(arch, {"model": {"type": "BPE", "vocab": vocab, "merges": []}}), arch)
    assert ranking == [1, 2, 0, 3, 4]


def test_counts_rank_first_and_ties_keep_the_tokenizers_order():
    fallback = [1, 2, 0, 3, 4, 5, 6]
    assert counts_ranking({5: 10, 4: 10, 6: 3}, fallback) == [4, 5, 6, 1, 2, 0, 3]
    assert counts_ranking({}, fallback) == fallback
