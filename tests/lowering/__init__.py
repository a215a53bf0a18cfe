"""Test-only rewrites that let CUDA-only onnxruntime ops run on the CPU provider.

Nothing under `compiler/` imports this package: packages are never emitted with a lowering.
Each lowering is written from the op's published contract (onnxruntime's contrib-op schema)
and tested alone against a numpy implementation before the paged-graph tests rely on it.
"""
