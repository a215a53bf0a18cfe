"""The PagedAttention lowering alone, against the numpy implementation of the op's contract."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from . import reference
from .paged_attention import lower_model

NP_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def one_node_model(num_heads, kv_heads, head_size, elem_type, **attrs):
    node = helper.make_node(
        "PagedAttention",
        ["q", "k", "v", "key_cache", "value_cache", "cu", "past", "table", *[""] * 8, "metadata"],
        ["out", "key_cache_out", "value_cache_out"], name="/layers.0/PagedAttention", domain="com.microsoft",
        num_heads=num_heads, kv_num_heads=kv_heads, **attrs)
    cache = ["num_blocks", "block_size", kv_heads, head_size]
    inputs = [helper.make_tensor_value_info("q", elem_type, ["num_tokens", num_heads * head_size]),
              helper.make_tensor_value_info("k", elem_type, ["num_tokens", kv_heads * head_size]),
              helper.make_tensor_value_info("v", elem_type, ["num_tokens", kv_heads * head_size]),
              helper.make_tensor_value_info("key_cache", elem_type, cache),
              helper.make_tensor_value_info("value_cache", elem_type, cache),
              helper.make_tensor_value_info("cu", TensorProto.INT32, ["batch_size + 1"]),
              helper.make_tensor_value_info("past", TensorProto.INT32, ["batch_size"]),
              helper.make_tensor_value_info("table", TensorProto.INT32, ["batch_size", "max_num_blocks"]),
              helper.make_tensor_value_info("metadata", TensorProto.INT32, [3])]
    outputs = [helper.make_tensor_value_info("out", elem_type, ["num_tokens", num_heads * head_size]),
               helper.make_tensor_value_info("key_cache_out", elem_type, cache),
               helper.make_tensor_value_info("value_cache_out", elem_type, cache)]
    graph = helper.make_graph([node], "paged", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)])


def ragged_case(rng, *, block_size, past, new, kv_heads, num_heads, head_size, dtype, spare_blocks=3):
    """Caches holding random old content, a shuffled block table padded with -1 (unmapped pages)."""
    past, new = np.asarray(past), np.asarray(new)
    blocks_needed = -(-(past + new) // block_size)
    num_blocks = int(blocks_needed.sum()) + spare_blocks
    order = rng.permutation(num_blocks)
    table = np.full((len(past), int(blocks_needed.max()) + 1), -1, np.int32)
    used = 0
    for b, count in enumerate(blocks_needed):
        table[b, :count] = order[used : used + count]
        used += count
    n = int(new.sum())
    cache_shape = (num_blocks, block_size, kv_heads, head_size)
    feeds = {
        "q": rng.standard_normal((n, num_heads * head_size)).astype(dtype),
        "k": rng.standard_normal((n, kv_heads * head_size)).astype(dtype),
        "v": rng.standard_normal((n, kv_heads * head_size)).astype(dtype),
        "key_cache": rng.standard_normal(cache_shape).astype(dtype),
        "value_cache": rng.standard_normal(cache_shape).astype(dtype),
        "cu": np.concatenate([[0], np.cumsum(new)]).astype(np.int32),
        "past": past.astype(np.int32),
        "table": table,
        "metadata": np.array([new.max(), (past + new).max(), (past + new).max()], np.int32),
    }
    return feeds


def run_lowered(model, feeds):
    lowered = lower_model(model)
    assert not any(n.op_type == "PagedAttention" for n in lowered.graph.node)
    onnx.checker.check_model(lowered, full_check=True)
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def expected(feeds, num_heads, kv_heads, **attrs):
    return reference.paged_attention(
        feeds["q"], feeds["k"], feeds["v"], feeds["key_cache"], feeds["value_cache"], feeds["cu"], feeds["past"],
        feeds["table"], num_heads=num_heads, kv_num_heads=kv_heads, **attrs)


# (past lengths, new lengths): a packed prefill, ragged prefills on top of a past, decode steps,
# and a multi-token verify step next to single-token decodes.
RAGGED = [([0, 0, 0], [5, 1, 9]), ([3, 0, 7], [4, 6, 1]), ([11, 2], [1, 1]), ([5, 16, 0, 1], [3, 2, 2, 1])]


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("num_heads, kv_heads", [(4, 4), (4, 2), (6, 2), (8, 1)])
@pytest.mark.parametrize("past, new", RAGGED)
def test_lowering_matches_the_contract_in_float32(block_size, num_heads, kv_heads, past, new):
    rng = np.random.default_rng(block_size * 100 + num_heads * 10 + kv_heads + sum(past))
    feeds = ragged_case(rng, block_size=block_size, past=past, new=new, kv_heads=kv_heads, num_heads=num_heads,
                        head_size=16, dtype=np.float32)
    got = run_lowered(one_node_model(num_heads, kv_heads, 16, TensorProto.FLOAT), feeds)
    out, key_cache, value_cache = expected(feeds, num_heads, kv_heads)
    np.testing.assert_allclose(got["out"], out, atol=2e-6, rtol=0)
    # Every slot: the new tokens written where the block table says, everything else untouched.
    np.testing.assert_array_equal(got["key_cache_out"], key_cache.astype(np.float32))
    np.testing.assert_array_equal(got["value_cache_out"], value_cache.astype(np.float32))


@pytest.mark.parametrize("block_size", [2, 16])
@pytest.mark.parametrize("num_heads, kv_heads", [(4, 2), (8, 2)])
def test_lowering_matches_the_contract_in_float16(block_size, num_heads, kv_heads):
    rng = np.random.default_rng(7 + block_size)
    feeds = ragged_case(rng, block_size=block_size, past=[3, 0, 20], new=[2, 7, 1], kv_heads=kv_heads,
                        num_heads=num_heads, head_size=64, dtype=np.float16)
    got = run_lowered(one_node_model(num_heads, kv_heads, 64, TensorProto.FLOAT16), feeds)
    out, key_cache, _ = expected(feeds, num_heads, kv_heads)
    assert got["out"].dtype == np.float16
    # float32 accumulation, one rounding to float16 at the end: within 2 ulp of outputs below 2.
    np.testing.assert_allclose(got["out"].astype(np.float64), out, atol=2e-3, rtol=0)
    np.testing.assert_array_equal(got["key_cache_out"], key_cache.astype(np.float16))


@pytest.mark.parametrize("attrs", [{"scale": 0.3}, {"softcap": 2.0, "scale": 0.5}, {"local_window_size": 3}])
def test_lowering_honours_scale_softcap_and_window(attrs):
    rng = np.random.default_rng(3)
    feeds = ragged_case(rng, block_size=4, past=[6, 0], new=[3, 8], kv_heads=2, num_heads=4, head_size=16,
                        dtype=np.float32)
    got = run_lowered(one_node_model(4, 2, 16, TensorProto.FLOAT, **attrs), feeds)
    out, _, _ = expected(feeds, 4, 2, **attrs)
    np.testing.assert_allclose(got["out"], out, atol=2e-6, rtol=0)


def test_lowering_reads_old_cache_only_through_the_block_table():
    # Changing a cache slot the table does not map must not change any output row; changing a
    # mapped past slot must.
    rng = np.random.default_rng(11)
    feeds = ragged_case(rng, block_size=4, past=[5, 2], new=[1, 1], kv_heads=2, num_heads=4, head_size=16,
                        dtype=np.float32, spare_blocks=2)
    model = one_node_model(4, 2, 16, TensorProto.FLOAT)
    base = run_lowered(model, feeds)["out"]
    unmapped = sorted(set(range(feeds["key_cache"].shape[0])) - set(feeds["table"].ravel()))
    poked = dict(feeds, key_cache=feeds["key_cache"].copy())
    poked["key_cache"][unmapped] += 100.0
    np.testing.assert_array_equal(run_lowered(model, poked)["out"], base)
    poked["key_cache"][feeds["table"][0, 0], 0] += 1.0  # position 0 of sequence 0
    assert np.abs(run_lowered(model, poked)["out"][0] - base[0]).max() > 1e-3


@pytest.mark.parametrize("attrs, message", [({"do_rotary": 1}, "do_rotary"), ({"kv_cache_layout": "LATENT"}, "LATENT")])
def test_lowering_refuses_what_it_does_not_implement(attrs, message):
    with pytest.raises(NotImplementedError, match=message):
        lower_model(one_node_model(4, 2, 16, TensorProto.FLOAT16, **attrs))
