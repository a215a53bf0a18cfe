"""What a hub repo id is, and llama.cpp's `owner/name:QUANT` shorthand.

A repo id is `owner/name`, each part letters, digits, `-`, `_` and `.`, starting and ending with a letter or
digit, with no `--` or `..` (huggingface_hub's `validate_repo_id`, utils/_validators.py, refuses those; the
cache folder `models--owner--name` could not be read back otherwise), at most 96 characters each.

`owner/name:Q4_K_M` names a GGUF repo and the quant tag of its file, as llama.cpp's `-hf` reads it
(common/download.cpp, `common_download_split_repo_tag`: the text after the last `:` is the tag).
"""

from __future__ import annotations

import re

_PART = r"[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9])?"
REPO_ID = re.compile(rf"{_PART}/{_PART}")
# A quant tag: what llama.cpp's file names carry (Q4_K_M, q8_0, IQ2_XXS, F16, BF16, UD-Q4_K_XL).
QUANT_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


def is_repo_id(text: str) -> bool:
    return REPO_ID.fullmatch(text) is not None and "--" not in text and ".." not in text


def split_quant_tag(text: str) -> tuple[str, str | None] | None:
    """`owner/name[:TAG]` -> (repo, tag or None); None when `text` is not of that form."""
    repo, colon, tag = text.rpartition(":")
    if not colon:
        return (text, None) if is_repo_id(text) else None
    if is_repo_id(repo) and QUANT_TAG.fullmatch(tag):
        return repo, tag
    return None
