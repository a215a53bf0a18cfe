"""`mtpc diff`'s engine: path-addressed, sorted changes between trees (`changes`), whole packages
compared file by file (`files`), ONNX graphs summarized by meaning without their weights
(`onnx_summary`), provenance records compared line by line (`provenance`), repeated changes grouped
(`groups`), a severity per file (`report`) and the text / Markdown rendering (`render`).

May import: `util`, `schema`, `emit` (the provenance record's format).
"""
