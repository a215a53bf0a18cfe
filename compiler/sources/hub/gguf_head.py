"""A hub GGUF target's MTP head file, paired from its repo as llama.cpp's `-hf` pairs one.

llama.cpp's `-hf owner/name[:QUANT]` with `--spec-type draft-mtp` downloads the model's head file with it
(common/download.cpp: `find_best_mtp`, that is `find_best_sibling(files, model, "mtp-", tag)`; llama-cpp-python
0.3.36's vendored llama.cpp), chosen from the repo's listing by `gguf/siblings.ranked`'s order. mtpc takes the
first of that order whose header (read by range request, or from the cache) is the target's head
(`gguf/head_file.mismatch`), passing over another model's with a note where llama.cpp would load it, as it does
beside a local target. `source.head` names a file of the same repo and revision instead: a head in another repo
is not offered, since `revision` is one revision and llama.cpp publishes and pairs a head in its model's repo.
Offline, a candidate the cache lacks is passed over (compile downloaded the one it paired online).
"""

from __future__ import annotations

from ...util.diagnostics import SourceError
from ..gguf.head_file import facts_of, mismatch
from ..gguf.siblings import KEYWORD, Pairing, ranked
from .errors import HubFailure
from .snapshot import Snapshot

_remote_headers: dict[tuple[str, str], object] = {}


def header_of(snapshot: Snapshot, name: str):
    """The `GGUFHeader` of a repo's GGUF: the cache's file when downloaded, else its first bytes from the hub."""
    local = snapshot.local(name)
    if local is not None:
        from ..gguf.layout import open_header

        return open_header(str(local))
    key = (snapshot.commit, name)
    if key not in _remote_headers:
        from .remote import gguf_header

        _remote_headers[key] = gguf_header(snapshot, name, f"{snapshot.shown}/{name}")
    return _remote_headers[key]


def named(snapshot: Snapshot, head: str) -> str:
    """`source.head` of a hub target: a file of its repo at the same commit."""
    if not snapshot.has(head):
        heads = [p for p in snapshot.files if p.endswith(".gguf") and KEYWORD in p]
        raise SourceError(f"{snapshot.shown}: the repo has no file {head!r} for source.head to name (a file of the "
                          f"target's repo and revision)" + (f"; its mtp- files: {', '.join(heads)}" if heads else ""))
    return head


def auto_pair(snapshot: Snapshot, target: str, tag: str | None) -> Pairing:
    """The repo's head file for a target that holds no head of its own, if one is this target's."""
    target_header = header_of(snapshot, target)
    facts = facts_of(target_header)
    if facts is None or facts.nextn > 0:
        return Pairing(None)
    notes = []
    for candidate in ranked(snapshot.files, target, tag):
        if snapshot.offline and snapshot.local(candidate) is None:
            # Online, the file paired was downloaded with the target and those ranked before it were refused from
            # their headers alone, so passing over what the cache lacks pairs offline what was paired online.
            notes.append(f"{candidate} of {snapshot.shown} is not in the cache (offline): not read, not paired")
            continue
        try:
            refusal = mismatch(target_header, header_of(snapshot, candidate))
        except HubFailure:  # the hub could not answer: no verdict on the file
            raise
        except SourceError as error:  # no GGUF, or a damaged one
            refusal = error.diagnostics[0].message
        if refusal is None:
            return Pairing(candidate, (f"the MTP head comes from {candidate} of {snapshot.shown} (its mtp- file nearest "
                                       f"{target}, paired as llama.cpp's -hf pairs one)", *notes))
        notes.append(f"{candidate} of {snapshot.shown} is not the MTP head of {target} ({refusal}): not paired")
    return Pairing(None, tuple(notes))


def unread(snapshot: Snapshot, target: str, tag: str | None) -> tuple[str, ...]:
    """With `head: off`: the repo's head file llama.cpp would pair, named in a note (its header is not read)."""
    best = ranked(snapshot.files, target, tag)[:1]
    return tuple(f"source.head is 'off': {name} of {snapshot.shown}, the mtp- file llama.cpp's -hf would pair with "
                 f"{target}, is not read" for name in best)
