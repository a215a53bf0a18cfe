"""Decide how every weight the package uses is stored, and record it in the IR (`ModelIR.weights`).

For each weight the source serves (`ModelIR.source_tensors`, metadata only) the pass
records its source encoding, the stored form (float in the I/O dtype, MatMulNBits or
GatherBlockQuantized blocks), the spec rule that chose it and whether the stored values
equal the source's. The decision functions are `mtpc.weights.quant`'s, the same ones graph
building applies to the bytes, so the table and the graphs cannot disagree.

`plan` shows the table grouped; a quantized source tensor that is not carried as stored
(re-quantized or dequantized) gets a note, since that silently costs accuracy or size.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import fields, replace

from ..ir import ModelIR, QuantForm, QuantizationPlan, SourceTensor, WeightDecision, WeightRole
from ..profiles.ort_genai import matmulnbits_accuracy_level
from ..weights.quant import embedding_form, expert_form, requantization_notes, resolved_form
from ..weights import TensorInfo
from .draft_head import own_lm_head
from .pipeline import PassResult
from .vision import builds_tower

# What `decide` reads of a weight besides its name (which it reads through its role and matching override).
_KIND_FIELDS = tuple(f.name for f in fields(SourceTensor) if f.name != "name")
# A decision's fields after its name, in order: a decision made for one weight of a kind, renamed.
_DECISION_REST = tuple(f.name for f in fields(WeightDecision))[1:]
assert fields(WeightDecision)[0].name == "name"
# What keep: source re-quantizes a MatMul weight to when its source type has no exact form.
_NEAREST = QuantForm(4, 32, False)
# Float widenings that keep every value (the source's float dtype -> the I/O dtype).
_EXACT_FLOAT = {("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "float32")}


class QuantizationPlanning:
    name = "quantization"

    def __call__(self, ir: ModelIR) -> PassResult:
        provider, accuracy, plan = execution_provider(ir), profile_accuracy(ir), ir.quantization
        # A 27B model has 866 weights of a few dozen kinds: a decision depends on a weight's name only
        # through its role and the override that matches it, so each kind is decided once.
        decided: dict[tuple, WeightDecision] = {}

        def decision(t: SourceTensor) -> WeightDecision:
            kind = (role_of(t), plan.deciding_override(t.name), *(getattr(t, f) for f in _KIND_FIELDS))
            made = decided.get(kind)
            if made is None:
                made = decided[kind] = decide(t, plan, ir.precision.io_dtype, accuracy, provider)
            # `dataclasses.replace` costs five times this, 866 times a run.
            return made if made.name == t.name else WeightDecision(t.name, *(getattr(made, f) for f in _DECISION_REST))

        # The head's own LM head (`mtp.lm_head: own`, `mtp.draft_vocabulary`) is stored like a weight of the source.
        own = own_lm_head(ir, decision)
        if own is not None:
            ir = replace(ir, source_tensors=ir.source_tensors + (own[0],))
        tower = builds_tower(ir)
        used = tuple(t for t in ir.source_tensors if (ir.mtp.emit_head or not t.name.startswith("mtp."))
                     and (tower or not t.name.startswith("visual.")))
        weights = experts_kept_alike(tuple(decision(t) for t in used))
        notes = ir.notes + tuple(n for n in requantization_notes(weights) if n not in ir.notes)
        if weights == ir.weights and notes == ir.notes and own is None:
            return PassResult(ir, False)
        lines = (*grouped_lines(weights), *((own[1],) if own is not None else ()))
        return PassResult(replace(ir, weights=weights, notes=notes), True, lines)


# The rule's suffix on a stack kept float with its layer's others (schemas/quantization.schema.json names it).
EXPERTS_ALIKE = ", experts kept alike"


def experts_kept_alike(weights: tuple[WeightDecision, ...]) -> tuple[WeightDecision, ...]:
    """A MoE layer's three expert stacks in one form, where `keep: source` would part them.

    QMoE takes one block form for FC1 (gate, up) and FC2 (down). llama-quantize's k-quant mixes store a
    layer's stacks in different types (Q4_K_M: gate and up Q4_K, down Q6_K in some layers); `keep: source`
    carries Q6_K's blocks and dequantizes Q4_K's, which no op can run together. Such a layer is kept float
    alike, each stack its source's exact values. Stacks that explicit rules part stay an error
    (`graphs/moe.py`: "give mlp.experts.* one rule").
    """
    layers: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(weights):
        if w.role is WeightRole.EXPERTS:
            layers[w.name.rsplit(".experts.", 1)[0]].append(i)
    out = list(weights)
    for members in layers.values():
        stacks = [weights[i] for i in members]
        if len({(w.form, w.accuracy_level) for w in stacks}) == 1 or not all("keep: source" in w.rule for w in stacks):
            continue
        for i in members:
            w = weights[i]
            if w.form is not None:
                rule = w.rule.split(", accuracy_level from")[0]  # float: no accuracy_level applies
                out[i] = replace(w, form=None, accuracy_level=0, lossless=w.io_dtype == "float32", rule=rule + EXPERTS_ALIKE)
    return tuple(out)


def execution_provider(ir: ModelIR) -> str:
    """Where the package's MatMulNBits run: the onnxruntime_genai target's provider, else CPU."""
    target = ir.targets.onnxruntime_genai
    return target.execution_provider if target is not None else "cpu"


def profile_accuracy(ir: ModelIR) -> int:
    """The MatMulNBits accuracy_level a scheme that sets none gets: the target execution provider's."""
    return matmulnbits_accuracy_level(execution_provider(ir))


MLA_ABSORBED = "self_attn.kv_b_proj.weight"
VISION_POSITIONS = "visual.pos_embed.weight"


def role_of(tensor: SourceTensor) -> WeightRole:
    if tensor.name.endswith("embed_tokens.weight"):
        return WeightRole.EMBEDDING
    if len(tensor.shape) == 3 and ".mlp.experts." in f".{tensor.name}":
        return WeightRole.EXPERTS
    if len(tensor.shape) == 2 and tensor.name.endswith(".mlp.gate.weight"):
        return WeightRole.ROUTER
    if tensor.name.endswith(VISION_POSITIONS):
        # The vision tower's learned position table is resampled per image (four gathered rows blended), no MatMul.
        return WeightRole.TENSOR
    if tensor.name.endswith(MLA_ABSORBED):
        # MLA's kv_b_proj is no MatMul operand: the graph stores its per-head halves as float constants (graphs/deepseek2.py).
        return WeightRole.TENSOR
    return WeightRole.LINEAR if len(tensor.shape) == 2 else WeightRole.TENSOR


def decide(
    tensor: SourceTensor, plan: QuantizationPlan, io_dtype: str, profile_accuracy: int = 0, provider: str = "cpu"
) -> WeightDecision:
    """How `tensor` is stored; `profile_accuracy` is the accuracy_level a scheme that sets none gets."""
    role = role_of(tensor)
    index = plan.deciding_override(tensor.name)
    scheme = plan.default if index is None else plan.overrides[index].scheme
    if index is None:
        # A preset's default decides the weights it can quantize; norms and the like are float whatever it says.
        rule = plan.default_label if plan.default_label and role in (WeightRole.LINEAR, WeightRole.EXPERTS) else "default"
    else:
        override = plan.overrides[index]
        rule = override.label or f"override {index + 1} ({override.match})"
    if scheme.keep_source:
        rule += ", keep: source"
    carried = tensor.carried
    info = TensorInfo(
        tensor.name, tensor.shape, tensor.encoding, quantized=carried is not None,
        bits=carried.bits if carried else None, block_size=carried.block_size if carried else None,
        has_zero_points=carried.has_zero_points if carried else False,
        float_zero_points=carried.float_zero_points if carried else False,
        block_offsets=carried.block_offsets if carried else False,
    )
    if role is WeightRole.LINEAR:
        form = resolved_form(info, scheme)
        if form is None and scheme.keep_source and not tensor.has_exact_form and tensor.shape[-1] % _NEAREST.block_size == 0:
            # No exact form (IQ1/2/3_*, ...): kept as a source of 1.5-3.5 bits per weight, the nearest form
            # the kernels take rather than a float copy 8-16x the size; the note and compile say so.
            form = _NEAREST
    elif role is WeightRole.EMBEDDING:
        form = embedding_form(info, scheme, requested=index is not None)  # embedding_requested, told by the index
    elif role is WeightRole.EXPERTS:
        form = expert_form(info, scheme)
    else:
        form = None
    if role is WeightRole.ROUTER:
        io_dtype = "float32"
    if form is not None:
        lossless = carried is not None and (form.bits, form.block_size) == (carried.bits, carried.block_size)
    elif tensor.is_quantized:
        # Dequantized values are gguf-py's own float32 dequantization; a narrower dtype rounds them.
        lossless = io_dtype == "float32"
    else:
        lossless = (tensor.encoding, io_dtype) in _EXACT_FLOAT
    accuracy = 0
    if form is not None and role in (WeightRole.LINEAR, WeightRole.EXPERTS):
        accuracy = profile_accuracy if scheme.accuracy_level is None else scheme.accuracy_level
        if scheme.accuracy_level is None and profile_accuracy:
            rule += f", accuracy_level from the {provider} profile"
    return WeightDecision(tensor.name, role, tensor.encoding, form, rule, lossless, io_dtype, accuracy)


def grouped_lines(weights: tuple[WeightDecision, ...]) -> list[str]:
    """One line per (rule, role, source encoding, result): count and a glob of the names."""
    groups: dict[tuple[str, str, str, str, bool, bool], list[str]] = defaultdict(list)
    for w in weights:
        # The vision tower's weights on lines of their own, so its choice shows beside the text model's.
        groups[(w.rule, w.role.value, w.source, w.result, w.lossless, w.name.startswith("visual."))].append(w.name)
    lines = []
    for (rule, role, source, result, lossless, _), names in sorted(groups.items()):
        exact = "lossless" if lossless else "lossy"
        lines.append(f"{rule}: {len(names)} {role} {source} -> {result} ({exact}): {name_glob(names)}")
    return lines


def name_glob(names: list[str]) -> str:
    """A short pattern covering `names`: layer indices folded to `*`; past three patterns, one glob."""
    folded = sorted({".".join("*" if part.isdigit() else part for part in n.split(".")) for n in names})
    if len(folded) <= 3:
        return ", ".join(folded)
    prefix = os.path.commonprefix(folded)
    suffix = os.path.commonprefix([f[::-1] for f in folded])[::-1]
    prefix = prefix[: prefix.rfind(".") + 1]  # whole name segments only
    suffix = suffix[suffix.find(".") :] if "." in suffix else ""
    return f"{prefix}*{suffix} ({len(folded)} patterns)"
