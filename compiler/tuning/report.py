"""`mtpc tune`'s report: the JSON document (schemas/tune_report.schema.json) and reading it back for a model card.

The report names the package it measured by two digests, of its source fingerprint
(provenance.json's `source`) and of its stored weights (quantization.json), so that
`compile --tune-report` puts a table into a card only when it describes that package's
checkpoint and weights; a spec that changes only the draft count (what the report
recommends) keeps both.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..checks.positions import locate, positions
from ..emit.speed_table import SpeedRow, SpeedTable
from ..emit.provenance_record import PROVENANCE_NAME
from ..emit.quantization_report import REPORT_NAME as QUANTIZATION_REPORT
from ..schema.validation import errors as schema_errors, json_pointer
from ..util.diagnostics import Diagnostic, ExitCode, MtpcError, Span
from ..util.user_files import read_user_file
from ..util.version import __version__
from .predict import MARGIN, Prediction
from .schedule import StepCosts

SCHEMA = "tune_report"
FORMAT_VERSION = 1
MAX_REPORT_BYTES = 1 << 20  # a report is a few KiB


def _canonical_sha256(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def source_sha256(provenance: bytes | None) -> str | None:
    try:
        return _canonical_sha256(json.loads(provenance)["source"]) if provenance else None
    except (ValueError, KeyError, TypeError):
        return None


def weights_sha256(quantization: bytes | None) -> str | None:
    try:
        doc = json.loads(quantization) if quantization else None
        return _canonical_sha256([doc["io_dtype"], [[w["name"], w["stored"]] for w in doc["weights"]]]) if doc else None
    except (ValueError, KeyError, TypeError):
        return None


def _read(root: Path, name: str) -> bytes | None:
    try:
        return (root / name).read_bytes()
    except OSError:
        return None


def package_facts(root: Path, given: str, max_draft_tokens: int | None) -> dict:
    provenance = _read(root, PROVENANCE_NAME)
    name = None
    try:
        lines = json.loads(provenance)["spec"]["lines"] if provenance else []
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("name:")), None)
    except (ValueError, KeyError, TypeError):
        pass
    return {
        "path": given,
        "name": name,
        "source_sha256": source_sha256(provenance),
        "weights_sha256": weights_sha256(_read(root, QUANTIZATION_REPORT)),
        "max_draft_tokens": max_draft_tokens,
    }


def runtime_facts(threads: int | None) -> dict:
    import onnxruntime
    import onnxruntime_genai

    return {
        "mtpc": __version__,
        "onnxruntime_genai": onnxruntime_genai.__version__,
        "onnxruntime": onnxruntime.__version__,
        "threads": threads,
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
    }


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text("utf-8", "replace").splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def spec_line(draft: int) -> str:
    return f"targets.onnxruntime_genai.max_draft_tokens: {draft}" if draft else "mtp: {head: off}"


def payload(
    *, package: dict, runtime: dict, prompts: dict, acceptance: Sequence[tuple[int, int]], costs: StepCosts,
    cpu_costs: StepCosts, samples: int, predictions: Sequence[Prediction], recommended: int, reason: str, spec_position: str | None = None,
) -> dict:
    """The report without the envelope every verb's JSON has (format_version, command, ok)."""
    recommendation = {"draft": recommended, "spec_line": spec_line(recommended), "margin": MARGIN, "reason": reason}
    if spec_position:
        recommendation["spec_position"] = spec_position
    return {
        "package": package,
        "runtime": runtime,
        "prompts": prompts,
        "acceptance": [{"position": k, "tried": t, "accepted": a} for k, (t, a) in enumerate(acceptance, 1)],
        "step_costs_ms": {**_costs(costs), "samples": samples},
        "step_cpu_ms": _costs(cpu_costs),
        "predictions": [
            {
                "draft": p.draft, "tokens_per_second": round(p.tokens_per_second, 3), "speedup": round(p.speedup, 4),
                "tokens_per_cpu_second": round(p.tokens_per_cpu_second, 3),
                "rounds": p.rounds, "proposed": p.proposed, "accepted": p.accepted,
                "target_forwards": p.target_forwards, "draft_forwards": p.draft_forwards,
            }
            for p in predictions
        ],
        "recommendation": recommendation,
    }


def _costs(costs: StepCosts) -> dict:
    ms = lambda seconds: round(seconds * 1000, 6)  # noqa: E731
    return {
        "plain_step": ms(costs.plain_step),
        "verify": [ms(c) for c in costs.verify],
        "replay": [ms(c) for c in costs.replay],
        "head_forward": [ms(c) for c in costs.head_forward],
        "head_chain": ms(costs.head_chain),
        "snapshot": ms(costs.snapshot),
        "restore": ms(costs.restore),
        "head_rewind": ms(costs.head_rewind),
    }


def envelope(body: Mapping) -> dict:
    return {"format_version": FORMAT_VERSION, "command": "tune", **body, "ok": True}


def validate(document: Mapping) -> None:
    """A report tune is about to print must satisfy its schema: one that does not is a bug in mtpc."""
    found = schema_errors(SCHEMA, document)
    if found:
        raise AssertionError(f"tune's report breaks {SCHEMA}.schema.json: {found[0].message} at {list(found[0].absolute_path)}")


def load_report(path: str | Path) -> SpeedTable:
    """A tune report read back for the model card; unreadable or invalid: exit 2, at file:line:col."""
    path = Path(path)
    text = _report_text(path)
    try:
        doc = json.loads(text)
    except ValueError as error:
        line, col = getattr(error, "lineno", 1), getattr(error, "colno", 1)
        raise MtpcError([Diagnostic(f"not a tune report: invalid JSON ({getattr(error, 'msg', error)})",
                                    Span(str(path), line, col), hint=_HINT)], ExitCode.USAGE) from None
    found = schema_errors(SCHEMA, doc)
    if found:
        where = positions(path.name if path.name.endswith(".json") else "report.json", text)
        diagnostics = []
        for error in found:
            pointer = json_pointer(*error.absolute_path)
            spot = locate(where, pointer)
            span = Span(str(path), *spot) if spot else None
            diagnostics.append(Diagnostic(f"not a tune report: {pointer or '/'} {error.message}", span,
                                          path=None if span else str(path), hint=_HINT))
        raise MtpcError(diagnostics, ExitCode.USAGE)
    return _table(doc)


_HINT = "give the JSON `mtpc tune DIR --format json` printed"


def _report_text(path: Path) -> str:
    raw = read_user_file(path, "tune report", max_bytes=MAX_REPORT_BYTES, too_large=": not a tune report", hint=_HINT)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MtpcError.single(f"tune report {str(path)!r} is not UTF-8 text", exit_code=ExitCode.USAGE, hint=_HINT) from None


def _table(doc: dict) -> SpeedTable:
    runtime, prompts, package = doc["runtime"], doc["prompts"], doc["package"]
    return SpeedTable(
        rows=tuple(
            SpeedRow(p["draft"], float(p["tokens_per_second"]), float(p["speedup"]), p["accepted"], p["proposed"])
            for p in doc["predictions"]
        ),
        acceptance=tuple((a["position"], a["tried"], a["accepted"]) for a in doc["acceptance"]),
        recommended=doc["recommendation"]["draft"],
        spec_line=doc["recommendation"]["spec_line"],
        mtpc=runtime["mtpc"],
        runtime=f"onnxruntime-genai {runtime['onnxruntime_genai']} with onnxruntime {runtime['onnxruntime']}",
        threads=runtime["threads"],
        cpu=runtime["cpu"],
        cores=runtime["cores"],
        prompts=prompts["count"],
        prompts_source=prompts["source"],
        generated_tokens=prompts["generated_tokens"],
        source_sha256=package["source_sha256"],
        weights_sha256=package["weights_sha256"],
    )


def check_report_fits(table: SpeedTable, read: Callable[[str], bytes | None], report: str | Path) -> None:
    """The report must be of this package's checkpoint and stored weights (`read(name)`: a package file's bytes)."""
    checks = (
        ("compiled from another source checkpoint", table.source_sha256, source_sha256(read(PROVENANCE_NAME))),
        ("with other stored weights (its quantization.json differs)", table.weights_sha256, weights_sha256(read(QUANTIZATION_REPORT))),
    )
    for what, measured, built in checks:
        if measured is None or measured != built:
            raise MtpcError.single(
                f"tune report {str(report)!r} does not describe this package: it was measured on one {what}"
                if measured is not None else
                f"tune report {str(report)!r} does not say which package it measured (no provenance.json or quantization.json there)",
                exit_code=ExitCode.USAGE,
                hint="run `mtpc tune` on a package of this spec (changing only the draft count keeps a report valid)",
            )
