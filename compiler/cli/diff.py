"""`mtpc diff A B`: a semantic diff of two packages or two specs."""

from __future__ import annotations

from pathlib import Path

from .report import console, verb_parser, out, print_json

HELP = "semantic diff of two package directories or two specs"
EPILOG = """\
Two DIRs: JSON and YAML files are parsed and compared by path, list items with a
`name` matched by name. ONNX graphs are compared by meaning, without reading their
weight data: inputs and outputs (name, dtype, shape), operator counts, nodes by
name (op, wiring, attributes such as MatMulNBits block_size), initializers by name
(dtype, shape, block encoding, where stored). Weight files (.onnx.data) get a short hash line and
a note pointing at quantization.json, whose table says how each weight is stored.
Two SPECs: both are compiled in memory; the IR after all passes is compared
(as `<ir>`), then every emitted file held in memory (configs, metadata, graphs
without their streamed weight data). The graphs are built only when the IRs
differ in more than what no graph reads (the name, the quantization rules and
which rule chose each weight's stored form, the runtime settings such as
max_draft_tokens): otherwise they are the same bytes.

Each changed file gets a severity, printed first: major (a graph's interface
changed, or a graph was added or removed), moderate (nodes added or removed,
another file added or removed), minor (attributes, initializers, settings).
Repeated changes collapse into one row with a count:
  ~ model.onnx:/outputs[name=present.{0..63}.*]/dtype: "float32" -> "float16" ×128
--format json keeps every change besides the rows; --format markdown opens with
what the spec changed (never cut), folds each file into <details> (rows two
graphs share, as model.onnx and decoder.onnx do, once for both) and stays under
GitHub's 65,536-character comment limit, saying what it left out.
Exit code 1 when there is any difference, so `mtpc diff` can gate a script; 2
when A or B is not what `mtpc check` takes (a folder without genai_config.json
or inference_metadata.yaml is not a package; a spec is a .yaml or .yml file).

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


def run(args) -> int:
    from ..api import diff
    from ..diffing.render import markdown, text  # onnx (the graph diff): only when there is something to diff
    from ..util.diagnostics import ExitCode

    report = diff(Path(args.old), Path(args.new)).report
    say = console(args)
    for name in sorted(report.by_file):
        say.detail(f"{name}: {len(report.by_file[name])} change(s)")
    if args.format == "json":
        print_json("diff", report.to_json(), ok=not report.changes)
    elif args.format == "markdown":
        out(markdown(report))
    else:
        for line in text(report):
            out(line)
    return int(ExitCode.FINDINGS) if report.changes else int(ExitCode.OK)
