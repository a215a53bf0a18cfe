"""The training text: the CPython standard library's source that ships with this Python.

Every machine with Python has it, so the recipe needs no download. Files are read in sorted
order as UTF-8 (the few that are not are left out and counted); `site-packages` (installed
third-party code, different on every machine) and the build-specific `_sysconfigdata_*` and
`config-*` files are never read. The split is by module: the modules in `HELD_OUT` and their own
test files (`test/test_<module>...`) are kept for evaluation, every other file trains. The split
and the corpus' digest are written beside the checkpoint (`training.json`), so a rerun on another
Python can tell that its text differs.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Held out: modules of ordinary, varied library code (parsing, numbers, text, data structures),
# none of which another module's code is mostly a copy of. Each name also holds out the test
# files whose name starts with `test_<name>`.
HELD_OUT = (
    "argparse", "csv", "fractions", "graphlib", "heapq", "json", "shlex", "statistics", "textwrap", "tomllib",
)
_NEVER = ("site-packages", "__pycache__", "lib-dynload")


@dataclass(frozen=True)
class Corpus:
    root: Path
    train: tuple[str, ...]  # paths relative to root
    held_out: tuple[str, ...]
    skipped: tuple[str, ...]  # not UTF-8

    def text(self, which: str) -> list[str]:
        return [(self.root / p).read_text(encoding="utf-8") for p in getattr(self, which)]

    def digest(self, which: str) -> str:
        h = hashlib.sha256()
        for rel in getattr(self, which):
            h.update(rel.encode() + b"\0" + (self.root / rel).read_bytes() + b"\0")
        return h.hexdigest()


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def module_of(rel: str) -> str:
    """The module a file belongs to for the split: its top-level name, or for a test file the
    name after `test_` (`test/test_json/test_dump.py` -> `json`)."""
    parts = rel.split("/")
    if parts[0] == "test" and len(parts) > 1 and parts[1].startswith("test_"):
        return parts[1][len("test_"):].removesuffix(".py")
    return parts[0].removesuffix(".py")


def _held_out(rel: str) -> bool:
    name = module_of(rel)
    return any(name == m or (rel.startswith("test/") and name.startswith(m)) for m in HELD_OUT)


def load(root: Path | None = None) -> Corpus:
    root = root or stdlib_root()
    train, held, skipped = [], [], []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(part in _NEVER for part in rel.split("/")) or rel.startswith(("_sysconfigdata", "config-")):
            continue
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(rel)
            continue
        (held if _held_out(rel) else train).append(rel)
    return Corpus(root, tuple(train), tuple(held), tuple(skipped))
