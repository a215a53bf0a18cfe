"""`mtpc check SPEC|DIR...`: the CI gate. Schemas, cross-artifact contracts and completeness (see `mtpc.api.checking`)."""

from __future__ import annotations

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
checked the same way, except that its ONNX graphs are not built: the configs
are checked against the inputs and outputs the graphs are built to, and what
only a built graph holds (borrowed initializers, external data) is checked by
compile, which runs all these checks before it writes. A finding in a spec's
package is a bug in mtpc (exit 3).
A package must also be complete: every file its runtimes need is there (the head
folder's genai_config.json, inference_metadata.yaml beside onnx-genai's sidecar,
config.json's speculator_config beside the sidecar, each graph's external data,
long enough); a missing file is a finding about that file. A package without a
tokenizer is a warning for onnxruntime-genai (token ids still work), an error
beside inference_metadata.yaml (onnx-genai refuses it). onnx-genai metadata is
checked as onnx-genai routes it (commit ac9c7dd): without a pipeline, what its
Engine::from_dir refuses; with one, a warning that the MTP head is never used.
Every file the package's manifest.json lists (compile writes it, with each
file's size and sha256) must be there, as long and with the same sha256: a file
missing, truncated or altered since is a finding naming it (this reads every
file once); a package written without a tokenizer does not list one to miss.
Every finding is reported, one line each: FILE:LINE:COL: JSON-PATH: MESSAGE
(the line of the key in a JSON or YAML file; FILE:JSON-PATH: for graphs).
--offline: a spec's hf or gguf checkpoint is not opened; the schema, the
cross-field rules and the targets are checked, and a note says what was not.
A repo on the Hugging Face Hub makes no request either: it is checked in full
from huggingface_hub's cache when the cache holds it, and otherwise the note
says what the cache lacks.
Without it, a spec whose checkpoint is absent cannot be checked (exit 2).
--format github: ::error / ::warning / ::notice annotations, paths relative to
the working directory, line= and col= where known, hints kept; a target that
cannot be checked, and a mistake in the arguments, is an ::error too.
A target that cannot be checked (missing, not a package, not a spec file) is
reported on stderr and the others are still checked; the exit code is then 2.

examples:
  mtpc check out/qwen35-tiny-mtp
  mtpc check specs/*.yaml out/*/ --format github     # annotations in a GitHub Actions log
  mtpc check --offline specs/*.yaml                  # in CI, without the checkpoints
  mtpc check out/pkg --format json | jq '.targets[].findings'
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "check", HELP, EPILOG, formats=("text", "json", "github"))
    p.add_argument("targets", nargs="+", metavar="SPEC|DIR", help="spec files and/or package directories")
    p.add_argument(
        "--offline", action="store_true",
        help="check specs without their checkpoint: an hf or gguf source is not opened (schema, cross-field rules "
        "and targets are checked; what needs the weights is not); a synthetic spec is still checked in full",
    )
    p.add_argument(
        "--skip-non-specs", action="store_true",
        help="skip YAML files that are not mtpc specs (no top-level `mtpc:` key) instead of reporting them: "
        "for a pre-commit hook or a glob over a folder of mixed YAML",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    from ..api import check as check_targets
    from ..util.diagnostics import ExitCode

    result = check_targets(*args.targets, offline=args.offline, skip_non_specs=args.skip_non_specs)
    say = console(args)
    for t in result.targets:
        say.detail(f"checked {t.path} ({t.kind}): {len(t.findings)} finding{'s' if len(t.findings) != 1 else ''}")
    for path in result.skipped:
        say.detail(f"skipped {path}: not an mtpc spec (no top-level `mtpc:` key)")
    code = ExitCode(result.exit_code)
    if args.format == "json":
        payload = {
            "summary": result.summary,
            "targets": [
                {"target": str(t.path), "kind": t.kind, "findings": [r.to_json() for r in t.findings]} for t in result.targets
            ],
            "skipped": [str(p) for p in result.skipped],
        }
        if result.unusable:
            payload.update(exit_code=int(code), diagnostics=[d.to_json() for d in result.unusable])
        print_json("check", payload, ok=result.ok)
    else:
        for r in result.findings:
            if args.format == "github":
                out(r.github())
            elif r.severity == "note":
                if not say.quiet:
                    err(r.text())  # how it was checked, not a finding: beside the summary, unless -q
            else:
                out(r.text())
        if args.format == "github":  # on the pull request too, not only in the log
            for line in result.unusable_annotations():
                out(line)
        for d in result.unusable:
            err(d.render())
        if not say.quiet:  # -q: nothing on stderr but errors (the findings are on stdout)
            err(f"mtpc check: {result.summary}")
    return int(code)
