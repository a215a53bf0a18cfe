"""Decide whether the package carries an MTP head (`mtp.head: auto | on | off`).

`auto` emits a head iff the source ships one, `on` insists on it, `off` never
emits it. A head the source declares but that is broken (`UnusableHead`, decided by
`sources/mtp_head.py`) is refused unless `off`; one whose weights are simply absent
gives a text-only package with a note under `auto`. A package without a head must show no trace of MTP, so the main
decoder then loses its `hidden_states` output (it exists only to seed the head).

A static KV cache target (`targets.onnxruntime_genai.kv_cache: static`) takes
no head: `auto` skips it with a note, `on` is refused.
"""

from __future__ import annotations

from dataclasses import replace

from ..util.diagnostics import MtpcError
from ..ir import GraphContract, HeadPolicy, ModelIR
from .pipeline import PassResult

HIDDEN_STATES_ROLE = "hidden_states"


class HeadDetection:
    name = "head-detection"

    def __call__(self, ir: ModelIR) -> PassResult:
        source_has_head = ir.architecture.has_mtp_head
        policy = ir.mtp.head
        unusable = ir.architecture.unusable_head
        if unusable is not None and not unusable.absent and policy is not HeadPolicy.OFF:
            raise MtpcError.single(
                f"the source's MTP head cannot be built: {unusable.reason}",
                hint="use a checkpoint with a complete head, or set mtp.head to 'off' for a text-only package",
                path=f"source.{ir.source.kind}",
            )
        if policy is HeadPolicy.ON and not source_has_head:
            why = unusable.reason if unusable is not None else "it declares 0 MTP layers"
            raise MtpcError.single(
                f"mtp.head is 'on' but the source ships no MTP head ({why})",
                hint="use a checkpoint with MTP weights, or set mtp.head to 'auto' or 'off'",
                path="mtp.head",
            )
        static_cache = _has_static_kv_cache(ir)
        if policy is HeadPolicy.ON and static_cache:
            raise MtpcError.single(
                "mtp.head is 'on' but targets.onnxruntime_genai.kv_cache is 'static': "
                "a static KV cache target cannot roll back rejected drafts, so it takes no MTP head",
                hint="set mtp.head to 'auto' or 'off' for a text-only package, or use kv_cache: dynamic to keep the head",
                path="mtp.head",
            )
        skip_for_static_cache = source_has_head and policy is HeadPolicy.AUTO and static_cache
        emit_head = emits_head(ir)
        changes: list[str] = []
        notes = ir.notes
        if skip_for_static_cache and STATIC_CACHE_NOTE not in notes:
            notes += (STATIC_CACHE_NOTE,)
        if unusable is not None and policy is HeadPolicy.AUTO:
            note = f"no MTP head: {unusable.reason}; the package is text-only"
            if note not in notes:
                notes += (note,)
        if ir.mtp.emit_head != emit_head:
            if skip_for_static_cache:
                reason = "targets.onnxruntime_genai.kv_cache is 'static'"
            else:
                reason = {
                    HeadPolicy.OFF: "mtp.head is 'off'",
                    HeadPolicy.ON: "mtp.head is 'on'",
                    HeadPolicy.AUTO: "the source ships one" if source_has_head else "the source ships none",
                }[policy]
            changes.append(f"mtp.emit_head = {emit_head} ({reason})")
        main = ir.main
        if not emit_head:
            main = _without_hidden_states_output(main)
            if main != ir.main:
                changes.append("main decoder: dropped the hidden_states output (no head to feed)")
        if not changes and notes == ir.notes:
            return PassResult(ir, False)
        heads = ir.heads if emit_head else ()
        new_ir = replace(ir, mtp=replace(ir.mtp, emit_head=emit_head), main=main, heads=heads, notes=notes)
        return PassResult(new_ir, True, tuple(changes))


# Why a static cache takes no head: the rule of the reference exporter, kept so the
# same spec means the same package. A static cache is a fixed-size buffer per layer,
# allocated at max_length and written in place, chosen for a plain one-token-per-step
# loop (no reallocation, capturable graphs). Speculative decoding writes the drafts'
# entries before the main model has judged them and must roll rejected ones back;
# a static-cache deployment does not promise that, so the two are not paired.
# This is policy, not a parser refusal: on CPU, onnxruntime-genai 0.18.0's
# MtpGenerator was measured to still decode correctly with our graphs and
# past_present_share_buffer on.
STATIC_CACHE_NOTE = (
    "MTP head skipped: a static KV cache target cannot roll back rejected drafts; "
    "targets.onnxruntime_genai.kv_cache is 'static' (every KV cache is allocated at max_length and written "
    "in place), so the package is text-only. Use kv_cache: dynamic to keep the head, or mtp.head: off to "
    "silence this note."
)


def emits_head(ir: ModelIR) -> bool:
    """Whether the package will carry an MTP head, for a spec this pass accepts.

    Shared with lowering, which refuses choices that only matter when a head is built.
    """
    source_has_head = ir.architecture.has_mtp_head
    return source_has_head and ir.mtp.head is not HeadPolicy.OFF and not _has_static_kv_cache(ir)


def _has_static_kv_cache(ir: ModelIR) -> bool:
    target = ir.targets.onnxruntime_genai
    return target is not None and target.kv_cache == "static"


def _without_hidden_states_output(main):
    name = main.output_name(HIDDEN_STATES_ROLE)
    if name is None:
        return main
    outputs = tuple((role, n) for role, n in main.outputs if role != HIDDEN_STATES_ROLE)
    contract = GraphContract(main.contract.inputs, tuple(t for t in main.contract.outputs if t.name != name))
    return replace(main, outputs=outputs, contract=contract)
