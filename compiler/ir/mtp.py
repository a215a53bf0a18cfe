"""The MTP head's settings in the IR: whether to build it, what seeds it, its draft-side options.

`mtpc.ir` re-exports these names; frozen dataclasses like the rest of the IR.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class HeadPolicy(str, enum.Enum):
    AUTO = "auto"  # emit the head iff the source ships one
    ON = "on"  # the source must ship one
    OFF = "off"  # never emit it


class SeedHidden(str, enum.Enum):
    """Which main-model hidden state seeds the MTP head (an open choice upstream)."""

    POST_NORM = "post_norm"  # the tensor fed to lm_head; what onnxruntime-genai expects
    PRE_NORM = "pre_norm"  # the last layer's residual output, before the final norm


@dataclass(frozen=True)
class DraftVocabulary:
    """The tokens the head's LM head scores (`mtp.draft_vocabulary`): the `size` best of a ranking."""

    ids: tuple[int, ...]  # ascending token ids
    ranking: str  # where the ranking came from, for `plan` and the model card
    # A counts file's name as the spec gives it and its sha256 (provenance: its contents decide the bytes).
    counts_file: str | None = None
    counts_sha256: str | None = None

    def __repr__(self) -> str:  # `--print-ir-after-all` and diffs print the IR: a count, not 100k ids
        return f"DraftVocabulary({len(self.ids)} tokens, {self.ranking})"


@dataclass(frozen=True)
class MtpSettings:
    head: HeadPolicy = HeadPolicy.AUTO
    num_speculative_tokens: int = 1
    seed_hidden: SeedHidden = SeedHidden.POST_NORM
    # Decided by passes/head_detection.py; None until it has run.
    emit_head: bool | None = None
    # Draft-side options of the onnxruntime-genai head (lossless: the main model verifies every draft).
    # The head scores only these tokens (its own LM-head rows); None: every token.
    draft_vocabulary: DraftVocabulary | None = None
    # The head reads its own copy of the LM head (`mtp.lm_head.weight`, stored by its own quantization
    # rule) instead of the main model's; implied by a draft vocabulary.
    own_lm_head: bool = False
