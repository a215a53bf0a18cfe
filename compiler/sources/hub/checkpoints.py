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

A GGUF target's MTP head in a file of its own (`HubRef.head`, paired from the repo by `gguf_head.py`) is read
with it as beside a local target (`gguf/head_file.py`): described from the two headers, both downloaded by
`fetch`, both listed by `fingerprint`, and the head file's copies of the target's tensors compared once both are
local.
"""

from __future__ import annotations

from dataclasses import replace

from ...ir import HubRef, SourceRef
from ...util.diagnostics import SourceError
from ...weights import TensorInfo, described_info
from ..info import SourceInfo
from .gguf_choice import chosen_file, is_model_file
from .gguf_head import auto_pair, header_of, named, unread
from .snapshot import Snapshot, resolve

DEFAULT_REVISION = "main"  # huggingface_hub's constants.DEFAULT_REVISION: what no revision means


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


def with_head(ref: SourceRef, head: str | None, policy: str = "auto") -> tuple[SourceRef, tuple[str, ...]]:
    """A `gguf` hub target with its MTP head file (`gguf_head.py`): the file `head` names, none with `off`, else
    the repo's `mtp-` file that is its head (unless `policy`, `mtp.head`, is off); and notes on the choice."""
    assert ref.hub is not None
    snapshot, target = gguf_file(ref)
    if head == "off":
        return ref, unread(snapshot, target, ref.hub.quant)
    if head is not None:
        return replace(ref, hub=replace(ref.hub, head=named(snapshot, head))), ()
    if policy == "off":
        return ref, ()
    pairing = auto_pair(snapshot, target, ref.hub.quant)
    return replace(ref, hub=replace(ref.hub, head=pairing.head)), pairing.notes


def local_ref(ref: SourceRef) -> SourceRef | None:
    """A `gguf` hub ref as the local file(s) the cache holds, or None before they are downloaded."""
    assert ref.hub is not None
    snapshot, name = gguf_file(ref)
    path = snapshot.local(name)
    head = None if ref.hub.head is None else snapshot.local(ref.hub.head)
    if path is None or (ref.hub.head is not None and head is None):
        return None
    return SourceRef("gguf", path=str(path), head=None if head is None else str(head))


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
            info = _described_from_headers(ref)
    card = dict(info.card)
    card["base_model"] = ref.hub.repo
    return replace(info, card=tuple(sorted(card.items())))


def _described_from_headers(ref: SourceRef) -> SourceInfo:
    """A hub GGUF not (wholly) in the cache, from its header (and its head file's), read by range request. The
    head file's values are compared once both files are local (compile fetches them before it runs the checks)."""
    from ..gguf import reader
    from ..gguf.head_file import head_only_refusal, paired

    assert ref.hub is not None
    snapshot, name = gguf_file(ref)
    shown = f"{snapshot.shown}/{name}"
    header = header_of(snapshot, name)
    if ref.hub.head is None:
        refusal = head_only_refusal(shown, header)
        if refusal is not None:
            raise refusal
        return reader.describe_header(SourceRef("gguf", path=shown), header)
    pair = paired(header, header_of(snapshot, ref.hub.head))
    info = reader.describe_header(SourceRef("gguf", path=shown, head=f"{snapshot.shown}/{ref.hub.head}"), pair)
    return replace(info, weight_checks=lambda: _local_weight_checks(ref))


def _local_weight_checks(ref: SourceRef) -> None:
    from ..gguf import reader

    local = local_ref(ref)
    assert local is not None, "fetch downloads a hub target and its head file before their values are compared"
    checks = reader.describe(local).weight_checks
    if checks is not None:
        checks()


def files_to_fetch(ref: SourceRef, info: SourceInfo) -> list[str]:
    if ref.kind == "hf":
        from ..hf.reader import files_to_fetch as hf_files

        return hf_files(ref, info)
    assert ref.hub is not None
    return [gguf_file(ref)[1]] + ([ref.hub.head] if ref.hub.head is not None else [])


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
