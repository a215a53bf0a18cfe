"""`mtpc compile SPEC [-o DIR]`: the full pipeline, written atomically."""

from __future__ import annotations

from pathlib import Path

from ..diffing import digest, file_chunks
from .report import verb_parser, existing_file, out, print_json, progress_printer

HELP = "compile a spec into a runtime package"
EPILOG = """\
The package is written atomically: files go to a temporary sibling folder that
replaces DIR only once everything is written, so a failure leaves DIR exactly
as it was (or absent). Compiling the same spec twice gives byte-identical files.

examples:
  mtpc compile specs/qwen35-tiny-mtp.yaml              # -> out/qwen35-tiny-mtp/
  mtpc compile specs/qwen35-tiny-mtp.yaml -o pkg -q    # no progress on stderr
  mtpc compile spec.yaml --format json | jq .files
"""


def add_parser(sub) -> None:
    p = verb_parser(sub, "compile", HELP, EPILOG)
    p.add_argument("spec", metavar="SPEC", help="the spec file (YAML)")
    p.add_argument("-o", "--output", metavar="DIR", help="output directory (default: ./out/<spec name>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=run)


def default_output(name: str) -> Path:
    return Path("out") / name


def run(args) -> int:
    from ..driver import build
    from ..output import write_package

    spec = existing_file(args.spec, "spec")
    progress = progress_printer(args.quiet or args.format == "json")
    result = build(spec, progress=progress)
    target = Path(args.output) if args.output else default_output(result.ir.name)
    progress(f"writing {len(result.artifacts)} files to {target}")
    write_package(result.artifacts, target)
    files = []
    for art in result.artifacts:
        path = target / art.relpath
        files.append({"path": art.relpath, "bytes": path.stat().st_size})
    if args.format == "json":
        for entry in files:
            entry["sha256"] = digest(file_chunks(target / entry["path"]))
        print_json("compile", {"ok": True, "output": str(target), "files": files, "notes": list(result.ir.notes)})
        return 0
    for note in result.ir.notes:
        out(f"note: {note}")
    for entry in files:
        out(f"  {entry['path']}  ({entry['bytes']} bytes)")
    out(f"wrote {len(files)} files to {target}")
    return 0

