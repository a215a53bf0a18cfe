"""Whether a checkpoint's MTP head can be built: one rule for every source format.

Qwen3.5 ships exactly one MTP block. onnxruntime-genai's head projection, mobius and
llama.cpp's converter all build one, so a checkpoint declaring more is not one we can
compile faithfully. A head whose tensors are half there, or that carries tensors no
known layout has, is broken: building a text-only package from it silently would hide
a damaged download. A head whose tensors are all missing is the common case of a
model re-saved by transformers (which drops `mtp.*`): the weights simply are not there.
Except in a GGUF: its block count includes the head block, so a file declaring one and
holding none of its tensors names a block it does not have (llama.cpp refuses to load it
with its MTP head), and that is broken too. `inspect` reports a broken head as a finding.

The verdict is data (`UnusableHead` in the IR); `passes/head_detection.py` turns it into
a note or a refusal according to `mtp.head`.
"""

from __future__ import annotations

from typing import Iterable

from ..ir import UnusableHead

SUPPORTED_BLOCKS = 1
_LISTED = 6  # names shown before "... and N more"


def head_verdict(
    *,
    declared: int,
    declared_key: str,
    expected: Iterable[str],
    present: Iterable[str],
    unknown: Iterable[str],
    block: str | None = None,
) -> tuple[int, UnusableHead | None]:
    """(usable MTP blocks, why the declared head cannot be built or None).

    `expected`: the head tensors one block needs (names as the file spells them);
    `present`: the head tensors the file holds; `unknown`: head-looking tensors that
    belong to no known place (an unknown name, or a head tensor outside the head block).
    `block`: the name of the block the declaration counts among the file's own (a GGUF's
    `blk.N`, within its block_count): a declared block with none of its tensors is then a
    file that names a block it does not hold, broken like a half head, not a head left out.
    """
    expected, present, unknown = set(expected), set(present), sorted(set(unknown))
    if declared > SUPPORTED_BLOCKS:
        return 0, UnusableHead(
            f"{declared_key} is {declared}: mtpc builds exactly one MTP block "
            "(as onnxruntime-genai's head projection and mobius do)",
            absent=False,
        )
    if unknown:
        return 0, UnusableHead(f"it holds MTP head tensors mtpc does not know or that sit outside the head block: {_names(unknown)}", absent=False)
    if declared == 0:
        if present:
            return 0, UnusableHead(f"it holds MTP head tensors ({_names(sorted(present))}) but {declared_key} is 0", absent=False)
        return 0, None
    missing = sorted(expected - present)
    if not missing:
        return declared, None
    if len(missing) == len(expected) and block is not None:
        return 0, UnusableHead(
            f"{declared_key} is {declared}, naming {block} as the head block, but the file holds none of that block's tensors",
            absent=False,
        )
    if len(missing) == len(expected):
        return 0, UnusableHead(
            f"{declared_key} is {declared} but the weights hold none of the head's tensors "
            "(transformers drops them when it re-saves a model)",
            absent=True,
        )
    return 0, UnusableHead(
        f"its MTP head is incomplete: {len(missing)} of its {len(expected)} tensors are missing: {_names(missing)}",
        absent=False,
    )


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
