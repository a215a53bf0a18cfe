"""`mtpc diff A B`: a semantic diff of two packages or two specs."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from ..api import diff
from ..diagnostics import ExitCode
from ..diffing import summary
from .report import console, verb_parser, out, print_json

HELP = "semantic diff of two package directories or two specs"
EPILOG = """\
Two DIRs: JSON and YAML files are parsed and compared by path, list items with a
`name` matched by name; other files (ONNX graphs, weights) by SHA-256.
Two SPECs: both are compiled in memory; the IR after all passes is compared
(as `<ir>`), then every emitted file held in memory (configs, metadata, graphs
without their streamed weight data). Changes are sorted and stable.
Exit code 1 when there is any difference, so `mtpc diff` can gate a script.

examples:
  mtpc diff out/before out/after
  mtpc diff specs/a.yaml specs/b.yaml --format json
  mtpc diff out/main out/pr --format markdown > comment.md   # for a pull-request comment
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "diff", HELP, EPILOG, formats=("text", "json", "markdown"))
    p.add_argument("old", metavar="A", help="the old package directory or spec")
    p.add_argument("new", metavar="B", help="the new package directory or spec")
    p.set_defaults(run=run)


def compute(old: Path, new: Path):
    return list(diff(old, new).changes)


def render_markdown(old: str, new: str, changes) -> str:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: resources.files("mtpc.templates").joinpath(name).read_text("utf-8")),
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["cell"] = _cell
    by_file: dict[str, list] = {}
    for c in changes:
        by_file.setdefault(c.file, []).append(c)
    return env.get_template("diff.md.j2").render(old=old, new=new, summary=summary(changes), files=by_file)


def _cell(value) -> str:
    """A value in a Markdown table cell: inline code, pipes escaped, long values cut."""
    import json

    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > 120:
        text = text[:117] + "..."
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def run(args) -> int:
    changes = compute(Path(args.old), Path(args.new))
    say = console(args)
    for name in sorted({c.file for c in changes}):
        say.detail(f"{name}: {sum(1 for c in changes if c.file == name)} change(s)")
    if args.format == "json":
        print_json(
            "diff",
            {"old": args.old, "new": args.new, "summary": summary(changes), "changes": [c.to_json() for c in changes]},
            ok=not changes,
        )
    elif args.format == "markdown":
        out(render_markdown(args.old, args.new, changes).rstrip("\n"))
    else:
        for c in changes:
            out(c.render())
        out(summary(changes))
    return int(ExitCode.FINDINGS) if changes else int(ExitCode.OK)
