"""`mtpc.util.arrays` gives exactly the bytes of the plain numpy expressions it replaces."""

import numpy as np
import pytest

from mtpc.util.arrays import Bfloat16Rows, slab_rows, transposed, transposed_chunks, widen_bfloat16


def _bits(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    # Every class of value bfloat16 holds: zeros of both signs, infinities, NaNs, subnormals.
    special = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x807F], np.uint16)
    flat = bits.reshape(-1)
    flat[: min(len(special), flat.size)] = special[: flat.size]
    return bits


def _numpy_widened(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (300, 129), (2, 3, 4), ()])
def test_widen_bfloat16_is_the_upper_half_of_each_float32(shape):
    bits = _bits(shape)
    assert widen_bfloat16(bits).tobytes() == _numpy_widened(bits).tobytes()


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (129, 257), (300, 64), (64, 300)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_transposed_matches_numpy(shape, dtype):
    w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    assert transposed(w, dtype).tobytes() == np.ascontiguousarray(w.T.astype(dtype)).tobytes()
    bits = _bits(shape, seed=2)
    want = np.ascontiguousarray(_numpy_widened(bits).T.astype(dtype))
    assert transposed(Bfloat16Rows(bits), dtype).tobytes() == want.tobytes()


def test_bfloat16_rows_widen_only_the_rows_asked_for():
    bits = _bits((10, 6))
    rows = Bfloat16Rows(bits)
    assert rows.shape == (10, 6) and len(rows) == 10
    assert rows[2:5].tobytes() == _numpy_widened(bits[2:5]).tobytes()
    assert np.asarray(rows).tobytes() == _numpy_widened(bits).tobytes()


def test_a_bfloat16_weight_is_quantized_a_few_rows_at_a_time_to_the_same_bytes():
    from mtpc.weights.quant import quantize_linear

    class NeverWhole(Bfloat16Rows):
        def __array__(self, dtype=None, copy=None):
            raise AssertionError("the whole float32 copy was asked for")

        def __getitem__(self, rows):
            assert rows.stop - rows.start < self.shape[0], "all rows at once"
            return super().__getitem__(rows)

    values = np.random.default_rng(3).standard_normal((4096, 96)).astype(np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # finite weights; more rows than one chunk holds
    for symmetric in (True, False):
        chunked = quantize_linear(NeverWhole(bits), 4, 32, symmetric=symmetric)
        whole = quantize_linear(_numpy_widened(bits), 4, 32, symmetric=symmetric)
        assert chunked.data.tobytes() == whole.data.tobytes() and chunked.scales.tobytes() == whole.scales.tobytes()
        if not symmetric:
            assert chunked.zero_points.tobytes() == whole.zero_points.tobytes()


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (129, 257), (300, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("rows", [1, 7, 64, 1000])
def test_transposed_slabs_joined_are_the_transposed_bytes(shape, dtype, rows):
    bits = _bits(shape, seed=2)
    for w in (_numpy_widened(bits), Bfloat16Rows(bits)):
        slabs = list(transposed_chunks(w, dtype, rows))
        assert all(s.shape[0] <= rows for s in slabs)
        assert np.concatenate(slabs).tobytes() == transposed(w, dtype).tobytes()
    assert slab_rows(shape[0], dtype, 4096) == max(1, 4096 // (shape[0] * np.dtype(dtype).itemsize))
