"""Hugging Face checkpoint folders: `config.json` into the architecture (`config`), safetensors read
lazily and memory-mapped (`safetensors`), expert stacks fused or per expert (`experts`), and the reader
with its weight store (`reader`).

May import: `util`, `ir`, `weights`, and the rest of `sources`.
"""
