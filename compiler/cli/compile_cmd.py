"""`mtpc compile SPEC [-o DIR]`: the full pipeline, written atomically."""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import ExitCode, MtpcError
from ..diffing import digest, file_chunks
from .report import verb_parser, existing_file, out, print_json, progress_printer

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

examples:
  mtpc compile specs/qwen35-tiny-mtp.yaml              # -> out/qwen35-tiny-mtp/
  mtpc compile specs/qwen35-tiny-mtp.yaml -o pkg -q    # no progress on stderr
  mtpc compile spec.yaml --format json | jq .files
  mtpc compile spec.yaml -o build/pkg --force          # replace build/pkg whatever it holds
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "compile", HELP, EPILOG)
    p.add_argument("spec", metavar="SPEC", help="the spec file (YAML)")
    p.add_argument("-o", "--output", metavar="DIR", help="output directory (default: ./out/<spec name>)")
    p.add_argument("--force", action="store_true", help="replace DIR even if it is not an mtpc package")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run)


def default_output(name: str) -> Path:
    return Path("out") / name


def run(args) -> int:
    from ..driver import build
    from ..output import check_destination, write_package
    from ..quant import measured_requantization_note

    if args.output is not None and not args.output.strip():
        # An empty DIR is a mistake (an unset variable in `-o "$DIR"`), not a request for the default.
        raise MtpcError.single(
            f"-o/--output is empty ({args.output!r}): give the folder to write the package to",
            exit_code=ExitCode.USAGE,
            hint="leave -o out to write to ./out/<spec name>",
        )
    spec = existing_file(args.spec, "spec")
    protected = [("spec", spec)]
    if args.output is not None:
        # Refuse before the build, which can take minutes; the source checkpoint is known only after it.
        check_destination(args.output, force=args.force, protected=protected)
    progress = progress_printer(args.quiet or args.format == "json")
    with build(spec, progress=progress) as result:
        target = Path(args.output) if args.output is not None else default_output(result.ir.name)
        if result.ir.source.path is not None:
            protected.append(("source checkpoint", result.ir.source.path))
        progress(f"writing {len(result.artifacts)} files to {target}")
        write_package(result.artifacts, target, force=args.force, protected=protected)
    measured = measured_requantization_note(result.ir.weights, result.context.requantization_error)
    notes = list(result.ir.notes) + ([measured] if measured else [])
    files = []
    for art in result.artifacts:
        path = target / art.relpath
        files.append({"path": art.relpath, "bytes": path.stat().st_size})
    if args.format == "json":
        for entry in files:
            entry["sha256"] = digest(file_chunks(target / entry["path"]))
        print_json("compile", {"ok": True, "output": str(target), "files": files, "notes": notes})
        return 0
    for note in notes:
        out(f"note: {note}")
    for entry in files:
        out(f"  {entry['path']}  ({entry['bytes']} bytes)")
    out(f"wrote {len(files)} files to {target}")
    return 0

