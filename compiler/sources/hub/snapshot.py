"""A repo at one commit: its files as the hub lists them, and where the cache keeps the ones downloaded.

`resolve(hub)` turns the spec's `repo` and `revision` into a `Snapshot` the way huggingface_hub's own
`snapshot_download` does (huggingface_hub 2.5, _snapshot_download.py), so the cache is the one every tool
reads (`HF_HOME` / `HF_HUB_CACHE`, `models--OWNER--NAME/`):

- online, `HfApi.resolve_revision` asks the hub for the revision's commit (`GET /api/models/REPO/revision/REV`)
  and records it in `refs/REV`; the commit's file listing comes from the cache's `trees/COMMIT.json`, or from
  `HfApi.list_repo_tree` (`GET /api/models/REPO/tree/COMMIT?recursive=true`), which is then stored there;
- offline (`HF_HUB_OFFLINE=1`), no request at all: the commit from `refs/REV` (or the revision itself when it
  is a commit), the listing from `trees/COMMIT.json`; a cache without that listing (files put there by
  `hf_hub_download` alone) stands for the repo with the files its snapshot folder holds, and says so.

A commit never changes, so a snapshot is resolved once per run and repo (`diff SPEC SPEC` lowers two specs of
one repo, and `compile` reads it in lowering, for the weights and for provenance: one commit for all of them).
Each file's `etag` is the hub's ETag, which names its blob in the cache: the sha256 of an LFS file, the git
blob id of any other (hf_hub_url's docstring in file_download.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from ...ir import HubRef
from .errors import HubFailure, offline_lack, translated


@dataclass(frozen=True)
class HubFile:
    size: int
    etag: str
    lfs: bool


@dataclass(frozen=True)
class Snapshot:
    hub: HubRef
    commit: str
    files: Mapping[str, HubFile] = field(repr=False)
    storage: Path  # the repo's folder in the cache: models--OWNER--NAME
    offline: bool
    # The listing came from the hub or the cache's tree listing (False: from the snapshot folder, offline).
    listed: bool = True

    @property
    def folder(self) -> Path:
        return self.storage / "snapshots" / self.commit

    def local(self, name: str) -> Path | None:
        """Where the cache holds `name` of this commit, or None when it has not been downloaded."""
        path = self.folder / name
        return path if path.is_file() else None

    def has(self, name: str) -> bool:
        return name in self.files

    @property
    def shown(self) -> str:
        return f"{self.hub.repo}@{self.commit[:12]}"


_resolved: dict[tuple, Snapshot] = {}


def offline() -> bool:
    from huggingface_hub import constants

    return constants.is_offline_mode()


@contextmanager
def no_network() -> Iterator[None]:
    """huggingface_hub's offline mode within the block, whatever HF_HUB_OFFLINE says: its session refuses every
    request (`hf_request_event_hook`), so nothing in the block can reach a network (`check --offline`)."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def resolve(hub: HubRef) -> Snapshot:
    """The commit `hub.revision` names now, with its listing (see the module's docstring)."""
    from huggingface_hub import constants

    key = (hub.repo, hub.revision, constants.ENDPOINT, constants.HF_HUB_CACHE, offline())
    if key not in _resolved:
        _resolved[key] = _resolve(hub, Path(constants.HF_HUB_CACHE))
    return _resolved[key]


def _resolve(hub: HubRef, cache: Path) -> Snapshot:
    from huggingface_hub import HfApi
    from huggingface_hub._tree_cache import TreeCacheEntry, read_tree_cache, write_tree_cache
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.hf_api import RepoFile

    storage = cache / repo_folder_name(repo_id=hub.repo, repo_type="model")
    is_offline = offline()
    api = HfApi()
    with translated(hub, "cannot resolve its revision", resolving=True):
        commit = api.resolve_revision(hub.repo, revision=hub.revision, local_files_only=is_offline).resolved
    entries = read_tree_cache(str(storage), commit)
    listed = True
    if entries is None and not is_offline:
        with translated(hub, f"cannot list the files of commit {commit[:12]}"):
            entries = {
                f.path: TreeCacheEntry(size=f.size, blob_id=f.blob_id, lfs_sha256=f.lfs.sha256 if f.lfs else None,
                                       lfs_size=f.lfs.size if f.lfs else None, xet_hash=f.xet_hash)
                for f in api.list_repo_tree(hub.repo, recursive=True, revision=commit)
                if isinstance(f, RepoFile)
            }
        write_tree_cache(str(storage), commit, entries)
    if entries is not None:
        files = {path: HubFile(e.lfs_size if e.lfs_size is not None else e.size, e.lfs_sha256 or e.blob_id,
                               e.lfs_sha256 is not None) for path, e in sorted(entries.items())}
    else:
        files, listed = _cached_files(storage / "snapshots" / commit), False
        if not files:
            raise HubFailure(f"{hub.shown}: {offline_lack(hub, 'config.json')}", cache_lacks=True)
    return Snapshot(hub, commit, files, storage, is_offline, listed)


def _cached_files(folder: Path) -> dict[str, HubFile]:
    """The files a snapshot folder holds, each a link to its blob (named by its etag)."""
    found = {}
    if folder.is_dir():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            blob = path.resolve()
            found[path.relative_to(folder).as_posix()] = HubFile(blob.stat().st_size, blob.name, len(blob.name) == 64)
    return found
