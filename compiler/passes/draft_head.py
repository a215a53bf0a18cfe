"""Give the MTP head its own LM head when the spec asks (`mtp.lm_head: own`, `mtp.draft_vocabulary`).

The head's LM head is read once per draft: on a CPU it is the largest part of a draft step
(a 32k x 1024 head is 2-3 decoder layers' worth of bytes; at a 248k vocabulary, more). Its own
copy, `mtp.lm_head.weight`, holds the rows of the draft vocabulary only (or every row), and a
quantization rule of its own decides how it is stored; the main model keeps its LM head as it is.
The quantization pass (which decides every weight the package stores) adds it to the weights
the source serves (`weights.draft` makes its values from `lm_head.weight`) and decides it like
any other, so `quantization.json` lists it; `plan` shows its rows and bytes next to the main
model's LM head. Lossless by construction: the main model verifies every draft.
"""

from __future__ import annotations

from dataclasses import replace

from typing import Callable

from ..ir import ModelIR, SourceTensor, WeightDecision
from ..weights.draft import OWN_LM_HEAD, SOURCE

Decide = Callable[[SourceTensor], WeightDecision]

_ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def own_lm_head(ir: ModelIR, decide: Decide) -> tuple[SourceTensor, str] | None:
    """The head's own LM head as a weight to store, and the `plan` line about it (with the stored forms
    `decide` gives); None when the package has none."""
    if not (ir.mtp.emit_head and ir.mtp.own_lm_head) or any(t.name == OWN_LM_HEAD for t in ir.source_tensors):
        return None
    lm_head = next(t for t in ir.source_tensors if t.name == SOURCE)
    vocabulary = ir.mtp.draft_vocabulary
    rows = lm_head.shape[0] if vocabulary is None else len(vocabulary.ids)
    own = replace(lm_head, name=OWN_LM_HEAD, shape=(rows, lm_head.shape[1]))
    mine, main = decide(own), decide(lm_head)
    which = "every row" if vocabulary is None else f"{rows} of {lm_head.shape[0]} rows, ranked by {vocabulary.ranking}"
    line = (f"{OWN_LM_HEAD}: the head's own LM head, {which} -> {mine.result}, {_mib(stored_bytes(mine, own.shape))} "
            f"(the main model's lm_head.weight: {main.result}, {_mib(stored_bytes(main, lm_head.shape))})")
    if vocabulary is not None:
        line += f"; the other {lm_head.shape[0] - rows} tokens get the lowest logit"
    return own, line


def stored_bytes(decision: WeightDecision, shape: tuple[int, ...]) -> int:
    """Bytes a `[N, K]` weight takes in its stored form: the codes and every per-block tensor beside them."""
    item = _ITEM_BYTES[decision.io_dtype]
    n, k = shape
    form = decision.form
    if form is None:
        return n * k * item
    k_blocks = -(-k // form.block_size)
    total = n * k_blocks * form.block_size * form.bits // 8 + n * k_blocks * item
    if form.float_zero_points:
        total += n * k_blocks * item
    elif form.has_zero_points:
        total += n * -(-k_blocks * form.bits // 8)
    if form.block_offsets:
        total += n * k_blocks * item
    return total


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"
