"""`quantization.json`: how every weight of the package is stored, and which spec rule chose it.

The machine-readable form of the table `mtpc plan` prints and the model card shows, written
from `ModelIR.weights` (decided by `passes/quantization.py`) and nothing else. Each weight
gets its role, its source encoding, the stored form (`float` in the I/O dtype, or the block
form of MatMulNBits / GatherBlockQuantized with every `QuantForm` field), the rule and
whether the stored values equal the source's; `summary` groups them as `plan` does.

Sorted keys, weights sorted by name, a trailing newline: the same IR gives the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict

from ..ir import ModelIR, WeightDecision, WeightRole
from .artifact import Artifact, EmitContext, from_document
from .json_text import dumps_sorted

REPORT_NAME = "quantization.json"
SCHEMA = "quantization"
FORMAT_VERSION = 1

# The op that reads a block-quantized weight of each role (a TENSOR is always float).
_OPS = {WeightRole.LINEAR: "MatMulNBits", WeightRole.EMBEDDING: "GatherBlockQuantized", WeightRole.EXPERTS: "QMoE"}


def stored(w: WeightDecision) -> dict:
    """The stored form: `{kind: float, dtype}`, or the op and every `QuantForm` field as it is named there."""
    if w.form is None:
        return {"kind": "float", "dtype": w.io_dtype}
    # All fields, generically: a field QuantForm gains appears here without a change to this emitter
    # (the schema lists the known ones and allows further scalar ones).
    fields = asdict(w.form)
    if "kind" in fields or "accuracy_level" in fields:
        raise AssertionError(f"QuantForm field names collide with the report's own: {sorted(fields)}")
    entry = {"kind": _OPS[w.role], **fields}
    if w.role in (WeightRole.LINEAR, WeightRole.EXPERTS):
        entry["accuracy_level"] = w.accuracy_level
    return entry


def document(ir: ModelIR) -> dict:
    groups: Counter[tuple[str, str, str, str, bool]] = Counter(
        (w.rule, w.role.value, w.source, w.result, w.lossless) for w in ir.weights
    )
    summary = [
        {"rule": rule, "role": role, "source": source, "result": result, "lossless": lossless, "count": count}
        for (rule, role, source, result, lossless), count in sorted(groups.items())
    ]
    # A model has hundreds of weights and a handful of stored forms: each form's entry is made once.
    forms: dict[tuple, dict] = {}

    def stored_once(w: WeightDecision) -> dict:
        key = (w.form, w.role, w.io_dtype, w.accuracy_level)
        entry = forms.get(key)
        if entry is None:
            entry = forms[key] = stored(w)
        return entry

    weights = [
        {"name": w.name, "role": w.role.value, "source": w.source, "stored": stored_once(w), "rule": w.rule,
         "lossless": w.lossless}
        for w in sorted(ir.weights, key=lambda w: w.name)
    ]
    return {"format_version": FORMAT_VERSION, "io_dtype": ir.precision.io_dtype, "summary": summary, "weights": weights}


def dumps(doc: dict) -> bytes:
    return (dumps_sorted(doc) + "\n").encode("utf-8")


def emit_quantization_report(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    # A 27B model's 866 weights: 300 KB of JSON, written when the file is (the checks read the document).
    return [from_document(REPORT_NAME, document(ir), dumps, json.loads, schema=SCHEMA)]
