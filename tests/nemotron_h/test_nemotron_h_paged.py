"""The paged (packed `[N, X]`) Nemotron-H graph on CPU through the test-only PagedAttention lowering (tests/lowering),
against the numpy reference per sequence: a packed prefill of three sequences, a ragged step and a decode step.
Its Mamba2 layers run GatedDeltaNet with the `gated` rule (q = C, k = B in 2 groups, no beta) and
VarlenCausalConvWithState with the conv's bias, their states one row per sequence; its relu² experts are the
CUDA `relu2` kernel's layout, lowered for CPU (tests/lowering/moe_relu2.py). Float32 I/O is also run, with the
builder's dtype guard widened as tests/lowering/test_paged_package.py does, so wiring mistakes are not hidden by
float16 noise.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import onnx_ir as oir
import pytest

from mtpc.graphs import paged as paged_graphs
from mtpc.ir import HeadContract
from mtpc.reference.forward import DecoderReference
from tests.fixtures.nemotron_h_checkpoints import fitted_nemotron_store, tiny_nemotron_arch
from tests.graphs.tiny import emit, make_ir
from tests.lowering.moe_relu2 import lower_model as lower_relu2
from tests.lowering.paged_runner import BlockPool, PagedRunner, decode_as_the_reference, lowered_session

PROMPTS = [[45, 12, 77, 30, 61], [20, 66, 39], [8, 91, 5, 52, 33, 70, 14]]
STEPS = [[[13, 14], [40], [77, 78, 79]], [[21], [41], [80]]]
BLOCK_SIZE = 4
TOLERANCE = {"float32": 1e-4, "float16": 3e-2}


@pytest.mark.parametrize("io_dtype", ["float32", "float16"])
def test_the_paged_graph_decodes_each_sequence_as_the_reference(tmp_path, io_dtype):
    arch = tiny_nemotron_arch()
    store = fitted_nemotron_store(arch)
    ir = make_ir(arch, io_dtype=io_dtype, paged=True, heads=(HeadContract.ORT_GENAI,))
    ir = replace(ir, main=replace(ir.main, execution_provider="cuda"))  # the CUDA graph: relu2 experts, fused kernels
    with pytest.MonkeyPatch.context() as patch:
        if io_dtype == "float32":
            patch.setattr(paged_graphs, "PAGED_IO_DTYPES", (*paged_graphs.PAGED_IO_DTYPES, oir.DataType.FLOAT))
        emit(ir, store, tmp_path / "pkg")
    graph = tmp_path / "pkg" / "model.onnx"
    model = onnx.load(str(graph), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("GatedDeltaNet") == ops.count("VarlenCausalConvWithState") == 2
    assert {a.s for n in model.graph.node if n.op_type == "GatedDeltaNet" for a in n.attribute if a.name == "update_rule"} == {b"gated"}
    onnx.save(lower_relu2(model, graph.parent), str(graph))
    longest = max(len(p) + sum(len(s[b]) for s in STEPS) for b, p in enumerate(PROMPTS))
    pool = BlockPool(len(PROMPTS), BLOCK_SIZE, longest, seed=1)
    main = PagedRunner(lowered_session(graph), pool, len(PROMPTS))
    tol = TOLERANCE[io_dtype]
    result, ref_states = decode_as_the_reference(main, DecoderReference(arch, store), [PROMPTS, *STEPS], tol)
    for b, ref_state in enumerate(ref_states):
        for i, want in ref_state.recurrent.items():  # V-major [B, H, P, N] against the reference's [B, H, N, P]
            got = result[f"present.{i}.recurrent"][b].astype(np.float64)
            assert np.abs(got - want[0].transpose(0, 2, 1)).max() <= tol, (i, b)
