"""`mtpc plan SPEC [--against DIR]`: what `compile` would change, without writing anything."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..util.diagnostics import MtpcError

if TYPE_CHECKING:  # imported by `run`: every `mtpc` run builds this verb's parser (`mtpc --help` too)
    from ..diffing.report import DiffReport
    from ..diffing.changes import Change
    from ..emit.manifest import FileRecord
from .report import console, verb_parser, existing_file, out, print_json

HELP = "show what compile would create, change or remove, and what each pass did"
EPILOG = """\
Compiles in memory, with the same spec rules and contract checks as compile,
and compares every file with DIR: by content hash to tell what changes (large
files are streamed, never loaded whole), then each changed file by meaning, as
`mtpc diff` does (graphs by interface, operators, nodes and initializers; configs
by path), with its severity. A pass that left the IR as it was says "no change".
--format markdown prints the same comment `mtpc diff --format markdown` would.
Nothing is written. Exit code 0 whatever the plan says
(1 or 3 when compile would refuse the spec, as compile would); use `mtpc diff`
when a difference should fail a script. DIR is judged as compile -o DIR would
judge it: one that compile refuses even with --force (a file, a folder holding
the spec or the source checkpoint) is refused here too, with compile's words
(exit 2); one that only --force would replace gets a note, and its files are
listed as compile --force would change them.

examples:
  mtpc plan specs/qwen35-tiny-mtp.yaml                   # against ./out/<spec name>
  mtpc plan specs/qwen35-tiny-mtp.yaml --against pkg
  mtpc plan specs/qwen35-tiny-mtp.yaml --print-ir-after-all | less
"""

CREATE, CHANGE, UNCHANGED, REMOVE = "create", "change", "unchanged", "remove"
_MARK = {CREATE: "+", CHANGE: "~", UNCHANGED: "=", REMOVE: "-"}


def add_parser(sub) -> None:
    p = verb_parser(sub, "plan", HELP, EPILOG, formats=("text", "json", "markdown"))
    p.add_argument("spec", metavar="SPEC", help="the spec file (YAML)")
    p.add_argument("--against", metavar="DIR", help="existing package to compare with (default: ./out/<spec name>)")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass")
    p.add_argument("--tune-report", metavar="FILE", help="as compile --tune-report: the model card with that measured table")
    p.set_defaults(run=run)


def file_plan(artifacts, against: Path) -> "tuple[list[tuple[str, str]], list[Change]]":
    """(relpath, action) for every file compile would touch, sorted by path, and what changes in them.

    manifest.json, which compile writes last from the files' hashes, is planned like the rest: when DIR has
    one, every file is hashed (as compile would hash it) and the manifest compile would write compared with it."""
    from ..diffing.changes import ADDED, CHANGED, Change, REMOVED
    from ..diffing.files import diff_files, file_chunks
    from ..emit.manifest import MANIFEST_NAME, FileRecord, manifest_document, render

    planned: list[tuple[str, str]] = []
    changes: list[Change] = []
    names = set()
    records: list[FileRecord] = []
    manifest_there = (against / MANIFEST_NAME).is_file()
    for art in artifacts:
        names.add(art.relpath)
        existing = against / art.relpath
        if not existing.is_file():
            planned.append((art.relpath, CREATE))
            changes.append(Change(art.relpath, (), ADDED))
            if manifest_there:
                records.append(_record(art.relpath, art.iter_bytes()))
            continue
        new = _record(art.relpath, art.iter_bytes())
        records.append(new)
        old = _record(art.relpath, file_chunks(existing))
        if old.sha256 == new.sha256:
            planned.append((art.relpath, UNCHANGED))
            continue
        planned.append((art.relpath, CHANGE))
        if art.content is None and art.interface is None and art.document is None:
            # streamed weights (or a converted tokenizer): hashed once above, never held whole
            changes.append(Change(art.relpath, (), CHANGED, f"sha256:{old.sha256}", f"sha256:{new.sha256}"))
        else:
            # A deferred graph or document is a small file once made (above, to hash it): compared by meaning.
            changes.extend(diff_files({art.relpath: lambda p=existing: file_chunks(p)}, {art.relpath: lambda a=art: iter([a.read()])}))
    names.add(MANIFEST_NAME)
    if not manifest_there:
        planned.append((MANIFEST_NAME, CREATE))
        changes.append(Change(MANIFEST_NAME, (), ADDED))
    else:
        manifest = render(manifest_document(records))
        existing = (against / MANIFEST_NAME).read_bytes()
        if manifest == existing:
            planned.append((MANIFEST_NAME, UNCHANGED))
        else:
            planned.append((MANIFEST_NAME, CHANGE))
            changes.extend(diff_files({MANIFEST_NAME: lambda: iter([existing])}, {MANIFEST_NAME: lambda: iter([manifest])}))
    if against.is_dir():
        for p in sorted(against.rglob("*")):
            rel = p.relative_to(against).as_posix()
            if p.is_file() and rel not in names:
                planned.append((rel, REMOVE))
                changes.append(Change(rel, (), REMOVED))
    return sorted(planned), changes


def _record(name: str, chunks) -> "FileRecord":
    import hashlib

    from ..emit.manifest import FileRecord

    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
    return FileRecord(name, size, digest.hexdigest())


def destination_refusal(against: Path, protected) -> dict | None:
    """Why `compile -o AGAINST` would refuse to write there without --force (None when it would not).

    A destination compile refuses whatever the flags (a file, a folder holding the spec or the source
    checkpoint) raises compile's own `MtpcError`: plan refuses it the same way, rather than listing
    files compile would never touch."""
    from ..output.write import check_destination

    try:
        check_destination(against, protected=protected)
    except MtpcError as refusal:
        check_destination(against, force=True, protected=protected)  # raises when --force would not help
        return {"reason": "; ".join(d.message for d in refusal.diagnostics), "force_helps": True}
    return None


def run(args) -> int:
    from ..api.compiling import default_output, protected_paths
    from ..diffing.render import markdown
    from ..diffing.report import DiffReport
    from ..diffing.changes import to_plain
    from ..schema.validation import dump_yaml

    from ..pipeline.driver import build

    spec = existing_file(args.spec, "spec")
    if args.against:  # refused before the build, as compile refuses it (the checkpoint is known after)
        destination_refusal(Path(args.against), protected_paths(spec))
    snapshots: list[tuple[str, object]] = []
    observer = (lambda name, result: snapshots.append((name, to_plain(result.ir)))) if args.print_ir_after_all else None
    # The graphs are built only if their bytes are compared (DIR holds a file of that name).
    result = build(spec, defer=True, defer_graphs=True, progress=console(args), observer=observer, tune_report=args.tune_report)
    against = Path(args.against) if args.against else default_output(result.ir.name)
    with result:  # hashing the streamed files reads the weights; close the store after
        refusal = destination_refusal(against, protected_paths(spec, result.ir))
        files, changes = file_plan(result.artifacts, against)
    report = DiffReport(str(against), str(spec), tuple(sorted(changes, key=lambda c: c.file)), tuple(result.ir.notes))
    verdicts = {v.file: v for v in report.verdicts}
    passes = [{"pass": name, "modified": r.modified, "changes": list(r.changes)} for name, r in result.pass_results]
    model = _model(result.ir)
    if args.format == "json":
        payload = {
            "model": model,
            "against": str(against),
            "severity": report.severity,
            "files": [_file_json(rel, action, verdicts, report) for rel, action in files],
            "passes": passes,
            "notes": list(result.ir.notes),
            "compile_would_refuse": refusal,
        }
        if args.print_ir_after_all:
            payload["ir_after"] = [{"pass": name, "ir": ir} for name, ir in snapshots]
        print_json("plan", payload, ok=True)
        return 0
    if args.format == "markdown":
        out(markdown(report, title="mtpc plan"))
        return 0
    out(f"model: {model['family']} ({model['source']} source), {model['layers']}")
    if "experts" in model:
        out(f"  experts: {model['experts']}")
    out(f"  attention: {model['attention']}")
    out(f"  mtp head: {model['mtp_head']}")
    out("passes:")
    for entry in passes:
        out(f"  {entry['pass']}: {'modified' if entry['modified'] else 'no change'}")
        for line in entry["changes"]:
            out(f"    - {line}")
    for name, ir in snapshots:
        out(f"--- IR after {name} ---")
        out(dump_yaml(ir, sort_keys=True, allow_unicode=True).rstrip())
    for note in result.ir.notes:
        out(f"note: {note}")
    if refusal is not None:
        out(f"note: compile -o {against} would refuse without --force: {refusal['reason']}")
    if any(a == CHANGE for _, a in files):
        out(f"severity: {report.severity}")
    out(f"files (against {against}):")
    for rel, action in files:
        if action != CHANGE:
            out(f"  {_MARK[action]} {rel}  ({action})")
            continue
        verdict = verdicts[rel]
        out(f"  {_MARK[action]} {rel}  ({action}, {verdict.severity}: {verdict.reason})")
        for group in report.groups[rel]:
            out(f"      {group.render()}")
        if rel in report.file_notes:
            out(f"      note: {report.file_notes[rel]}")
    counts = {a: sum(1 for _, x in files if x == a) for a in (CREATE, CHANGE, REMOVE, UNCHANGED)}
    out("plan: " + ", ".join(f"{n} to {a}" if a != UNCHANGED else f"{n} unchanged" for a, n in counts.items()))
    return 0


def _model(ir) -> dict:
    """What the spec's source is: its family, layers, routing and experts, and where its MTP head sits."""
    arch = ir.architecture
    model = {"family": arch.family, "source": ir.source.kind,
             "layers": f"{arch.num_layers} layers ({arch.layer_kind_summary()})",
             "attention": arch.attention_summary(), "mtp_head": arch.head_summary()}
    if arch.moe is not None:
        model["experts"] = arch.moe.summary()
    return model


def _file_json(rel: str, action: str, verdicts, report: DiffReport) -> dict:
    entry = {"path": rel, "action": action}
    if action == CHANGE:
        v = verdicts[rel]
        entry.update(severity=v.severity, reason=v.reason, rows=[g.to_json() for g in report.groups[rel]])
        if rel in report.file_notes:
            entry["note"] = report.file_notes[rel]
    return entry
