"""Access to the JSON Schemas shipped in schemas/ and validation of artifacts against them."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:  # imported where a schema is applied: `mtpc --help` and `inspect` need none
    import jsonschema

# libyaml's safe loader and dumper where PyYAML has them: the same documents, read about ten times
# faster, which matters since every package is read back as it is built and checked before it is
# written. The C dumper writes the same bytes as the pure-Python one for what we dump (plain
# mappings, lists, strings, numbers, booleans; tests/schema/test_validation.py compares the two).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _schemas_folder() -> Path:
    # The folder of the `mtpc.schemas` package (data only), read directly: importlib.resources, which
    # would find the same files, costs every run that validates anything a fiftieth of a second to import.
    from .. import schemas

    return Path(schemas.__file__).parent


def schema_names() -> list[str]:
    return sorted(p.name for p in _schemas_folder().iterdir() if p.name.endswith(".schema.json"))


def _file_name(name: str) -> str:
    return name if name.endswith(".json") else f"{name}.schema.json"


def load_schema(name: str) -> dict:
    """`name` is a file in schemas/, with or without the `.schema.json` suffix."""
    return _load_schema(_file_name(name))


@lru_cache(maxsize=None)
def _load_schema(file_name: str) -> dict:
    return json.loads((_schemas_folder() / file_name).read_text(encoding="utf-8"))


def validator(name: str) -> "jsonschema.Draft202012Validator":
    return _validator(_file_name(name))


@lru_cache(maxsize=None)
def _validator(name: str) -> "jsonschema.Draft202012Validator":
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema(name), format_checker=jsonschema.FormatChecker())


def json_pointer(*parts: object) -> str:
    """The RFC 6901 pointer of a path of keys and list indices; "" is the whole document."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def json_path(error: "jsonschema.ValidationError") -> str:
    """Where in the instance an error is, for messages: its pointer, "/" for the whole document."""
    return json_pointer(*error.absolute_path) or "/"


@lru_cache(maxsize=None)
def _verdict(file_name: str):
    from .verdict import verdict

    return verdict(_load_schema(file_name))


def errors(name: str, instance) -> "list[jsonschema.ValidationError]":
    """jsonschema's errors of `instance` under the schema `name`, sorted by where and what.

    A document the schema's compiled verdict (`mtpc.schema.verdict`) says for sure is valid has none,
    and jsonschema is not imported for it; any other document is validated by jsonschema."""
    from .verdict import accepts

    if accepts(_verdict(_file_name(name)), instance):
        return []
    return sorted(validator(name).iter_errors(instance), key=lambda e: (json_path(e), e.message))


def read_yaml(text: str):
    """`yaml.safe_load(text)`, with libyaml's loader where it is available."""
    return yaml.load(text, Loader=_SAFE_LOADER)


def dump_yaml(data, **options) -> str:
    """`yaml.safe_dump(data, **options)`, with libyaml's dumper where it is available (the same text)."""
    return yaml.dump(data, Dumper=_SAFE_DUMPER, **options)
