"""`manifest.json`: every file of a package with its size and sha256, as written.

Unlike the other artifacts, it is made from the package's bytes, not from the IR: the writer
(`mtpc.output.write`) hashes each file as it streams to disk (a weights file is never read back)
and renders this last, so the manifest lists every file but itself. `mtpc check DIR` holds a
package to it (`mtpc.checks.manifest`): a listed file that is missing, truncated or altered is a
finding, and a package written without a file (a tokenizer the checkpoint did not ship) simply
does not list it. Deterministic: names sorted, no timestamps, no build-machine paths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

MANIFEST_NAME = "manifest.json"
SCHEMA = "manifest"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class FileRecord:
    name: str  # inside the package, "/"-separated
    bytes: int
    sha256: str


def manifest_document(records: Iterable[FileRecord]) -> dict:
    files = sorted(records, key=lambda r: r.name)
    if any(r.name == MANIFEST_NAME for r in files):
        raise ValueError(f"{MANIFEST_NAME} cannot list itself")
    return {
        "format_version": FORMAT_VERSION,
        "files": [{"name": r.name, "bytes": r.bytes, "sha256": r.sha256} for r in files],
    }


def render(document: dict) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def records_of(document: object) -> dict[str, FileRecord] | None:
    """The files a parsed manifest lists, by name (None when it is not a manifest of this format)."""
    if not isinstance(document, dict) or document.get("format_version") != FORMAT_VERSION:
        return None
    files = document.get("files")
    if not isinstance(files, list):
        return None
    out: dict[str, FileRecord] = {}
    for entry in files:
        if not isinstance(entry, dict):
            return None
        name, size, digest = entry.get("name"), entry.get("bytes"), entry.get("sha256")
        if not (isinstance(name, str) and isinstance(size, int) and not isinstance(size, bool) and isinstance(digest, str)):
            return None
        out[name] = FileRecord(name, size, digest)
    return out
