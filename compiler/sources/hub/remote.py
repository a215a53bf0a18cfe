"""A file's first bytes from the hub, by HTTP range request: what the metadata verbs read instead of weights.

`inspect`, `plan`, `check SPEC` and `diff` of a hub spec need a safetensors shard's header (an 8-byte length,
then JSON) and a GGUF's header (its metadata and tensor table), never the tensors after them. huggingface_hub
reads safetensors headers this way itself (`HfApi.parse_safetensors_file_metadata`: a `Range: bytes=0-100000`
GET through its session, with its headers and `hf_raise_for_status`); these functions make the same requests
through the same session, sized to what each file holds: a shard's first request asks for about as many bytes
as its header has (the index says how many tensors it lists), and only a longer header costs a second one
for the rest, so the 27B-shaped checkpoint's twelve headers cost about their own size, not 100 kB each. A
GGUF header (a 248k-token vocabulary is megabytes of it) is read in growing pieces until it parses.
"""

from __future__ import annotations

from .errors import HubFailure, translated
from .snapshot import Snapshot

# Bytes per header entry to ask for up front (a real entry is 100-170: name, dtype, shape, offsets) and a margin.
_ENTRY_BYTES = 192
_MARGIN = 1024
_NO_INDEX_GUESS = 64 << 10
GGUF_FIRST_BYTES = 64 << 10


def read_range(snapshot: Snapshot, name: str, start: int, stop: int) -> bytes:
    """Bytes [start, stop) of `name` at the snapshot's commit (fewer at the end of the file)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    if stop <= start:
        return b""
    url = hf_hub_url(snapshot.hub.repo, name, revision=snapshot.commit)
    with translated(snapshot.hub, f"cannot read the header of {name}", file=name):
        response = get_session().get(url, headers={**build_hf_headers(), "range": f"bytes={start}-{stop - 1}"})
        hf_raise_for_status(response)
    data = response.content
    if response.status_code == 200:  # the server sent the whole file, ignoring the range
        data = data[start:stop]
    return data


def safetensors_header(snapshot: Snapshot, name: str, tensors: int | None) -> tuple[int, bytes]:
    """(header length, header JSON bytes) of a shard whose index lists `tensors` tensors (None: unknown)."""
    from ..hf.safetensors import header_length

    size = snapshot.files[name].size
    guess = 8 + (tensors * _ENTRY_BYTES + _MARGIN if tensors is not None else _NO_INDEX_GUESS)
    first = read_range(snapshot, name, 0, min(size, guess))
    if len(first) < 8:
        raise HubFailure(f"{snapshot.shown}: {name} is not a safetensors file (shorter than 8 bytes)")
    length = header_length(f"{snapshot.shown}/{name}", first[:8], size)
    body = first[8 : 8 + length]
    if len(body) < length:
        body += read_range(snapshot, name, 8 + len(body), 8 + length)
    if len(body) != length:
        raise HubFailure(f"{snapshot.shown}: {name}: the hub sent {len(body)} of its {length}-byte header")
    return length, body


def gguf_header(snapshot: Snapshot, name: str, path: str):
    """The `GGUFHeader` of a hub GGUF, from as few of its first bytes as hold the header: 64 KiB, then twice
    as much again until it parses (`NeedMore` says the header goes on past the bytes read)."""
    from ..gguf.header import GGUFHeader, NeedMore

    size = snapshot.files[name].size
    data = read_range(snapshot, name, 0, min(size, GGUF_FIRST_BYTES))
    while True:
        try:
            return GGUFHeader(path, prefix=data, file_size=size)
        except NeedMore:
            if len(data) >= size:
                raise
            data += read_range(snapshot, name, len(data), min(size, 2 * len(data)))
