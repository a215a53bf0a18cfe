"""Two packages (or two specs' in-memory packages) compared file by file, as `mtpc diff` does.

Structured files (JSON, YAML) are diffed as trees (`changes`), the provenance record's spec text by
line (`provenance`); ONNX graphs by meaning (`onnx_summary`: interface, operators, nodes,
initializers), never loading their external weight data; text files by line; other files, weight
data among them, by SHA-256 read in chunks, as a last resort.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import yaml

from ..emit.manifest import MANIFEST_NAME
from ..emit.provenance_record import PROVENANCE_NAME
from ..schema.validation import read_yaml
from .changes import ADDED, CHANGED, REMOVED, ByName, Change, diff_values, sequence_changes, sorted_changes
from .provenance import diff_provenance

STRUCTURED_SUFFIXES = (".json", ".yaml", ".yml")
GRAPH_SUFFIX = ".onnx"
TEXT_SUFFIXES = (".md", ".txt")

# relpath -> a function returning the file's bytes in chunks
FileSet = Mapping[str, Callable[[], Iterator[bytes]]]


def file_chunks(path: str | Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk


def directory_files(root: str | Path) -> dict[str, Callable[[], Iterator[bytes]]]:
    root = Path(root)
    return {
        p.relative_to(root).as_posix(): (lambda p=p: file_chunks(p)) for p in sorted(root.rglob("*")) if p.is_file()
    }


def digest(chunks: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return "sha256:" + h.hexdigest()


def parse_structured(relpath: str, data: bytes):
    text = data.decode("utf-8")
    return json.loads(text) if relpath.endswith(".json") else read_yaml(text)


def diff_files(old: FileSet, new: FileSet, documents: tuple[Mapping[str, object], Mapping[str, object]] = ({}, {})
               ) -> list[Change]:
    """Files added / removed, structured files diffed by path, others by hash. Sorted.

    `documents`: what some files of each side parse to, known without their bytes (an in-memory package's
    documents, whose text is made on demand): a file both sides know so is diffed as those documents, as
    it would be once its bytes were made and parsed."""
    changes: list[Change] = []
    for rel in sorted(old.keys() | new.keys()):
        if rel in documents[0] and rel in documents[1] and rel in old and rel in new:
            changes.extend(_structured_diff(rel)(documents[0][rel], documents[1][rel], rel))
        elif rel not in new:
            changes.append(Change(rel, (), REMOVED))
            changes.extend(_interface(rel, old[rel], REMOVED))
        elif rel not in old:
            changes.append(Change(rel, (), ADDED))
            changes.extend(_interface(rel, new[rel], ADDED))
        elif rel.endswith(GRAPH_SUFFIX):
            changes.extend(_graph_changes(rel, b"".join(old[rel]()), b"".join(new[rel]())))
        elif rel.endswith(TEXT_SUFFIXES):
            changes.extend(_line_changes(rel, b"".join(old[rel]()), b"".join(new[rel]())))
        elif rel.endswith(STRUCTURED_SUFFIXES) and rel != MANIFEST_NAME:  # the manifest: by hash, see report.py
            a, b = b"".join(old[rel]()), b"".join(new[rel]())
            if a == b:
                continue
            try:
                changes.extend(_structured_diff(rel)(parse_structured(rel, a), parse_structured(rel, b), rel))
            except (ValueError, yaml.YAMLError):  # unparseable: fall back to bytes
                changes.append(Change(rel, (), CHANGED, digest([a]), digest([b])))
        else:
            da, db = digest(old[rel]()), digest(new[rel]())
            if da != db:
                changes.append(Change(rel, (), CHANGED, da, db))
    return sorted_changes(changes)


def _structured_diff(relpath: str) -> Callable[[object, object, str], list[Change]]:
    """How a parsed file is diffed: by path, except the provenance record, whose spec text is diffed by line."""
    return diff_provenance if relpath == PROVENANCE_NAME else diff_values


def _graph_changes(rel: str, a: bytes, b: bytes) -> list[Change]:
    """Two graphs' summaries diffed by path; their hashes only when nothing in the summaries differs."""
    if a == b:
        return []
    from google.protobuf.message import DecodeError

    from .onnx_summary import summary_of

    try:
        changes = diff_values(summary_of(a), summary_of(b), rel)
    except DecodeError:  # not a graph onnx can parse (truncated, foreign): compare bytes
        changes = []
    return changes or [Change(rel, (), CHANGED, digest([a]), digest([b]))]


def _line_changes(rel: str, a: bytes, b: bytes) -> list[Change]:
    """A text file (the model card) line by line: `/line/12`, numbered as in the old file (added lines: the new)."""
    if a == b:
        return []
    try:
        old, new = a.decode("utf-8").splitlines(), b.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return [Change(rel, (), CHANGED, digest([a]), digest([b]))]
    out = sequence_changes(rel, ("line",), old, new, first=1)
    return out or [Change(rel, (), CHANGED, digest([a]), digest([b]))]




def _interface(rel: str, chunks: Callable[[], Iterator[bytes]], kind: str) -> list[Change]:
    """The inputs and outputs of a graph added or removed as a whole: what its consumer must now feed or read."""
    if not rel.endswith(GRAPH_SUFFIX):
        return []
    from google.protobuf.message import DecodeError

    from .onnx_summary import INTERFACE, summary_of

    try:
        summary_ = summary_of(b"".join(chunks()))
    except DecodeError:
        return []
    return [
        Change(rel, (side, ByName(port["name"])), kind, **({"new": port} if kind == ADDED else {"old": port}))
        for side in INTERFACE
        for port in summary_[side]
    ]
