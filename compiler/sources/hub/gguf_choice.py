"""Which GGUF file of a hub repo `owner/name[:QUANT]` names, by llama.cpp's own rule.

llama.cpp's `-hf owner/name[:quant]` picks its model file in common/download.cpp (`find_best_model`, with
`gguf_filename_is_model` and `get_gguf_split_info`; llama-cpp-python 0.3.36's vendored llama.cpp): it
tries the tag given, or `Q4_K_M` then `Q8_0` when none is, in that order; for each, the first `.gguf` file of
the repo's listing whose path contains the tag followed by `.` or `-` (case-insensitive) and which is a model
(its file name mentions none of `mmproj`, `imatrix`, `mtp-`, `eagle3-`, `dflash-`, `dspark-`), skipping the
second and later parts of a split file (`name-00002-of-00003.gguf`). With no tag given and nothing matched,
the first model file. The listing is the hub's tree, sorted by path.

mtpc reads a GGUF in one file: a split one is refused, naming its parts.
"""

from __future__ import annotations

import re
from typing import Iterable

from ...util.diagnostics import SourceError

DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
_NOT_A_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"(.+)-([0-9]{5})-of-([0-9]{5})", re.IGNORECASE)


def is_model_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.endswith(".gguf") and not any(word in name for word in _NOT_A_MODEL)


def split_part(path: str) -> tuple[int, int]:
    """(index, count) of a split GGUF's part, (1, 1) for a whole file."""
    m = _SPLIT.fullmatch(path[: -len(".gguf")]) if path.endswith(".gguf") else None
    return (int(m[2]), int(m[3])) if m else (1, 1)


def choose(paths: Iterable[str], tag: str | None) -> str | None:
    """The file llama.cpp's `-hf REPO[:tag]` loads, or None when no file fits."""
    listing = sorted(paths)
    for wanted in (tag,) if tag else DEFAULT_TAGS:
        pattern = re.compile(re.escape(wanted) + "[.-]", re.IGNORECASE)
        for path in listing:
            if is_model_file(path) and pattern.search(path) and split_part(path)[0] == 1:
                return path
    if tag is None:
        return next((p for p in listing if is_model_file(p) and split_part(p)[0] == 1), None)
    return None


def chosen_file(repo: str, paths: Iterable[str], tag: str | None) -> str:
    """`choose`, or a `SourceError` listing the repo's GGUF files; a split file is refused."""
    paths = sorted(paths)
    found = choose(paths, tag)
    ggufs = [p for p in paths if p.endswith(".gguf")]
    if found is None:
        wanted = f"quant tag {tag}" if tag else f"{' or '.join(DEFAULT_TAGS)}, nor any model file"
        listed = ", ".join(ggufs[:12]) + (f" and {len(ggufs) - 12} more" if len(ggufs) > 12 else "")
        raise SourceError(f"{repo}: no GGUF file for {wanted}" + (f" (its GGUF files: {listed})" if ggufs else
                                                                   " (the repo holds no .gguf file)"))
    index, count = split_part(found)
    if count > 1:
        parts = [p for p in ggufs if split_part(p)[1] == count and p.startswith(found[: -len("-00001-of-00000.gguf")])]
        raise SourceError(f"{repo}: {found} is split in {count} parts ({', '.join(parts)}); mtpc reads a GGUF in one "
                          "file (llama.cpp's gguf-split --merge joins them)")
    return found
