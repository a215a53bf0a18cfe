"""`mtpc compile SPEC [-o DIR]`: the full pipeline, written atomically."""

from __future__ import annotations

from .report import console, out, print_json, verb_parser

HELP = "compile a spec into a runtime package"
EPILOG = """\
The package is written atomically: files go to a temporary sibling folder that
replaces DIR only once everything is written, so a failure leaves DIR exactly
as it was (or absent). Compiling the same spec twice gives byte-identical files.
Before anything is written the package passes every check of `mtpc check`, in
memory: a spec no runtime could use is refused at its own lines (exit 1), and
a package of ours that would fail a check is a bug in mtpc (exit 3).

DIR may be absent, an empty folder, or a package mtpc wrote before (known by its
README.md); anything else is refused unless --force. A file, and a folder that
holds the spec or the source checkpoint, are never replaced.

Progress goes to stderr: the phases, then the bytes written (the weights are read,
converted and written as one stream) as a bar with rate and ETA on a terminal, or
as a plain line every MTPC_PROGRESS_INTERVAL seconds (default 10) and at every
tenth of the way in a log. The package records where it came from in
provenance.json (mtpc's version, the spec, the source's fingerprint).

--tune-report FILE puts what `mtpc tune DIR --format json` measured on a package of
this spec (tokens per second for every draft count, acceptance per draft position,
the recommendation) into the model card. The table comes from the file alone, so the
card stays byte-identical; a report of another checkpoint or of other stored weights
is refused (exit 2). Changing only the draft count, as tune recommends, keeps it valid.

examples:
  mtpc compile specs/qwen35-tiny-mtp.yaml              # -> out/qwen35-tiny-mtp/
  mtpc compile specs/qwen35-tiny-mtp.yaml -o pkg -q    # no progress on stderr
  mtpc compile spec.yaml -v 2>build.log                # elapsed times and a line per file written
  mtpc compile spec.yaml --format json | jq .files
  mtpc compile spec.yaml -o build/pkg --force          # replace build/pkg whatever it holds
  mtpc compile spec.yaml -j 1                          # one thread (same bytes as the default)
  mtpc compile spec.yaml -o pkg --tune-report tune.json  # the card shows the measured speed
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "compile", HELP, EPILOG)
    p.add_argument("spec", metavar="SPEC", help="the spec file (YAML)")
    p.add_argument("-o", "--output", metavar="DIR", help="output directory (default: ./out/<spec name>)")
    p.add_argument("--force", action="store_true", help="replace DIR even if it is not an mtpc package")
    p.add_argument(
        "-j", "--jobs", type=_jobs, metavar="N", default=None,
        help="threads converting weights while they are written (default: every available core); "
        "the package is byte-identical for any N",
    )
    p.add_argument(
        "--tune-report", metavar="FILE",
        help="a `mtpc tune --format json` report of a package of this spec: its measured decoding speed goes "
        "into the model card (README.md); refused when it was measured on another checkpoint or other stored weights",
    )
    p.set_defaults(run=run)


def _jobs(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run(args) -> int:
    from ..api import compile as compile_package
    from ..util import interrupts
    from ..util.progress import human_size

    say = console(args)
    result = compile_package(args.spec, args.output, force=args.force, progress=say, jobs=args.jobs, tune_report=args.tune_report)
    interrupts.test_point("reporting")
    if args.format == "json":
        # Hashed as the files were written: nothing is read back.
        files = [{"path": f.path, "bytes": f.bytes, "sha256": f.sha256} for f in result.files]
        print_json("compile", {"ok": True, "output": str(result.output), "files": files, "notes": list(result.notes)})
        return result.exit_code
    for note in result.notes:
        out(f"note: {note}")
    width = max((len(f.path) for f in result.files), default=0)
    for f in result.files:
        out(f"  {f.path.ljust(width)}  {human_size(f.bytes):>9}")
    total = sum(f.bytes for f in result.files)
    out(f"wrote {len(result.files)} files ({human_size(total)}) to {result.output}")
    return result.exit_code
