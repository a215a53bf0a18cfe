"""'Did you mean ...?' for misspelled keys and values."""

from __future__ import annotations

from typing import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to `word` (case-insensitively), or None when nothing is close."""
    import difflib  # only a mistake needs it (a few milliseconds of every run otherwise)

    by_lower = {c.lower(): c for c in sorted(candidates)}
    matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[matches[0]] if matches else None


# Words people write for a choice that is spelled differently in the spec; spelling
# distance alone would suggest the wrong one ('gpu' is closest to 'cpu').
_ALIASES = {
    "gpu": "cuda",
    "yes": "on",
    "true": "on",
    "no": "off",
    "false": "off",
}


def choice_for(value: object, choices: Iterable[str]) -> str | None:
    """The choice `value` most likely means: a known alias first, else the nearest spelling."""
    word = ("true" if value else "false") if isinstance(value, bool) else value
    if not isinstance(word, str):
        return None
    choices = list(choices)
    alias = _ALIASES.get(word.lower())
    if alias in choices:
        return alias
    return closest(word, choices)
