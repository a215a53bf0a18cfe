"""onnxruntime-genai 0.18.0's own paged exports of the tiny checkpoint, computed through the lowering.

Graphs no one here wrote: the 0.18.0 model builder (shipped in the wheel) exports the tiny HF
checkpoint paged, (a) with its MTP head and `state_update_capacity`, (b) text-only with
`prune_lm_head`. Run on CPU through the PagedAttention lowering, they must match the numpy
reference: this checks the lowering on another author's graphs, the engine-side reading of the
compact state updates (`reference.replay_*`) against the builder's wiring, and the pruned-logits
binding as the builder implements it. Our pruned text-only contract must equal export (b)'s I/O.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from mtpc import sources
from mtpc.ir import LayerKind, SourceRef
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from tests.fixtures.arch import tiny_arch
from tests.fixtures.checkpoints import write_hf_checkpoint
from tests.graphs.tiny import graph_io, presents_as_past
from tests.passes.ir_factory import CUDA_PAGED, compiled

from . import reference as replay
from .paged_runner import BlockPool, PagedRunner, lowered_session, rows_of

PROMPTS = [[3, 17, 42, 9, 250], [7, 128, 64], [11, 5, 200, 31, 8, 99, 2]]
VERIFY = [[13, 60, 61], [40], [77, 30]]  # last token + 2, 0 and 1 drafts (capacity 2)
CAPACITY = 2
TOL = 2e-2  # float16 graphs against the float64 reference (the pruned export measured 6.7e-3)


def export(checkpoint: Path, out: Path, *options: str) -> Path:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HOME": str(out.parent)}
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(out),
               "-p", "fp16", "-e", "cuda", "-c", str(out.parent / f"{out.name}-cache"), "--extra_options",
               "hf_token=false", "exclude_embeds=false", "use_paged_attention=true", "paged_block_size=16", *options]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("builder-paged")
    directory = write_hf_checkpoint(root / "ckpt", tiny_arch())
    ref = SourceRef("hf", path=str(directory))
    info = sources.describe(ref)
    store = sources.open_weights(ref, info)
    return root, directory, info.architecture, store


@pytest.fixture(scope="module")
def with_head(checkpoint):
    root, directory, _, _ = checkpoint
    return export(directory, root / "mtp-su", f"state_update_capacity={CAPACITY}", f"max_draft_tokens={CAPACITY}")


@pytest.fixture(scope="module")
def pruned(checkpoint):
    root, directory, _, _ = checkpoint
    return export(directory, root / "pruned", "prune_lm_head=true", "exclude_mtp=true")


def capture(counts, active):
    return {"state_update_capture_count": np.array(counts, np.int32), "state_update_active": np.array([active], np.int32)}


def test_builder_export_with_head_and_state_updates_matches_the_reference(checkpoint, with_head):
    _, _, arch, store = checkpoint
    reference = Qwen35Reference(arch, store)
    batch = len(PROMPTS)
    main = PagedRunner(lowered_session(with_head / "model.onnx"), BlockPool(batch, 16, 16, seed=5), batch)
    prefill = main.run(PROMPTS, [0] * batch, main.initial_state(), **capture([0] * batch, 0))
    before = presents_as_past(prefill)
    drafts = [len(v) - 1 for v in VERIFY]
    prompt_lengths, verify_lengths = [len(p) for p in PROMPTS], [len(v) for v in VERIFY]
    step = main.run(VERIFY, prompt_lengths, before, **capture(drafts, 1))
    linear = arch.layers_of(LayerKind.LINEAR_ATTENTION)
    for b, prompt in enumerate(PROMPTS):
        logits, hidden, _, after_prompt = reference.forward(np.array([prompt]))
        assert np.abs(rows_of(prefill["logits"], prompt_lengths, b) - logits[0]).max() <= TOL
        assert np.abs(rows_of(prefill["hidden_states"], prompt_lengths, b) - hidden[0]).max() <= TOL
        logits, _, _, _ = reference.forward(np.array([VERIFY[b]]), after_prompt)
        assert np.abs(rows_of(step["logits"], verify_lengths, b) - logits[0]).max() <= TOL
        for kept in range(1, drafts[b] + 1):  # partial acceptance: rebuilt from the captures
            _, _, _, want = reference.forward(np.array([VERIFY[b][:kept]]), after_prompt)
            for i in linear:
                conv = replay.replay_conv(before[f"past.{i}.conv"][b], step[f"state_update.{i}.conv_value"][b], kept)
                recurrent = replay.replay_recurrent(before[f"past.{i}.recurrent"][b],
                                                    step[f"state_update.{i}.recurrent_capsule"][b], kept,
                                                    capacity=CAPACITY, key_heads=arch.linear_attention.num_key_heads)
                assert np.abs(conv - want.conv[i][0]).max() <= TOL, (b, kept, i)
                assert np.abs(recurrent - want.recurrent[i][0].transpose(0, 2, 1)).max() <= TOL, (b, kept, i)

    # The builder's head on the packed seeds, as ours in test_paged_package.py.
    head = PagedRunner(lowered_session(with_head / "mtp.onnx"), BlockPool(batch, 16, 16, seed=6), batch)
    ids = [p[1:] + [v[0]] for p, v in zip(PROMPTS, VERIFY)]
    positions = np.concatenate([np.arange(1, 1 + n) for n in prompt_lengths])
    out = head.run(ids, [0] * batch, head.initial_state(), hidden_states=prefill["hidden_states"],
                   position_ids=np.broadcast_to(positions, (3, positions.size)).copy())
    head_reference = MtpHeadReference(arch, store)
    for b in range(batch):
        seed = rows_of(prefill["hidden_states"], prompt_lengths, b).astype(np.float64)
        logits, hidden, _ = head_reference.forward(np.array([ids[b]]), seed[None], np.arange(1, 1 + prompt_lengths[b])[None])
        assert np.abs(rows_of(out["logits"], prompt_lengths, b) - logits[0]).max() <= TOL
        assert np.abs(rows_of(out["hidden_states_out"], prompt_lengths, b) - hidden[0]).max() <= TOL


def test_builder_pruned_export_selects_logits_rows_like_ours(checkpoint, pruned):
    _, _, arch, store = checkpoint
    reference = Qwen35Reference(arch, store)
    batch = len(PROMPTS)
    main = PagedRunner(lowered_session(pruned / "model.onnx"), BlockPool(batch, 16, 16, seed=7), batch)
    lengths = [len(p) for p in PROMPTS]
    prefill = main.run(PROMPTS, [0] * batch, main.initial_state(),
                       logits_indices=(np.cumsum(lengths) - 1).astype(np.int32))
    assert prefill["logits"].shape == (batch, 256)
    for b, prompt in enumerate(PROMPTS):
        assert np.abs(prefill["logits"][b] - reference.forward(np.array([prompt]))[0][0, -1]).max() <= TOL
    # Our text-only pruned main graph has exactly this export's inputs and outputs (as a mapping).
    ours = compiled(ort=replace(CUDA_PAGED, prune_lm_head=True), arch=tiny_arch(mtp_num_layers=0)).main.contract
    theirs = onnx.load(str(pruned / "model.onnx"), load_external_data=False).graph
    for mine, builder in ((ours.inputs, theirs.input), (ours.outputs, theirs.output)):
        assert {t.name: (t.dtype, tuple(t.shape)) for t in mine} == {n: (d, s) for n, d, s in graph_io(builder)}
