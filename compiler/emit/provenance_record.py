"""Where a package came from: mtpc's version, the spec, the source's fingerprint, the runtime profiles.

`record` gathers it at compile time (the emitter `emit/provenance.py` writes it as
`provenance.json`); `compare` holds a package's record against a spec, so `verify`
with the wrong spec says which part differs instead of reporting a bare mismatch.

Everything here is deterministic and names no build-machine path: the spec is
recorded by its file name, sha256 and text; source files by their names relative
to the checkpoint (a GGUF file by its base name), their sizes and hashes. A source on
the Hugging Face Hub is recorded by its repo, the revision the spec asked for, the
commit it resolved to, and each file compile reads with its size and the hub's hash
(`hub_etag`: an LFS file's sha256, another's git blob id), from the repo's listing
(sources/hub/checkpoints.py), so a compile that downloads and one that reads the
cache offline record the same bytes.

A fingerprint never reads the weights: small files are hashed whole; a
safetensors file by its header (tensor names, dtypes, shapes, offsets), a GGUF
file by its header (metadata and tensor table); and every large file also by
`sample_sha256`, a hash of its size and SAMPLE_WINDOWS windows of SAMPLE_BYTES
spread evenly over it (about 1 MiB read whatever the size), so a fine-tune with
the same layout as its base model still shows up as a different source.
"""

from __future__ import annotations

import copy
import hashlib
import json
import struct
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Iterable, Mapping

from ..util.version import __version__
from ..ir import ModelIR, SourceRef
from ..ir.fields import OMITTED_AT_DEFAULT

PROVENANCE_NAME = "provenance.json"
SCHEMA = "provenance"
FORMAT_VERSION = 1

# Files at most this large are hashed whole (configs, tokenizer files); larger ones are fingerprinted.
WHOLE_HASH_LIMIT = 64 << 20
SAMPLE_WINDOWS = 16
SAMPLE_BYTES = 64 << 10
_CHUNK = 1 << 20
# A safetensors header longer than this is not one (the format's own limit is 100 MB).
_MAX_SAFETENSORS_HEADER = 100_000_000


def _sha256_file(path: Path, limit: int | None = None) -> str:
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            block = f.read(_CHUNK if left is None else min(_CHUNK, left))
            if not block:
                break
            h.update(block)
            if left is not None:
                left -= len(block)
    return h.hexdigest()


def sample_sha256(path: Path, size: int) -> str:
    """sha256 of the size and SAMPLE_WINDOWS evenly spread windows (the first at 0, the last at the end)."""
    h = hashlib.sha256(str(size).encode())
    window = min(SAMPLE_BYTES, size)
    with open(path, "rb") as f:
        for i in range(SAMPLE_WINDOWS):
            f.seek((size - window) * i // (SAMPLE_WINDOWS - 1))
            h.update(f.read(window))
    return h.hexdigest()


def _safetensors_header_length(path: Path, size: int) -> int | None:
    with open(path, "rb") as f:
        raw = f.read(8)
    if len(raw) < 8:
        return None
    (length,) = struct.unpack("<Q", raw)
    return 8 + length if length <= min(_MAX_SAFETENSORS_HEADER, size - 8) else None


def _gguf_header_length(path: Path) -> int | None:
    """Bytes before the first tensor's data: the header, the metadata and the tensor table."""
    # The reader's own opener: where it keeps the header it already walked for lowering, this reuses it.
    from ..sources.gguf.layout import open_header

    offsets = [t.offset for t in open_header(str(path)).tensors.values()]
    return min(offsets) if offsets else None


def file_fingerprint(path: Path, name: str) -> dict:
    """`name` (relative to the checkpoint), its size, and a hash that reads at most the header and ~1 MiB."""
    size = path.stat().st_size
    entry: dict = {"name": name, "bytes": size}
    if size <= WHOLE_HASH_LIMIT:
        entry["sha256"] = _sha256_file(path)
        return entry
    header = None
    if path.suffix == ".safetensors":
        header = _safetensors_header_length(path, size)
    elif path.suffix == ".gguf":
        header = _gguf_header_length(path)
    if header:
        entry["header_sha256"] = _sha256_file(path, header)
    entry["sample_sha256"] = sample_sha256(path, size)
    return entry


def source_fingerprint(ref: SourceRef) -> dict:
    """What identifies the source: its files for a checkpoint, its parameters for a synthetic one."""
    global _last_fingerprint
    if ref.kind == "synthetic":
        params = json.dumps(_fields(ref.synthetic), sort_keys=True, default=str)
        return {"kind": "synthetic", "seed": ref.seed, "model_sha256": hashlib.sha256(params.encode()).hexdigest()}
    if ref.hub is not None:  # the repo, the revision asked, its commit and the hub's hash of each file read
        from ..sources.hub.checkpoints import fingerprint

        return fingerprint(ref)
    path = Path(ref.path)
    if path.is_file() and ref.kind != "hf":  # a GGUF file
        files = [path]
    else:  # a checkpoint folder, or an HF config.json named directly
        folder = path.parent if path.is_file() else path
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    # The files' identities stand for their bytes: `diff SPEC SPEC` records one checkpoint twice, and a
    # 27B folder's fingerprint hashes some 20 MB (its tokenizer.json whole, a MiB of every shard).
    state = (ref.kind, tuple((p.name, *_identity(p)) for p in files))
    if _last_fingerprint is not None and _last_fingerprint[0] == state:
        return copy.deepcopy(_last_fingerprint[1])
    doc = {"kind": ref.kind, "files": [file_fingerprint(p, p.name) for p in files]}
    _last_fingerprint = (state, copy.deepcopy(doc))
    return doc


# The last fingerprint made: (the kind and every file's name and identity, the fingerprint).
_last_fingerprint: tuple[tuple, dict] | None = None


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _fields(value):
    """`asdict`, leaving out fields `ir.fields.added` marks while they hold their default: a model that
    does not use a field added later keeps the fingerprint it had before that field existed."""
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            item = getattr(value, f.name)
            if f.metadata.get(OMITTED_AT_DEFAULT) and item == f.default:
                continue
            out[f.name] = _fields(item)
        return out
    if isinstance(value, (tuple, list)):
        return [_fields(v) for v in value]
    return value


def spec_record(spec_path: str | Path) -> dict:
    """The spec's file name, sha256 and text, as `lines` (`"\\n".join(lines)` is the text exactly,
    so a review of the package reads the spec line by line)."""
    data = Path(spec_path).read_bytes()
    return {
        "file": Path(spec_path).name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "lines": data.decode("utf-8", errors="replace").split("\n"),
    }


def spec_text(spec: Mapping) -> str:
    lines = spec.get("lines")
    return "\n".join(str(line) for line in lines) if isinstance(lines, list) else ""


def runtime_profiles(ir: ModelIR) -> dict:
    """The consumer versions and settings the package was shaped for (see compiler/profiles/)."""
    profiles: dict = {}
    ort = ir.targets.onnxruntime_genai
    if ort is not None:
        from ..profiles import ort_genai_profile

        profiles["onnxruntime_genai"] = {
            "version": ort_genai_profile(ort.version).version,
            "execution_provider": ort.execution_provider,
            "attention": ort.attention.value,
            "kv_cache": ort.kv_cache,
        }
    if ir.targets.onnx_genai is not None:
        from ..profiles.onnx_genai import PROFILE as ONNX_GENAI

        profiles["onnx_genai"] = {"layout": ir.targets.onnx_genai.layout, "commit": ONNX_GENAI.commit}
    return profiles


def record(ir: ModelIR, spec_path: str | Path | None) -> dict:
    """The provenance document of a package compiled from `spec_path` into `ir`."""
    doc: dict = {"format_version": FORMAT_VERSION, "mtpc_version": __version__}
    if spec_path is not None:
        doc["spec"] = spec_record(spec_path)
    vocabulary = ir.mtp.draft_vocabulary
    if vocabulary is not None and vocabulary.counts_sha256 is not None and ir.mtp.emit_head:
        doc["draft_counts"] = {"file": vocabulary.counts_file, "sha256": vocabulary.counts_sha256}
    doc["source"] = source_fingerprint(ir.source)
    doc["runtime_profiles"] = runtime_profiles(ir)
    return doc


def render(doc: Mapping) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


# ----------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Mismatch:
    """One way a package's record disagrees with a spec: `what` is "spec" or "source"."""

    what: str
    message: str


def _files_by_name(fingerprint: Mapping) -> dict[str, Mapping]:
    return {f.get("name"): f for f in fingerprint.get("files") or () if isinstance(f, Mapping)}


def _source_differences(recorded: Mapping, current: Mapping) -> list[str]:
    if recorded.get("kind") != current.get("kind"):
        return [f"the package was built from a {recorded.get('kind')} source, the spec names a {current.get('kind')} one"]
    old_hub, new_hub = recorded.get("hub"), current.get("hub")
    if isinstance(old_hub, Mapping) or isinstance(new_hub, Mapping):
        shown = lambda hub: (f"{hub.get('repo')} at commit {str(hub.get('commit'))[:12]}" if isinstance(hub, Mapping)  # noqa: E731
                             else "a local checkpoint")
        if not (isinstance(old_hub, Mapping) and isinstance(new_hub, Mapping)) or \
                (old_hub.get("repo"), old_hub.get("commit")) != (new_hub.get("repo"), new_hub.get("commit")):
            return [f"the package was built from {shown(old_hub)}, the spec names {shown(new_hub)}"]
    if current.get("kind") == "synthetic":
        out = []
        if recorded.get("seed") != current.get("seed"):
            out.append(f"synthetic seed {recorded.get('seed')} recorded, {current.get('seed')} in the spec")
        if recorded.get("model_sha256") != current.get("model_sha256"):
            out.append("the synthetic model's parameters differ (dims, layers or weight scales)")
        return out
    old, new = _files_by_name(recorded), _files_by_name(current)
    out = [f"{name}: in the package's source, not in the spec's" for name in sorted(old.keys() - new.keys())]
    out += [f"{name}: in the spec's source, not in the package's" for name in sorted(new.keys() - old.keys())]
    for name in sorted(old.keys() & new.keys()):
        a, b = old[name], new[name]
        if a.get("bytes") != b.get("bytes"):
            out.append(f"{name}: {a.get('bytes')} bytes recorded, {b.get('bytes')} now")
        elif any(a.get(k) != b.get(k) for k in ("sha256", "header_sha256", "sample_sha256", "hub_etag")):
            out.append(f"{name}: same size, different content")
    return out


def compare(recorded: Mapping, ir: ModelIR, spec_path: str | Path | None) -> list[Mismatch]:
    """How the package's provenance disagrees with the spec (and the source it names now); empty if it does not."""
    found: list[Mismatch] = []
    spec = recorded.get("spec")
    if spec_path is not None and isinstance(spec, Mapping):
        given = spec_record(spec_path)
        if spec.get("sha256") != given["sha256"]:
            found.append(Mismatch(
                "spec",
                f"the package was compiled from a different spec: {spec.get('file')} "
                f"(sha256 {str(spec.get('sha256'))[:12]}), not {given['file']} (sha256 {given['sha256'][:12]})"
                + _spec_text_difference(spec_text(spec), spec_text(given)),
            ))
    counts, vocabulary = recorded.get("draft_counts"), ir.mtp.draft_vocabulary
    now = vocabulary.counts_sha256 if vocabulary is not None else None
    if (counts.get("sha256") if isinstance(counts, Mapping) else None) != now and (counts or now):
        found.append(Mismatch("spec", "the draft vocabulary's token counts file differs from the one the package was "
                              "compiled with" if counts and now else "the package and the spec disagree on whether "
                              "a token counts file ranks the draft vocabulary"))
    source = recorded.get("source")
    if isinstance(source, Mapping):
        try:
            current = source_fingerprint(ir.source)
        except OSError as error:
            found.append(Mismatch("source", f"the spec's source cannot be fingerprinted: {error}"))
        else:
            for line in _source_differences(source, current):
                found.append(Mismatch("source", f"the spec's source differs from the package's: {line}"))
    return found


def _spec_text_difference(old: str, new: str, limit: int = 8) -> str:
    """The lines that differ between the recorded spec and the given one, comments and blank lines left out,
    as indented `-`/`+` lines (a few; the rest counted)."""
    import difflib

    def meaningful(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]

    lines = [
        line
        for line in difflib.unified_diff(meaningful(old), meaningful(new), "recorded", "given", lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))
    ]
    if not lines:
        return " (only comments or blank lines differ)"
    shown = lines[:limit] + ([f"... {len(lines) - limit} more changed lines"] if len(lines) > limit else [])
    return "".join(f"\n    {line}" for line in shown)


def read_recorded(files: Iterable[str], read) -> dict | None:
    """The package's provenance (`read(name) -> bytes`), or None when it has none (older packages) or it is unreadable."""
    if PROVENANCE_NAME not in files:
        return None
    try:
        doc = json.loads(read(PROVENANCE_NAME).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def package_mismatches(root: str | Path, ir: ModelIR, spec_path: str | Path) -> list[str]:
    """What `verify` says before running a package with a spec: each way the package's record disagrees
    with the spec and its source, or that the package records nothing to compare with."""
    root = Path(root)
    recorded = read_recorded(
        [PROVENANCE_NAME] if (root / PROVENANCE_NAME).is_file() else [], lambda name: (root / name).read_bytes()
    )
    if recorded is None:
        return [f"the package has no readable {PROVENANCE_NAME} (an older mtpc wrote it?): "
                "cannot tell whether it was compiled from this spec"]
    return [m.message for m in compare(recorded, ir, spec_path)]
