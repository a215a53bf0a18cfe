"""Repeated changes collapsed into one row a reviewer can read.

A 64-layer model changes the same way in every layer: 128 rows of
`/inputs[name=past_key_values.N.key]/dtype: float32 -> float16` say one thing.
Changes of one file with the same kind and the same old and new values whose
paths differ only in their numbers (layer, block, list indices) become one
`Group` with the numbers as a set (`{0..63}`, `{1,3,…,63}`); groups that then
differ only inside the name after their first number merge once more, with a
`*` for the differing part (`past_key_values.{1,3,…,63}.*]/dtype`). Added and
removed items group by kind (a node's op, a tensor's dtype), whatever else they
hold; hashes are elided when values are compared (constants whose bytes all
changed are one row). The count says exactly how many changes a row stands for;
the JSON output keeps every change as well.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from .changes import ADDED, Change, REMOVED, short_pair, short_value

# A number that is a path component or a dotted name part of its own (`layers.12.`, `/3/`), not the
# digits of a word or a name (`float16`, `weight_Q4`, `shape_64`, `output_0`).
_NUMBER = re.compile(r"(?<=[./\[=])\d+(?=[./\]]|$)")
_SLOT = "\x00"  # a number's place in a skeleton


@dataclass(frozen=True)
class Group:
    file: str
    kind: str
    pattern: str  # the path with number sets and `*`; equals the change's pointer for a single change
    changes: tuple[Change, ...]
    # The values as shown: a single change's own; a group's, with a layer number they repeat from
    # their path written as the path's set (`/layers.{0..63}/mlp/Mul/output_0`).
    old: object = None
    new: object = None

    @property
    def count(self) -> int:
        return len(self.changes)

    @property
    def whole_file(self) -> bool:
        return self.count == 1 and not self.changes[0].path

    def render(self) -> str:
        if self.count == 1:
            return self.changes[0].render()
        where = f"{self.file}:{self.pattern}"
        times = f" ×{self.count}"
        if self.kind == ADDED:
            return f"+ {where}" + (f" = {short_value(self.new)}" if self.new is not None else "") + times
        if self.kind == REMOVED:
            return f"- {where}" + (f" (was {short_value(self.old)})" if self.old is not None else "") + times
        old, new = short_pair(self.old, self.new)
        return f"~ {where}: {old} -> {new}{times}"

    def to_json(self) -> dict:
        if self.count == 1:
            return {**self.changes[0].to_json(), "count": 1}
        out = {"file": self.file, "path": self.pattern, "kind": self.kind, "count": self.count}
        # Added / removed items share their kind at most (`{"op": "Cast"}`), changed ones their values.
        if self.kind != ADDED and (self.kind != REMOVED or self.old is not None):
            out["old"] = self.old
        if self.kind != REMOVED and (self.kind != ADDED or self.new is not None):
            out["new"] = self.new
        return out


def number_set(values: list[int]) -> str:
    """`7`, `{0,1}`, `{0..63}`, `{1,3,…,63}` (an arithmetic run), else runs: `{0..3,5,9..11}`."""
    vs = sorted(set(values))
    if len(vs) == 1:
        return str(vs[0])
    steps = {b - a for a, b in zip(vs, vs[1:])}
    if len(steps) == 1 and len(vs) > 2:
        step = steps.pop()
        return f"{{{vs[0]}..{vs[-1]}}}" if step == 1 else (f"{{{vs[0]},{vs[1]},…,{vs[-1]}}}" if len(vs) > 3 else "{" + ",".join(map(str, vs)) + "}")
    runs: list[list[int]] = []
    for v in vs:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return "{" + ",".join(f"{r[0]}..{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs) + "}"


def _templated(value: object, number: int | None) -> object:
    """A string value with the first occurrence of its path's (first) number made a slot: rewired
    nodes of every layer read their own layer's tensor, `/layers.N/...`, and are one change."""
    if not isinstance(value, str) or number is None:
        return value
    return _NUMBER.sub(lambda m: _SLOT if int(m.group()) == number else m.group(), value, count=1)


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# What kind of item an added or removed node, port or initializer is: rows do not mix kinds.
_KIND_FIELDS = ("op", "dtype")


def _signature(value: object) -> dict | None:
    if isinstance(value, dict):
        return {k: value[k] for k in _KIND_FIELDS if k in value} or None
    return None


def _comparable(value: object, number: int | None) -> object:
    """The value as rows compare it: its layer number a slot, and any hash elided (twelve inline
    constants whose bytes changed are one row, however their hashes differ)."""
    value = _templated(value, number)
    return _DIGEST.sub("sha256:…", value) if isinstance(value, str) else value


def _value_key(c: Change, number: int | None) -> str:
    # Added and removed items group by where they are and what kind they are; changes by old and new value.
    if c.kind == ADDED:
        return json.dumps(_signature(c.new), sort_keys=True, default=str)
    if c.kind == REMOVED:
        return json.dumps(_signature(c.old), sort_keys=True, default=str)
    return json.dumps([_comparable(c.old, number), _comparable(c.new, number)], sort_keys=True, default=str)


@dataclass
class _Bucket:
    key: tuple
    skeleton: str
    numbers: list[list[int]]  # per slot, the numbers seen
    changes: list[Change]

    def pattern(self) -> str:
        parts = self.skeleton.split(_SLOT)
        out = parts[0]
        for slot, rest in zip(self.numbers, parts[1:]):
            out += number_set(slot) + rest
        return out


def group_changes(changes: list[Change]) -> list[Group]:
    """Changes (sorted) as groups, in the order of their first change."""
    order: dict[tuple, _Bucket] = {}
    for c in changes:
        pointer = c.pointer
        if not c.path:
            key = (c.file, c.kind, id(c))  # a whole-file change stands alone
            order[key] = _Bucket(key, pointer, [], [c])
            continue
        skeleton = _NUMBER.sub(_SLOT, pointer)
        numbers = [int(m.group()) for m in _NUMBER.finditer(pointer)]
        key = (c.file, c.kind, _value_key(c, numbers[0] if numbers else None), skeleton)
        bucket = order.setdefault(key, _Bucket(key, skeleton, [[] for _ in numbers], []))
        for slot, n in zip(bucket.numbers, numbers):
            slot.append(n)
        bucket.changes.append(c)
    position = {id(c): i for i, c in enumerate(changes)}
    groups = _merge_names(list(order.values()))
    return sorted(groups, key=lambda g: min(position[id(c)] for c in g.changes))


def _head_middle_tail(skeleton: str) -> tuple[str, str, str] | None:
    """Split after the first number and before the last path key: `/inputs[name=kv.#` | `.key]` | `/dtype`.

    The middle, where names may differ, holds no number; later numbers belong to the tail (`/inputs/#`).
    """
    if _SLOT not in skeleton:
        return None
    first = skeleton.index(_SLOT) + 1
    rest = skeleton[first:]
    limit = rest.index(_SLOT) if _SLOT in rest else len(rest)
    cut = max(rest.rfind("/", 0, limit), rest.rfind("]", 0, limit))
    if cut < 0:
        return None
    return skeleton[:first], rest[:cut], rest[cut:]


def _merge_names(buckets: list[_Bucket]) -> list[Group]:
    merged: dict[tuple, list[_Bucket]] = {}
    for b in buckets:
        split = _head_middle_tail(b.skeleton) if len(b.key) == 4 else None
        key = b.key[:3] + (split[0], split[2]) if split else ("alone", id(b))
        merged.setdefault(key, []).append(b)
    groups: list[Group] = []
    for key, members in merged.items():
        if len(members) == 1:
            groups.append(_group(members[0], members[0].pattern()))
            continue
        head, tail = key[3], key[4]
        middles = [_head_middle_tail(m.skeleton)[1] for m in members]
        prefix, suffix = _whole_parts(_common_prefix(middles), _common_suffix(middles))
        if len(prefix) + len(suffix) > min(len(m) for m in middles):
            suffix = ""
        slots = [[n for m in members for n in m.numbers[i]] for i in range(len(members[0].numbers))]
        pattern = head.replace(_SLOT, number_set(slots[0])) + prefix + "*" + suffix
        tail_parts = tail.split(_SLOT)
        pattern += tail_parts[0] + "".join(number_set(slot) + part for slot, part in zip(slots[1:], tail_parts[1:]))
        changes = sorted((c for m in members for c in m.changes), key=lambda c: c.pointer)
        groups.append(_shown(Group(members[0].changes[0].file, members[0].changes[0].kind, pattern, tuple(changes)), slots[0]))
    return groups


def _group(b: _Bucket, pattern: str) -> Group:
    c = b.changes[0]
    group = Group(c.file, c.kind, pattern if len(b.changes) > 1 else c.pointer, tuple(b.changes))
    return _shown(group, b.numbers[0] if b.numbers else [])


def _shown(group: Group, numbers: list[int]) -> Group:
    """`group` with the values it shows: its change's own; for several, what they share (the kind of the
    items added or removed; the changed values with the layer set written in and hashes elided)."""
    c = group.changes[0]
    if group.count == 1:
        return replace(group, old=c.old, new=c.new)
    if group.kind in (ADDED, REMOVED):
        return replace(group, old=_signature(c.old), new=_signature(c.new))
    first = _NUMBER.search(c.pointer)
    n = int(first.group()) if first and numbers else None

    def shown(value: object) -> object:
        value = _comparable(value, n)
        return value.replace(_SLOT, number_set(numbers)) if isinstance(value, str) else value

    return replace(group, old=shown(c.old), new=shown(c.new))


def _common_prefix(texts: list[str]) -> str:
    first, last = min(texts), max(texts)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def _common_suffix(texts: list[str]) -> str:
    return _common_prefix([t[::-1] for t in texts])[::-1]


_SEPARATORS = "./_]["


def _whole_parts(prefix: str, suffix: str) -> tuple[str, str]:
    """A shared prefix and suffix cut back to whole name parts: `/conv/` and `/Cast`, not the `e` that
    `Reshape` and `shape` happen to end with."""
    cut = max((prefix.rfind(c) for c in _SEPARATORS), default=-1)
    prefix = prefix[: cut + 1]
    starts = [i for i in (suffix.find(c) for c in _SEPARATORS) if i >= 0]
    suffix = suffix[min(starts):] if starts else ""
    return prefix, suffix
