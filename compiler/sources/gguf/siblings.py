"""Which `mtp-*.gguf` beside a target GGUF is its MTP head, paired as llama.cpp's runtime pairs one.

llama.cpp picks a model's head file with `find_best_sibling(files, model, "mtp-", tag)` (common/download.cpp,
llama-cpp-python 0.3.36's vendored llama.cpp; `-hf` with `--spec-type draft-mtp`, `llama-download --mtp`): among a
repository's `.gguf` files whose path contains `mtp-`, in the model's folder or one above it, the deepest; then
the one carrying the tag asked for (`-hf repo:Q4_K_M`); then the one whose quantization bits are nearest the
model's (`extract_quant_bits`: the leading digits of the file name's last `-` / `.` separated tag, `Q4_K_M` 4,
`F32` 32, none 0); the first listed on a tie. The converter names the head file from the model
(`mtp-{name}-{outtype}.gguf`, conversion/qwen.py `prepare_metadata`), not from the target's file name: beside
`Hf-265K-F32.gguf` it writes `mtp-Hf-F32.gguf`, so names are not matched.

A local target's folder is its own, not a repository's, so only that folder is looked in, its files in name
order. A candidate must also be this target's head by its header (`head_file.mismatch`): in a folder holding
several models, another model's head file is passed over, with a note saying why, where llama.cpp would load it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable

from ...util.diagnostics import SourceError
from .head_file import facts_of, mismatch
from .layout import open_header

KEYWORD = "mtp-"
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)


def quant_bits(file_name: str) -> int:
    """llama.cpp's `extract_quant_bits`: 4 for `x-Q4_K_M.gguf`, 32 for `x-F32.gguf`, 0 without a tag."""
    stem = file_name[: -len(".gguf")] if file_name.lower().endswith(".gguf") else file_name
    split = _SPLIT.match(stem)
    if split:
        stem = split[1]
    tag = _TAG.search(stem)
    digits = re.match(r"\D*(\d+)", tag[1]) if tag else None
    return int(digits[1]) if digits else 0


@dataclass(frozen=True)
class Pairing:
    """The head file paired with a target (None: none), and what the user should know about the choice."""

    head: str | None
    notes: tuple[str, ...] = ()


def ranked(paths: Iterable[str], model: str, tag: str | None = None) -> list[str]:
    """A repository's `mtp-` files for `model` (a path in it), best first by `find_best_sibling`'s order: in the
    model's folder or one above it, the deepest first; then those whose name carries `-TAG.`; then the nearest
    quantization bits (the tag's, else the model file's); listing order on a tie. Its first is llama.cpp's pick."""
    model_folder = model.split("/")[:-1]
    wanted = re.match(r"\D*(\d+)", tag) if tag else None
    bits = (int(wanted[1]) if wanted else 0) if tag else quant_bits(model.rsplit("/", 1)[-1])
    ranks = []
    for order, path in enumerate(paths):
        folder = path.split("/")[:-1]
        if not path.endswith(".gguf") or KEYWORD not in path or folder != model_folder[: len(folder)]:
            continue
        exact = tag is not None and f"-{tag.upper()}." in path.upper()
        ranks.append(((-len(folder), not exact, abs(quant_bits(path.rsplit("/", 1)[-1]) - bits), order), path))
    return [path for _, path in sorted(ranks)]


def candidates(target: str) -> list[str]:
    """The `.gguf` files beside `target` whose names contain `mtp-`, in name order."""
    folder = os.path.dirname(os.path.abspath(target))
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    own = os.path.basename(target)
    return [os.path.join(folder, n) for n in names
            if n != own and n.lower().endswith(".gguf") and KEYWORD in n and os.path.isfile(os.path.join(folder, n))]


def holds_own_head(target: str) -> bool:
    facts = facts_of(open_header(target))
    return facts is not None and facts.nextn > 0


def auto_pair(target: str) -> Pairing:
    """The head file beside a target that holds no head of its own, if one is this target's."""
    if holds_own_head(target):
        return Pairing(None)
    fitting, notes = [], []
    for path in candidates(target):
        refusal = _refusal_of(target, path)
        if refusal is None:
            fitting.append(path)
        else:
            notes.append(f"{os.path.basename(path)} beside the target is not its MTP head ({refusal}): not paired")
    if not fitting:
        return Pairing(None, tuple(notes))
    folder = os.path.dirname(fitting[0])
    best = os.path.join(folder, ranked([os.path.basename(p) for p in fitting], os.path.basename(target))[0])
    chosen = f"the MTP head comes from {os.path.basename(best)} beside the target (an mtp- file, paired as llama.cpp pairs one)"
    others = [os.path.basename(p) for p in fitting if p != best]
    if others:
        chosen += f"; chosen over {', '.join(others)} as nearest the target's quantization, as llama.cpp chooses"
    return Pairing(best, (chosen, *notes))


def unread_siblings(target: str) -> tuple[str, ...]:
    """With `head: off`: the head files beside the target that it would pair, named in a note."""
    if holds_own_head(target):
        return ()
    heads = [os.path.basename(p) for p in candidates(target) if _refusal_of(target, p) is None]
    return tuple(f"source.head is 'off': {name} beside the target holds its MTP head and is not read" for name in heads)


def _refusal_of(target: str, head: str) -> str | None:
    try:
        return mismatch(open_header(target), open_header(head))
    except SourceError as error:  # a file that is no GGUF, or a damaged one
        return error.diagnostics[0].message
