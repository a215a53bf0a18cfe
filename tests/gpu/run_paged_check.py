"""Run the paged (packed-token) graphs on CUDA and compare them with the numpy reference.

PagedAttention has CUDA kernels only, so this is not part of the CPU test suite. Run it on a
machine with a GPU and onnxruntime-gpu:

    python tests/gpu/run_paged_check.py

It builds the tiny model in float16 with paged I/O, then runs (1) a packed prefill of two
sequences of different lengths, (2) one decode token per sequence feeding the caches and state
back, and (3) the onnxruntime-genai MTP head on the packed seeds. Exit 0 when every comparison is
within float16 tolerance, 1 otherwise.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mtpc.reference.forward import MtpHeadReference, Qwen35Reference  # noqa: E402
from mtpc.sources.random_weights import seeded_store  # noqa: E402
from tests.fixtures.arch import tiny_arch  # noqa: E402
from tests.graphs.tiny import ORT_HEAD_FILE, emit, make_ir, presents_as_past  # noqa: E402

TOL = 5e-2  # float16 activations
BLOCK_SIZE = 16
NUM_BLOCKS = 8
SEQUENCES = [np.array([3, 17, 42, 9, 250]), np.array([7, 128, 64])]
NEXT_TOKENS = [11, 99]


def packed(arrays):
    return np.concatenate(arrays).astype(np.int64)


def cumulative(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


class PagedRunner:
    def __init__(self, path: Path, arch, io_dtype=np.float16):
        self.sess = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
        self.arch = arch
        self.io = io_dtype
        # Sequence b owns blocks [b * per_seq, (b + 1) * per_seq).
        self.per_seq = NUM_BLOCKS // len(SEQUENCES)
        self.block_table = np.arange(NUM_BLOCKS, dtype=np.int32).reshape(len(SEQUENCES), self.per_seq)

    def initial_state(self) -> dict:
        state = {}
        for i in self.sess.get_inputs():
            if i.name.startswith("past_key_values."):
                state[i.name] = np.zeros((NUM_BLOCKS, BLOCK_SIZE, *i.shape[2:]), self.io)
            elif i.name.startswith("past."):
                dtype = np.float32 if i.name.endswith(".recurrent") else self.io
                state[i.name] = np.zeros((len(SEQUENCES), *i.shape[1:]), dtype)
        return state

    def run(self, feeds: dict, new_lengths, past_lengths) -> dict:
        new_lengths, past_lengths = np.asarray(new_lengths), np.asarray(past_lengths)
        feeds = {
            **feeds,
            "block_table": self.block_table,
            "cumulative_sequence_lengths": cumulative(new_lengths),
            "past_sequence_lengths": past_lengths.astype(np.int32),
            "attention_metadata": np.array(
                [new_lengths.max(), (new_lengths + past_lengths).max(), (new_lengths + past_lengths).min()], np.int32
            ),
        }
        inputs = {i.name for i in self.sess.get_inputs()}
        if "state_update_capture_count" in inputs:  # a main graph with compact state updates: no capture here
            feeds["state_update_capture_count"] = np.zeros(len(new_lengths), np.int32)
            feeds["state_update_active"] = np.zeros(1, np.int32)
        names = [o.name for o in self.sess.get_outputs()]
        return dict(zip(names, self.sess.run(None, feeds)))


def positions(lengths, past_lengths):
    rows = packed([np.arange(p, p + n) for n, p in zip(lengths, past_lengths)])
    return np.broadcast_to(rows, (3, rows.size)).copy()


def compare(label: str, got: np.ndarray, want: np.ndarray) -> bool:
    err = float(np.abs(got.astype(np.float64) - want).max())
    ok = err <= TOL
    print(f"{'ok  ' if ok else 'FAIL'} {label}: max abs error {err:.3g}")
    return ok


def main() -> int:
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        print("CUDAExecutionProvider is not available; this check needs a GPU build of onnxruntime")
        return 1
    arch = tiny_arch()
    store = seeded_store(arch, 0)
    out_dir = Path(tempfile.mkdtemp()) / "pkg"
    emit(make_ir(arch, io_dtype="float16", paged=True), store, out_dir)
    reference = Qwen35Reference(arch, store)
    head_reference = MtpHeadReference(arch, store)
    ok = True

    main_graph = PagedRunner(out_dir / "model.onnx", arch)
    lengths = [len(s) for s in SEQUENCES]
    prefill = main_graph.run(
        {"input_ids": packed(SEQUENCES), "position_ids": positions(lengths, [0, 0]), **main_graph.initial_state()},
        lengths, [0, 0],
    )
    step = main_graph.run(
        {"input_ids": np.array(NEXT_TOKENS, np.int64), "position_ids": positions([1, 1], lengths),
         **presents_as_past(prefill)},
        [1, 1], lengths,
    )
    rows = np.cumsum([0] + lengths)
    for b, seq in enumerate(SEQUENCES):
        logits, post, _, state = reference.forward(seq[None])
        ok &= compare(f"prefill logits, sequence {b}", prefill["logits"][rows[b] : rows[b + 1]], logits[0])
        ok &= compare(f"prefill hidden, sequence {b}", prefill["hidden_states"][rows[b] : rows[b + 1]], post[0])
        step_logits, _, _, _ = reference.forward(np.array([[NEXT_TOKENS[b]]]), state)
        ok &= compare(f"decode logits, sequence {b}", step["logits"][b], step_logits[0, 0])

    head = PagedRunner(out_dir / ORT_HEAD_FILE, arch)
    # Draft for each sequence: embed token t+1 against the target's hidden at t, positions 1.., empty head KV.
    draft_ids = [seq[1:] for seq in SEQUENCES]
    seeds = [prefill["hidden_states"][rows[b] : rows[b + 1] - 1] for b in range(len(SEQUENCES))]
    draft_lengths = [len(d) for d in draft_ids]
    head_pos = packed([np.arange(1, 1 + n) for n in draft_lengths])
    head_out = head.run(
        {"input_ids": packed(draft_ids), "hidden_states": np.concatenate(seeds),
         "position_ids": np.broadcast_to(head_pos, (3, head_pos.size)).copy(), **head.initial_state()},
        draft_lengths, [0, 0],
    )
    head_rows = np.cumsum([0] + draft_lengths)
    for b in range(len(SEQUENCES)):
        logits, normed, _ = head_reference.forward(draft_ids[b][None], seeds[b][None].astype(np.float64),
                                                   np.arange(1, 1 + draft_lengths[b])[None])
        ok &= compare(f"head logits, sequence {b}", head_out["logits"][head_rows[b] : head_rows[b + 1]], logits[0])
        ok &= compare(f"head hidden, sequence {b}", head_out["hidden_states_out"][head_rows[b] : head_rows[b + 1]],
                      normed[0])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
