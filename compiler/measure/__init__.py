"""Running a package in onnxruntime-genai and measuring it: decoding speed, draft acceptance, step costs.

`speculation` times plain greedy and MTP speculative decoding of a package and records each
speculative round (drafts made, drafts accepted, its time), from which `acceptance` derives the
acceptance per draft position. `bench/mtp_speedup.py` is built on it; a verb that predicts
whether MTP pays on this machine measures the same way.
"""
