"""The paged main decoder and onnxruntime-genai head of the tiny model, computed on CPU through the
PagedAttention lowering and compared per sequence with the dense numpy reference.

A packed prefill of three sequences of different lengths, three decode steps (one of them ragged,
as a verify step next to plain decodes) feeding the block pool and the conv / recurrent state back,
then the head on the packed seeds (one hidden row per token) and one chained head step.

mtpc emits paged graphs in float16 only (PagedAttention has no float32 kernel). The same builder at
float32 I/O is also run here, with the builder's dtype guard widened for the test only: float32
bounds (1e-4, as for the dense graphs) expose wiring mistakes that float16 noise could hide.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as oir
import pytest

from mtpc.graphs import paged as paged_graphs
from mtpc.ir import HeadContract
from mtpc.reference.forward import MtpHeadReference, Qwen35Reference
from mtpc.sources.random_weights import seeded_store
from tests.fixtures.arch import tiny_arch
from tests.graphs.tiny import ORT_HEAD_FILE, emit, make_ir, presents_as_past

from .paged_runner import BlockPool, PagedRunner, lowered_session, rows_of

PROMPTS = [[3, 17, 42, 9, 250], [7, 128, 64], [11, 5, 200, 31, 8, 99, 2]]
# Decode steps: new tokens per sequence. The second is ragged, like a verify step beside plain decodes.
STEPS = [[[13], [40], [77]], [[21, 22], [41], [78, 79, 80]], [[14], [42], [81]]]
BLOCK_SIZE = 4
# Largest errors measured against the float64 reference over every step, sequence and tensor:
# float32 2.8e-6 (main logits; head 1.5e-6); float16 9.6e-3 (main logits; keys 9.1e-3, head 2.8e-3),
# float16 activations through four layers. The bounds leave about 2x headroom for float16.
TOLERANCE = {"float32": 1e-4, "float16": 2e-2}


@pytest.fixture(scope="module")
def arch():
    return tiny_arch()


@pytest.fixture(scope="module")
def store(arch):
    return seeded_store(arch, 0)


@pytest.fixture(scope="module", params=["float32", "float16"])
def package(request, arch, store, tmp_path_factory):
    io_dtype = request.param
    out = tmp_path_factory.mktemp(f"paged-{io_dtype}") / "pkg"
    with pytest.MonkeyPatch.context() as patch:
        if io_dtype == "float32":
            patch.setattr(paged_graphs, "PAGED_IO_DTYPES", (*paged_graphs.PAGED_IO_DTYPES, oir.DataType.FLOAT))
        emit(make_ir(arch, io_dtype=io_dtype, paged=True, heads=(HeadContract.ORT_GENAI,)), store, out)
    return io_dtype, out


def close(got, want, tol, label):
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    assert err <= tol, f"{label}: max abs error {err:.3g} > {tol}"
    return err


@pytest.fixture(scope="module")
def decoded(package, arch, store):
    """Run prefill + steps through the lowered main graph; also the reference per sequence."""
    io_dtype, out = package
    batch = len(PROMPTS)
    longest = max(len(p) + sum(len(s[b]) for s in STEPS) for b, p in enumerate(PROMPTS))
    pool = BlockPool(batch, BLOCK_SIZE, longest, seed=1)
    main = PagedRunner(lowered_session(out / "model.onnx"), pool, batch)
    reference = Qwen35Reference(arch, store)
    steps, past = [], [0] * batch
    state = main.initial_state()
    for tokens in [PROMPTS, *STEPS]:
        result = main.run(tokens, past, state)
        steps.append((tokens, list(past), result))
        state = presents_as_past(result)
        past = [p + len(t) for p, t in zip(past, tokens)]
    expected = []
    for b in range(batch):
        ref_state, per_step = None, []
        for tokens, _, _ in steps:
            logits, post, _, ref_state = reference.forward(np.array([tokens[b]]), ref_state)
            per_step.append((logits[0], post[0]))
        expected.append((per_step, ref_state))
    return io_dtype, pool, steps, expected


def test_prefill_and_decode_steps_match_the_reference_per_sequence(decoded):
    io_dtype, _, steps, expected = decoded
    tol = TOLERANCE[io_dtype]
    for s, (tokens, _, result) in enumerate(steps):
        lengths = [len(t) for t in tokens]
        assert result["logits"].shape == (sum(lengths), 256)
        assert result["hidden_states"].shape == (sum(lengths), 64)  # one row per packed token
        for b in range(len(tokens)):
            logits, hidden = expected[b][0][s]
            close(rows_of(result["logits"], lengths, b), logits, tol, f"step {s} logits, sequence {b}")
            close(rows_of(result["hidden_states"], lengths, b), hidden, tol, f"step {s} hidden, sequence {b}")


def test_block_pool_and_slot_states_hold_each_sequence_after_the_last_step(decoded, arch):
    io_dtype, pool, steps, expected = decoded
    tol = TOLERANCE[io_dtype]
    _, last_past, result = steps[-1]
    for b, (_, ref_state) in enumerate(expected):
        length = ref_state.length
        assert length == last_past[b] + len(steps[-1][0][b])
        blocks, offsets = pool.slots(b, length)
        for i, (keys, values) in ref_state.kv.items():
            # Rotated keys, as the reference keeps them: [KVH, T, HD] against the pool's [T, KVH, HD].
            close(result[f"present.{i}.key"][blocks, offsets], keys[0].transpose(1, 0, 2), tol, f"layer {i} keys {b}")
            close(result[f"present.{i}.value"][blocks, offsets], values[0].transpose(1, 0, 2), tol, f"values {b}")
        for i in ref_state.conv:
            close(result[f"present.{i}.conv"][b], ref_state.conv[i][0], tol, f"layer {i} conv {b}")
            # GatedDeltaNet's V-major float32 state against the reference's [Hv, Dk, Dv].
            assert result[f"present.{i}.recurrent"].dtype == np.float32
            close(result[f"present.{i}.recurrent"][b], ref_state.recurrent[i][0].transpose(0, 2, 1), tol,
                  f"layer {i} recurrent {b}")


def test_pages_no_sequence_owns_stay_untouched(decoded):
    _, pool, steps, _ = decoded
    owned = set(pool.block_table.ravel())
    free = [p for p in range(pool.num_blocks) if p not in owned]
    assert free
    for name, value in steps[-1][2].items():
        if name.endswith((".key", ".value")):
            assert not value[free].any(), name


def test_head_on_the_packed_seeds_matches_the_reference_per_sequence(package, decoded, arch, store):
    """The head reads token t+1 against the target's hidden row of token t, one row per token; its own
    KV pool then takes a chained draft step seeded by its hidden_states_out."""
    io_dtype, out = package
    _, _, steps, _ = decoded
    tol = TOLERANCE[io_dtype]
    prompts, _, prefill = steps[0]
    lengths = [len(p) for p in prompts]
    next_tokens = STEPS[0]  # the token each sequence decodes next
    ids = [list(p[1:]) + n for p, n in zip(prompts, next_tokens)]
    seeds = np.concatenate([rows_of(prefill["hidden_states"], lengths, b) for b in range(len(prompts))])
    pool = BlockPool(len(prompts), BLOCK_SIZE, max(lengths) + 1, seed=2)
    head = PagedRunner(lowered_session(out / ORT_HEAD_FILE), pool, len(prompts))
    # Head positions start at 1: its first token is the target's second (as tests/gpu/run_paged_check.py
    # drafts); the runner's positions follow the cache, so they are given explicitly.
    head_positions = np.concatenate([np.arange(1, 1 + n) for n in lengths])
    result = head.run(ids, [0] * len(prompts), head.initial_state(), hidden_states=seeds,
                      position_ids=np.broadcast_to(head_positions, (3, head_positions.size)).copy())
    assert result["logits"].shape == (sum(lengths), 256) and result["hidden_states_out"].shape == (sum(lengths), 64)
    reference = MtpHeadReference(arch, store)
    chained_ids, chained_seeds, ref_states = [], [], []
    for b in range(len(prompts)):
        seed = rows_of(seeds, lengths, b).astype(np.float64)
        positions = np.arange(1, 1 + lengths[b])[None]
        logits, hidden, kv = reference.forward(np.array([ids[b]]), seed[None], positions)
        close(rows_of(result["logits"], lengths, b), logits[0], tol, f"head logits, sequence {b}")
        close(rows_of(result["hidden_states_out"], lengths, b), hidden[0], tol, f"head hidden, sequence {b}")
        chained_ids.append([int(np.argmax(rows_of(result["logits"], lengths, b)[-1]))])
        chained_seeds.append(rows_of(result["hidden_states_out"], lengths, b)[-1:])
        ref_states.append(kv)
    # The chained step: one draft per sequence after its cached rows, positions one ahead of the cache.
    step = head.run(chained_ids, lengths, presents_as_past(result), hidden_states=np.concatenate(chained_seeds),
                    position_ids=np.broadcast_to(np.array(lengths) + 1, (3, len(prompts))).astype(np.int64).copy())
    for b in range(len(prompts)):
        logits, hidden, _ = reference.forward(np.array([chained_ids[b]]), chained_seeds[b][None].astype(np.float64),
                                              np.array([[lengths[b] + 1]]), ref_states[b])
        close(step["logits"][b], logits[0, 0], tol, f"chained head logits, sequence {b}")
        close(step["hidden_states_out"][b], hidden[0, 0], tol, f"chained head hidden, sequence {b}")
