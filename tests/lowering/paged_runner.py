"""Run emitted paged graphs on CPU through the PagedAttention lowering, the way the paged engine feeds them.

The engine's packing (onnxruntime-genai's VarlenDecoderIO): `input_ids` are all scheduled tokens
concatenated, `cumulative_sequence_lengths` their boundaries, `past_sequence_lengths` each
sequence's count of tokens already in the cache (token j is written at `past + j`), positions
`past + j` on each of the three MRoPE rows, and `attention_metadata` host bounds
`[max new tokens, max past + new, that maximum as lower bound]`. KV lives in a block pool addressed
through a per-sequence block table; conv / recurrent state is one row per sequence slot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from .paged_attention import lower_model

DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def lowered_session(path: Path) -> ort.InferenceSession:
    """A CPU session of `path` with PagedAttention lowered; the lowered copy sits beside the original
    (`<name>.cpu.onnx`) so its external data resolves."""
    lowered = lower_model(onnx.load(str(path), load_external_data=False))
    target = path.with_name(path.stem + ".cpu.onnx")
    onnx.save(lowered, str(target))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])


class BlockPool:
    """Fixed KV pool and a block table whose pages are scattered (not one contiguous run per sequence)."""

    def __init__(self, batch: int, block_size: int, max_tokens: int, seed: int = 0):
        per_sequence = -(-max_tokens // block_size)
        self.block_size = block_size
        self.num_blocks = batch * per_sequence + 2  # two pages no sequence owns
        pages = np.random.default_rng(seed).permutation(self.num_blocks)[: batch * per_sequence]
        self.block_table = pages.reshape(batch, per_sequence).astype(np.int32)

    def slots(self, b: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        positions = np.arange(length)
        return self.block_table[b, positions // self.block_size], positions % self.block_size


class PagedRunner:
    def __init__(self, session: ort.InferenceSession, pool: BlockPool, batch: int):
        self.sess = session
        self.pool = pool
        self.batch = batch
        self.output_names = [o.name for o in session.get_outputs()]

    def initial_state(self) -> dict[str, np.ndarray]:
        state = {}
        for i in self.sess.get_inputs():
            if i.name.startswith("past_key_values."):
                state[i.name] = np.zeros((self.pool.num_blocks, self.pool.block_size, *i.shape[2:]), DTYPES[i.type])
            elif i.name.startswith("past."):
                state[i.name] = np.zeros((self.batch, *i.shape[1:]), DTYPES[i.type])
        return state

    def run(self, tokens: list, past_lengths, state: dict, **extra) -> dict[str, np.ndarray]:
        """One packed step: `tokens[b]` are sequence b's new tokens after `past_lengths[b]` cached ones."""
        new = np.array([len(t) for t in tokens])
        past = np.asarray(past_lengths)
        rows = np.concatenate([np.arange(p, p + n) for n, p in zip(new, past)]).astype(np.int64)
        feeds = {
            "input_ids": np.concatenate([np.asarray(t) for t in tokens]).astype(np.int64),
            "position_ids": np.broadcast_to(rows, (3, rows.size)).copy(),
            "block_table": self.pool.block_table,
            "cumulative_sequence_lengths": np.concatenate([[0], np.cumsum(new)]).astype(np.int32),
            "past_sequence_lengths": past.astype(np.int32),
            "attention_metadata": np.array([new.max(), (new + past).max(), (new + past).max()], np.int32),
            **state,
            **extra,
        }
        wanted = {i.name for i in self.sess.get_inputs()}
        return dict(zip(self.output_names, self.sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))


def rows_of(packed: np.ndarray, lengths, b: int) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return packed[starts[b] : starts[b + 1]]


def decode_as_the_reference(main: "PagedRunner", reference, steps: list, tol: float):
    """Run `steps` (each a list of every sequence's new tokens: the packed prefill, then ragged and decode steps)
    through the paged `main` and sequence by sequence through the numpy `reference`; every row's logits and hidden
    state must agree within `tol`. Returns the last step's outputs and the reference's state per sequence."""
    from tests.graphs.tiny import presents_as_past

    batch = len(steps[0])
    past, state, ref_states = [0] * batch, main.initial_state(), [None] * batch
    result: dict[str, np.ndarray] = {}
    for tokens in steps:
        lengths = [len(t) for t in tokens]
        rows = np.concatenate([np.arange(p, p + n) for p, n in zip(past, lengths)]).astype(np.int64)
        result = main.run(tokens, past, state, position_ids=rows)  # one position row per token
        for b, seq in enumerate(tokens):
            logits, post, _, ref_states[b] = reference.forward(np.array([seq]), ref_states[b])
            for got, want, label in ((result["logits"], logits[0], "logits"), (result["hidden_states"], post[0], "hidden")):
                err = np.abs(rows_of(got, lengths, b).astype(np.float64) - want).max()
                assert err <= tol, f"{label} of sequence {b}: {err:.3g}"
        state = presents_as_past(result)
        past = [p + n for p, n in zip(past, lengths)]
    return result, ref_states
