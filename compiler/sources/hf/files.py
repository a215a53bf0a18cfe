"""The files of a Hugging Face checkpoint (a folder, or a hub repo: `checkpoint.py`): which safetensors hold
which tensors, their headers, and the tokenizer files, read once per checkpoint state.

A 27B checkpoint is a dozen shards whose headers list a thousand tensors. `describe` (lowering),
`check` (`mtpc inspect`'s findings) and the weight store (`compile`) all need the parsed headers,
and `diff SPEC SPEC` lowers two specs of one folder: each parse is kept for the next reader while
the folder's files are unchanged (the same names, inodes, sizes and modification times), and a
folder rewritten in between is read afresh.

The tokenizer files are named at once but read and checked when the package's copy is made
(`DeferredFiles`): loading a 248k-token `tokenizer.json` in the `tokenizers` library takes most of
a second, which `check SPEC`, `plan` and `inspect` do not pay, as for a GGUF's vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ...ir import HubRef, SourceRef
from ...util.diagnostics import SourceError
from ..info import DeferredFiles, Files
from ..tokenizer_json import TOKENIZER_FILES, tokenizer_json_problem
from .checkpoint import Checkpoint, FolderCheckpoint, HubCheckpoint, folder_state  # noqa: F401  (folder_state re-exported)
from .config import read_json
from .fp8 import pair_block_scales
from .safetensors import SafetensorsFile

Listed = dict[str, list[str]]  # file name -> the HF tensor names it holds


def directory_of(ref: SourceRef) -> Path:
    if not ref.path:
        raise SourceError("hf source needs a path (a checkpoint directory with config.json)")
    path = Path(ref.path)
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if not path.is_dir():
        raise SourceError(f"{path}: not a checkpoint directory")
    return path


_hub_checkpoints: dict[HubRef, HubCheckpoint] = {}


def checkpoint_of(ref: SourceRef) -> Checkpoint:
    """The checkpoint `ref` names: its folder, or its hub repo at the commit its revision resolves to (once per
    run, so every reader of it sees one commit)."""
    if ref.hub is None:
        return FolderCheckpoint(directory_of(ref))
    if ref.hub not in _hub_checkpoints:
        _hub_checkpoints[ref.hub] = HubCheckpoint(ref.hub)
    return _hub_checkpoints[ref.hub]


# The last checkpoint whose weight files were read: (its state and what it drops, the listing, the opened files).
_last_weights: tuple[tuple, Listed, dict[str, SafetensorsFile]] | None = None


def weight_files(checkpoint: Checkpoint, dropped: Callable[[str], bool] = lambda name: False, drop_key: object = None
                 ) -> tuple[Listed, dict[str, SafetensorsFile]]:
    """The tensors each safetensors file holds (from the index, or the single file's header) and the files,
    their headers parsed and checked; the same objects while the checkpoint is unchanged.

    `dropped(name)`: a tensor the model does not read (a vision tower's; `drop_key` names the rule). A shard
    holding nothing else is left out when it is not on this machine: a hub repo's is never downloaded, and a
    folder may lack it."""
    global _last_weights
    key = (checkpoint.state(), drop_key)
    if _last_weights is not None and _last_weights[0] == key:
        return _last_weights[1], _last_weights[2]
    listed = needed_files(checkpoint, dropped)
    # FP8 block weights (DeepSeek-V3) read as float32; their scales leave the listing, consumed.
    listed, opened = pair_block_scales(checkpoint.folder, listed, _open_files(checkpoint, listed))
    _last_weights = (key, listed, opened)
    return listed, opened


def needed_files(checkpoint: Checkpoint, dropped: Callable[[str], bool] = lambda name: False) -> Listed:
    """The index's listing without the shards that hold only dropped tensors and are not on this machine."""
    listed = _listed(checkpoint)
    return {f: names for f, names in listed.items() if checkpoint.is_local(f) or not all(map(dropped, names))}


def _listed(checkpoint: Checkpoint) -> Listed:
    index = checkpoint.folder / "model.safetensors.index.json"
    if checkpoint.has(index.name):
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise SourceError(f"{index}: field weight_map is missing or empty")
        # 92k names for DeepSeek-V3: grouped first, each file name then checked once
        grouped: dict = {}
        unnamed = []  # names whose value cannot be a key (a list or mapping where a file name belongs)
        for name, filename in weight_map.items():
            try:
                grouped.setdefault(filename, []).append(name)
            except TypeError:
                unnamed.append(name)
        unnamed += [n for f, names in grouped.items() if not isinstance(f, str) or "/" in f or "\\" in f for n in names]
        if unnamed:
            raise SourceError(f"{index}: weight_map entry {min(unnamed)!r} names no file in this directory")
        for names in grouped.values():
            names.sort()
        return dict(sorted(grouped.items()))
    if checkpoint.has("model.safetensors"):
        return {"model.safetensors": checkpoint.open("model.safetensors").names()}
    raise SourceError(f"{checkpoint.label}: no model.safetensors or model.safetensors.index.json")


def _open_files(checkpoint: Checkpoint, files: Listed) -> dict[str, SafetensorsFile]:
    opened = {}
    for filename, names in files.items():
        if not checkpoint.has(filename):
            raise SourceError(f"{checkpoint.folder / filename}: missing (listed in model.safetensors.index.json)")
        st = checkpoint.open(filename, len(names))
        held = st.entries
        missing = [name for name in names if name not in held]
        if missing:
            raise SourceError(f"{st.path}: has no tensor {missing[0]!r} (listed in model.safetensors.index.json)")
        opened[filename] = st
    return opened


def tokenizer_files(checkpoint: Checkpoint) -> DeferredFiles | tuple[()]:
    """The tokenizer files the checkpoint ships, named now, read and checked when first used (a hub repo's
    downloaded then, if compile has not already)."""
    names = tuple(name for name in TOKENIZER_FILES if checkpoint.has(name))

    def read() -> Files:
        checkpoint.fetch(names)
        return _read_tokenizer_files(checkpoint.folder, names)

    return DeferredFiles(names, read) if names else ()


def _read_tokenizer_files(directory: Path, names: tuple[str, ...]) -> Files:
    """The files' bytes, each JSON one parsed (and tokenizer.json loaded) before it may be copied."""
    found = []
    for name in names:
        path = directory / name
        try:
            data = path.read_bytes()
        except OSError as e:
            raise SourceError(f"{path}: cannot read: {e.strerror}") from None
        if name == "tokenizer.json":
            problem = tokenizer_json_problem(data)
            if problem is not None:
                raise SourceError(f"{path}: {problem}")
        elif name.endswith(".json"):
            read_json(path)  # a SourceError naming the file when it is not a JSON object
        found.append((name, data))
    return tuple(found)
