"""Schema violations of a spec, as positioned diagnostics a person can act on.

jsonschema's own messages speak about Python values ("'x' is not of type
'integer'"); these speak about the spec ("source.synthetic.hidden_size must be
an integer, not the string 'x'"), point at the key or value at fault, and
suggest the nearest valid key or choice.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..util.diagnostics import Diagnostic
from ..schema.verdict import accepts, verdict
from ..schema.validation import load_schema
from ..util.suggest import choice_for, closest
from .yaml_positions import dotted

if TYPE_CHECKING:  # jsonschema is imported for a spec with errors only (see `_errors`)
    import jsonschema

    from .loaded import LoadedSpec


def _is_strict_integer(checker, instance) -> bool:
    # jsonschema counts 64.0 as an integer; a size written as 64.0 is a mistake we want to show.
    return isinstance(instance, int) and not isinstance(instance, bool)


@lru_cache(maxsize=None)
def spec_validator() -> "type[jsonschema.Draft202012Validator]":
    import jsonschema

    return jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
    )


@lru_cache(maxsize=None)
def _spec_verdict():
    return verdict(load_schema("spec"), strict_integers=True)

_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean (true or false)",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}


def _errors(spec: "LoadedSpec") -> "list[jsonschema.ValidationError]":
    # A spec the compiled verdict finds valid has no errors for jsonschema to find (mtpc.schema.verdict):
    # the common case, answered without importing jsonschema.
    if accepts(_spec_verdict(), spec.data):
        return []
    return list(spec_validator()(load_schema("spec")).iter_errors(spec.data))


def invalid_sections(spec: "LoadedSpec") -> frozenset[str] | None:
    """The top-level keys with a schema error under them; None when the spec is not even a mapping."""
    if not isinstance(spec.data, dict):
        return None
    return frozenset(str(e.absolute_path[0]) for e in _errors(spec) if e.absolute_path)


def schema_diagnostics(spec: "LoadedSpec") -> list[Diagnostic]:
    errors = _errors(spec)
    # A value of the wrong type also fails its enum / range checks; the type error says it all.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    out: list[Diagnostic] = []
    for error in errors:
        path = tuple(error.absolute_path)
        if path in mistyped and error.validator != "type":
            continue
        out.extend(_explain(spec, error, path))
    # jsonschema raises one `required` error per missing key, each listing every required key.
    return list(dict.fromkeys(out))


def _explain(spec: "LoadedSpec", error: jsonschema.ValidationError, path: tuple) -> list[Diagnostic]:
    where = dotted(path)
    kind, expected, value, schema = error.validator, error.validator_value, error.instance, error.schema

    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        place = "at the top level" if not path else f"in {where}"
        diagnostics = []
        for key in value:
            if key in allowed:
                continue
            guess = closest(key, allowed)
            hint = f"did you mean '{guess}'?" if guess else "expected one of: " + ", ".join(allowed)
            diagnostics.append(spec.diagnostic(path + (key,), f"unknown key '{key}' {place}", at="key", hint=hint))
        return diagnostics
    if kind == "required":
        return [
            spec.diagnostic(path, f"{where} is missing the required key '{key}'", at="key", hint=_about(schema, key))
            for key in expected
            if key not in value
        ]
    if kind == "type":
        wanted = [expected] if isinstance(expected, str) else expected
        hint = None
        if value is None and "object" in wanted:
            hint = _MINIMAL_SPEC if not path else "write {} for an empty mapping"
        if isinstance(value, (int, float)) and not isinstance(value, bool) and wanted == ["string"]:
            hint = f"quote it to make it text: \"{value}\""
        names = " or ".join(_TYPE_NAMES[t] for t in wanted)
        return [spec.diagnostic(path, f"{where} must be {names}, not {_shown(value)}", hint=hint)]
    if kind == "enum":
        choices = ", ".join(_literal(c) for c in expected)
        texts = [c for c in expected if isinstance(c, str)]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and texts:
            # YAML read `version: 0.18` as a number: the text it starts is what was meant.
            guess = next((c for c in texts if c.startswith(str(value))), None) or choice_for(str(value), texts)
            hint = f"quote it to make it text: \"{guess or texts[0]}\""
        else:
            guess = choice_for(value, texts)
            hint = f"did you mean '{guess}'?" if guess else None
        return [spec.diagnostic(path, f"{where} must be one of {choices}, not {_shown(value)}", hint=hint)]
    if kind == "const":
        hint = None
        if isinstance(expected, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
            hint = f"quote it to make it text: \"{expected}\""
        return [spec.diagnostic(path, f"{where} must be {_literal(expected)}, not {_shown(value)}", hint=hint)]
    if kind in ("minProperties", "maxProperties"):
        names = ", ".join(f"'{k}'" for k in schema.get("properties", {}))
        if schema.get("minProperties") == schema.get("maxProperties") == 1:
            found = f"; found {len(value)}: " + ", ".join(f"'{k}'" for k in value) if value else ""
            return [spec.diagnostic(path, f"{where} must name exactly one of {names}{found}", at="key")]
        return [spec.diagnostic(path, f"{where} must name at least one of {names}", at="key", hint=_about(schema))]
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "greater than",
            "exclusiveMaximum": "less than",
        }[kind]
        return [spec.diagnostic(path, f"{where} must be {bound} {expected}, not {_literal(value)}")]
    if kind in ("minItems", "maxItems"):
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low == high:
            count = f"exactly {low}"
        else:
            count = f"at least {low}" if kind == "minItems" else f"at most {high}"
        return [spec.diagnostic(path, f"{where} must have {count} items, not {len(value)}")]
    if kind == "minLength":
        return [spec.diagnostic(path, f"{where} must not be empty")]
    if kind == "pattern":
        return [spec.diagnostic(path, f"{where} {_literal(value)} is not allowed", hint=_about(schema))]
    if kind == "oneOf" and all(list(sub) == ["required"] and len(sub["required"]) == 1 for sub in expected):
        # `source`: one of its kinds, beside which other keys (`revision`) may stand
        names = [sub["required"][0] for sub in expected]
        found = [k for k in names if k in value] if isinstance(value, dict) else []
        others = [k for k in value if k not in names] if isinstance(value, dict) else []
        count = (f"; found {len(found)}: " + ", ".join(f"'{k}'" for k in found) if found
                 else f"; found only {', '.join(repr(k) for k in others)}" if others else "")
        listed = ", ".join(f"'{k}'" for k in names)
        return [spec.diagnostic(path, f"{where} must name exactly one of {listed}{count}", at="key")]
    if kind in ("oneOf", "anyOf") and all(_alternative(sub) for sub in expected):
        choices = ", ".join(_alternative(sub) for sub in expected)
        return [spec.diagnostic(path, f"{where} must be one of {choices}, not {_shown(value)}")]
    return [spec.diagnostic(path, f"{where}: {error.message}")]


def _alternative(schema: dict) -> str | None:
    """One branch of a oneOf / anyOf in words (`'auto', 'off'`; `a whole number from 2 to 17`), or None."""
    if "enum" in schema:
        return ", ".join(_literal(c) for c in schema["enum"])
    if schema.get("type") == "integer" and "minimum" in schema and "maximum" in schema:
        return f"a whole number from {schema['minimum']} to {schema['maximum']}"
    return None


_MINIMAL_SPEC = (
    "the smallest spec is three lines: `mtpc: 1`, `name: my-model` and `source: {synthetic: {}}` "
    "(or `source: {hf: FOLDER}` / `source: {gguf: FILE}`)"
)


def _about(schema: dict, key: str | None = None) -> str | None:
    target = schema.get("properties", {}).get(key, {}) if key else schema
    return target.get("description")


def _literal(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return f"the string '{value}'"
    if isinstance(value, bool) or value is None:
        return _literal(value)
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__} ({value})"
