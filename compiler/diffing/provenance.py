"""Two provenance records compared: the spec's text line by line, everything else by path."""

from __future__ import annotations

from ..emit.provenance_record import PROVENANCE_NAME
from .changes import diff_values, sequence_changes


def diff_provenance(old: object, new: object, file: str = PROVENANCE_NAME) -> list:
    """Changes between two provenance records, the spec's text line by line (a line inserted near the top
    is one change, not a shift of every line after it); the rest by path, as `changes.diff_values` does.

    A changed or removed line is addressed by its index in the old record's `/spec/lines`, an added one
    by its index in the new record's."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return diff_values(old, new, file)
    old_spec, new_spec = old.get("spec"), new.get("spec")
    if not (isinstance(old_spec, dict) and isinstance(new_spec, dict)
            and isinstance(old_spec.get("lines"), list) and isinstance(new_spec.get("lines"), list)):
        return diff_values(old, new, file)
    a, b = old_spec["lines"], new_spec["lines"]
    rest = diff_values(
        {**old, "spec": {k: v for k, v in old_spec.items() if k != "lines"}},
        {**new, "spec": {k: v for k, v in new_spec.items() if k != "lines"}},
        file,
    )
    return rest + sequence_changes(file, ("spec", "lines"), a, b)
