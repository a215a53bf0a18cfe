"""Tokenizer files of the package.

A source that ships tokenizer files (a Hugging Face checkpoint's own files, or
the `tokenizer.json` the GGUF source builds from `tokenizer.ggml.*`) has them
copied as they are. A synthetic source gets a tiny deterministic byte-level
BPE tokenizer over its vocabulary, so prompts can be encoded and decoded by
onnxruntime-genai 0.18.0 (whose built-in tokenizer reads `tokenizer.json` +
`tokenizer_config.json`, accepts BPE models and classes such as
`Qwen2Tokenizer`, and rejects WordLevel models).
"""

from __future__ import annotations

from ..ir import ModelIR
from ..sources.info import DeferredFiles
from ..sources.synthetic_tokenizer import synthetic_tokenizer_files
from .artifact import Artifact, EmitContext


def emit_tokenizer(ir: ModelIR, ctx: EmitContext) -> list[Artifact]:
    if isinstance(ctx.info.tokenizer, DeferredFiles):
        # Built from the source's metadata on first read (a second for a 248k-token vocabulary).
        info = ctx.info
        return [
            Artifact(relpath, chunks=lambda relpath=relpath: iter([dict(info.tokenizer_files)[relpath]]), deferred=True)
            for relpath in sorted(info.tokenizer.names)
        ]
    files = ctx.info.tokenizer_files
    if not files and ir.source.kind == "synthetic":
        files = synthetic_tokenizer_files(ir.architecture)
    return [Artifact(relpath, content) for relpath, content in sorted(files)]
