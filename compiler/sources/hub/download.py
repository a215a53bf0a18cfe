"""Downloading a snapshot's files into the cache: only those asked for, with one progress bar, resumable.

Small files go through `hf_hub_download` (pinned to the commit, so a file already in the cache costs no
request). A large (LFS) file is downloaded here instead, because huggingface_hub 2.5 throws a partial
download away: `_download_to_tmp_and_move` writes to a temporary file of its own and deletes it on any
failure, so a 50 GB shard cut at 49 GB would start again from zero (and its `http_get` hands the file 10 MiB
chunks, so even its in-run retry loses what had arrived of the last one). Its bytes go to
`blobs/ETAG.incomplete` (the name huggingface_hub itself kept partial downloads under until 2.x), written as
they arrive, through huggingface_hub's own `get_hf_file_metadata` (HEAD: ETag, size, where the bytes are) and
its session, headers and errors, asking for `Range: bytes=N-` after the N bytes already there; whatever stops
the download (the network, the hub, Ctrl-C) leaves the partial blob, and the next run resumes it (a dropped
connection is also tried again at once, within the run). The finished blob is renamed into place and
`hf_hub_download` then links it into the snapshot as it links any blob it finds (one HEAD, no data).

The progress bar (util/progress.py's, as the weights' write has) counts the bytes still to download: a
resumed file counts only its rest, a cached one nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlsplit

from ...util.progress import human_size
from .errors import HubFailure, offline_lack, translated
from .snapshot import Snapshot

Progress = Callable[[str], None]


def fetch(snapshot: Snapshot, names: Iterable[str], progress: Progress = lambda message: None) -> None:
    """Make sure the cache holds `names` of the snapshot's commit; a `HubFailure` names what is missing
    when the hub cannot be asked (offline) or refuses."""
    missing = [n for n in dict.fromkeys(names) if snapshot.local(n) is None]
    if not missing:
        return
    if snapshot.offline:
        raise HubFailure(f"{snapshot.shown}: {offline_lack(snapshot.hub, missing[0])}"
                         + (f" (and {len(missing) - 1} more file{'s' if len(missing) > 2 else ''})" if len(missing) > 1 else ""),
                         cache_lacks=True)
    total = sum(_remaining(snapshot, n) for n in missing)
    progress(f"downloading {len(missing)} file{'s' if len(missing) != 1 else ''} of {snapshot.shown} "
             f"({human_size(total)})")
    make_bar = getattr(progress, "weights", None)
    bar = make_bar(total, "downloading") if make_bar is not None else None
    finished = False
    try:
        for name in missing:
            if bar is not None:
                bar.file_started(name)
            if snapshot.files[name].lfs:
                _large(snapshot, name, bar)
            else:
                _small(snapshot, name, bar)
        finished = True
    finally:
        if bar is not None:
            bar.close(finished)


def _blob(snapshot: Snapshot, name: str) -> Path:
    return snapshot.storage / "blobs" / snapshot.files[name].etag


def _partial(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


def _remaining(snapshot: Snapshot, name: str) -> int:
    size = snapshot.files[name].size
    partial = _partial(_blob(snapshot, name))
    done = partial.stat().st_size if partial.is_file() else 0
    return size - done if 0 < done <= size else size


def _small(snapshot: Snapshot, name: str, bar) -> None:
    from huggingface_hub import hf_hub_download

    with translated(snapshot.hub, f"cannot download {name}", file=name):
        hf_hub_download(snapshot.hub.repo, name, revision=snapshot.commit, tqdm_class=_bar_class(bar))


def _large(snapshot: Snapshot, name: str, bar) -> None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils import WeakFileLock

    hub = snapshot.hub
    with translated(hub, f"cannot download {name}", file=name):
        meta = get_hf_file_metadata(hf_hub_url(hub.repo, name, revision=snapshot.commit))
    if meta.etag is None or meta.location is None or meta.size is None:
        raise HubFailure(f"{snapshot.shown}: the hub's answer for {name} has no ETag, size or location")
    blob = snapshot.storage / "blobs" / meta.etag
    partial = _partial(blob)
    lock = snapshot.storage.parent / ".locks" / snapshot.storage.name / f"{meta.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    blob.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(str(lock)):
        if not blob.is_file():
            try:
                _resume(partial, meta.location, meta.size, bar, same_host=_same_host(meta.location, hub, name))
            except Exception as error:  # noqa: BLE001  (worded by `translated`, the partial file named)
                kept = partial.stat().st_size if partial.is_file() else 0
                with translated(hub, f"the download of {name} stopped after {human_size(kept)} of "
                                f"{human_size(meta.size)} (kept in the cache; the next run resumes it)", file=name):
                    raise error from None
            os.replace(partial, blob)
    with translated(hub, f"cannot link {name} into the cache's snapshot", file=name):
        hf_hub_download(hub.repo, name, revision=snapshot.commit)


# Attempts in a row that may fail before any new byte arrives, within one run (a dropped connection is tried
# again at once, from where it stopped); past that the run stops, and the next resumes.
_ATTEMPTS = 3


def _resume(partial: Path, url: str, size: int, bar, *, same_host: bool) -> None:
    """Append the rest of the file at `url` to `partial`, each piece written as it arrives (huggingface_hub's
    `http_get` hands its file 10 MiB chunks, so a cut loses up to 10 MiB: here it loses nothing)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    import httpx2

    headers = build_hf_headers()
    if not same_host:
        headers.pop("authorization", None)  # a signed CDN address: the token stays with the hub
    failures = 0
    while True:
        done = partial.stat().st_size if partial.is_file() else 0
        if done > size:  # not a prefix of this file: start over
            partial.unlink()
            done = 0
        if done == size:
            return
        before = done
        try:
            wanted = {**headers, "Range": f"bytes={done}-"} if done else headers
            with get_session().stream("GET", url, headers=wanted, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
                hf_raise_for_status(response)
                with open(partial, "ab" if response.status_code == 206 else "wb") as out:
                    for piece in response.iter_raw():
                        out.write(piece)
                        if bar is not None:
                            bar.advance(len(piece))
        except (httpx2.TransportError, ConnectionError):
            now = partial.stat().st_size if partial.is_file() else 0
            failures = 0 if now > before else failures + 1
            if failures >= _ATTEMPTS:
                raise
            continue
        now = partial.stat().st_size
        if now != size:
            raise HubFailure(f"the hub sent {now} of the file's {size} bytes and then said it was done")


def _same_host(location: str, hub, name: str) -> bool:
    from huggingface_hub import hf_hub_url

    return urlsplit(location).netloc == urlsplit(hf_hub_url(hub.repo, name)).netloc


def _bar_class(bar):
    """A class huggingface_hub's `http_get` makes its progress bar of (`tqdm_class`): each chunk it writes
    advances mtpc's one bar, and it draws nothing of its own."""

    class Forwarding:
        def __init__(self, *args, initial: int = 0, **kwargs):
            self.n = initial

        def update(self, n: int = 1) -> None:
            self.n += n
            if bar is not None and n > 0:
                bar.advance(n)

        def close(self) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

    return Forwarding
