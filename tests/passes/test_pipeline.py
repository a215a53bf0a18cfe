"""Pipeline: runs passes in order and names the one that refused, keeping each diagnostic whole."""

from __future__ import annotations

import pytest

from mtpc.util.diagnostics import Diagnostic, ExitCode, MtpcError, Span
from mtpc.passes.pipeline import PassResult, Pipeline

from tests.passes.ir_factory import compiled

REFUSAL = Diagnostic(
    "the head is missing",
    Span("spec.yaml", 3, 5),
    hint="set mtp.head",
    path="mtp.head",
    source_line="  head: auto",
)


class Refuses:
    name = "refuses"

    def __call__(self, ir):
        raise MtpcError([REFUSAL], ExitCode.USAGE)


class Notes:
    name = "notes"

    def __call__(self, ir):
        return PassResult(ir, False, ("nothing to do",))


def test_a_refusal_names_the_pass_and_keeps_every_other_field():
    pipeline = Pipeline([Notes(), Refuses()])
    with pytest.raises(MtpcError) as err:
        pipeline.run(compiled())
    (diag,) = err.value.diagnostics
    assert diag.message == "[refuses] the head is missing"
    assert (diag.span, diag.hint, diag.path, diag.source_line, diag.severity) == (
        Span("spec.yaml", 3, 5), "set mtp.head", "mtp.head", "  head: auto", REFUSAL.severity,
    )
    assert err.value.exit_code is ExitCode.USAGE
    assert REFUSAL.message == "the head is missing"  # the pass's own diagnostic is left alone
    assert [name for name, _ in pipeline.results] == ["notes"]


class ClaimsWork:
    """Says it modified the IR, and returns an equal one."""

    name = "claims-work"

    def __call__(self, ir):
        from dataclasses import replace

        return PassResult(replace(ir), True, ("rewrote everything",))


class Renames:
    """Changes the IR but forgets to say so."""

    name = "renames"

    def __call__(self, ir):
        from dataclasses import replace

        return PassResult(replace(ir, name=ir.name + "-renamed"), False)


def test_modified_is_what_the_ir_says_not_what_the_pass_claims():
    """`plan` prints "no change" for a pass whose IR is equal to its input, whatever it claims."""
    pipeline = Pipeline([ClaimsWork(), Renames()])
    ir = pipeline.run(compiled())
    (_, claims), (_, renames) = pipeline.results
    assert claims.modified is False and claims.changes == ()
    assert renames.modified is True and ir.name.endswith("-renamed")
