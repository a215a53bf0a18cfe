"""'Did you mean ...?' for misspelled keys, values, verbs, options and paths."""

from __future__ import annotations

import os
from pathlib import Path, PurePath
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


def nearby_path(path: str, base: str | os.PathLike | None = None) -> str | None:
    """An existing path a spelling mistake or two away from `path` (each part that does not exist replaced by the
    nearest name in its folder), written as `path` is, relative to `base` (default: the working directory) when
    `path` is relative; None when `path` exists or nothing is near."""
    parts = PurePath(path).parts
    if not parts:
        return None
    here = Path(parts[0]) if PurePath(path).is_absolute() else Path(base if base is not None else ".")
    names = list(parts[1:]) if PurePath(path).is_absolute() else list(parts)
    written = [parts[0]] if PurePath(path).is_absolute() else []
    changed = False
    for name in names:
        if name not in (".", "..") and not (here / name).exists():
            try:
                siblings = [p.name for p in here.iterdir()]
            except OSError:
                return None
            name = closest(name, siblings)
            if name is None:
                return None
            changed = True
        here = here / name
        written.append(name)
    return str(PurePath(*written)) if changed else None


def path_hint(path: str | os.PathLike, base: str | os.PathLike | None = None) -> str | None:
    """"did you mean 'X'?" for a path that does not exist, or None (see `nearby_path`)."""
    near = nearby_path(os.fspath(path), base)
    return f"did you mean {near!r}?" if near is not None else None
