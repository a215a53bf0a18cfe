"""Access to the JSON Schemas shipped in schemas/ and validation of artifacts against them."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # imported where a schema is applied: `mtpc --help` and `inspect` need none
    import jsonschema

# libyaml's safe loader and dumper where PyYAML has them: the same documents, read about ten times
# faster, which matters since every package is read back as it is built and checked before it is
# written. The C dumper writes the same bytes as the pure-Python one for what we dump (plain
# mappings, lists, strings, numbers, booleans; tests/test_validation.py compares the two).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def schema_names() -> list[str]:
    return sorted(p.name for p in resources.files("mtpc.schemas").iterdir() if p.name.endswith(".schema.json"))


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """`name` is a file in schemas/, with or without the `.schema.json` suffix."""
    if not name.endswith(".json"):
        name = f"{name}.schema.json"
    return json.loads(resources.files("mtpc.schemas").joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def validator(name: str) -> "jsonschema.Draft202012Validator":
    import jsonschema

    schema = load_schema(name)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def json_pointer(*parts: object) -> str:
    """The RFC 6901 pointer of a path of keys and list indices; "" is the whole document."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def json_path(error: "jsonschema.ValidationError") -> str:
    """Where in the instance an error is, for messages: its pointer, "/" for the whole document."""
    return json_pointer(*error.absolute_path) or "/"


def errors(name: str, instance) -> "list[jsonschema.ValidationError]":
    return sorted(validator(name).iter_errors(instance), key=lambda e: (json_path(e), e.message))


def read_yaml(text: str):
    """`yaml.safe_load(text)`, with libyaml's loader where it is available."""
    return yaml.load(text, Loader=_SAFE_LOADER)


def dump_yaml(data, **options) -> str:
    """`yaml.safe_dump(data, **options)`, with libyaml's dumper where it is available (the same text)."""
    return yaml.dump(data, Dumper=_SAFE_DUMPER, **options)
