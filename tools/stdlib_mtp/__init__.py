"""A small Qwen3.5 with its MTP head, trained here on the CPython standard library's source.

`python -m tools.stdlib_mtp.train OUT` regenerates the checkpoint committed under
`models/qwen35-stdlib-mtp/`; see that folder's README for what it is and what it measures.
"""
