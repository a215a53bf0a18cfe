"""The weights onnx-genai's MTP sidecar borrows from the main graph: refused at the spec when it cannot.

onnx-genai's MTP head carries neither an embedding nor an LM head: the runtime embeds the draft
tokens and projects the head's hidden state with the target's own initializers, found by name
(shared/reference/inference-metadata.md §4.5). Whether a spec's quantization leaves them in a form
it can take depends on how the source stores them, so this runs in lowering, once the source is
described (`ModelIR.source_tensors`, metadata only), and reports at the spec field that decides
each weight's scheme.

- The embedding must be a dense float table. A source-quantized embedding the scheme keeps or
  re-quantizes (GatherBlockQuantized: `keep: source`, or bits 4 / 8) is refused with the override
  that dequantizes it. Refused, not worked around with a dense copy beside the quantized
  table: the copy would be an initializer no node of model.onnx reads, as large as the dequantized
  table (2.5 GB in float16 for a 27B Qwen3.5's 248k x 5120) on top of the quantized one, in a package
  whose author asked for a small embedding. The override costs that disk once instead of twice,
  gives the main model the same values (the table is dequantized, never re-quantized), and is a
  line the author writes knowing what it costs.
- A quantized LM head is borrowable: its packed data keeps the LM head's name and its scales sit
  beside it under onnx-genai's names (`contracts.quantized_names`). onnx-genai takes it on its native
  backend, the only one that drafts with the sidecar at all (`mtpc.profiles.onnx_genai`); a note says so. onnx-genai derives the block size from the shapes
  (hidden size / blocks per row), so a block size that does not divide the hidden size is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.contracts import LM_HEAD_INITIALIZER, quantized_names
from ..util.diagnostics import Diagnostic
from ..ir import ModelIR, QuantForm, QuantizationPlan, WeightDecision
from ..passes.head_detection import emits_head
from ..passes.quantization import decide

if TYPE_CHECKING:
    from .loaded import LoadedSpec

EMBEDDING = "embed_tokens.weight"
LM_HEAD = "lm_head.weight"
DENSE_EMBEDDING_OVERRIDE = f"{{match: {EMBEDDING}, bits: null}}"
FLOAT_LM_HEAD_OVERRIDE = f"{{match: {LM_HEAD}, bits: null}}"


def check(spec: LoadedSpec, ir: ModelIR) -> tuple[list[Diagnostic], tuple[str, ...]]:
    """(refusals at the spec's lines, notes for the IR) for the weights the onnx_genai sidecar borrows.

    Each weight's form is the quantization pass's decision (`passes.quantization.decide`, the one the
    graphs are built from), taken here from the source's tensor metadata so it can be placed in the spec.
    """
    if ir.targets.onnx_genai is None or not emits_head(ir):
        return [], ()
    embedding, lm_head = _decision(ir, EMBEDDING), _decision(ir, LM_HEAD)
    problems: list[Diagnostic] = []
    notes: tuple[str, ...] = ()
    if embedding is not None and embedding.form is not None:
        where, what = _deciding_field(spec, ir.quantization, EMBEDDING)
        problems.append(
            spec.diagnostic(
                where,
                f"{what} stores {EMBEDDING} quantized (the source's {embedding.source}, as {embedding.result}), "
                "but the onnx_genai target's MTP sidecar borrows the main model's embedding by name and can "
                "only use a dense float table",
                hint=f"put {DENSE_EMBEDDING_OVERRIDE} first in quantization.overrides (the main model then gathers "
                "from the dequantized table), or drop the onnx_genai target, or set mtp.head: off",
            )
        )
    form: QuantForm | None = lm_head.form if lm_head is not None else None
    hidden = ir.architecture.hidden_size
    if form is not None and hidden % form.block_size:
        where, what = _deciding_field(spec, ir.quantization, LM_HEAD, prefer="block_size")
        problems.append(
            spec.diagnostic(
                where,
                f"{what} stores {LM_HEAD} in {form.bits}-bit blocks of {form.block_size}, which do not divide "
                f"hidden_size {hidden}: the onnx_genai target's MTP sidecar borrows the main model's LM head and "
                "onnx-genai derives its block size from hidden_size",
                hint=f"use a block_size that divides {hidden}, or put {FLOAT_LM_HEAD_OVERRIDE} first in "
                "quantization.overrides",
            )
        )
    elif form is not None and (form.block_offsets or form.float_zero_points):
        # onnx-genai rebuilds the head's projection as one MatMulNBits with integer zero points;
        # a per-block offset would be dropped (wrong drafts) and float zero points are unverified there.
        where, what = _deciding_field(spec, ir.quantization, LM_HEAD)
        kind = "a per-block offset" if form.block_offsets else "float zero points"
        problems.append(
            spec.diagnostic(
                where,
                f"{what} keeps {LM_HEAD} as the source's {lm_head.source}, whose exact form needs {kind}, "
                "which the onnx_genai target's MTP sidecar cannot apply when it borrows the LM head",
                hint=f"put {FLOAT_LM_HEAD_OVERRIDE} (or {{match: {LM_HEAD}, bits: 4}}) first in quantization.overrides",
            )
        )
    elif form is not None:
        _, scales, _ = quantized_names(LM_HEAD_INITIALIZER, form.bits)
        notes += (
            f"the onnx-genai MTP sidecar borrows the {form.bits}-bit LM head ({LM_HEAD_INITIALIZER} with "
            f"{scales}) as stored: onnx-genai runs its own MatMulNBits projection for it, on its native backend only, "
            "which is also the only backend that drafts with the sidecar",
        )
    return problems, notes


def _decision(ir: ModelIR, name: str) -> WeightDecision | None:
    tensor = next((t for t in ir.source_tensors if t.name == name), None)
    return decide(tensor, ir.quantization, ir.precision.io_dtype) if tensor is not None else None


def _deciding_field(spec: LoadedSpec, plan: QuantizationPlan, weight: str, prefer: str | None = None) -> tuple[tuple, str]:
    """The spec node that gives `weight` its scheme (its `prefer` key when written there), and how a message names it."""
    index = plan.deciding_override(weight)
    if index is None:
        at: tuple = ("quantization", "default")
        what = "quantization.default"
    else:
        at = ("quantization", "overrides", index)
        what = f"the override '{plan.overrides[index].match}'"
    for key in filter(None, (prefer, "keep", "bits")):
        if spec.get(at + (key,)) is not None:
            return at + (key,), what
    # Nothing written here: the override's match, or the default's bits (placed at the nearest written parent).
    return at + ("match" if index is not None else "bits",), what
