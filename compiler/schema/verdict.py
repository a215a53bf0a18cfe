"""A JSON Schema compiled into jsonschema's yes / no answer, without importing jsonschema.

Almost every document mtpc validates is valid (every artifact it generates, every spec that
compiles), and importing jsonschema with attrs, referencing and its format checkers costs a
metadata verb about a tenth of a second before it validates anything. `verdict(schema)` turns a
Draft 2020-12 schema into a predicate that gives, for any document, the answer jsonschema 4's
`Draft202012Validator(schema).is_valid(document)` gives: each keyword is applied the way
jsonschema's own implementation of it applies it (`jsonschema/_keywords.py`, `_utils.equal`,
the draft 2020-12 type checker). What it cannot answer exactly it does not answer: a schema with
a keyword it does not implement compiles to None, and a document whose answer would depend on
corners it leaves to jsonschema (a float `multipleOf` past float range, `uniqueItems` over
anything but strings or integers, a dictionary key that is not a string under
`patternProperties`, a document too deep for the stack) raises `Undecided`.

Callers use it one way only: a sure "valid" means no errors; anything else (invalid, undecided,
not compiled) asks jsonschema, which finds and words the errors as before. So a wrong "invalid"
here would cost time, never a different report; tests/schema/test_verdict.py holds the answers
to jsonschema's on every golden artifact, every shipped and test spec, and thousands of broken
copies of them.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Any, Callable

from .values import TYPES, Undecided, all_unique, equal, is_integer, is_number, is_strict_integer

Predicate = Callable[[Any], bool]


class Unsupported(Exception):
    """The schema uses a keyword (or a form of one) this module does not implement."""


# Draft 2020-12 keywords jsonschema validates with (its Draft202012Validator.VALIDATORS) that are
# implemented here; `then` / `else` and `minContains` / `maxContains` are read by `if` and `contains`.
IMPLEMENTED = frozenset({
    "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains", "dependentRequired", "enum",
    "exclusiveMaximum", "exclusiveMinimum", "if", "items", "maxItems", "maxLength", "maxProperties", "maximum",
    "minItems", "minLength", "minProperties", "minimum", "multipleOf", "not", "oneOf", "pattern",
    "patternProperties", "prefixItems", "properties", "propertyNames", "required", "type", "uniqueItems",
})
# Keywords jsonschema does not validate with: annotations, and the parts of keywords above.
IGNORED = frozenset({
    "$schema", "$defs", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly",
    "writeOnly", "then", "else", "minContains", "maxContains",
})
# Everything else ($dynamicRef, unevaluatedProperties, format, dependentSchemas, $anchor, a nested $id,
# keywords of other drafts or of no draft) makes the schema Unsupported: jsonschema answers for it.


def verdict(schema: Any, *, strict_integers: bool = False) -> Predicate | None:
    """The predicate of `schema` (None when it uses what is not implemented here).

    `strict_integers`: "integer" means an int that is not a bool, as mtpc's spec validator redefines
    it (jsonschema's draft 2020-12 checker also counts floats such as 64.0)."""
    try:
        return _Compiler(schema, strict_integers).compile(schema, root=True)
    except (Unsupported, re.error, TypeError, ValueError, AttributeError, RecursionError):
        return None  # not implemented here, or a malformed schema: jsonschema says what it makes of it


def accepts(predicate: Predicate | None, instance: Any) -> bool:
    """True only when `predicate` says for sure that `instance` is valid."""
    if predicate is None:
        return False
    token = _ANSWERS.set({})  # answers are remembered for this one document
    try:
        return predicate(instance)
    except (Undecided, RecursionError):  # left to jsonschema, or a document deeper than the stack
        return False
    finally:
        _ANSWERS.reset(token)


# A `$ref` applied to a mapping equal to one it was applied to before in the same document gives the
# same answer (a predicate is a function of the schema and the value; `repr` tells the values of a JSON
# or YAML document apart, types included): a package's quantization.json repeats a few stored forms
# hundreds of times.
_ANSWERS: "ContextVar[dict | None]" = ContextVar("mtpc_schema_verdict_answers", default=None)


def _yes(x) -> bool:
    return True


def _no(x) -> bool:
    return False


# ----------------------------------------------------------------------------- the compiler


class _Compiler:
    def __init__(self, root: Any, strict_integers: bool):
        self.root = root
        self.types = dict(TYPES, integer=is_strict_integer if strict_integers else is_integer)
        self.compiled: dict[int, Predicate] = {}  # id(schema node) -> its predicate, for $ref (and recursion)

    def resolve(self, ref: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#") or "%" in ref:
            raise Unsupported(ref)  # another document, an anchor, an escaped pointer: referencing's job
        node = self.root
        pointer = ref[1:]
        if pointer and not pointer.startswith("/"):
            raise Unsupported(ref)
        for part in pointer.split("/")[1:] if pointer else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise Unsupported(ref)
        return node

    def compile(self, node: Any, root: bool = False) -> Predicate:
        if node is True:
            return _yes
        if node is False:
            return _no
        if not isinstance(node, dict):
            raise Unsupported(repr(node))
        done = self.compiled.get(id(node))
        if done is not None:
            return done
        slot: list[Predicate] = []
        # A forward reference for a schema that refers to itself while it is being compiled.
        self.compiled[id(node)] = lambda x: slot[0](x)
        for key in node:
            if key not in IMPLEMENTED and key not in IGNORED and not (root and key == "$id"):
                raise Unsupported(key)
        checks = [c for c in (self._type(node), self._scalar(node), self._object(node), self._array(node),
                              self._values(node), self._applicators(node)) if c is not None]
        if not checks:
            predicate = _yes
        elif len(checks) == 1:
            predicate = checks[0]
        else:
            def predicate(x, checks=tuple(checks)):
                for check in checks:
                    if not check(x):
                        return False
                return True
        slot.append(predicate)
        self.compiled[id(node)] = predicate
        return predicate

    def _type(self, node: dict) -> Predicate | None:
        if "type" not in node:
            return None
        names = node["type"]
        names = [names] if isinstance(names, str) else names
        try:
            tests = tuple(self.types[name] for name in names)
        except (KeyError, TypeError):
            raise Unsupported(f"type {names!r}") from None
        if len(tests) == 1:
            return tests[0]
        return lambda x: any(test(x) for test in tests)

    def _scalar(self, node: dict) -> Predicate | None:
        """minimum / maximum / exclusive bounds / multipleOf (numbers), minLength / maxLength / pattern (strings)."""
        bounds = [(key, node[key]) for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if key in node]
        multiple = node.get("multipleOf")
        lengths = (node.get("minLength"), node.get("maxLength"))
        pattern = re.compile(node["pattern"]) if "pattern" in node else None
        if not bounds and multiple is None and lengths == (None, None) and pattern is None:
            return None
        low, high = lengths

        def scalar(x) -> bool:
            if isinstance(x, str):
                if low is not None and len(x) < low:
                    return False
                if high is not None and len(x) > high:
                    return False
                return pattern is None or pattern.search(x) is not None
            if not is_number(x):
                return True
            for key, bound in bounds:
                if key == "minimum" and x < bound or key == "maximum" and x > bound:
                    return False
                if key == "exclusiveMinimum" and x <= bound or key == "exclusiveMaximum" and x >= bound:
                    return False
            if multiple is not None:
                if isinstance(multiple, float):
                    try:
                        quotient = x / multiple
                        failed = int(quotient) != quotient
                    except (OverflowError, ValueError):  # jsonschema goes on with Fractions, or fails
                        raise Undecided from None
                else:
                    failed = x % multiple
                if failed:
                    return False
            return True

        return scalar

    def _object(self, node: dict) -> Predicate | None:
        keys = ("properties", "patternProperties", "additionalProperties", "required", "propertyNames",
                "minProperties", "maxProperties", "dependentRequired")
        if not any(key in node for key in keys):
            return None
        properties = {name: self.compile(sub) for name, sub in node.get("properties", {}).items()}
        patterns = [(re.compile(p), self.compile(sub)) for p, sub in node.get("patternProperties", {}).items()]
        joined = re.compile("|".join(node["patternProperties"])) if node.get("patternProperties") else None
        extra = node.get("additionalProperties", True)
        extra_check = self.compile(extra) if isinstance(extra, dict) else None
        no_extras = extra_check is None and not extra  # `additionalProperties: false` (or another falsy value)
        if "additionalProperties" in node and extra_check is None and not isinstance(extra, bool):
            raise Unsupported(f"additionalProperties {extra!r}")
        required = tuple(node.get("required", ()))
        names = self.compile(node["propertyNames"]) if "propertyNames" in node else None
        least, most = node.get("minProperties"), node.get("maxProperties")
        dependent = tuple((k, tuple(v)) for k, v in node.get("dependentRequired", {}).items())

        def obj(x) -> bool:
            if not isinstance(x, dict):
                return True
            if patterns and not all(isinstance(key, str) for key in x):
                raise Undecided  # jsonschema's re.search over a key that is not a string raises
            for name in required:
                if name not in x:
                    return False
            if least is not None and len(x) < least or most is not None and len(x) > most:
                return False
            for name, needs in dependent:
                if name in x and any(each not in x for each in needs):
                    return False
            for key, value in x.items():
                if names is not None and not names(key):
                    return False
                check = properties.get(key)
                if check is not None and not check(value):
                    return False
                for regex, sub in patterns:  # every key a pattern matches, named in `properties` or not
                    if regex.search(key) is not None and not sub(value):
                        return False
                if check is not None or joined is not None and joined.search(key) is not None:
                    continue  # not an additional property
                if no_extras:
                    return False
                if extra_check is not None and not extra_check(value):
                    return False
            return True

        return obj

    def _array(self, node: dict) -> Predicate | None:
        keys = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains")
        if not any(key in node for key in keys):
            return None
        prefix = tuple(self.compile(sub) for sub in node.get("prefixItems", ()))
        items = node.get("items", True)
        if not isinstance(items, (bool, dict)):
            raise Unsupported(f"items {items!r}")
        rest = self.compile(items) if isinstance(items, dict) else None
        no_rest = items is False
        least, most = node.get("minItems"), node.get("maxItems")
        unique = bool(node.get("uniqueItems", False))
        contains = self.compile(node["contains"]) if "contains" in node else None
        min_contains = node.get("minContains", 1)
        max_contains = node.get("maxContains")

        def arr(x) -> bool:
            if not isinstance(x, list):
                return True
            if least is not None and len(x) < least or most is not None and len(x) > most:
                return False
            for check, value in zip(prefix, x):
                if not check(value):
                    return False
            if len(x) > len(prefix):
                if no_rest:
                    return False
                if rest is not None:
                    for value in x[len(prefix):]:
                        if not rest(value):
                            return False
            if unique and not all_unique(x):
                return False
            if contains is not None:
                matches = sum(1 for value in x if contains(value))
                if matches < min_contains or matches > (len(x) if max_contains is None else max_contains):
                    return False
            return True

        return arr

    def _values(self, node: dict) -> Predicate | None:
        checks = []
        if "enum" in node:
            choices = node["enum"]
            strings = frozenset(c for c in choices if type(c) is str)

            def enum(x) -> bool:
                if type(x) is str:  # equal() of a string is ==, and only strings equal strings
                    return x in strings
                return any(equal(c, x) for c in choices)

            checks.append(enum)
        if "const" in node:
            const = node["const"]
            checks.append(lambda x: equal(x, const))
        return _all(checks)

    def _applicators(self, node: dict) -> Predicate | None:
        checks = []
        if "$ref" in node:
            target = self.resolve(node["$ref"])
            # (a schema being compiled, referring to itself, gives its forward predicate)
            checks.append(_remembered(self.compile(target), id(target)))
        if "allOf" in node:
            subs = tuple(self.compile(s) for s in _nonempty(node["allOf"]))
            checks.append(lambda x: all(s(x) for s in subs))
        if "anyOf" in node:
            subs = tuple(self.compile(s) for s in _nonempty(node["anyOf"]))
            checks.append(lambda x: any(s(x) for s in subs))
        if "oneOf" in node:
            subs = tuple(self.compile(s) for s in _nonempty(node["oneOf"]))

            def one_of(x) -> bool:
                valid = 0
                for s in subs:
                    if s(x):
                        valid += 1
                        if valid > 1:
                            return False
                return valid == 1

            checks.append(one_of)
        if "not" in node:
            negated = self.compile(node["not"])
            checks.append(lambda x: not negated(x))
        if "if" in node:
            condition = self.compile(node["if"])
            then = self.compile(node["then"]) if "then" in node else _yes
            otherwise = self.compile(node["else"]) if "else" in node else _yes
            checks.append(lambda x: then(x) if condition(x) else otherwise(x))
        return _all(checks)


def _remembered(target: Predicate, key: int) -> Predicate:
    def ref(x) -> bool:
        answers = _ANSWERS.get() if type(x) is dict else None
        if answers is None:
            return target(x)
        seen = (key, repr(x))
        answer = answers.get(seen)
        if answer is None:
            answer = answers[seen] = target(x)
        return answer

    return ref


def _nonempty(subschemas) -> list:
    if not isinstance(subschemas, list) or not subschemas:
        raise Unsupported(repr(subschemas))
    return subschemas


def _all(checks: list[Predicate]) -> Predicate | None:
    if not checks:
        return None
    if len(checks) == 1:
        return checks[0]
    return lambda x: all(check(x) for check in checks)
