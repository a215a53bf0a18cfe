"""Access to the JSON Schemas shipped in schemas/ and validation of artifacts against them."""

from __future__ import annotations

import json
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
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


def _schemas_folder() -> Path:
    # The folder of the `mtpc.schemas` package (data only), read directly: importlib.resources, which
    # would find the same files, costs every run that validates anything a fiftieth of a second to import.
    from . import schemas

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

    schema = load_schema(name)
    cls = jsonschema.Draft202012Validator if _scope_dependent(schema) else _memoizing_validator()
    return cls(schema, format_checker=jsonschema.FormatChecker())


# A `$ref` whose target already accepted an equal instance in this validation accepts it again: the
# result of applying a subschema is a function of the subschema and the instance alone, except where
# dynamic scope or annotations from other keywords take part (the keywords below; a schema using one is
# validated without the memo). A package's quantization.json names every weight (866 in a 64-layer
# model) with a handful of distinct stored forms and rules, so most `$ref`s are answered here; only
# acceptances are remembered, so every error is found and reported exactly as jsonschema reports it
# (tests/test_validation.py compares the two on every golden artifact and on broken copies of them).
_SCOPE_DEPENDENT = ("$dynamicRef", "$recursiveRef", "unevaluatedProperties", "unevaluatedItems")
_ACCEPTED: "ContextVar[set | None]" = ContextVar("mtpc_schema_acceptances", default=None)


def _scope_dependent(schema: dict) -> bool:
    text = json.dumps(schema)
    return any(json.dumps(keyword) in text for keyword in _SCOPE_DEPENDENT)


@lru_cache(maxsize=None)
def _memoizing_validator():
    import jsonschema

    base = jsonschema.Draft202012Validator
    plain_ref = base.VALIDATORS["$ref"]

    def ref(validator, ref, instance, schema):
        accepted = _ACCEPTED.get()
        if accepted is None:
            yield from plain_ref(validator, ref, instance, schema)
            return
        key = (id(schema), repr(instance))  # repr: exact type and value of a JSON / YAML document's parts
        if key in accepted:
            return
        found = list(plain_ref(validator, ref, instance, schema))
        if not found:
            accepted.add(key)
        yield from found

    return jsonschema.validators.extend(base, {"$ref": ref})


def json_pointer(*parts: object) -> str:
    """The RFC 6901 pointer of a path of keys and list indices; "" is the whole document."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def json_path(error: "jsonschema.ValidationError") -> str:
    """Where in the instance an error is, for messages: its pointer, "/" for the whole document."""
    return json_pointer(*error.absolute_path) or "/"


@lru_cache(maxsize=None)
def _verdict(file_name: str):
    from .schema_verdict import verdict

    return verdict(_load_schema(file_name))


def errors(name: str, instance) -> "list[jsonschema.ValidationError]":
    """jsonschema's errors of `instance` under the schema `name`, sorted by where and what.

    A document the schema's compiled verdict (`mtpc.schema_verdict`) says for sure is valid has none,
    and jsonschema is not imported for it; any other document is validated by jsonschema."""
    from .schema_verdict import accepts

    if accepts(_verdict(_file_name(name)), instance):
        return []
    token = _ACCEPTED.set(set())  # acceptances are remembered for this one document
    try:
        return sorted(validator(name).iter_errors(instance), key=lambda e: (json_path(e), e.message))
    finally:
        _ACCEPTED.reset(token)


def read_yaml(text: str):
    """`yaml.safe_load(text)`, with libyaml's loader where it is available."""
    return yaml.load(text, Loader=_SAFE_LOADER)


def dump_yaml(data, **options) -> str:
    """`yaml.safe_dump(data, **options)`, with libyaml's dumper where it is available (the same text)."""
    return yaml.dump(data, Dumper=_SAFE_DUMPER, **options)
