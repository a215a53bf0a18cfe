"""The head's draft-side options (`mtp.draft_vocabulary`, `mtp.lm_head`) lowered into the IR.

A draft vocabulary is the `size` best tokens of a ranking: a counts file the user gives (JSON,
token id -> count, from their own text) or the tokenizer's (`sources.token_ranking`). The file
is read here, so a mistake in it is reported at the spec line that names it: a file that cannot
be read or is not JSON is unreadable input (exit 2), content that is not a map of token ids in
the vocabulary to non-negative counts is a finding (exit 1).
"""

from __future__ import annotations

import hashlib
import json

from ..ir import Architecture, DraftVocabulary
from ..sources.info import SourceInfo
from ..sources.token_ranking import counts_ranking, tokenizer_ranking
from ..util.diagnostics import ExitCode, MtpcError
from .loaded import LoadedSpec

AT = ("mtp", "draft_vocabulary")
# A counts file is read whole: past this it is not a token-count table.
MAX_COUNTS_BYTES = 256 << 20


def draft_options(spec: LoadedSpec, mtp: dict, info: SourceInfo, arch: Architecture) -> tuple[DraftVocabulary | None, bool]:
    """(the draft vocabulary, whether the head has its own LM head) as the spec's `mtp` section asks."""
    written = mtp.get("draft_vocabulary")
    # A head with an LM head of its own (Step-3.5's shared_head.output) reads it unless the spec says `shared`.
    own = mtp.get("lm_head") == "own" or written is not None or (arch.mtp_own_lm_head and mtp.get("lm_head") != "shared")
    if written is None or not arch.has_mtp_head:
        return None, own and arch.has_mtp_head
    size = written["size"]
    if size >= arch.vocab_size:
        raise MtpcError([spec.diagnostic(AT + ("size",), f"a draft vocabulary of {size} tokens is not smaller than the "
                                         f"model's vocabulary ({arch.vocab_size})",
                                         hint="drop mtp.draft_vocabulary, or give fewer tokens")])
    ranking, how = tokenizer_ranking(info, arch)
    digest = counts_file = None
    if "counts" in written:
        counts_file = written["counts"]
        counts, digest = _counts(spec, written["counts"], arch.vocab_size)
        ranking = counts_ranking(counts, ranking)
        how = f"counts in {written['counts']}, then {how}"
    return DraftVocabulary(tuple(sorted(ranking[:size])), how, counts_file, digest), True


def _counts(spec: LoadedSpec, name: str, vocab_size: int) -> tuple[dict[int, int], str]:
    at = AT + ("counts",)
    path = spec.folder / name
    try:
        if path.stat().st_size > MAX_COUNTS_BYTES:
            raise MtpcError([spec.diagnostic(at, f"token counts file '{name}' is over {MAX_COUNTS_BYTES >> 20} MiB")],
                            ExitCode.USAGE)
        raw = path.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise MtpcError([spec.diagnostic(at, f"token counts file '{name}' cannot be read: {why}",
                                         hint="a JSON object mapping token ids to counts, relative to the spec's folder, "
                                         'e.g. {"13": 5012, "279": 4410}')], ExitCode.USAGE) from err
    if not isinstance(doc, dict) or not doc:
        raise MtpcError([spec.diagnostic(at, f"token counts file '{name}' holds no JSON object of token ids to counts",
                                         hint='e.g. {"13": 5012, "279": 4410}')])
    counts: dict[int, int] = {}
    for key, value in doc.items():
        token = int(key) if key.isdigit() else None
        if token is None or token >= vocab_size:
            where = "is not a token id" if token is None else f"is outside the vocabulary ({vocab_size} tokens)"
            raise MtpcError([spec.diagnostic(at, f"token counts file '{name}': key {key!r} {where}")])
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MtpcError([spec.diagnostic(at, f"token counts file '{name}': the count of token {key} is "
                                             f"{json.dumps(value)}, not a non-negative integer")])
        counts[token] = value
    return counts, hashlib.sha256(raw).hexdigest()
