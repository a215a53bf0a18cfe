"""Fill in the `default` values the spec schema declares, so the schema is the one place defaults live."""

from __future__ import annotations

import copy
from typing import Any


def apply_defaults(schema: dict, instance: Any) -> Any:
    """A copy of a schema-valid `instance` with every absent property that has a default filled in.

    Defaults are filled top-down, so an absent object whose default is `{}` gets
    its own properties' defaults too.
    """
    if isinstance(instance, dict) and "properties" in schema:
        out = dict(instance)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = apply_defaults(sub, out[key])
        return out
    if isinstance(instance, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in instance]
    return instance
