"""`mtpc check SPEC|DIR...`: the CI gate. Schemas plus cross-artifact contracts."""

from __future__ import annotations

from ..api import check as check_targets
from ..diagnostics import ExitCode
from .report import console, verb_parser, err, out, print_json

HELP = "validate packages (or specs, compiled in memory) against schemas and cross-artifact contracts"
EPILOG = """\
A DIR is a package: every genai_config.json (the root one and a head folder's),
inference_metadata.yaml and config.json's speculator_config are validated
against mtpc's schemas, then checked against each other and the ONNX graphs
(read without weights): every tensor name a config mentions exists in the graph
(%d templates expanded over the layers that have that state), the MTP head's
hidden-state input matches the main output it is fed from (dtype, width, rank),
the embedding and LM head onnx-genai's sidecar borrows exist in the target
graph in a form it takes (a dense float embedding; a dense float LM head, or a
MatMulNBits-packed one with `<prefix>.scales` beside it), file names are
relative without '..'. A SPEC is compiled in memory (nothing written) and
checked the same way; compile runs these checks too before it writes, so a
finding in a spec's package is a bug in mtpc (exit 3). Every finding is
reported, one line each: FILE:JSON-PATH: MESSAGE.
A target that cannot be checked (missing, not a package, not a spec file) is
reported on stderr and the others are still checked; the exit code is then 2.

examples:
  mtpc check out/qwen35-tiny-mtp
  mtpc check specs/*.yaml out/*/ --format github     # annotations in a GitHub Actions log
  mtpc check out/pkg --format json | jq '.targets[].findings'
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "check", HELP, EPILOG, formats=("text", "json", "github"))
    p.add_argument("targets", nargs="+", metavar="SPEC|DIR", help="spec files and/or package directories")
    p.set_defaults(run=run)


def run(args) -> int:
    result = check_targets(*args.targets)
    say = console(args)
    for t in result.targets:
        say.detail(f"checked {t.path} ({t.kind}): {len(t.findings)} finding{'s' if len(t.findings) != 1 else ''}")
    code = ExitCode(result.exit_code)
    if args.format == "json":
        payload = {
            "summary": result.summary,
            "targets": [
                {"target": str(t.path), "kind": t.kind, "findings": [r.to_json() for r in t.findings]} for t in result.targets
            ],
        }
        if result.unusable:
            payload.update(exit_code=int(code), diagnostics=[d.to_json() for d in result.unusable])
        print_json("check", payload, ok=result.ok)
    else:
        for r in result.findings:
            out(r.github() if args.format == "github" else r.text())
        for d in result.unusable:
            err(d.render())
        err(f"mtpc check: {result.summary}" if not result.ok else f"mtpc check: ok ({_targets(len(result.targets))})")
    return int(code)


def _targets(n: int) -> str:
    return f"{n} target{'s' if n != 1 else ''}"
