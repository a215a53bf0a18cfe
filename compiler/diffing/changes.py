"""Semantic, path-addressed changes between two trees, in the manner of dyff / terraform plan.

Structured files (JSON, YAML) and IRs are compared as trees: a change is addressed by its path
(`/model/decoder/hidden_size`), list items that carry a `name` are matched by name rather than
position (`/graph/inputs[name=ids]`), and changes come out sorted, so the same two inputs always
give the same diff. `files` applies this to whole packages.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from ..schema.validation import json_pointer

ADDED, REMOVED, CHANGED = "added", "removed", "changed"


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
            return f"+ {where}" + ("" if not self.path else f" = {short_value(self.new)}")
        if self.kind == REMOVED:
            return f"- {where}" + ("" if not self.path else f" (was {short_value(self.old)})")
        old, new = short_pair(self.old, self.new)
        return f"~ {where}: {old} -> {new}"

    def to_json(self) -> dict:
        out = {"file": self.file, "path": self.pointer, "kind": self.kind}
        if self.kind != ADDED:
            out["old"] = self.old
        if self.kind != REMOVED:
            out["new"] = self.new
        return out


_HASH = re.compile(r"\b((?:sha256:)?[0-9a-f]{12})[0-9a-f]{52}\b")


def short_hashes(text: str) -> str:
    """A SHA-256 (`sha256:`-prefixed or bare, as provenance.json records a spec's) cut to 12 hex digits:
    enough to tell two files apart, short enough to leave room for the rest."""
    return _HASH.sub(r"\1…", text)


def _as_shown(value: object) -> str:
    return short_hashes(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def short_value(value: object, limit: int = 80) -> str:
    """A value for people: JSON, hashes shortened, long values cut (the JSON output keeps them whole)."""
    text = _as_shown(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_pair(old: object, new: object, limit: int = 80) -> tuple[str, str]:
    """An old and a new value for people, both cut to show where they first differ (two long lines
    of a model card that differ near their end must not look alike)."""
    a, b = _as_shown(old), _as_shown(new)
    if len(a) <= limit and len(b) <= limit:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, first - limit // 3)
    return tuple(_window(t, start, limit) for t in (a, b))


def _window(text: str, start: int, limit: int) -> str:
    head = "..." if start else ""
    body = text[start:]
    return head + (body if len(head + body) <= limit else body[: limit - len(head) - 3] + "...")


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
    """The items keyed by name, when every item is a mapping with a unique string `name`, or a mapping of one
    key whose value has one (onnxruntime-extensions' `{"operation": {"name": "resize", ...}}` steps)."""
    names = [_name_of(i) for i in items]
    if not items or not all(isinstance(n, str) for n in names):
        return None
    keyed = dict(zip(names, items))
    return keyed if len(keyed) == len(items) else None


def _name_of(item: object) -> object:
    if not isinstance(item, dict):
        return None
    if "name" in item:
        return item["name"]
    only = next(iter(item.values())) if len(item) == 1 else None
    return only.get("name") if isinstance(only, dict) else None


def diff_values(old: object, new: object, file: str = "", path: tuple[Segment, ...] = ()) -> list[Change]:
    """Changes turning `old` into `new`, unsorted."""
    if _same(old, new):
        return []
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
        if path and path[-1] == "shape" and old != new:  # a tensor's shape is one value: [1, 2] -> [1, 2, 64]
            return [Change(file, path, CHANGED, old=old, new=new)]
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


def _same(old: object, new: object) -> bool:
    """Two mappings or lists the walk below would find no change in, told in C: equal (`==`), and with the
    same text, which tells apart what `==` does not and the walk does (True from 1, 1.0 from 1). A NaN,
    which the walk reports as changed even from itself, is left to the walk. Most of two IRs of one
    model is equal: the walk then descends only where they differ."""
    if type(old) is not type(new) or type(old) not in (dict, list) or old != new:
        return False
    text = repr(old)
    return "nan" not in text and text == repr(new)


def diff_trees(old: object, new: object, file: str = "", path: tuple[Segment, ...] = ()) -> list[Change]:
    """`diff_values(to_plain(old), to_plain(new), ...)`, without making what is the same on both sides: two IRs
    of one model share most of their fields (a 27B model's weight table and tensor list alone are 1,700
    dataclasses). Two dataclasses of one type are compared field by field; a field that is equal with the
    same text (what tells 1 from 1.0 and True from 1, as the walk does) has no change, nor one that is the
    very same object on both sides (the source's tensor list that two specs of one checkpoint share; a NaN
    in it is not a change from itself, where the walk over two plain copies would call it one)."""
    fields = _plain_fields(type(old)) if type(old) is type(new) and hasattr(type(old), "__dataclass_fields__") else None
    if fields is None or hasattr(old, "irrelevant_fields"):  # a value's own choice of fields: as plain trees
        return diff_values(to_plain(old), to_plain(new), file, path)
    out: list[Change] = []
    for name, _ in fields:
        a, b = getattr(old, name), getattr(new, name)
        if type(a) in _SCALARS:
            if type(a) is type(b) and a == b and a == a:
                continue
        elif a is b:
            continue
        elif a == b:
            text = repr(a)
            if "nan" not in text and text == repr(b):
                continue
        out.extend(diff_trees(a, b, file, path + (name,)) if hasattr(type(a), "__dataclass_fields__")
                   else diff_values(_plain_field(old, name), _plain_field(new, name), file, path + (name,)))
    return out


def _plain_field(value: object, name: str) -> object:
    """A dataclass field as `to_plain(value)` has it (an empty mapping field as an empty mapping)."""
    field_value = getattr(value, name)
    is_mapping = dict(_plain_fields(type(value)) or ())[name]
    return {} if is_mapping and field_value == () else to_plain(field_value)


def to_plain(value: object) -> object:
    """An IR (frozen dataclasses, enums, tuples) as JSON-like dicts and lists.

    A tuple of (key, value) pairs, the IR's way of keeping mappings hashable,
    becomes a dict so that it diffs by key.
    """
    if type(value) in _SCALARS:  # most of an IR's leaves (the checks below would come to the same)
        return value
    fields = _plain_fields(type(value)) if hasattr(type(value), "__dataclass_fields__") else None
    if fields is not None:
        # A value may name fields that mean nothing in its state (QuantScheme: a float weight's block_size).
        irrelevant = value.irrelevant_fields() if hasattr(value, "irrelevant_fields") else frozenset()
        out = {}
        for name, is_mapping in fields:
            if name in irrelevant:
                continue
            field_value = getattr(value, name)
            # An empty mapping field stays a mapping, so "no heads" diffs against heads key by key.
            out[name] = {} if is_mapping and field_value == () else to_plain(field_value)
        return out
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


_SCALARS = frozenset((str, int, float, bool, type(None)))


@lru_cache(maxsize=None)
def _plain_fields(cls: type) -> tuple[tuple[str, bool], ...] | None:
    """A dataclass's shown fields (repr=True), each with whether it is a mapping kept as (key, value) pairs."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple((f.name, str(f.type).startswith("tuple[tuple[")) for f in dataclasses.fields(cls) if f.repr)

def sequence_changes(file: str, where: tuple[Segment, ...], old: list, new: list, first: int = 0) -> list[Change]:
    """Two lists of lines matched as difflib does (a line inserted near the top is one change, not a shift
    of every line after it): a changed or removed line at `where + (its index in old,)`, an added one at
    its index in new, counted from `first`."""
    import difflib

    out: list[Change] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        pairs = min(i2 - i1, j2 - j1)
        out += [Change(file, where + (i1 + k + first,), CHANGED, old[i1 + k], new[j1 + k]) for k in range(pairs)]
        out += [Change(file, where + (i + first,), REMOVED, old=old[i]) for i in range(i1 + pairs, i2)]
        out += [Change(file, where + (j + first,), ADDED, new=new[j]) for j in range(j1 + pairs, j2)]
    return out
