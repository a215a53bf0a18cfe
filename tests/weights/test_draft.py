"""The head's own LM head (`mtp.lm_head.weight`): rows of `lm_head.weight` in the source's own encoding."""

from __future__ import annotations

import numpy as np
import pytest

from mtpc.util.arrays import Bfloat16Rows
from mtpc.weights import ArrayWeightStore, QuantizedRows
from mtpc.weights.draft import OWN_LM_HEAD, WithOwnLmHead, select_rows
from mtpc.weights.quant import quantize_linear
from tests.fixtures.safetensors_writer import to_bfloat16_bits

RNG = np.random.default_rng(7)
W = RNG.standard_normal((9000, 64)).astype(np.float32)  # more rows than a slab: the gather crosses slabs
IDS = np.array([0, 5, 4095, 4096, 4097, 8191, 8999])


def test_float_rows_are_the_rows_asked_for():
    np.testing.assert_array_equal(select_rows(W, IDS), W[IDS])


def test_bfloat16_rows_stay_raw_until_widened():
    bits = to_bfloat16_bits(W)
    chosen = select_rows(Bfloat16Rows(bits), IDS)
    assert isinstance(chosen, Bfloat16Rows)
    np.testing.assert_array_equal(chosen.bits, bits[IDS])


@pytest.mark.parametrize("lazy", [False, True])
def test_block_quantized_rows_keep_their_blocks(lazy):
    q = quantize_linear(W, 4, 32)
    source = QuantizedRows.of(q) if lazy else q
    chosen = select_rows(source, IDS)
    assert (chosen.bits, chosen.block_size, chosen.shape) == (4, 32, (len(IDS), 64))
    np.testing.assert_array_equal(chosen.data, q.data[IDS])
    np.testing.assert_array_equal(chosen.scales, q.scales[IDS])
    np.testing.assert_array_equal(chosen.dequantize(), q.dequantize()[IDS])


def test_the_store_serves_the_copy_beside_every_source_weight():
    store = WithOwnLmHead(ArrayWeightStore({"lm_head.weight": W, "norm.weight": W[0]}), IDS)
    assert OWN_LM_HEAD in store.names() and "norm.weight" in store.names()
    assert store.info(OWN_LM_HEAD).shape == (len(IDS), 64)
    np.testing.assert_array_equal(store.read(OWN_LM_HEAD), W[IDS])
    np.testing.assert_array_equal(store.read("lm_head.weight"), W)
    whole = WithOwnLmHead(ArrayWeightStore({"lm_head.weight": W}))
    assert whole.info(OWN_LM_HEAD).shape == W.shape
    np.testing.assert_array_equal(whole.read_float(OWN_LM_HEAD), W)
