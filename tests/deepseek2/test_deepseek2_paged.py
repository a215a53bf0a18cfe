"""The paged (packed `[N, X]`) MLA graph on CPU through the test-only PagedAttention lowering (tests/lowering),
against the decompressed numpy reference per sequence: a packed prefill of three sequences, a ragged step and a
decode step, the block pool holding each sequence's latent `[rope(k_rope) | c]` as its one KV head.

mtpc emits paged graphs in float16 only; float32 I/O is also run here with the builder's dtype guard widened for
the test, as tests/lowering/test_paged_package.py does, so wiring mistakes are not hidden by float16 noise.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir
import pytest

from mtpc.graphs import paged as paged_graphs
from mtpc.ir import HeadContract
from mtpc.reference.forward import DecoderReference
from tests.fixtures.deepseek2_checkpoints import fitted_mla_store, tiny_mla_arch
from tests.graphs.tiny import emit, make_ir
from tests.lowering.paged_runner import BlockPool, PagedRunner, decode_as_the_reference, lowered_session

PROMPTS = [[45, 12, 77, 30, 61], [20, 66, 39], [8, 91, 5, 52, 33, 70, 14]]
STEPS = [[[13, 14], [40], [77, 78, 79]], [[21], [41], [80]]]
BLOCK_SIZE = 4
TOLERANCE = {"float32": 1e-4, "float16": 2e-2}


@pytest.mark.parametrize("io_dtype", ["float32", "float16"])
def test_the_paged_graph_decodes_each_sequence_as_the_reference(tmp_path, io_dtype):
    arch, store = tiny_mla_arch(), fitted_mla_store(tiny_mla_arch())
    with pytest.MonkeyPatch.context() as patch:
        if io_dtype == "float32":
            patch.setattr(paged_graphs, "PAGED_IO_DTYPES", (*paged_graphs.PAGED_IO_DTYPES, oir.DataType.FLOAT))
        emit(make_ir(arch, io_dtype=io_dtype, paged=True, heads=(HeadContract.ORT_GENAI,)), store, tmp_path / "pkg")
    longest = max(len(p) + sum(len(s[b]) for s in STEPS) for b, p in enumerate(PROMPTS))
    pool = BlockPool(len(PROMPTS), BLOCK_SIZE, longest, seed=1)
    main = PagedRunner(lowered_session(tmp_path / "pkg" / "model.onnx"), pool, len(PROMPTS))
    tol = TOLERANCE[io_dtype]
    result, ref_states = decode_as_the_reference(main, DecoderReference(arch, store), [PROMPTS, *STEPS], tol)
    for b, ref_state in enumerate(ref_states):
        blocks, offsets = pool.slots(b, ref_state.length)
        for i, (keys, values) in ref_state.kv.items():
            for name, want in ((f"present.{i}.key", keys), (f"present.{i}.value", values)):
                got = result[name][blocks, offsets]  # [T, 1, latent_dim] against the reference's [1, T, latent_dim]
                assert np.abs(got.astype(np.float64) - want[0].transpose(1, 0, 2)).max() <= tol, (name, b)
