"""The plain-op form of MLA's absorbed attention (`graphs/latent_attention.py`), the CPU dense default.

- CPU dense graphs (main and MTP head) run it: no GroupQueryAttention node; CUDA keeps GroupQueryAttention.
- Both forms (the kernel table patched to each) compute the numpy reference for a prompt prefilled in chunks
  and decoded (batch 1: GroupQueryAttention refuses a chunk longer than one token after a past in a batch).
- Its mask: a batch of two rows, one left-padded (mask 0 over its pads), prefilled in two chunks longer than
  one token and then decoded, gives each row the numpy reference's logits for the row alone: pads are never
  attended to, and a chunk's tokens see each other causally.
- In onnxruntime-genai 0.18.0, a batch of two greedy rows equals each row decoded alone. (0.18.0 does not pad
  a batch: `append_tokens` with pad ids feeds a mask of ones, so the runtime's batches are equal-length rows.)
"""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mtpc.profiles.kernels import fused_kernels
from mtpc.reference.forward import DecoderReference
from mtpc.weights import ArrayWeightStore
from tests.fixtures.deepseek2_checkpoints import (
    SEED,
    canonical_mla_tensors,
    raw_mla_tensors,
    tiny_mla_arch,
    write_mla_checkpoint,
)
from tests.runtime.conftest import compile_spec, write_spec


def _package(tmp_path, tensors=None, gqa: bool | None = None, io_dtype: str = "float32"):
    """The tiny package for CPU; `gqa` True / False forces that MLA form (None: the CPU default)."""
    arch = tiny_mla_arch()
    folder = write_mla_checkpoint(tmp_path / "release", arch, tensors=tensors)
    spec = write_spec(tmp_path / "spec.yaml", "mla", f"{{hf: {folder.name}}}", f"precision: {{io_dtype: {io_dtype}}}\n")
    if gqa is None:
        return arch, compile_spec(spec, tmp_path / "pkg")
    chosen = replace(fused_kernels("cpu", io_dtype=io_dtype), mla_group_query_attention=gqa)
    with mock.patch("mtpc.emit.onnx_graphs.fused_kernels", lambda *a, **k: chosen):
        return arch, compile_spec(spec, tmp_path / "pkg")


def _op_types(path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_cpu_dense_graphs_run_the_plain_form_and_cuda_keeps_group_query_attention(tmp_path):
    arch, package = _package(tmp_path, raw_mla_tensors(tiny_mla_arch(), SEED))
    for graph in (package / "model.onnx", package / "mtp" / "mtp.onnx"):
        ops = _op_types(graph)
        assert "GroupQueryAttention" not in ops and {"Softmax", "Where"} <= ops, graph.name
    assert not fused_kernels("cpu").mla_group_query_attention
    assert not fused_kernels("cpu", io_dtype="float16").mla_group_query_attention
    assert fused_kernels("cuda").mla_group_query_attention


class _Batch:
    """model.onnx on onnxruntime, fed a batch as onnxruntime-genai feeds one: the mask over past + new columns,
    positions counting each row's real tokens (a pad's position is 0 and never read)."""

    def __init__(self, path, batch: int = 2, dtype=np.float32):
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        self.past = {i.name: np.zeros((batch, 1, 0, i.shape[3]), dtype) for i in self.session.get_inputs()
                     if i.name.startswith("past_key_values.")}
        self.mask = np.zeros((batch, 0), np.int64)

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        self.mask = np.concatenate([self.mask, mask], axis=1)
        positions = np.maximum(np.cumsum(self.mask, axis=1) - 1, 0)[:, -ids.shape[1]:]
        out = dict(zip(self.names, self.session.run(self.names, {"input_ids": ids, "attention_mask": self.mask,
                                                                   "position_ids": positions, **self.past})))
        self.past = {n: out[n.replace("past_key_values.", "present.")] for n in self.past}
        return out["logits"]


@pytest.mark.parametrize("io_dtype, tolerance", [("float32", 2e-3), ("float16", 2e-2)])  # float16: 5e-3 seen
@pytest.mark.parametrize("gqa", [True, False])
def test_both_forms_compute_the_reference_for_a_prompt_in_chunks(tmp_path, gqa, io_dtype, tolerance):
    raw = raw_mla_tensors(tiny_mla_arch(), SEED)
    arch, package = _package(tmp_path, raw, gqa=gqa, io_dtype=io_dtype)
    assert ("GroupQueryAttention" in _op_types(package / "model.onnx")) is gqa
    reference = DecoderReference(arch, ArrayWeightStore(canonical_mla_tensors(arch, raw)))
    rows = np.asarray([[45, 12, 77, 30, 61, 8]], np.int64)
    graph = _Batch(package / "model.onnx", batch=1, dtype=np.float16 if io_dtype == "float16" else np.float32)
    ones = np.ones((1, 3), np.int64)
    logits = np.concatenate([graph.run(rows[:, :3], ones), graph.run(rows[:, 3:], ones),
                             graph.run(np.asarray([[7]], np.int64), ones[:, :1])], axis=1)
    expected, *_ = reference.forward(np.concatenate([rows, [[7]]], axis=1))
    np.testing.assert_allclose(logits.astype(np.float64), expected, rtol=tolerance, atol=tolerance)


def test_a_left_padded_batch_prefilled_in_chunks_decodes_each_row_as_alone(tmp_path):
    raw = raw_mla_tensors(tiny_mla_arch(), SEED)
    arch, package = _package(tmp_path, raw)
    reference = DecoderReference(arch, ArrayWeightStore(canonical_mla_tensors(arch, raw)))
    rows = [[45, 12, 77, 30, 61, 8, 19, 23], [20, 66, 39, 91, 5]]
    pads = 8 - len(rows[1])
    ids = np.asarray([rows[0], [0] * pads + rows[1]], np.int64)
    mask = np.asarray([[1] * 8, [0] * pads + [1] * len(rows[1])], np.int64)
    graph = _Batch(package / "model.onnx")
    # Two chunks of four: the second row's first chunk is three pads and one real token.
    logits = np.concatenate([graph.run(ids[:, :4], mask[:, :4]), graph.run(ids[:, 4:], mask[:, 4:])], axis=1)
    steps = [[7, 90], [33, 4]]  # two decoded tokens per row
    for t in range(2):
        step = np.asarray([[steps[0][t]], [steps[1][t]]], np.int64)
        logits = np.concatenate([logits, graph.run(step, np.ones((2, 1), np.int64))], axis=1)
    for r, row in enumerate(rows):
        expected, *_ = reference.forward(np.asarray([row + steps[r]]))
        real = logits[r, 8 - len(row):]  # the row's own columns: its pads' logits are nobody's
        np.testing.assert_allclose(real.astype(np.float64), expected[0], rtol=2e-3, atol=2e-3, err_msg=f"row {r}")


def test_onnxruntime_genai_decodes_a_batch_of_two_as_each_row_alone(tmp_path):
    import onnxruntime_genai as og

    _, package = _package(tmp_path)  # the fitted checkpoint: greedy rows that reach no special token
    model = og.Model(str(package))
    prompts = [[45, 12, 77, 30, 61, 8], [20, 66, 39, 91, 5, 52]]
    steps = 6

    def decode(batch: list[list[int]]) -> list[list[int]]:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(batch[0]) + steps, batch_size=len(batch))
        generator = og.Generator(model, params)
        generator.append_tokens(np.asarray(batch, np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        return [[int(t) for t in generator.get_sequence(i)][len(batch[0]):] for i in range(len(batch))]

    alone = [decode([p])[0] for p in prompts]
    assert alone[0] != alone[1]
    assert decode(prompts) == alone
