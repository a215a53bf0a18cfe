"""A hub source as the rest of mtpc sees a source: `describe`, `fetch`, `open_weights`, `fingerprint`.

An `hf` repo is read by the HF reader through its `HubCheckpoint` (hf/checkpoint.py): config.json and the
other small files from the cache, shard headers by range request. A `gguf` repo's file (named, or chosen by
its quant tag as llama.cpp chooses it, `gguf_choice.py`) is described from its header alone, read by range
request unless the cache holds the file. `fetch` downloads what compile reads (the shards the model needs
and the tokenizer files; the GGUF file); `open_weights` then reads them from the cache like any local
checkpoint.

The model card's `base_model` is the repo (the source the package was made from), whatever the checkpoint
says about itself; `fingerprint` is provenance.json's `source`: the repo, the revision asked, the commit it
resolved to, and each file compile reads with its size and the hub's hash of it (its ETag: the sha256 of a
large file, the git blob id of a small one), all from the listing, so the metadata verbs, a first compile
and an offline one record the same bytes.
"""

from __future__ import annotations

from dataclasses import replace

from ...ir import HubRef, SourceRef
from ...util.diagnostics import SourceError
from ...weights import TensorInfo, described_info
from ..info import SourceInfo
from .gguf_choice import chosen_file, is_model_file
from .snapshot import Snapshot, resolve

DEFAULT_REVISION = "main"  # huggingface_hub's constants.DEFAULT_REVISION: what no revision means

_gguf_headers: dict[tuple[str, str], object] = {}


def gguf_file(ref: SourceRef) -> tuple[Snapshot, str]:
    """The snapshot and the GGUF file `ref` names (its `file`, or the one its quant tag chooses)."""
    assert ref.hub is not None
    snapshot = resolve(ref.hub)
    if ref.hub.file is not None:
        if not snapshot.has(ref.hub.file):
            raise SourceError(f"{snapshot.shown}: the repo has no file {ref.hub.file!r}")
        return snapshot, ref.hub.file
    return snapshot, chosen_file(snapshot.shown, snapshot.files, ref.hub.quant)


def file_of(ref: SourceRef) -> str | None:
    """The GGUF file a `gguf` hub ref reads (None for an `hf` one: it reads many)."""
    return gguf_file(ref)[1] if ref.kind == "gguf" else None


def repo_kind(hub: HubRef) -> str:
    """"hf" for a repo of config.json and safetensors, "gguf" for one of GGUF files (`inspect owner/name`)."""
    snapshot = resolve(hub)
    if snapshot.has("config.json") and (snapshot.has("model.safetensors.index.json") or snapshot.has("model.safetensors")):
        return "hf"
    if any(is_model_file(p) for p in snapshot.files):
        return "gguf"
    raise SourceError(f"{snapshot.shown}: the repo holds neither a Hugging Face checkpoint (config.json and "
                      "model.safetensors or its index) nor a GGUF file")


def local_ref(ref: SourceRef) -> SourceRef | None:
    """A `gguf` hub ref as the local file the cache holds, or None before it is downloaded."""
    snapshot, name = gguf_file(ref)
    path = snapshot.local(name)
    return None if path is None else SourceRef("gguf", path=str(path))


def describe(ref: SourceRef) -> SourceInfo:
    assert ref.hub is not None
    if ref.kind == "hf":
        from ..hf import reader

        info = reader.describe(ref)
    else:
        from ..gguf import reader

        local = local_ref(ref)
        if local is not None:
            info = reader.describe(local)
        else:
            snapshot, name = gguf_file(ref)
            key = (snapshot.commit, name)
            if key not in _gguf_headers:
                from .remote import gguf_header

                _gguf_headers[key] = gguf_header(snapshot, name, f"{snapshot.shown}/{name}")
            info = reader.describe_header(SourceRef("gguf", path=f"{snapshot.shown}/{name}"), _gguf_headers[key])
    card = dict(info.card)
    card["base_model"] = ref.hub.repo
    return replace(info, card=tuple(sorted(card.items())))


def files_to_fetch(ref: SourceRef, info: SourceInfo) -> list[str]:
    if ref.kind == "hf":
        from ..hf.reader import files_to_fetch as hf_files

        return hf_files(ref, info)
    return [gguf_file(ref)[1]]


def fetch(ref: SourceRef, info: SourceInfo, progress=lambda message: None) -> None:
    from .download import fetch as download

    assert ref.hub is not None
    download(resolve(ref.hub), files_to_fetch(ref, info), progress)


def open_weights(ref: SourceRef, info: SourceInfo) -> "DescribedStore":
    return DescribedStore(info, lambda: _opened(ref, info))


def _opened(ref: SourceRef, info: SourceInfo):
    """The checkpoint's own weight store over the cache's files, downloaded first if compile has not."""
    fetch(ref, info)
    if ref.kind == "hf":
        from ..hf import reader

        return reader.open_weights(ref, info)
    from ..gguf import reader

    local = local_ref(ref)
    assert local is not None
    return reader.open_weights(local, info)


class DescribedStore:
    """A hub source's weights: what its description knows (names, shapes, stored forms) is answered from the
    description, so `plan` and `diff`, which build graphs from shapes, download nothing; the checkpoint's own
    store is opened (its files downloaded, when compile has not already) on the first read of a weight."""

    def __init__(self, info: SourceInfo, open_store):
        self._tensors = {t.name: t for t in info.tensors}
        self._open = open_store
        self._store = None

    def names(self) -> list[str]:
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        return described_info(self._tensors[name])

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def __getattr__(self, attr: str):  # read, read_rows, read_float, read_experts, release, ...
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._store is None:
            self._store = self._open()
        return getattr(self._store, attr)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def fingerprint(ref: SourceRef, info: SourceInfo | None = None) -> dict:
    """provenance.json's `source` of a hub ref (see the module's docstring)."""
    assert ref.hub is not None
    snapshot = resolve(ref.hub)
    names = files_to_fetch(ref, info if info is not None else describe(ref))
    return {
        "kind": ref.kind,
        "hub": {"repo": ref.hub.repo, "revision": ref.hub.revision or DEFAULT_REVISION, "commit": snapshot.commit},
        "files": [{"name": n, "bytes": snapshot.files[n].size, "hub_etag": snapshot.files[n].etag} for n in sorted(names)],
    }
