"""A package as the contract checks read it: its files, the findings about them, and the checker.

`Files` maps package-relative paths to readers, so the same checks run over a folder on
disk (`package_directory`) and over artifacts compile is about to write (`artifact_files`).
`Checker` collects findings and reads each graph once, checking that its external data
files exist and are long enough for what they are said to hold (by size, never by reading).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

import yaml

from ..util.suggest import closest
from ..schema.validation import errors as schema_errors, json_pointer, read_yaml
from .graphs import ExternalTensor, Graph, interface_graph, read_graph
from .positions import Positions, locate, positions


@dataclass(frozen=True, order=True)
class Finding:
    file: str  # package-relative, "/"-separated
    pointer: str  # RFC 6901 JSON pointer inside `file` ("" when about the whole file)
    message: str
    # "error" fails the check; "warning" is reported and does not (a package that runs, with a gap a user should know of).
    severity: str = "error"
    hint: str | None = None
    line: int | None = None  # 1-based, where `pointer` sits in a JSON / YAML file's text (None: not known)
    col: int | None = None

    @property
    def blocking(self) -> bool:
        return self.severity == "error"

    def render(self) -> str:
        text = f"{self.file}:{self.pointer or '/'}: {'' if self.blocking else self.severity + ': '}{self.message}"
        return text + (f" (hint: {self.hint})" if self.hint else "")

    def to_json(self) -> dict:
        doc = {"file": self.file, "path": self.pointer or "/", "message": self.message, "severity": self.severity}
        if self.hint:
            doc["hint"] = self.hint
        if self.line is not None:
            doc.update(line=self.line, column=self.col)
        return doc


def folder(relpath: str) -> str:
    """The package-relative folder of a file ("" at the root): what its own file references are relative to."""
    parent = str(PurePosixPath(relpath).parent)
    return "" if parent == "." else parent


@dataclass(frozen=True)
class PackageFile:
    read: Callable[[], bytes]
    size: Callable[[], int | None]  # None: not known without producing the bytes
    # Bytes not produced yet, and not needed by any other file's check (an in-memory tokenizer.json
    # of a verb that writes nothing): the checks of the file itself are left to `compile`.
    deferred: bool = False
    # A deferred ONNX graph's I/O contract (`mtpc.ir.GraphContract`): the checks read it in place of the graph.
    interface: object | None = None
    # What the bytes parse to, when whoever made them parsed them already (`Artifact.document`).
    document: object | None = None
    # The bytes a piece at a time (a file on disk, for hashing one as large as the weights); None: `read` them.
    read_chunks: Callable[[], Iterator[bytes]] | None = None

    def chunks(self) -> Iterator[bytes]:
        return self.read_chunks() if self.read_chunks is not None else iter([self.read()])


Files = dict[str, PackageFile]

_CHUNK = 1 << 20


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            yield block


def package_directory(root: str | Path) -> Files:
    root = Path(root)
    return {
        p.relative_to(root).as_posix(): PackageFile(p.read_bytes, lambda p=p: p.stat().st_size,
                                                    read_chunks=lambda p=p: _file_chunks(p))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def artifact_files(artifacts) -> Files:
    """An in-memory package (the driver's artifacts) in the shape `check_files` reads.

    A streamed artifact (a weights file) is measured by the size its layout declares, so
    checking never produces it; one that declares none is not measured.
    """
    return {a.relpath: PackageFile(a.read, lambda a=a: a.nbytes, getattr(a, "deferred", False), getattr(a, "interface", None),
                                   getattr(a, "document", None))
            for a in artifacts}


@dataclass
class Checker:
    files: Files
    findings: list[Finding] = field(default_factory=list)
    _graphs: dict[str, Graph | None] = field(default_factory=dict)
    # Schema `not` findings, kept back until the end: where a check of mtpc's own says the same
    # thing at the same place (a path with '..'), only its clearer line is reported.
    _negated: list[Finding] = field(default_factory=list)
    _positions: dict[str, Positions] = field(default_factory=dict)
    _parsed: dict[str, object] = field(default_factory=dict)  # each document is parsed once

    def add(self, file: str, where: str, message: str, *, severity: str = "error", hint: str | None = None,
            line: int | None = None, col: int | None = None) -> None:
        self.findings.append(Finding(file, where, message, severity, hint, line, col))

    # -- files

    def resolve(self, file: str, where: str, ref: object, base: str = "", parent_ok: bool = False) -> str | None:
        """Package-relative path of a file a config names, or None (with a finding) if it is not usable.

        `parent_ok`: '..' may step out of `base` as long as the path stays inside the package.
        """
        if not isinstance(ref, str) or not ref:
            self.add(file, where, "must name a file")
            return None
        p = PurePosixPath(ref.replace("\\", "/"))
        if p.is_absolute() or re.match(r"^[A-Za-z]:", ref) or ref.startswith(("\\\\", "//")):
            self.add(file, where, f"{ref!r} must be a relative path")
            return None
        if ".." in p.parts and not parent_ok:
            self.add(file, where, f"{ref!r} must not contain '..'")
            return None
        rel = posixpath.normpath(str(PurePosixPath(base) / p) if base else str(p))
        if rel == ".." or rel.startswith("../"):
            self.add(file, where, f"{ref!r} points outside the package")
            return None
        if rel not in self.files:
            self.add(file, where, f"{ref!r} does not exist in the package")
            return None
        return rel

    def graph(self, file: str, where: str, ref: object, base: str = "") -> Graph | None:
        rel = self.resolve(file, where, ref, base)
        if rel is None:
            return None
        if rel not in self._graphs and self.files[rel].deferred and self.files[rel].interface is not None:
            self._graphs[rel] = interface_graph(rel, self.files[rel].interface)  # what it holds waits for compile
        if rel not in self._graphs:
            try:
                graph = read_graph(self.files[rel].read(), rel)
            except Exception as exc:  # a corrupt graph is a finding about the package, not a crash
                self.add(rel, "", f"cannot be read as an ONNX model: {exc}")
                graph = None
            else:
                self.external_data(graph)
            self._graphs[rel] = graph
        return self._graphs[rel]

    def external_data(self, graph: Graph) -> None:
        """Each data file a graph names exists in the package and is long enough for what it holds there."""
        by_location: dict[str, list[ExternalTensor]] = {}
        for tensor in graph.external:
            if tensor.location:
                by_location.setdefault(tensor.location, []).append(tensor)
            else:
                self.add(graph.relpath, "", f"initializer {tensor.name!r} is stored externally but names no location")
        for location, tensors in sorted(by_location.items()):
            data = self.resolve(graph.relpath, "", location, folder(graph.relpath))
            size = self.files[data].size() if data is not None else None
            if size is not None:
                self.extents(graph.relpath, data, tensors, size)

    def shared_bytes(self, first: Graph, second: Graph) -> None:
        """An initializer two graphs read from one data file (one copy of shared weights) is the same
        bytes for both: same place, same dtype and shape. Copies in separate files are not compared
        (that would read the weights); `shared_initializers` entries are checked on their own."""
        def placed(graph: Graph) -> dict[str, tuple[str, str | None, str | None]]:
            out = {}
            for t in graph.external:
                if not t.location:
                    continue
                rel = posixpath.normpath(str(PurePosixPath(folder(graph.relpath)) / t.location.replace("\\", "/")))
                out[t.name] = (rel, t.offset, t.length)
            return out

        mine, theirs = placed(first), placed(second)
        for name in sorted(mine.keys() & theirs.keys()):
            (data, offset, length), (other_data, other_offset, other_length) = mine[name], theirs[name]
            if data != other_data:
                continue
            if (offset, length) != (other_offset, other_length):
                self.add(second.relpath, "", f"initializer {name!r} is read from {data} at offset {other_offset} "
                         f"(length {other_length}), but {first.relpath} reads it at offset {offset} (length {length}); "
                         "one shared copy must be the same bytes for both")
            elif (first.initializer_types.get(name), first.initializers[name].shape) != (
                    second.initializer_types.get(name), second.initializers[name].shape):
                self.add(second.relpath, "", f"initializer {name!r} shares its bytes in {data} with {first.relpath} "
                         "but not its dtype and shape")

    def extents(self, graph: str, data: str, tensors: list[ExternalTensor], size: int) -> None:
        """One finding per graph and data file: the initializer that ends furthest past the end, and how many do."""
        past_the_end = []
        for t in tensors:
            offset = byte_count(t.offset, 0)
            length = byte_count(t.length, t.nbytes)
            for key, raw, value in (("offset", t.offset, offset), ("length", t.length, length)):
                if value is None and raw is not None:
                    self.add(graph, "", f"initializer {t.name!r}: external-data {key} {raw!r} is not a byte count")
            if offset is not None and offset + (length or 0) > size:
                past_the_end.append((offset + (length or 0), t.name))
        if past_the_end:
            end, name = max(past_the_end)
            also = f"; {len(past_the_end)} of the {len(tensors)} {graph} initializers in it run past the end" if len(past_the_end) > 1 else ""
            self.add(data, "", f"{graph} initializer {name!r} ends at byte {end}, the file has {size} bytes (truncated?){also}")

    def parse(self, rel: str):
        """The document in a JSON or YAML file (None, with a finding, when it cannot be parsed), parsed once."""
        if rel not in self._parsed:
            self._parsed[rel] = self._parse(rel)
        return self._parsed[rel]

    def _parse(self, rel: str):
        if self.files[rel].document is not None:
            return self.files[rel].document
        try:
            text = self.files[rel].read().decode("utf-8")
            return json.loads(text) if rel.endswith(".json") else read_yaml(text)
        except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
            line, col = _error_position(exc)
            self.add(rel, "", f"cannot be parsed: {exc}".replace("\n", " "), line=line, col=col)
            return None

    def validate(self, rel: str, instance, schema: str | None) -> None:
        if schema is None:
            self.add(rel, "", "no schema in mtpc covers this layout")
            return
        for e in schema_errors(schema, instance):
            where = json_pointer(*e.absolute_path)
            unexpected = _unexpected_keys(e)
            if unexpected:  # one finding per key, at the key's own line, with the key it was likely meant to be
                for key, hint in unexpected:
                    self.add(rel, where + json_pointer(key), f"unknown key {key!r} (schema {schema})", hint=hint)
                continue
            finding = Finding(rel, where, f"{_schema_message(e)} (schema {schema})")
            (self._negated if e.validator == "not" else self.findings).append(finding)

    def result(self) -> list[Finding]:
        said = {(f.file, f.pointer) for f in self.findings}
        found = set(self.findings) | {f for f in self._negated if (f.file, f.pointer) not in said}
        return sorted(self._with_line(f) for f in found)

    def _with_line(self, finding: Finding) -> Finding:
        """`finding` with the line its pointer sits on, in a JSON or YAML file that can be read."""
        if finding.line is not None or finding.file not in self.files or not finding.file.endswith((".json", ".yaml", ".yml")):
            return finding
        if finding.file not in self._positions:
            try:
                text = self.files[finding.file].read().decode("utf-8")
            except UnicodeDecodeError:
                text = ""
            self._positions[finding.file] = positions(finding.file, text)
        at = locate(self._positions[finding.file], finding.pointer)
        return replace(finding, line=at[0], col=at[1]) if at is not None else finding


def _error_position(exc: Exception) -> tuple[int | None, int | None]:
    """Where a JSON or YAML parser stopped, 1-based, when it says."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.lineno, exc.colno
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return (mark.line + 1, mark.column + 1) if mark is not None else (None, None)


def _unexpected_keys(error) -> list[tuple[str, str | None]]:
    """For an `additionalProperties: false` error, each key the schema does not allow, with a "did you mean"."""
    if error.validator != "additionalProperties" or error.validator_value is not False or not isinstance(error.instance, dict):
        return []
    allowed = list(error.schema.get("properties", {}))
    patterns = list(error.schema.get("patternProperties", {}))
    found = []
    for key in sorted(error.instance):
        if key in allowed or any(re.search(p, key) for p in patterns):
            continue
        guess = closest(key, allowed)
        found.append((key, f"did you mean {guess!r}?" if guess else None))
    return found


def _schema_message(error) -> str:
    """jsonschema's message, except that a `not` whose schema says what is wanted says that instead of dumping it."""
    wanted = error.schema.get("description") if error.validator == "not" and isinstance(error.schema, dict) else None
    return f"{error.instance!r} must be {wanted}" if wanted else error.message


def byte_count(raw: str | None, default: int | None) -> int | None:
    """An external_data offset / length ("123"); `default` when absent, None when malformed."""
    if raw is None:
        return default
    return int(raw) if raw.isascii() and raw.isdigit() else None



TOKENIZER_JSON = "tokenizer.json"


def check_tokenizer(c: Checker) -> None:
    """A package's `tokenizer.json`, when it ships one, loads: JSON with a `model` object, and in `tokenizers`."""
    from ..sources.tokenizer_json import tokenizer_json_problem

    if TOKENIZER_JSON in c.files and not c.files[TOKENIZER_JSON].deferred:
        problem = tokenizer_json_problem(c.files[TOKENIZER_JSON].read())
        if problem is not None:
            c.add(TOKENIZER_JSON, "", problem)
