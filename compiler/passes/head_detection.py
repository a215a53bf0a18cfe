"""Decide whether the package carries an MTP head (`mtp.head: auto | on | off`).

`auto` emits a head iff the source ships one, `on` insists on it, `off` never
emits it. A package without a head must show no trace of MTP, so the main
decoder then loses its `hidden_states` output (it exists only to seed the head).
"""

from __future__ import annotations

from dataclasses import replace

from ..diagnostics import MtpcError
from ..ir import GraphContract, HeadPolicy, ModelIR
from . import PassResult

HIDDEN_STATES_ROLE = "hidden_states"


class HeadDetection:
    name = "head-detection"

    def __call__(self, ir: ModelIR) -> PassResult:
        source_has_head = ir.architecture.mtp_num_layers > 0
        policy = ir.mtp.head
        if policy is HeadPolicy.ON and not source_has_head:
            raise MtpcError.single(
                "mtp.head is 'on' but the source ships no MTP head (it declares 0 MTP layers)",
                hint="use a checkpoint with MTP weights, or set mtp.head to 'auto' or 'off'",
                path="mtp.head",
            )
        emit_head = source_has_head and policy is not HeadPolicy.OFF
        changes: list[str] = []
        if ir.mtp.emit_head != emit_head:
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
        if not changes:
            return PassResult(ir, False)
        heads = ir.heads if emit_head else ()
        new_ir = replace(ir, mtp=replace(ir.mtp, emit_head=emit_head), main=main, heads=heads)
        return PassResult(new_ir, True, tuple(changes))


def _without_hidden_states_output(main):
    name = main.output_name(HIDDEN_STATES_ROLE)
    if name is None:
        return main
    outputs = tuple((role, n) for role, n in main.outputs if role != HIDDEN_STATES_ROLE)
    contract = GraphContract(main.contract.inputs, tuple(t for t in main.contract.outputs if t.name != name))
    return replace(main, outputs=outputs, contract=contract)
