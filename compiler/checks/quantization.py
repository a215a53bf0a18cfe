"""`quantization.json` against itself: its summary counts the weights it lists.

The schema checks each entry; this checks what it cannot: every weight is listed once,
and the summary's counts per (rule, role, source, lossless) are those of the weight list.
Entries the schema already refuses (not objects, keys missing) are skipped here.
"""

from __future__ import annotations

from collections import Counter

from .package import Checker

_GROUP = ("rule", "role", "source", "lossless")


def _group(entry: dict) -> tuple | None:
    values = tuple(entry.get(key) for key in _GROUP)
    return values if all(isinstance(v, (str, bool)) for v in values) else None


def check_quantization_report(c: Checker, rel: str, doc) -> None:
    if not isinstance(doc, dict):
        return
    weights, summary = doc.get("weights"), doc.get("summary")
    if not isinstance(weights, list) or not isinstance(summary, list):
        return
    names = Counter(w.get("name") for w in weights if isinstance(w, dict) and isinstance(w.get("name"), str))
    for name, n in sorted(names.items()):
        if n > 1:
            c.add(rel, "/weights", f"weight {name!r} is listed {n} times")
    listed = Counter(g for g in (_group(w) for w in weights if isinstance(w, dict)) if g is not None)
    counted: Counter[tuple] = Counter()
    for entry in summary:
        group = _group(entry) if isinstance(entry, dict) else None
        if group is not None and isinstance(entry.get("count"), int):
            counted[group] += entry["count"]
    for group in sorted(set(listed) | set(counted), key=repr):
        if listed[group] != counted[group]:
            what = ", ".join(f"{k} {v!r}" for k, v in zip(_GROUP, group))
            c.add(rel, "/summary", f"counts {counted[group]} weights with {what}, the weight list has {listed[group]}")
