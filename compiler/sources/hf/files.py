"""The files of a Hugging Face checkpoint folder: which safetensors hold which tensors, their headers,
and the tokenizer files, read once per folder state.

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

import os
from pathlib import Path

from ...ir import SourceRef
from ...util.diagnostics import SourceError
from ..info import DeferredFiles, Files
from ..tokenizer_json import TOKENIZER_FILES, tokenizer_json_problem
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


def folder_state(directory: Path) -> tuple:
    """What identifies the folder's contents without reading them: every file's name, inode, size and mtime."""
    try:
        with os.scandir(directory) as found:
            files = []
            for entry in found:
                if entry.is_file():
                    st = entry.stat()
                    files.append((entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    except OSError as e:
        raise SourceError(f"{directory}: cannot read: {e.strerror}") from None
    return (os.path.realpath(directory), tuple(sorted(files)))


# The last folder whose weight files were read: (its state, the listing, the opened files).
_last_weights: tuple[tuple, Listed, dict[str, SafetensorsFile]] | None = None


def weight_files(directory: Path) -> tuple[Listed, dict[str, SafetensorsFile]]:
    """The tensors each safetensors file holds (from the index, or the single file's header) and the files,
    their headers parsed and checked; the same objects while the folder is unchanged."""
    global _last_weights
    state = folder_state(directory)
    if _last_weights is not None and _last_weights[0] == state:
        return _last_weights[1], _last_weights[2]
    # FP8 block weights (DeepSeek-V3) read as float32; their scales leave the listing, consumed.
    listed, opened = pair_block_scales(directory, *_listed_and_opened(directory))
    _last_weights = (state, listed, opened)
    return listed, opened


def _listed_and_opened(directory: Path) -> tuple[Listed, dict[str, SafetensorsFile]]:
    listed = _listed(directory)
    return listed, _open_files(directory, listed)


def _listed(directory: Path) -> Listed:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise SourceError(f"{index}: field weight_map is missing or empty")
        files: Listed = {}
        for name, filename in sorted(weight_map.items()):
            if not isinstance(filename, str) or "/" in filename or "\\" in filename:
                raise SourceError(f"{index}: weight_map entry {name!r} names no file in this directory")
            files.setdefault(filename, []).append(name)
        return files
    single = directory / "model.safetensors"
    if single.is_file():
        return {"model.safetensors": SafetensorsFile(single).names()}
    raise SourceError(f"{directory}: no model.safetensors or model.safetensors.index.json")


def _open_files(directory: Path, files: Listed) -> dict[str, SafetensorsFile]:
    opened = {}
    for filename, names in files.items():
        if not (directory / filename).is_file():
            raise SourceError(f"{directory / filename}: missing (listed in model.safetensors.index.json)")
        st = SafetensorsFile(directory / filename)
        for name in names:
            if name not in st:
                raise SourceError(f"{st.path}: has no tensor {name!r} (listed in model.safetensors.index.json)")
        opened[filename] = st
    return opened


def tokenizer_files(directory: Path) -> DeferredFiles | tuple[()]:
    """The tokenizer files the folder ships, named now, read and checked when first used."""
    names = tuple(name for name in TOKENIZER_FILES if (directory / name).is_file())
    return DeferredFiles(names, lambda: _read_tokenizer_files(directory, names)) if names else ()


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
