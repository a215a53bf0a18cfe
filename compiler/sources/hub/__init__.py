"""Checkpoints on the Hugging Face Hub, through huggingface_hub (the library every tool of the field uses).

`hf: owner/name` and `gguf: owner/name[:QUANT]` / `gguf: {repo, file}` with an optional `revision` name a
repo (`ids.py`); `snapshot.py` resolves the revision to a commit and lists its files, honouring the cache
layout and huggingface_hub's environment (`HF_HOME`, `HF_HUB_CACHE`, `HF_TOKEN`, `HF_HUB_OFFLINE`,
`HF_ENDPOINT`); `remote.py` reads the headers the metadata verbs need by range request; `download.py`
downloads what compile reads, resumably, with a progress bar; `gguf_choice.py` picks a GGUF file by its quant
tag as llama.cpp does; `checkpoints.py` is the source interface over all of it; `errors.py` says what went
wrong. huggingface_hub is imported only when a hub source is used.
"""
