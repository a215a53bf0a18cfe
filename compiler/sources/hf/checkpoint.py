"""Where a Hugging Face checkpoint's files are: a folder beside the spec, or a repo on the hub.

The reader (`reader.py`, `files.py`) asks a `Checkpoint` which files it has, opens its safetensors headers
through it and reads its small JSON files from `folder`. A `FolderCheckpoint` is a folder as it is. A
`HubCheckpoint` is one commit of a hub repo (`sources/hub/`): it lists the repo's files, keeps the small
ones the description reads in the cache's snapshot folder (config.json, generation_config.json, the
safetensors index, README.md: kilobytes), reads a shard's header from the cache when the shard is there and
by range request when it is not (`hub/remote.py`), and downloads what compile reads (`fetch`). So the
metadata verbs never download a weight, and compile downloads only the shards the model needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

from ...ir import HubRef
from ...util.diagnostics import SourceError
from .safetensors import SafetensorsFile

Progress = Callable[[str], None]

# The small files a description reads, downloaded whenever a hub repo is described (those it has).
METADATA_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json", "README.md")


class Checkpoint:
    folder: Path

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds `name` (on the hub: whether the repo does, downloaded or not)."""
        raise NotImplementedError

    def is_local(self, name: str) -> bool:
        """Whether `name` is on this machine (for a folder: whether it is in it)."""
        return (self.folder / name).is_file()

    def state(self) -> tuple:
        """What identifies its files' contents without reading them (the parse caches' key)."""
        raise NotImplementedError

    def open(self, name: str, tensors: int | None = None) -> SafetensorsFile:
        """A safetensors file's parsed header (`tensors`: how many the index lists in it, a size hint)."""
        raise NotImplementedError

    def fetch(self, names: Iterable[str], progress: Progress = lambda message: None) -> None:
        """Make `names` local (a folder's are)."""

    @property
    def label(self) -> str:
        return str(self.folder)


class FolderCheckpoint(Checkpoint):
    def __init__(self, folder: Path):
        self.folder = folder

    def has(self, name: str) -> bool:
        return self.is_local(name)

    def state(self) -> tuple:
        return folder_state(self.folder)

    def open(self, name: str, tensors: int | None = None) -> SafetensorsFile:
        return SafetensorsFile(self.folder / name)


class HubCheckpoint(Checkpoint):
    def __init__(self, hub: HubRef):
        from ..hub.download import fetch
        from ..hub.snapshot import resolve

        self.snapshot = snapshot = resolve(hub)
        self.folder = snapshot.folder
        fetch(snapshot, [n for n in METADATA_FILES if snapshot.has(n)])
        self._headers: dict[str, SafetensorsFile] = {}

    def has(self, name: str) -> bool:
        return self.snapshot.has(name)

    def state(self) -> tuple:
        folder = folder_state(self.folder) if self.folder.is_dir() else ()
        return ("hub", self.snapshot.hub.repo, self.snapshot.commit, folder)

    def open(self, name: str, tensors: int | None = None) -> SafetensorsFile:
        local = self.snapshot.local(name)
        if local is not None:
            return SafetensorsFile(local)
        if name not in self._headers:
            from ..hub.download import fetch
            from ..hub.remote import safetensors_header

            if self.snapshot.offline:
                fetch(self.snapshot, [name])  # raises: the cache lacks it and the hub may not be asked
            header = safetensors_header(self.snapshot, name, tensors)
            # named as the hub holds it: it is not on this machine (compile downloads it before reading)
            self._headers[name] = SafetensorsFile(f"{self.snapshot.shown}/{name}", header=header,
                                                  file_size=self.snapshot.files[name].size)
        return self._headers[name]

    def fetch(self, names: Iterable[str], progress: Progress = lambda message: None) -> None:
        from ..hub.download import fetch

        fetch(self.snapshot, names, progress)

    @property
    def label(self) -> str:
        return self.snapshot.shown


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
