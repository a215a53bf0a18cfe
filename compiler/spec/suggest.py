"""'Did you mean ...?' for misspelled keys and values."""

from __future__ import annotations

import difflib
from typing import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to `word` (case-insensitively), or None when nothing is close."""
    by_lower = {c.lower(): c for c in sorted(candidates)}
    matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[matches[0]] if matches else None
