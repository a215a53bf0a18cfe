"""`mtpc schema [NAME]`: list or print the JSON Schemas mtpc validates against."""

from __future__ import annotations

import json

from ..util.diagnostics import ExitCode, MtpcError
from .report import verb_parser, out, print_json

HELP = "list the JSON Schemas, or print one"
EPILOG = """\
The schemas describe the spec and every artifact mtpc writes; editors and CI
can use them directly.

examples:
  mtpc schema                       # list the names
  mtpc schema genai_config > genai_config.schema.json
"""

SUFFIX = ".schema.json"


def add_parser(sub) -> None:
    p = verb_parser(sub, "schema", HELP, EPILOG)
    p.add_argument("name", nargs="?", metavar="NAME", help="schema name, with or without .schema.json")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..schema.validation import load_schema, schema_names

    names = schema_names()
    short = [n[: -len(SUFFIX)] for n in names]
    if args.name is None:
        if args.format == "json":
            print_json("schema", {"schemas": short}, ok=True)
        else:
            for n in short:
                out(n)
        return 0
    wanted = args.name[: -len(SUFFIX)] if args.name.endswith(SUFFIX) else args.name
    if wanted not in short:
        import difflib

        close = difflib.get_close_matches(wanted, short, n=1)
        raise MtpcError.single(
            f"no schema named {args.name!r}",
            exit_code=ExitCode.USAGE,
            hint=f"did you mean {close[0]!r}?" if close else f"known: {', '.join(short) or '(none)'}",
        )
    schema = load_schema(wanted)
    if args.format == "json":
        print_json("schema", {"name": wanted, "schema": schema}, ok=True)
    else:
        out(json.dumps(schema, indent=2, ensure_ascii=False))
    return 0
