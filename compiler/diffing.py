"""Semantic, path-addressed diffs (`mtpc diff`), in the manner of dyff / terraform plan.

Structured files (JSON, YAML) and IRs are compared as trees: a change is
addressed by its path (`/model/decoder/hidden_size`), list items that carry a
`name` are matched by name rather than position (`/graph/inputs[name=ids]`),
and changes come out sorted, so the same two inputs always give the same diff.
Other files are compared by SHA-256, read in chunks.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import yaml

from .validation import json_pointer

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
STRUCTURED_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class ByName:
    """A list item matched by its `name` key."""

    name: str


Segment = str | int | ByName


def render_path(path: tuple[Segment, ...]) -> str:
    """A JSON pointer, except that a name-matched list item reads `[name=x]`; "/" for the whole file."""
    rendered = "".join(f"[name={seg.name}]" if isinstance(seg, ByName) else json_pointer(seg) for seg in path)
    return rendered or "/"


def _sort_key(path: tuple[Segment, ...]):
    return tuple((0, seg, "") if isinstance(seg, int) else (1, 0, str(seg.name if isinstance(seg, ByName) else seg)) for seg in path)


@dataclass(frozen=True)
class Change:
    file: str  # the artifact's relative path, or "<ir>" for a compiled spec's IR
    path: tuple[Segment, ...]  # () = the whole file
    kind: str  # added | removed | changed
    old: object = None
    new: object = None

    @property
    def pointer(self) -> str:
        return render_path(self.path)

    def render(self) -> str:
        where = f"{self.file}:{self.pointer}"
        if self.kind == ADDED:
            return f"+ {where}" + ("" if not self.path else f" = {_short(self.new)}")
        if self.kind == REMOVED:
            return f"- {where}" + ("" if not self.path else f" (was {_short(self.old)})")
        return f"~ {where}: {_short(self.old)} -> {_short(self.new)}"

    def to_json(self) -> dict:
        out = {"file": self.file, "path": self.pointer, "kind": self.kind}
        if self.kind != ADDED:
            out["old"] = self.old
        if self.kind != REMOVED:
            out["new"] = self.new
        return out


def _short(value: object, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sorted_changes(changes: Iterable[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (c.file, _sort_key(c.path), c.kind))


def summary(changes: list[Change]) -> str:
    if not changes:
        return "no differences"
    counts = Counter(c.kind for c in changes)
    files = len({c.file for c in changes})
    parts = ", ".join(f"{counts[k]} {k}" for k in (ADDED, REMOVED, CHANGED) if counts[k])
    noun = "difference" if len(changes) == 1 else "differences"
    return f"{len(changes)} {noun} in {files} file{'s' if files != 1 else ''}: {parts}"


# ----------------------------------------------------------------------------- trees


def _named(items: list) -> dict | None:
    """The items keyed by name, when every item is a mapping with a unique string `name`."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    keyed = {i["name"]: i for i in items}
    return keyed if len(keyed) == len(items) else None


def diff_values(old: object, new: object, file: str = "", path: tuple[Segment, ...] = ()) -> list[Change]:
    """Changes turning `old` into `new`, unsorted."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[Change] = []
        for key in old.keys() - new.keys():
            out.append(Change(file, path + (key,), REMOVED, old=old[key]))
        for key in new.keys() - old.keys():
            out.append(Change(file, path + (key,), ADDED, new=new[key]))
        for key in old.keys() & new.keys():
            out.extend(diff_values(old[key], new[key], file, path + (key,)))
        return out
    if isinstance(old, list) and isinstance(new, list):
        a, b = _named(old), _named(new)
        if a is not None and b is not None:
            depth = len(path)
            return [
                dataclasses.replace(c, path=path + (ByName(str(c.path[depth])),) + c.path[depth + 1 :])
                for c in diff_values(a, b, file, path)
            ]
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(new):
                out.append(Change(file, path + (i,), REMOVED, old=old[i]))
            elif i >= len(old):
                out.append(Change(file, path + (i,), ADDED, new=new[i]))
            else:
                out.extend(diff_values(old[i], new[i], file, path + (i,)))
        return out
    # bool is an int in Python; True and 1 are different settings in a config.
    if type(old) is not type(new) or old != new:
        return [Change(file, path, CHANGED, old=old, new=new)]
    return []


def to_plain(value: object) -> object:
    """An IR (frozen dataclasses, enums, tuples) as JSON-like dicts and lists.

    A tuple of (key, value) pairs, the IR's way of keeping mappings hashable,
    becomes a dict so that it diffs by key.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _field_to_plain(f, getattr(value, f.name)) for f in dataclasses.fields(value) if f.repr}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        if value and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], (str, enum.Enum)) for p in value):
            keys = [to_plain(p[0]) for p in value]
            if len(set(keys)) == len(keys):
                return {k: to_plain(p[1]) for k, p in zip(keys, value)}
        return [to_plain(v) for v in value]
    if isinstance(value, bytes):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    return value


def _field_to_plain(field: dataclasses.Field, value: object) -> object:
    # An empty mapping field stays a mapping, so "no heads" diffs against heads key by key.
    if value == () and str(field.type).startswith("tuple[tuple["):
        return {}
    return to_plain(value)


# ----------------------------------------------------------------------------- file sets

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
    return json.loads(text) if relpath.endswith(".json") else yaml.safe_load(text)


def diff_files(old: FileSet, new: FileSet) -> list[Change]:
    """Files added / removed, structured files diffed by path, others by hash. Sorted."""
    changes: list[Change] = []
    for rel in sorted(old.keys() | new.keys()):
        if rel not in new:
            changes.append(Change(rel, (), REMOVED))
        elif rel not in old:
            changes.append(Change(rel, (), ADDED))
        elif rel.endswith(STRUCTURED_SUFFIXES):
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
    from .provenance import PROVENANCE_NAME, diff_provenance  # provenance builds on this module

    return diff_provenance if relpath == PROVENANCE_NAME else diff_values
