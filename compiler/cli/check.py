"""`mtpc check SPEC|DIR...`: the CI gate. Schemas plus cross-artifact contracts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checks import check_files, package_directory, is_runtime_package
from ..diagnostics import Diagnostic, ExitCode, MtpcError
from ..output import recover
from .report import verb_parser, err, out, print_json

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


@dataclass(frozen=True)
class Reported:
    file: str
    where: str  # JSON path (or artifact:JSON path for a spec's artifacts); "" for a spec diagnostic
    message: str
    line: int | None = None
    col: int | None = None
    rendered: str | None = None  # a spec diagnostic with its source line and caret

    def text(self) -> str:
        if self.rendered is not None:
            return self.rendered
        return f"{self.file}:{self.where}: {self.message}"

    def github(self) -> str:
        props = f"file={_escape_property(self.file)}"
        if self.line is not None:
            props += f",line={self.line}"
            if self.col is not None:
                props += f",col={self.col}"
        props += ",title=mtpc check"
        message = f"{self.where}: {self.message}" if self.where else self.message
        return f"::error {props}::{_escape_data(message)}"

    def to_json(self) -> dict:
        doc = {"file": self.file, "path": self.where, "message": self.message}
        if self.line is not None:
            doc.update(line=self.line, column=self.col)
        return doc


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def add_parser(sub) -> None:
    p = verb_parser(sub, "check", HELP, EPILOG, formats=("text", "json", "github"))
    p.add_argument("targets", nargs="+", metavar="SPEC|DIR", help="spec files and/or package directories")
    p.set_defaults(run=run)


def _from_diagnostic(spec: Path, d: Diagnostic) -> Reported:
    if d.span is not None:
        return Reported(d.span.file, d.path or "", d.message, d.span.line, d.span.col, d.render())
    return Reported(str(spec), d.path or "", d.message, rendered=f"{spec}: {d.render()}")


SPEC_SUFFIXES = (".yaml", ".yml")


def check_target(path: Path) -> tuple[str, list[Reported]]:
    """(kind, findings) for one target; `MtpcError` (usage) when it is neither a package nor a spec."""
    if path.suffix.lower() not in SPEC_SUFFIXES:
        recover(path)  # a compile into this folder that was killed: finish it first (a note says what was done)
    if not path.exists():
        raise MtpcError.single(f"{str(path)!r} does not exist", exit_code=ExitCode.USAGE)
    if path.is_dir():
        if not is_runtime_package(path):
            raise MtpcError.single(
                f"{str(path)!r} holds no genai_config.json or inference_metadata.yaml: not an mtpc package",
                exit_code=ExitCode.USAGE,
            )
        return "package", [Reported(str(path / f.file), f.pointer or "/", f.message) for f in check_files(package_directory(path))]
    if path.suffix.lower() not in SPEC_SUFFIXES:
        raise MtpcError.single(
            f"{str(path)!r} is neither a spec file ({', '.join(SPEC_SUFFIXES)}) nor a package folder",
            exit_code=ExitCode.USAGE,
            hint="`mtpc check` takes spec files and compiled package folders; to look at a checkpoint, run: mtpc inspect",
        )
    from ..driver import build

    # build() runs the contract checks itself, in memory, as the gate compile passes before writing:
    # what it finds in a package of ours is a bug (exit 3), raised from here like any other.
    try:
        build(path).close()
    except MtpcError as error:
        if error.exit_code is not ExitCode.FINDINGS:
            raise
        return "spec", [_from_diagnostic(path, d) for d in error.diagnostics]
    return "spec", []


def run(args) -> int:
    paths = [Path(t) for t in args.targets]
    results: list[tuple[Path, str, list[Reported]]] = []
    unusable: list[Diagnostic] = []  # targets that could not be checked at all: a usage problem, reported per target
    for p in paths:
        try:
            results.append((p, *check_target(p)))
        except MtpcError as error:
            if error.exit_code is not ExitCode.USAGE:
                raise
            unusable.extend(error.diagnostics)
    total = sum(len(found) for _, _, found in results)
    summary = f"{total} finding{'s' if total != 1 else ''} in {_targets(len(results))}"
    if unusable:
        summary += f"; {_targets(len(unusable))} could not be checked"
    code = ExitCode.USAGE if unusable else ExitCode.FINDINGS if total else ExitCode.OK
    if args.format == "json":
        payload = {
            "summary": summary,
            "targets": [
                {"target": str(p), "kind": kind, "findings": [r.to_json() for r in found]} for p, kind, found in results
            ],
        }
        if unusable:
            payload.update(exit_code=int(code), diagnostics=[d.to_json() for d in unusable])
        print_json("check", payload, ok=code is ExitCode.OK)
    else:
        for _, _, found in results:
            for r in found:
                out(r.github() if args.format == "github" else r.text())
        for d in unusable:
            err(d.render())
        err(f"mtpc check: {summary}" if code is not ExitCode.OK else f"mtpc check: ok ({_targets(len(results))})")
    return int(code)


def _targets(n: int) -> str:
    return f"{n} target{'s' if n != 1 else ''}"
