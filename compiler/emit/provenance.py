"""`provenance.json`: where the package came from (see `mtpc.emit.provenance_record`).

The driver gathers the record (it reads the spec and fingerprints the source) into
`EmitContext.provenance`; this emitter only renders it. IR built without a spec
(tests, the Python API's in-memory builds) has none, and gets no file.
"""

from __future__ import annotations

from ..ir import ModelIR
from .provenance_record import PROVENANCE_NAME, SCHEMA, render
from .artifact import Artifact, EmitContext


def emit_provenance(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    if ctx.provenance is None:
        return []
    return [Artifact(PROVENANCE_NAME, render(ctx.provenance), schema=SCHEMA)]
